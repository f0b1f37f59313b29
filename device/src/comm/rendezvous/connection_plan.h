// The connection plan: which peers a rank connects to at rendezvous.
//
// A full mesh is n - 1 connections per rank and n(n-1)/2 in all: at 1,000
// ranks that is ~1,000 sockets (and 4 MiB of socket buffers each way) per
// process and half a million handshakes. A rank needs only the peers its
// collectives' schedules talk to: for each group it calls something on,
// the partners of its position there (algorithms/partners.h), plus the
// world's own, Barrier #0's and the agreement AllReduce's, which every
// world runs at rendezvous. On a world spanning hosts that is O(log n) per
// rank for the default schedules (ring neighbours, doubling partners,
// dissemination partners); a group on one host that reduces directly
// needs all its pairs, as does AllToAll.
//
// Pure and symmetric: computed alike on every rank from the same host ids
// and the same groups (all members of a group call the same collectives),
// a needs b iff b needs a, so the dialing and the accepting side of every
// pair agree without a word exchanged. Two ranks whose streams disagree
// fail the rendezvous naming both (rendezvous.cc).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "sinkrt/runtime/collective_use.h"
#include "sinkrt/runtime/status.h"

namespace sinkrt::device {

// What every world runs on its world group at rendezvous: Barrier #0 and
// the 4-byte agreement AllReduce (rendezvous.cc steps 4 and 5).
inline constexpr uint32_t kWorldUses = kUsesBarrier | kUsesAllReduce;

// The peers `rank` connects to in a world of host_ids.size() ranks,
// ascending, without `rank`. `groups` unset: every peer (the full mesh);
// set: the world's own partners and those of each listed group that holds
// `rank` (others are skipped).
std::vector<uint32_t> PlanConnections(uint32_t rank, std::span<const std::string> host_ids,
                                      const std::optional<std::vector<GroupUse>>& groups);

// Ok when every group's ranks are ascending, distinct and inside a world
// of `size`; else says which group is not.
Status CheckGroupUses(const std::vector<GroupUse>& groups, uint32_t size);

}  // namespace sinkrt::device
