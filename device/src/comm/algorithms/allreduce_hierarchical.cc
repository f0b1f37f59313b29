// The two-level AllReduce (NCCL's and Horovod's hierarchical allreduce)
// for a group of L members on each of H hosts:
//
//   (a) reduce-scatter among this host's members (the ring's first half,
//       over shared memory where the pairs have it): local position p ends
//       owning chunk p of the buffer, summed over the host (the ring's
//       partition, so chunks may differ by an element);
//   (b) AllReduce of chunk p among the H members with local position p,
//       one per host (over TCP): doubling or the ring as the caller's plan
//       says (ChooseAllReduce on that group of H and chunk p's size);
//   (c) all-gather among this host's members (the ring's second half).
//
// Per rank only 1/L of the data crosses hosts, in one AllReduce of H
// members instead of a ring of H*L in which every step may cross.
//
// Bitwise equal on every rank: chunk p is summed over each host in that
// host's ring order, and those H partial sums are combined by a schedule
// that gives its whole group identical bytes; (c) only copies. The order
// differs from the flat schedules', so the result matches them within
// rounding, not bit for bit.
//
// Each phase is an op of its own on its sub-group (SubOp): numbered in
// that group, so its messages can match no other op's, and the two ring
// halves, which both number their segments from 0, get two numbers. Every
// phase flushes before the next: (c) overwrites chunks that (a) sent.
#include <algorithm>
#include <initializer_list>

#include "device/src/comm/algorithms/op.h"
#include "device/src/comm/algorithms/partners.h"
#include "device/src/comm/topology.h"

namespace sinkrt::device {

Status TwoLevelAllReduce(Op& op, const GroupTopology& t, AllReduceSchedule cross_schedule, std::span<uint8_t> data,
                         size_t elem, DType dtype, ReduceOp rop) {
  const uint32_t L = t.per_host, H = t.hosts;
  const Split chunks{data.size() / elem, L};
  {
    Op local = SubOp(op, OpKind::kReduceScatter, t.local, t.local_pos);
    SINKRT_RETURN_IF_ERROR(RingPass(local, data, elem, dtype, rop, 0, L - 1));
    SINKRT_RETURN_IF_ERROR(local.FlushAll());
  }
  {
    std::span<uint8_t> share = data.subspan(chunks.begin(t.local_pos) * elem, chunks.size(t.local_pos) * elem);
    Op cross = SubOp(op, OpKind::kAllReduce, t.cross, t.cross_pos);
    if (cross_schedule == AllReduceSchedule::kDoubling) {
      SINKRT_RETURN_IF_ERROR(RecursiveDoubling(cross, share, elem, dtype, rop));
    } else {
      SINKRT_RETURN_IF_ERROR(RingPass(cross, share, elem, dtype, rop, 0, 2 * (H - 1)));
    }
    SINKRT_RETURN_IF_ERROR(cross.FlushAll());
  }
  Op local = SubOp(op, OpKind::kAllGather, t.local, t.local_pos);
  SINKRT_RETURN_IF_ERROR(RingPass(local, data, elem, dtype, rop, L - 1, 2 * (L - 1)));
  return local.FlushAll();
}

}  // namespace sinkrt::device

namespace sinkrt::device {

// The two-level schedule's partners: the ring neighbours among this
// member's host-mates (phases 1 and 3), and whichever of doubling's and the
// ring's partners the cross-host AllReduce among the members with its
// local index may use (phase 2: it picks by the chunk's size). None unless
// the group is layered (equal shares on several hosts); the knob is not
// looked at, so a world with it off keeps a few links it will not use.
void TwoLevelPartners(const GroupView& g, std::vector<uint32_t>& positions) {
  const WorldTopology world = TopologyOf(g.host_ids);
  const GroupTopology t = GroupTopologyOf(world, g.ranks, g.ranks[g.pos]);
  if (!t.Layered()) return;
  auto position_of = [&](uint32_t rank) {
    return static_cast<uint32_t>(std::lower_bound(g.ranks.begin(), g.ranks.end(), rank) - g.ranks.begin());
  };
  auto add = [&](const std::vector<uint32_t>& sub, uint32_t pos, std::initializer_list<PartnerFn> fns) {
    std::vector<uint32_t> local_positions;
    const GroupView view{sub, pos, g.host_ids};
    for (PartnerFn fn : fns) fn(view, local_positions);
    for (uint32_t q : local_positions) positions.push_back(position_of(sub[q]));
  };
  add(t.local, t.local_pos, {RingPartners});
  add(t.cross, t.cross_pos, {DoublingPartners, RingPartners});
}

}  // namespace sinkrt::device
