// AllGatherBlocked: several AllGathers as one ring. Each input goes to its
// place (block p, p this member's position) in its output; block p of
// every output is packed into chunk p of the working copy (at p*C +
// prefix_i, C the sum of the inputs), the all-gather half of the ring
// passes the chunks around, and every other chunk q is unpacked into block
// q of the outputs.
#include <cstring>

#include "device/src/comm/algorithms/op.h"

namespace sinkrt::device {

Status AllGatherBlockedOp(Op& op, std::span<const std::span<const uint8_t>> in,
                          std::span<const std::span<uint8_t>> out) {
  const uint32_t n = op.n();
  const size_t pos = op.pos;
  size_t chunk = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    std::span<uint8_t> mine = out[i].subspan(pos * in[i].size(), in[i].size());
    if (!in[i].empty() && mine.data() != in[i].data()) std::memmove(mine.data(), in[i].data(), in[i].size());
    chunk += in[i].size();
  }
  if (n == 1 || chunk == 0) return Status::Ok();
  std::vector<uint8_t>& work = op.state.scratch;
  if (work.size() < n * chunk) work.resize(n * chunk);  // once per size; ReserveScratch does it at load
  std::span<uint8_t> data(work.data(), n * chunk);
  size_t at = pos * chunk;
  for (size_t i = 0; i < in.size(); ++i) {
    const size_t block = in[i].size();
    if (block) std::memcpy(data.data() + at, out[i].data() + pos * block, block);
    at += block;
  }
  SINKRT_RETURN_IF_ERROR(RingPass(op, data, 1, DType::U8, ReduceOp::Sum, n - 1, 2 * (n - 1)));
  SINKRT_RETURN_IF_ERROR(op.FlushAll());
  for (size_t q = 0; q < n; ++q) {
    if (q == pos) continue;
    at = q * chunk;
    for (size_t i = 0; i < in.size(); ++i) {
      const size_t block = in[i].size();
      if (block) std::memcpy(out[i].data() + q * block, data.data() + at, block);
      at += block;
    }
  }
  return Status::Ok();
}

}  // namespace sinkrt::device
