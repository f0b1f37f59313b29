#include "device/src/comm/rendezvous/connection_plan.h"

#include <algorithm>

#include "device/src/comm/algorithms/partners.h"

namespace sinkrt::device {
namespace {

void AddPartners(uint32_t rank, std::span<const uint32_t> ranks, uint32_t uses, std::span<const std::string> host_ids,
                 std::vector<bool>& needed) {
  auto at = std::lower_bound(ranks.begin(), ranks.end(), rank);
  if (at == ranks.end() || *at != rank) return;
  const GroupView g{ranks, static_cast<uint32_t>(at - ranks.begin()), host_ids};
  for (uint32_t peer : CallPartners(g, uses)) needed[peer] = true;
}

}  // namespace

std::vector<uint32_t> PlanConnections(uint32_t rank, std::span<const std::string> host_ids,
                                      const std::optional<std::vector<GroupUse>>& groups) {
  const auto n = static_cast<uint32_t>(host_ids.size());
  std::vector<bool> needed(n, !groups.has_value());
  if (groups) {
    std::vector<uint32_t> world(n);
    for (uint32_t r = 0; r < n; ++r) world[r] = r;
    AddPartners(rank, world, kWorldUses, host_ids, needed);
    for (const GroupUse& g : *groups) AddPartners(rank, g.ranks, g.uses, host_ids, needed);
  }
  std::vector<uint32_t> peers;
  for (uint32_t r = 0; r < n; ++r)
    if (needed[r] && r != rank) peers.push_back(r);
  return peers;
}

Status CheckGroupUses(const std::vector<GroupUse>& groups, uint32_t size) {
  for (size_t i = 0; i < groups.size(); ++i) {
    const std::vector<uint32_t>& ranks = groups[i].ranks;
    for (size_t k = 0; k < ranks.size(); ++k) {
      if (ranks[k] >= size || (k > 0 && ranks[k] <= ranks[k - 1]))
        return InvalidArgument("rendezvous: group " + std::to_string(i) +
                               " of the plan must hold distinct ranks of 0.." + std::to_string(size - 1) +
                               " in ascending order (it has " + std::to_string(ranks[k]) + " at " + std::to_string(k) +
                               ")");
    }
  }
  return Status::Ok();
}

}  // namespace sinkrt::device
