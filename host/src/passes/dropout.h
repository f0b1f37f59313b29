// Dropout's step counter and global index (docs/guide/dropout.md).
//
// A Dropout op's mask is a function of (seed, step, op id, the element's
// index in the GLOBAL tensor). "Global" is the tensor one device would
// compute for the whole optimizer step:
//  - data parallel: rank r's sample i is sample i·n + r of the global batch
//    of n·b, as Dataset::ShardBelowBatch feeds the ranks (interleaved); a
//    tensor of T rows per sample ([B·T, D]) keeps its T rows together;
//  - SEMI_AUTO: a sharded tensor's block sits at its offsets along every
//    split dim of the whole tensor (its layout), except that where the
//    batch is split in G data-parallel groups, dim 0's rows are placed
//    where Model feeds them: group k holds samples k, k + G, ...
//    (Dataset::ShardBelowBatch), so the layout's rows of group k (its
//    k-th block of the batch) sit interleaved, as under data parallel; a
//    block of several groups' rows is cut into one Dropout a group;
//  - gradient accumulation over K micro-steps: micro-step m's rows follow
//    the m previous micro-steps' (dim 0 stacked again, outermost), so K × b
//    draws the masks one step of K·b would.
// The step is an OptState i64 scalar "dropout/step", zero at init, advanced
// once per training step by DropoutStep after the optimizer: micro-steps
// share it, sinks do not matter, checkpoints keep it.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "sinkrt/host/graph.h"
#include "sinkrt/runtime/status.h"

namespace sinkrt::host::passes {

inline constexpr const char* kDropoutStepName = "dropout/step";

// A tensor's place in the whole one: its shape and where this block starts.
struct DropoutBlock {
  Shape global_shape;
  std::vector<int64_t> offset;
};

// Where this rank's tensors sit in the global ones.
struct DropoutPlacement {
  // Data parallel: `replicas` ranks interleaved along dim 0, this one at
  // `replica`, each fed `batch` samples a step (0: unknown, a row each).
  int64_t replicas = 1, replica = 0, batch = 0;
  // SEMI_AUTO_PARALLEL: a tensor's block in the whole tensor, from its
  // layout (nullopt: whole); unset: every tensor is whole. Replicas are in
  // the layouts.
  std::function<std::optional<DropoutBlock>(TensorId)> block_of;
  // SEMI_AUTO_PARALLEL: the dataset's batch of `global_batch` samples is
  // split in `batch_groups` data-parallel groups (the inputs' dim 0), group
  // k fed the samples k, k + groups, ... A layout counts the groups'
  // batches one after the other along dim 0; each block of it is placed at
  // the samples it holds, and a Dropout whose block spans several groups is
  // replaced by Split, one Dropout a group and Concat (its output's id
  // stays; new tensors come after the others). 1: the batch is not split,
  // blocks stay blocks.
  int64_t batch_groups = 1, global_batch = 0;
};

// Sets every Dropout op's global shape and offset (OpAttrs::dropout_*).
Status PlaceDropout(Graph& g, const DropoutPlacement& where);

// The step counter, made and given to every Dropout op as its input 1;
// kInvalidTensor when the graph has no Dropout. Before the backward pass.
TensorId AttachDropoutStep(Graph& g);

// DropoutStep on `step`: the counter's advance, once per training step.
void AdvanceDropoutStep(Graph& g, TensorId step);

// Gradient accumulation over `steps` micro-steps: `op` (a Dropout or
// DropoutGrad of micro-step `micro`) with its dim 0 stacked under the
// micro-steps'.
OpAttrs DropoutForMicroStep(const OpAttrs& op, const Shape& local, int micro, int steps);

}  // namespace sinkrt::host::passes
