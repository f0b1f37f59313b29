// Communicator::Create: rendezvous with the planned peers (every peer
// without a plan), shared-memory setup, barrier.
//
//   1. Rank r dials every planned higher rank (a TLS handshake first when
//      CommOptions::tls is set): Hello{Device, rank r, job} ->
//      Hello{Device, rank p, job} (or Error) -> Ack (or Error: wrong rank,
//      wrong job). Planned lower ranks arrive through the PeerInbox with
//      their Hello read; we answer and later take their Ack (four passes,
//      below, so no rank waits on another's list). The job check happens on the
//      dialing side, which has both Hellos; the Error it sends back gives the
//      acceptor the same message, naming both jobs.
//   2. Over the collectives' framing (comm_wire.h) every pair compares
//      CommOptions: ranks that cut messages differently would fail on the
//      first large op with a confusing mismatch.
//   3. Pairs on one host (equal host_id, both allowing it) set up shared
//      memory, in one global order of pairs (by higher rank, then lower) so
//      no two ranks wait on each other: the lower rank creates the object
//      under a name derived from the job and the pair and announces it; the
//      higher maps it and removes the name at once; the lower removes it too
//      after the answer, so nothing stays in /dev/shm whatever fails.
//   4. The I/O thread starts and a world barrier (Barrier #0) proves every
//      pair carries messages both ways.
//   5. The world agrees whether every pair shares memory (the direct
//      AllReduce's condition).
// The host ids also give the world's topology (comm/topology.h): which
// ranks share a host, for the two-level AllReduce.
//
// The construction layer: the one place that picks and builds concrete
// transports (a SocketMesh) and hands them to the communicator as a Mesh.
// It may see transport/, wire/ and the algorithms (for Barrier #0).
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>

#include "device/src/comm/algorithms/op.h"
#include "device/src/comm/rendezvous/connection_plan.h"
#include "device/src/comm/transport/socket_mesh.h"
#include "device/src/comm/wire/comm_wire.h"
#include "runtime/src/auth.h"
#include "runtime/src/hello.h"
#include "runtime/src/wire.h"

namespace sinkrt::device {
namespace {

std::string RankText(uint32_t r) { return "rank " + std::to_string(r); }
std::string Ms(std::chrono::milliseconds d) { return std::to_string(d.count()) + " ms"; }

// `nonce`: the dialer's, when it has a token to prove (wire protocol 1.5;
// the token itself never travels).
Status SendHello(FrameSocket& s, uint32_t rank, uint64_t job, const Nonce* nonce = nullptr) {
  HelloFields hello;
  hello.role = fb::PeerRole::Device;
  hello.rank = static_cast<int32_t>(rank);
  if (nonce) hello.nonce.assign(nonce->begin(), nonce->end());
  hello.pid = static_cast<uint32_t>(::getpid());
  hello.job = job;
  flatbuffers::FlatBufferBuilder fbb(128);
  BuildHello(fbb, hello);
  return s.Send(fbb);
}

void SendError(FrameSocket& s, uint32_t rank, const Status& st) {
  flatbuffers::FlatBufferBuilder fbb(256);
  ErrorContext context;
  context.rank = static_cast<int>(rank);
  BuildError(fbb, st, context);
  (void)s.Send(fbb);
}

Status SendAck(FrameSocket& s) {
  flatbuffers::FlatBufferBuilder fbb(64);
  fb::AckBuilder ab(fbb);
  FinishMessage(fbb, fb::MessageBody::Ack, ab.Finish().Union());
  return s.Send(fbb);
}

// Connects to a peer above, with TLS when `tls` is set, and greets it;
// FinishDial completes the handshake.
Result<std::unique_ptr<FrameSocket>> Dial(uint32_t self, const PeerAddress& peer, uint64_t job,
                                          std::chrono::milliseconds timeout, const std::string& token,
                                          const Nonce& nonce, const TlsContext* tls, PeerInbox& inbox) {
  const std::string who = RankText(peer.rank) + " at " + peer.address.ToString();
  // A peer whose daemon is not up yet refuses: keep dialing until the peer
  // timeout, in slices, so that a JoinWorld its host abandoned stops within
  // one slice instead of holding this daemon for the whole timeout.
  constexpr auto kSlice = std::chrono::milliseconds(250);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  Result<std::unique_ptr<FrameSocket>> dialed = Unavailable("not dialed");
  for (;;) {
    if (inbox.Abandoned())
      return Aborted("rendezvous (connect): abandoned while dialing " + who + " (the JoinWorld was given up)");
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    dialed = FrameSocket::Connect(peer.address, std::max(std::chrono::milliseconds(1), std::min(left, kSlice)));
    if (dialed.ok() || std::chrono::steady_clock::now() >= deadline) break;
  }
  if (!dialed.ok()) {
    // The last attempt's reason ("Connection refused"), not its slice.
    const std::string& m = dialed.status().message();
    const size_t colon = m.rfind(": ");
    return Unavailable("rendezvous (connect): cannot reach " + who + " within " + Ms(timeout) + ": " +
                       (colon == std::string::npos ? m : m.substr(colon + 2)));
  }
  if (tls) {
    // Before the Hello, so that neither it nor anything after travels in
    // clear; the peer's certificate is checked here, ours by the peer.
    Status secured = (*dialed)->StartTls(*tls, deadline);
    if (!secured.ok()) return Status(secured.code(), "rendezvous (TLS): " + who + ": " + secured.message());
  }
  Status st = SendHello(**dialed, self, job, token.empty() ? nullptr : &nonce);
  if (!st.ok()) return Unavailable("rendezvous (handshake): " + who + ": " + st.message());
  return std::move(dialed).value();
}

// The rest of a dial: the peer's Hello, checked here (this side has both),
// then Ack, or an Error that gives the peer the same message.
// A peer with the token proves it first (its Challenge), then this side
// (its Proof); the token never travels.
Status AnswerChallenge(FrameSocket& s, const fb::Challenge& challenge, const std::string& token, const Nonce& mine,
                       const std::string& who) {
  std::span<const uint8_t> nonce, proof;
  if (challenge.nonce()) nonce = {challenge.nonce()->data(), challenge.nonce()->size()};
  if (challenge.proof()) proof = {challenge.proof()->data(), challenge.proof()->size()};
  SINKRT_ASSIGN_OR_RETURN(const Nonce theirs, NonceFrom(nonce, who + "'s Challenge"), "rendezvous (handshake)");
  if (!ProofMatches(proof, ProveToken(token, kSinkdAuthLabel, AuthSide::kServer, mine, theirs)))
    return PermissionDenied("rendezvous (handshake): " + who + " holds another token: wrong token (--token)");
  const Proof answer = ProveToken(token, kSinkdAuthLabel, AuthSide::kClient, mine, theirs);
  flatbuffers::FlatBufferBuilder fbb(128);
  FinishMessage(fbb, fb::MessageBody::Proof,
                fb::CreateProof(fbb, fbb.CreateVector(answer.data(), answer.size())).Union());
  return s.Send(fbb).WithContext("rendezvous (handshake): " + who);
}

Status FinishDial(uint32_t self, const PeerAddress& peer, FrameSocket& s, uint64_t job,
                  std::chrono::milliseconds timeout, const std::string& token, const Nonce& nonce) {
  const std::string who = RankText(peer.rank) + " at " + peer.address.ToString();
  InFrame frame;
  const Deadline deadline = DeadlineIn(timeout);
  Status st = s.Receive(&frame, deadline);
  if (st.ok() && frame.type() == fb::MessageBody::Challenge) {
    if (token.empty())
      return PermissionDenied("rendezvous (handshake): " + who + " asks for a token, and " + RankText(self) +
                              " has none (--token)");
    SINKRT_RETURN_IF_ERROR(AnswerChallenge(s, *frame.message->body_as_Challenge(), token, nonce, who));
    st = s.Receive(&frame, deadline);
  }
  if (st.code() == StatusCode::kDeadlineExceeded)
    return DeadlineExceeded("rendezvous (handshake): no Hello from " + who + " within " + Ms(timeout));
  if (!st.ok()) return Status(st.code(), "rendezvous (handshake): " + who + ": " + st.message());
  if (frame.type() == fb::MessageBody::Error) {
    Status refused = StatusFromError(*frame.message->body_as_Error());
    return Status(refused.code(), "rendezvous (handshake): " + who + " refused: " + refused.message());
  }
  if (frame.type() != fb::MessageBody::Hello || frame.payload_left != 0)
    return Unavailable("rendezvous (handshake): " + who + " answered with " + MessageName(frame.type()) +
                       ", not Hello");
  const fb::Hello& hello = *frame.message->body_as_Hello();
  Status bad;
  if (hello.role() != fb::PeerRole::Device || hello.rank() != static_cast<int32_t>(peer.rank)) {
    bad = FailedPrecondition("rendezvous: " + RankText(self) + " dialed " + who + ", but a " +
                             fb::EnumNamePeerRole(hello.role()) + " with rank " + std::to_string(hello.rank()) +
                             " answered");
  } else if (hello.protocol_major() != kProtocolMajor) {
    // The peer checked this side's Hello already; a daemon of another major
    // that accepted it anyway still speaks a protocol this one does not.
    bad = Unimplemented("rendezvous: " + who + " speaks wire protocol " + std::to_string(hello.protocol_major()) + "." +
                        std::to_string(hello.protocol_minor()) + ", " + RankText(self) + " speaks " +
                        std::to_string(kProtocolMajor) + "." + std::to_string(kProtocolMinor));
  } else if (hello.job() != job) {
    bad = FailedPrecondition("rendezvous: job mismatch: " + RankText(self) + " is in job " + std::to_string(job) +
                             ", " + RankText(peer.rank) + " is in job " + std::to_string(hello.job()));
  }
  if (!bad.ok()) {
    SendError(s, self, bad);
    return bad;
  }
  st = SendAck(s);
  if (!st.ok()) return Unavailable("rendezvous (handshake): " + who + ": " + st.message());
  return Status::Ok();
}

// The last step of an accepted connection, greeted earlier: the dialer's
// Ack, or its Error.
Status AwaitAck(uint32_t peer, FrameSocket& s, std::chrono::milliseconds timeout) {
  const std::string who = RankText(peer) + " at " + s.peer();
  InFrame frame;
  Status st = s.Receive(&frame, DeadlineIn(timeout));
  if (st.code() == StatusCode::kDeadlineExceeded)
    return DeadlineExceeded("rendezvous (handshake): no answer from " + who + " within " + Ms(timeout));
  if (!st.ok()) return Status(st.code(), "rendezvous (handshake): " + who + ": " + st.message());
  if (frame.type() == fb::MessageBody::Error) {
    Status refused = StatusFromError(*frame.message->body_as_Error());
    return Status(refused.code(), "rendezvous (handshake): refused by " + refused.message());
  }
  if (frame.type() != fb::MessageBody::Ack)
    return Unavailable("rendezvous (handshake): " + who + " sent " + MessageName(frame.type()) + ", not Ack");
  return Status::Ok();
}

Status ExchangeConfig(uint32_t self, std::vector<std::unique_ptr<FrameSocket>>& sockets, const CommOptions& o,
                      std::vector<ConfigPayload>* theirs, std::chrono::milliseconds timeout) {
  ConfigPayload mine;
  mine.segment_bytes = o.segment_bytes;
  mine.small_allreduce_bytes = o.small_allreduce_bytes;
  mine.pair_allreduce_bytes = o.pair_allreduce_bytes;
  mine.direct_allreduce_bytes = o.direct_allreduce_bytes;
  mine.segments_in_flight = static_cast<uint32_t>(o.segments_in_flight);
  mine.use_shared_memory = o.use_shared_memory ? 1 : 0;
  mine.hierarchical_allreduce = o.hierarchical_allreduce ? 1 : 0;
  MsgHeader h;
  h.kind = MsgKind::kConfig;
  const Deadline deadline = DeadlineIn(timeout);
  // Everyone writes first (a few bytes, into empty socket buffers), then reads.
  for (uint32_t p = 0; p < sockets.size(); ++p) {
    if (!sockets[p]) continue;
    SINKRT_RETURN_IF_ERROR(WriteMessage(*sockets[p], h,
                                        std::span<const uint8_t>(reinterpret_cast<uint8_t*>(&mine), sizeof mine),
                                        deadline, RankText(p))
                               .WithContext("rendezvous (options)"));
  }
  theirs->assign(sockets.size(), ConfigPayload{});
  for (uint32_t p = 0; p < sockets.size(); ++p) {
    if (!sockets[p]) continue;
    auto m = ReadMessage(*sockets[p], deadline, RankText(p), sizeof(ConfigPayload));
    if (!m.ok()) return m.status().WithContext("rendezvous (options)");
    if (m->header.kind != MsgKind::kConfig || m->payload.size() != sizeof(ConfigPayload))
      return Unavailable("rendezvous (options): " + RankText(p) + " sent no options");
    ConfigPayload c;
    std::memcpy(&c, m->payload.data(), sizeof c);
    (*theirs)[p] = c;
    auto differ = [&](const char* what, uint64_t a, uint64_t b) {
      return FailedPrecondition("rendezvous: " + RankText(self) + " has " + what + " " + std::to_string(a) + ", " +
                                RankText(p) + " has " + std::to_string(b) + ": every rank needs the same CommOptions");
    };
    if (c.segment_bytes != mine.segment_bytes) return differ("segment_bytes", mine.segment_bytes, c.segment_bytes);
    if (c.segments_in_flight != mine.segments_in_flight)
      return differ("segments_in_flight", mine.segments_in_flight, c.segments_in_flight);
    if (c.small_allreduce_bytes != mine.small_allreduce_bytes)
      return differ("small_allreduce_bytes", mine.small_allreduce_bytes, c.small_allreduce_bytes);
    if (c.pair_allreduce_bytes != mine.pair_allreduce_bytes)
      return differ("pair_allreduce_bytes", mine.pair_allreduce_bytes, c.pair_allreduce_bytes);
    if (c.direct_allreduce_bytes != mine.direct_allreduce_bytes)
      return differ("direct_allreduce_bytes", mine.direct_allreduce_bytes, c.direct_allreduce_bytes);
    if (c.hierarchical_allreduce != mine.hierarchical_allreduce)
      return differ("hierarchical_allreduce", mine.hierarchical_allreduce, c.hierarchical_allreduce);
  }
  return Status::Ok();
}

std::string ShmName(uint64_t job, uint32_t lo, uint32_t hi) {
  // The pid and a counter keep names unique between concurrent jobs in one
  // process (tests) and stale objects from a crashed run.
  static std::atomic<uint64_t> counter{0};
  char buf[128];
  std::snprintf(buf, sizeof buf, "/sinkrt-%llx-%u-%u-%d-%llu", static_cast<unsigned long long>(job), lo, hi,
                static_cast<int>(::getpid()), static_cast<unsigned long long>(counter.fetch_add(1)));
  return buf;
}

// Returns the mapped region, or null when the pair stays on TCP.
Result<std::unique_ptr<ShmRegion>> SetUpShm(uint32_t self, uint32_t peer, FrameSocket& socket, uint64_t job,
                                            const CommOptions& o, std::chrono::milliseconds timeout) {
  const size_t bytes = ShmPairBytes(o.segments_in_flight, o.segment_bytes);
  const Deadline deadline = DeadlineIn(timeout);
  const std::string who = RankText(peer);
  if (self < peer) {
    const std::string name = ShmName(job, self, peer);
    auto region = ShmRegion::Create(name, bytes);
    if (region.ok()) InitShmPair((*region)->base(), o.segments_in_flight, o.segment_bytes);
    const std::string offered = region.ok() ? name : "";
    MsgHeader h;
    h.kind = MsgKind::kShmOffer;
    const std::span<const uint8_t> name_bytes(reinterpret_cast<const uint8_t*>(offered.data()), offered.size());
    Status st = WriteMessage(socket, h, name_bytes, deadline, who);
    Result<RawMessage> answer = st.ok() ? ReadMessage(socket, deadline, who, 0) : Result<RawMessage>(st);
    if (region.ok()) UnlinkShm(name);
    if (!answer.ok()) return answer.status().WithContext("rendezvous (shared memory)");
    if (answer->header.kind != MsgKind::kShmAnswer)
      return Unavailable("rendezvous (shared memory): " + who + " did not answer the offer");
    if (!region.ok() || !(answer->header.flags & kShmMapped)) return std::unique_ptr<ShmRegion>();
    return std::move(region).value();
  }
  auto offer = ReadMessage(socket, deadline, who, 4096);
  if (!offer.ok()) return offer.status().WithContext("rendezvous (shared memory)");
  if (offer->header.kind != MsgKind::kShmOffer)
    return Unavailable("rendezvous (shared memory): " + who + " sent no offer");
  std::unique_ptr<ShmRegion> region;
  if (!offer->payload.empty()) {
    auto mapped = ShmRegion::OpenAndUnlink(offer->payload, bytes);
    if (mapped.ok() && CheckShmPair((*mapped)->base(), o.segments_in_flight, o.segment_bytes).ok())
      region = std::move(mapped).value();
  }
  MsgHeader h;
  h.kind = MsgKind::kShmAnswer;
  h.flags = region ? kShmMapped : 0;
  SINKRT_RETURN_IF_ERROR(WriteMessage(socket, h, {}, deadline, who).WithContext("rendezvous (shared memory)"));
  return region;
}

// TuneSocket's settings, on a socket known only by its descriptor: no
// Nagle delay on small segments, buffers that hold a window of segments.
void TuneFd(int fd) {
  int one = 1, bytes = 4 << 20;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes);
}

Status CheckOptions(const CommOptions& o) {
  if (o.peer_timeout.count() <= 0) return InvalidArgument("CommOptions.peer_timeout must be positive");
  if (o.rendezvous_timeout.count() < 0)
    return InvalidArgument("CommOptions.rendezvous_timeout must be positive (or 0: the peer timeout)");
  if (o.segment_bytes < 8 || o.segment_bytes % 8 != 0 || o.segment_bytes > (1u << 30))
    return InvalidArgument("CommOptions.segment_bytes must be a multiple of 8 between 8 and 1 GiB, not " +
                           std::to_string(o.segment_bytes));
  if (o.segments_in_flight < 1 || o.segments_in_flight > 1024)
    return InvalidArgument("CommOptions.segments_in_flight must be 1..1024, not " +
                           std::to_string(o.segments_in_flight));
  return Status::Ok();
}

// Phase 1(b) of Communicator::Create: takes the `below` planned peers
// under `rank` from the inbox as they dial, refuses a dial that is not
// wanted (a higher rank, a second connection, a peer no group needs) and
// greets each accepted one back.
Status AcceptLowerPeers(uint32_t rank, const std::vector<uint32_t>& planned, const std::vector<bool>& wanted,
                        uint32_t below, uint64_t job, std::chrono::milliseconds timeout, PeerInbox& inbox,
                        std::vector<std::unique_ptr<FrameSocket>>& sockets) {
  const Deadline accept_deadline = DeadlineIn(timeout);
  for (uint32_t arrived = 0; arrived < below;) {
    auto next = inbox.Accept(accept_deadline);
    if (!next.ok()) {
      if (next.status().code() != StatusCode::kDeadlineExceeded)
        return next.status().WithContext("rendezvous (connect)");
      std::string missing;
      for (uint32_t p : planned)
        if (p < rank && !sockets[p]) missing += (missing.empty() ? "" : ", ") + std::to_string(p);
      return DeadlineExceeded("rendezvous (connect): rank(s) " + missing + " did not connect to " + RankText(rank) +
                              " within " + Ms(timeout));
    }
    auto [peer, socket] = std::move(next).value();
    Status bad;
    if (peer >= rank) {
      bad = FailedPrecondition("rendezvous: " + RankText(peer) + " (from " + socket->peer() + ") dialed " +
                               RankText(rank) + ", but only lower ranks dial");
    } else if (sockets[peer]) {
      bad = FailedPrecondition("rendezvous: two connections claim " + RankText(peer) + ": from " +
                               sockets[peer]->peer() + " and from " + socket->peer());
    } else if (!wanted[peer]) {
      bad = FailedPrecondition("rendezvous: " + RankText(peer) + " dialed " + RankText(rank) + ", but " +
                               RankText(rank) + "'s collectives need no link to it: the two joined with different " +
                               "groups (or one with the full mesh)");
    }
    if (!bad.ok()) {
      SendError(*socket, rank, bad);
      return bad;
    }
    Status st = SendHello(*socket, rank, job);
    if (!st.ok())
      return Unavailable("rendezvous (handshake): " + RankText(peer) + " at " + socket->peer() + ": " + st.message());
    sockets[peer] = std::move(socket);
    ++arrived;
  }
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<Communicator>> Communicator::Create(uint32_t rank, std::vector<PeerAddress> world, uint64_t job,
                                                           PeerInbox& inbox, CommOptions options) {
  SINKRT_RETURN_IF_ERROR(CheckOptions(options));
  const uint32_t n = static_cast<uint32_t>(world.size());
  if (n == 0) return InvalidArgument("rendezvous: empty world");
  if (rank >= n)
    return InvalidArgument("rendezvous: rank " + std::to_string(rank) + " outside a world of " + std::to_string(n));
  std::vector<PeerAddress> by_rank(n);
  std::vector<bool> seen(n, false);
  for (auto& p : world) {
    if (p.rank >= n || seen[p.rank])
      return InvalidArgument("rendezvous: the world list must hold ranks 0.." + std::to_string(n - 1) +
                             " once each (bad or repeated rank " + std::to_string(p.rank) + ")");
    seen[p.rank] = true;
    by_rank[p.rank] = p;
  }
  // Every phase below, Barrier #0 included, is bounded by the rendezvous
  // timeout (HCCL_CONNECT_TIMEOUT's meaning); the collectives after it by
  // the peer timeout.
  const auto timeout = options.rendezvous_timeout.count() > 0 ? options.rendezvous_timeout : options.peer_timeout;

  // 1. Connections, to the planned peers only (connection_plan.h), in
  // four passes so that no rank waits for another to get through its own
  // list: (a) dial every planned peer above and greet it; (b) take every
  // planned peer below from the inbox and greet it back; (c) read each
  // dialed peer's greeting, check it, Ack; (d) read each accepted peer's
  // Ack. (a) waits on nobody (the inbox reads a Hello on its own thread),
  // (b) only on the lower peers' (a), (c) on the upper peers' (b), (d) on
  // the lower peers' (c): no cycle, and the handshakes of all ranks overlap
  // instead of forming a chain through the ranks (the old dial-then-accept
  // order made rank r's dials wait until rank r+1 had finished its own).
  std::vector<std::string> host_ids(n);
  for (uint32_t r = 0; r < n; ++r) host_ids[r] = by_rank[r].host_id;
  if (options.groups) SINKRT_RETURN_IF_ERROR(CheckGroupUses(*options.groups, n));
  const std::vector<uint32_t> planned = PlanConnections(rank, host_ids, options.groups);
  std::vector<bool> wanted(n, false);
  uint32_t below = 0;
  for (uint32_t p : planned) {
    wanted[p] = true;
    below += p < rank;
  }
  std::vector<std::unique_ptr<FrameSocket>> sockets(n);
  std::vector<Nonce> nonces(n);  // of this side's dials
  for (uint32_t p : planned) {
    if (p < rank) continue;
    if (!options.token.empty()) {
      SINKRT_ASSIGN_OR_RETURN(nonces[p], FreshNonce(), "rendezvous (handshake)");
    }
    SINKRT_ASSIGN_OR_RETURN(sockets[p],
                            Dial(rank, by_rank[p], job, timeout, options.token, nonces[p], options.tls.get(), inbox));
  }
  SINKRT_RETURN_IF_ERROR(AcceptLowerPeers(rank, planned, wanted, below, job, timeout, inbox, sockets));
  for (uint32_t p : planned)
    if (p > rank)
      SINKRT_RETURN_IF_ERROR(FinishDial(rank, by_rank[p], *sockets[p], job, timeout, options.token, nonces[p]));
  for (uint32_t p : planned)
    if (p < rank) SINKRT_RETURN_IF_ERROR(AwaitAck(p, *sockets[p], timeout));
  for (auto& s : sockets) {
    if (!s) continue;
    // A daemon's inbox may hand over sockets it never tuned.
    TuneFd(s->native_handle());
    SINKRT_RETURN_IF_ERROR(SetNonBlocking(s->native_handle()));
  }

  // 2. Options.
  std::vector<ConfigPayload> theirs;
  SINKRT_RETURN_IF_ERROR(ExchangeConfig(rank, sockets, options, &theirs, timeout));

  auto state = std::make_unique<State>();
  state->rank = rank;
  state->size = n;
  state->job = job;
  state->options = options;
  // Every rank derives the same hosts from the same world list: the
  // two-level AllReduce's choice is alike on every member.
  state->topology = TopologyOf(host_ids);
  state->host_ids = std::move(host_ids);

  // 3. Shared memory, pairs in (higher, lower) order: ascending peers
  // visit exactly that order from either end of every pair.
  std::vector<std::unique_ptr<ShmRegion>> regions(n);
  for (uint32_t p : planned) {
    const bool same_host = !by_rank[p].host_id.empty() && by_rank[p].host_id == by_rank[rank].host_id;
    if (!same_host || !options.use_shared_memory || !theirs[p].use_shared_memory) continue;
    SINKRT_ASSIGN_OR_RETURN(regions[p], SetUpShm(rank, p, *sockets[p], job, options, timeout));
  }

  // 4. Transports, the I/O thread, the barrier.
  auto mesh = std::make_unique<SocketMesh>(rank, n, options.segments_in_flight, options.segment_bytes, state->signals);
  for (uint32_t p : planned) mesh->AddPeer(p, std::move(sockets[p]), std::move(regions[p]));
  SocketMesh* started = mesh.get();
  state->mesh = std::move(mesh);
  state->transports.resize(n);
  for (uint32_t p = 0; p < n; ++p) state->transports[p] = state->mesh->transport(p);
  SINKRT_RETURN_IF_ERROR(started->Start());

  const Group world_group = Group::World(n);
  auto it = state->sequences.emplace(world_group.ranks, 0).first;
  TopologyFor(*state, world_group.ranks);
  Op barrier(*state, OpKind::kBarrier, it->first, rank, 0);
  state->signals.Begin(OpKind::kBarrier, barrier.group, 0);
  state->options.peer_timeout = timeout;  // the op's waits read it
  Status st = BarrierOp(barrier);
  state->options.peer_timeout = options.peer_timeout;
  state->signals.End(!st.ok());
  if (!st.ok()) return Status(st.code(), "rendezvous barrier: " + st.message());

  // 5. Whether every pair of the world shares memory: only then may an
  // AllReduce read its peers' buffers (allreduce_direct.cc), and every
  // rank must decide that alike. One more op numbered 0, outside the
  // progress peers report (their last collective stays Barrier #0).
  int32_t direct = 1;
  for (uint32_t p = 0; p < n; ++p)
    if (p != rank && !state->mesh->direct(p)) direct = 0;
  Op agree(*state, OpKind::kAllReduce, it->first, rank, 0);
  state->options.peer_timeout = timeout;
  st = AllReduceOp(agree, std::span(reinterpret_cast<uint8_t*>(&direct), sizeof direct), DType::I32, ReduceOp::Min);
  state->options.peer_timeout = options.peer_timeout;
  if (!st.ok()) return Status(st.code(), "rendezvous (shared memory): " + st.message());
  if (direct && n > 1) {
    state->world_direct = true;
    state->direct.assign(n, nullptr);
    for (uint32_t p = 0; p < n; ++p)
      if (p != rank) state->direct[p] = state->mesh->direct(p);
    state->direct_sources.assign(n, nullptr);
  }
  return std::unique_ptr<Communicator>(new Communicator(std::move(state)));
}

}  // namespace sinkrt::device
