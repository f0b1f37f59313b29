#include "device/src/team/worker_team.h"

#include <omp.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <string>

#include "device/src/sync/futex.h"

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
    : cores_(std::move(cores)),
      size_(size < 1 ? 1 : size),
      spin_ns_(spin_ns),
      claims_(std::make_unique<std::atomic<uint32_t>[]>(size_)) {
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

bool WorkerTeam::Claim(int part, uint32_t generation) {
  // Only forward: a worker that read its generation and was then
  // descheduled while the caller ran that generation and later ones (taking
  // this part itself each time) must not take the part again with its old
  // number. "Not equal" let it, and it then ran the current generation's
  // part beside its rightful runner and counted a part too many in done_:
  // the caller left while a part still ran on its stack frame (a worker
  // crashed in DnnlSplitRun's part), or done_ passed the part count and the
  // caller waited for ever (a sinkd hung). Generations only grow (a wrap
  // needs 2^31 runs to confuse the signed difference).
  uint32_t was = claims_[part].load(std::memory_order_relaxed);
  do {
    if (static_cast<int32_t>(was - generation) >= 0) return false;  // taken in this generation or a later one
  } while (!claims_[part].compare_exchange_weak(was, generation, std::memory_order_acq_rel));
  // Taken for `generation`, but that may be over already (nobody took this
  // part in it because it had fewer parts, and a later generation has not
  // yet taken it): then the claim is a stale worker's and runs nothing.
  // While `generation` is current it cannot end before this part has run.
  return generation_.load(std::memory_order_acquire) == generation;
}

void WorkerTeam::RunParts(int parts, PartFn fn, void* arg) {
  fn_ = fn;
  arg_ = arg;
  parts_ = parts < size_ ? parts : size_;
  done_.store(0, std::memory_order_relaxed);
  // seq_cst against the workers' sleepers_ increment: either a worker about
  // to sleep sees the new generation, or we see it asleep and wake it.
  const uint32_t generation = generation_.fetch_add(1, std::memory_order_seq_cst) + 1;
  if (sleepers_.load(std::memory_order_seq_cst) != 0) FutexWakeAll(&generation_);
  fn(arg, 0);
  // A part whose worker has not claimed it yet (asleep, or its vCPU lent to
  // another process) runs here instead of being waited for. Each part is
  // computed the same on any thread, so the bits do not depend on who ran it.
  uint32_t mine = 1;
  for (int p = 1; p < parts_; ++p)
    if (Claim(p, generation)) {
      fn(arg, p);
      ++mine;
    }
  const uint32_t all = static_cast<uint32_t>(parts_);
  if (done_.fetch_add(mine, std::memory_order_acq_rel) + mine == all) return;
  auto finished = [&] { return done_.load(std::memory_order_acquire) == all; };
  if (SpinThenYield(finished, TeamPoll(spin_ns_))) return;
  caller_sleeping_.store(1, std::memory_order_seq_cst);
  for (uint32_t d; (d = done_.load(std::memory_order_seq_cst)) != all;) SleepWhile(done_, d);
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
    // fn_, arg_ and parts_ are this generation's as long as the claim
    // holds: the caller waits for every claimed part before it moves on.
    // A worker that woke too late finds its part claimed by the caller.
    if (index >= parts_ || !Claim(index, seen)) continue;
    const uint32_t all = static_cast<uint32_t>(parts_);  // read before the caller may move on
    fn_(arg_, index);
    if (done_.fetch_add(1, std::memory_order_seq_cst) + 1 == all &&
        caller_sleeping_.load(std::memory_order_seq_cst) != 0)
      FutexWakeAll(&done_);
  }
}

}  // namespace sinkrt::device
