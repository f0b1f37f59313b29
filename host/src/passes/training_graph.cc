#include "host/src/passes/training_graph.h"

#include "host/src/passes/dropout.h"

#include <algorithm>
#include <string>
#include <utility>

namespace sinkrt::host::passes {
namespace {

std::string GraphContext(const Graph& g) { return "compile graph '" + g.name() + "'"; }

void AppendUnique(std::vector<TensorId>& list, TensorId t) {
  if (std::find(list.begin(), list.end(), t) == list.end()) list.push_back(t);
}

// The labels for accuracy: those the loss compares the logits with, when
// the loss is a sparse cross-entropy of these logits (a network may have
// another i32 input before its labels); else the first i32 Input, if its
// batch matches the logits'. Anything else (a regression output, no labels)
// gets no metric rather than an error, because eval still reports loss and
// outputs.
TensorId AccuracyLabels(const Graph& g, TensorId logits, TensorId loss) {
  const TensorInfo& l = g.tensor(logits);
  if (l.shape.size() != 2 || l.dtype != DType::F32) return kInvalidTensor;
  const int64_t loss_op = g.producer(loss);
  if (loss_op >= 0) {
    const OpNode& op = g.ops()[loss_op];
    if (op.op == OpCode::SparseSoftmaxCrossEntropy && op.inputs.size() == 2 && op.inputs[0] == logits &&
        g.tensor(op.inputs[1]).kind == TensorKind::Input)
      return op.inputs[1];
  }
  for (TensorId t = 0; t < g.tensors().size(); ++t) {
    const TensorInfo& info = g.tensor(t);
    if (info.kind != TensorKind::Input || info.dtype != DType::I32) continue;
    if (info.shape.size() == 1 && info.shape[0] == l.shape[0]) return t;
    return kInvalidTensor;  // only the first i32 input is the label column
  }
  return kInvalidTensor;
}

// The forward ops (indices below `forward_ops`) that `target` depends on,
// in op order, and the Input tensors they read.
void ForwardCone(const Graph& g, size_t forward_ops, TensorId target, std::vector<size_t>* ops,
                 std::vector<TensorId>* inputs) {
  std::vector<bool> needed(g.tensors().size(), false);
  std::vector<bool> run(forward_ops, false);
  needed[target] = true;
  for (size_t i = forward_ops; i-- > 0;) {
    const OpNode& op = g.ops()[i];
    bool writes_needed = false;
    for (TensorId t : op.outputs) writes_needed = writes_needed || needed[t];
    if (!writes_needed) continue;
    run[i] = true;
    for (TensorId t : op.inputs) needed[t] = true;
  }
  for (size_t i = 0; i < forward_ops; ++i)
    if (run[i]) ops->push_back(i);
  for (TensorId t = 0; t < g.tensors().size(); ++t)
    if (needed[t] && g.tensor(t).kind == TensorKind::Input) inputs->push_back(t);
}

// The scale and MindSpore's counters, kept across steps like optimizer
// state (and so in checkpoints, as MindSpore saves scale_sense and the
// update cell's iterators).
void AddLossScaleState(Graph& g, const LossScaleManager& m, TrainingGraph* tg) {
  TensorInfo scale;
  scale.name = "loss_scale";
  scale.dtype = DType::F32;
  scale.shape = {};
  scale.kind = TensorKind::OptState;
  scale.init = InitSpec::Constant(m.loss_scale);
  tg->loss_scale = g.AddTensor(std::move(scale));
  TensorInfo counters;
  counters.name = "loss_scale/counters";
  counters.dtype = DType::I32;
  counters.shape = {3};
  counters.kind = TensorKind::OptState;
  counters.init = InitSpec::Zeros();
  tg->loss_scale_counters = g.AddTensor(std::move(counters));
}

// The parameter and gradient blocks the sharded updates work on (views,
// made by lowering), one per parameter PlanOptimizerShards shards.
void ShardOptimizer(Graph& g, OptimizerKind kind, const parallel::OptimizerSharding& sharding, TrainingGraph* tg,
                    std::vector<ParamGrad>* update_on) {
  const std::vector<parallel::OptimizerShardDecision> decisions =
      parallel::PlanOptimizerShards(g, tg->grads, kind, sharding);
  update_on->assign(tg->grads.size(), ParamGrad{kInvalidTensor, kInvalidTensor});
  for (size_t i = 0; i < decisions.size(); ++i) {
    const parallel::OptimizerShardDecision& d = decisions[i];
    const TensorInfo param = g.tensor(tg->grads[i].param);
    tg->optimizer_shard_report.push_back(parallel::DescribeShard(param, d, sharding.rank));
    if (!d.sharded) continue;
    Shape block = param.shape;
    block[0] = d.row_end - d.row_begin;
    OptimizerShard s;
    s.grad = i;
    s.group = d.group;
    s.parts = static_cast<uint32_t>(d.group.size());
    s.position = d.position;
    s.row_begin = d.row_begin;
    s.offset_bytes = d.block_bytes * d.position;
    s.bytes = d.bytes;
    s.param_slice = g.AddTensor({.name = param.name + "/zero_slice",
                                 .dtype = DType::F32,
                                 .shape = block,
                                 .kind = TensorKind::Intermediate,
                                 .init = {}});
    s.grad_slice = g.AddTensor({.name = g.tensor(tg->grads[i].grad).name + "/zero_slice",
                                .dtype = DType::F32,
                                .shape = block,
                                .kind = TensorKind::Grad,
                                .init = {}});
    (*update_on)[i] = {s.param_slice, s.grad_slice};
    tg->optimizer_shards.push_back(s);
  }
}

// Lamb's trust ratio needs the norms of whole parameters, clipping the norm
// of all of them (each counted once): per gradient, the ranks whose updates
// together cover its parameter once. A block of the
// parallel optimizer: its group (the data-parallel replicas), or, when the
// parameter is itself a slice, every rank (each holds one block of one
// slice). A slice alone: the ranks of the other slices.
std::vector<NormGroup> NormGroupsFor(const TrainingGraph& tg, const std::map<TensorId, NormGroup>& slice_groups,
                                     const NormGroup& everyone) {
  std::vector<NormGroup> out(tg.grads.size());
  for (size_t i = 0; i < tg.grads.size(); ++i) {
    auto it = slice_groups.find(tg.grads[i].param);
    if (it != slice_groups.end()) out[i] = it->second;
  }
  for (const OptimizerShard& s : tg.optimizer_shards) {
    const bool sliced = out[s.grad].ranks.size() > 1;
    out[s.grad] = sliced ? everyone : NormGroup{s.group, s.position};
  }
  return out;
}

}  // namespace

Result<TrainingGraph> BuildTrainingGraph(const Graph& forward, const OptimizerSpec& optimizer, bool with_eval,
                                         bool with_predict, bool accuracy_from_loss, float loss_seed,
                                         const LossScaleManager& loss_scale,
                                         const std::vector<uint32_t>& overflow_group, uint32_t overflow_position,
                                         const parallel::OptimizerSharding* optimizer_sharding,
                                         const std::map<TensorId, NormGroup>& slice_norm_groups) {
  SINKRT_RETURN_IF_ERROR(forward.status(), GraphContext(forward));
  if (!forward.valid(forward.loss()))
    return FailedPrecondition(GraphContext(forward) + ": the graph has no loss (call SetLoss)");
  for (TensorId t : forward.outputs())
    if (!forward.valid(t))
      return InvalidArgument(GraphContext(forward) + ": output tensor id " + std::to_string(t) + " is out of range");

  TrainingGraph tg;
  tg.graph = forward;
  Graph& g = tg.graph;
  tg.forward_ops = g.ops().size();
  tg.loss = g.loss();
  // Dropout's step counter, read by its ops and their gradients.
  const TensorId dropout_step = AttachDropoutStep(g);

  if (!loss_scale.enabled()) {
    SINKRT_ASSIGN_OR_RETURN(tg.grads, AppendBackward(g, tg.loss, loss_seed), GraphContext(forward) + ": backward");
  } else {
    SINKRT_RETURN_IF_ERROR(ValidateLossScaleManager(loss_scale), GraphContext(forward));
    AddLossScaleState(g, loss_scale, &tg);
    // d(loss) = scale · loss_seed, read from the arena every step.
    OpAttrs seed_attrs;
    seed_attrs.scale = loss_seed;
    const TensorId seed =
        g.AddOp(OpCode::BroadcastTo, {tg.loss_scale}, seed_attrs, {{{}, DType::F32}}, "loss_scale/seed").at(0);
    SINKRT_RETURN_IF_ERROR(g.status(), GraphContext(forward) + ": loss scale");
    BackwardOptions bo;
    bo.output_grads = {{tg.loss, seed}};
    SINKRT_ASSIGN_OR_RETURN(BackwardResult r, AppendBackward(g, kInvalidTensor, bo),
                            GraphContext(forward) + ": backward");
    tg.grads = std::move(r.params);
  }
  tg.backward_ops = g.ops().size();
  std::vector<ParamGrad> update_on;
  if (optimizer_sharding) ShardOptimizer(g, optimizer.kind, *optimizer_sharding, &tg, &update_on);
  if (loss_scale.enabled()) {
    OpAttrs check;
    check.loss_scale_check = loss_scale.checks_overflow();
    // Reduced gradients: a sharded parameter's block only, which differs
    // per rank, so the ranks then agree through the max of their flags.
    std::vector<uint32_t> group = overflow_group;
    if (!tg.optimizer_shards.empty() && group.empty()) {
      group = optimizer_sharding->group;
      overflow_position = optimizer_sharding->rank;
    }
    std::vector<TensorId> inputs = {tg.loss_scale};
    for (size_t i = 0; i < tg.grads.size(); ++i)
      inputs.push_back(update_on.empty() || update_on[i].grad == kInvalidTensor ? tg.grads[i].grad : update_on[i].grad);
    const bool agree = group.size() > 1;
    tg.loss_scale_status = g.AddOp(OpCode::GradOverflow, std::move(inputs), check, {{{2}, DType::F32}},
                                   agree ? "loss_scale/local_status" : "loss_scale/status")
                               .at(0);
    if (agree) {
      // One rank's overflow is every rank's: the max of the flags (1/scale
      // is the same everywhere).
      OpAttrs any;
      any.group = group;
      any.group_position = overflow_position;
      any.max = true;
      tg.loss_scale_status =
          g.AddOp(OpCode::AllReduce, {tg.loss_scale_status}, any, {{{2}, DType::F32}}, "loss_scale/status").at(0);
    }
  }
  const std::vector<NormGroup> norm_groups =
      optimizer.kind == OptimizerKind::Lamb || optimizer.clip_grad_norm > 0
          ? NormGroupsFor(tg, slice_norm_groups, NormGroup{overflow_group, overflow_position})
          : std::vector<NormGroup>{};
  SINKRT_RETURN_IF_ERROR(
      AppendOptimizer(g, tg.grads, optimizer, tg.loss_scale_status, update_on, norm_groups, &tg.learning_rate),
      GraphContext(forward) + ": optimizer");
  if (loss_scale.enabled()) {
    OpAttrs update;
    update.loss_scale_dynamic = loss_scale.kind == LossScaleManager::Kind::Dynamic;
    update.scale_factor = loss_scale.scale_factor;
    update.scale_window = loss_scale.scale_window;
    g.AddOp(OpCode::LossScaleUpdate, {tg.loss_scale, tg.loss_scale_counters, tg.loss_scale_status}, update, {},
            "loss_scale/update");
  }
  // Once per step, skipped update or not: the next step draws new masks.
  AdvanceDropoutStep(g, dropout_step);
  SINKRT_RETURN_IF_ERROR(g.status(), GraphContext(forward));
  tg.train_ops = g.ops().size();

  if (with_eval && !g.outputs().empty()) {
    TensorId logits = g.outputs().front();
    TensorId labels = AccuracyLabels(g, logits, tg.loss);
    const int64_t loss_op = g.producer(tg.loss);
    if (accuracy_from_loss && loss_op >= 0 && g.ops()[loss_op].op == OpCode::SparseSoftmaxCrossEntropy &&
        g.ops()[loss_op].inputs.size() == 2) {
      logits = g.ops()[loss_op].inputs[0];
      labels = g.ops()[loss_op].inputs[1];
    }
    if (labels != kInvalidTensor) {
      tg.accuracy = g.ArgMaxAccuracy(logits, labels);
      if (!g.status().ok() || !g.valid(tg.accuracy))
        return g.status().WithContext(GraphContext(forward) + ": eval accuracy on '" + g.tensor(logits).name + "'");
    }
  }

  for (TensorId t = 0; t < g.tensors().size(); ++t)
    if (g.tensor(t).kind == TensorKind::Input) tg.inputs.push_back(t);

  for (size_t i = 0; i < tg.train_ops; ++i) tg.train_program.push_back(i);
  tg.train_reports = {tg.loss};
  if (loss_scale.enabled()) {
    tg.train_reports.push_back(tg.loss_scale);
    tg.train_reports.push_back(tg.loss_scale_counters);
  }
  if (tg.learning_rate != kInvalidTensor) tg.train_reports.push_back(tg.learning_rate);
  if (with_eval) {
    for (size_t i = 0; i < tg.forward_ops; ++i) tg.eval_program.push_back(i);
    for (size_t i = tg.train_ops; i < g.ops().size(); ++i) tg.eval_program.push_back(i);
    AppendUnique(tg.eval_reports, tg.loss);
    if (tg.accuracy != kInvalidTensor) AppendUnique(tg.eval_reports, tg.accuracy);
    for (TensorId t : g.outputs()) AppendUnique(tg.eval_reports, t);
  }
  if (with_predict) {
    if (g.outputs().empty())
      return FailedPrecondition(GraphContext(forward) +
                                ": predict_step needs a graph output (call AddOutput on the logits)");
    const TensorId target = g.outputs().front();
    ForwardCone(g, tg.forward_ops, target, &tg.predict_program, &tg.predict_inputs);
    tg.predict_reports = {target};
  }
  return tg;
}

}  // namespace sinkrt::host::passes
