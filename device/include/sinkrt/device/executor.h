// Executor: one loaded job on one device.
//
// Load() is the only place that allocates: it verifies the stream, maps one
// arena of the planned size, pre-faults it, creates every queue's slots,
// resolves every task to a ready-to-run form (kernel state, oneDNN
// primitives, arena pointers) and sizes one scratch block for all kernels.
// Run() then executes programs with no allocation, no checks beyond those
// that depend on data, and no system calls other than waiting on a queue.
//
// Lifetime: the stream bytes passed to Load must outlive the Executor.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>

#include "sinkrt/device/device_options.h"
#include "sinkrt/runtime/device_link.h"
#include "sinkrt/runtime/task_stream_verifier.h"

namespace sinkrt::device {

class Communicator;
class DataQueue;
struct LoadedJob;

// Nanosecond counters of one Run, filled without allocation.
struct RunStats {
  uint32_t steps = 0;
  int64_t wall_ns = 0;
  int64_t compute_ns = 0;     // kernels
  int64_t queue_wait_ns = 0;  // GetNext waiting for a batch
  int64_t copy_ns = 0;        // GetNext copying a batch into the arena
  int64_t comm_ns = 0;        // inside collectives (on the comm stream, overlapping compute)
  int64_t comm_wait_ns = 0;   // the compute stream blocked on the comm stream: communication not hidden
  int32_t failed_task = -1;   // on failure: the task's index in its stream
  int32_t failed_stream = 0;  // on failure: 0 compute, 1 comm
};

// The host's view of where a sink's time went.
DeviceTiming TimingOf(const RunStats& stats);

class Executor {
 public:
  ~Executor();

  // `comm` (not owned, must outlive the Executor) runs the stream's
  // collectives; a stream that has some is refused without one, or with one
  // of another rank or world size.
  static Result<std::unique_ptr<Executor>> Load(std::span<const uint8_t> stream, const DeviceOptions& options,
                                                Communicator* comm = nullptr);

  // Runs the init program (parameter initialisation). Load calls it once;
  // call again to reset parameters.
  Status RunInit();

  // Runs `steps` iterations of a program. On failure the error names the
  // program, the step, the task and its cause.
  Status Run(ProgramKind kind, uint32_t steps, RunStats* stats);

  // Copies one batch into queue `queue` (index checked), waiting up to the
  // push timeout for a free slot. Safe to call while Run executes.
  Status PushBatch(uint32_t queue, std::span<const ConstBytes> columns);
  // Drops every batch of queue `queue` (index checked); see DataQueue::Clear.
  Status ClearQueue(uint32_t queue);

  const StreamView& view() const;
  uint32_t num_queues() const;
  DataQueue& queue(uint32_t index);
  // Most slots a queue ever held at once (flow-control tests).
  uint32_t queue_high_water_mark(uint32_t index) const;
  // The arena bytes of a buffer (index checked).
  Result<std::span<uint8_t>> Buffer(uint32_t index);
  uint64_t arena_bytes() const;
  uint64_t scratch_bytes() const;
  uint64_t queue_bytes() const;
  int threads() const;
  // Stops any waiting GetNext/PushBatch (used when a job is torn down).
  void CloseQueues();
  // CloseQueues, and a running sink stops after its current step with
  // kAborted. Safe from any thread; the job cannot run again.
  void Cancel();

 private:
  Executor();
  std::unique_ptr<LoadedJob> job_;
};

// Cores this process may run on (sched_getaffinity), at least 1.
int AvailableCores();

}  // namespace sinkrt::device
