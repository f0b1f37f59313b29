// What the Model tests that train on several in-process ranks share: a
// world of one-thread devices (a 60 s peer timeout, for 2-core CI under
// load) and a callback recording each step's loss.
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "sinkrt/device/in_process_device.h"
#include "sinkrt/host/callback.h"

namespace sinkrt::testing {

// Every step's loss (non-sink mode: one step per callback), and each rank's.
class LossRecorder : public host::Callback {
 public:
  std::vector<double> losses;
  std::vector<std::vector<double>> rank_losses;
  Status on_train_step_end(host::RunContext& c) override {
    losses.push_back(c.original_args().net_outputs);
    rank_losses.push_back(c.original_args().rank_losses);
    return Status::Ok();
  }
};

// One thread a device: N devices of a world share this machine's cores.
inline device::DeviceOptions OneThreadOptions() {
  device::DeviceOptions o = device::DeviceOptions::FromEnvironment();
  o.threads = 1;
  o.peer_timeout = std::chrono::seconds(60);
  return o;
}

struct InProcessWorld {
  std::vector<std::unique_ptr<device::InProcessDevice>> devices;
  std::vector<DeviceLink*> links;  // rank r's device
  explicit InProcessWorld(int n, const device::DeviceOptions& options = OneThreadOptions()) {
    for (int r = 0; r < n; ++r) {
      devices.push_back(std::make_unique<device::InProcessDevice>(options));
      links.push_back(devices.back().get());
    }
  }
};

}  // namespace sinkrt::testing
