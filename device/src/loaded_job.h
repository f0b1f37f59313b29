// The executor's internal picture of a loaded job: every task resolved at
// load to a ready-to-run form, so the step loop only switches on a kind.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "device/src/arena.h"
#include "device/src/comm/communicator.h"
#include "device/src/data_queue.h"
#include "device/src/kernels/dnnl_runtime.h"
#include "device/src/kernels/kernel.h"
#include "device/src/profile/profile_state.h"
#include "device/src/streams/stream_position.h"
#include "sinkrt/device/device_options.h"
#include "sinkrt/fb/task_stream_generated.h"
#include "sinkrt/runtime/task_stream_verifier.h"

namespace sinkrt::device {

struct PreparedTask {
  fb::TaskBody kind = fb::TaskBody::NONE;
  const fb::Task* def = nullptr;
  // Nanoseconds spent in this task over every step run since load (or
  // Executor::ResetTaskTimes): the clock reads the stream loop makes anyway,
  // one add per task.
  int64_t ns = 0;
  // Kernel
  const KernelImpl* kernel = nullptr;
  KernelArgs args;
  std::unique_ptr<KernelState> state;
  // GetNext
  DataQueue* queue = nullptr;
  std::vector<uint8_t*> dst;
  // Events
  uint32_t event = 0;
  // A compute-stream wait for a point-to-point transfer's done event (a
  // pipeline stage waiting on a neighbour): its time counts as bubble, not
  // as comm wait.
  bool waits_on_neighbour = false;
  // Init
  std::vector<uint32_t> initializers;
  // Collectives: the arena bytes they work on (AllReduce and Broadcast in
  // place over `data`; AllGather, ReduceScatter and AllToAll from `data`
  // into `out`; Send and Recv over `data`), resolved and checked at load.
  std::span<uint8_t> data, out;
  // Blocked AllGather and ReduceScatter: one input and one output per pair
  // (empty for every other task, and for the single-buffer forms).
  std::vector<std::span<const uint8_t>> ins;
  std::vector<std::span<uint8_t>> outs;
  DType dtype = DType::Invalid;
  ReduceOp op = ReduceOp::Sum;
  Group group;
  uint32_t peer = 0;  // Broadcast root, Send/Recv peer (world ranks)
};

// Event counters of one step, shared by the program's streams. Sized at
// load; a record wakes every waiter; a failed stream wakes them too.
struct StepEvents {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<uint32_t> counts;
  bool failed = false;

  void Reset() {
    std::lock_guard<std::mutex> lk(mu);
    std::fill(counts.begin(), counts.end(), 0);
    failed = false;
  }
  void Record(uint32_t e) {
    {
      std::lock_guard<std::mutex> lk(mu);
      ++counts[e];
    }
    cv.notify_all();
  }
  void Fail() {
    {
      std::lock_guard<std::mutex> lk(mu);
      failed = true;
    }
    cv.notify_all();
  }
  // False when the step failed elsewhere before the event was recorded.
  bool Wait(uint32_t e) {
    std::unique_lock<std::mutex> lk(mu);
    cv.wait(lk, [&] { return counts[e] > 0 || failed; });
    return counts[e] > 0;
  }
};

inline constexpr int kMaxStreams = 2;  // compute, comm

struct PreparedProgram {
  const fb::Program* def = nullptr;
  int num_streams = 0;
  std::vector<PreparedTask> streams[kMaxStreams];  // never resized after load: kernels keep pointers
  std::unique_ptr<StepEvents> events = std::make_unique<StepEvents>();
  // Set by Run before each step's streams start: whether the step is
  // recorded, and its number in the profile.
  bool recording = false;
  uint32_t profile_step = 0;
  // Program.accumulators' arena bytes, zeroed when a sink starts
  // (sink_accumulators.cc).
  std::vector<std::span<uint8_t>> accumulators;
};

class CommStream;
class WorkerTeam;

struct LoadedJob {
  explicit LoadedJob(VerifiedStream s);
  ~LoadedJob();

  VerifiedStream stream;
  DeviceOptions options;
  int threads = 1;
  PageBlock arena;
  bool arena_shared = false;  // from Communicator::ShareMemory: AllReduces on it may read the peers' in place
  PageBlock scratch;
  std::vector<std::unique_ptr<DataQueue>> queues;
  std::unique_ptr<DnnlRuntime> dnnl;
  static constexpr int kPrograms = static_cast<int>(fb::ProgramKind::MAX) + 1;
  PreparedProgram programs[kPrograms];  // by ProgramKind
  bool has_program[kPrograms] = {};
  // Kernels of the compute stream (stream 0) run with run_ctx, which has
  // the worker team; any kernel on another stream with side_run_ctx, which
  // has none, so the team only ever has one caller.
  RunContext run_ctx;
  RunContext side_run_ctx;
  std::unique_ptr<WorkerTeam> team;  // threads - 1 workers; null with one thread
  int pin_core = -1;                 // DeviceOptions::pin_threads: the compute thread's core during a sink
  std::atomic<bool> cancelled{false};
  Communicator* comm = nullptr;             // not owned; set when the stream has collectives
  std::unique_ptr<CommStream> comm_stream;  // when any program has a second stream
  ProfileState profile;
  // Where each stream is, for peers' stall reports (the communicator reads
  // it on its I/O thread while this job is loaded).
  JobPositions positions{*this};
};

// Counters of one stream's part of a step (the caller adds them up).
struct StreamCounters {
  int64_t compute_ns = 0;
  int64_t queue_wait_ns = 0;
  int64_t copy_ns = 0;
  int64_t comm_ns = 0;        // inside collectives
  int64_t event_wait_ns = 0;  // blocked on another stream's event
  int64_t bubble_ns = 0;      // blocked on a Send/Recv's done event instead (PreparedTask::waits_on_neighbour)
  int32_t failed_task = -1;
};

// Resolves every task of `def` (at most kMaxStreams streams).
Status PrepareProgram(LoadedJob& job, const fb::Program* def, PrepareContext& pctx, PreparedProgram* out);

// Runs stream `s` of `prog` once (one step). Errors name the program, the
// stream, the task and the step.
Status RunStreamStep(LoadedJob& job, PreparedProgram& prog, int s, uint32_t step, uint32_t steps,
                     StreamCounters* counters);

std::string TaskLabel(const PreparedProgram& p, int stream, size_t t);

// Resolves `def`'s accumulators into out->accumulators (sink_accumulators.cc).
Status PrepareAccumulators(LoadedJob& job, const fb::Program* def, PreparedProgram* out);
// Zeroes them: once per sink, before its first step.
void ZeroAccumulators(PreparedProgram& prog);

}  // namespace sinkrt::device
