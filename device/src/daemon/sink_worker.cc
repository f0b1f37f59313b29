#include "sink_worker.h"

namespace sinkrt::device {

SinkWorker::SinkWorker() : thread_([this] { Loop(); }) {}

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
  }
  cv_.notify_all();
}

void SinkWorker::Loop() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    cv_.wait(lk, [&] { return quit_ || task_; });
    if (!task_) return;
    std::function<void()> task = std::move(task_);
    task_ = nullptr;
    lk.unlock();
    task();
    lk.lock();
  }
}

}  // namespace sinkrt::device
