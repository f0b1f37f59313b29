// AllToAll: pairwise exchange. In step s (1..n-1) position p sends its
// block for p+s and receives the block of p-s, so every pair of members
// meets exactly once in each direction and each step moves one block per
// member, with no member receiving from two peers at once.
//
// A block moves as K segments with up to `segments_in_flight` posted ahead
// of this step's receives. Why no schedule can hang: order each rank's
// progress by (step, segments received). A post of segment j waits only
// for its receiver to release segment j - window, so the receiver is behind
// the sender; a receive waits for a sender that has not posted the segment,
// which it would have done `window` segments ahead of its own receives, so
// the sender is behind too. A chain of waits runs to ever smaller progress
// and cannot close into a cycle.
//
// `in` is only read and `out` only written (they may not overlap), so no
// send needs to leave before a receive lands; the final flush keeps `in`
// untouched until every block has left.
#include <cstring>

#include "device/src/comm/algorithms/op.h"

namespace sinkrt::device {

Status AllToAllOp(Op& op, std::span<const uint8_t> in, std::span<uint8_t> out) {
  const uint32_t n = op.n();
  const size_t block = in.size() / n;
  const uint32_t p = op.pos;
  if (block == 0) return Status::Ok();
  std::memcpy(out.data() + p * block, in.data() + p * block, block);
  if (n == 1) return Status::Ok();
  op.phase = "pairwise exchange";
  const Split segs{block, SegmentsFor(block, 1, op.segment_bytes())};
  const size_t K = segs.parts;
  const size_t window = op.window();
  for (uint32_t s = 1; s < n; ++s) {
    const uint32_t to = (p + s) % n, from = (p + n - s) % n;
    const std::span<const uint8_t> send = in.subspan(static_cast<size_t>(to) * block, block);
    const std::span<uint8_t> recv = out.subspan(static_cast<size_t>(from) * block, block);
    size_t sent = 0;
    for (size_t k = 0; k < K; ++k) {
      for (; sent < K && sent < k + window; ++sent)
        SINKRT_RETURN_IF_ERROR(
            op.Post(to, static_cast<uint32_t>(sent), send.subspan(segs.begin(sent), segs.size(sent))).status());
      std::span<uint8_t> dst = recv.subspan(segs.begin(k), segs.size(k));
      SINKRT_ASSIGN_OR_RETURN(std::span<const uint8_t> got, op.Receive(from, static_cast<uint32_t>(k), dst.size()));
      std::memcpy(dst.data(), got.data(), dst.size());
      op.Release(from);
    }
  }
  return op.FlushAll();
}

}  // namespace sinkrt::device
