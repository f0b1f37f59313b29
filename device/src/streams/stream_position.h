// Stream positions: where each of the executor's streams is, kept by the
// stream loop for the stall reports peers ask for (TaskPositions).
//
// Each stream has a cell of three relaxed atomics, written only by the
// stream's own thread: the program and step (once per step), the state
// with the current and last completed task (one store per task), and the
// time it entered that state (one store per task; an event record, which
// never waits, is not marked: the next task's mark says it completed, as
// tasks run in order). A reader on another
// thread (the communicator's I/O thread) may see the three from two
// moments; for a stalled stream they agree, and that is the case reports
// are for. Nothing here allocates or locks.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "device/src/task_positions.h"
#include "sinkrt/fb/task_stream_generated.h"

namespace sinkrt::device {

struct LoadedJob;

struct alignas(64) StreamPositionCell {   // a line each: the two streams' threads never share one
  std::atomic<uint32_t> program_step{0};  // program << 28 | step (1-based, saturating)
  std::atomic<uint64_t> where{0};         // state | (task + 1) << 8 | (last completed + 1) << 36
  std::atomic<int64_t> since_ns{0};       // NowNs when it entered the state

  static constexpr uint32_t kStepMask = (1u << 28) - 1;
  static constexpr uint64_t kTaskMask = (uint64_t{1} << 28) - 1;
  static uint64_t Pack(StreamState s, int64_t task, int64_t last) {
    return static_cast<uint64_t>(s) | (static_cast<uint64_t>(task + 1) & kTaskMask) << 8 |
           (static_cast<uint64_t>(last + 1) & kTaskMask) << 36;
  }
  void Set(StreamState s) {  // keeps the tasks; for the executor between sinks
    uint64_t w = where.load(std::memory_order_relaxed);
    where.store((w & ~uint64_t{0xff}) | static_cast<uint64_t>(s), std::memory_order_relaxed);
  }
};

// The job's cells, [0] compute, [1] comm; Describe turns them into a report
// with the tasks' names (read from the loaded stream, never resized).
class JobPositions final : public TaskPositions {
 public:
  explicit JobPositions(const LoadedJob& job) : job_(job) {}
  void Describe(TaskPositionReport* out) const override;

  StreamPositionCell cells[2];

 private:
  const LoadedJob& job_;
};

// One stream's writer for one step of one program (RunStreamStep).
class PositionWriter {
 public:
  PositionWriter(StreamPositionCell& cell, fb::ProgramKind program, uint32_t step, size_t tasks)
      : cell_(cell), first_last_(step > 1 ? static_cast<int64_t>(tasks) - 1 : -1), tasks_(tasks) {
    uint32_t s = step < StreamPositionCell::kStepMask ? step : StreamPositionCell::kStepMask;
    cell_.program_step.store(static_cast<uint32_t>(program) << 28 | s, std::memory_order_relaxed);
  }
  // Task `t` starts; tasks run in order, so the one before it completed.
  void Enter(size_t t, StreamState s, int64_t now_ns) {
    Store(s, t);
    cell_.since_ns.store(now_ns, std::memory_order_relaxed);
  }
  void Failed(size_t t) { Store(StreamState::kFailed, t); }
  void Done() {
    const int64_t last = static_cast<int64_t>(tasks_) - 1;
    cell_.where.store(StreamPositionCell::Pack(StreamState::kDone, last, last), std::memory_order_relaxed);
  }

 private:
  void Store(StreamState s, size_t t) {
    const int64_t task = static_cast<int64_t>(t);
    cell_.where.store(StreamPositionCell::Pack(s, task, t > 0 ? task - 1 : first_last_), std::memory_order_relaxed);
  }
  StreamPositionCell& cell_;
  int64_t first_last_;  // the last completed task when task 0 starts: the step before's last, or none
  size_t tasks_;
};

}  // namespace sinkrt::device
