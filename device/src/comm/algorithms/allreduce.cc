// AllReduce: straight out of the peers' buffers when every member's lies
// in shared memory (allreduce_direct.cc); otherwise recursive doubling
// below the group's threshold (fewest rounds: latency), the pipelined ring
// above (2(n-1)/n of the data per rank on the wire: bandwidth);
// allreduce_choice.h says where the switch is and why. Mean is a Sum
// divided once at the end, after every send has left the buffer.
#include "comm/algorithms/allreduce_choice.h"
#include "comm/algorithms/op.h"
#include "comm/algorithms/reduce.h"

namespace sinkrt::device {

Status AllReduceOp(Op& op, std::span<uint8_t> data, DType dtype, ReduceOp rop) {
  const size_t elem = DTypeSize(dtype);
  const size_t count = data.size() / elem;
  const uint32_t n = op.n();
  bool direct = false;
  if (n > 1 && count > 0 && DirectAllReduceApplies(op.state, data.size(), count, n)) {
    SINKRT_ASSIGN_OR_RETURN(direct, DirectAllReduce(op, data, elem, dtype, rop));
  }
  if (n > 1 && count > 0 && !direct) {
    if (ChooseAllReduce(op.state.options, n, data.size(), count) == AllReduceSchedule::kDoubling) {
      SINKRT_RETURN_IF_ERROR(RecursiveDoubling(op, data, elem, dtype, rop));
    } else {
      SINKRT_RETURN_IF_ERROR(RingPass(op, data, elem, dtype, rop, 0, 2 * (n - 1)));
    }
    SINKRT_RETURN_IF_ERROR(op.FlushAll());
  }
  if (rop == ReduceOp::Mean && !direct) DivideRaw(data.data(), count, dtype, n);
  return Status::Ok();
}

}  // namespace sinkrt::device
