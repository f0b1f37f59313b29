#include "sinkrt/host/remote_device.h"

#include <atomic>
#include <cstring>
#include <mutex>
#include <vector>

#include "host/src/link/remote/remote_connection.h"
#include "host/src/util/schema_enums.h"
#include "runtime/src/env.h"
#include "runtime/src/wire.h"
#include "sinkrt/fb/task_stream_generated.h"
#include "sinkrt/runtime/task_stream_verifier.h"

namespace sinkrt::host {
namespace {

// The bytes a queue column occupies, as the device sizes its slots.
uint64_t ColumnBytes(const fb::QueueColumn& c) {
  std::vector<int64_t> dims;
  if (c.shape()) dims.assign(c.shape()->begin(), c.shape()->end());
  int64_t n = NumElements(dims);
  return n < 0 ? 0 : static_cast<uint64_t>(n) * DTypeSize(c.dtype());
}

struct BufferInfo {
  std::string name;
  DType dtype = DType::Invalid;
  Shape shape;
  uint64_t bytes = 0;
};

}  // namespace

struct RemoteDevice::State {
  std::unique_ptr<RemoteConnection> conn;
  // Control requests (Load, RunSink, ClearQueue, ReadTensor, WriteTensor,
  // JoinWorld) share the connection's one reply slot: one at a time. It
  // also guards what they alone read and write: the epoch and buffers.
  std::mutex control_mu;
  uint32_t sink_epoch = 0;
  std::vector<BufferInfo> buffers;  // of the loaded task stream
  std::atomic<uint64_t> round_trips{0};
  mutable std::mutex transports_mu;
  std::vector<std::string> transports;  // of the last Joined

  // Ends the loaded job on the connection and forgets its buffers; the
  // caller holds control_mu.
  Status EndJob(const std::string& during) {
    SINKRT_RETURN_IF_ERROR(conn->EndJob(during));
    buffers.clear();
    return Status::Ok();
  }
};

RemoteDevice::RemoteDevice(std::unique_ptr<State> state) : state_(std::move(state)) {}

Result<std::unique_ptr<RemoteDevice>> RemoteDevice::Connect(const Address& address, RemoteOptions options) {
  // Checked here as well as in Model::Create: connecting comes first, and
  // SINKRT_CONNECT_TIMEOUT_MS=abc would otherwise mean a silent 120 s wait.
  SINKRT_RETURN_IF_ERROR(CheckEnvironment(), "connecting to " + ConnectTarget(address, options));
  auto state = std::make_unique<State>();
  SINKRT_ASSIGN_OR_RETURN(state->conn, RemoteConnection::Open(address, std::move(options)));
  return std::unique_ptr<RemoteDevice>(new RemoteDevice(std::move(state)));
}

RemoteDevice::~RemoteDevice() = default;  // the connection ends the session

Result<LoadInfo> RemoteDevice::Load(const VerifiedStream& verified) {
  const ConstBytes stream = verified.bytes();
  State& s = *state_;
  RemoteConnection& c = *s.conn;
  std::lock_guard<std::mutex> control(s.control_mu);
  // The old job ends here, as in-process (RemoteConnection::EndJob).
  SINKRT_RETURN_IF_ERROR(s.EndJob("Load"));

  flatbuffers::FlatBufferBuilder fbb(64);
  FinishMessage(fbb, fb::MessageBody::LoadProgram, fb::CreateLoadProgram(fbb, stream.size()).Union());
  const ConstBytes pieces[] = {stream};
  const std::string what = "Load(" + std::to_string(stream.size()) + "-byte task stream)";
  SINKRT_ASSIGN_OR_RETURN(Reply r, c.Request(fbb, pieces, fb::MessageBody::Loaded, what, c.options.reply_timeout));
  const fb::Loaded* loaded = r.get()->body_as_Loaded();

  // The host reads the buffer and queue tables that name reports and size
  // batches from its own verified copy; the daemon verified what it received.
  const fb::TaskStream* root = verified.root();
  std::vector<BufferInfo> buffers;
  if (root->buffers())
    for (const fb::Buffer* b : *root->buffers()) {
      BufferInfo info;
      info.name = b->name() ? b->name()->str() : "";
      info.dtype = FromFb(b->dtype());
      if (b->shape()) info.shape.assign(b->shape()->begin(), b->shape()->end());
      info.bytes = b->bytes();
      buffers.push_back(std::move(info));
    }
  const uint32_t num_queues = root->queues() ? root->queues()->size() : 0;
  const uint32_t num_capacities = loaded->queue_capacity() ? loaded->queue_capacity()->size() : 0;
  if (num_capacities != num_queues)
    return Internal(c.who + ": Loaded gives " + std::to_string(num_capacities) +
                    " queue capacities, the task stream has " + std::to_string(num_queues) + " queues");
  std::vector<std::shared_ptr<QueueState>> queues;
  for (uint32_t i = 0; i < num_queues; ++i) {
    const fb::QueueSpec* spec = root->queues()->Get(i);
    auto q = std::make_shared<QueueState>();
    q->name = spec->name() ? spec->name()->str() : "";
    if (spec->columns())
      for (const fb::QueueColumn* col : *spec->columns()) q->column_bytes.push_back(ColumnBytes(*col));
    q->credits = loaded->queue_capacity()->Get(i);
    queues.push_back(std::move(q));
  }
  {
    std::lock_guard<std::mutex> lk(c.mu);
    s.buffers = std::move(buffers);
    c.queues = std::move(queues);
    c.loaded = true;
  }
  LoadInfo info;
  info.arena_bytes = loaded->arena_bytes();
  info.queue_bytes = loaded->queue_bytes();
  info.load_ms = loaded->load_ms();
  // Bytes from the network: the two lists pair up only when equally long.
  if (loaded->allreduce_bytes() && loaded->allreduce_algorithms() &&
      loaded->allreduce_bytes()->size() == loaded->allreduce_algorithms()->size())
    for (uint32_t i = 0; i < loaded->allreduce_bytes()->size(); ++i)
      info.allreduce_buckets.push_back(
          {loaded->allreduce_bytes()->Get(i), loaded->allreduce_algorithms()->Get(i)->str()});
  return info;
}

namespace {

// The queue a push goes to and the job it belongs to, or why there is none.
Status PushTarget(RemoteConnection& c, uint32_t queue, std::shared_ptr<QueueState>* q, uint64_t* job) {
  std::lock_guard<std::mutex> lk(c.mu);
  if (c.lost) return c.LostStatus();
  if (!c.loaded) return FailedPrecondition("PushBatch before a task stream was loaded");
  *job = c.job;
  if (queue >= c.queues.size())
    return OutOfRange("queue index " + std::to_string(queue) + " is outside the stream's " +
                      std::to_string(c.queues.size()) + " queues");
  *q = c.queues[queue];
  return Status::Ok();
}

// Takes a credit (waiting for one) and sends the frame; the caller holds
// q.push_mu and has checked the columns' sizes.
Status SendBatch(RemoteConnection& c, uint32_t queue, QueueState& qs, uint64_t job,
                 std::span<const ConstBytes> columns) {
  QueueState* q = &qs;
  uint64_t sequence;
  {
    std::unique_lock<std::mutex> lk(c.mu);
    const uint64_t generation = q->generation;
    if (c.lost) return c.LostStatus();
    if (c.job != job) return Aborted("queue '" + q->name + "': the task stream was replaced by a new Load");
    // A push that starts during a ClearQueue waits for its Ack and then goes
    // ahead, as if it had started after the clear.
    auto ready = [&] {
      return c.lost || c.job != job || q->generation != generation || (!q->clearing && q->credits > 0);
    };
    if (!c.queue_cv.wait_for(lk, Sane(c.options.push_timeout), ready))
      return DeadlineExceeded(c.who + ": queue '" + q->name + "' stayed full for " + Ms(c.options.push_timeout) +
                              ": the device is not consuming batches");
    if (c.lost) return c.LostStatus("PushBatch(queue '" + q->name + "')");
    if (c.job != job) return Aborted("queue '" + q->name + "': the task stream was replaced by a new Load");
    if (q->generation != generation) return Aborted("queue '" + q->name + "' was cleared");
    --q->credits;
    sequence = q->next_sequence++;
    ++q->sending;
    ++c.sending;
  }
  q->fbb.Clear();
  FinishMessage(q->fbb, fb::MessageBody::PushBatch, fb::CreatePushBatch(q->fbb, queue, sequence).Union());
  Status st = c.socket->Send(q->fbb, columns);
  std::lock_guard<std::mutex> lk(c.mu);
  --q->sending;
  --c.sending;
  c.queue_cv.notify_all();
  if (!st.ok()) {
    // A frame cut off mid-way leaves the stream unusable.
    c.LoseLocked(st.message());
    return c.LostStatus("PushBatch(queue '" + q->name + "')");
  }
  return Status::Ok();
}

}  // namespace

Status RemoteDevice::PushBatch(uint32_t queue, std::span<const ConstBytes> columns) {
  std::shared_ptr<QueueState> q;
  uint64_t job;
  SINKRT_RETURN_IF_ERROR(PushTarget(*state_->conn, queue, &q, &job));
  // The daemon treats a mis-sized batch as a protocol violation and drops the
  // connection; checked here it is an ordinary error, as in-process.
  if (columns.size() != q->column_bytes.size())
    return InvalidArgument("queue '" + q->name + "': batch has " + std::to_string(columns.size()) +
                           " columns, expected " + std::to_string(q->column_bytes.size()));
  for (size_t c = 0; c < columns.size(); ++c)
    if (columns[c].size() != q->column_bytes[c])
      return InvalidArgument("queue '" + q->name + "': column " + std::to_string(c) + " has " +
                             std::to_string(columns[c].size()) + " bytes, expected " +
                             std::to_string(q->column_bytes[c]));
  std::lock_guard<std::mutex> producer(q->push_mu);
  return SendBatch(*state_->conn, queue, *q, job, columns);
}

// The batch is built into the frame's payload buffer before a credit is
// taken: a credit then never waits on the pipeline, and a fill that fails
// sends nothing.
Status RemoteDevice::FillBatch(uint32_t queue, const BatchFiller& fill) {
  std::shared_ptr<QueueState> q;
  uint64_t job;
  SINKRT_RETURN_IF_ERROR(PushTarget(*state_->conn, queue, &q, &job));
  std::lock_guard<std::mutex> producer(q->push_mu);
  const size_t columns = q->column_bytes.size();
  if (q->fill_spans.size() != columns) {
    uint64_t total = 0;
    for (uint64_t b : q->column_bytes) total += b;
    q->payload.resize(total);
    q->fill_spans.resize(columns);
    q->send_spans.resize(columns);
    uint8_t* p = q->payload.data();
    for (size_t c = 0; c < columns; ++c) {
      q->fill_spans[c] = std::span<uint8_t>(p, q->column_bytes[c]);
      q->send_spans[c] = q->fill_spans[c];
      p += q->column_bytes[c];
    }
  }
  SINKRT_RETURN_IF_ERROR(fill(q->fill_spans));
  return SendBatch(*state_->conn, queue, *q, job, q->send_spans);
}

Status RemoteDevice::ClearQueue(uint32_t queue) {
  State& s = *state_;
  RemoteConnection& c = *s.conn;
  std::lock_guard<std::mutex> control(s.control_mu);
  std::shared_ptr<QueueState> q;
  {
    std::unique_lock<std::mutex> lk(c.mu);
    if (c.lost) return c.LostStatus();
    if (!c.loaded) return FailedPrecondition("ClearQueue before a task stream was loaded");
    if (queue >= c.queues.size())
      return OutOfRange("queue index " + std::to_string(queue) + " is outside the stream's " +
                        std::to_string(c.queues.size()) + " queues");
    q = c.queues[queue];
    ++q->generation;
    q->clearing = true;
    c.queue_cv.notify_all();
    // A push that already holds a credit must reach the wire before
    // ClearQueue, so the daemon's clear drops its batch too.
    if (!c.queue_cv.wait_for(lk, Sane(c.options.reply_timeout), [&] { return q->sending == 0 || c.lost; })) {
      q->clearing = false;
      c.LoseLocked("a batch send stalled for " + Ms(c.options.reply_timeout));
      return DeadlineExceeded(c.who + ": a batch for queue '" + q->name + "' did not leave within " +
                              Ms(c.options.reply_timeout) + "; the connection was closed");
    }
  }
  flatbuffers::FlatBufferBuilder fbb(64);
  FinishMessage(fbb, fb::MessageBody::ClearQueue, fb::CreateClearQueue(fbb, queue).Union());
  // The daemon credits the dropped batches before its Ack, and the reader
  // handles frames in order, so the credits are whole when this returns.
  auto r = c.Request(fbb, {}, fb::MessageBody::Ack, "ClearQueue(queue '" + q->name + "')", c.options.reply_timeout);
  {
    std::lock_guard<std::mutex> lk(c.mu);
    q->clearing = false;
    c.queue_cv.notify_all();
  }
  return r.ok() ? Status::Ok() : r.status();
}

Result<SinkResult> RemoteDevice::RunSink(ProgramKind program, uint32_t steps) {
  State& s = *state_;
  RemoteConnection& c = *s.conn;
  ++s.round_trips;
  std::lock_guard<std::mutex> control(s.control_mu);
  uint32_t epoch;
  {
    std::lock_guard<std::mutex> lk(c.mu);
    if (c.lost) return c.LostStatus();
    if (!c.loaded) return FailedPrecondition("RunSink before a task stream was loaded");
    epoch = ++s.sink_epoch;
  }
  flatbuffers::FlatBufferBuilder fbb(64);
  FinishMessage(fbb, fb::MessageBody::RunSink, fb::CreateRunSink(fbb, ToFb(program), steps, epoch).Union());
  const std::string what =
      "RunSink(" + std::string(ProgramKindName(program)) + ", " + std::to_string(steps) + " steps)";
  SINKRT_ASSIGN_OR_RETURN(Reply r, c.Request(fbb, {}, fb::MessageBody::SinkDone, what, c.options.sink_timeout));

  const fb::SinkDone* done = r.get()->body_as_SinkDone();
  SinkResult out;
  out.steps_run = done->steps_run();
  out.timing.compute_ms = done->compute_ms();
  out.timing.comm_ms = done->comm_ms();
  out.timing.comm_wait_ms = done->comm_wait_ms();
  out.timing.bubble_ms = done->bubble_ms();  // 0 from a 1.2 daemon
  out.timing.queue_wait_ms = done->queue_wait_ms();
  out.timing.other_ms = done->other_ms();
  if (const auto* hw = done->queue_high_water()) out.queue_high_water.assign(hw->begin(), hw->end());
  uint64_t offset = 0;
  if (done->reports())
    for (const fb::ReportedBuffer* rb : *done->reports()) {
      // buffers changes only in Load, which control_mu keeps out.
      if (rb->buffer() >= s.buffers.size())
        return Internal(c.who + ": SinkDone reports buffer " + std::to_string(rb->buffer()) +
                        ", outside the task stream's " + std::to_string(s.buffers.size()) + " buffers");
      if (rb->bytes() > r.payload.size() - offset) return Internal(c.who + ": SinkDone's reports overrun its payload");
      const BufferInfo& b = s.buffers[rb->buffer()];
      ReportedTensor t;
      t.buffer = rb->buffer();
      t.name = b.name;
      t.dtype = b.dtype;
      t.shape = b.shape;
      t.data.assign(r.payload.begin() + offset, r.payload.begin() + offset + rb->bytes());
      offset += rb->bytes();
      out.reports.push_back(std::move(t));
    }
  // The payload rule (wire.cc) has checked that the records fill the rest.
  if (const uint32_t n = done->profile_records()) {
    out.profile.resize(n);
    std::memcpy(out.profile.data(), r.payload.data() + offset, size_t{n} * sizeof(ProfileRecord));
  }
  return out;
}

namespace {

// Profiling came with protocol 1.2.
Status NeedsProfilerProtocol(const RemoteConnection& c, const std::string& what) {
  if (c.hello.protocol_minor >= 2) return Status::Ok();
  return Unimplemented(c.who + ": the daemon speaks protocol " + std::to_string(kProtocolMajor) + "." +
                       std::to_string(c.hello.protocol_minor) + " (" + c.hello.software + "); " + what + " needs 1.2");
}

}  // namespace

Status RemoteDevice::SetProfiling(const ProfileConfig& config) {
  State& s = *state_;
  RemoteConnection& c = *s.conn;
  SINKRT_RETURN_IF_ERROR(NeedsProfilerProtocol(c, "profiling"));
  std::lock_guard<std::mutex> control(s.control_mu);
  {
    std::lock_guard<std::mutex> lk(c.mu);
    if (c.lost) return c.LostStatus();
    if (!c.loaded) return FailedPrecondition("SetProfiling before a task stream was loaded");
  }
  flatbuffers::FlatBufferBuilder fbb(64);
  FinishMessage(
      fbb, fb::MessageBody::SetProfiling,
      fb::CreateSetProfiling(fbb, config.enabled, config.start_step, config.stop_step, config.every, config.keep_steps)
          .Union());
  auto r = c.Request(fbb, {}, fb::MessageBody::Ack,
                     std::string("SetProfiling(") + (config.enabled ? "on" : "off") + ")", c.options.reply_timeout);
  return r.ok() ? Status::Ok() : r.status();
}

void RemoteDevice::SetCreditObserver(std::function<void(uint32_t queue, uint32_t slots)> observer) {
  RemoteConnection& c = *state_->conn;
  auto shared =
      observer ? std::make_shared<const std::function<void(uint32_t, uint32_t)>>(std::move(observer)) : nullptr;
  std::lock_guard<std::mutex> lk(c.mu);
  c.credit_observer = std::move(shared);
}

Result<int64_t> RemoteDevice::ReadClock() {
  State& s = *state_;
  RemoteConnection& c = *s.conn;
  SINKRT_RETURN_IF_ERROR(NeedsProfilerProtocol(c, "reading the device clock"));
  std::lock_guard<std::mutex> control(s.control_mu);
  flatbuffers::FlatBufferBuilder fbb(32);
  FinishMessage(fbb, fb::MessageBody::ReadClock, fb::CreateReadClock(fbb).Union());
  SINKRT_ASSIGN_OR_RETURN(Reply r,
                          c.Request(fbb, {}, fb::MessageBody::ClockReading, "ReadClock", c.options.reply_timeout));
  return r.get()->body_as_ClockReading()->device_ns();
}

Result<std::vector<uint8_t>> RemoteDevice::ReadTensor(uint32_t buffer) {
  State& s = *state_;
  RemoteConnection& c = *s.conn;
  std::lock_guard<std::mutex> control(s.control_mu);
  uint64_t bytes;
  std::string name;
  {
    std::lock_guard<std::mutex> lk(c.mu);
    if (c.lost) return c.LostStatus();
    if (!c.loaded) return FailedPrecondition("ReadTensor before a task stream was loaded");
    if (buffer >= s.buffers.size())
      return OutOfRange("buffer index " + std::to_string(buffer) + " is outside the buffer table (" +
                        std::to_string(s.buffers.size()) + " buffers)");
    bytes = s.buffers[buffer].bytes;
    name = s.buffers[buffer].name;
  }
  flatbuffers::FlatBufferBuilder fbb(64);
  FinishMessage(fbb, fb::MessageBody::ReadTensor, fb::CreateReadTensor(fbb, buffer).Union());
  const std::string what = "ReadTensor(buffer " + std::to_string(buffer) + " '" + name + "')";
  SINKRT_ASSIGN_OR_RETURN(Reply r, c.Request(fbb, {}, fb::MessageBody::TensorData, what, c.options.reply_timeout));
  const fb::TensorData* data = r.get()->body_as_TensorData();
  if (data->buffer() != buffer || r.payload.size() != bytes)
    return Internal(c.who + ": " + what + " was answered with buffer " + std::to_string(data->buffer()) + " of " +
                    std::to_string(r.payload.size()) + " bytes, expected " + std::to_string(bytes));
  return std::move(r.payload);
}

Status RemoteDevice::WriteTensor(uint32_t buffer, ConstBytes bytes) {
  State& s = *state_;
  RemoteConnection& c = *s.conn;
  std::lock_guard<std::mutex> control(s.control_mu);
  std::string name;
  {
    std::lock_guard<std::mutex> lk(c.mu);
    if (c.lost) return c.LostStatus();
    if (!c.loaded) return FailedPrecondition("WriteTensor before a task stream was loaded");
    if (buffer >= s.buffers.size())
      return OutOfRange("buffer index " + std::to_string(buffer) + " is outside the buffer table (" +
                        std::to_string(s.buffers.size()) + " buffers)");
    if (s.buffers[buffer].bytes != bytes.size())
      return InvalidArgument("WriteTensor: buffer " + std::to_string(buffer) + " holds " +
                             std::to_string(s.buffers[buffer].bytes) + " bytes, got " + std::to_string(bytes.size()));
    name = s.buffers[buffer].name;
  }
  flatbuffers::FlatBufferBuilder fbb(64);
  FinishMessage(fbb, fb::MessageBody::WriteTensor, fb::CreateWriteTensor(fbb, buffer).Union());
  const ConstBytes pieces[] = {bytes};
  const std::string what = "WriteTensor(buffer " + std::to_string(buffer) + " '" + name + "')";
  auto r = c.Request(fbb, pieces, fb::MessageBody::Ack, what, c.options.reply_timeout);
  return r.ok() ? Status::Ok() : r.status();
}

Result<PeerEndpoint> RemoteDevice::Endpoint() {
  const RemoteConnection& c = *state_->conn;
  // A 1.0 daemon neither names its machine nor understands JoinWorld.
  if (c.hello.protocol_minor < 1 || c.hello.host_id.empty())
    return Unimplemented(c.who + ": the daemon speaks protocol " + std::to_string(kProtocolMajor) + "." +
                         std::to_string(c.hello.protocol_minor) + " (" + c.hello.software +
                         "); joining a world of devices needs 1.1");
  return PeerEndpoint{c.address.ToString(), c.hello.host_id};
}

Status RemoteDevice::JoinWorld(const WorldSpec& world) {
  State& s = *state_;
  RemoteConnection& c = *s.conn;
  SINKRT_RETURN_IF_ERROR(Endpoint().status());
  const std::string what = "JoinWorld(job " + std::to_string(world.job) + ", rank " + std::to_string(world.rank) +
                           " of " + std::to_string(world.members.size()) + ")";
  if (world.rank >= world.members.size())
    return InvalidArgument(c.who + ": " + what + ": the rank is outside the member list");
  std::lock_guard<std::mutex> control(s.control_mu);
  // The daemon unloads the job to join, as a Load would (a batch after
  // JoinWorld would be a protocol error there).
  SINKRT_RETURN_IF_ERROR(s.EndJob(what));
  {
    std::lock_guard<std::mutex> lk(s.transports_mu);
    s.transports.clear();
  }
  flatbuffers::FlatBufferBuilder fbb(256);
  std::vector<flatbuffers::Offset<fb::WorldMember>> members;
  for (const PeerEndpoint& m : world.members)
    members.push_back(fb::CreateWorldMember(fbb, fbb.CreateString(m.address), fbb.CreateString(m.host_id)));
  auto mv = fbb.CreateVector(members);
  // Absent, not empty, when unset: the daemon then connects every pair.
  flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<fb::WorldGroup>>> gv = 0;
  if (world.groups) {
    std::vector<flatbuffers::Offset<fb::WorldGroup>> groups;
    for (const GroupUse& g : *world.groups)
      groups.push_back(fb::CreateWorldGroup(fbb, fbb.CreateVector(g.ranks), g.uses));
    gv = fbb.CreateVector(groups);
  }
  FinishMessage(fbb, fb::MessageBody::JoinWorld, fb::CreateJoinWorld(fbb, world.job, world.rank, mv, gv).Union());
  // Every member blocks until the last one has joined; the daemon gives up
  // after its rendezvous timeout and says which members never came.
  bool daemon_error = false;
  auto r = c.Request(fbb, {}, fb::MessageBody::Joined, what, c.options.join_timeout(), &daemon_error);
  // The daemon's Error names its rank and the members that did not come;
  // the address is added here. Local failures name both already.
  if (!r.ok()) return daemon_error ? r.status().WithContext(c.address.ToString()) : r.status();
  const fb::Joined* joined = r->get()->body_as_Joined();
  std::vector<std::string> transports;
  if (joined->transports())
    for (const flatbuffers::String* t : *joined->transports()) transports.push_back(t->str());
  if (transports.size() != world.members.size())
    return Internal(c.who + ": " + what + " was answered with " + std::to_string(transports.size()) +
                    " transports for " + std::to_string(world.members.size()) + " members");
  std::lock_guard<std::mutex> lk(s.transports_mu);
  s.transports = std::move(transports);
  return Status::Ok();
}

std::vector<std::string> RemoteDevice::transports() const {
  std::lock_guard<std::mutex> lk(state_->transports_mu);
  return state_->transports;
}

uint64_t RemoteDevice::control_round_trips() const { return state_->round_trips.load(); }
const DeviceHello& RemoteDevice::hello() const { return state_->conn->hello; }
const Address& RemoteDevice::address() const { return state_->conn->address; }

}  // namespace sinkrt::host
