#include "host/src/link/world/master.h"

#include <asio/steady_timer.hpp>
#include <functional>
#include <list>

#include "host/src/link/world/join_frames.h"
#include "runtime/src/auth.h"
#include "runtime/src/hello.h"

namespace sinkrt::host {
namespace {

using std::chrono::milliseconds;

std::string RankText(uint32_t r) { return "rank " + std::to_string(r); }
std::string Seconds(milliseconds d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", static_cast<double>(d.count()) / 1000.0);
  return buf;
}
std::string Version(uint32_t major, uint32_t minor) { return std::to_string(major) + "." + std::to_string(minor); }

// A connection that has not joined yet: it owes (with TLS, after the
// handshake) a Hello, then (after the Challenge) a RankJoin with its proof,
// all within the hello deadline.
struct Pending {
  Pending(asio::io_context& io, asio::ip::tcp::socket s)
      : conn(std::make_unique<FrameSocket>(std::move(s), WireLimits{})), timer(io) {}
  std::unique_ptr<FrameSocket> conn;
  asio::steady_timer timer;
  std::string source, peer;  // its address; with the port
  uint8_t header[kFrameHeaderBytes] = {};
  std::vector<uint8_t> message;
  const fb::Message* frame = nullptr;  // verified, into `message`
  Nonce client{}, server{};
  bool closed = false;        // refused, evicted, timed out, or joined
  bool plain_client = false;  // sent plain frames to a TLS master: answered plainly
};
using PendingPtr = std::shared_ptr<Pending>;

class Master {
 public:
  Master(asio::io_context& io, asio::ip::tcp::acceptor& acceptor, const MasterSetup& setup,
         std::vector<std::unique_ptr<FrameSocket>>& ranks)
      : io_(io), acceptor_(acceptor), setup_(setup), ranks_(ranks), deadline_(io), retry_(io) {}

  Status Run() {
    deadline_.expires_after(setup_.timeout);
    deadline_.async_wait([this](const asio::error_code& ec) {
      if (!ec && !done_) Finish(DeadlineExceeded(MissingRanks()));
    });
    Accept();
    io_.restart();
    io_.run();
    return verdict_;
  }

 private:
  using Next = void (Master::*)(const PendingPtr&);
  using Then = std::function<void()>;

  void Accept() {
    acceptor_.async_accept([this](const asio::error_code& ec, asio::ip::tcp::socket socket) {
      if (done_ || ec == asio::error::operation_aborted) return;
      if (ec) {
        // Out of descriptors, or a connection reset before accept: keep
        // serving, after a pause so that it does not spin.
        retry_.expires_after(milliseconds(50));
        retry_.async_wait([this](const asio::error_code& e) {
          if (!e && !done_) Accept();
        });
        return;
      }
      OnAccepted(std::move(socket));
      Accept();
    });
  }

  void OnAccepted(asio::ip::tcp::socket socket) {
    auto p = std::make_shared<Pending>(io_, std::move(socket));
    asio::error_code ec;
    const auto remote = p->conn->socket().remote_endpoint(ec);
    p->source = ec ? "(unknown)" : remote.address().to_string();
    p->peer = ec ? "(unknown)" : Address{p->source, remote.port()}.ToString();
    std::vector<PendingView> views;
    for (const PendingPtr& q : pending_) views.push_back({q->source, UnreadBytes(q->conn->native_handle()) > 0});
    const RoomVerdict room = MakeRoom(views, p->source, setup_.quotas);
    if (room.evict) {
      Refuse(*std::next(pending_.begin(), static_cast<long>(*room.evict)),
             ResourceExhausted("the rendezvous master at " + setup_.where + " closed this connection: " + room.why +
                               ", and a newer one came; try again"));
    } else if (!room.admit) {
      Send(*p, ResourceExhausted("the rendezvous master at " + setup_.where + " has " + std::to_string(views.size()) +
                                 " connections that have not finished their Hello; try again"));
      p->conn->socket().close(ec);
      return;
    }
    pending_.push_back(p);
    // One deadline for the whole handshake: trickling bytes buys no time.
    p->timer.expires_after(setup_.hello_timeout);
    p->timer.async_wait([this, p](const asio::error_code& e) {
      if (e || p->closed || done_) return;
      Refuse(p,
             DeadlineExceeded("the rendezvous master at " + setup_.where + " heard no Hello and RankJoin within " +
                              std::to_string(setup_.hello_timeout.count()) +
                              " ms of connecting (SINKRT_HELLO_TIMEOUT_MS)"),
             "no Hello within the deadline");
    });
    if (setup_.tls) return Handshake(p);
    Read(p, &Master::OnHello);
  }

  // Calls `then` once p's socket is ready for `wait`, unless p is closed by then.
  void When(const PendingPtr& p, IoWait wait, Then then) {
    const auto what = wait == IoWait::kWritable ? asio::socket_base::wait_write : asio::socket_base::wait_read;
    p->conn->socket().async_wait(what, [this, p, then = std::move(then)](const asio::error_code& ec) {
      if (!ec && !done_ && !p->closed) then();
    });
  }

  // The TLS handshake, a step whenever the socket is ready. A client that
  // sends plain frames is answered plainly; one whose handshake fails heard
  // why from OpenSSL's alert.
  void Handshake(const PendingPtr& p) {
    Result<IoWait> step = p->conn->StepTls(*setup_.tls);
    if (step.ok() && *step == IoWait::kNone) return Read(p, &Master::OnHello);
    if (step.ok()) return When(p, *step, [this, p] { Handshake(p); });
    if (step.status().code() == StatusCode::kFailedPrecondition) {
      p->plain_client = true;
      return Refuse(p,
                    PermissionDenied("it requires TLS: give every rank the CA (SINKRT_TLS_CA), and a certificate "
                                     "and key (SINKRT_TLS_CERT, SINKRT_TLS_KEY) when the master has a CA"),
                    "a rank without TLS");
    }
    if (step.status().code() == StatusCode::kUnavailable &&
        step.status().message().find("connection closed") != std::string::npos)
      return Close(p);  // it left
    Refuse(p, step.status(), "a failed TLS handshake (" + step.status().message() + ")");
  }

  // Fills dst from p's connection, then calls `then`; closes p if it leaves.
  void Fill(const PendingPtr& p, std::span<uint8_t> dst, Then then) {
    while (!dst.empty()) {
      Result<IoStep> got = p->conn->ReadSome(dst);
      if (!got.ok() || (got->bytes == 0 && got->wait == IoWait::kNone)) return Close(p);  // it left
      if (got->bytes == 0) return When(p, got->wait, [this, p, dst, then] { Fill(p, dst, then); });
      dst = dst.subspan(got->bytes);
    }
    then();
  }

  // Reads one whole frame (no payload) into p, then calls `next`.
  void Read(const PendingPtr& p, Next next) {
    Fill(p, p->header, [this, p, next] {
      WireLimits limits;
      limits.max_message_bytes = kHandshakeMessageBytes;
      auto header = DecodeFrameHeader(p->header, limits);
      if (!header.ok()) return Refuse(p, header.status().WithContext("protocol error"), header.status().message());
      if (header->payload_bytes != 0)
        return Refuse(p, InvalidArgument("protocol error: a rank's Hello and RankJoin carry no payload"),
                      "a frame with a payload");
      p->message.resize(header->message_bytes);
      Fill(p, p->message, [this, p, next] {
        auto message = VerifyMessage(p->message);
        if (!message.ok()) return Refuse(p, message.status().WithContext("protocol error"), message.status().message());
        p->frame = *message;
        (this->*next)(p);
      });
    });
  }

  void OnHello(const PendingPtr& p) {
    const fb::MessageBody type = p->frame->body_type();
    if (type == fb::MessageBody::RankJoin)
      return Refuse(
          p,
          Unimplemented("the master at " + setup_.where + " (wire protocol " + Version(kProtocolMajor, kProtocolMinor) +
                        ") proves every rank's token with a challenge; this rank sent a protocol 1.4 "
                        "RankJoin: run one sinkrt release on every rank"),
          "a protocol 1.4 rank");
    if (type != fb::MessageBody::Hello)
      return Refuse(p,
                    InvalidArgument("protocol error: " + setup_.where + " is a sinkrt rendezvous master (job " +
                                    setup_.job_id + "): a rank's first frame is Hello, got " + MessageName(type)),
                    std::string("a first frame ") + MessageName(type));
    const HelloFields hello = ReadHello(*p->frame->body_as_Hello());
    if (hello.protocol_major != kProtocolMajor)
      return Refuse(p,
                    Unimplemented("protocol version " + Version(hello.protocol_major, hello.protocol_minor) +
                                  " is not supported: this rendezvous master (" + kSoftwareName + ") speaks " +
                                  Version(kProtocolMajor, kProtocolMinor)),
                    "protocol " + Version(hello.protocol_major, hello.protocol_minor));
    if (hello.role != fb::PeerRole::Rank) {
      const char* name = fb::EnumNamePeerRole(hello.role);
      const std::string role = *name ? name : "role " + std::to_string(int(hello.role));
      return Refuse(
          p,
          FailedPrecondition(setup_.where + " is a sinkrt rendezvous master (init()'s rank 0, job " + setup_.job_id +
                             "), not a sinkd: a " + role + " may not connect here; check the device's port"),
          "a " + role + " Hello");
    }
    auto client = NonceFrom(hello.nonce, "the rank's Hello");
    auto server = FreshNonce();
    if (!client.ok()) return Refuse(p, client.status().WithContext("protocol error"), client.status().message());
    if (!server.ok()) return Finish(server.status());
    p->client = *client;
    p->server = *server;
    const Proof proof = ProveToken(setup_.token, kMasterAuthLabel, AuthSide::kServer, p->client, p->server);
    flatbuffers::FlatBufferBuilder fbb(256);
    auto body = fb::CreateChallenge(fbb, fbb.CreateVector(p->server.data(), p->server.size()),
                                    fbb.CreateVector(proof.data(), proof.size()), fbb.CreateString(setup_.job_id),
                                    setup_.world_size);
    FinishMessage(fbb, fb::MessageBody::Challenge, body.Union());
    if (!SendBytes(*p, fbb)) return Close(p);
    Read(p, &Master::OnJoin);
  }

  void OnJoin(const PendingPtr& p) {
    const fb::MessageBody type = p->frame->body_type();
    if (type != fb::MessageBody::RankJoin)
      return Refuse(p,
                    InvalidArgument(std::string("protocol error: after the Challenge a rank sends RankJoin, got ") +
                                    MessageName(type)),
                    std::string("a ") + MessageName(type) + " after the Challenge");
    const Joined j = CopyJoin(*p->frame->body_as_RankJoin());
    const std::string who = RankText(j.rank) + " (pid " + std::to_string(j.pid) + ")";
    // Another job's rank (its launcher chose another id) is refused before
    // its proof is looked at: two jobs on one port is the likely cause, and
    // their tokens may differ too.
    if (!j.job_id.empty() && j.job_id != setup_.job_id)
      return Refuse(p,
                    FailedPrecondition("init(): the master of job " + setup_.job_id + " at " + setup_.where +
                                       " refused " + who + " of job " + j.job_id + " from " + p->peer +
                                       ": two jobs use one master port; give each job its own (MS_SCHED_PORT "
                                       "or MASTER_PORT, sinkrun launch --master-port)"),
                    who + " of job " + j.job_id);
    if (!ProofMatches(j.proof, ProveToken(setup_.token, kMasterAuthLabel, AuthSide::kClient, p->client, p->server)))
      return Refuse(p,
                    PermissionDenied("init(): the master at " + setup_.where + " refused " + RankText(j.rank) +
                                     ": wrong token (every rank needs the master's --token / SINKRT_TOKEN)"),
                    who + " with a wrong token");
    // From here on the rank is one of this job's: what it contradicts is
    // the world's error, and every rank hears it.
    const uint32_t n = setup_.world_size;
    Status bad;
    if (j.round != 0)
      bad = FailedPrecondition("init(): " + who + " is at round " + std::to_string(j.round) + " of an earlier world");
    else if (j.world_size != n)
      bad = FailedPrecondition("init(): " + who + " is in a world of " + std::to_string(j.world_size) +
                               " ranks, rank 0 in one of " + std::to_string(n));
    else if (j.rank == 0 || j.rank >= n)
      bad = FailedPrecondition("init(): a second process (pid " + std::to_string(j.pid) + ") claims " +
                               RankText(j.rank) + (j.rank == 0 ? "" : ", outside the world of " + std::to_string(n)));
    else if (ranks_[j.rank])
      bad = FailedPrecondition("init(): two processes claim " + RankText(j.rank) + " (the second is pid " +
                               std::to_string(j.pid) + ")");
    if (!bad.ok()) {
      Send(*p, bad);
      Close(p);
      return Finish(bad);
    }
    Close(p, /*keep_socket=*/true);
    TuneSocket(p->conn->socket());
    ranks_[j.rank] = std::move(p->conn);
    if (++joined_ == n) Finish(Status::Ok());
  }

  // Sends `why` as an Error, closes the connection and remembers it (what)
  // for the deadline's message.
  // By value: `p` may be the list's own element, which Close removes.
  void Refuse(PendingPtr p, const Status& why, const std::string& what = {}) {
    Send(*p, why);
    Close(p);
    if (!what.empty()) refused_.push_back(what + " from " + p->peer);
  }

  void Close(PendingPtr p, bool keep_socket = false) {
    p->closed = true;
    p->timer.cancel();
    pending_.remove(p);
    asio::error_code ec;
    if (!keep_socket) p->conn->socket().close(ec);
  }

  // A small frame into a fresh socket's empty send buffer: it does not
  // block. A TLS master says nothing to a connection whose handshake has
  // not finished (it could not read it), except to a plain one (Handshake).
  bool SendBytes(Pending& p, const flatbuffers::FlatBufferBuilder& fbb) { return p.conn->Send(fbb).ok(); }
  void Send(Pending& p, const Status& why) {
    if (setup_.tls && !p.conn->tls() && !p.plain_client) return;
    flatbuffers::FlatBufferBuilder fbb(512);
    ErrorContext context;
    context.rank = 0;
    BuildError(fbb, why, context);
    (void)SendBytes(p, fbb);
  }

  void Finish(Status verdict) {
    done_ = true;
    verdict_ = std::move(verdict);
    asio::error_code ec;
    acceptor_.close(ec);
    deadline_.cancel();
    retry_.cancel();
    // Whoever is still pending is not needed: the world formed, or ended.
    // After a world formed the port is free again, perhaps for the rank 0
    // of the job this connection belongs to: say so, and the rank dials again.
    const std::list<PendingPtr> left = pending_;
    for (const PendingPtr& p : left) {
      if (verdict_.ok())
        Send(*p, Unavailable("the rendezvous master of job " + setup_.job_id + " at " + setup_.where +
                             " formed its world of " + std::to_string(setup_.world_size) +
                             " ranks and stopped listening; this connection was not one of them"));
      Close(p);
    }
  }

  std::string MissingRanks() const {
    std::string missing;
    for (uint32_t r = 1; r < setup_.world_size; ++r)
      if (!ranks_[r]) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    std::string text = "init(): rank(s) " + missing + " did not join the master at " + setup_.where + " within " +
                       Seconds(setup_.timeout) + " (" + std::to_string(joined_) + " of " +
                       std::to_string(setup_.world_size) + " ranks joined)";
    if (refused_.empty()) return text;
    // What was refused meanwhile often explains who did not come (a rank
    // with another token, another job on this port).
    constexpr size_t kShown = 3;
    text += "; meanwhile it refused ";
    for (size_t i = 0; i < std::min(kShown, refused_.size()); ++i) text += (i ? "; " : "") + refused_[i];
    if (refused_.size() > kShown) text += " (and " + std::to_string(refused_.size() - kShown) + " more)";
    return text;
  }

  // A rank's Hello and RankJoin of round 0 are small; an unauthenticated
  // peer gets no bigger buffer than this.
  static constexpr uint32_t kHandshakeMessageBytes = 64 * 1024;

  asio::io_context& io_;
  asio::ip::tcp::acceptor& acceptor_;
  const MasterSetup& setup_;
  std::vector<std::unique_ptr<FrameSocket>>& ranks_;
  asio::steady_timer deadline_, retry_;
  std::list<PendingPtr> pending_;  // in accept order: oldest first
  std::vector<std::string> refused_;
  uint32_t joined_ = 1;
  bool done_ = false;
  Status verdict_;
};

}  // namespace

Status GatherRanks(asio::io_context& io, asio::ip::tcp::acceptor& acceptor, const MasterSetup& setup,
                   std::vector<std::unique_ptr<FrameSocket>>& ranks) {
  ranks.resize(setup.world_size);
  if (setup.world_size <= 1) return Status::Ok();
  Master master(io, acceptor, setup, ranks);
  return master.Run();
}

}  // namespace sinkrt::host
