// SinkWorker: the one thread that runs every sink of a daemon.
//
// Kernels run on the calling thread's OpenMP team, and libgomp keeps a team
// per thread that starts parallel regions: one long-lived sink thread means
// the team is created once per daemon, not once per job (memory stays flat
// over many jobs) and a job's first sink pays no thread start-up.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace sinkrt::device {

class SinkWorker {
 public:
  // `poll`: how long the thread polls for a next task after each one.
  explicit SinkWorker(std::chrono::microseconds poll = std::chrono::microseconds(200));
  ~SinkWorker();  // finishes the task in hand, then joins

  // Runs `task` on the worker thread. One task at a time: the caller (the
  // session owning the device) posts again only after the last one finished.
  void Post(std::function<void()> task);

 private:
  void Loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::function<void()> task_;
  std::atomic<bool> posted_{false};  // task_ is set: what the poll reads
  bool quit_ = false;
  const std::chrono::microseconds poll_;
  std::thread thread_;
};

}  // namespace sinkrt::device
