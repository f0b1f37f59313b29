// The graph the compiler lowers: forward + backward + optimizer update, plus
// the eval metric, in one Graph so that every program indexes the same
// tensors (a parameter is one tensor, one buffer, whichever program reads it).
#pragma once

#include <cstddef>
#include <map>
#include <vector>

#include "host/src/parallel/data_parallel/optimizer_shards.h"
#include "sinkrt/host/autodiff.h"
#include "sinkrt/host/graph.h"
#include "sinkrt/host/loss_scale.h"
#include "sinkrt/host/optimizer.h"
#include "sinkrt/runtime/status.h"

namespace sinkrt::host::passes {

// Optimizer parallel (parallel/data_parallel/optimizer_shards.h): a parameter this rank
// updates one dim-0 block of. `param_slice` has no producer and
// `grad_slice` none either: lowering makes them views of the parameter and
// of its gradient at `offset_bytes` (role ParamSlice, GradSlice), fills
// the gradient's block with a ReduceScatter and the parameter's other
// blocks with an AllGather after the update.
struct OptimizerShard {
  size_t grad = 0;  // index into TrainingGraph::grads
  TensorId param_slice = kInvalidTensor, grad_slice = kInvalidTensor;
  std::vector<uint32_t> group;  // the ranks sharing the update (world ranks)
  uint32_t parts = 1, position = 0;
  int64_t row_begin = 0;
  uint64_t offset_bytes = 0;
  uint64_t bytes = 0;  // of the whole parameter
};

struct TrainingGraph {
  // Ops [0, forward_ops) are the forward graph as the user built it; ops
  // [forward_ops, train_ops) are the backward pass and the optimizer update;
  // an eval-only ArgMaxAccuracy op, if any, comes after train_ops.
  Graph graph;
  size_t forward_ops = 0;
  size_t train_ops = 0;
  std::vector<size_t> train_program;  // op indices run by train_step, in order
  std::vector<size_t> eval_program;   // op indices run by eval_step, in order
  // predict_step: the forward ops outputs()[0] depends on, and the Input
  // tensors among them (creation order): its queue's columns, which leave
  // out the label when only the loss reads it.
  std::vector<size_t> predict_program;
  std::vector<TensorId> predict_inputs;
  std::vector<TensorId> predict_reports;  // [outputs()[0]]
  std::vector<ParamGrad> grads;
  std::vector<TensorId> inputs;  // Input tensors in creation order: the queue columns
  // train_step's queue columns when they are not `inputs` (gradient
  // accumulation, passes/accumulation.h: K batches' Inputs in turn).
  std::vector<TensorId> train_inputs;
  // Ops [forward_ops, backward_ops) are the backward pass, [backward_ops,
  // train_ops) the optimizer update.
  size_t backward_ops = 0;
  TensorId loss = kInvalidTensor;
  TensorId accuracy = kInvalidTensor;  // eval's correct-prediction count, if any
  // Loss scaling (docs/guide/loss_scale.md): the scale [] f32 and the counters
  // [3] i32 (OptState), GradOverflow's status [2]; kInvalidTensor without.
  TensorId loss_scale = kInvalidTensor;
  TensorId loss_scale_counters = kInvalidTensor;
  TensorId loss_scale_status = kInvalidTensor;
  // A learning-rate schedule's f32 [1] rate of the step (LrSchedule's
  // output, docs/guide/lr_schedules.md); kInvalidTensor without.
  TensorId learning_rate = kInvalidTensor;
  // [loss], then [loss_scale, loss_scale_counters] when scaled, then the
  // schedule's learning_rate when there is one
  std::vector<TensorId> train_reports;
  // Optimizer parallel: the sharded parameters (grads order), and one line
  // per parameter saying what was decided (parallel::DescribeShard).
  std::vector<OptimizerShard> optimizer_shards;
  std::vector<std::string> optimizer_shard_report;
  std::vector<TensorId> eval_reports;  // [loss, accuracy, outputs...], no repeats
};

// Copies `forward`, appends its backward pass and the optimizer update, and,
// with `with_eval`, the accuracy metric on the first graph output when it is
// [N, C] logits: against the labels of the loss when the loss is
// SparseSoftmaxCrossEntropy(first output, an Input), else against the first
// i32 Input if it is [N]. With `with_predict`, also the predict program
// (needs a graph output). Errors name the graph and carry the failing pass's
// message.
//
// `accuracy_from_loss` (a rank's slice under SEMI_AUTO_PARALLEL): when the
// loss is a sparse cross-entropy, the metric counts on the logits and
// labels exactly as the loss reads them, i.e. after the redistribution
// that gives them whole classes and matching rows, rather than on
// outputs()[0], whose slice may hold other rows or a part of the classes.
// `loss_seed`: d(loss) of backward (AppendBackward).
// `loss_scale` (docs/guide/loss_scale.md): backward is seeded with the scale
// (times loss_seed), a GradOverflow op checks the gradients before the
// optimizer, whose updates read its status, and a LossScaleUpdate op ends
// the step. `overflow_group` (semi-auto: every rank, this one at
// `overflow_position`): the ranks hold different gradients, so the status
// is AllReduced (max) over them before any update reads it.
// `optimizer_sharding` (data parallel with the parallel optimizer): the
// updates of the parameters PlanOptimizerShards shards read and write
// their dim-0 block (TrainingGraph::optimizer_shards).
// `slice_norm_groups` (semi-auto, Lamb or clipping): per parameter that is a
// slice of its global tensor, the ranks holding the other slices (one of
// each), over which Lamb's and the clipping's sums of squares are all-reduced; with the parallel optimizer
// on top, every rank of `overflow_group` holds one block of the parameter.
Result<TrainingGraph> BuildTrainingGraph(const Graph& forward, const OptimizerSpec& optimizer, bool with_eval,
                                         bool with_predict = false, bool accuracy_from_loss = false,
                                         float loss_seed = 1.0f, const LossScaleManager& loss_scale = {},
                                         const std::vector<uint32_t>& overflow_group = {},
                                         uint32_t overflow_position = 0,
                                         const parallel::OptimizerSharding* optimizer_sharding = nullptr,
                                         const std::map<TensorId, NormGroup>& slice_norm_groups = {});

}  // namespace sinkrt::host::passes
