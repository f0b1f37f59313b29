#include "device/src/daemon/job_session.h"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "device/src/daemon/daemon_log.h"
#include "device/src/daemon/hangup_watch.h"
#include "runtime/src/clock.h"
#include "runtime/src/file_io.h"
#include "runtime/src/schema_enums.h"
#include "sinkrt/fb/task_stream_generated.h"
#include "sinkrt/runtime/task_stream_verifier.h"

namespace sinkrt::device {
namespace {

std::string MiB(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", bytes / 1048576.0);
  return buf;
}

std::string QueueName(const Executor& ex, uint32_t index) {
  const std::string_view name = ex.queue_name(index);
  return name.empty() ? "queue " + std::to_string(index) : "queue '" + std::string(name) + "'";
}

}  // namespace

JobSession::JobSession(const DaemonOptions& options, SinkWorker& worker, FrameSocket& socket, uint64_t job_id,
                       SessionCounters& counters, PeerHub& hub, uint16_t port, std::string host_id,
                       std::shared_ptr<const TlsContext> peer_tls)
    : options_(options),
      worker_(worker),
      socket_(socket),
      job_id_(job_id),
      counters_(counters),
      hub_(hub),
      port_(port),
      host_id_(std::move(host_id)),
      peer_tls_(std::move(peer_tls)),
      core_(options.device) {}

JobSession::~JobSession() { End(); }

Status JobSession::Serve() {
  InFrame frame;
  for (;;) {
    Status st = socket_.Receive(&frame);
    if (!st.ok()) {
      if (st.code() == StatusCode::kUnavailable) return st;  // the host left or the daemon is stopping
      return ProtocolError(st);                              // a malformed frame
    }
    if (frame.type() == fb::MessageBody::Shutdown) return Status::Ok();
    SINKRT_RETURN_IF_ERROR(Handle(frame));
  }
}

Status JobSession::Handle(InFrame& frame) {
  const fb::Message& m = *frame.message;
  switch (m.body_type()) {
    case fb::MessageBody::LoadProgram:
      return OnLoadProgram(frame);
    case fb::MessageBody::PushBatch:
      return OnPushBatch(frame);
    case fb::MessageBody::RunSink:
      return OnRunSink(*m.body_as_RunSink());
    case fb::MessageBody::ReadTensor:
      return OnReadTensor(*m.body_as_ReadTensor());
    case fb::MessageBody::WriteTensor:
      return OnWriteTensor(frame);
    case fb::MessageBody::ClearQueue:
      return OnClearQueue(*m.body_as_ClearQueue());
    case fb::MessageBody::JoinWorld:
      return OnJoinWorld(*m.body_as_JoinWorld());
    case fb::MessageBody::SetProfiling:
      return OnSetProfiling(*m.body_as_SetProfiling());
    case fb::MessageBody::ReadClock:
      return OnReadClock();
    case fb::MessageBody::Hello:
      return ProtocolError(FailedPrecondition("Hello after the handshake"));
    default:
      return ProtocolError(
          InvalidArgument(std::string(MessageName(m.body_type())) + " is a device's message; a host may not send it"));
  }
}

bool JobSession::SinkRunning() {
  std::lock_guard<std::mutex> lk(mu_);
  return sink_running_;
}

Status JobSession::OnLoadProgram(InFrame& frame) {
  if (SinkRunning()) return ProtocolError(FailedPrecondition("LoadProgram while a sink runs"));
  Unload();
  auto t0 = std::chrono::steady_clock::now();
  std::vector<uint8_t> bytes(frame.payload_left);
  SINKRT_RETURN_IF_ERROR(socket_.ReadPayload(&frame, bytes));
  // Bytes from the network: verified here, once, before anything reads them.
  // A stream with collectives runs them in the world joined before; the
  // executor refuses it, naming both, if there is none or another one.
  auto verified = VerifyTaskStream(std::move(bytes));
  auto loaded = verified.ok() ? core_.Load(std::move(verified).value()) : Result<LoadInfo>(verified.status());
  if (!loaded.ok()) {
    DaemonLog(options_.log, options_.rank,
              "job " + std::to_string(job_id_) + ": task stream refused: " + loaded.status().message());
    return ReplyError(loaded.status().WithContext("LoadProgram"));
  }
  // No batch is pushed nor a sink run before this thread goes on, so the
  // credits are wired in time.
  Executor& ex = *core_.job();
  if (!options_.profile_dir.empty()) StartOwnProfile(ex);
  next_sequence_.assign(ex.num_queues(), 0);
  ex.SetOnSlotsFreed([this](uint32_t queue, uint32_t slots) { SendCredit(queue, slots); });
  // Measured from the first byte read: what the host waited for.
  double load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

  flatbuffers::FlatBufferBuilder fbb(256);
  std::vector<uint32_t> capacity;
  for (uint32_t q = 0; q < ex.num_queues(); ++q) capacity.push_back(ex.queue_capacity(q));
  auto cap = fbb.CreateVector(capacity);
  std::vector<uint64_t> bucket_bytes;
  std::vector<flatbuffers::Offset<flatbuffers::String>> bucket_algorithms;
  for (const AllReduceBucket& b : loaded->allreduce_buckets) {
    bucket_bytes.push_back(b.bytes);
    bucket_algorithms.push_back(fbb.CreateString(b.algorithm));
  }
  auto bytes_vec = fbb.CreateVector(bucket_bytes);
  auto algorithms_vec = fbb.CreateVector(bucket_algorithms);
  const fb::Header* header = ex.stream().root()->header();
  uint64_t hash = header ? header->graph_hash() : 0;
  fb::LoadedBuilder lb(fbb);
  lb.add_arena_bytes(loaded->arena_bytes);
  lb.add_queue_bytes(loaded->queue_bytes);
  lb.add_load_ms(load_ms);
  lb.add_queue_capacity(cap);
  lb.add_graph_hash(hash);
  lb.add_allreduce_bytes(bytes_vec);
  lb.add_allreduce_algorithms(algorithms_vec);
  FinishMessage(fbb, fb::MessageBody::Loaded, lb.Finish().Union());
  char line[160];
  std::snprintf(line, sizeof line, "job %llu: loaded stream of %zu bytes (graph %016llx): arena %s, queues %s, %.1f ms",
                static_cast<unsigned long long>(job_id_), ex.stream().bytes().size(),
                static_cast<unsigned long long>(hash), MiB(loaded->arena_bytes).c_str(),
                MiB(loaded->queue_bytes).c_str(), load_ms);
  DaemonLog(options_.log, options_.rank, line);
  return socket_.Send(fbb);
}

Status JobSession::OnPushBatch(InFrame& frame) {
  Executor* ex = core_.job();
  if (!ex) return ProtocolError(FailedPrecondition("PushBatch before LoadProgram"));
  const fb::PushBatch& m = *frame.message->body_as_PushBatch();
  if (m.queue() >= ex->num_queues())
    return ProtocolError(OutOfRange("PushBatch to queue " + std::to_string(m.queue()) + ": the stream has " +
                                    std::to_string(ex->num_queues()) + " queues"));
  const uint64_t batch = ex->queue_batch_bytes(m.queue());
  if (frame.payload_left != batch)
    return ProtocolError(InvalidArgument("PushBatch to " + QueueName(*ex, m.queue()) + " carries " +
                                         std::to_string(frame.payload_left) + " bytes; a batch is " +
                                         std::to_string(batch) + " bytes"));
  if (m.sequence() != next_sequence_[m.queue()])
    return ProtocolError(InvalidArgument(
        "PushBatch to " + QueueName(*ex, m.queue()) + " has sequence " + std::to_string(m.sequence()) + ", expected " +
        std::to_string(next_sequence_[m.queue()]) + ": a batch was lost or sent twice"));
  // Straight from the socket into the slot: no staging copy.
  Status st = ex->FillNextSlot(m.queue(), [&](std::span<const std::span<uint8_t>> columns) {
    for (std::span<uint8_t> c : columns) SINKRT_RETURN_IF_ERROR(socket_.ReadPayload(&frame, c));
    return Status::Ok();
  });
  if (st.code() == StatusCode::kResourceExhausted)
    return ProtocolError(st.WithContext("flow control violated (the host pushed without a credit)"));
  ++next_sequence_[m.queue()];
  if (st.code() == StatusCode::kAborted) return socket_.SkipPayload(&frame);  // the job is being torn down
  return st;                                                                  // ok, or the connection broke mid-batch
}

Status JobSession::OnRunSink(const fb::RunSink& request) {
  if (!core_.job()) return ProtocolError(FailedPrecondition("RunSink before LoadProgram"));
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (sink_running_) return ProtocolError(FailedPrecondition("RunSink while a sink runs: one sink at a time"));
    sink_running_ = true;
    ++worker_tasks_;
  }
  fb::ProgramKind program = request.program();
  uint32_t steps = request.steps();
  worker_.Post([this, program, steps] { RunSinkOnWorker(program, steps); });
  return Status::Ok();
}

void JobSession::RunSinkOnWorker(fb::ProgramKind program, uint32_t steps) {
  SinkOutcome sink = core_.RunSink(FromFb(program), steps, options_.rank);
  sinks_ += 1;
  steps_ += sink.steps_run;
  flatbuffers::FlatBufferBuilder fbb(512);
  std::vector<std::span<const uint8_t>> payload;
  if (!sink.status.ok()) {
    BuildError(fbb, sink.status, sink.failure);
    bool ending;
    {
      std::lock_guard<std::mutex> lk(mu_);
      ending = ending_;
    }
    DaemonLog(options_.log, options_.rank,
              "job " + std::to_string(job_id_) + (ending ? ": sink stopped (the job is ending): " : ": sink failed: ") +
                  sink.status.message());
  } else {
    // The reported buffers go out as the frame's payload, straight from the arena.
    std::vector<flatbuffers::Offset<fb::ReportedBuffer>> reports;
    payload.reserve(sink.reports.size());
    for (const ReportView& r : sink.reports) {
      payload.push_back(r.bytes);
      reports.push_back(fb::CreateReportedBuffer(fbb, r.buffer, r.bytes.size()));
    }
    // The profile records follow the reports, straight from the rings.
    uint32_t profile_records = 0;
    if (sink.profile.sink.kind == ProfileRecordKind::kSink) {
      payload.push_back({reinterpret_cast<const uint8_t*>(&sink.profile.sink), sizeof(ProfileRecord)});
      for (std::span<const ProfileRecord> run : sink.profile.runs)
        if (!run.empty()) payload.push_back({reinterpret_cast<const uint8_t*>(run.data()), run.size_bytes()});
      profile_records = static_cast<uint32_t>(1 + sink.profile.records());
    }
    auto rv = fbb.CreateVector(reports);
    auto hw = fbb.CreateVector(sink.queue_high_water);
    fb::SinkDoneBuilder sb(fbb);
    sb.add_queue_high_water(hw);
    sb.add_steps_run(sink.steps_run);
    sb.add_reports(rv);
    sb.add_compute_ms(sink.timing.compute_ms);
    sb.add_comm_ms(sink.timing.comm_ms);
    sb.add_comm_wait_ms(sink.timing.comm_wait_ms);
    sb.add_bubble_ms(sink.timing.bubble_ms);
    sb.add_queue_wait_ms(sink.timing.queue_wait_ms);
    sb.add_other_ms(sink.timing.other_ms);
    sb.add_profile_records(profile_records);
    FinishMessage(fbb, fb::MessageBody::SinkDone, sb.Finish().Union());
  }
  // Before the answer: once it is out, a SetProfiling may resize the rings.
  if (!profile_path_.empty() && sink.profile.sink.kind == ProfileRecordKind::kSink) AppendOwnProfile(sink.profile);
  bool answer;
  {
    // The sink is over before its answer leaves: the host may send its next
    // request the moment it has read SinkDone, possibly before Send returns
    // here. A next sink queues behind this task on the worker, so the
    // reported buffers below are sent straight from the arena unchanged.
    std::lock_guard<std::mutex> lk(mu_);
    sink_running_ = false;
    answer = !ending_;
  }
  if (answer) (void)socket_.Send(fbb, payload);
  // Notify under the lock: once Unload sees no task left it may destroy this
  // session, condition variable included.
  std::lock_guard<std::mutex> lk(mu_);
  --worker_tasks_;
  sink_done_cv_.notify_all();
}

Status JobSession::OnReadTensor(const fb::ReadTensor& request) {
  Executor* ex = core_.job();
  if (!ex) return ProtocolError(FailedPrecondition("ReadTensor before LoadProgram"));
  if (SinkRunning()) return ProtocolError(FailedPrecondition("ReadTensor while a sink runs"));
  auto bytes = ex->Buffer(request.buffer());
  if (!bytes.ok()) return ReplyError(bytes.status().WithContext("ReadTensor"));
  flatbuffers::FlatBufferBuilder fbb(64);
  fb::TensorDataBuilder tb(fbb);
  tb.add_buffer(request.buffer());
  FinishMessage(fbb, fb::MessageBody::TensorData, tb.Finish().Union());
  std::span<const uint8_t> payload[1] = {*bytes};
  return socket_.Send(fbb, payload);
}

Status JobSession::OnWriteTensor(InFrame& frame) {
  Executor* ex = core_.job();
  if (!ex) return ProtocolError(FailedPrecondition("WriteTensor before LoadProgram"));
  if (SinkRunning()) return ProtocolError(FailedPrecondition("WriteTensor while a sink runs"));
  uint32_t index = frame.message->body_as_WriteTensor()->buffer();
  auto bytes = ex->Buffer(index);
  Status bad;
  if (!bytes.ok())
    bad = bytes.status();
  else if (bytes->size() != frame.payload_left)
    bad = InvalidArgument("buffer " + std::to_string(index) + " holds " + std::to_string(bytes->size()) +
                          " bytes, got " + std::to_string(frame.payload_left));
  if (!bad.ok()) {
    SINKRT_RETURN_IF_ERROR(socket_.SkipPayload(&frame));
    return ReplyError(bad.WithContext("WriteTensor"));
  }
  SINKRT_RETURN_IF_ERROR(socket_.ReadPayload(&frame, *bytes));
  flatbuffers::FlatBufferBuilder fbb(32);
  FinishMessage(fbb, fb::MessageBody::Ack, fb::CreateAck(fbb).Union());
  return socket_.Send(fbb);
}

Status JobSession::OnClearQueue(const fb::ClearQueue& request) {
  Executor* ex = core_.job();
  if (!ex) return ProtocolError(FailedPrecondition("ClearQueue before LoadProgram"));
  if (SinkRunning()) return ProtocolError(FailedPrecondition("ClearQueue while a sink runs"));
  Status st = ex->ClearQueue(request.queue());  // the freed slots go back as Credit first
  if (!st.ok()) return ReplyError(st.WithContext("ClearQueue"));
  flatbuffers::FlatBufferBuilder fbb(32);
  FinishMessage(fbb, fb::MessageBody::Ack, fb::CreateAck(fbb).Union());
  return socket_.Send(fbb);
}

Result<std::vector<PeerAddress>> JobSession::WorldOf(const WorldSpec& spec) const {
  // A TLS daemon dials its peers with TLS and verifies their certificates
  // against its CA; without one it could only trust them blindly.
  if (options_.tls.enabled() && !options_.tls_plain_peers && !peer_tls_ && spec.members.size() > 1)
    return FailedPrecondition(
        "this sinkd uses TLS (--tls-cert) without --tls-ca, so it cannot verify the other "
        "daemons of a world: start every daemon with --tls-ca (the CA that signed their "
        "certificates), or with --tls-plain-peers to keep the links between daemons plain");
  SINKRT_ASSIGN_OR_RETURN(std::vector<PeerAddress> world, PeersOf(spec));
  // This rank's own entry must be this daemon: otherwise its peers dial
  // someone else for it and fail with a confusing rank mismatch there.
  const PeerAddress& self = world[spec.rank];
  if (self.address.port != port_ || (!self.host_id.empty() && self.host_id != host_id_))
    return InvalidArgument("member " + std::to_string(spec.rank) + " is this device, but its entry names " +
                           self.address.ToString() + " (host id '" + self.host_id + "'); this sinkd listens on port " +
                           std::to_string(port_) + " (host id '" + host_id_ + "')");
  return world;
}

Status JobSession::OnJoinWorld(const fb::JoinWorld& request) {
  if (SinkRunning()) return ProtocolError(FailedPrecondition("JoinWorld while a sink runs"));
  WorldSpec spec;
  spec.job = request.job();
  spec.rank = request.rank();
  if (request.members())
    for (const fb::WorldMember* m : *request.members())
      spec.members.push_back({m->address() ? m->address()->str() : "", m->host_id() ? m->host_id()->str() : ""});
  if (request.groups()) {
    spec.groups.emplace();
    for (const fb::WorldGroup* g : *request.groups()) {
      GroupUse use;
      if (g->ranks()) use.ranks.assign(g->ranks()->begin(), g->ranks()->end());
      use.uses = g->uses();
      spec.groups->push_back(std::move(use));
    }
  }
  const uint64_t job = spec.job;
  const uint32_t rank = spec.rank;
  const auto n = static_cast<uint32_t>(spec.members.size());
  const std::string what = JoinWorldLabel(spec);
  auto world = WorldOf(spec);
  if (!world.ok()) return ReplyError(world.status().WithContext(what));

  // The loaded job may run collectives in the old world: both go first.
  End();
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<PeerHub::Claim> claim = hub_.ClaimJob(job);
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (aborted_) claim->Abort();  // the daemon stopped before the claim existed
    joining_ = claim.get();
  }
  // Daemon::Start handed its peer and rendezvous timeouts to the device options.
  CommOptions comm_options = CommOptionsOf(options_.device);
  comm_options.token = options_.token;
  comm_options.tls = peer_tls_;
  comm_options.groups = std::move(spec.groups);
  Result<std::unique_ptr<Communicator>> created = Internal("no rendezvous");
  {
    // Nobody reads the host's connection while the rendezvous blocks this
    // thread: a host that hangs up meanwhile abandons the claim, so this
    // daemon is free again within a dial slice, not at the peer timeout.
    PeerHub::Claim* c = claim.get();
    HangupWatch watch(socket_.native_handle(), [c] { c->Abort(); });
    created = Communicator::Create(rank, std::move(world).value(), job, *claim, comm_options);
  }
  claim->set_outcome(created.ok() ? "the world is complete" : "the JoinWorld failed: " + created.status().message());
  {
    std::lock_guard<std::mutex> lk(mu_);
    joining_ = nullptr;
  }
  claim.reset();  // drops the job's connections the rendezvous did not take
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (!created.ok()) {
    DaemonLog(options_.log, options_.rank,
              "job " + std::to_string(job_id_) + ": " + what + " failed: " + created.status().message());
    return ReplyError(created.status().WithContext(what));
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    core_.SetWorld(std::move(created).value());
    if (aborted_) core_.AbortWorld();
  }

  flatbuffers::FlatBufferBuilder fbb(256);
  std::vector<std::string> transports;
  std::string shm, tcp;
  for (uint32_t r = 0; r < n; ++r) {
    transports.push_back(r == rank ? "self" : core_.world()->TransportName(r));
    if (r == rank || transports.back() == "none") continue;
    std::string& list = transports.back() == "shm" ? shm : tcp;
    list += (list.empty() ? "" : " ") + std::to_string(r);
  }
  auto tv = fbb.CreateVectorOfStrings(transports);
  fb::JoinedBuilder jb(fbb);
  jb.add_ms(ms);
  jb.add_transports(tv);
  FinishMessage(fbb, fb::MessageBody::Joined, jb.Finish().Union());
  char line[96];
  std::snprintf(line, sizeof line, " in %.1f ms", ms);
  DaemonLog(options_.log, options_.rank,
            "job " + std::to_string(job_id_) + ": joined world " + std::to_string(job) + " as rank " +
                std::to_string(rank) + " of " + std::to_string(n) + " (shm ranks " + (shm.empty() ? "none" : shm) +
                ", tcp ranks " + (tcp.empty() ? "none" : tcp) + "; " + std::to_string(core_.world()->connections()) +
                " connections, " + std::to_string(core_.world()->shm_connections()) + " shm)" + line);
  return socket_.Send(fbb);
}

Status JobSession::OnSetProfiling(const fb::SetProfiling& request) {
  Executor* ex = core_.job();
  if (!ex) return ProtocolError(FailedPrecondition("SetProfiling before LoadProgram"));
  if (SinkRunning()) return ProtocolError(FailedPrecondition("SetProfiling while a sink runs"));
  ProfileConfig config;
  config.enabled = request.enabled() || !options_.profile_dir.empty();  // sinkd --profile records anyway
  config.start_step = request.start_step();
  config.stop_step = request.stop_step();
  config.every = request.every();
  config.keep_steps = request.keep_steps();
  Status st = ex->SetProfiling(config);
  if (!st.ok()) return ReplyError(st.WithContext("SetProfiling"));
  DaemonLog(options_.log, options_.rank,
            "job " + std::to_string(job_id_) +
                (config.enabled ? ": profiling on (keeping " + std::to_string(config.keep_steps) + " steps per sink)"
                                : ": profiling off"));
  flatbuffers::FlatBufferBuilder fbb(32);
  FinishMessage(fbb, fb::MessageBody::Ack, fb::CreateAck(fbb).Union());
  return socket_.Send(fbb);
}

void JobSession::StartOwnProfile(Executor& ex) {
  profile_path_.clear();
  const std::string base =
      options_.profile_dir + "/rank" + std::to_string(options_.rank) + "-job" + std::to_string(job_id_);
  std::error_code ec;
  std::filesystem::create_directories(options_.profile_dir, ec);
  Status st = ec ? Internal("cannot create " + options_.profile_dir + ": " + ec.message())
                 : WriteFileBytes(base + ".tstream", ex.stream().bytes());
  if (st.ok()) st = WriteFileBytes(base + ".records", {});
  if (st.ok()) st = ex.SetProfiling(ProfileConfig{.enabled = true});
  if (!st.ok()) {
    DaemonLog(options_.log, options_.rank, "job " + std::to_string(job_id_) + ": not profiling: " + st.message());
    return;
  }
  profile_path_ = base + ".records";
}

void JobSession::AppendOwnProfile(const Executor::ProfileView& view) {
  // The first failure's errno says why (a full disk: ENOSPC).
  int err = 0;
  const auto failed = [&err](bool bad) {
    if (bad && err == 0) err = errno != 0 ? errno : EIO;
    return bad;
  };
  errno = 0;
  std::FILE* f = std::fopen(profile_path_.c_str(), "ab");
  bool ok = !failed(!f) && !failed(std::fwrite(&view.sink, sizeof view.sink, 1, f) != 1);
  for (std::span<const ProfileRecord> run : view.runs)
    ok = ok && !failed(!run.empty() && std::fwrite(run.data(), sizeof(ProfileRecord), run.size(), f) != run.size());
  if (f) ok = !failed(std::fclose(f) != 0) && ok;
  if (!ok) {
    DaemonLog(options_.log, options_.rank,
              "job " + std::to_string(job_id_) + ": cannot append to " + profile_path_ + ": " + std::strerror(err) +
                  "; profiling to the directory stops");
    profile_path_.clear();
  }
}

Status JobSession::OnReadClock() {
  const int64_t now = NowNs() + options_.device.profile_clock_offset_ns;
  flatbuffers::FlatBufferBuilder fbb(32);
  FinishMessage(fbb, fb::MessageBody::ClockReading, fb::CreateClockReading(fbb, now).Union());
  return socket_.Send(fbb);
}

void JobSession::SendCredit(uint32_t queue, uint32_t slots) {
  flatbuffers::FlatBufferBuilder fbb(64);
  FinishMessage(fbb, fb::MessageBody::Credit, fb::CreateCredit(fbb, queue, slots).Union());
  (void)socket_.Send(fbb);  // a dead host is noticed by the reader
}

Status JobSession::ReplyError(const Status& status, const ErrorContext& context) {
  ErrorContext ctx = context;
  ctx.rank = options_.rank;
  flatbuffers::FlatBufferBuilder fbb(256);
  BuildError(fbb, status, ctx);
  return socket_.Send(fbb);
}

Status JobSession::ProtocolError(const Status& status) {
  counters_.protocol_errors.fetch_add(1);
  (void)ReplyError(status.WithContext("protocol error"));
  return status.WithContext("protocol error");
}

void JobSession::Abort(const Status& why) {
  (void)ReplyError(why);
  {
    std::lock_guard<std::mutex> lk(mu_);
    ending_ = true;  // the Error above is the host's answer
    aborted_ = true;
    if (joining_) joining_->Abort();
    core_.Abort();  // a sink or an init blocked in a collective or a queue wakes
  }
  socket_.Shutdown();
}

void JobSession::End() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    ending_ = true;  // a sink the world's abort fails answers nobody (StopSink waits for it)
  }
  core_.End([this] { StopSink(); });
  next_sequence_.clear();
}

void JobSession::Unload() {
  core_.Unload([this] { StopSink(); });
  next_sequence_.clear();
}

void JobSession::StopSink() {
  std::unique_lock<std::mutex> lk(mu_);
  ending_ = true;
  if (sink_running_) core_.CancelJob();
  sink_done_cv_.wait(lk, [&] { return worker_tasks_ == 0; });
  ending_ = false;  // a LoadProgram may follow (it unloads the old job first)
}

}  // namespace sinkrt::device
