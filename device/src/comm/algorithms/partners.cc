// The rule table: which schedules each call may run (partners.h).
#include "device/src/comm/algorithms/partners.h"

#include <algorithm>

#include "sinkrt/runtime/collective_use.h"

namespace sinkrt::device {
namespace {

struct PartnerRule {
  uint32_t uses;  // the calls that may run this schedule
  PartnerFn partners;
};

// AllReduce picks among doubling, the ring, the direct schedule and the
// two-level one at run time (by size, by where the buffers lie, by the
// hosts), so it needs all four.
constexpr PartnerRule kRules[] = {
    {kUsesAllReduce, DoublingPartners},
    {kUsesAllReduce, TwoLevelPartners},
    {kUsesAllReduce | kUsesAllGather | kUsesReduceScatter | kUsesBroadcast, RingPartners},
    {kUsesAllReduce, DirectPartners},
    {kUsesBarrier, BarrierPartners},
    {kUsesAllToAll | kUsesSendRecv, EveryMember},
};

}  // namespace

void EveryMember(const GroupView& g, std::vector<uint32_t>& positions) {
  for (uint32_t q = 0; q < g.n(); ++q) positions.push_back(q);
}

std::vector<uint32_t> CallPartners(const GroupView& g, uint32_t uses) {
  std::vector<uint32_t> positions;
  if (g.n() > 1)
    for (const PartnerRule& rule : kRules)
      if (rule.uses & uses) rule.partners(g, positions);
  std::vector<uint32_t> ranks;
  for (uint32_t q : positions)
    if (q != g.pos) ranks.push_back(g.ranks[q]);
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  return ranks;
}

}  // namespace sinkrt::device
