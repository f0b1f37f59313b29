#include "device/src/device_core.h"

#include <chrono>
#include <utility>

namespace sinkrt::device {
namespace {

// The name of the task that failed, from the stream it failed in (compute
// or comm): the executor's counters give its index there.
std::string FailedTaskName(const Executor& ex, ProgramKind program, const RunStats& stats) {
  const fb::Program* p = ex.stream().FindProgram(program);
  const auto stream = static_cast<uint32_t>(stats.failed_stream);
  if (!p || stats.failed_task < 0 || !p->streams() || stream >= p->streams()->size()) return "";
  const auto* tasks = p->streams()->Get(stream)->tasks();
  if (!tasks || static_cast<uint32_t>(stats.failed_task) >= tasks->size()) return "";
  const fb::Task* task = tasks->Get(stats.failed_task);
  return task->name() ? task->name()->str() : "";
}

}  // namespace

Result<std::vector<PeerAddress>> PeersOf(const WorldSpec& world) {
  const size_t n = world.members.size();
  if (n == 0) return InvalidArgument("the world has no members");
  if (world.rank >= n)
    return InvalidArgument("rank " + std::to_string(world.rank) + " is outside a world of " + std::to_string(n) +
                           " members");
  std::vector<PeerAddress> peers;
  peers.reserve(n);
  for (uint32_t r = 0; r < n; ++r) {
    const PeerEndpoint& m = world.members[r];
    SINKRT_ASSIGN_OR_RETURN(const Address address, ParseAddress(m.address),
                            "member " + std::to_string(r) + "'s address '" + m.address + "'");
    peers.push_back({r, address, m.host_id});
  }
  return peers;
}

std::string JoinWorldLabel(const WorldSpec& world) {
  return "JoinWorld of job " + std::to_string(world.job) + " as rank " + std::to_string(world.rank) + " of " +
         std::to_string(world.members.size());
}

CommOptions CommOptionsOf(const DeviceOptions& options) {
  CommOptions comm;
  comm.peer_timeout = options.peer_timeout;
  comm.rendezvous_timeout = options.rendezvous_timeout;
  comm.use_shared_memory = options.shared_memory;
  comm.small_allreduce_bytes = options.small_allreduce_bytes;
  comm.pair_allreduce_bytes = options.pair_allreduce_bytes;
  comm.token = options.token;
  // No arena shared, no AllReduce that could read one: skip even the
  // arrival that would find out.
  if (!options.shared_arena) comm.direct_allreduce_bytes = SIZE_MAX;
  comm.hierarchical_allreduce = options.hierarchical_allreduce;
  return comm;
}

Result<LoadInfo> DeviceCore::Load(VerifiedStream stream, const StopSink& stop_sink) {
  const auto t0 = std::chrono::steady_clock::now();
  Unload(stop_sink);
  SINKRT_ASSIGN_OR_RETURN(std::unique_ptr<Executor> loaded, Executor::Load(std::move(stream), options_, world_.get()));
  LoadInfo info;
  info.arena_bytes = loaded->arena_bytes() + loaded->scratch_bytes();
  info.queue_bytes = loaded->queue_bytes();
  info.allreduce_buckets = loaded->AllReduceBuckets(ProgramKind::TrainStep);
  {
    std::lock_guard<std::mutex> lk(mu_);
    job_ = std::move(loaded);
  }
  info.load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return info;
}

void DeviceCore::SetWorld(std::unique_ptr<Communicator> world) {
  // The front end End()ed the old world before its rendezvous; should one
  // be left, it goes the usual way, after its job.
  if (world_) End();
  std::lock_guard<std::mutex> lk(mu_);
  world_ = std::move(world);
}

SinkOutcome DeviceCore::RunSink(ProgramKind program, uint32_t steps, int rank) {
  Executor& ex = *job_;
  SinkOutcome out;
  RunStats stats;
  out.status = ex.Run(program, steps, &stats);
  out.steps_run = stats.steps;
  out.timing = TimingOf(stats);
  out.queue_high_water.reserve(ex.num_queues());
  for (uint32_t q = 0; q < ex.num_queues(); ++q) out.queue_high_water.push_back(ex.queue_high_water_mark(q));
  if (!out.status.ok()) {
    out.failure.rank = rank;
    out.failure.program = std::string(ProgramKindName(program));
    out.failure.task = stats.failed_task;
    out.failure.task_name = FailedTaskName(ex, program, stats);
    return out;
  }
  if (ex.profiling()) out.profile = ex.LastProfile();
  const VerifiedStream& stream = ex.stream();
  const fb::Program* p = stream.FindProgram(program);
  if (p && p->reports()) {
    out.reports.reserve(p->reports()->size());
    for (uint32_t index : *p->reports()) {
      auto bytes = ex.Buffer(index);
      if (!bytes.ok()) continue;  // verified at load; cannot happen
      out.reports.push_back({index, stream.root()->buffers()->Get(index), *bytes});
    }
  }
  return out;
}

void DeviceCore::Unload(const StopSink& stop_sink) {
  if (stop_sink) stop_sink();
  std::unique_ptr<Executor> old;
  {
    std::lock_guard<std::mutex> lk(mu_);
    old = std::move(job_);
  }
  old.reset();  // unmaps the arena and the queue slots
}

void DeviceCore::End(const StopSink& stop_sink) {
  AbortWorld();
  Unload(stop_sink);
  std::unique_ptr<Communicator> old;
  {
    std::lock_guard<std::mutex> lk(mu_);
    old = std::move(world_);
  }
  old.reset();  // closes the peer links: the other members' next wait fails naming this rank
}

void DeviceCore::AbortWorld() {
  std::lock_guard<std::mutex> lk(mu_);
  if (world_) world_->Abort();
}

void DeviceCore::CancelJob() {
  std::lock_guard<std::mutex> lk(mu_);
  if (job_) job_->Cancel();
}

void DeviceCore::Abort() {
  AbortWorld();
  CancelJob();
}

}  // namespace sinkrt::device
