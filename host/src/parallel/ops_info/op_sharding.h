// Sharding rules of the forward ops: which shard strategies an op accepts,
// and the device matrix and layouts a strategy gives its inputs and
// outputs (MindSpore's OperatorInfo: CheckStrategy, InferDevMatrixShape,
// InferTensorMap, and the forward communication, which here is the partial
// state of an output layout).
//
// Each op is described by loop dims, einsum style (op_loops.h): MatMul is
// m,k x k,n -> m,n, where k is a reduction. A strategy gives the number of
// slices of every input dim (MindSpore's in_strategy); it must split a loop
// dim the same way wherever the loop dim appears. The device matrix lists
// the loop splits in loop order (MatMul [a,b,c], as MindSpore's) with the
// repeated factor appended on the right when the strategy uses fewer
// devices than the stage. A split reduction loop leaves the output partial
// along its axis: an AllReduce (or a ReduceScatter, whichever the consumer
// needs) is pending there.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "host/src/parallel/tensor_layout/layout.h"
#include "sinkrt/host/graph.h"
#include "sinkrt/runtime/status.h"

namespace sinkrt::host::parallel {

// Per input, the number of slices of each dim.
using Strategy = std::vector<std::vector<int64_t>>;

// As MindSpore prints one (declared with Graph::Shard, which needs it too).
using host::StrategyToString;

struct OpSharding {
  Strategy strategy;  // as given, or the default
  DeviceMatrix device_matrix;
  int repeated_axis = -1;             // the axis of repeated calculation (0), if any
  std::vector<int> split_axes;        // axes of the loops split more than one way, ascending
  std::vector<TensorLayout> inputs;   // the layout the op needs of each input
  std::vector<TensorLayout> outputs;  // the layout of each output
};

// The layouts `strategy` gives op `op` of `g` on a stage of `device_num`
// ranks, or MindSpore's error naming the op and the strategy: wrong number
// of inputs or dims, a value below 1, a dim not divisible, not a power of 2
// (when device_num is), more devices than the stage or a product that does
// not divide it, a loop dim split two ways, or a dim the op cannot split.
Result<OpSharding> ShardOp(const Graph& g, const OpNode& op, const Strategy& strategy, int64_t device_num);

// The split loops of `s` that do not index `layout` (one of its inputs'
// layouts), as axes: along them that input's gradient is a sum over the
// ranks (a parameter's mirror group, an activation's GradAllReduce). The
// repeated axis computes the same thing everywhere and is not one of them.
std::vector<int> GradPartialAxes(const OpSharding& s, const TensorLayout& layout);

// MindSpore's default for an op without a strategy in semi_auto_parallel:
// data parallel. The batch dim (dim 0 of the first input that is not a
// parameter or constant) is split device_num ways when the op may split it
// and it divides; every other dim is whole. When it cannot be split the op
// runs replicated.
Strategy DefaultStrategy(const Graph& g, const OpNode& op, int64_t device_num);

}  // namespace sinkrt::host::parallel
