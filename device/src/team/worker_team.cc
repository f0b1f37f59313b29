#include "team/worker_team.h"

#include <linux/futex.h>
#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <string>

#include "sinkrt/runtime/clock.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define SINKRT_CPU_RELAX() _mm_pause()
#else
#define SINKRT_CPU_RELAX() std::atomic_signal_fence(std::memory_order_seq_cst)
#endif

namespace sinkrt::device {
namespace {

// std::atomic<uint32_t> is a plain 32-bit word on Linux, as the futex
// calls need.
uint32_t* Word(std::atomic<uint32_t>& a) { return reinterpret_cast<uint32_t*>(&a); }

void FutexWait(std::atomic<uint32_t>& word, uint32_t expected) {
  syscall(SYS_futex, Word(word), FUTEX_WAIT_PRIVATE, expected, nullptr, nullptr, 0);
}

void FutexWakeAll(std::atomic<uint32_t>& word) {
  syscall(SYS_futex, Word(word), FUTEX_WAKE_PRIVATE, INT32_MAX, nullptr, nullptr, 0);
}

// Polls `done` for up to spin_ns; true if it came true. The first few µs
// spin on the cache line (a part that ends together with ours); after that
// each turn yields, so that a thread this core owes time to (the feeder,
// the comm stream, the partner part itself on a loaded machine) runs.
template <typename Done>
bool SpinUntil(int64_t spin_ns, Done&& done) {
  if (done()) return true;
  const int64_t start = NowNs(), until = start + spin_ns, tight = start + 2000;
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      SINKRT_CPU_RELAX();
      if (done()) return true;
    }
    const int64_t now = NowNs();
    if (now >= until) return false;
    if (now >= tight) sched_yield();
  }
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
  FutexWakeAll(generation_);
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
  if (sleepers_.load(std::memory_order_seq_cst) != 0) FutexWakeAll(generation_);
  fn(arg, 0);
  auto all_done = [this] { return remaining_.load(std::memory_order_acquire) == 0; };
  if (SpinUntil(spin_ns_, all_done)) return;
  caller_sleeping_.store(1, std::memory_order_seq_cst);
  for (uint32_t r; (r = remaining_.load(std::memory_order_seq_cst)) != 0;) FutexWait(remaining_, r);
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
    if (!SpinUntil(spin_ns_, moved)) {
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      for (uint32_t g; (g = generation_.load(std::memory_order_seq_cst)) == seen;) FutexWait(generation_, g);
      sleepers_.fetch_sub(1, std::memory_order_relaxed);
    }
    seen = generation_.load(std::memory_order_acquire);
    if (quit_) return;
    if (index < parts_) fn_(arg_, index);
    if (remaining_.fetch_sub(1, std::memory_order_seq_cst) == 1 &&
        caller_sleeping_.load(std::memory_order_seq_cst) != 0)
      FutexWakeAll(remaining_);
  }
}

}  // namespace sinkrt::device
