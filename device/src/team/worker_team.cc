#include "team/worker_team.h"

#include <omp.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <string>

#include "sync/futex.h"

namespace sinkrt::device {
namespace {

// Busy for 2 µs (a part that ends together with ours), then yielding the
// core between checks (a thread this core owes time to: the feeder, the
// comm stream, on a loaded machine the partner part itself).
PollBudget TeamPoll(int64_t spin_ns) {
  const std::chrono::nanoseconds total(spin_ns), busy = std::min(total, std::chrono::nanoseconds(2000));
  return PollBudget{busy, total - busy};
}

// Sleeps until *word != value (a futex wait re-armed on spurious returns).
void SleepWhile(std::atomic<uint32_t>& word, uint32_t value) {
  while (word.load(std::memory_order_seq_cst) == value) FutexWait(&word, value, std::chrono::seconds(1));
}

}  // namespace

bool PinToCore(int core) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(core, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
}

WorkerTeam::WorkerTeam(int size, int64_t spin_ns, std::vector<int> cores)
    : size_(size < 1 ? 1 : size), spin_ns_(spin_ns), cores_(std::move(cores)) {
  workers_.reserve(size_ - 1);
  for (int w = 1; w < size_; ++w) workers_.emplace_back([this, w] { WorkerLoop(w); });
}

WorkerTeam::~WorkerTeam() {
  if (workers_.empty()) return;
  quit_ = true;
  generation_.fetch_add(1, std::memory_order_seq_cst);
  FutexWakeAll(&generation_);
  for (std::thread& t : workers_) t.join();
}

void WorkerTeam::RunParts(int parts, PartFn fn, void* arg) {
  fn_ = fn;
  arg_ = arg;
  parts_ = parts < size_ ? parts : size_;
  remaining_.store(static_cast<uint32_t>(size_ - 1), std::memory_order_relaxed);
  // seq_cst against the workers' sleepers_ increment: either a worker about
  // to sleep sees the new generation, or we see it asleep and wake it.
  generation_.fetch_add(1, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) != 0) FutexWakeAll(&generation_);
  fn(arg, 0);
  if (SpinThenYield([this] { return remaining_.load(std::memory_order_acquire) == 0; }, TeamPoll(spin_ns_))) return;
  caller_sleeping_.store(1, std::memory_order_seq_cst);
  for (uint32_t r; (r = remaining_.load(std::memory_order_seq_cst)) != 0;) SleepWhile(remaining_, r);
  caller_sleeping_.store(0, std::memory_order_relaxed);
}

void WorkerTeam::WorkerLoop(int index) {
  // oneDNN asks OpenMP how many threads it may use: a part is one thread's.
  omp_set_num_threads(1);
  const std::string name = "sinkrt-team" + std::to_string(index);
  pthread_setname_np(pthread_self(), name.c_str());
  if (!cores_.empty()) PinToCore(cores_[index % cores_.size()]);
  uint32_t seen = 0;
  for (;;) {
    auto moved = [&] { return generation_.load(std::memory_order_acquire) != seen; };
    if (!SpinThenYield(moved, TeamPoll(spin_ns_))) {
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      SleepWhile(generation_, seen);
      sleepers_.fetch_sub(1, std::memory_order_relaxed);
    }
    seen = generation_.load(std::memory_order_acquire);
    if (quit_) return;
    if (index < parts_) fn_(arg_, index);
    if (remaining_.fetch_sub(1, std::memory_order_seq_cst) == 1 &&
        caller_sleeping_.load(std::memory_order_seq_cst) != 0)
      FutexWakeAll(&remaining_);
  }
}

}  // namespace sinkrt::device
