#include "device/src/executor.h"

#include <omp.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <vector>

#include "device/src/loaded_job.h"
#include "device/src/streams/comm_stream.h"
#include "device/src/team/worker_team.h"
#include "runtime/src/clock.h"
#include "runtime/src/stream_names.h"
#include "sinkrt/runtime/dtype.h"
#include "sinkrt/runtime/stream_format.h"

namespace sinkrt::device {
LoadedJob::LoadedJob(VerifiedStream s) : stream(std::move(s)) {}
LoadedJob::~LoadedJob() = default;

namespace {

// The cores this process may run on, in order.
std::vector<int> AllowedCores() {
  std::vector<int> cores;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) cores.push_back(c);
  return cores;
}

// Pins the calling thread to `core` for a scope, then gives it back the
// affinity it had (the thread is the caller's: a host's or the daemon's).
class ScopedPin {
 public:
  explicit ScopedPin(int core) {
    if (core < 0 || pthread_getaffinity_np(pthread_self(), sizeof saved_, &saved_) != 0) return;
    pinned_ = PinToCore(core);
  }
  ~ScopedPin() {
    if (pinned_) pthread_setaffinity_np(pthread_self(), sizeof saved_, &saved_);
  }

 private:
  cpu_set_t saved_;
  bool pinned_ = false;
};

}  // namespace

int AvailableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  return 1;
}

DeviceTiming TimingOf(const RunStats& stats) {
  DeviceTiming t;
  t.compute_ms = stats.compute_ns / 1e6;
  t.comm_ms = stats.comm_ns / 1e6;
  t.comm_wait_ms = stats.comm_wait_ns / 1e6;
  t.bubble_ms = stats.bubble_ns / 1e6;
  t.queue_wait_ms = stats.queue_wait_ns / 1e6;
  t.other_ms = (stats.wall_ns - stats.compute_ns - stats.queue_wait_ns - stats.comm_wait_ns - stats.bubble_ns) / 1e6;
  return t;
}

Executor::Executor() = default;
Executor::~Executor() {
  if (!job_) return;
  if (job_->comm) job_->comm->ClearTaskPositions(&job_->positions);
  CloseQueues();
}

Result<std::unique_ptr<Executor>> Executor::Load(VerifiedStream stream, const DeviceOptions& options,
                                                 Communicator* comm) {
  auto job = std::make_unique<LoadedJob>(std::move(stream));
  job->options = options;
  int cores = AvailableCores();
  job->threads = options.threads > 0 && options.threads < cores ? options.threads : cores;
  const fb::TaskStream* root = job->stream.root();
  const fb::Header* header = root->header();
  // A reader (sinkdump) may have verified it with more features than this
  // device runs.
  if (uint64_t extra = header->requirements() & ~kSupportedFeatures)
    return Unimplemented("the task stream requires feature bits " + std::to_string(extra) +
                         " that this device does not support");
  if (header->requirements() & kFeatureCollectives) {
    if (!comm)
      return FailedPrecondition("the task stream is rank " + std::to_string(header->rank()) + " of " +
                                std::to_string(header->world_size()) +
                                " and needs collectives, but this device joined no world of devices");
    if (comm->size() != header->world_size() || comm->rank() != header->rank())
      return FailedPrecondition("the task stream is rank " + std::to_string(header->rank()) + " of " +
                                std::to_string(header->world_size()) + ", this device is rank " +
                                std::to_string(comm->rank()) + " of " + std::to_string(comm->size()));
    job->comm = comm;
  }

  // A world whose members all share memory gets its arena from the
  // communicator: every peer maps it, and AllReduces on it read the peers'
  // gradients in place.
  // Local: each peer maps it at its first AllReduce that reads it. Should
  // the block fail (/dev/shm full), the arena is private and the
  // AllReduces take the rings.
  if (job->comm && job->comm->size() > 1 && options.shared_arena) {
    auto shared = job->comm->ShareMemory(root->arena_bytes());
    if (shared.ok() && !shared->data.empty()) {
      job->arena = PageBlock::Borrow(shared->data, std::move(shared->keep));
      job->arena_shared = true;
    }
  }
  if (!job->arena.data()) {
    SINKRT_ASSIGN_OR_RETURN(job->arena, PageBlock::Allocate(root->arena_bytes(), options.prefault));
  }
  if (root->queues())
    for (const fb::QueueSpec* spec : *root->queues()) {
      auto q = std::make_unique<DataQueue>();
      SINKRT_RETURN_IF_ERROR(q->Init(*spec, options.prefault));
      job->queues.push_back(std::move(q));
    }

  try {
    job->dnnl = std::make_unique<DnnlRuntime>();
    job->dnnl->engine = dnnl::engine(dnnl::engine::kind::cpu, 0);
    job->dnnl->stream = dnnl::stream(job->dnnl->engine);
  } catch (const dnnl::error& e) {
    return Internal(std::string("cannot create the oneDNN CPU engine: ") + e.what());
  }

  const bool team = job->threads > 1 && options.worker_team;
  if (team) {
    std::vector<int> cores;
    if (options.pin_threads) {
      cores = AllowedCores();
      if (!cores.empty()) job->pin_core = cores[0];
    }
    job->team = std::make_unique<WorkerTeam>(
        job->threads, std::chrono::duration_cast<std::chrono::nanoseconds>(options.worker_spin).count(),
        std::move(cores));
    try {
      job->dnnl->part_streams.push_back(job->dnnl->stream);
      for (int p = 1; p < job->threads; ++p) job->dnnl->part_streams.emplace_back(job->dnnl->engine);
    } catch (const dnnl::error& e) {
      return Internal(std::string("cannot create the oneDNN streams of the worker team: ") + e.what());
    }
  }
  PrepareContext pctx;
  pctx.dnnl = job->dnnl.get();
  pctx.team_size = team ? job->threads : 1;
  bool two_streams = false;
  if (root->programs())
    for (const fb::Program* p : *root->programs()) {
      auto k = static_cast<uint8_t>(p->kind());
      job->has_program[k] = true;
      SINKRT_RETURN_IF_ERROR(PrepareProgram(*job, p, pctx, &job->programs[k]));
      two_streams |= job->programs[k].num_streams > 1;
    }
  SINKRT_ASSIGN_OR_RETURN(job->scratch, PageBlock::Allocate(pctx.scratch_bytes, options.prefault));
  job->run_ctx.dnnl = job->dnnl.get();
  job->run_ctx.scratch = job->scratch.data();
  job->run_ctx.team = job->team.get();
  job->side_run_ctx = job->run_ctx;
  job->side_run_ctx.team = nullptr;
  if (two_streams) job->comm_stream = std::make_unique<CommStream>(*job);

  // Start the OpenMP team now: its first parallel region allocates.
  omp_set_num_threads(job->threads);
#pragma omp parallel
  { (void)omp_get_thread_num(); }

  job->positions.cells[0].Set(StreamState::kIdle);
  std::unique_ptr<Executor> ex(new Executor());
  ex->job_ = std::move(job);
  // From here on peers that time out waiting for this rank learn where it
  // is; ~Executor takes it back before the job goes.
  if (ex->job_->comm) ex->job_->comm->SetTaskPositions(&ex->job_->positions);
  SINKRT_RETURN_IF_ERROR(ex->RunInit());
  return ex;
}

Status Executor::RunInit() {
  RunStats stats;
  if (!job_->has_program[static_cast<uint8_t>(ProgramKind::Init)]) return Status::Ok();
  return Run(ProgramKind::Init, 1, &stats);
}

Status Executor::Run(ProgramKind kind, uint32_t steps, RunStats* stats) {
  LoadedJob& job = *job_;
  auto k = static_cast<uint8_t>(kind);
  if (k >= LoadedJob::kPrograms || !job.has_program[k])
    return NotFound("the loaded task stream has no " + std::string(ProgramKindName(kind)) + " program");
  PreparedProgram& prog = job.programs[k];
  // The OpenMP thread count is per calling thread: set it on whichever
  // thread drives this sink.
  omp_set_num_threads(job.threads);
  ScopedPin pin(job.pin_core);
  const int64_t t_start = NowNs();
  const bool comm_stream = prog.num_streams > 1;
  ProfileState& prof = job.profile;
  const bool profiling = prof.enabled && kind != ProgramKind::Init;
  if (profiling) {
    for (ProfileRing& ring : prof.rings) ring.written = 0;
    prof.recorded_steps = 0;
    prof.sink = {};
    prof.sink.kind = ProfileRecordKind::kSink;
    prof.sink.program = k;
    prof.sink.begin_ns = t_start + prof.clock_offset_ns;
    prof.sink.step = static_cast<uint32_t>(prof.steps[k]);
  }
  if (!comm_stream) job.positions.cells[1].where.store(0, std::memory_order_relaxed);  // another program's
  ZeroAccumulators(prog);  // a sink's sums start from zero (sink_accumulators.cc)
  Status result;
  for (uint32_t step = 0; step < steps && result.ok(); ++step) {
    prog.events->Reset();
    if (profiling) {
      const uint64_t global = prof.steps[k]++;
      prog.recording = prof.Records(global);
      prog.profile_step = static_cast<uint32_t>(global);
      prof.recorded_steps += prog.recording ? 1 : 0;
    }
    if (comm_stream) job.comm_stream->Start(prog, step, steps);
    StreamCounters c;
    Status st = prog.num_streams > 0 ? RunStreamStep(job, prog, 0, step, steps, &c) : Status::Ok();
    if (comm_stream) {
      if (!st.ok()) {
        // The comm stream may wait for an event this stream will not record,
        // or for peers inside a collective: release both. The job's world
        // is broken after this; the host reloads it.
        prog.events->Fail();
        if (job.comm) job.comm->Abort();
      }
      StreamCounters cc;
      Status comm_st = job.comm_stream->Finish(&cc);
      stats->comm_ns += cc.comm_ns;
      if (!comm_st.ok() && (st.ok() || st.code() == StatusCode::kAborted)) {  // an EventWait gave up: comm's cause wins
        st = comm_st;
        c.failed_task = cc.failed_task;
        stats->failed_stream = 1;
      }
    }
    stats->compute_ns += c.compute_ns;
    stats->queue_wait_ns += c.queue_wait_ns;
    stats->copy_ns += c.copy_ns;
    stats->comm_wait_ns += c.event_wait_ns;
    stats->bubble_ns += c.bubble_ns;
    if (!st.ok()) {
      stats->failed_task = c.failed_task;
      result = st;
      break;
    }
    ++stats->steps;
    // A job being torn down (its host left) stops between steps.
    if (job.cancelled.load(std::memory_order_relaxed) && step + 1 < steps)
      result = Aborted(std::string(ProgramKindName(kind)) + " cancelled after step " + std::to_string(step + 1) +
                       " of " + std::to_string(steps));
  }
  const int64_t t_end = NowNs();
  stats->wall_ns += t_end - t_start;
  if (profiling) {
    prog.recording = false;
    prof.sink.end_ns = t_end + prof.clock_offset_ns;
    prof.sink.depth = stats->steps + (result.ok() ? 0 : 1);  // a failed step ran too
    prof.sink.task = prof.recorded_steps;
  }
  if (result.ok())  // a failed stream keeps saying where it failed
    for (StreamPositionCell& c : job.positions.cells)
      if (c.where.load(std::memory_order_relaxed) != 0) c.Set(StreamState::kIdle);
  return result;
}

Status Executor::SetProfiling(const ProfileConfig& config) {
  uint32_t tasks[kProfileStreams] = {0, 0};
  for (int k = 0; k < LoadedJob::kPrograms; ++k) {
    if (!job_->has_program[k] || k == static_cast<int>(ProgramKind::Init)) continue;
    for (int s = 0; s < job_->programs[k].num_streams && s < kProfileStreams; ++s)
      tasks[s] = std::max(tasks[s], static_cast<uint32_t>(job_->programs[k].streams[s].size()));
  }
  job_->profile.clock_offset_ns = job_->options.profile_clock_offset_ns;
  return EnableProfiling(job_->profile, config, tasks);
}

Executor::ProfileView Executor::LastProfile() const {
  ProfileView v;
  const ProfileState& prof = job_->profile;
  if (!prof.enabled) return v;
  v.sink = prof.sink;
  for (int s = 0; s < kProfileStreams; ++s) prof.rings[s].Kept(&v.runs[2 * s]);
  return v;
}

bool Executor::profiling() const { return job_->profile.enabled; }

int64_t Executor::ProfileClockNs() const { return NowNs() + job_->options.profile_clock_offset_ns; }

std::vector<TaskTime> Executor::TaskTimes(ProgramKind kind) const {
  std::vector<TaskTime> out;
  auto k = static_cast<uint8_t>(kind);
  if (k >= LoadedJob::kPrograms || !job_->has_program[k]) return out;
  const PreparedProgram& prog = job_->programs[k];
  for (int s = 0; s < prog.num_streams; ++s)
    for (const PreparedTask& pt : prog.streams[s]) {
      TaskTime t;
      if (pt.def->name()) t.name = pt.def->name()->string_view();
      t.op =
          pt.kind == fb::TaskBody::KernelTask ? OpCodeName(pt.def->body_as_KernelTask()->op()) : TaskKindName(pt.kind);
      t.stream = s;
      t.ns = pt.ns;
      out.push_back(t);
    }
  return out;
}

std::vector<AllReduceBucket> Executor::AllReduceBuckets(ProgramKind kind) const {
  std::vector<AllReduceBucket> out;
  auto k = static_cast<uint8_t>(kind);
  if (!job_->comm || k >= LoadedJob::kPrograms || !job_->has_program[k]) return out;
  const PreparedProgram& prog = job_->programs[k];
  for (int s = 0; s < prog.num_streams; ++s)
    for (const PreparedTask& pt : prog.streams[s])
      if (pt.kind == fb::TaskBody::AllReduceTask)
        out.push_back(
            {pt.data.size(), job_->comm->AllReduceAlgorithm(pt.data.size(), pt.dtype, pt.group, job_->arena_shared)});
  return out;
}

void Executor::ResetTaskTimes() {
  for (PreparedProgram& prog : job_->programs)
    for (int s = 0; s < prog.num_streams; ++s)
      for (PreparedTask& pt : prog.streams[s]) pt.ns = 0;
}

const VerifiedStream& Executor::stream() const { return job_->stream; }
uint32_t Executor::num_queues() const { return static_cast<uint32_t>(job_->queues.size()); }
std::string_view Executor::queue_name(uint32_t index) const { return job_->queues[index]->name(); }
uint32_t Executor::queue_capacity(uint32_t index) const { return job_->queues[index]->capacity(); }
uint64_t Executor::queue_batch_bytes(uint32_t index) const {
  uint64_t n = 0;
  for (uint64_t b : job_->queues[index]->column_bytes()) n += b;
  return n;
}
uint32_t Executor::queued_batches(uint32_t index) const { return job_->queues[index]->size(); }
uint64_t Executor::arena_bytes() const { return job_->arena.size(); }
uint64_t Executor::scratch_bytes() const { return job_->scratch.size(); }
int Executor::threads() const { return job_->threads; }

Status Executor::PushBatch(uint32_t queue, std::span<const ConstBytes> columns) {
  if (queue >= job_->queues.size())
    return OutOfRange("queue index " + std::to_string(queue) + " is outside the stream's " +
                      std::to_string(job_->queues.size()) + " queues");
  return job_->queues[queue]->Push(columns, job_->options.push_timeout);
}

Status Executor::FillNextSlot(uint32_t queue, const SlotFiller& fill) {
  if (queue >= job_->queues.size())
    return OutOfRange("queue index " + std::to_string(queue) + " is outside the stream's " +
                      std::to_string(job_->queues.size()) + " queues");
  return job_->queues[queue]->FillNext(fill);
}

void Executor::SetOnSlotsFreed(std::function<void(uint32_t queue, uint32_t slots)> freed) {
  auto shared = std::make_shared<std::function<void(uint32_t, uint32_t)>>(std::move(freed));
  for (uint32_t q = 0; q < job_->queues.size(); ++q)
    job_->queues[q]->SetOnSlotsFreed([shared, q](uint32_t slots) { (*shared)(q, slots); });
}

Status Executor::ClearQueue(uint32_t queue) {
  if (queue >= job_->queues.size())
    return OutOfRange("queue index " + std::to_string(queue) + " is outside the stream's " +
                      std::to_string(job_->queues.size()) + " queues");
  job_->queues[queue]->Clear();
  return Status::Ok();
}

uint32_t Executor::queue_high_water_mark(uint32_t index) const { return job_->queues.at(index)->high_water_mark(); }

uint64_t Executor::queue_bytes() const {
  uint64_t n = 0;
  for (const auto& q : job_->queues) n += q->batch_bytes() * q->capacity();
  return n;
}

Result<std::span<uint8_t>> Executor::Buffer(uint32_t index) {
  const auto* buffers = job_->stream.root()->buffers();
  uint32_t n = buffers ? buffers->size() : 0;
  if (index >= n)
    return OutOfRange("buffer index " + std::to_string(index) + " is outside the buffer table (" + std::to_string(n) +
                      " buffers)");
  const fb::Buffer* b = buffers->Get(index);
  return std::span<uint8_t>(job_->arena.data() + b->offset(), b->bytes());
}

void Executor::CloseQueues() {
  for (auto& q : job_->queues) q->Close();
}

void Executor::Cancel() {
  job_->cancelled.store(true, std::memory_order_relaxed);
  CloseQueues();
  // A collective waiting on a peer wakes now instead of at the peer timeout.
  if (job_->comm) job_->comm->Abort();
}

}  // namespace sinkrt::device
