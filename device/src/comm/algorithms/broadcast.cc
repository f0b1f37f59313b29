// Broadcast: a pipelined chain from the root along the group's positions
// (root, root+1, ...): each member forwards segment k as soon as it has it,
// so a large buffer takes about one transfer time plus n-2 segment times.
#include <cstring>

#include "device/src/comm/algorithms/op.h"

namespace sinkrt::device {

Status BroadcastOp(Op& op, std::span<uint8_t> data, uint32_t root_pos) {
  const uint32_t n = op.n();
  if (n == 1) return Status::Ok();
  op.phase = "broadcast chain";
  const uint32_t v = (op.pos + n - root_pos) % n;  // distance from the root along the chain
  const uint32_t next = (op.pos + 1) % n, prev = (op.pos + n - 1) % n;
  const Split split{data.size(), SegmentsFor(data.size(), 1, op.segment_bytes())};
  for (uint32_t k = 0; k < split.parts; ++k) {
    std::span<uint8_t> seg = data.subspan(split.begin(k), split.size(k));
    if (v > 0) {
      SINKRT_ASSIGN_OR_RETURN(std::span<const uint8_t> in, op.Receive(prev, k, seg.size()));
      if (!seg.empty()) std::memcpy(seg.data(), in.data(), seg.size());
      op.Release(prev);
    }
    if (v < n - 1) SINKRT_RETURN_IF_ERROR(op.Post(next, k, seg).status());
  }
  return op.FlushAll();
}

}  // namespace sinkrt::device
