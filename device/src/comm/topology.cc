#include "device/src/comm/topology.h"

#include <algorithm>

namespace sinkrt::device {

WorldTopology TopologyOf(std::span<const std::string> host_ids) {
  WorldTopology t;
  const size_t n = host_ids.size();
  t.host.assign(n, 0);
  t.local.assign(n, 0);
  std::vector<uint32_t> members;  // ranks so far per host
  for (size_t r = 0; r < n; ++r) {
    uint32_t h = t.hosts;
    if (!host_ids[r].empty())
      for (size_t q = 0; q < r; ++q)
        if (host_ids[q] == host_ids[r]) {
          h = t.host[q];
          break;
        }
    if (h == t.hosts) {
      ++t.hosts;
      members.push_back(0);
    }
    t.host[r] = h;
    t.local[r] = members[h]++;
  }
  return t;
}

GroupTopology GroupTopologyOf(const WorldTopology& world, std::span<const uint32_t> ranks, uint32_t self) {
  GroupTopology g;
  // Members per host, in the order the group meets the hosts.
  std::vector<uint32_t> hosts, counts;
  std::vector<uint32_t> index(ranks.size());  // each member's local index in the group
  for (size_t i = 0; i < ranks.size(); ++i) {
    const uint32_t h = world.host[ranks[i]];
    auto it = std::find(hosts.begin(), hosts.end(), h);
    if (it == hosts.end()) {
      hosts.push_back(h);
      counts.push_back(0);
      it = hosts.end() - 1;
    }
    index[i] = counts[it - hosts.begin()]++;
  }
  g.hosts = static_cast<uint32_t>(hosts.size());
  const bool equal = std::all_of(counts.begin(), counts.end(), [&](uint32_t c) { return c == counts[0]; });
  g.per_host = equal && !counts.empty() ? counts[0] : 0;
  size_t me = 0;
  while (me < ranks.size() && ranks[me] != self) ++me;
  if (me == ranks.size()) return g;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (world.host[ranks[i]] == world.host[self]) {
      if (ranks[i] == self) g.local_pos = static_cast<uint32_t>(g.local.size());
      g.local.push_back(ranks[i]);
    }
    if (index[i] == index[me]) {
      if (ranks[i] == self) g.cross_pos = static_cast<uint32_t>(g.cross.size());
      g.cross.push_back(ranks[i]);
    }
  }
  return g;
}

}  // namespace sinkrt::device
