#include "device/src/daemon/sink_worker.h"

#include "device/src/sync/futex.h"

namespace sinkrt::device {

SinkWorker::SinkWorker(std::chrono::microseconds poll) : poll_(poll), thread_([this] { Loop(); }) {}

SinkWorker::~SinkWorker() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    quit_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void SinkWorker::Post(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    task_ = std::move(task);
    posted_.store(true, std::memory_order_release);
  }
  cv_.notify_all();
}

void SinkWorker::Loop() {
  for (;;) {
    // Poll first (no lock: the flag), yielding, since on 2 cores the
    // connection thread that posts may need this core; then sleep.
    SpinThenYield([this] { return posted_.load(std::memory_order_acquire); }, PollBudget{{}, poll_});
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return quit_ || task_; });
      if (!task_) return;
      task = std::move(task_);
      task_ = nullptr;
      posted_.store(false, std::memory_order_relaxed);
    }
    task();
  }
}

}  // namespace sinkrt::device
