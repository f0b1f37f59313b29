#include "device/src/data_queue.h"

#include <algorithm>
#include <cstring>

#include "device/src/kernels/parallel_range.h"

#include "runtime/src/schema_enums.h"
#include "sinkrt/runtime/dtype.h"

namespace sinkrt::device {
namespace {

// A column copy below this many bytes per part stays on one thread.
constexpr uint64_t kMinPartBytes = 128 << 10;

}  // namespace

Status DataQueue::Init(const fb::QueueSpec& spec, bool prefault) {
  name_ = spec.name() ? spec.name()->str() : "";
  capacity_ = spec.capacity();
  column_bytes_.clear();
  slot_bytes_ = 0;
  for (const fb::QueueColumn* c : *spec.columns()) {
    std::vector<int64_t> dims;
    if (c->shape()) dims.assign(c->shape()->begin(), c->shape()->end());
    uint64_t b = static_cast<uint64_t>(NumElements(dims)) * DTypeSize(c->dtype());
    column_bytes_.push_back(b);
    // Columns start 64-byte aligned inside a slot.
    slot_bytes_ += (b + 63) / 64 * 64;
  }
  SINKRT_ASSIGN_OR_RETURN(slots_, PageBlock::Allocate(slot_bytes_ * capacity_, prefault));
  return Status::Ok();
}

Status DataQueue::Push(std::span<const ConstBytes> columns, std::chrono::milliseconds timeout) {
  if (columns.size() != column_bytes_.size())
    return InvalidArgument("queue '" + name_ + "': batch has " + std::to_string(columns.size()) +
                           " columns, expected " + std::to_string(column_bytes_.size()));
  for (size_t c = 0; c < columns.size(); ++c)
    if (columns[c].size() != column_bytes_[c])
      return InvalidArgument("queue '" + name_ + "': column " + std::to_string(c) + " has " +
                             std::to_string(columns[c].size()) + " bytes, expected " +
                             std::to_string(column_bytes_[c]));
  std::lock_guard<std::mutex> producer(push_mu_);
  uint32_t slot;
  uint64_t generation;
  {
    std::unique_lock<std::mutex> lk(mu_);
    generation = generation_;
    if (!not_full_.wait_for(lk, timeout, [&] { return count_ < capacity_ || closed_ || generation_ != generation; }))
      return DeadlineExceeded("queue '" + name_ + "' stayed full for " + std::to_string(timeout.count()) +
                              " ms: the device is not consuming batches");
    if (closed_) return Aborted("queue '" + name_ + "' was closed");
    if (generation_ != generation) return Aborted("queue '" + name_ + "' was cleared");
    slot = tail_;
  }
  uint8_t* p = slots_.data() + slot * slot_bytes_;
  for (size_t c = 0; c < columns.size(); ++c) {
    std::memcpy(p, columns[c].data(), columns[c].size());
    p += (column_bytes_[c] + 63) / 64 * 64;
  }
  return Publish(generation);
}

Status DataQueue::FillNext(const std::function<Status(std::span<const std::span<uint8_t>> columns)>& fill) {
  std::lock_guard<std::mutex> producer(push_mu_);
  uint32_t slot;
  uint64_t generation;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (closed_) return Aborted("queue '" + name_ + "' was closed");
    if (count_ >= capacity_)
      return ResourceExhausted("queue '" + name_ + "' is full (" + std::to_string(capacity_) +
                               " slots): a batch was pushed without a free slot");
    slot = tail_;
    generation = generation_;
  }
  std::span<uint8_t> cols[16];
  std::vector<std::span<uint8_t>> many;
  std::span<uint8_t>* out = cols;
  if (column_bytes_.size() > 16) {
    many.resize(column_bytes_.size());
    out = many.data();
  }
  uint8_t* p = slots_.data() + slot * slot_bytes_;
  for (size_t c = 0; c < column_bytes_.size(); ++c) {
    out[c] = std::span<uint8_t>(p, column_bytes_[c]);
    p += (column_bytes_[c] + 63) / 64 * 64;
  }
  SINKRT_RETURN_IF_ERROR(fill(std::span<const std::span<uint8_t>>(out, column_bytes_.size())));
  return Publish(generation);
}

Status DataQueue::Publish(uint64_t generation) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    // Cleared while filling: the slot was never published, so dropping it
    // here leaves the queue exactly as Clear left it.
    if (generation_ != generation) return Aborted("queue '" + name_ + "' was cleared");
    tail_ = (tail_ + 1) % capacity_;
    ++count_;
    if (count_ > high_water_) high_water_ = count_;
  }
  not_empty_.notify_one();
  return Status::Ok();
}

Status DataQueue::Pop(std::span<uint8_t* const> dst, std::chrono::milliseconds timeout, int64_t* waited_ns,
                      WorkerTeam* team) {
  uint32_t slot;
  uint64_t generation;
  {
    std::unique_lock<std::mutex> lk(mu_);
    if (count_ == 0 && !closed_) {
      auto t0 = std::chrono::steady_clock::now();
      bool got = not_empty_.wait_for(lk, timeout, [&] { return count_ > 0 || closed_; });
      *waited_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
      if (!got)
        return DeadlineExceeded("GetNext timed out: queue '" + name_ + "' (depth " + std::to_string(capacity_) +
                                "; batches taken so far: " + std::to_string(popped_) + ") was empty for " +
                                std::to_string(timeout.count()) + " ms (the host sent no batch)");
    }
    if (count_ == 0) return Aborted("queue '" + name_ + "' was closed");
    slot = head_;
    generation = generation_;
  }
  const uint8_t* p = slots_.data() + slot * slot_bytes_;
  for (size_t c = 0; c < dst.size(); ++c) {
    const uint64_t bytes = column_bytes_[c];
    const int parts = team ? static_cast<int>(std::min<uint64_t>(team->size(), bytes / kMinPartBytes)) : 1;
    if (parts <= 1) {
      std::memcpy(dst[c], p, bytes);
    } else {
      team->Run(parts, [&](int part) {
        const int64_t begin = PartBegin(static_cast<int64_t>(bytes), parts, part, 64);
        const int64_t end = PartBegin(static_cast<int64_t>(bytes), parts, part + 1, 64);
        std::memcpy(dst[c] + begin, p + begin, end - begin);
      });
    }
    p += (bytes + 63) / 64 * 64;
  }
  bool freed = false;
  {
    std::lock_guard<std::mutex> lk(mu_);
    // Cleared while copying: Clear already freed (and counted) the slot.
    if (generation_ == generation) {
      head_ = (head_ + 1) % capacity_;
      --count_;
      ++popped_;
      freed = true;
    }
  }
  not_full_.notify_one();
  if (freed && on_freed_) on_freed_(1);
  return Status::Ok();
}

void DataQueue::Clear() {
  uint32_t dropped;
  {
    std::lock_guard<std::mutex> lk(mu_);
    dropped = count_;
    head_ = tail_;
    count_ = 0;
    ++generation_;
  }
  not_full_.notify_all();
  if (on_freed_ && dropped) on_freed_(dropped);
}

void DataQueue::Close() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    closed_ = true;
  }
  not_full_.notify_all();
  not_empty_.notify_all();
}

uint32_t DataQueue::size() const {
  std::lock_guard<std::mutex> lk(mu_);
  return count_;
}

uint32_t DataQueue::high_water_mark() const {
  std::lock_guard<std::mutex> lk(mu_);
  return high_water_;
}

}  // namespace sinkrt::device
