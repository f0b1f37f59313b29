#include "sinkrt/host/remote_device.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <new>
#include <optional>
#include <system_error>
#include <thread>
#include <vector>

#include "sinkrt/fb/task_stream_generated.h"
#include "sinkrt/runtime/env.h"
#include "sinkrt/runtime/task_stream_verifier.h"
#include "sinkrt/runtime/wire.h"
#include "sinkrt/runtime/wire_socket.h"

namespace sinkrt::host {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

#ifndef SINKRT_VERSION_STRING
#define SINKRT_VERSION_STRING "0.1.0"
#endif
constexpr const char* kSoftware = "sinkrt " SINKRT_VERSION_STRING;

// After Shutdown the daemon frees the job and closes; waiting for that close
// means the device is free when the destructor returns, so the next host to
// connect is not refused as busy. Bounded: a stuck daemon must not hang the host.
constexpr milliseconds kCloseWait{5000};

std::string Ms(milliseconds d) { return std::to_string(d.count()) + " ms"; }

// Bounds come from the environment and may be absurd; condition_variable
// would overflow the clock on them.
milliseconds Sane(milliseconds d) { return std::min(d, milliseconds(std::chrono::hours(24 * 365 * 10))); }

// The bytes a queue column occupies, as the device sizes its slots.
uint64_t ColumnBytes(const fb::QueueColumn& c) {
  std::vector<int64_t> dims;
  if (c.shape()) dims.assign(c.shape()->begin(), c.shape()->end());
  int64_t n = NumElements(dims);
  return n < 0 ? 0 : static_cast<uint64_t>(n) * DTypeSize(c.dtype());
}

Result<DeviceHello> Handshake(FrameSocket& socket, const Address& address, fb::PeerRole role, int rank,
                              const std::string& token, milliseconds timeout) {
  const std::string where = address.ToString();
  flatbuffers::FlatBufferBuilder fbb(256);
  auto hello = fb::CreateHello(fbb, kProtocolMajor, kProtocolMinor, role, rank, fbb.CreateString(token),
                               fbb.CreateString(kSoftware));
  FinishMessage(fbb, fb::MessageBody::Hello, hello.Union());
  SINKRT_RETURN_IF_ERROR(socket.Send(fbb), "handshake with " + where);

  InFrame frame;
  Status st = socket.Receive(&frame, DeadlineIn(Sane(timeout)));
  if (st.code() == StatusCode::kDeadlineExceeded)
    return DeadlineExceeded("no Hello from " + where + " within " + Ms(timeout) +
                            " (is a sinkd daemon listening there?)");
  if (!st.ok()) return st.WithContext("handshake with " + where);
  if (frame.type() == fb::MessageBody::Error)
    return StatusFromError(*frame.message->body_as_Error()).WithContext(where);
  if (frame.type() != fb::MessageBody::Hello)
    return Unavailable(where + ": expected a Hello from the daemon, got " + MessageName(frame.type()));

  const fb::Hello* h = frame.message->body_as_Hello();
  if (h->role() != fb::PeerRole::Device)
    return FailedPrecondition(where + ": the peer is not a sinkd daemon (its Hello has role " +
                              std::to_string(int(h->role())) + ")");
  if (h->protocol_major() != kProtocolMajor)
    return FailedPrecondition(where + ": the daemon speaks protocol " + std::to_string(h->protocol_major()) + "." +
                              std::to_string(h->protocol_minor()) + ", this host " + std::to_string(kProtocolMajor) +
                              "." + std::to_string(kProtocolMinor));
  DeviceHello out;
  out.rank = h->rank();
  out.busy = h->busy();
  out.cores = h->cores();
  out.pid = h->pid();
  out.software = h->software() ? h->software()->str() : "";
  out.protocol_minor = h->protocol_minor();
  out.host_id = h->host_id() ? h->host_id()->str() : "";
  return out;
}

struct BufferInfo {
  std::string name;
  DType dtype = DType::Invalid;
  Shape shape;
  uint64_t bytes = 0;
};

// Shared with pushers by pointer, so a Load that replaces the queue table
// cannot free one under a push still finishing on the old job.
struct QueueState {
  std::string name;
  std::vector<uint64_t> column_bytes;
  uint64_t credits = 0;        // free device slots this host may fill
  uint64_t next_sequence = 0;
  uint64_t generation = 0;     // bumped by ClearQueue: pushes waiting from before it abort
  bool clearing = false;       // between a ClearQueue's start and its Ack
  uint32_t sending = 0;        // pushes that hold a credit and are on their way to the wire
  std::mutex push_mu;          // one push per queue at a time: sequences reach the wire in order
  flatbuffers::FlatBufferBuilder fbb{64};  // reused under push_mu
};

struct Reply {
  fb::MessageBody type = fb::MessageBody::NONE;
  std::vector<uint8_t> message;  // verified by the reader
  std::vector<uint8_t> payload;

  const fb::Message* get() const { return fb::GetMessage(message.data()); }
};

}  // namespace

struct RemoteDevice::State {
  Address address;
  RemoteOptions options;
  DeviceHello hello;
  std::string who;  // "rank 0 (127.0.0.1:7100)"
  std::unique_ptr<FrameSocket> socket;
  std::thread reader;
  std::atomic<uint64_t> round_trips{0};

  // Control requests (Load, RunSink, ClearQueue, ReadTensor, WriteTensor)
  // have one reply slot: at most one may be outstanding.
  std::mutex control_mu;

  // Everything below is guarded by mu; nothing is sent while holding it.
  std::mutex mu;
  std::condition_variable reply_cv;  // reply slot, connection loss, reader exit
  std::condition_variable queue_cv;  // credits, clears, sends finishing, job changes, connection loss
  std::optional<std::string> lost;   // why the connection is gone; set once, first reason wins
  bool reader_done = false;
  bool awaiting = false;
  fb::MessageBody expect = fb::MessageBody::NONE;
  std::optional<Reply> reply;
  bool loaded = false;
  uint64_t job = 0;          // bumped by every Load: pushes for the old job abort
  uint32_t sending = 0;      // pushes on their way to the wire, all queues
  uint32_t sink_epoch = 0;
  std::vector<std::shared_ptr<QueueState>> queues;
  std::vector<BufferInfo> buffers;  // written only under control_mu and mu
  std::vector<std::string> transports;  // of the last Joined

  // Records why the connection ended and wakes every waiter. The socket is
  // shut down so that the reader, and a send blocked on a full socket, wake too.
  void LoseLocked(std::string reason) {
    if (!lost) lost = std::move(reason);
    socket->Shutdown();
    reply_cv.notify_all();
    queue_cv.notify_all();
  }
  void Lose(std::string reason) {
    std::lock_guard<std::mutex> lk(mu);
    LoseLocked(std::move(reason));
  }

  // `during`: the request that was waiting when the connection went.
  Status LostStatus(const std::string& during = "") const {
    return Unavailable(who + ": connection lost" + (during.empty() ? "" : " during " + during) + ": " + *lost);
  }

  // Sends one control request and waits for its reply (`expect` or Error).
  // A zero timeout waits as long as the connection lives. `daemon_error`,
  // if given, tells an Error the daemon answered from a local failure.
  Result<Reply> Request(const flatbuffers::FlatBufferBuilder& fbb, std::span<const ConstBytes> payload,
                        fb::MessageBody expect_type, const std::string& what, milliseconds timeout,
                        bool* daemon_error = nullptr);

  void ReadLoop();
};

Result<Reply> RemoteDevice::State::Request(const flatbuffers::FlatBufferBuilder& fbb,
                                           std::span<const ConstBytes> payload, fb::MessageBody expect_type,
                                           const std::string& what, milliseconds timeout, bool* daemon_error) {
  if (daemon_error) *daemon_error = false;
  {
    std::lock_guard<std::mutex> lk(mu);
    if (lost) return LostStatus();
    // Armed before sending: the reply may arrive before this thread waits.
    awaiting = true;
    expect = expect_type;
    reply.reset();
  }
  Status st = socket->Send(fbb, payload);
  std::unique_lock<std::mutex> lk(mu);
  if (!st.ok()) {
    awaiting = false;
    LoseLocked(st.message());
    return LostStatus(what);
  }
  auto ready = [&] { return reply.has_value() || lost.has_value(); };
  if (timeout.count() > 0) {
    if (!reply_cv.wait_for(lk, Sane(timeout), ready)) {
      awaiting = false;
      // A late reply would be taken for the next request's: the
      // conversation's state is unknown, so it ends here.
      LoseLocked("no reply to " + what + " within " + Ms(timeout));
      return DeadlineExceeded(who + ": no reply to " + what + " within " + Ms(timeout) +
                              "; the connection was closed");
    }
  } else {
    reply_cv.wait(lk, ready);
  }
  awaiting = false;
  // A reply that arrived before the connection went still answers (an Error
  // the daemon sent before closing explains more than the close).
  if (!reply) return LostStatus(what);
  Reply r = std::move(*reply);
  reply.reset();
  if (r.type == fb::MessageBody::Error) {
    if (daemon_error) *daemon_error = true;
    return StatusFromError(*r.get()->body_as_Error());
  }
  return r;
}

void RemoteDevice::State::ReadLoop() {
  InFrame frame;
  std::string why;
  for (;;) {
    Status st = socket->Receive(&frame);
    if (!st.ok()) {
      why = st.message();
      break;
    }
    const fb::MessageBody type = frame.type();
    if (type == fb::MessageBody::Credit) {
      const fb::Credit* c = frame.message->body_as_Credit();
      std::lock_guard<std::mutex> lk(mu);
      // Between LoadProgram and the new table only the old job's slots can
      // be freed; their credits mean nothing to the new job.
      if (!loaded) continue;
      if (c->queue() >= queues.size()) {
        why = "protocol error: Credit for queue " + std::to_string(c->queue()) + ", the job has " +
              std::to_string(queues.size()) + " queues";
        break;
      }
      queues[c->queue()]->credits += c->slots();
      queue_cv.notify_all();
      continue;
    }
    const bool reply_type = type == fb::MessageBody::Loaded || type == fb::MessageBody::SinkDone ||
                            type == fb::MessageBody::TensorData || type == fb::MessageBody::Ack ||
                            type == fb::MessageBody::Joined || type == fb::MessageBody::Error;
    if (!reply_type) {
      why = std::string("protocol error: the daemon sent ") + MessageName(type) +
            (type == fb::MessageBody::Hello ? " after the handshake" : ", which a host never receives");
      break;
    }
    bool wanted;
    {
      std::lock_guard<std::mutex> lk(mu);
      wanted = awaiting && !reply && (type == expect || type == fb::MessageBody::Error);
    }
    if (!wanted) {
      // An Error nobody asked for is the daemon ending the job (stopping, a
      // frame it refused); it closes the connection after it.
      if (type == fb::MessageBody::Error)
        why = "the daemon reported: " + StatusFromError(*frame.message->body_as_Error()).message();
      else
        why = std::string("protocol error: unexpected ") + MessageName(type) + " with no matching request waiting";
      break;
    }
    Reply r;
    r.type = type;
    r.message.assign(frame.message_bytes.begin(), frame.message_bytes.end());
    try {
      r.payload.resize(frame.payload_left);
    } catch (const std::bad_alloc&) {
      why = "out of memory for a " + std::to_string(frame.payload_left) + "-byte " + MessageName(type) + " payload";
      break;
    }
    st = socket->ReadPayload(&frame, r.payload);
    if (!st.ok()) {
      why = st.message();
      break;
    }
    std::lock_guard<std::mutex> lk(mu);
    // Otherwise the waiter gave up (timeout) and has already closed the connection.
    if (awaiting && !reply) {
      reply = std::move(r);
      reply_cv.notify_all();
    }
  }
  std::lock_guard<std::mutex> lk(mu);
  LoseLocked(why);
  reader_done = true;
  reply_cv.notify_all();
}

RemoteOptions RemoteOptions::FromEnvironment() {
  RemoteOptions o;
  o.connect_timeout = ConnectTimeoutFromEnvironment(o.connect_timeout);
  if (auto ms = EnvMilliseconds("SINKRT_PUSH_TIMEOUT_MS")) o.push_timeout = *ms;
  if (auto ms = EnvMilliseconds("SINKRT_SINK_TIMEOUT_MS")) o.sink_timeout = *ms;
  if (auto ms = EnvMilliseconds("SINKRT_REPLY_TIMEOUT_MS")) o.reply_timeout = *ms;
  if (auto ms = EnvMilliseconds("SINKRT_PEER_TIMEOUT_MS")) o.peer_timeout = *ms;
  return o;
}

RemoteDevice::RemoteDevice(std::unique_ptr<State> state) : state_(std::move(state)) {}

Result<std::unique_ptr<RemoteDevice>> RemoteDevice::Connect(const Address& address, RemoteOptions options) {
  SINKRT_ASSIGN_OR_RETURN(std::unique_ptr<FrameSocket> socket, FrameSocket::Connect(address, options.connect_timeout));
  SINKRT_ASSIGN_OR_RETURN(DeviceHello hello, Handshake(*socket, address, fb::PeerRole::Host, options.rank,
                                                       options.token, options.connect_timeout));
  if (options.rank >= 0 && hello.rank != options.rank) {
    // The daemon took us as its job: release it before closing.
    flatbuffers::FlatBufferBuilder fbb(64);
    FinishMessage(fbb, fb::MessageBody::Shutdown, fb::CreateShutdown(fbb).Union());
    (void)socket->Send(fbb);
    return FailedPrecondition("daemon at " + address.ToString() + " is rank " + std::to_string(hello.rank) +
                              ", expected rank " + std::to_string(options.rank));
  }
  auto state = std::make_unique<State>();
  state->address = address;
  state->options = std::move(options);
  state->hello = std::move(hello);
  int rank = state->hello.rank >= 0 ? state->hello.rank : state->options.rank;
  state->who = (rank >= 0 ? "rank " + std::to_string(rank) : std::string("device")) + " (" + address.ToString() + ")";
  state->socket = std::move(socket);
  try {
    state->reader = std::thread([s = state.get()] { s->ReadLoop(); });
  } catch (const std::system_error& e) {
    return ResourceExhausted(std::string("cannot start the remote device's reader thread: ") + e.what());
  }
  return std::unique_ptr<RemoteDevice>(new RemoteDevice(std::move(state)));
}

RemoteDevice::~RemoteDevice() {
  State& s = *state_;
  bool alive;
  {
    std::lock_guard<std::mutex> lk(s.mu);
    alive = !s.lost;
  }
  if (alive) {
    flatbuffers::FlatBufferBuilder fbb(64);
    FinishMessage(fbb, fb::MessageBody::Shutdown, fb::CreateShutdown(fbb).Union());
    if (s.socket->Send(fbb).ok()) {
      std::unique_lock<std::mutex> lk(s.mu);
      s.reply_cv.wait_for(lk, kCloseWait, [&] { return s.reader_done; });
    }
  }
  s.Lose("the host closed the connection");
  if (s.reader.joinable()) s.reader.join();
}

Result<LoadInfo> RemoteDevice::Load(const VerifiedStream& verified) {
  const ConstBytes stream = verified.bytes();
  State& s = *state_;
  std::lock_guard<std::mutex> control(s.control_mu);
  {
    std::unique_lock<std::mutex> lk(s.mu);
    if (s.lost) return s.LostStatus();
    // The old job ends here, as in-process: pushes waiting on it abort, and a
    // push already holding a credit reaches the wire before LoadProgram so the
    // daemon never sees an old job's batch after the new job's stream.
    s.loaded = false;
    ++s.job;
    s.queue_cv.notify_all();
    if (!s.queue_cv.wait_for(lk, Sane(s.options.reply_timeout), [&] { return s.sending == 0 || s.lost; })) {
      s.LoseLocked("a batch send stalled for " + Ms(s.options.reply_timeout));
      return DeadlineExceeded(s.who + ": a batch being sent did not leave within " + Ms(s.options.reply_timeout) +
                              "; the connection was closed");
    }
    if (s.lost) return s.LostStatus("Load");
    s.queues.clear();
    s.buffers.clear();
  }

  flatbuffers::FlatBufferBuilder fbb(64);
  FinishMessage(fbb, fb::MessageBody::LoadProgram, fb::CreateLoadProgram(fbb, stream.size()).Union());
  const ConstBytes pieces[] = {stream};
  const std::string what = "Load(" + std::to_string(stream.size()) + "-byte task stream)";
  SINKRT_ASSIGN_OR_RETURN(Reply r, s.Request(fbb, pieces, fb::MessageBody::Loaded, what, s.options.reply_timeout));
  const fb::Loaded* loaded = r.get()->body_as_Loaded();

  // The host reads the buffer and queue tables that name reports and size
  // batches from its own verified copy; the daemon verified what it received.
  const fb::TaskStream* root = verified.root();
  std::vector<BufferInfo> buffers;
  if (root->buffers())
    for (const fb::Buffer* b : *root->buffers()) {
      BufferInfo info;
      info.name = b->name() ? b->name()->str() : "";
      info.dtype = b->dtype();
      if (b->shape()) info.shape.assign(b->shape()->begin(), b->shape()->end());
      info.bytes = b->bytes();
      buffers.push_back(std::move(info));
    }
  const uint32_t num_queues = root->queues() ? root->queues()->size() : 0;
  const uint32_t num_capacities = loaded->queue_capacity() ? loaded->queue_capacity()->size() : 0;
  if (num_capacities != num_queues)
    return Internal(s.who + ": Loaded gives " + std::to_string(num_capacities) +
                    " queue capacities, the task stream has " + std::to_string(num_queues) + " queues");
  std::vector<std::shared_ptr<QueueState>> queues;
  for (uint32_t i = 0; i < num_queues; ++i) {
    const fb::QueueSpec* spec = root->queues()->Get(i);
    auto q = std::make_shared<QueueState>();
    q->name = spec->name() ? spec->name()->str() : "";
    if (spec->columns())
      for (const fb::QueueColumn* c : *spec->columns()) q->column_bytes.push_back(ColumnBytes(*c));
    q->credits = loaded->queue_capacity()->Get(i);
    queues.push_back(std::move(q));
  }
  {
    std::lock_guard<std::mutex> lk(s.mu);
    s.buffers = std::move(buffers);
    s.queues = std::move(queues);
    s.loaded = true;
  }
  LoadInfo info;
  info.arena_bytes = loaded->arena_bytes();
  info.queue_bytes = loaded->queue_bytes();
  info.load_ms = loaded->load_ms();
  return info;
}

Status RemoteDevice::PushBatch(uint32_t queue, std::span<const ConstBytes> columns) {
  State& s = *state_;
  std::shared_ptr<QueueState> q;
  uint64_t job;
  {
    std::lock_guard<std::mutex> lk(s.mu);
    if (s.lost) return s.LostStatus();
    if (!s.loaded) return FailedPrecondition("PushBatch before a task stream was loaded");
    job = s.job;
    if (queue >= s.queues.size())
      return OutOfRange("queue index " + std::to_string(queue) + " is outside the stream's " +
                        std::to_string(s.queues.size()) + " queues");
    q = s.queues[queue];
  }
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
  uint64_t sequence;
  {
    std::unique_lock<std::mutex> lk(s.mu);
    const uint64_t generation = q->generation;
    if (s.lost) return s.LostStatus();
    if (s.job != job) return Aborted("queue '" + q->name + "': the task stream was replaced by a new Load");
    // A push that starts during a ClearQueue waits for its Ack and then goes
    // ahead, as if it had started after the clear.
    auto ready = [&] {
      return s.lost || s.job != job || q->generation != generation || (!q->clearing && q->credits > 0);
    };
    if (!s.queue_cv.wait_for(lk, Sane(s.options.push_timeout), ready))
      return DeadlineExceeded(s.who + ": queue '" + q->name + "' stayed full for " + Ms(s.options.push_timeout) +
                              ": the device is not consuming batches");
    if (s.lost) return s.LostStatus("PushBatch(queue '" + q->name + "')");
    if (s.job != job) return Aborted("queue '" + q->name + "': the task stream was replaced by a new Load");
    if (q->generation != generation) return Aborted("queue '" + q->name + "' was cleared");
    --q->credits;
    sequence = q->next_sequence++;
    ++q->sending;
    ++s.sending;
  }
  q->fbb.Clear();
  FinishMessage(q->fbb, fb::MessageBody::PushBatch, fb::CreatePushBatch(q->fbb, queue, sequence).Union());
  Status st = s.socket->Send(q->fbb, columns);
  std::lock_guard<std::mutex> lk(s.mu);
  --q->sending;
  --s.sending;
  s.queue_cv.notify_all();
  if (!st.ok()) {
    // A frame cut off mid-way leaves the stream unusable.
    s.LoseLocked(st.message());
    return s.LostStatus("PushBatch(queue '" + q->name + "')");
  }
  return Status::Ok();
}

Status RemoteDevice::ClearQueue(uint32_t queue) {
  State& s = *state_;
  std::lock_guard<std::mutex> control(s.control_mu);
  std::shared_ptr<QueueState> q;
  {
    std::unique_lock<std::mutex> lk(s.mu);
    if (s.lost) return s.LostStatus();
    if (!s.loaded) return FailedPrecondition("ClearQueue before a task stream was loaded");
    if (queue >= s.queues.size())
      return OutOfRange("queue index " + std::to_string(queue) + " is outside the stream's " +
                        std::to_string(s.queues.size()) + " queues");
    q = s.queues[queue];
    ++q->generation;
    q->clearing = true;
    s.queue_cv.notify_all();
    // A push that already holds a credit must reach the wire before
    // ClearQueue, so the daemon's clear drops its batch too.
    if (!s.queue_cv.wait_for(lk, Sane(s.options.reply_timeout), [&] { return q->sending == 0 || s.lost; })) {
      q->clearing = false;
      s.LoseLocked("a batch send stalled for " + Ms(s.options.reply_timeout));
      return DeadlineExceeded(s.who + ": a batch for queue '" + q->name + "' did not leave within " +
                              Ms(s.options.reply_timeout) + "; the connection was closed");
    }
  }
  flatbuffers::FlatBufferBuilder fbb(64);
  FinishMessage(fbb, fb::MessageBody::ClearQueue, fb::CreateClearQueue(fbb, queue).Union());
  // The daemon credits the dropped batches before its Ack, and the reader
  // handles frames in order, so the credits are whole when this returns.
  auto r = s.Request(fbb, {}, fb::MessageBody::Ack, "ClearQueue(queue '" + q->name + "')", s.options.reply_timeout);
  {
    std::lock_guard<std::mutex> lk(s.mu);
    q->clearing = false;
    s.queue_cv.notify_all();
  }
  return r.ok() ? Status::Ok() : r.status();
}

Result<SinkResult> RemoteDevice::RunSink(ProgramKind program, uint32_t steps) {
  State& s = *state_;
  ++s.round_trips;
  std::lock_guard<std::mutex> control(s.control_mu);
  uint32_t epoch;
  {
    std::lock_guard<std::mutex> lk(s.mu);
    if (s.lost) return s.LostStatus();
    if (!s.loaded) return FailedPrecondition("RunSink before a task stream was loaded");
    epoch = ++s.sink_epoch;
  }
  flatbuffers::FlatBufferBuilder fbb(64);
  FinishMessage(fbb, fb::MessageBody::RunSink, fb::CreateRunSink(fbb, program, steps, epoch).Union());
  const std::string what =
      "RunSink(" + std::string(ProgramKindName(program)) + ", " + std::to_string(steps) + " steps)";
  SINKRT_ASSIGN_OR_RETURN(Reply r, s.Request(fbb, {}, fb::MessageBody::SinkDone, what, s.options.sink_timeout));

  const fb::SinkDone* done = r.get()->body_as_SinkDone();
  SinkResult out;
  out.steps_run = done->steps_run();
  out.timing.compute_ms = done->compute_ms();
  out.timing.comm_ms = done->comm_ms();
  out.timing.comm_wait_ms = done->comm_wait_ms();
  out.timing.queue_wait_ms = done->queue_wait_ms();
  out.timing.other_ms = done->other_ms();
  if (const auto* hw = done->queue_high_water()) out.queue_high_water.assign(hw->begin(), hw->end());
  uint64_t offset = 0;
  if (done->reports())
    for (const fb::ReportedBuffer* rb : *done->reports()) {
      // buffers changes only in Load, which control_mu keeps out.
      if (rb->buffer() >= s.buffers.size())
        return Internal(s.who + ": SinkDone reports buffer " + std::to_string(rb->buffer()) +
                        ", outside the task stream's " + std::to_string(s.buffers.size()) + " buffers");
      if (rb->bytes() > r.payload.size() - offset)
        return Internal(s.who + ": SinkDone's reports overrun its payload");
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
  return out;
}

Result<std::vector<uint8_t>> RemoteDevice::ReadTensor(uint32_t buffer) {
  State& s = *state_;
  std::lock_guard<std::mutex> control(s.control_mu);
  uint64_t bytes;
  std::string name;
  {
    std::lock_guard<std::mutex> lk(s.mu);
    if (s.lost) return s.LostStatus();
    if (!s.loaded) return FailedPrecondition("ReadTensor before a task stream was loaded");
    if (buffer >= s.buffers.size())
      return OutOfRange("buffer index " + std::to_string(buffer) + " is outside the buffer table (" +
                        std::to_string(s.buffers.size()) + " buffers)");
    bytes = s.buffers[buffer].bytes;
    name = s.buffers[buffer].name;
  }
  flatbuffers::FlatBufferBuilder fbb(64);
  FinishMessage(fbb, fb::MessageBody::ReadTensor, fb::CreateReadTensor(fbb, buffer).Union());
  const std::string what = "ReadTensor(buffer " + std::to_string(buffer) + " '" + name + "')";
  SINKRT_ASSIGN_OR_RETURN(Reply r, s.Request(fbb, {}, fb::MessageBody::TensorData, what, s.options.reply_timeout));
  const fb::TensorData* data = r.get()->body_as_TensorData();
  if (data->buffer() != buffer || r.payload.size() != bytes)
    return Internal(s.who + ": " + what + " was answered with buffer " + std::to_string(data->buffer()) + " of " +
                    std::to_string(r.payload.size()) + " bytes, expected " + std::to_string(bytes));
  return std::move(r.payload);
}

Status RemoteDevice::WriteTensor(uint32_t buffer, ConstBytes bytes) {
  State& s = *state_;
  std::lock_guard<std::mutex> control(s.control_mu);
  std::string name;
  {
    std::lock_guard<std::mutex> lk(s.mu);
    if (s.lost) return s.LostStatus();
    if (!s.loaded) return FailedPrecondition("WriteTensor before a task stream was loaded");
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
  auto r = s.Request(fbb, pieces, fb::MessageBody::Ack, what, s.options.reply_timeout);
  return r.ok() ? Status::Ok() : r.status();
}

Result<PeerEndpoint> RemoteDevice::Endpoint() {
  const State& s = *state_;
  // A 1.0 daemon neither names its machine nor understands JoinWorld.
  if (s.hello.protocol_minor < 1 || s.hello.host_id.empty())
    return Unimplemented(s.who + ": the daemon speaks protocol " + std::to_string(kProtocolMajor) + "." +
                         std::to_string(s.hello.protocol_minor) + " (" + s.hello.software +
                         "); joining a world of devices needs 1.1");
  return PeerEndpoint{s.address.ToString(), s.hello.host_id};
}

Status RemoteDevice::JoinWorld(const WorldSpec& world) {
  State& s = *state_;
  SINKRT_RETURN_IF_ERROR(Endpoint().status());
  const std::string what = "JoinWorld(job " + std::to_string(world.job) + ", rank " + std::to_string(world.rank) +
                           " of " + std::to_string(world.members.size()) + ")";
  if (world.rank >= world.members.size())
    return InvalidArgument(s.who + ": " + what + ": the rank is outside the member list");
  std::lock_guard<std::mutex> control(s.control_mu);
  {
    // The daemon unloads the job to join, as a Load would: pushes waiting
    // on it abort, and one already holding a credit leaves first (a batch
    // after JoinWorld would be a protocol error there).
    std::unique_lock<std::mutex> lk(s.mu);
    if (s.lost) return s.LostStatus();
    s.loaded = false;
    ++s.job;
    s.queue_cv.notify_all();
    if (!s.queue_cv.wait_for(lk, Sane(s.options.reply_timeout), [&] { return s.sending == 0 || s.lost; })) {
      s.LoseLocked("a batch send stalled for " + Ms(s.options.reply_timeout));
      return DeadlineExceeded(s.who + ": a batch being sent did not leave within " + Ms(s.options.reply_timeout) +
                              "; the connection was closed");
    }
    if (s.lost) return s.LostStatus(what);
    s.queues.clear();
    s.buffers.clear();
    s.transports.clear();
  }
  flatbuffers::FlatBufferBuilder fbb(256);
  std::vector<flatbuffers::Offset<fb::WorldMember>> members;
  for (const PeerEndpoint& m : world.members)
    members.push_back(fb::CreateWorldMember(fbb, fbb.CreateString(m.address), fbb.CreateString(m.host_id)));
  auto mv = fbb.CreateVector(members);
  FinishMessage(fbb, fb::MessageBody::JoinWorld, fb::CreateJoinWorld(fbb, world.job, world.rank, mv).Union());
  // Every member blocks until the last one has joined; the daemon gives up
  // after its peer timeout and says which members never came.
  const milliseconds timeout = std::max(s.options.reply_timeout, Sane(s.options.peer_timeout) + milliseconds(10000));
  bool daemon_error = false;
  auto r = s.Request(fbb, {}, fb::MessageBody::Joined, what, timeout, &daemon_error);
  // The daemon's Error names its rank and the members that did not come;
  // the address is added here. Local failures name both already.
  if (!r.ok()) return daemon_error ? r.status().WithContext(s.address.ToString()) : r.status();
  const fb::Joined* joined = r->get()->body_as_Joined();
  std::vector<std::string> transports;
  if (joined->transports())
    for (const flatbuffers::String* t : *joined->transports()) transports.push_back(t->str());
  if (transports.size() != world.members.size())
    return Internal(s.who + ": " + what + " was answered with " + std::to_string(transports.size()) +
                    " transports for " + std::to_string(world.members.size()) + " members");
  std::lock_guard<std::mutex> lk(s.mu);
  s.transports = std::move(transports);
  return Status::Ok();
}

std::vector<std::string> RemoteDevice::transports() const {
  std::lock_guard<std::mutex> lk(state_->mu);
  return state_->transports;
}

uint64_t RemoteDevice::control_round_trips() const { return state_->round_trips.load(); }
const DeviceHello& RemoteDevice::hello() const { return state_->hello; }
const Address& RemoteDevice::address() const { return state_->address; }

Result<DeviceHello> ProbeDevice(const Address& address, milliseconds timeout, const std::string& token) {
  const auto start = Clock::now();
  SINKRT_ASSIGN_OR_RETURN(std::unique_ptr<FrameSocket> socket, FrameSocket::Connect(address, timeout));
  // One budget for connecting and the answer: a launcher polls many daemons.
  auto left = std::chrono::duration_cast<milliseconds>(timeout - (Clock::now() - start));
  return Handshake(*socket, address, fb::PeerRole::Probe, -1, token, std::max(left, milliseconds(1)));
}

}  // namespace sinkrt::host
