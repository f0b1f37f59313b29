// Feeder: pushes batches of a SyntheticData set into a device queue from its
// own thread, as the dataset pipeline does, so a sink of N steps can run
// while the queue (capacity 16) is refilled behind it.
#pragma once

#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "sinkrt/runtime/device_link.h"
#include "support/test_models.h"

namespace sinkrt::testing {

// Pushes batches first_batch .. first_batch + count - 1 (wrapping around
// the data set) of `batch` rows each into `queue`, on this thread; the
// first error stops it.
inline Status PushBatches(DeviceLink& device, uint32_t queue, const SyntheticData& data, int64_t batch,
                          int64_t first_batch, int64_t count) {
  const int64_t n_batches = data.size() / batch;
  const size_t image_bytes = static_cast<size_t>(batch * data.features) * sizeof(float);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t b = (first_batch + i) % n_batches;
    ConstBytes cols[2] = {
        ConstBytes(reinterpret_cast<const uint8_t*>(data.images.data() + b * batch * data.features), image_bytes),
        ConstBytes(reinterpret_cast<const uint8_t*>(data.labels.data() + b * batch),
                   static_cast<size_t>(batch) * sizeof(int32_t))};
    SINKRT_RETURN_IF_ERROR(device.PushBatch(queue, cols));
  }
  return Status::Ok();
}

class Feeder {
 public:
  // PushBatches on a thread of its own.
  Feeder(DeviceLink& device, uint32_t queue, const SyntheticData& data, int64_t batch, int64_t first_batch,
         int64_t count)
      : thread_([&device, queue, &data, batch, first_batch, count, this] {
          status_ = PushBatches(device, queue, data, batch, first_batch, count);
        }) {}
  ~Feeder() { (void)Join(); }

  Status Join() {
    if (thread_.joinable()) thread_.join();
    return status_;
  }

 private:
  Status status_;
  std::thread thread_;
};

}  // namespace sinkrt::testing
