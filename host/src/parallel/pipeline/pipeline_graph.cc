// One pipeline stage's training graph (parallel/pipeline/pipeline_graph.h).
#include "host/src/parallel/pipeline/pipeline_graph.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include "host/src/passes/dropout.h"
#include "host/src/passes/op_clone.h"
#include "sinkrt/host/autodiff.h"

namespace sinkrt::host::parallel {
namespace {

std::string Micro(int m) { return "mb" + std::to_string(m) + "/"; }

// The template: the stage's forward, then its backward.
struct Template {
  Graph graph;
  size_t forward_ops = 0;
  std::vector<ParamGrad> grads;
  TensorId loss = kInvalidTensor;
  TensorId dropout_step = kInvalidTensor;  // the stage's Dropout step counter, if it has Dropout
  // Per link end: the Input the gradient for a sent tensor arrives in
  // (links this stage sends on), or the gradient of a received tensor
  // (links it receives on); kInvalidTensor when the link carries none.
  std::map<int, TensorId> grad_of_link;
};

Result<Template> MakeTemplate(const PipelineStageSpec& spec) {
  const parallel::PipelineSchedule& sched = *spec.schedule;
  const int stage = spec.stage->stage;
  Template t;
  t.graph = spec.stage->graph;
  Graph& g = t.graph;
  t.loss = spec.loss;
  // Dropout's step counter (passes/dropout.h), an input of the stage's
  // Dropout ops before their gradients copy them; shared by the
  // micro-batches, advanced once after the update.
  t.dropout_step = passes::AttachDropoutStep(g);
  t.forward_ops = g.ops().size();

  BackwardOptions options;
  options.seed = 1.0f / static_cast<float>(sched.micro_size);
  // The gradients a sent tensor gets back, one Input per link; summed when
  // several stages read it.
  std::map<TensorId, std::vector<TensorId>> seeds;
  for (const StageLinkEnd& end : spec.links) {
    const parallel::PipelineLink& link = sched.links[static_cast<size_t>(end.link)];
    if (link.from != stage || !link.grad) continue;
    const TensorInfo& info = g.tensor(end.tensor);
    const TensorId in = g.Input(info.name + "/grad_from_stage" + std::to_string(link.to), info.shape, info.dtype);
    t.grad_of_link[end.link] = in;
    seeds[end.tensor].push_back(in);
  }
  for (auto& [tensor, ins] : seeds) {
    TensorId seed = ins.front();
    if (ins.size() > 1) {
      const TensorInfo& info = g.tensor(tensor);
      seed = g.AddOp(OpCode::AddN, ins, OpAttrs{}, {{info.shape, info.dtype}}, info.name + "/grad_sum").at(0);
    }
    options.output_grads.emplace_back(tensor, seed);
  }
  std::vector<int> wrt_links;
  for (const StageLinkEnd& end : spec.links) {
    const parallel::PipelineLink& link = sched.links[static_cast<size_t>(end.link)];
    if (link.to != stage || !link.grad) continue;
    if (std::find(options.wrt.begin(), options.wrt.end(), end.tensor) == options.wrt.end())
      options.wrt.push_back(end.tensor);
    wrt_links.push_back(end.link);
  }
  SINKRT_RETURN_IF_ERROR(g.status(), "pipeline stage " + std::to_string(stage) + " seeds");
  if (t.loss == kInvalidTensor && options.output_grads.empty())
    return InvalidArgument("pipeline stage " + std::to_string(stage) +
                           " neither computes the loss nor sends anything a later stage differentiates: its "
                           "parameters would never be trained");
  SINKRT_ASSIGN_OR_RETURN(BackwardResult back, AppendBackward(g, t.loss, options),
                          "pipeline stage " + std::to_string(stage) + " backward");
  t.grads = std::move(back.params);
  for (const StageLinkEnd& end : spec.links) {
    const parallel::PipelineLink& link = sched.links[static_cast<size_t>(end.link)];
    if (link.to != stage || !link.grad) continue;
    for (const auto& [x, dx] : back.wrt_grads)
      if (x == end.tensor) t.grad_of_link[end.link] = dx;
  }
  return t;
}

// A Send's or Recv's attributes for micro-batch `m` of `end`'s link, in the
// direction given: the pair, the peer, the schedule's order and the channel.
Result<OpAttrs> TransferAttrs(const PipelineStageSpec& spec, const parallel::PipelineSchedule& sched,
                              const StageLinkEnd& end, int m, bool backward) {
  const parallel::PipelineMessage* msg = sched.Find(end.link, m, backward);
  if (!msg) return Internal("the schedule has no message for link " + std::to_string(end.link));
  OpAttrs a;
  a.group = {std::min(spec.rank, end.peer), std::max(spec.rank, end.peer)};
  a.group_position = spec.rank < end.peer ? 0 : 1;
  a.peer = end.peer;
  a.comm_order = msg->order;
  a.channel = 2 * end.link + (backward ? 1 : 0);
  return a;
}

// eval_step (see the header): appended after train_step's ops.
Status AddEval(const PipelineStageSpec& spec, const Template& tpl, const std::vector<TensorId>& shared,
               passes::TrainingGraph& out) {
  const parallel::PipelineSchedule& sched = *spec.eval_schedule;
  const int stage = spec.stage->stage;
  const int M = sched.micro_size;
  const Graph& tg = tpl.graph;
  Graph& u = out.graph;
  const size_t nt = tg.tensors().size();
  const size_t first_op = u.ops().size();
  std::vector<bool> received(nt, false);
  for (const StageLinkEnd& end : spec.links)
    if (sched.links[static_cast<size_t>(end.link)].to == stage) received[end.tensor] = true;
  auto micro = [](int m) { return "eval/mb" + std::to_string(m) + "/"; };

  std::vector<std::vector<TensorId>> map(static_cast<size_t>(M), std::vector<TensorId>(nt, kInvalidTensor));
  for (TensorId t = 0; t < nt; ++t) {
    const TensorInfo& info = tg.tensor(t);
    if (info.kind == TensorKind::Param || info.kind == TensorKind::Const || info.kind == TensorKind::State ||
        info.kind == TensorKind::OptState) {
      for (int m = 0; m < M; ++m) map[m][t] = shared[t];
    } else if (info.kind == TensorKind::Input && !received[t] && t < spec.stage->graph.tensors().size()) {
      // The dataset column, the same Input train_step reads, cut again.
      const TensorId whole = u.FindTensor(info.name);
      if (whole == kInvalidTensor) return Internal("dataset column '" + info.name + "' is not in the stage graph");
      if (M == 1) {
        map[0][t] = whole;
        continue;
      }
      std::vector<std::pair<Shape, DType>> outs(static_cast<size_t>(M), {info.shape, info.dtype});
      OpAttrs split;
      split.axis = 0;
      split.sizes.assign(static_cast<size_t>(M), info.shape[0]);
      std::vector<TensorId> pieces =
          u.AddOp(OpCode::Split, {whole}, split, outs, "eval/" + info.name + "/micro_batches");
      for (int m = 0; m < M && m < static_cast<int>(pieces.size()); ++m) map[m][t] = pieces[static_cast<size_t>(m)];
    }
  }
  SINKRT_RETURN_IF_ERROR(u.status());
  auto attrs = [&](const StageLinkEnd& end, int m) { return TransferAttrs(spec, sched, end, m, false); };
  auto arm = [&](int m) -> Status {
    for (const StageLinkEnd& end : spec.links) {
      if (sched.links[static_cast<size_t>(end.link)].to != stage) continue;
      TensorId& slot = map[static_cast<size_t>(m)][end.tensor];
      if (slot != kInvalidTensor) continue;
      SINKRT_ASSIGN_OR_RETURN(OpAttrs a, attrs(end, m));
      const TensorInfo& info = tg.tensor(end.tensor);
      slot = u.AddOp(OpCode::Recv, {}, a, {{info.shape, info.dtype}}, micro(m) + "recv/" + info.name).at(0);
    }
    return u.status();
  };

  std::vector<TensorId> losses, correct, logits;
  TensorId loss_logits = kInvalidTensor, loss_labels = kInvalidTensor;
  if (tpl.loss != kInvalidTensor) {
    const int64_t op = tg.producer(tpl.loss);
    if (op >= 0 && tg.ops()[op].op == OpCode::SparseSoftmaxCrossEntropy && tg.ops()[op].inputs.size() == 2) {
      loss_logits = tg.ops()[op].inputs[0];
      loss_labels = tg.ops()[op].inputs[1];
    }
  }
  SINKRT_RETURN_IF_ERROR(arm(0));
  for (int m = 0; m < M; ++m) {
    if (m + 1 < M) SINKRT_RETURN_IF_ERROR(arm(m + 1));
    std::vector<TensorId>& mp = map[static_cast<size_t>(m)];
    for (size_t i = 0; i < tpl.forward_ops; ++i) {
      const OpNode& op = tg.ops()[i];
      SINKRT_RETURN_IF_ERROR(passes::CloneOp(tg, op, micro(m), u, mp, "eval micro-batch " + std::to_string(m)));
      for (TensorId t : op.outputs)
        for (const StageLinkEnd& end : spec.links) {
          if (sched.links[static_cast<size_t>(end.link)].from != stage || end.tensor != t) continue;
          SINKRT_ASSIGN_OR_RETURN(OpAttrs a, attrs(end, m));
          u.AddOp(OpCode::Send, {mp[t]}, a, {},
                  micro(m) + "send/" + tg.tensor(t).name + "/to_rank" + std::to_string(end.peer));
        }
      SINKRT_RETURN_IF_ERROR(u.status());
    }
    if (tpl.loss != kInvalidTensor) {
      losses.push_back(mp[tpl.loss]);
      if (loss_logits != kInvalidTensor) {
        logits.push_back(mp[loss_logits]);
        correct.push_back(u.ArgMaxAccuracy(mp[loss_logits], mp[loss_labels]));
      }
    }
  }
  if (tpl.loss != kInvalidTensor) {
    auto mean = [&](const std::vector<TensorId>& xs, float scale, const std::string& name) {
      TensorId sum = xs.front();
      if (xs.size() > 1) sum = u.AddOp(OpCode::AddN, xs, OpAttrs{}, {{{}, DType::F32}}, name + "/sum").at(0);
      OpAttrs a;
      a.scale = scale;
      return u.AddOp(OpCode::BroadcastTo, {sum}, a, {{{}, DType::F32}}, name).at(0);
    };
    const TensorId loss = mean(losses, 1.0f / static_cast<float>(M), "eval/loss");
    out.eval_reports.push_back(loss);
    u.AddOutput(loss);
    if (!correct.empty()) {
      out.accuracy = mean(correct, 1.0f, "eval/accuracy");
      out.eval_reports.push_back(out.accuracy);
      const TensorId whole = logits.size() > 1 ? u.Concat(logits, 0) : logits.front();
      out.eval_reports.push_back(whole);
      u.AddOutput(whole);
    }
  }
  SINKRT_RETURN_IF_ERROR(u.status());
  for (size_t i = first_op; i < u.ops().size(); ++i) out.eval_program.push_back(i);
  return Status::Ok();
}

// The stage graph's leaves: the tensors every micro-batch shares
// (parameters, constants, gradients), and the dataset columns at the whole
// batch, cut into M row blocks.
struct StageLeaves {
  std::vector<TensorId> shared;              // per template tensor, or kInvalidTensor
  std::vector<std::vector<TensorId>> piece;  // dataset Input -> its M row blocks
};

Result<StageLeaves> AddStageLeaves(const PipelineStageSpec& spec, const Template& tpl, const std::string& where,
                                   Graph& u) {
  const parallel::PipelineSchedule& sched = *spec.schedule;
  const int stage = spec.stage->stage;
  const int M = sched.micro_size;
  const Graph& tg = tpl.graph;
  const size_t nt = tg.tensors().size();
  StageLeaves leaves;
  leaves.shared.assign(nt, kInvalidTensor);
  leaves.piece.resize(nt);
  std::vector<bool> received(nt, false), is_seed(nt, false);
  for (const StageLinkEnd& end : spec.links)
    if (sched.links[static_cast<size_t>(end.link)].to == stage) received[end.tensor] = true;
  for (const auto& [link, t] : tpl.grad_of_link)
    if (sched.links[static_cast<size_t>(link)].from == stage) is_seed[t] = true;
  for (TensorId t = 0; t < nt; ++t) {
    const TensorInfo& info = tg.tensor(t);
    if (info.kind == TensorKind::Param || info.kind == TensorKind::Const || info.kind == TensorKind::State ||
        info.kind == TensorKind::OptState) {  // OptState: Dropout's step counter
      leaves.shared[t] = u.AddTensor(info);
    } else if (info.kind == TensorKind::Input && !received[t] && !is_seed[t]) {
      if (info.shape.empty())
        return InvalidArgument(where + ": dataset column '" + info.name +
                               "' is a scalar; it cannot be cut into micro-batches");
      TensorInfo whole = info;
      whole.shape[0] *= M;
      const TensorId w = u.AddTensor(whole);
      if (M == 1) {
        leaves.piece[t] = {w};
        continue;
      }
      std::vector<std::pair<Shape, DType>> outs(static_cast<size_t>(M), {info.shape, info.dtype});
      OpAttrs split;
      split.axis = 0;
      split.sizes.assign(static_cast<size_t>(M), info.shape[0]);
      std::vector<TensorId> pieces = u.AddOp(OpCode::Split, {w}, split, outs, info.name + "/micro_batches");
      leaves.piece[t] = pieces;
    }
  }
  for (const ParamGrad& pg : tpl.grads) {
    TensorInfo info = tg.tensor(pg.grad);
    leaves.shared[pg.grad] = u.AddTensor(info);
  }
  SINKRT_RETURN_IF_ERROR(u.status(), where);
  return leaves;
}

}  // namespace

Result<passes::TrainingGraph> BuildPipelineStageGraph(const PipelineStageSpec& spec) {
  if (!spec.stage || !spec.schedule) return Internal("pipeline stage graph: no stage or schedule");
  const parallel::PipelineSchedule& sched = *spec.schedule;
  const int stage = spec.stage->stage;
  const int M = sched.micro_size;
  const std::string where = "pipeline stage " + std::to_string(stage);
  SINKRT_ASSIGN_OR_RETURN(Template tpl, MakeTemplate(spec));
  const Graph& tg = tpl.graph;
  const size_t nt = tg.tensors().size();

  passes::TrainingGraph out;
  out.graph = Graph(spec.stage->graph.name());
  Graph& u = out.graph;

  SINKRT_ASSIGN_OR_RETURN(StageLeaves leaves, AddStageLeaves(spec, tpl, where, u));
  const std::vector<TensorId>& shared = leaves.shared;
  const std::vector<std::vector<TensorId>>& piece = leaves.piece;

  // Per micro-batch, the template's tensors in the stage graph.
  std::vector<std::vector<TensorId>> map(static_cast<size_t>(M), std::vector<TensorId>(nt, kInvalidTensor));
  for (int m = 0; m < M; ++m)
    for (TensorId t = 0; t < nt; ++t) {
      if (shared[t] != kInvalidTensor && tg.tensor(t).kind != TensorKind::Grad) map[m][t] = shared[t];
      if (!piece[t].empty()) map[m][t] = piece[t][static_cast<size_t>(m)];
    }

  auto peer_attrs = [&](const StageLinkEnd& end, bool backward, int m) {
    return TransferAttrs(spec, sched, end, m, backward);
  };
  // The Recv ops block `b` reads, emitted where they are armed.
  auto arm = [&](const parallel::PipelineBlock& b) -> Status {
    for (const StageLinkEnd& end : spec.links) {
      const parallel::PipelineLink& link = sched.links[static_cast<size_t>(end.link)];
      TensorId into = kInvalidTensor;
      if (!b.backward && link.to == stage) into = end.tensor;
      if (b.backward && link.from == stage && link.grad) into = tpl.grad_of_link.at(end.link);
      if (into == kInvalidTensor) continue;
      SINKRT_ASSIGN_OR_RETURN(OpAttrs a, peer_attrs(end, b.backward, b.micro));
      const TensorInfo& info = tg.tensor(into);
      TensorId& slot = map[static_cast<size_t>(b.micro)][into];
      if (slot != kInvalidTensor) continue;  // one tensor received on two links: never (one sender per tensor)
      slot = u.AddOp(OpCode::Recv, {}, a, {{info.shape, info.dtype}}, Micro(b.micro) + "recv/" + info.name).at(0);
    }
    return u.status();
  };
  // The Send ops for what `t` (a template tensor just written in block `b`) is.
  auto sends = [&](const parallel::PipelineBlock& b, TensorId t) -> Status {
    for (const StageLinkEnd& end : spec.links) {
      const parallel::PipelineLink& link = sched.links[static_cast<size_t>(end.link)];
      const bool fwd = !b.backward && link.from == stage && end.tensor == t;
      const bool bwd = b.backward && link.to == stage && link.grad && tpl.grad_of_link.at(end.link) == t;
      if (!fwd && !bwd) continue;
      SINKRT_ASSIGN_OR_RETURN(OpAttrs a, peer_attrs(end, b.backward, b.micro));
      u.AddOp(OpCode::Send, {map[static_cast<size_t>(b.micro)][t]}, a, {},
              Micro(b.micro) + "send/" + tg.tensor(t).name + "/to_rank" + std::to_string(end.peer));
    }
    return u.status();
  };

  const std::vector<parallel::PipelineBlock>& blocks = sched.blocks[static_cast<size_t>(stage)];
  std::vector<TensorId> losses;
  int first_backward = -1;
  if (!blocks.empty()) SINKRT_RETURN_IF_ERROR(arm(blocks[0]), where);
  for (size_t c = 0; c < blocks.size(); ++c) {
    const parallel::PipelineBlock& b = blocks[c];
    if (c + 1 < blocks.size()) SINKRT_RETURN_IF_ERROR(arm(blocks[c + 1]), where);
    if (b.backward && first_backward < 0) first_backward = b.micro;
    std::vector<TensorId>& mp = map[static_cast<size_t>(b.micro)];
    const size_t begin = b.backward ? tpl.forward_ops : 0;
    const size_t end = b.backward ? tg.ops().size() : tpl.forward_ops;
    for (size_t i = begin; i < end; ++i) {
      const OpNode& op = tg.ops()[i];
      // The first micro-batch to run backward writes the Grads themselves;
      // every later one writes its own part and adds it in.
      const bool writes_grads = b.micro == first_backward;
      SINKRT_RETURN_IF_ERROR(passes::CloneOp(
          tg, op, Micro(b.micro), u, mp, where + ", micro-batch " + std::to_string(b.micro), [&](TensorId t) {
            return writes_grads && tg.tensor(t).kind == TensorKind::Grad ? shared[t] : kInvalidTensor;
          }));
      // Dropout: micro-batch m's rows follow the m before it along dim 0
      // (they are rows m·b.. of the batch), so the M micro-batches draw the
      // masks of the whole batch (passes/dropout.h).
      if ((op.op == OpCode::Dropout || op.op == OpCode::DropoutGrad) && M > 1)
        u.ExtendOp(u.ops().size() - 1, {},
                   passes::DropoutForMicroStep(op.attrs, tg.tensor(op.inputs.at(0)).shape, b.micro, M));
      if (!writes_grads)
        for (TensorId t : op.outputs)
          if (tg.tensor(t).kind == TensorKind::Grad)
            u.AddOp(OpCode::AccumulateGrad, {shared[t], mp[t]}, OpAttrs{}, {},
                    Micro(b.micro) + "accumulate/" + u.tensor(shared[t]).name);
      SINKRT_RETURN_IF_ERROR(u.status(), where);
      for (TensorId t : op.outputs) SINKRT_RETURN_IF_ERROR(sends(b, t), where);
    }
    if (!b.backward && tpl.loss != kInvalidTensor) {
      losses.push_back(mp[tpl.loss]);
      if (static_cast<int>(losses.size()) == M) {
        // The step's loss: the mean of the micro-batches' (each the mean of
        // its rows), i.e. the mean over the whole batch.
        TensorId sum = losses.front();
        if (M > 1) sum = u.AddOp(OpCode::AddN, losses, OpAttrs{}, {{{}, DType::F32}}, "loss/sum").at(0);
        OpAttrs scale;
        scale.scale = 1.0f / static_cast<float>(M);
        out.loss = u.AddOp(OpCode::BroadcastTo, {sum}, scale, {{{}, DType::F32}}, "loss").at(0);
      }
    }
  }
  SINKRT_RETURN_IF_ERROR(u.status(), where);
  if (tpl.loss != kInvalidTensor) {
    if (out.loss == kInvalidTensor) return Internal(where + ": the loss of some micro-batch was never computed");
    u.SetLoss(out.loss);
  }

  std::vector<ParamGrad> grads;
  for (const ParamGrad& pg : tpl.grads) grads.push_back({shared[pg.param], shared[pg.grad]});
  // A stage may hold no parameter (an activation or the loss alone, when
  // there are more stages than layers with weights): it forwards and
  // differentiates for its neighbours and has nothing to update.
  // Each stage with parameters counts the optimizer steps itself: one per
  // pipeline step, so every stage's schedule is at the same step.
  TensorId lr = kInvalidTensor;
  // Clipping: this stage's sum of squares is all-reduced over one rank of
  // every stage, so each clips by the norm of the whole network's gradients.
  // A stage without parameters would be missing from that AllReduce.
  std::vector<NormGroup> norm_groups;
  if (spec.optimizer.clip_grad_norm > 0) {
    if (grads.empty())
      return Unimplemented(where +
                           " holds no parameter: gradient clipping by global norm needs every stage to hold "
                           "some (use fewer stages)");
    norm_groups.assign(grads.size(), spec.clip_span);
  }
  if (!grads.empty())
    SINKRT_RETURN_IF_ERROR(AppendOptimizer(u, grads, spec.optimizer, kInvalidTensor, {}, norm_groups, &lr),
                           where + ": optimizer");
  if (tpl.dropout_step != kInvalidTensor) passes::AdvanceDropoutStep(u, shared[tpl.dropout_step]);
  SINKRT_RETURN_IF_ERROR(u.status(), where);
  out.grads = std::move(grads);
  out.forward_ops = 0;
  out.train_ops = u.ops().size();
  for (size_t i = 0; i < out.train_ops; ++i) out.train_program.push_back(i);
  for (TensorId t = 0; t < u.tensors().size(); ++t)
    if (u.tensor(t).kind == TensorKind::Input) out.inputs.push_back(t);
  if (out.loss != kInvalidTensor) out.train_reports = {out.loss};
  if (out.loss != kInvalidTensor && lr != kInvalidTensor) out.train_reports.push_back(lr);
  if (spec.eval_schedule) SINKRT_RETURN_IF_ERROR(AddEval(spec, tpl, shared, out), where + " eval_step");
  return out;
}

}  // namespace sinkrt::host::parallel
