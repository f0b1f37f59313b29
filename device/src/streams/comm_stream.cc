#include "device/src/streams/comm_stream.h"

#include <omp.h>

namespace sinkrt::device {

CommStream::CommStream(LoadedJob& job) : job_(job), thread_([this] { Loop(); }) {}

CommStream::~CommStream() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    quit_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void CommStream::Start(PreparedProgram& prog, uint32_t step, uint32_t steps) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    prog_ = &prog;
    step_ = step;
    steps_ = steps;
    pending_ = true;
    done_ = false;
  }
  cv_.notify_all();
}

Status CommStream::Finish(StreamCounters* counters) {
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait(lk, [&] { return done_; });
  done_ = false;
  counters->comm_ns += counters_.comm_ns;
  counters->event_wait_ns += counters_.event_wait_ns;
  counters->compute_ns += counters_.compute_ns;
  counters->failed_task = counters_.failed_task;
  return result_;
}

void CommStream::Loop() {
  // Collectives reduce on this thread; any kernel placed on this stream runs
  // single-threaded rather than competing with the compute stream's team.
  omp_set_num_threads(1);
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    cv_.wait(lk, [&] { return pending_ || quit_; });
    if (!pending_) return;
    pending_ = false;
    PreparedProgram& prog = *prog_;
    uint32_t step = step_, steps = steps_;
    lk.unlock();
    StreamCounters counters;
    Status st = RunStreamStep(job_, prog, 1, step, steps, &counters);
    // The compute stream may be waiting on an event this stream will now
    // never record.
    if (!st.ok()) prog.events->Fail();
    lk.lock();
    counters_ = counters;
    result_ = st;
    done_ = true;
    cv_.notify_all();
  }
}

}  // namespace sinkrt::device
