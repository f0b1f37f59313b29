#include "device/src/daemon/daemon.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <asio/ip/tcp.hpp>
#include <atomic>
#include <list>
#include <mutex>
#include <thread>
#include <vector>

#include "device/src/comm/communicator.h"
#include "device/src/daemon/daemon_log.h"
#include "device/src/daemon/job_session.h"
#include "device/src/daemon/peer_hub.h"
#include "device/src/daemon/sink_worker.h"
#include "device/src/executor.h"
#include "runtime/src/auth.h"
#include "runtime/src/hello.h"
#include "runtime/src/wire_socket.h"
#include "sinkrt/runtime/admission.h"

namespace sinkrt::device {
namespace {

struct Connection {
  // Null once a peer daemon's connection moved to the hub (under State::mu).
  std::unique_ptr<FrameSocket> socket;
  std::string source;  // the peer's address without its port: the quota key
  std::thread thread;
  std::atomic<bool> done{false};
  // Under State::mu: admitted once its Hello passed; evicted by a newer
  // pending connection over a quota (its thread then only ends).
  bool admitted = false;
  bool evicted = false;
};

std::string SourceAddress(const asio::ip::tcp::socket& socket) {
  asio::error_code ec;
  auto remote = socket.remote_endpoint(ec);
  return ec ? std::string("(unknown)") : remote.address().to_string();
}

void SendError(FrameSocket& socket, int rank, const Status& status) {
  flatbuffers::FlatBufferBuilder fbb(256);
  ErrorContext ctx;
  ctx.rank = rank;
  BuildError(fbb, status, ctx);
  (void)socket.Send(fbb);
}

std::string ProtocolVersion(uint32_t major, uint32_t minor) {
  return std::to_string(major) + "." + std::to_string(minor);
}

}  // namespace

struct Daemon::State {
  DaemonOptions options;
  asio::io_context io;
  asio::ip::tcp::acceptor acceptor{io};
  Address bound;
  std::string host_id;  // LocalHostId(), in every Hello this daemon sends
  // With options.tls: the handshake of every accepted connection.
  std::shared_ptr<const TlsContext> tls_server;
  // With options.tls and a CA, unless tls_plain_peers: this daemon's dials
  // to its peers (mutual: it presents its own certificate).
  std::shared_ptr<const TlsContext> tls_peer_client;
  std::unique_ptr<PeerHub> hub;  // after io: the sockets it holds live on io
  SinkWorker worker;
  SessionCounters counters;
  std::thread accept_thread;

  std::mutex mu;
  std::list<std::unique_ptr<Connection>> connections;
  JobSession* job = nullptr;  // the session owning the device, if any
  uint64_t job_id = 0;
  uint64_t next_job_id = 1;
  std::string job_peer;
  bool stopping = false;
  bool waited = false;
  DaemonStats stats;

  void AcceptLoop();
  // Makes room for a new pending connection from `source` (under mu);
  // false when there is none to make and the new one must go instead.
  bool EvictForLocked(const std::string& source);
  // Admits `c` once its Hello passed; false (after refusing it) when it was
  // evicted meanwhile or the admitted connections are at their limit.
  bool Admit(Connection& c);
  void Serve(Connection& c);
  // The TLS handshake of an accepted connection, within `deadline`; sets
  // `plain` for a plain peer that --tls-plain-peers lets in. False: refused.
  bool SecureConnection(FrameSocket& socket, Deadline deadline, bool* plain);
  void ServeHost(Connection& c, const fb::Hello& hello);
  void ServePeer(Connection& c, const fb::Hello& hello);
  void SendHello(FrameSocket& socket, bool busy);
  // The token handshake with a client whose Hello carried `client_nonce`:
  // Challenge out, its Proof checked; kUnavailable when it left.
  Status ChallengeClient(FrameSocket& socket, const flatbuffers::Vector<uint8_t>& client_nonce, Deadline deadline);
  // Joins connection threads that have finished.
  void Reap();
  void Log(const std::string& text) { DaemonLog(options.log, options.rank, text); }
};

Daemon::Daemon(std::unique_ptr<State> state) : state_(std::move(state)) {}

Daemon::~Daemon() {
  Stop();
  Wait();
}

// The daemon's TLS context for its port, from its options (null: plain).
static Result<std::shared_ptr<const TlsContext>> MakeDaemonTls(const DaemonOptions& o) {
  if (!o.tls.enabled()) {
    if (o.tls_plain_peers) return InvalidArgument("--tls-plain-peers without TLS (--tls-cert, --tls-key)");
    return std::shared_ptr<const TlsContext>();
  }
  return MakeTlsContext(o.tls, TlsRole::kServer);
}

// The context a TLS daemon dials its peers with, from the same files (null:
// plain dials, with --tls-plain-peers or without TLS; or no CA to verify
// peers by, which JoinWorld then refuses by name).
static Result<std::shared_ptr<const TlsContext>> MakePeerTls(const DaemonOptions& o) {
  if (!o.tls.enabled() || o.tls_plain_peers || o.tls.ca_file.empty()) return std::shared_ptr<const TlsContext>();
  return MakeTlsContext(o.tls, TlsRole::kClient);
}

Result<std::unique_ptr<Daemon>> Daemon::Start(DaemonOptions options) {
  // Mutual TLS authenticates every client by its certificate, as the token would.
  const bool mutual_tls = options.tls.enabled() && !options.tls.ca_file.empty();
  if (!IsLoopback(options.listen.host) && options.token.empty() && !mutual_tls)
    return InvalidArgument("listening on " + options.listen.ToString() +
                           " lets other machines drive this device: pass --token, which every host must then send, "
                           "or --tls-ca for TLS with client certificates");
  auto state = std::make_unique<State>();
  SINKRT_ASSIGN_OR_RETURN(state->tls_server, MakeDaemonTls(options));
  SINKRT_ASSIGN_OR_RETURN(state->tls_peer_client, MakePeerTls(options));
  state->options = std::move(options);
  // One peer timeout for every collective of the executor, one rendezvous
  // timeout (by default the same) for joining a world and the hub.
  state->options.device.peer_timeout = state->options.peer_timeout;
  state->options.device.rendezvous_timeout = state->options.rendezvous_timeout;
  const Address& listen = state->options.listen;
  asio::error_code ec;
  asio::ip::tcp::resolver resolver(state->io);
  auto endpoints = resolver.resolve(listen.host, std::to_string(listen.port), asio::ip::tcp::resolver::passive, ec);
  if (ec || endpoints.empty())
    return Unavailable("cannot resolve listen address '" + listen.host + "': " + ec.message());
  asio::ip::tcp::endpoint endpoint = *endpoints.begin();
  auto& acceptor = state->acceptor;
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return Unavailable("cannot listen on " + listen.ToString() + ": " + ec.message());
  auto local = acceptor.local_endpoint(ec);
  state->bound = Address{listen.host, local.port()};
  state->host_id = LocalHostId();
  PeerHub::Options hub;
  hub.rank = state->options.rank;
  hub.linger = state->options.device.effective_rendezvous_timeout();
  hub.log = state->options.log;
  state->hub = std::make_unique<PeerHub>(hub);
  State* s = state.get();
  state->accept_thread = std::thread([s] { s->AcceptLoop(); });
  return std::unique_ptr<Daemon>(new Daemon(std::move(state)));
}

Address Daemon::address() const { return state_->bound; }

DaemonStats Daemon::stats() const {
  std::lock_guard<std::mutex> lk(state_->mu);
  DaemonStats s = state_->stats;
  s.protocol_errors = state_->counters.protocol_errors.load();
  return s;
}

void Daemon::Stop() {
  State& s = *state_;
  std::lock_guard<std::mutex> lk(s.mu);
  if (s.stopping) return;
  s.stopping = true;
  // shutdown(2) wakes the blocked accept (EINVAL on Linux); closing the
  // acceptor under a concurrent accept would not be safe.
  ::shutdown(s.acceptor.native_handle(), SHUT_RDWR);
  if (s.job)
    s.job->Abort(Unavailable("sinkd rank " + std::to_string(s.options.rank) + " is shutting down; job " +
                             std::to_string(s.job_id) + " ends"));
  s.hub->Stop();
  for (auto& c : s.connections)
    if (c->socket) c->socket->Shutdown();
}

void Daemon::Wait() {
  State& s = *state_;
  {
    std::lock_guard<std::mutex> lk(s.mu);
    if (s.waited) return;
    s.waited = true;
  }
  if (s.accept_thread.joinable()) s.accept_thread.join();
  // No connection starts after the accept loop ended.
  for (auto& c : s.connections)
    if (c->thread.joinable()) c->thread.join();
  s.connections.clear();
}

void Daemon::State::AcceptLoop() {
  for (;;) {
    asio::ip::tcp::socket socket(io);
    asio::error_code ec;
    acceptor.accept(socket, ec);
    {
      std::lock_guard<std::mutex> lk(mu);
      if (stopping) return;
    }
    if (ec) {
      // Out of descriptors or a connection reset before accept: keep serving.
      Log("accept failed: " + ec.message());
      if (ec == asio::error::no_descriptors) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    TuneSocket(socket);
    auto conn = std::make_unique<Connection>();
    conn->source = SourceAddress(socket);
    conn->socket = std::make_unique<FrameSocket>(std::move(socket), options.limits);
    Reap();
    std::lock_guard<std::mutex> lk(mu);
    if (!EvictForLocked(conn->source)) {
      ++stats.connections_refused;
      SendError(*conn->socket, options.rank,
                ResourceExhausted("sinkd rank " + std::to_string(options.rank) + " has " +
                                  std::to_string(2 * options.max_pending) +
                                  " connections that have not finished their Hello; try again"));
      Log("refused " + conn->socket->peer() + ": too many connections without a Hello");
      continue;
    }
    Connection* c = conn.get();
    connections.push_back(std::move(conn));
    c->thread = std::thread([this, c] {
      Serve(*c);
      if (c->socket) c->socket->Shutdown();
      c->done = true;
    });
  }
}

bool Daemon::State::EvictForLocked(const std::string& source) {
  // In accept order, so MakeRoom's first candidate is the oldest.
  std::vector<Connection*> pending;
  std::vector<PendingView> views;
  for (const auto& c : connections) {
    if (c->admitted || c->evicted || c->done) continue;
    pending.push_back(c.get());
    views.push_back({c->source, !c->socket || UnreadBytes(c->socket->native_handle()) > 0});
  }
  const RoomVerdict verdict =
      MakeRoom(views, source, PendingQuotas{options.max_pending, options.max_pending_per_address});
  if (!verdict.evict) return verdict.admit;
  Connection& victim = *pending[*verdict.evict];
  victim.evicted = true;
  ++stats.connections_evicted;
  // A tiny frame into an empty send buffer: it cannot block the accept loop.
  SendError(*victim.socket, options.rank,
            ResourceExhausted("sinkd rank " + std::to_string(options.rank) + " closed this connection: " + verdict.why +
                              ", and a newer one came"));
  victim.socket->Shutdown();
  Log("closed " + victim.socket->peer() + " without a Hello: " + verdict.why);
  return true;
}

bool Daemon::State::Admit(Connection& c) {
  std::lock_guard<std::mutex> lk(mu);
  if (c.evicted) return false;  // its socket is shut down; the reason went out already
  int admitted = 0;
  for (const auto& other : connections)
    if (other->admitted && !other->done) ++admitted;
  if (admitted >= options.max_connections) {
    ++stats.connections_refused;
    SendError(*c.socket, options.rank,
              ResourceExhausted("sinkd rank " + std::to_string(options.rank) + " already serves " +
                                std::to_string(admitted) + " connections (the limit)"));
    Log("refused " + c.socket->peer() + ": too many connections");
    return false;
  }
  c.admitted = true;
  return true;
}

void Daemon::State::Reap() {
  std::list<std::unique_ptr<Connection>> finished;
  {
    std::lock_guard<std::mutex> lk(mu);
    for (auto it = connections.begin(); it != connections.end();) {
      auto next = std::next(it);
      if ((*it)->done) finished.splice(finished.end(), connections, it);
      it = next;
    }
  }
  for (auto& c : finished) c->thread.join();
}

void Daemon::State::SendHello(FrameSocket& socket, bool busy) {
  HelloFields hello;
  hello.role = fb::PeerRole::Device;
  hello.rank = options.rank;
  hello.busy = busy;
  hello.cores = options.device.threads > 0 ? options.device.threads : AvailableCores();
  hello.pid = static_cast<uint32_t>(::getpid());
  hello.host_id = host_id;
  flatbuffers::FlatBufferBuilder fbb(128);
  BuildHello(fbb, hello);
  (void)socket.Send(fbb);
}

bool Daemon::State::SecureConnection(FrameSocket& socket, Deadline deadline, bool* plain) {
  *plain = false;
  Status st = socket.StartTls(*tls_server, deadline);
  if (st.ok()) return true;
  if (st.code() == StatusCode::kFailedPrecondition) {  // plain frames: answered plainly
    if (options.tls_plain_peers) {
      *plain = true;
      return true;
    }
    st = PermissionDenied(
        "this sinkd requires TLS (it was started with --tls-cert): connect with --tls-ca, "
        "and --tls-cert/--tls-key when it has a CA; a peer daemon of a world needs the same TLS "
        "flags, or --tls-plain-peers on every daemon of the world");
    SendError(socket, options.rank, st);
  } else if (st.code() == StatusCode::kDeadlineExceeded) {
    std::lock_guard<std::mutex> lk(mu);
    ++stats.hello_timeouts;
  }
  {
    std::lock_guard<std::mutex> lk(mu);
    ++stats.connections_refused;
  }
  Log("refused " + socket.peer() + ": " + st.message());
  return false;
}

void Daemon::State::Serve(Connection& c) {
  FrameSocket& socket = *c.socket;
  InFrame frame;
  // One deadline for the handshake and the whole frame: a client that
  // trickles bytes gets no more time than one that sends nothing.
  const Deadline hello_deadline = DeadlineIn(options.hello_timeout);
  bool plain = !tls_server;
  if (tls_server && !SecureConnection(socket, hello_deadline, &plain)) return;
  Status st = socket.Receive(&frame, hello_deadline);
  if (!st.ok()) {
    // Connected and left (a port scan, a dead launcher), or evicted.
    if (st.code() == StatusCode::kUnavailable) return;
    if (st.code() == StatusCode::kDeadlineExceeded) {
      st = DeadlineExceeded("no Hello within " + std::to_string(options.hello_timeout.count()) +
                            " ms of connecting (SINKRT_HELLO_TIMEOUT_MS)");
      std::lock_guard<std::mutex> lk(mu);
      ++stats.hello_timeouts;
    }
    counters.protocol_errors.fetch_add(1);
    SendError(socket, options.rank, st.WithContext("protocol error"));
    Log("refused " + socket.peer() + ": " + st.message());
    return;
  }
  if (frame.type() != fb::MessageBody::Hello || frame.payload_left != 0) {
    counters.protocol_errors.fetch_add(1);
    SendError(socket, options.rank,
              InvalidArgument(std::string("protocol error: the first frame must be Hello, got ") +
                              MessageName(frame.type())));
    Log("refused " + socket.peer() + ": first frame was " + MessageName(frame.type()));
    return;
  }
  const fb::Hello& hello = *frame.message->body_as_Hello();
  auto refuse = [&](const Status& why) {
    {
      std::lock_guard<std::mutex> lk(mu);
      ++stats.connections_refused;
    }
    SendError(socket, options.rank, why);
    Log("refused " + socket.peer() + ": " + why.message());
  };
  if (hello.protocol_major() != kProtocolMajor)
    return refuse(Unimplemented("protocol version " + ProtocolVersion(hello.protocol_major(), hello.protocol_minor()) +
                                " is not supported: this sinkd (" + kSoftwareName + ") speaks " +
                                ProtocolVersion(kProtocolMajor, kProtocolMinor)));
  if (tls_server && plain && hello.role() != fb::PeerRole::Device)
    return refuse(
        PermissionDenied("this sinkd takes plain frames only from peer daemons (--tls-plain-peers): "
                         "connect with TLS (--tls-ca)"));
  // Before the token: a job's rank that dialed this port by mistake must
  // hear where it is, whatever its token.
  if (hello.role() == fb::PeerRole::Rank)
    return refuse(FailedPrecondition(
        "this port (" + bound.ToString() + ") is sinkd rank " + std::to_string(options.rank) +
        "'s device port, not a sinkrt rendezvous master: MS_SCHED_PORT / MASTER_PORT names a sinkd's port; give the "
        "job's master a port of its own (sinkrun launch --master-port)"));
  if (!options.token.empty() && hello.nonce()) {
    // A 1.5 client: the token proves itself both ways without travelling,
    // still within the Hello's deadline and before admission.
    Status proven = ChallengeClient(socket, *hello.nonce(), hello_deadline);
    if (proven.code() == StatusCode::kUnavailable) {
      Log("closed " + socket.peer() + ": it left during the token handshake (" + proven.message() + ")");
      return;
    }
    if (!proven.ok()) return refuse(proven);
  } else if (!options.token.empty() && (!hello.token() || hello.token()->str() != options.token)) {
    // A 1.4 host sends its token in clear.
    return refuse(PermissionDenied(std::string(hello.token() && hello.token()->size() ? "wrong" : "missing") +
                                   " token: this sinkd was started with --token"));
  }
  if (!Admit(c)) return;
  switch (hello.role()) {
    case fb::PeerRole::Probe: {
      bool busy;
      {
        std::lock_guard<std::mutex> lk(mu);
        busy = job != nullptr;
      }
      SendHello(socket, busy);
      return;
    }
    case fb::PeerRole::Host:
      return ServeHost(c, hello);
    case fb::PeerRole::Device:
      // A peer daemon's rendezvous dial: never "a second host", so it is
      // taken while a job runs.
      if (hello.rank() < 0)
        return refuse(InvalidArgument("a Device without a rank may not connect: peer daemons name their rank and job"));
      return ServePeer(c, hello);
    default: {
      // A role of a newer protocol minor has no name in this build.
      const char* name = fb::EnumNamePeerRole(hello.role());
      const std::string role = *name ? std::string(name)
                                     : "peer of role " + std::to_string(int(hello.role())) + " (unknown to protocol " +
                                           ProtocolVersion(kProtocolMajor, kProtocolMinor) + ")";
      return refuse(InvalidArgument("a " + role + " may not connect to a device's host port"));
    }
  }
}

Status Daemon::State::ChallengeClient(FrameSocket& socket, const flatbuffers::Vector<uint8_t>& client_nonce,
                                      Deadline deadline) {
  SINKRT_ASSIGN_OR_RETURN(const Nonce client, NonceFrom({client_nonce.data(), client_nonce.size()}, "the Hello"),
                          "protocol error");
  SINKRT_ASSIGN_OR_RETURN(const Nonce server, FreshNonce());
  const Proof mine = ProveToken(options.token, kSinkdAuthLabel, AuthSide::kServer, client, server);
  flatbuffers::FlatBufferBuilder fbb(256);
  auto body = fb::CreateChallenge(fbb, fbb.CreateVector(server.data(), server.size()),
                                  fbb.CreateVector(mine.data(), mine.size()));
  FinishMessage(fbb, fb::MessageBody::Challenge, body.Union());
  SINKRT_RETURN_IF_ERROR(socket.Send(fbb));
  InFrame frame;  // the Hello's frame stays valid for the caller
  Status st = socket.Receive(&frame, deadline);
  if (st.code() == StatusCode::kDeadlineExceeded)
    return DeadlineExceeded("no Proof within " + std::to_string(options.hello_timeout.count()) +
                            " ms of connecting (SINKRT_HELLO_TIMEOUT_MS)");
  SINKRT_RETURN_IF_ERROR(st);
  if (frame.type() != fb::MessageBody::Proof || frame.payload_left != 0)
    return InvalidArgument(std::string("protocol error: after the Challenge a client sends Proof, got ") +
                           MessageName(frame.type()));
  const fb::Proof& proof = *frame.message->body_as_Proof();
  std::span<const uint8_t> got;
  if (proof.proof()) got = {proof.proof()->data(), proof.proof()->size()};
  if (!ProofMatches(got, ProveToken(options.token, kSinkdAuthLabel, AuthSide::kClient, client, server)))
    return PermissionDenied("wrong token: this sinkd was started with --token");
  return Status::Ok();
}

void Daemon::State::ServePeer(Connection& c, const fb::Hello& hello) {
  std::unique_ptr<FrameSocket> socket;
  {
    std::lock_guard<std::mutex> lk(mu);
    socket = std::move(c.socket);
  }
  const std::string from = socket->peer();
  const uint64_t peer_job = hello.job();
  const int peer_rank = hello.rank();
  // The hub answers a refusal itself; the rendezvous continues on a socket it takes.
  Status st = hub->Offer(peer_job, static_cast<uint32_t>(peer_rank), std::move(socket));
  if (st.ok()) return;
  {
    std::lock_guard<std::mutex> lk(mu);
    ++stats.connections_refused;
  }
  Log("refused peer " + from + " (rank " + std::to_string(peer_rank) + " of job " + std::to_string(peer_job) +
      "): " + st.message());
}

void Daemon::State::ServeHost(Connection& c, const fb::Hello& hello) {
  FrameSocket& socket = *c.socket;
  if (hello.rank() >= 0 && hello.rank() != options.rank) {
    std::lock_guard<std::mutex> lk(mu);
    ++stats.connections_refused;
    SendError(
        socket, options.rank,
        FailedPrecondition("this sinkd serves rank " + std::to_string(options.rank) + ", the host expected rank " +
                           std::to_string(hello.rank()) + ": check the rank table"));
    return;
  }
  JobSession session(options, worker, socket, 0, counters, *hub, bound.port, host_id, tls_peer_client);
  uint64_t id;
  {
    std::lock_guard<std::mutex> lk(mu);
    if (stopping || job) {
      ++stats.connections_refused;
      Status why = stopping
                       ? Unavailable("sinkd rank " + std::to_string(options.rank) + " is shutting down")
                       : Unavailable("device busy: sinkd rank " + std::to_string(options.rank) + " is running job " +
                                     std::to_string(job_id) + " for " + job_peer + "; it serves one job at a time");
      SendError(socket, options.rank, why);
      Log("refused " + socket.peer() + ": " + why.message());
      return;
    }
    id = next_job_id++;
    job = &session;
    job_id = id;
    job_peer = socket.peer();
    ++stats.jobs_started;
  }
  session.set_job_id(id);
  SendHello(socket, false);
  Log("job " + std::to_string(id) + " from " + socket.peer() + ": started");
  Status end = session.Serve();
  // Free the device while still registered as its owner, so the next host
  // finds it empty and a concurrent Stop can still Abort this session.
  session.End();
  {
    std::lock_guard<std::mutex> lk(mu);
    job = nullptr;
    ++stats.jobs_ended;
  }
  uint64_t sinks = session.sinks(), steps = session.steps();
  std::string how = end.ok() ? "host said Shutdown" : end.message();
  Log("job " + std::to_string(id) + " from " + socket.peer() + ": ended (" + how + "); " + std::to_string(sinks) +
      " sinks, " + std::to_string(steps) + " steps; device freed");
}

}  // namespace sinkrt::device
