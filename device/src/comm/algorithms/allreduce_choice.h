// Which schedule an AllReduce runs: recursive doubling or the ring, and
// whether it runs them in two levels (per host, then across hosts).
//
// Why a rule per group size, and why it errs towards doubling: a fused
// AllReduce of S bytes must never be slower than the same bytes as several
// smaller AllReduces (issue 21). Each schedule alone costs about a fixed
// part plus a part per byte, so it is subadditive; fusion can lose only
// where the whole takes the ring while its pieces take doubling, and that
// happens when the switch sits below the size at which the ring starts to
// win. A switch at or above that size keeps T(S) <= sum T(S_i): above it the
// ring's per-byte advantage covers the pieces' fixed costs, below it both
// sides double.
//
// Two members are the case the single threshold got wrong: there the ring
// moves no fewer bytes than a swap (each rank sends S/2 twice instead of S
// once) but waits on its neighbour twice, once per phase, and doubling was
// as fast or faster at every size from 64 KiB to 64 MiB (bench/history/communication.md,
// "Fusion never loses"), where the 256 KiB switch for larger groups made a
// fused 256 KiB-4 MiB lose to pieces that doubled.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "device/src/comm/communicator.h"
#include "device/src/comm/topology.h"

namespace sinkrt::device {

enum class AllReduceSchedule { kDoubling, kRing };

// |bytes| in |count| elements over a group of |n| > 1 members. The ring
// needs an element per member; small_allreduce_bytes == 0 forces the ring
// at every size and group (its summation order is ReduceScatter's, which
// tests compare bitwise), otherwise a group of two switches at the larger
// of the two thresholds.
inline AllReduceSchedule ChooseAllReduce(const CommOptions& o, uint32_t n, size_t bytes, size_t count) {
  if (count < n) return AllReduceSchedule::kDoubling;
  if (o.small_allreduce_bytes == 0) return AllReduceSchedule::kRing;
  const size_t below = n == 2 ? std::max(o.small_allreduce_bytes, o.pair_allreduce_bytes) : o.small_allreduce_bytes;
  return bytes < below ? AllReduceSchedule::kDoubling : AllReduceSchedule::kRing;
}

// Two levels (allreduce_hierarchical.cc) whenever the group spans several
// hosts with the same number of members, more than one, on each, unless
// turned off. There is no size switch: only 1/L of the data per rank
// crosses the slower link, and the cross-host AllReduce of that share
// picks doubling or the ring by the rule above on its own group of H, so a
// small buffer still pays few rounds there. Each local member needs an
// element of its own (the local ring's chunks); fewer elements stay flat.
inline bool ChooseTwoLevel(const CommOptions& o, const GroupTopology& t, size_t count) {
  return o.hierarchical_allreduce && t.Layered() && count >= t.per_host;
}

}  // namespace sinkrt::device
