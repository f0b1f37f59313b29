// Which ranks share a host, from the host ids the rendezvous was given: the
// two-level AllReduce's condition and its sub-groups.
//
// Ranks on one host are those with equal non-empty host ids (an empty id is
// a host of its own). Hosts are numbered in the order of their lowest rank,
// and a rank's local index is its place among its host's ranks, ascending,
// so every rank derives the same numbers from the same world list.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace sinkrt::device {

// The world's hosts, by world rank.
struct WorldTopology {
  std::vector<uint32_t> host;   // host index of each rank
  std::vector<uint32_t> local;  // each rank's index among its host's ranks
  uint32_t hosts = 0;
};

WorldTopology TopologyOf(std::span<const std::string> host_ids);

// How one group splits over its hosts, as one member (`self`) sees it.
struct GroupTopology {
  uint32_t hosts = 1;     // H: hosts the group's members span
  uint32_t per_host = 0;  // L: members on each host, 0 when the hosts hold different numbers
  // This member's host-mates in the group (itself included) and the
  // members with its local index, one per host; ranks ascending, as Groups.
  std::vector<uint32_t> local, cross;
  uint32_t local_pos = 0, cross_pos = 0;  // this member's positions in them

  // Equal shares of more than one member on more than one host: the shape
  // the two-level AllReduce needs.
  bool Layered() const { return hosts > 1 && per_host > 1; }
};

// `ranks` ascending, `self` among them.
GroupTopology GroupTopologyOf(const WorldTopology& world, std::span<const uint32_t> ranks, uint32_t self);

// Orders groups by their ranks, and finds one by a span of them without
// making a vector (the hot path allocates nothing).
struct RanksLess {
  using is_transparent = void;
  bool operator()(std::span<const uint32_t> a, std::span<const uint32_t> b) const {
    return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end());
  }
};

}  // namespace sinkrt::device
