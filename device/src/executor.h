/// \file
/// Executor: one loaded job on one device.
///
/// Load() is the only place that allocates: it takes a verified stream, maps one
/// arena of the planned size, pre-faults it, creates every queue's slots,
/// resolves every task to a ready-to-run form (kernel state, oneDNN
/// primitives, arena pointers) and sizes one scratch block for all kernels.
/// Run() then executes programs with no allocation, no checks beyond those
/// that depend on data, and no system calls other than waiting on a queue.
///
/// The Executor keeps its VerifiedStream (shared bytes), so nothing the
/// caller holds needs to outlive it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "sinkrt/device/device_options.h"
#include "sinkrt/runtime/device_link.h"
#include "sinkrt/runtime/profile_record.h"
#include "sinkrt/runtime/task_stream_verifier.h"

/// The device library (CMake target sinkrt::device): the executor, collectives, the in-process
/// device and the daemon behind sinkd.
namespace sinkrt::device {

class Communicator;
struct LoadedJob;

/// Nanosecond counters of one Run, filled without allocation.
struct RunStats {
  uint32_t steps = 0;         ///< steps that ran
  int64_t wall_ns = 0;        ///< the whole Run
  int64_t compute_ns = 0;     ///< kernels
  int64_t queue_wait_ns = 0;  ///< GetNext waiting for a batch
  int64_t copy_ns = 0;        ///< GetNext copying a batch into the arena
  int64_t comm_ns = 0;        ///< inside collectives (on the comm stream, overlapping compute)
  int64_t comm_wait_ns = 0;   ///< the compute stream blocked on the comm stream: communication not hidden
  int64_t bubble_ns = 0;      ///< the compute stream blocked on a Send/Recv: waiting for a neighbour stage
  int32_t failed_task = -1;   ///< on failure: the task's index in its stream
  int32_t failed_stream = 0;  ///< on failure: 0 compute, 1 comm
};

/// The host's view of where a sink's time went.
DeviceTiming TimingOf(const RunStats& stats);

/// One task's share of a program's time (Executor::TaskTimes). The views
/// point into the loaded stream and live as long as the Executor.
struct TaskTime {
  std::string_view name;  ///< the task's name in the stream, "" when it has none
  std::string_view op;    ///< a kernel's op ("MatMul"), else the task kind ("GetNextTask")
  int stream = 0;         ///< 0 compute, 1 comm
  int64_t ns = 0;         ///< summed over every step run since Load or ResetTaskTimes
};

/// One loaded job on one device; see the file's description.
class Executor {
 public:
  ~Executor();

  /// `comm` (not owned, must outlive the Executor) runs the stream's
  /// collectives; a stream that has some is refused without one, or with one
  /// of another rank or world size.
  /// A stream requiring features this device lacks (beyond
  /// kSupportedFeatures, whatever it was verified with) is refused.
  static Result<std::unique_ptr<Executor>> Load(VerifiedStream stream, const DeviceOptions& options,
                                                Communicator* comm = nullptr);

  /// Runs the init program (parameter initialisation). Load calls it once;
  /// call again to reset parameters.
  Status RunInit();

  /// Runs `steps` iterations of a program. On failure the error names the
  /// program, the step, the task and its cause.
  Status Run(ProgramKind kind, uint32_t steps, RunStats* stats);

  /// Copies one batch into queue `queue` (index checked), waiting up to the
  /// push timeout for a free slot. Safe to call while Run executes.
  Status PushBatch(uint32_t queue, std::span<const ConstBytes> columns);
  /// What FillNextSlot calls to write a batch into a slot.
  using SlotFiller = std::function<Status(std::span<const std::span<uint8_t>> columns)>;
  /// Fills the next free slot of queue `queue` (index checked) in place and
  /// publishes it if `fill` succeeds; never waits: a full queue is
  /// kResourceExhausted. `fill` gets the slot's column spans in column order,
  /// e.g. to read them straight from a socket. For a feeder that holds one
  /// credit per free slot (the daemon); safe to call while Run executes.
  Status FillNextSlot(uint32_t queue, const SlotFiller& fill);
  /// Drops every batch of queue `queue` (index checked); a PushBatch waiting
  /// for a free slot of it returns kAborted.
  Status ClearQueue(uint32_t queue);
  /// Calls `freed(queue, slots)` whenever slots of a queue become free: 1
  /// after each GetNext, the dropped count after ClearQueue. Called on the
  /// thread that freed them, outside the queue's lock. Set it once, before
  /// any batch is pushed or any sink runs.
  void SetOnSlotsFreed(std::function<void(uint32_t queue, uint32_t slots)> freed);

  /// Time per task of program `kind`, in stream order (compute stream, then
  /// comm), from the clock reads around each task of every step. Allocates:
  /// call between sinks, not while one runs. Empty for a program the stream
  /// lacks. The init program's times include Load's RunInit.
  std::vector<TaskTime> TaskTimes(ProgramKind kind) const;
  /// Zeroes the times TaskTimes sums.
  void ResetTaskTimes();
  /// Every AllReduce task of program `kind`, in stream order (compute
  /// stream, then comm): its bytes and the schedule it runs on this rank
  /// (Communicator::AllReduceAlgorithm, with whether the arena is shared).
  /// Empty without a world or the program. Allocates: at load, not in a sink.
  std::vector<AllReduceBucket> AllReduceBuckets(ProgramKind kind) const;

  /// Starts recording (config.enabled: sizes the per-stream rings now, so no
  /// sink allocates) or stops it; step counts restart at 0. Call between
  /// sinks. Errors: a bad config, rings above their limit.
  Status SetProfiling(const ProfileConfig& config);
  /// What the last Run recorded, valid until the next Run or SetProfiling:
  /// its sink record, then each stream's kept task records oldest first (at
  /// most four runs; empty ones included). Empty spans when not profiling.
  struct ProfileView {
    ProfileRecord sink;                      ///< the sink's record
    std::span<const ProfileRecord> runs[4];  ///< each stream's task records, oldest first
    /// All task records in `runs`.
    size_t records() const { return runs[0].size() + runs[1].size() + runs[2].size() + runs[3].size(); }
  };
  /// See ProfileView.
  ProfileView LastProfile() const;
  /// Whether SetProfiling turned recording on.
  bool profiling() const;
  /// The clock records are stamped with (NowNs plus the device's
  /// profile_clock_offset_ns): what ReadClock answers.
  int64_t ProfileClockNs() const;

  const VerifiedStream& stream() const;  ///< the loaded stream
  uint32_t num_queues() const;           ///< queues of the loaded stream
  /// Queue facts by index (< num_queues(), unchecked).
  std::string_view queue_name(uint32_t index) const;
  uint32_t queue_capacity(uint32_t index) const;     ///< slots of the queue
  uint64_t queue_batch_bytes(uint32_t index) const;  ///< one batch as pushed: its columns' bytes
  uint32_t queued_batches(uint32_t index) const;     ///< waiting now
  /// Most slots a queue ever held at once (flow-control tests).
  uint32_t queue_high_water_mark(uint32_t index) const;
  /// The arena bytes of a buffer (index checked).
  Result<std::span<uint8_t>> Buffer(uint32_t index);
  uint64_t arena_bytes() const;    ///< the arena's bytes
  uint64_t scratch_bytes() const;  ///< the kernels' shared scratch bytes
  uint64_t queue_bytes() const;    ///< all queue slots' bytes
  int threads() const;             ///< kernel threads (compute thread and its team)
  /// Stops any waiting GetNext/PushBatch (used when a job is torn down).
  void CloseQueues();
  /// CloseQueues, and a running sink stops after its current step with
  /// kAborted. Safe from any thread; the job cannot run again.
  void Cancel();

 private:
  Executor();
  std::unique_ptr<LoadedJob> job_;
};

}  // namespace sinkrt::device
