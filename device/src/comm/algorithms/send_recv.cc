// Send/Recv: one buffer between two ranks, cut in segments with up to the
// receive window in flight. The pair counts as a group of two: its
// sequence numbers are the pair's own.
#include <cstring>

#include "device/src/comm/algorithms/op.h"

namespace sinkrt::device {

Status SendOp(Op& op, std::span<const uint8_t> data, uint32_t peer_pos) {
  op.phase = "send";
  const Split split{data.size(), SegmentsFor(data.size(), 1, op.segment_bytes())};
  for (uint32_t k = 0; k < split.parts; ++k)
    SINKRT_RETURN_IF_ERROR(op.Post(peer_pos, k, data.subspan(split.begin(k), split.size(k))).status());
  return op.FlushAll();
}

Status RecvOp(Op& op, std::span<uint8_t> data, uint32_t peer_pos) {
  op.phase = "recv";
  const Split split{data.size(), SegmentsFor(data.size(), 1, op.segment_bytes())};
  for (uint32_t k = 0; k < split.parts; ++k) {
    std::span<uint8_t> seg = data.subspan(split.begin(k), split.size(k));
    SINKRT_ASSIGN_OR_RETURN(std::span<const uint8_t> in, op.Receive(peer_pos, k, seg.size()));
    if (!seg.empty()) std::memcpy(seg.data(), in.data(), seg.size());
    op.Release(peer_pos);
  }
  return Status::Ok();
}

}  // namespace sinkrt::device
