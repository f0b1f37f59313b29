// Barrier: dissemination (Hensgen, Finkel & Manber): in round r each member
// signals the one 2^r positions ahead and waits for the one 2^r behind;
// after ceil(lg n) rounds everyone has heard, directly or not, from all.
#include "device/src/comm/algorithms/op.h"
#include "device/src/comm/algorithms/partners.h"

namespace sinkrt::device {

// Round r's two partners, both directions, so the relation is symmetric.
void BarrierPartners(const GroupView& g, std::vector<uint32_t>& positions) {
  for (uint32_t d = 1; d < g.n(); d <<= 1) {
    positions.push_back((g.pos + d) % g.n());
    positions.push_back((g.pos + g.n() - d) % g.n());
  }
}

Status BarrierOp(Op& op) {
  const uint32_t n = op.n();
  op.phase = "barrier";
  uint32_t round = 0;
  for (uint32_t d = 1; d < n; d <<= 1, ++round) {
    SINKRT_RETURN_IF_ERROR(op.Post((op.pos + d) % n, round, {}).status());
    SINKRT_ASSIGN_OR_RETURN(auto in, op.Receive((op.pos + n - d) % n, round, 0));
    (void)in;
    op.Release((op.pos + n - d) % n);
  }
  return op.FlushAll();
}

}  // namespace sinkrt::device
