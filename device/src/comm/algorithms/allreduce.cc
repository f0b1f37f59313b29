// AllReduce: straight out of the peers' buffers when every member's lies
// in shared memory (allreduce_direct.cc); in two levels when the group
// spans several hosts with equal shares (allreduce_hierarchical.cc);
// otherwise recursive doubling below the group's threshold (fewest rounds:
// latency), the pipelined ring above (2(n-1)/n of the data per rank on the
// wire: bandwidth); allreduce_choice.h says where the switches are and
// why. Mean is a Sum divided once at the end, after every send has left
// the buffer.
#include "device/src/comm/algorithms/allreduce_choice.h"
#include "device/src/comm/algorithms/op.h"
#include "device/src/comm/algorithms/reduce.h"

namespace sinkrt::device {
namespace {

// What an AllReduce of `count` elements in `bytes` runs, on every member
// alike (the direct schedule only tries: a member's buffer elsewhere sends
// all of them to the rest of the plan).
struct AllReducePlan {
  bool direct = false;
  bool two_level = false;
  // The flat schedule, or the cross-host one of two levels (on this
  // member's share).
  AllReduceSchedule schedule = AllReduceSchedule::kDoubling;
};

AllReducePlan PlanAllReduce(const Communicator::State& s, const GroupTopology& t, size_t bytes, size_t count,
                            uint32_t n) {
  AllReducePlan plan;
  plan.direct = DirectAllReduceApplies(s, bytes, count, n);
  plan.two_level = ChooseTwoLevel(s.options, t, count);
  if (plan.two_level) {
    const size_t share = Split{count, t.per_host}.size(t.local_pos);
    plan.schedule = ChooseAllReduce(s.options, t.hosts, share * (bytes / count), share);
  } else {
    plan.schedule = ChooseAllReduce(s.options, n, bytes, count);
  }
  return plan;
}

const char* ScheduleName(AllReduceSchedule s) { return s == AllReduceSchedule::kDoubling ? "doubling" : "ring"; }

}  // namespace

const GroupTopology& TopologyFor(Communicator::State& s, std::span<const uint32_t> ranks) {
  auto it = s.group_topologies.find(ranks);
  if (it == s.group_topologies.end())
    it = s.group_topologies
             .emplace(std::vector<uint32_t>(ranks.begin(), ranks.end()), GroupTopologyOf(s.topology, ranks, s.rank))
             .first;
  return it->second;
}

std::string DescribeAllReduce(const Communicator::State& s, std::span<const uint32_t> ranks, size_t bytes, size_t elem,
                              bool shared) {
  const size_t count = bytes / elem;
  const uint32_t n = static_cast<uint32_t>(ranks.size());
  if (n == 1 || count == 0) return "none";
  const GroupTopology t = GroupTopologyOf(s.topology, ranks, s.rank);
  const AllReducePlan plan = PlanAllReduce(s, t, bytes, count, n);
  if (plan.direct && shared) return "direct";
  if (!plan.two_level) return ScheduleName(plan.schedule);
  // The transports the neighbours in each phase really use.
  const std::string local = s.transports[t.local[(t.local_pos + 1) % t.per_host]]->kind();
  const std::string cross = s.transports[t.cross[(t.cross_pos + 1) % t.hosts]]->kind();
  return "two-level (" + local + " reduce-scatter, " + cross + " " + ScheduleName(plan.schedule) + " across " +
         std::to_string(t.hosts) + " hosts, " + local + " all-gather)";
}

Status AllReduceOp(Op& op, std::span<uint8_t> data, DType dtype, ReduceOp rop) {
  const size_t elem = DTypeSize(dtype);
  const size_t count = data.size() / elem;
  const uint32_t n = op.n();
  if (n == 1 || count == 0) return Status::Ok();
  const GroupTopology& topology = TopologyFor(op.state, op.ranks);
  const AllReducePlan plan = PlanAllReduce(op.state, topology, data.size(), count, n);
  bool direct = false;
  if (plan.direct) {
    SINKRT_ASSIGN_OR_RETURN(direct, DirectAllReduce(op, data, elem, dtype, rop));
  }
  if (direct) return Status::Ok();  // Mean divided too
  if (plan.two_level) {
    SINKRT_RETURN_IF_ERROR(TwoLevelAllReduce(op, topology, plan.schedule, data, elem, dtype, rop));
  } else {
    if (plan.schedule == AllReduceSchedule::kDoubling) {
      SINKRT_RETURN_IF_ERROR(RecursiveDoubling(op, data, elem, dtype, rop));
    } else {
      SINKRT_RETURN_IF_ERROR(RingPass(op, data, elem, dtype, rop, 0, 2 * (n - 1)));
    }
    SINKRT_RETURN_IF_ERROR(op.FlushAll());
  }
  if (rop == ReduceOp::Mean) DivideRaw(data.data(), count, dtype, n);
  return Status::Ok();
}

}  // namespace sinkrt::device
