// The iterator: worker threads build whole batches, in any order among
// themselves, into a ring of `prefetch` slots; the consumer takes them out
// in batch order. Batch g lives in slot g % prefetch, and a worker claims g
// only once g < position + prefetch, so the slot is free and no two threads
// ever touch one slot's row at the same time: the mutex guards the
// bookkeeping, never the batch contents.
//
// Output depends only on the global batch index (see pass_order.h), so
// the worker count and prefetch change timing, not data.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "host/src/dataset/batch_builder.h"
#include "host/src/dataset/node.h"
#include "host/src/dataset/pass_order.h"

namespace sinkrt::host {
namespace {

using Node = Dataset::Node;

class PipelineIterator final : public BatchIterator {
 public:
  // `order_root`: the node whose passes the batches are drawn from; units:
  // its units per pass. `dataset_size` is what get_dataset_size() reports,
  // for error messages only.
  PipelineIterator(SamplePlan plan, const Node* order_root, int64_t dataset_size, const IteratorOptions& options)
      : plan_(std::move(plan)),
        order_root_(order_root),
        units_(order_root->units),
        dataset_size_(dataset_size),
        slots_(options.prefetch),
        next_claim_(options.start_batch),
        position_(options.start_batch) {}

  ~PipelineIterator() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    free_cv_.notify_all();
    for (std::thread& t : workers_) t.join();
  }

  Status Start(int num_workers) {
    try {
      for (int i = 0; i < num_workers; ++i) workers_.emplace_back([this] { Work(); });
    } catch (const std::system_error& e) {
      // The destructor stops and joins the workers that did start.
      return ResourceExhausted(std::string("Dataset iterator: cannot start worker thread ") +
                               std::to_string(workers_.size()) + " of " + std::to_string(num_workers) + ": " +
                               e.what());
    }
    return Status::Ok();
  }

  Status Next(Row* batch) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (!failed_.ok()) return failed_;
    const int64_t g = position_.load(std::memory_order_relaxed);
    Slot& slot = slots_[g % slots_.size()];
    ready_cv_.wait(lock, [&] { return slot.ready; });
    if (!slot.status.ok()) {
      failed_ = slot.status.WithContext(
          "Dataset iterator, batch " + std::to_string(g) + " (pass " + std::to_string(g / dataset_size_) + ", batch " +
          std::to_string(g % dataset_size_) + " of " + std::to_string(dataset_size_) + ")");
      return failed_;
    }
    std::swap(*batch, slot.row);  // the caller's old tensors become this slot's storage
    slot.ready = false;
    position_.store(g + 1, std::memory_order_relaxed);
    // Claims never go below the position, so earlier passes are done with.
    const int64_t pass = (g + 1) / units_;
    orders_.erase(orders_.begin(), orders_.lower_bound(pass));
    lock.unlock();
    free_cv_.notify_one();
    return Status::Ok();
  }

  int64_t position() const override { return position_.load(std::memory_order_relaxed); }

 private:
  struct Slot {
    bool ready = false;  // built and not yet taken
    Status status;
    Row row;
  };

  void Work() {
    BatchBuilder builder(plan_);
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      const int64_t ring = static_cast<int64_t>(slots_.size());
      free_cv_.wait(lock, [&] { return stop_ || halted_ || next_claim_ < position_.load() + ring; });
      if (stop_ || halted_) return;
      const int64_t g = next_claim_++;
      std::shared_ptr<const PassOrder> order = OrderFor(g / units_);
      lock.unlock();

      Slot& slot = slots_[g % ring];
      Status s = builder.Build(order->unit(g % units_), &slot.row);

      lock.lock();
      slot.status = std::move(s);
      slot.ready = true;
      // Batches after a failed one are never delivered: stop building.
      if (!slot.status.ok()) halted_ = true;
      ready_cv_.notify_one();
    }
  }

  // Computed once per pass, under the lock: it costs about a millisecond per
  // 100k samples, against the hundreds of milliseconds a pass takes to build.
  std::shared_ptr<const PassOrder> OrderFor(int64_t pass) {
    auto it = orders_.find(pass);
    if (it != orders_.end()) return it->second;
    auto order = std::make_shared<const PassOrder>(ComputePassOrder(*order_root_, pass));
    orders_.emplace(pass, order);
    return order;
  }

  const SamplePlan plan_;
  const Node* const order_root_;
  const int64_t units_;
  const int64_t dataset_size_;

  std::mutex mu_;
  std::condition_variable ready_cv_;  // the consumer waits for its slot
  std::condition_variable free_cv_;   // workers wait for a claimable batch
  std::vector<Slot> slots_;
  std::map<int64_t, std::shared_ptr<const PassOrder>> orders_;
  int64_t next_claim_;
  std::atomic<int64_t> position_;  // written under mu_; read without it by position()
  bool stop_ = false;
  bool halted_ = false;
  Status failed_;
  std::vector<std::thread> workers_;
};

int DefaultWorkers() {
  const unsigned cores = std::thread::hardware_concurrency();
  return static_cast<int>(std::clamp(cores, 1u, 4u));
}

}  // namespace

Result<std::unique_ptr<BatchIterator>> Dataset::Iterate(IteratorOptions options) const {
  return IterateDataset(*this, options, /*fuse=*/true);
}

Result<std::unique_ptr<BatchIterator>> IterateDataset(const Dataset& dataset, IteratorOptions options, bool fuse) {
  SINKRT_RETURN_IF_ERROR(dataset.status());
  const std::shared_ptr<const Node>& node = DatasetAccess::node(dataset);
  if (options.start_batch < 0 || options.num_workers < 0 || options.prefetch < 1)
    return InvalidArgument("Dataset::Iterate: need start_batch >= 0, num_workers >= 0 and prefetch >= 1, got " +
                           std::to_string(options.start_batch) + ", " + std::to_string(options.num_workers) + " and " +
                           std::to_string(options.prefetch));
  if (node->units == 0)
    return FailedPrecondition("There is no valid data in dataset, please check dataset file firstly. (a pass has no " +
                              std::string(node->batch_size > 0 ? "batches" : "samples") + ")");
  // Repeat at the top only relabels passes: batch g of Repeat(c) over X is
  // batch g of X's endless sequence. Iterating X directly keeps each pass
  // order one upstream pass long instead of c of them.
  const Node* order_root = node.get();
  while (order_root->kind == Node::Kind::Repeat) order_root = order_root->up.get();

  const int workers = options.num_workers > 0 ? options.num_workers : DefaultWorkers();
  auto it = std::make_unique<PipelineIterator>(MakeSamplePlan(node, fuse), order_root, node->units, options);
  SINKRT_RETURN_IF_ERROR(it->Start(workers));
  return std::unique_ptr<BatchIterator>(std::move(it));
}

}  // namespace sinkrt::host
