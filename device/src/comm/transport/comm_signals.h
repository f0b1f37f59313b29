// CommSignals: what every wait of one communicator checks besides its own
// condition (Abort, a peer's failure notice), and this rank's progress as
// its peers may ask for it when they time out (the stall report).
//
// The op thread writes the progress fields; the I/O thread reads them to
// answer a peer's query. Each field is its own atomic: a report that mixes
// two moments is still a fair picture of a stalled rank.
//
// Layer: shared by the transports (which check it in every wait and answer
// queries from it) and the op layer (which records progress); it knows no
// concrete transport.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <vector>

#include "device/src/comm/transport/transport.h"
#include "device/src/task_positions.h"
#include "sinkrt/runtime/status.h"

namespace sinkrt::device {

struct PeerProgress {
  OpKind op = OpKind::kNone;  // the current or last collective
  uint32_t group = 0;
  uint64_t seq = 0;
  bool active = false;           // inside that collective now
  bool failed = false;           // that collective failed (the communicator is broken)
  int32_t waiting_on = -1;       // the rank an active collective waits for, -1 if none
  TaskPositionReport positions;  // where its executor's streams are (kNone: it has none)
};

class CommSignals {
 public:
  bool aborted() const { return aborted_.load(std::memory_order_acquire); }
  void Abort() {
    aborted_.store(true, std::memory_order_release);
    WakeAll();
  }

  // A peer's failure notice: every later wait fails with the first one.
  void Poison(Status why) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (poisoned_.load(std::memory_order_relaxed)) return;
      poison_ = std::move(why);
      poisoned_.store(true, std::memory_order_release);
    }
    WakeAll();
  }
  bool poisoned() const { return poisoned_.load(std::memory_order_acquire); }
  Status poison() const {
    std::lock_guard<std::mutex> lk(mu_);
    return poison_;
  }

  // Registered during rendezvous, before any wait can run.
  void AddWaker(std::function<void()> wake) { wakers_.push_back(std::move(wake)); }
  void WakeAll() {
    for (auto& w : wakers_) w();
  }

  // The op thread is about to sleep (its polling found nothing in time):
  // every TCP link whose input it has been reading hands that back to the
  // I/O thread, or a credit or message on it would wait for the next tick.
  void AddBeforeSleep(std::function<void()> f) { before_sleep_.push_back(std::move(f)); }
  void BeforeSleep() {
    for (auto& f : before_sleep_) f();
  }

  void Begin(OpKind op, uint32_t group, uint64_t seq) {
    op_.store(op, std::memory_order_relaxed);
    group_.store(group, std::memory_order_relaxed);
    seq_.store(seq, std::memory_order_relaxed);
    failed_.store(false, std::memory_order_relaxed);
    active_.store(true, std::memory_order_release);
  }
  void End(bool failed) {
    waiting_on_.store(-1, std::memory_order_relaxed);
    failed_.store(failed, std::memory_order_relaxed);
    active_.store(false, std::memory_order_release);
  }
  void SetWaitingOn(int32_t rank) { waiting_on_.store(rank, std::memory_order_relaxed); }

  // The executor's positions (Communicator::SetTaskPositions), copied into
  // every reply; the lock keeps one from going while a reply reads it.
  void SetPositions(const TaskPositions* positions) {
    std::lock_guard<std::mutex> lk(positions_mu_);
    positions_ = positions;
  }
  void ClearPositions(const TaskPositions* positions) {
    std::lock_guard<std::mutex> lk(positions_mu_);
    if (positions_ == positions) positions_ = nullptr;
  }
  void DescribePositions(TaskPositionReport* out) const {
    std::lock_guard<std::mutex> lk(positions_mu_);
    if (positions_) {
      positions_->Describe(out);
    } else {
      *out = TaskPositionReport{};
    }
  }

  // The collective progress only (a reply adds DescribePositions).
  PeerProgress Now() const {
    PeerProgress p;
    p.active = active_.load(std::memory_order_acquire);
    p.op = op_.load(std::memory_order_relaxed);
    p.group = group_.load(std::memory_order_relaxed);
    p.seq = seq_.load(std::memory_order_relaxed);
    p.failed = failed_.load(std::memory_order_relaxed);
    p.waiting_on = waiting_on_.load(std::memory_order_relaxed);
    return p;
  }

 private:
  std::atomic<bool> aborted_{false};
  std::atomic<bool> poisoned_{false};
  mutable std::mutex mu_;
  Status poison_;
  std::vector<std::function<void()>> wakers_;
  std::vector<std::function<void()>> before_sleep_;

  std::atomic<OpKind> op_{OpKind::kNone};
  std::atomic<uint32_t> group_{0};
  std::atomic<uint64_t> seq_{0};
  std::atomic<bool> active_{false};
  std::atomic<bool> failed_{false};
  std::atomic<int32_t> waiting_on_{-1};

  mutable std::mutex positions_mu_;
  const TaskPositions* positions_ = nullptr;
};

// Marks this rank as waiting for `rank` for the lifetime of the guard.
class WaitingOn {
 public:
  WaitingOn(CommSignals& s, uint32_t rank) : s_(s) { s_.SetWaitingOn(static_cast<int32_t>(rank)); }
  ~WaitingOn() { s_.SetWaitingOn(-1); }

 private:
  CommSignals& s_;
};

}  // namespace sinkrt::device
