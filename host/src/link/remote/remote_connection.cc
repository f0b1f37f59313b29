#include "host/src/link/remote/remote_connection.h"

#include <poll.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>
#include <system_error>

#include "runtime/src/auth.h"
#include "runtime/src/env.h"
#include "runtime/src/hello.h"
#include "runtime/src/wire.h"

namespace sinkrt::host {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// After Shutdown the daemon frees the job and closes; waiting for that close
// means the device is free when the connection ends, so the next host to
// connect is not refused as busy. Bounded: a stuck daemon must not hang the host.
constexpr milliseconds kCloseWait{5000};

// Asks the daemon to end the session (it frees the job, then closes).
Status SendShutdown(FrameSocket& socket) {
  flatbuffers::FlatBufferBuilder fbb(64);
  FinishMessage(fbb, fb::MessageBody::Shutdown, fb::CreateShutdown(fbb).Union());
  return socket.Send(fbb);
}

}  // namespace

std::string Ms(milliseconds d) { return std::to_string(d.count()) + " ms"; }

std::string Seconds(milliseconds d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", d.count() / 1e3);
  return buf;
}

std::string ConnectTarget(const Address& address, const RemoteOptions& options) {
  std::string s =
      (options.rank >= 0 ? "rank " + std::to_string(options.rank) : std::string("sinkd")) + " at " + address.ToString();
  if (!options.origin.empty()) s += " (" + options.origin + ")";
  return s;
}

ConnectProgress::ConnectProgress(const RemoteOptions& options, std::string who)
    : options_(options), who_(std::move(who)), start_(Clock::now()), next_(start_ + options.progress_interval) {}

void ConnectProgress::Report(const std::string& state) {
  if (!options_.progress) return;
  const Clock::time_point now = Clock::now();
  if (now < next_) return;
  next_ = now + options_.progress_interval;
  options_.progress("waiting for " + who_ + ": " + state + "; " +
                    Seconds(std::chrono::duration_cast<milliseconds>(now - start_)) + " of " +
                    Seconds(options_.connect_timeout) + " (SINKRT_CONNECT_TIMEOUT_MS sets the limit)");
}

milliseconds ConnectProgress::UntilNextReport() const {
  return std::max(milliseconds(1), std::chrono::duration_cast<milliseconds>(next_ - Clock::now()) + milliseconds(1));
}

milliseconds Sane(milliseconds d) { return std::min(d, milliseconds(std::chrono::hours(24 * 365 * 10))); }

namespace {

// A sinkd with --token proves it first; then this host proves it. The
// token never travels.
Status AnswerChallenge(FrameSocket& socket, const fb::Challenge& challenge, const Nonce& client,
                       const std::string& token, const std::string& where) {
  std::span<const uint8_t> nonce, proof;
  if (challenge.nonce()) nonce = {challenge.nonce()->data(), challenge.nonce()->size()};
  if (challenge.proof()) proof = {challenge.proof()->data(), challenge.proof()->size()};
  SINKRT_ASSIGN_OR_RETURN(const Nonce server, NonceFrom(nonce, "the daemon's Challenge"), where);
  if (!ProofMatches(proof, ProveToken(token, kSinkdAuthLabel, AuthSide::kServer, client, server)))
    return PermissionDenied(where + (token.empty()
                                         ? ": missing token: the daemon was started with --token; give "
                                           "this host the same (--token, SINKRT_TOKEN)"
                                         : ": wrong token: the daemon holds another (--token, SINKRT_TOKEN)"));
  const Proof mine = ProveToken(token, kSinkdAuthLabel, AuthSide::kClient, client, server);
  flatbuffers::FlatBufferBuilder fbb(128);
  FinishMessage(fbb, fb::MessageBody::Proof, fb::CreateProof(fbb, fbb.CreateVector(mine.data(), mine.size())).Union());
  return socket.Send(fbb).WithContext("handshake with " + where);
}

}  // namespace

Result<DeviceHello> Handshake(FrameSocket& socket, const Address& address, fb::PeerRole role, int rank,
                              const std::string& token, milliseconds timeout, ConnectProgress* progress) {
  const std::string where = address.ToString();
  const Clock::time_point deadline = Clock::now() + Sane(timeout);
  HelloFields mine;
  mine.role = role;
  mine.rank = rank;
  // The token never travels (wire protocol 1.5): a sinkd with one answers
  // the nonce with a Challenge (ProveToHost below).
  SINKRT_ASSIGN_OR_RETURN(const Nonce client, FreshNonce(), "handshake with " + where);
  mine.nonce.assign(client.begin(), client.end());
  flatbuffers::FlatBufferBuilder fbb(256);
  BuildHello(fbb, mine);
  SINKRT_RETURN_IF_ERROR(socket.Send(fbb), "handshake with " + where);

  InFrame frame;
  if (progress && progress->enabled()) {
    // Only readability is waited for in slices: once the first byte is in,
    // Receive takes the whole frame against the remaining deadline.
    for (;;) {
      const milliseconds left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) break;
      pollfd p{socket.native_handle(), POLLIN, 0};
      const int r = ::poll(&p, 1, static_cast<int>(std::min(left, progress->UntilNextReport()).count()));
      if (r < 0 && errno == EINTR) continue;
      if (r != 0) break;  // readable, closed or failed: Receive says which
      progress->Report("connected, no Hello yet");
    }
  }
  Status st = socket.Receive(&frame, deadline);
  if (st.code() == StatusCode::kDeadlineExceeded)
    return DeadlineExceeded("no Hello from " + where + " within " + Ms(timeout) +
                            " (is a sinkd daemon listening there?)");
  SINKRT_RETURN_IF_ERROR(st, "handshake with " + where);
  if (frame.type() == fb::MessageBody::Challenge) {
    SINKRT_RETURN_IF_ERROR(AnswerChallenge(socket, *frame.message->body_as_Challenge(), client, token, where));
    st = socket.Receive(&frame, deadline);
    if (st.code() == StatusCode::kDeadlineExceeded)
      return DeadlineExceeded("no Hello from " + where + " within " + Ms(timeout) + " after the token handshake");
    SINKRT_RETURN_IF_ERROR(st, "handshake with " + where);
  }
  if (frame.type() == fb::MessageBody::Error)
    return StatusFromError(*frame.message->body_as_Error()).WithContext(where);
  if (frame.type() != fb::MessageBody::Hello)
    return Unavailable(where + ": expected a Hello from the daemon, got " + MessageName(frame.type()));

  const HelloFields theirs = ReadHello(*frame.message->body_as_Hello());
  if (theirs.role != fb::PeerRole::Device)
    return FailedPrecondition(where + ": the peer is not a sinkd daemon (its Hello has role " +
                              std::to_string(int(theirs.role)) + ")");
  if (theirs.protocol_major != kProtocolMajor)
    return FailedPrecondition(where + ": the daemon speaks protocol " + std::to_string(theirs.protocol_major) + "." +
                              std::to_string(theirs.protocol_minor) + ", this host " + std::to_string(kProtocolMajor) +
                              "." + std::to_string(kProtocolMinor));
  DeviceHello out;
  out.rank = theirs.rank;
  out.busy = theirs.busy;
  out.cores = theirs.cores;
  out.pid = theirs.pid;
  out.software = theirs.software;
  out.protocol_minor = theirs.protocol_minor;
  out.host_id = theirs.host_id;
  return out;
}

RemoteOptions RemoteOptions::FromEnvironment() {
  RemoteOptions o;
  o.connect_timeout = ConnectTimeoutFromEnvironment(o.connect_timeout);
  o.progress_interval = ProgressIntervalFromEnvironment(o.progress_interval);
  if (auto ms = EnvMilliseconds("SINKRT_PUSH_TIMEOUT_MS")) o.push_timeout = *ms;
  if (auto ms = EnvMilliseconds("SINKRT_SINK_TIMEOUT_MS")) o.sink_timeout = *ms;
  if (auto ms = EnvMilliseconds("SINKRT_REPLY_TIMEOUT_MS")) o.reply_timeout = *ms;
  // As the daemons resolve them (DeviceOptions::FromEnvironment).
  const PeerTimeouts peer = PeerTimeoutsFromEnvironment({o.peer_timeout, o.rendezvous_timeout});
  o.peer_timeout = peer.peer;
  o.rendezvous_timeout = peer.rendezvous;
  return o;
}

milliseconds RemoteOptions::join_timeout() const {
  const milliseconds rendezvous = PeerTimeouts{peer_timeout, rendezvous_timeout}.effective_rendezvous();
  return std::max(reply_timeout, Sane(rendezvous) + milliseconds(10000));
}

// The TLS handshake as a client when `tls` names any file.
static Status SecureIfAsked(FrameSocket& socket, const TlsConfig& tls, Clock::time_point deadline) {
  if (!tls.enabled()) return Status::Ok();
  SINKRT_ASSIGN_OR_RETURN(std::shared_ptr<const TlsContext> context, MakeTlsContext(tls, TlsRole::kClient));
  return socket.StartTls(*context, deadline);
}

Result<std::unique_ptr<RemoteConnection>> RemoteConnection::Open(const Address& address, RemoteOptions options) {
  const std::string target = ConnectTarget(address, options);
  ConnectProgress progress(options, target);
  const Clock::time_point start = Clock::now();
  std::string last_error;  // of the last refused or failed attempt
  ConnectObserver observer = [&](const ConnectWait& w) {
    if (!w.pending) {
      last_error = w.error;
      // "Connection refused" reads as the middle of a sentence here.
      if (!last_error.empty())
        last_error[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(last_error[0])));
    }
    progress.Report(w.pending ? "connecting, no answer yet" : last_error + ", retrying");
  };
  auto connected = FrameSocket::Connect(address, options.connect_timeout, WireLimits::FromEnvironment(), observer);
  if (!connected.ok()) {
    if (last_error.empty()) return connected.status().WithContext(target);
    return Unavailable(target + ": no sinkd answered within " + Seconds(options.connect_timeout) + ": " + last_error);
  }
  std::unique_ptr<FrameSocket> socket = std::move(connected).value();
  // One budget: what connecting left, for the TLS handshake and the Hello.
  SINKRT_RETURN_IF_ERROR(SecureIfAsked(*socket, options.tls, start + options.connect_timeout).WithContext(target));
  const milliseconds left = std::max(
      milliseconds(1), options.connect_timeout - std::chrono::duration_cast<milliseconds>(Clock::now() - start));
  auto greeted = Handshake(*socket, address, fb::PeerRole::Host, options.rank, options.token, left, &progress);
  if (greeted.status().code() == StatusCode::kDeadlineExceeded)
    return DeadlineExceeded(target + ": connected, but no Hello within " + Seconds(options.connect_timeout) +
                            " (is a sinkd daemon listening there?)");
  if (!greeted.ok()) return greeted.status();
  DeviceHello hello = std::move(greeted).value();
  if (options.rank >= 0 && hello.rank != options.rank) {
    // The daemon took us as its job: release it before closing.
    (void)SendShutdown(*socket);
    return FailedPrecondition("daemon at " + address.ToString() + " is rank " + std::to_string(hello.rank) +
                              ", expected rank " + std::to_string(options.rank));
  }
  auto c = std::make_unique<RemoteConnection>();
  c->address = address;
  c->options = std::move(options);
  c->hello = std::move(hello);
  int rank = c->hello.rank >= 0 ? c->hello.rank : c->options.rank;
  c->who = (rank >= 0 ? "rank " + std::to_string(rank) : std::string("device")) + " (" + address.ToString() + ")";
  c->socket = std::move(socket);
  try {
    c->reader = std::thread([p = c.get()] { p->ReadLoop(); });
  } catch (const std::system_error& e) {
    return ResourceExhausted(std::string("cannot start the remote device's reader thread: ") + e.what());
  }
  return c;
}

RemoteConnection::~RemoteConnection() {
  if (!reader.joinable()) return;  // Open failed before the session began
  bool alive;
  {
    std::lock_guard<std::mutex> lk(mu);
    alive = !lost;
  }
  if (alive && SendShutdown(*socket).ok()) {
    std::unique_lock<std::mutex> lk(mu);
    reply_cv.wait_for(lk, kCloseWait, [&] { return reader_done; });
  }
  Lose("the host closed the connection");
  reader.join();
}

void RemoteConnection::LoseLocked(std::string reason) {
  if (!lost) lost = std::move(reason);
  socket->Shutdown();
  reply_cv.notify_all();
  queue_cv.notify_all();
}

void RemoteConnection::Lose(std::string reason) {
  std::lock_guard<std::mutex> lk(mu);
  LoseLocked(std::move(reason));
}

Status RemoteConnection::LostStatus(const std::string& during) const {
  return Unavailable(who + ": connection lost" + (during.empty() ? "" : " during " + during) + ": " + *lost);
}

Status RemoteConnection::EndJob(const std::string& during) {
  std::unique_lock<std::mutex> lk(mu);
  if (lost) return LostStatus();
  loaded = false;
  ++job;
  queue_cv.notify_all();
  if (!queue_cv.wait_for(lk, Sane(options.reply_timeout), [&] { return sending == 0 || lost; })) {
    LoseLocked("a batch send stalled for " + Ms(options.reply_timeout));
    return DeadlineExceeded(who + ": a batch being sent did not leave within " + Ms(options.reply_timeout) +
                            "; the connection was closed");
  }
  if (lost) return LostStatus(during);
  queues.clear();
  return Status::Ok();
}

Result<Reply> RemoteConnection::Request(const flatbuffers::FlatBufferBuilder& fbb, std::span<const ConstBytes> payload,
                                        fb::MessageBody expect_type, const std::string& what, milliseconds timeout,
                                        bool* daemon_error) {
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
      return DeadlineExceeded(who + ": no reply to " + what + " within " + Ms(timeout) + "; the connection was closed");
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

void RemoteConnection::ReadLoop() {
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
      if (credit_observer) (*credit_observer)(c->queue(), c->slots());
      continue;
    }
    const bool reply_type = type == fb::MessageBody::Loaded || type == fb::MessageBody::SinkDone ||
                            type == fb::MessageBody::TensorData || type == fb::MessageBody::Ack ||
                            type == fb::MessageBody::Joined || type == fb::MessageBody::ClockReading ||
                            type == fb::MessageBody::Error;
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

Result<DeviceHello> ProbeDevice(const Address& address, milliseconds timeout, const std::string& token,
                                const TlsConfig& tls) {
  const auto start = Clock::now();
  SINKRT_ASSIGN_OR_RETURN(std::unique_ptr<FrameSocket> socket, FrameSocket::Connect(address, timeout));
  SINKRT_RETURN_IF_ERROR(SecureIfAsked(*socket, tls, start + timeout));
  // One budget for connecting and the answer: a launcher polls many daemons.
  auto left = std::chrono::duration_cast<milliseconds>(timeout - (Clock::now() - start));
  return Handshake(*socket, address, fb::PeerRole::Probe, -1, token, std::max(left, milliseconds(1)));
}

}  // namespace sinkrt::host
