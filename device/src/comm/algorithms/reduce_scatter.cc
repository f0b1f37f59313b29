// ReduceScatter: the reduce-scatter half of the ring on a working copy of
// `in` (the input is const and the ring reduces in place); member p keeps
// chunk p. The copy lives in the communicator, so repeated calls of one
// size allocate nothing.
#include <cstring>

#include "device/src/comm/algorithms/op.h"
#include "device/src/comm/algorithms/reduce.h"

namespace sinkrt::device {

Status ReduceScatterOp(Op& op, std::span<const uint8_t> in, std::span<uint8_t> out, DType dtype, ReduceOp rop) {
  const uint32_t n = op.n();
  const size_t elem = DTypeSize(dtype);
  if (n > 1 && !out.empty()) {
    std::vector<uint8_t>& work = op.state.scratch;
    if (work.size() < in.size()) work.resize(in.size());
    std::memcpy(work.data(), in.data(), in.size());
    std::span<uint8_t> data(work.data(), in.size());
    SINKRT_RETURN_IF_ERROR(RingPass(op, data, elem, dtype, rop, 0, n - 1));
    SINKRT_RETURN_IF_ERROR(op.FlushAll());
    std::memcpy(out.data(), data.data() + static_cast<size_t>(op.pos) * out.size(), out.size());
  } else if (!out.empty()) {
    std::memmove(out.data(), in.data(), out.size());
  }
  if (rop == ReduceOp::Mean) DivideRaw(out.data(), out.size() / elem, dtype, n);
  return Status::Ok();
}

}  // namespace sinkrt::device
