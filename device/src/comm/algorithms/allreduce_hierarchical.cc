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
#include "comm/algorithms/op.h"

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
