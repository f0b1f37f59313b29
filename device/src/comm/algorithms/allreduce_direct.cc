// The direct AllReduce: every member reads the others' buffers where they
// lie, through the mappings Communicator::ShareMemory set up, so no byte
// passes through a ring slot.
//
// The buffer is cut into n chunks as the ring cuts it (Split), each chunk
// into the same K segments. Points, each a signal to every member and a
// wait for theirs:
//   arrived  every input is complete; the first signal carries a note
//            (offset in the sender's block, size, tag) so each rank finds
//            the others' buffers and a disagreement fails at once;
//   reduced  (once per segment k) position p has written segment k of
//            chunk p = the reduction of every member's, read straight from
//            their buffers (and divided, for Mean); the others copy it
//            from p at once, while it is in p's cache;
//   done     each has copied every other chunk from its owner, so no one
//            reads this rank's buffer any more and it may change.
// Memory traffic for two ranks of S bytes: reduce reads S/2 twice and
// writes S/2 on each side, the copy reads and writes S/2: 2.5 S in all,
// against 4.5 S through the rings.
//
// Bitwise: chunk p is reduced by its owner alone and copied by the rest,
// so every rank ends with the same bytes; and in the order the default
// schedule for the group uses, so switching between them changes no bit:
// for two members recursive doubling's (lower position first), for more
// the ring's (from position p+1 around to p, each new operand first).
//
// Reading a peer's chunk p while it writes its own chunk is safe: the
// chunks are disjoint, and no one writes chunk q of a buffer before the
// "reduced" point except its owner q.
#include <algorithm>
#include <cstring>

#include "device/src/comm/algorithms/op.h"
#include "device/src/comm/algorithms/partners.h"
#include "device/src/comm/algorithms/reduce.h"

namespace sinkrt::device {
namespace {

// More than two members accumulate the peers' chunks in a block this
// size before folding it into the buffer, so the partial sums stay in L1.
constexpr size_t kBlockBytes = 16 << 10;
// A chunk goes in segments of about this size, at most kMaxSegments of
// them: each costs one more wait on the peers, and buys a copy from cache.
constexpr size_t kSegmentBytes = 1 << 20;
constexpr size_t kMaxSegments = 8;

Status SignalAndAwait(Op& op, const DirectNote* note, const char* phase) {
  op.phase = phase;
  Communicator::State& s = op.state;
  for (uint32_t q = 0; q < op.n(); ++q)
    if (q != op.pos) s.direct[op.rank_at(q)]->Signal(note);
  for (uint32_t q = 0; q < op.n(); ++q) {
    if (q == op.pos) continue;
    auto got = s.direct[op.rank_at(q)]->Await(DeadlineIn(s.options.peer_timeout));
    if (!got.ok()) return op.Fail(got.status());
  }
  return Status::Ok();
}

}  // namespace

// Every member reads every other's buffer, so a group on one host needs
// every pair; one that spans hosts never runs this schedule.
void DirectPartners(const GroupView& g, std::vector<uint32_t>& positions) {
  const std::string& host = g.host_ids[g.ranks[0]];
  if (host.empty()) return;
  for (uint32_t r : g.ranks)
    if (g.host_ids[r] != host) return;
  EveryMember(g, positions);
}

bool DirectAllReduceApplies(const Communicator::State& s, size_t bytes, size_t count, uint32_t n) {
  // Fewer elements than members: recursive doubling's order, as before.
  return s.world_direct && bytes >= s.options.direct_allreduce_bytes && count >= n;
}

Result<bool> DirectAllReduce(Op& op, std::span<uint8_t> data, size_t elem, DType dtype, ReduceOp rop) {
  Communicator::State& s = op.state;
  const uint32_t n = op.n(), p = op.pos;
  op.phase = "direct: arrival";
  DirectNote mine;
  mine.bytes = data.size();
  mine.tag = op.tag(0);
  const uint8_t* own = s.shared_own.data();
  if (!s.shared_own.empty() && data.data() >= own && data.data() + data.size() <= own + s.shared_own.size()) {
    mine.offset = static_cast<uint64_t>(data.data() - own);
    mine.generation = s.shared_generation;
  }
  for (uint32_t q = 0; q < n; ++q)
    if (q != p) s.direct[op.rank_at(q)]->Signal(&mine);
  bool everyone = mine.offset != DirectNote::kNotShared;
  for (uint32_t q = 0; q < n; ++q) {
    if (q == p) continue;
    const uint32_t peer = op.rank_at(q);
    auto note = s.direct[peer]->Await(DeadlineIn(s.options.peer_timeout));
    if (!note.ok()) return op.Fail(note.status());
    if (!(note->tag == mine.tag)) return op.Fail(TagMismatch(s.rank, peer, mine.tag, note->tag));
    if (note->bytes != mine.bytes) return op.Fail(SizeMismatch(s.rank, peer, mine.tag, mine.bytes, note->bytes));
    if (note->offset == DirectNote::kNotShared) {
      everyone = false;
      continue;
    }
    auto mapped = s.direct[peer]->PeerBlock(note->generation);
    if (!mapped.ok()) return op.Fail(mapped.status());
    const std::span<const uint8_t> block = *mapped;
    if (note->offset > block.size() || block.size() - note->offset < data.size())
      return op.Fail(Internal("rank " + std::to_string(peer) + "'s buffer at offset " + std::to_string(note->offset) +
                              " runs past its shared block of " + std::to_string(block.size()) + " bytes"));
    s.direct_sources[q] = block.data() + note->offset;
  }
  // Someone's buffer is its own: the arrival was a barrier, nothing more,
  // and every member saw the same notes, so all take the rings alike.
  if (!everyone) return false;
  s.direct_sources[p] = data.data();

  // Chunks in the ring's cut; each in K segments (the same K for every
  // chunk), taken in lockstep: reduce segment k of this rank's chunk, say
  // so, then copy segment k of every other chunk as soon as its owner says
  // so, while it is still in the owner's cache rather than in memory.
  const Split chunks{data.size() / elem, n};
  const size_t K = std::clamp<size_t>((chunks.size(0) * elem + kSegmentBytes - 1) / kSegmentBytes, 1, kMaxSegments);
  auto segment = [&](uint32_t c, size_t k) {
    const Split segs{chunks.size(c), K};
    return std::pair<size_t, size_t>{(chunks.begin(c) + segs.begin(k)) * elem, segs.size(k)};
  };
  for (size_t k = 0; k < K; ++k) {
    op.phase = "direct: reduce";
    const auto [first, count] = segment(p, k);
    uint8_t* dst = data.data() + first;
    if (n == 2) {
      ReduceRaw(dst, s.direct_sources[1 - p] + first, count, dtype, rop, /*src_first=*/p == 1);
    } else {
      alignas(64) uint8_t acc[kBlockBytes];
      const size_t per = kBlockBytes / elem;
      for (size_t i = 0; i < count; i += per) {
        const size_t m = std::min(per, count - i);
        const size_t at = first + i * elem;
        std::memcpy(acc, s.direct_sources[(p + 1) % n] + at, m * elem);
        for (uint32_t j = 2; j < n; ++j) ReduceRaw(acc, s.direct_sources[(p + j) % n] + at, m, dtype, rop, true);
        ReduceRaw(dst + i * elem, acc, m, dtype, rop, false);
      }
    }
    if (rop == ReduceOp::Mean) DivideRaw(dst, count, dtype, n);
    for (uint32_t q = 0; q < n; ++q)
      if (q != p) s.direct[op.rank_at(q)]->Signal(nullptr);
    op.phase = "direct: gather";
    for (uint32_t q = 0; q < n; ++q) {
      if (q == p) continue;
      auto reduced = s.direct[op.rank_at(q)]->Await(DeadlineIn(s.options.peer_timeout));
      if (!reduced.ok()) return op.Fail(reduced.status());
      const auto [at, m] = segment(q, k);
      if (m > 0) std::memcpy(data.data() + at, s.direct_sources[q] + at, m * elem);
    }
  }
  SINKRT_RETURN_IF_ERROR(SignalAndAwait(op, nullptr, "direct: gather"));
  ++s.direct_allreduces;
  return true;
}

}  // namespace sinkrt::device
