// AllGather: each member's block goes to its place in `out`, then the
// all-gather half of the ring passes the blocks around.
#include <cstring>

#include "device/src/comm/algorithms/op.h"

namespace sinkrt::device {

Status AllGatherOp(Op& op, std::span<const uint8_t> in, std::span<uint8_t> out) {
  const uint32_t n = op.n();
  std::span<uint8_t> mine = out.subspan(static_cast<size_t>(op.pos) * in.size(), in.size());
  if (!in.empty() && mine.data() != in.data()) std::memmove(mine.data(), in.data(), in.size());
  if (n == 1 || in.empty()) return Status::Ok();
  SINKRT_RETURN_IF_ERROR(RingPass(op, out, 1, DType::U8, ReduceOp::Sum, n - 1, 2 * (n - 1)));
  return op.FlushAll();
}

}  // namespace sinkrt::device
