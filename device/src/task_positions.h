/// \file
/// Task positions: where each stream of a device's executor is, as a peer
/// that timed out in a collective is told when it asks (the stall report).
///
/// The executor keeps the live picture in a few relaxed atomics per stream
/// (streams/stream_position.h) and implements TaskPositions; the
/// communicator is handed one (Communicator::SetTaskPositions) and copies a
/// TaskPositionReport into its reply to a peer's stall query. The report is
/// fixed-size and plain so it travels as the reply's payload as it is (the
/// peers are the same build); names are truncated to fit.
#pragma once

#include <cstdint>
#include <string>

namespace sinkrt::device {

/// What a stream is doing now.
enum class StreamState : uint8_t {
  kNone = 0,        ///< no such stream, or no job loaded
  kIdle = 1,        ///< loaded, no sink running
  kKernel = 2,      ///< running a kernel (or an initializer)
  kCollective = 3,  ///< inside a collective
  kGetNext = 4,     ///< in GetNext, waiting for a batch
  kEventWait = 5,   ///< waiting for the other stream's event
  kFailed = 6,      ///< its task failed; the sink is failing
  kDone = 7,        ///< finished its part of the step
};

/// One stream. `task`/`last_done` index the stream's tasks; `task_name` and
/// `last_name` are theirs, `what` is the task's op ("MatMul") or kind
/// ("GetNextTask"); all NUL-terminated, truncated to fit.
struct StreamPosition {
  StreamState state = StreamState::kNone;  ///< what it is doing
  uint8_t program = 0;                     ///< fb::ProgramKind
  uint8_t streams = 0;                     ///< the program's stream count (1 or 2)
  uint8_t reserved = 0;                    ///< 0
  uint32_t step = 0;                       ///< 1-based within the current sink
  int32_t task = -1;                       ///< the task it is in (or failed in, or last ran when done)
  int32_t last_done = -1;                  ///< the last task it completed, -1 none; >= task: in the step before
  uint32_t for_ms = 0;                     ///< how long it has been in `state`
  char what[20] = {};                      ///< the task's op or kind
  char task_name[40] = {};                 ///< the current task's name
  char last_name[40] = {};                 ///< the last completed task's name
};
static_assert(sizeof(StreamPosition) == 120, "StreamPosition travels on the wire");

/// Both streams: [0] compute, [1] comm.
struct TaskPositionReport {
  StreamPosition streams[2];  ///< [0] compute, [1] comm
};

/// What a communicator asks for a stall report; the executor implements it.
class TaskPositions {
 public:
  virtual ~TaskPositions() = default;
  /// Where each stream is now. Called on the communicator's I/O thread (or
  /// its op thread) while it answers a query: must not block or allocate.
  virtual void Describe(TaskPositionReport* out) const = 0;
};

/// "train_step comm stream task 12 'grad_allreduce.0' (AllReduceTask) at step
/// 3, in a collective for 2.0 s, last completed task 11 'wait'", or "" for
/// a stream in kNone. `stream` is 0 (compute) or 1 (comm).
std::string DescribeStreamPosition(const StreamPosition& p, int stream);

}  // namespace sinkrt::device
