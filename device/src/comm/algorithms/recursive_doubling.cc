// Recursive doubling: lg n rounds of whole-buffer exchange with the
// partner at distance 1, 2, 4, ... (fewest rounds: the small-message
// AllReduce).
//
// A group that is not a power of two first folds its extra members in
// (MPICH's scheme): of the first 2r positions, each even one hands its data
// to the odd one above and sits out; the remaining 2^k members double; the
// odd ones hand the result back at the end. Every combination is
// lower-positioned operand first, so each step combines the same two
// partial results in the same order on both partners, and all ranks end
// with identical bytes.
#include <cstring>

#include "device/src/comm/algorithms/op.h"
#include "device/src/comm/algorithms/partners.h"
#include "device/src/comm/algorithms/reduce.h"

namespace sinkrt::device {
namespace {

constexpr const char* kPhase = "recursive doubling";

struct Segments {
  std::span<uint8_t> data;
  size_t elem;
  Split split;
  std::span<uint8_t> operator[](size_t k) const { return data.subspan(split.begin(k) * elem, split.size(k) * elem); }
};

// Sends every segment to `to`, tagged round * K + k.
Status SendAll(Op& op, uint32_t to, const Segments& s, uint32_t round) {
  const uint32_t K = static_cast<uint32_t>(s.split.parts);
  for (uint32_t k = 0; k < K; ++k) SINKRT_RETURN_IF_ERROR(op.Post(to, round * K + k, s[k]).status());
  return Status::Ok();
}

// Receives every segment from `from` and reduces it in (`reduce`) or copies it.
Status ReceiveAll(Op& op, uint32_t from, const Segments& s, uint32_t round, DType dtype, ReduceOp rop, bool reduce,
                  bool src_first) {
  const uint32_t K = static_cast<uint32_t>(s.split.parts);
  for (uint32_t k = 0; k < K; ++k) {
    std::span<uint8_t> dst = s[k];
    SINKRT_ASSIGN_OR_RETURN(std::span<const uint8_t> in, op.Receive(from, round * K + k, dst.size()));
    if (reduce)
      ReduceRaw(dst.data(), in.data(), dst.size() / s.elem, dtype, rop, src_first);
    else if (!dst.empty())
      std::memcpy(dst.data(), in.data(), dst.size());
    op.Release(from);
  }
  return Status::Ok();
}

// Both partners send their buffer and fold in the other's, up to `window`
// segments ahead; a segment is overwritten only after its own send left.
Status Exchange(Op& op, uint32_t partner, const Segments& s, uint32_t round, DType dtype, ReduceOp rop) {
  const uint32_t K = static_cast<uint32_t>(s.split.parts);
  const uint64_t base = op.Posted(partner);
  const bool partner_first = partner < op.pos;
  uint32_t sent = 0;
  for (uint32_t k = 0; k < K; ++k) {
    while (sent < K && sent < k + op.window()) {
      SINKRT_RETURN_IF_ERROR(op.Post(partner, round * K + sent, s[sent]).status());
      ++sent;
    }
    std::span<uint8_t> dst = s[k];
    SINKRT_ASSIGN_OR_RETURN(std::span<const uint8_t> in, op.Receive(partner, round * K + k, dst.size()));
    SINKRT_RETURN_IF_ERROR(op.WaitSent(partner, base + k + 1));
    ReduceRaw(dst.data(), in.data(), dst.size() / s.elem, dtype, rop, partner_first);
    op.Release(partner);
  }
  return Status::Ok();
}

// The shape of the schedule for n members: the 2^k that double, the rem
// folded in, and who is whose partner (shared by the schedule and by
// DoublingPartners, which the rendezvous plans connections from).
struct Shape {
  uint32_t pof2 = 1, rem = 0, rounds = 0;
  explicit Shape(uint32_t n) {
    while (pof2 * 2 <= n) pof2 *= 2;
    rem = n - pof2;
    while ((1u << rounds) < pof2) ++rounds;
  }
  bool folds(uint32_t p) const { return p < 2 * rem; }
  // Position among the 2^k doubling members, -1 if folded out.
  int64_t vpos(uint32_t p) const {
    if (!folds(p)) return int64_t{p} - rem;
    return p % 2 == 0 ? int64_t{-1} : int64_t{p / 2};
  }
  uint32_t partner(int64_t vpos, uint32_t round) const {
    const uint32_t vpartner = static_cast<uint32_t>(vpos) ^ (1u << round);
    return vpartner < rem ? vpartner * 2 + 1 : vpartner + rem;
  }
  // The other end of a fold: p+1 for an even p, p-1 for an odd one.
  uint32_t fold_partner(uint32_t p) const { return p % 2 == 0 ? p + 1 : p - 1; }
};

}  // namespace

void DoublingPartners(const GroupView& g, std::vector<uint32_t>& positions) {
  const Shape shape(g.n());
  if (shape.folds(g.pos)) positions.push_back(shape.fold_partner(g.pos));
  const int64_t vpos = shape.vpos(g.pos);
  if (vpos >= 0)
    for (uint32_t r = 0; r < shape.rounds; ++r) positions.push_back(shape.partner(vpos, r));
}

Status RecursiveDoubling(Op& op, std::span<uint8_t> data, size_t elem, DType dtype, ReduceOp rop) {
  const uint32_t n = op.n();
  const uint32_t p = op.pos;
  if (n == 1) return Status::Ok();
  op.phase = kPhase;
  const size_t count = data.size() / elem;
  const Segments s{data, elem, Split{count, SegmentsFor(count, elem, op.segment_bytes())}};
  const Shape shape(n);
  const uint32_t last_round = shape.rounds + 1;

  const int64_t vpos = shape.vpos(p);
  if (shape.folds(p)) {
    if (p % 2 == 0) {
      SINKRT_RETURN_IF_ERROR(SendAll(op, shape.fold_partner(p), s, 0));
    } else {
      SINKRT_RETURN_IF_ERROR(ReceiveAll(op, shape.fold_partner(p), s, 0, dtype, rop, true, /*src_first=*/true));
    }
  }

  if (vpos >= 0) {
    for (uint32_t r = 0; r < shape.rounds; ++r)
      SINKRT_RETURN_IF_ERROR(Exchange(op, shape.partner(vpos, r), s, r + 1, dtype, rop));
  }

  const uint32_t rem = shape.rem;
  if (p < 2 * rem) {
    if (p % 2 == 1) {
      SINKRT_RETURN_IF_ERROR(SendAll(op, p - 1, s, last_round));
    } else {
      // Our fold-in send must be out of `data` before the result lands there.
      SINKRT_RETURN_IF_ERROR(op.WaitSent(p + 1, op.Posted(p + 1)));
      SINKRT_RETURN_IF_ERROR(ReceiveAll(op, p + 1, s, last_round, dtype, rop, false, false));
    }
  }
  return Status::Ok();
}

}  // namespace sinkrt::device
