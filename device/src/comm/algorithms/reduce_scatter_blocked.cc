// ReduceScatterBlocked: several ReduceScatters as one ring. Block q of
// every input is packed into chunk q of the working copy (chunk q at
// q*C, input i's block at q*C + prefix_i, C the sum of the blocks), so
// the ring's n equal chunks of C bytes are exactly those blocks: every
// element travels the ring, and is summed, in the order the unfused
// ReduceScatter of its input alone would use. Member p keeps chunk p and
// unpacks it into the outputs. The inputs are copied whole before any
// output is written, so an output may lie inside an input.
#include <cstring>

#include "device/src/comm/algorithms/op.h"
#include "device/src/comm/algorithms/reduce.h"

namespace sinkrt::device {

Status ReduceScatterBlockedOp(Op& op, std::span<const std::span<const uint8_t>> in,
                              std::span<const std::span<uint8_t>> out, DType dtype, ReduceOp rop) {
  const uint32_t n = op.n();
  const size_t elem = DTypeSize(dtype);
  size_t chunk = 0;
  for (const auto& o : out) chunk += o.size();
  if (n > 1 && chunk > 0) {
    std::vector<uint8_t>& work = op.state.scratch;
    if (work.size() < n * chunk) work.resize(n * chunk);  // once per size; ReserveScratch does it at load
    std::span<uint8_t> data(work.data(), n * chunk);
    for (uint32_t q = 0; q < n; ++q) {
      size_t at = q * chunk;
      for (size_t i = 0; i < in.size(); ++i) {
        const size_t block = out[i].size();
        if (block) std::memcpy(data.data() + at, in[i].data() + q * block, block);
        at += block;
      }
    }
    SINKRT_RETURN_IF_ERROR(RingPass(op, data, elem, dtype, rop, 0, n - 1));
    SINKRT_RETURN_IF_ERROR(op.FlushAll());
    size_t at = static_cast<size_t>(op.pos) * chunk;
    for (const auto& o : out) {
      if (!o.empty()) std::memcpy(o.data(), data.data() + at, o.size());
      at += o.size();
    }
  } else {
    for (size_t i = 0; i < out.size(); ++i)
      if (!out[i].empty()) std::memmove(out[i].data(), in[i].data(), out[i].size());
  }
  if (rop == ReduceOp::Mean)
    for (const auto& o : out) DivideRaw(o.data(), o.size() / elem, dtype, n);
  return Status::Ok();
}

}  // namespace sinkrt::device
