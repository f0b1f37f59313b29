// The shard strategies AUTO_PARALLEL considers for one op: every way of
// splitting its loops (op_loops.h) whose product divides the stage, each
// loop split by a divisor of its extent (a power of two when the stage is),
// loops the rule fixes left whole. Splits that use fewer ranks than the
// stage leave the rest repeating the op (MindSpore's repeated calculation):
// the cheap choice for the small ops between two model-parallel layers
// (Megatron repeats its bias adds and activations there), whose tensors
// then need no redistribution. With fully_use_devices (MindSpore's
// algo parameter of that name, on by default there, off here) a GEMM
// (MatMul, BatchMatMul, Conv2D) must use every rank.
#pragma once

#include <cstdint>
#include <vector>

#include "host/src/parallel/ops_info/op_sharding.h"
#include "sinkrt/host/graph.h"
#include "sinkrt/runtime/status.h"

namespace sinkrt::host::parallel {

// An op with more loops than this offers only the strategies that split at
// most kMaxSplitLoops of them (a Conv2D's seven loops on 16 ranks would
// otherwise offer hundreds, most of which no plan wants).
inline constexpr int kMaxSplitLoops = 3;

// The candidate strategies of `op` on `device_num` ranks, each one ShardOp
// accepts, the replicated one first, then in ascending order of ranks used;
// an op without a sharding rule is an error naming it.
// A GEMM none of whose splits uses every rank keeps its partial ones.
Result<std::vector<Strategy>> EnumerateStrategies(const Graph& g, const OpNode& op, int64_t device_num,
                                                  bool fully_use_devices = false);

// How many ways `strategy` splits op `op`'s batch: dim 0 of its first
// input that is not a parameter or constant (the dim MindSpore's default
// splits); 1 when it has none. The search prefers the larger on ties.
int64_t BatchSplit(const Graph& g, const OpNode& op, const Strategy& strategy);

}  // namespace sinkrt::host::parallel
