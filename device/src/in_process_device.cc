#include "sinkrt/device/in_process_device.h"

#include <chrono>
#include <cstring>

#include "data_queue.h"
#include "sinkrt/fb/task_stream_generated.h"
#include "sinkrt/device/communicator.h"
#include "sinkrt/device/executor.h"
#include "sinkrt/device/listening_inbox.h"

namespace sinkrt::device {

InProcessDevice::InProcessDevice(DeviceOptions options) : options_(std::move(options)) {}
InProcessDevice::~InProcessDevice() {
  // A collective of the job may be waiting on a peer: wake it before the
  // executor (and then the world) goes.
  if (comm_) comm_->Abort();
  executor_.reset();
  comm_.reset();
}

Result<PeerEndpoint> InProcessDevice::Endpoint() {
  if (!inbox_) {
    SINKRT_ASSIGN_OR_RETURN(inbox_, ListeningInbox::Start(options_.effective_rendezvous_timeout()));
  }
  return PeerEndpoint{inbox_->address().ToString(), LocalHostId()};
}

Status InProcessDevice::JoinWorld(const WorldSpec& world) {
  const size_t n = world.members.size();
  if (n == 0) return InvalidArgument("JoinWorld: the world has no members");
  if (world.rank >= n)
    return InvalidArgument("JoinWorld: rank " + std::to_string(world.rank) + " is outside a world of " +
                           std::to_string(n) + " devices");
  if (!inbox_) SINKRT_RETURN_IF_ERROR(Endpoint().status());
  std::vector<PeerAddress> peers;
  for (size_t r = 0; r < n; ++r) {
    SINKRT_ASSIGN_OR_RETURN(const Address address, ParseAddress(world.members[r].address),
                            "JoinWorld: member " + std::to_string(r) + "'s address");
    peers.push_back({static_cast<uint32_t>(r), address, world.members[r].host_id});
  }
  if (comm_) comm_->Abort();
  executor_.reset();
  comm_.reset();
  CommOptions options;
  options.peer_timeout = options_.peer_timeout;
  options.rendezvous_timeout = options_.rendezvous_timeout;
  options.use_shared_memory = options_.shared_memory;
  SINKRT_ASSIGN_OR_RETURN(comm_, Communicator::Create(world.rank, std::move(peers), world.job, *inbox_, options));
  return Status::Ok();
}

Result<LoadInfo> InProcessDevice::Load(const VerifiedStream& stream) {
  auto t0 = std::chrono::steady_clock::now();
  executor_.reset();
  SINKRT_ASSIGN_OR_RETURN(executor_, Executor::Load(stream, options_, comm_.get()));
  LoadInfo info;
  info.arena_bytes = executor_->arena_bytes() + executor_->scratch_bytes();
  info.queue_bytes = executor_->queue_bytes();
  info.load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return info;
}

Status InProcessDevice::PushBatch(uint32_t queue, std::span<const ConstBytes> columns) {
  if (!executor_) return FailedPrecondition("PushBatch before a task stream was loaded");
  return executor_->PushBatch(queue, columns);
}

Status InProcessDevice::ClearQueue(uint32_t queue) {
  if (!executor_) return FailedPrecondition("ClearQueue before a task stream was loaded");
  return executor_->ClearQueue(queue);
}

Result<SinkResult> InProcessDevice::RunSink(ProgramKind program, uint32_t steps) {
  ++round_trips_;
  if (!executor_) return FailedPrecondition("RunSink before a task stream was loaded");
  RunStats stats;
  SINKRT_RETURN_IF_ERROR(executor_->Run(program, steps, &stats));
  SinkResult r;
  r.steps_run = stats.steps;
  r.timing = TimingOf(stats);
  for (uint32_t q = 0; q < executor_->num_queues(); ++q) r.queue_high_water.push_back(executor_->queue_high_water_mark(q));
  const VerifiedStream& stream = executor_->stream();
  const fb::Program* p = stream.FindProgram(program);
  if (p && p->reports())
    for (uint32_t index : *p->reports()) {
      const fb::Buffer* b = stream.root()->buffers()->Get(index);
      ReportedTensor t;
      t.buffer = index;
      t.name = b->name() ? b->name()->str() : "";
      t.dtype = b->dtype();
      if (b->shape()) t.shape.assign(b->shape()->begin(), b->shape()->end());
      SINKRT_ASSIGN_OR_RETURN(std::span<uint8_t> bytes, executor_->Buffer(index));
      t.data.assign(bytes.begin(), bytes.end());
      r.reports.push_back(std::move(t));
    }
  return r;
}

Result<std::vector<uint8_t>> InProcessDevice::ReadTensor(uint32_t buffer) {
  if (!executor_) return FailedPrecondition("ReadTensor before a task stream was loaded");
  SINKRT_ASSIGN_OR_RETURN(std::span<uint8_t> bytes, executor_->Buffer(buffer));
  return std::vector<uint8_t>(bytes.begin(), bytes.end());
}

Status InProcessDevice::WriteTensor(uint32_t buffer, ConstBytes bytes) {
  if (!executor_) return FailedPrecondition("WriteTensor before a task stream was loaded");
  SINKRT_ASSIGN_OR_RETURN(std::span<uint8_t> dst, executor_->Buffer(buffer));
  if (dst.size() != bytes.size())
    return InvalidArgument("WriteTensor: buffer " + std::to_string(buffer) + " holds " + std::to_string(dst.size()) +
                           " bytes, got " + std::to_string(bytes.size()));
  std::memcpy(dst.data(), bytes.data(), bytes.size());
  return Status::Ok();
}

}  // namespace sinkrt::device
