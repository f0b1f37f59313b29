/// \file
/// What a rank's task stream calls on each of its communicator groups: the
/// input from which a world's rendezvous plans its connections (issue 22,
/// device/src/comm/rendezvous/connection_plan.h). A rank connects only to
/// the peers that those calls' schedules talk to, instead of to every rank.
///
/// Known before the world is joined: the host has compiled every rank's
/// stream before JoinWorld, and a stream's tasks name their groups.
#pragma once

#include <cstdint>
#include <vector>

namespace sinkrt {

class VerifiedStream;

/// One bit per collective call (not per algorithm: the device maps a call to
/// the schedules it may run, connection_plan.h).
enum CollectiveUse : uint32_t {
  kUsesAllReduce = 1u << 0,
  kUsesAllGather = 1u << 1,  ///< the blocked variant too
  kUsesReduceScatter = 1u << 2,
  kUsesBroadcast = 1u << 3,
  kUsesAllToAll = 1u << 4,
  kUsesSendRecv = 1u << 5,  ///< its group is the pair
  kUsesBarrier = 1u << 6,
};

/// The calls made on one group (its ranks ascending).
struct GroupUse {
  std::vector<uint32_t> ranks;  ///< the group's world ranks, ascending
  uint32_t uses = 0;            ///< CollectiveUse bits
  /// Same ranks and same calls.
  bool operator==(const GroupUse&) const = default;
};

/// Every group `stream` (rank `rank`'s) calls a collective on, with the
/// calls, in the order first met; a Send or Recv counts on the pair
/// {rank, peer}. Both ends of every pair and all members of a group list it
/// alike, since all members make the same calls.
std::vector<GroupUse> CollectiveUses(const VerifiedStream& stream, uint32_t rank);

}  // namespace sinkrt
