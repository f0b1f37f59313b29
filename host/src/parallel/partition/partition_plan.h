// The partition plan of a forward graph under SEMI_AUTO_PARALLEL: a layout
// on every tensor, and for every op the redistribution of each input and
// the axes along which that input's gradient is partial (docs/design/sharding.md
// §5, §6). It is pure data, the same on every rank; emitting rank r's local
// graph from it is a separate step.
//
// Walking the ops in order:
// - a Param or Const takes the layout its first consumer needs; a later
//   consumer that needs another is an error naming both ops;
// - a dataset Input takes its first consumer's layout (each rank's queue
//   then holds its slice of the batch), or with full_batch the whole batch,
//   sliced by a redistribution;
// - an op's output takes its rule's layout (partial where a reduction loop
//   is split); Reshape and Flatten carry their input's splits to the output
//   dims that hold the same blocks, after gathering any split they cannot;
// - each input is redistributed from its layout to the one the op needs.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "host/src/parallel/ops_info/op_sharding.h"
#include "host/src/parallel/tensor_layout/layout.h"
#include "host/src/parallel/tensor_layout/redistribution.h"
#include "sinkrt/host/graph.h"
#include "sinkrt/runtime/status.h"

namespace sinkrt::host::parallel {

struct PartitionOptions {
  int64_t device_num = 1;
  bool full_batch = false;  // MindSpore's dataset_strategy "full_batch"
  // MindSpore's dataset_strategy as a tuple: per Input tensor (creation
  // order), its split per dim; the leftover ranks repeat it. Empty: the
  // loss's batch split (or full_batch).
  std::vector<std::vector<int64_t>> dataset_strategy{};  // {}: lets designated initialisers omit it
  // Inputs that stand for activations rather than data: a pipeline stage's
  // received tensors (docs/design/pipeline.md). They are placed as the batch is,
  // but their gradients are sent back, so a partial one is reduced as an
  // activation's is (a GradAllReduce in front of its reader).
  std::vector<TensorId> activation_inputs{};  // {}: lets designated initialisers omit it
};

struct InputPlan {
  TensorLayout need;          // the layout the op reads
  RedistPlan redistribution;  // from the tensor's layout to `need`
  // Axes along which this input's gradient is partial: split loops of the
  // op that do not index it. Activations get a GradAllReduce over them;
  // for a parameter they are its mirror axes.
  std::vector<int> grad_partial_axes;
};

struct OpPlan {
  bool has_rule = false;  // false for Reshape and Flatten (no loops)
  OpSharding sharding;    // when has_rule
  std::vector<InputPlan> inputs;
  std::vector<TensorLayout> outputs;
};

struct PartitionPlan {
  std::vector<TensorLayout> layouts;  // per tensor of the graph, as produced (leaves: as stored)
  std::vector<OpPlan> ops;            // per op of the graph
  // Per tensor: the op that fixed a leaf's layout (-1 if none yet).
  std::vector<int64_t> layout_owner;
  // Per Param tensor (others empty): the mirror axes of its gradient, from
  // the device matrix of its layout.
  std::vector<std::vector<int>> mirror_axes;
};

// Every rank holds the same slice under both layouts (and both or neither
// hold pending sums).
bool SameSlices(const TensorLayout& a, const TensorLayout& b);

// Reshape (and Flatten) from `in` to `out_shape`: a split of input dim i by
// `s` ranks carries over to output dim j when the dims before them hold the
// same number of elements and s divides out[j]: each rank's block of dim i,
// with everything after it, is then the same bytes as its block of dim j.
// Any other split is gathered first (`need`: the layout the reshape reads).
// Pending sums pass through (a reshape is linear).
void ReshapeLayouts(const TensorLayout& in, const Shape& out_shape, TensorLayout* need, TensorLayout* out);

// The layout of a dataset input of `shape` when the batch follows the loss:
// dim 0 split as the loss splits its labels (`labels`: the layout the loss
// op reads them in), when it divides; whole otherwise.
TensorLayout BatchInputLayout(const TensorLayout& labels, const Shape& shape);

// `strategies[i]` is op i's strategy; an empty one (or a span shorter than
// the op list) means MindSpore's default.
Result<PartitionPlan> PlanPartition(const Graph& g, std::span<const Strategy> strategies,
                                    const PartitionOptions& options);

}  // namespace sinkrt::host::parallel
