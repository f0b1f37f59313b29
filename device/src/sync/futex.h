// Futex waits on 32-bit atomics, including ones in a shared mapping, and
// the bounded poll every waiter of the device runs before it sleeps: the
// comm transports' (shm rings, TCP links), the worker team's
// (team/worker_team.h) and sinkd's sink worker's.
//
// The shm rings' waiters sleep in the kernel instead of spinning: with four
// ranks on two cores a spinning waiter steals the core its peer needs to
// make the very progress it waits for. The operations are the shared ones
// (not FUTEX_PRIVATE_FLAG), so a wake through one process's mapping reaches
// a sleeper in another.
#pragma once

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <ctime>

#include "runtime/src/env.h"

namespace sinkrt::device {

static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t) && std::atomic<uint32_t>::is_always_lock_free,
              "futex words must be plain 32-bit atomics");

// Sleeps while *word == expected, at most `timeout`; spurious returns are fine.
inline void FutexWait(std::atomic<uint32_t>* word, uint32_t expected, std::chrono::nanoseconds timeout) {
  if (timeout.count() <= 0) return;
  timespec ts;
  ts.tv_sec = static_cast<time_t>(timeout.count() / 1'000'000'000);
  ts.tv_nsec = static_cast<long>(timeout.count() % 1'000'000'000);
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

inline void FutexWakeAll(std::atomic<uint32_t>* word) {
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace sinkrt::device

namespace sinkrt::device {

// How long a waiter polls before it sleeps (SpinThenYield).
struct PollBudget {
  std::chrono::nanoseconds spin;   // busy, with CpuRelax
  std::chrono::nanoseconds yield;  // then sched_yield() between checks
};

// SINKRT_COMM_SPIN_US / SINKRT_COMM_YIELD_US override the defaults (tuning).
inline PollBudget DefaultPollBudget() {
  static const PollBudget budget = [] {
    PollBudget b{std::chrono::microseconds(5), std::chrono::microseconds(50)};
    // atoi read "abc" as 0 and "-5" as negative; CheckEnvironment refuses both.
    if (auto us = EnvNonNegativeInteger("SINKRT_COMM_SPIN_US")) b.spin = std::chrono::microseconds(*us);
    if (auto us = EnvNonNegativeInteger("SINKRT_COMM_YIELD_US")) b.yield = std::chrono::microseconds(*us);
    return b;
  }();
  return budget;
}

// Yielding pays only when the threads it lets run are our own ranks, which
// hand the core back within microseconds. A yield that took longer than
// this gave the core to something else for a whole time slice (a compiler,
// another job's compute threads): a sleeper would have been woken at once
// and preempted it, a yielder waits out the slice. Then this process stops
// yielding for a while (kYieldBackoff).
inline constexpr std::chrono::microseconds kForeignSlice{500};
inline constexpr std::chrono::milliseconds kYieldBackoff{200};

inline std::atomic<int64_t>& NoYieldUntil() {
  static std::atomic<int64_t> until{0};  // steady_clock nanoseconds
  return until;
}

// Polls `ready` for a bounded time before the caller goes to sleep: first
// busy (a peer that is running answers within a microsecond or two), then
// yielding the core between checks, so that with more ranks than cores the
// rank we wait for gets the core, and nobody pays for a futex or poll
// wake-up (tens of microseconds on these VMs, whose idle vCPUs must be
// woken). The yield phase is bounded, and dropped for a while as soon as a
// yield shows that the core went to someone else (kForeignSlice).
template <typename Ready>
bool SpinThenYield(Ready ready, PollBudget budget = DefaultPollBudget()) {
  if (ready()) return true;
  using Clock = std::chrono::steady_clock;
  auto now = Clock::now();
  const auto spin_until = now + budget.spin;
  do {
    for (int i = 0; i < 16; ++i) {
      if (ready()) return true;
      CpuRelax();
    }
    now = Clock::now();
  } while (now < spin_until);
  if (budget.yield.count() <= 0 || now.time_since_epoch().count() < NoYieldUntil().load(std::memory_order_relaxed))
    return ready();
  const auto yield_until = now + budget.yield;
  while (now < yield_until) {
    ::sched_yield();
    const auto after = Clock::now();
    if (after - now > kForeignSlice) {
      NoYieldUntil().store((after + kYieldBackoff).time_since_epoch().count(), std::memory_order_relaxed);
      return ready();
    }
    now = after;
    if (ready()) return true;
  }
  return ready();
}

}  // namespace sinkrt::device
