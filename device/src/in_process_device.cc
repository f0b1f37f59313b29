#include "sinkrt/device/in_process_device.h"

#include <condition_variable>
#include <cstring>
#include <mutex>
#include <vector>

#include "device/src/comm/rendezvous/listening_inbox.h"
#include "device/src/device_core.h"
#include "runtime/src/clock.h"
#include "runtime/src/schema_enums.h"

namespace sinkrt::device {

// The executor only offers a non-waiting fill (FillNextSlot); a FillBatch
// that finds its queue full waits here until the job frees a slot (the
// executor's slots-freed callback) or ClearQueue stops it, as a PushBatch
// waits inside the queue.
struct InProcessDevice::FreeSlots {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<uint64_t> clears;  // per queue of the loaded job: ClearQueue calls
};

InProcessDevice::InProcessDevice(DeviceOptions options)
    : options_(std::move(options)),
      free_slots_(std::make_unique<FreeSlots>()),
      core_(std::make_unique<DeviceCore>(options_)) {}
// The core goes first (its teardown aborts the world, then frees the job
// and the world): the world's links came through the inbox.
InProcessDevice::~InProcessDevice() { core_.reset(); }

Executor* InProcessDevice::executor() { return core_->job(); }

int InProcessDevice::threads() const {
  const Executor* job = core_->job();
  return job ? job->threads() : 0;
}

Status InProcessDevice::MakePeerTls() {
  const TlsConfig& tls = options_.tls;
  if (!tls.enabled() || options_.tls_plain_peers) return Status::Ok();
  // Both ends of every link: each member accepts some peers and dials the others.
  if (tls.cert_file.empty() || tls.key_file.empty() || tls.ca_file.empty())
    return InvalidArgument(
        "in-process device: TLS between peers needs a certificate, its key and the CA "
        "(SINKRT_TLS_CERT, SINKRT_TLS_KEY, SINKRT_TLS_CA), or SINKRT_TLS_PLAIN_PEERS=1 for plain "
        "links");
  SINKRT_ASSIGN_OR_RETURN(tls_server_, MakeTlsContext(tls, TlsRole::kServer), "in-process device");
  SINKRT_ASSIGN_OR_RETURN(tls_client_, MakeTlsContext(tls, TlsRole::kClient), "in-process device");
  return Status::Ok();
}

Result<PeerEndpoint> InProcessDevice::Endpoint() {
  if (!inbox_) {
    if (!IsLoopback(options_.listen_host) && options_.token.empty())
      return InvalidArgument("in-process device: listening for peers on " + options_.listen_host +
                             " lets other machines join its world: set DeviceOptions::token (SINKRT_TOKEN)");
    SINKRT_RETURN_IF_ERROR(MakePeerTls());
    SINKRT_ASSIGN_OR_RETURN(inbox_, ListeningInbox::Start(options_.effective_rendezvous_timeout(), options_.listen_host,
                                                          options_.token, tls_server_));
  }
  return PeerEndpoint{inbox_->address().ToString(), options_.host_id.empty() ? LocalHostId() : options_.host_id};
}

Status InProcessDevice::JoinWorld(const WorldSpec& world) {
  const std::string what = JoinWorldLabel(world);
  SINKRT_ASSIGN_OR_RETURN(std::vector<PeerAddress> peers, PeersOf(world), what);
  if (!inbox_) SINKRT_RETURN_IF_ERROR(Endpoint().status());
  // The loaded job may run collectives in the old world: both go first.
  core_->End();
  CommOptions comm_options = CommOptionsOf(options_);
  comm_options.groups = world.groups;
  comm_options.tls = tls_client_;
  SINKRT_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm,
                          Communicator::Create(world.rank, std::move(peers), world.job, *inbox_, comm_options), what);
  core_->SetWorld(std::move(comm));
  return Status::Ok();
}

Result<LoadInfo> InProcessDevice::Load(const VerifiedStream& stream) {
  SINKRT_ASSIGN_OR_RETURN(LoadInfo info, core_->Load(stream));
  // Before any push or sink, as SetOnSlotsFreed requires; no feeder runs
  // during Load.
  Executor* job = core_->job();
  {
    std::lock_guard<std::mutex> lk(free_slots_->mu);
    free_slots_->clears.assign(job->num_queues(), 0);
  }
  FreeSlots* slots = free_slots_.get();
  job->SetOnSlotsFreed([slots](uint32_t, uint32_t) {
    // Under the lock: a waiter between its check and its sleep must not
    // miss this.
    std::lock_guard<std::mutex> lk(slots->mu);
    slots->cv.notify_all();
  });
  return info;
}

Status InProcessDevice::PushBatch(uint32_t queue, std::span<const ConstBytes> columns) {
  Executor* job = core_->job();
  if (!job) return FailedPrecondition("PushBatch before a task stream was loaded");
  return job->PushBatch(queue, columns);
}

Status InProcessDevice::FillBatch(uint32_t queue, const BatchFiller& fill) {
  Executor* job = core_->job();
  if (!job) return FailedPrecondition("FillBatch before a task stream was loaded");
  if (queue >= job->num_queues())
    return OutOfRange("queue index " + std::to_string(queue) + " is outside the stream's " +
                      std::to_string(job->num_queues()) + " queues");
  FreeSlots& f = *free_slots_;
  {
    std::unique_lock<std::mutex> lk(f.mu);
    const uint64_t clears = f.clears[queue];
    // One feeder per queue: a free slot seen here is still free below, since
    // only the consumer moves and it only frees slots.
    const bool ready = f.cv.wait_for(lk, options_.push_timeout, [&] {
      return f.clears[queue] != clears || job->queued_batches(queue) < job->queue_capacity(queue);
    });
    if (f.clears[queue] != clears) return Aborted("queue " + std::to_string(queue) + " was cleared");
    if (!ready)
      return DeadlineExceeded("queue " + std::to_string(queue) + " stayed full for " +
                              std::to_string(options_.push_timeout.count()) +
                              " ms: the device is not consuming batches");
  }
  // A ClearQueue from here on is caught by the queue itself: the slot is
  // not published and this returns kAborted.
  return job->FillNextSlot(queue, fill);
}

Status InProcessDevice::ClearQueue(uint32_t queue) {
  Executor* job = core_->job();
  if (!job) return FailedPrecondition("ClearQueue before a task stream was loaded");
  {
    std::lock_guard<std::mutex> lk(free_slots_->mu);
    if (queue < free_slots_->clears.size()) ++free_slots_->clears[queue];
    free_slots_->cv.notify_all();
  }
  return job->ClearQueue(queue);
}

Result<SinkResult> InProcessDevice::RunSink(ProgramKind program, uint32_t steps) {
  ++round_trips_;
  if (!core_->job()) return FailedPrecondition("RunSink before a task stream was loaded");
  // In a world, the failure names this device's rank, as a daemon's does.
  const Communicator* world = core_->world();
  SinkOutcome sink = core_->RunSink(program, steps, world ? static_cast<int>(world->rank()) : -1);
  if (!sink.status.ok())
    return sink.failure.rank >= 0 ? sink.status.WithContext("rank " + std::to_string(sink.failure.rank)) : sink.status;
  SinkResult r;
  r.steps_run = sink.steps_run;
  r.timing = sink.timing;
  r.queue_high_water = std::move(sink.queue_high_water);
  r.reports.reserve(sink.reports.size());
  for (const ReportView& view : sink.reports) {
    ReportedTensor t;
    t.buffer = view.buffer;
    t.name = view.def->name() ? view.def->name()->str() : "";
    t.dtype = FromFb(view.def->dtype());
    if (view.def->shape()) t.shape.assign(view.def->shape()->begin(), view.def->shape()->end());
    t.data.assign(view.bytes.begin(), view.bytes.end());
    r.reports.push_back(std::move(t));
  }
  if (sink.profile.sink.kind == ProfileRecordKind::kSink) {
    r.profile.reserve(1 + sink.profile.records());
    r.profile.push_back(sink.profile.sink);
    for (std::span<const ProfileRecord> run : sink.profile.runs)
      r.profile.insert(r.profile.end(), run.begin(), run.end());
  }
  return r;
}

Status InProcessDevice::SetProfiling(const ProfileConfig& config) {
  Executor* job = core_->job();
  if (!job) return FailedPrecondition("SetProfiling before a task stream was loaded");
  return job->SetProfiling(config);
}

Result<int64_t> InProcessDevice::ReadClock() { return NowNs() + options_.profile_clock_offset_ns; }

Result<std::vector<uint8_t>> InProcessDevice::ReadTensor(uint32_t buffer) {
  Executor* job = core_->job();
  if (!job) return FailedPrecondition("ReadTensor before a task stream was loaded");
  SINKRT_ASSIGN_OR_RETURN(std::span<uint8_t> bytes, job->Buffer(buffer));
  return std::vector<uint8_t>(bytes.begin(), bytes.end());
}

Status InProcessDevice::WriteTensor(uint32_t buffer, ConstBytes bytes) {
  Executor* job = core_->job();
  if (!job) return FailedPrecondition("WriteTensor before a task stream was loaded");
  SINKRT_ASSIGN_OR_RETURN(std::span<uint8_t> dst, job->Buffer(buffer));
  if (dst.size() != bytes.size())
    return InvalidArgument("WriteTensor: buffer " + std::to_string(buffer) + " holds " + std::to_string(dst.size()) +
                           " bytes, got " + std::to_string(bytes.size()));
  std::memcpy(dst.data(), bytes.data(), bytes.size());
  return Status::Ok();
}

}  // namespace sinkrt::device
