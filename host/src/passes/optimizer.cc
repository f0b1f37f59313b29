// AppendOptimizer: optimizer state and update ops (docs/guide/optimizers.md).
#include <functional>
#include <string>

#include "sinkrt/host/optimizer.h"

#include "host/src/passes/global_norm.h"

namespace sinkrt::host {

namespace {

Status CheckGrads(const Graph& g, const std::vector<ParamGrad>& grads) {
  if (grads.empty()) {
    return InvalidArgument("AppendOptimizer: Optimizer got an empty parameter list");
  }
  std::vector<bool> seen(g.tensors().size(), false);
  for (const ParamGrad& pg : grads) {
    if (!g.valid(pg.param) || g.tensor(pg.param).kind != TensorKind::Param) {
      return InvalidArgument("AppendOptimizer: tensor " + std::to_string(pg.param) + " is not a Param of graph '" +
                             g.name() + "'");
    }
    const TensorInfo& p = g.tensor(pg.param);
    if (!g.valid(pg.grad) || g.tensor(pg.grad).kind != TensorKind::Grad) {
      return InvalidArgument("AppendOptimizer: the gradient of '" + p.name +
                             "' is not a Grad tensor (run AppendBackward first)");
    }
    if (g.tensor(pg.grad).shape != p.shape) {
      return InvalidArgument("AppendOptimizer: gradient '" + g.tensor(pg.grad).name + "' " +
                             ShapeToString(g.tensor(pg.grad).shape) + " does not match '" + p.name + "' " +
                             ShapeToString(p.shape));
    }
    if (seen[pg.param]) return InvalidArgument("AppendOptimizer: '" + p.name + "' is listed twice");
    seen[pg.param] = true;
  }
  return Status::Ok();
}

TensorId State(Graph& g, const std::string& name, const Shape& shape, InitSpec init, DType dtype = DType::F32) {
  TensorInfo t;
  t.name = name;
  t.dtype = dtype;
  t.shape = shape;
  t.kind = TensorKind::OptState;
  t.init = std::move(init);
  return g.AddTensor(std::move(t));
}

// The schedule's rate for this step (docs/guide/lr_schedules.md): "lr/step"
// counts optimizer steps (MindSpore's global_step, an int32 [1] Parameter
// starting at 0); LrSchedule reads it before any update. Its f32 [1] "lr"
// is what the updates read.
TensorId AppendLrSchedule(Graph& g, const LrSchedule& schedule, TensorId* step) {
  *step = State(g, "lr/step", {1}, InitSpec::Zeros(), DType::I32);
  OpAttrs a;
  a.lr_schedule = schedule;
  return g.AddOp(OpCode::LrSchedule, {*step}, a, {{{1}, DType::F32}}, "lr").at(0);
}

// What each update reads and writes: grads[i], or its block update_on[i].
Result<std::vector<ParamGrad>> UpdateTargets(const Graph& g, const std::vector<ParamGrad>& grads,
                                             const std::vector<ParamGrad>& update_on) {
  std::vector<ParamGrad> out = grads;
  for (size_t i = 0; i < update_on.size(); ++i) {
    const ParamGrad& u = update_on[i];
    if (u.param == kInvalidTensor) continue;
    if (!g.valid(u.param) || !g.valid(u.grad) || g.tensor(u.param).shape != g.tensor(u.grad).shape ||
        g.tensor(u.param).dtype != DType::F32 || g.tensor(u.grad).dtype != DType::F32)
      return InvalidArgument("AppendOptimizer: the update target of '" + g.tensor(grads[i].param).name +
                             "' is not an f32 block and gradient block of one shape");
    out[i] = u;
  }
  return out;
}

using InputsFn = std::function<std::vector<TensorId>(std::vector<TensorId>)>;

// Lamb's two halves per parameter: LambNorms advances m and v and sums
// w², g², ĝ² over what this rank updates; where that is a block, the sums
// are all-reduced over the ranks holding the other blocks; LambUpdate then
// steps with the trust ratio of the whole parameter. Only LambUpdate reads
// the rate (`with_rate`); both read the loss-scale status (`with_status`).
void AppendLamb(Graph& g, const std::string& name, const ParamGrad& u, TensorId powers, const OpAttrs& attrs,
                const NormGroup& norm_group, const InputsFn& with_status, const InputsFn& with_rate) {
  const Shape shape = g.tensor(u.param).shape;
  const TensorId m = State(g, name + "/lamb_m", shape, InitSpec::Zeros());
  const TensorId v = State(g, name + "/lamb_v", shape, InitSpec::Zeros());
  OpAttrs norms_attrs = attrs;
  norms_attrs.lr_input = false;
  TensorId sums = g.AddOp(OpCode::LambNorms, with_status({u.param, u.grad, m, v, powers}), norms_attrs,
                          {{{3}, DType::F32}}, name + "/lamb_norms")
                      .at(0);
  sums = passes::ReduceOverNormGroup(g, sums, norm_group, name + "/lamb_norms_reduced");
  g.AddOp(OpCode::LambUpdate, with_rate({u.param, m, v, powers, sums}), attrs, {}, name + "/lamb_update");
}

}  // namespace

Status AppendOptimizer(Graph& g, const std::vector<ParamGrad>& grads, const OptimizerSpec& spec,
                       TensorId loss_scale_status, const std::vector<ParamGrad>& update_on,
                       const std::vector<NormGroup>& norm_groups, TensorId* lr_out) {
  if (!g.status().ok()) return g.status();
  SINKRT_RETURN_IF_ERROR(ValidateOptimizer(spec), "AppendOptimizer");
  SINKRT_RETURN_IF_ERROR(CheckGrads(g, grads));
  if (!update_on.empty() && update_on.size() != grads.size())
    return InvalidArgument("AppendOptimizer: " + std::to_string(update_on.size()) + " update targets for " +
                           std::to_string(grads.size()) + " gradients");
  if (!norm_groups.empty() && norm_groups.size() != grads.size())
    return InvalidArgument("AppendOptimizer: " + std::to_string(norm_groups.size()) + " norm groups for " +
                           std::to_string(grads.size()) + " gradients");
  SINKRT_ASSIGN_OR_RETURN(const std::vector<ParamGrad> targets, UpdateTargets(g, grads, update_on));

  // A schedule's rate, computed before any update reads it.
  TensorId step = kInvalidTensor, lr = kInvalidTensor;
  if (spec.schedule.enabled()) lr = AppendLrSchedule(g, spec.schedule, &step);
  if (lr_out) *lr_out = lr;
  // The update's inputs (schemas/common.fbs, SgdOptions): its own operands,
  // the rate tensor under a schedule, the loss-scale status last.
  auto with_rate = [&](std::vector<TensorId> inputs) {
    if (lr != kInvalidTensor) inputs.push_back(lr);
    if (loss_scale_status != kInvalidTensor) inputs.push_back(loss_scale_status);
    return inputs;
  };
  // AdamPowers and LambNorms read no rate, only the status.
  auto with_status = [&](std::vector<TensorId> inputs) {
    if (loss_scale_status != kInvalidTensor) inputs.push_back(loss_scale_status);
    return inputs;
  };
  // One parameter's attributes: its group's learning rate and weight decay.
  auto attrs_for = [&](size_t i) {
    const ParamHyper h = HyperFor(spec, g.tensor(grads[i].param).name);
    OpAttrs attrs;
    attrs.learning_rate = spec.schedule.enabled() ? 0.0f : h.learning_rate;
    attrs.lr_input = lr != kInvalidTensor;
    attrs.weight_decay = h.weight_decay;
    // Only the settings the op's options carry (the graph hash reads them all).
    if (spec.kind == OptimizerKind::Momentum) {
      attrs.momentum = spec.momentum;
      attrs.nesterov = spec.nesterov;
    }
    if (spec.kind != OptimizerKind::SGD && spec.kind != OptimizerKind::Momentum) {
      attrs.beta1 = spec.beta1;
      attrs.beta2 = spec.beta2;
      attrs.epsilon = spec.epsilon;
    }
    return attrs;
  };
  // β₁ᵗ and β₂ᵗ advance once per step, before any parameter reads them.
  TensorId powers = kInvalidTensor;
  if (spec.kind == OptimizerKind::Adam || spec.kind == OptimizerKind::Lamb) {
    OpAttrs attrs = attrs_for(0);
    attrs.learning_rate = spec.schedule.enabled() ? 0.0f : spec.learning_rate;
    attrs.lr_input = false;
    attrs.weight_decay = spec.weight_decay;
    const char* name = spec.kind == OptimizerKind::Adam ? "adam/powers" : "lamb/powers";
    powers = State(g, name, {2}, InitSpec::Constant(1.0f));
    g.AddOp(OpCode::AdamPowers, with_status({powers}), attrs, {});
  }
  // Clipping: the updates read its status, whose factor carries it.
  if (spec.clip_grad_norm > 0)
    loss_scale_status = passes::AppendGlobalNormClip(g, targets, norm_groups, spec.clip_grad_norm, loss_scale_status);
  for (size_t i = 0; i < grads.size(); ++i) {
    const ParamGrad& u = targets[i];
    const std::string name = g.tensor(grads[i].param).name;
    const Shape shape = g.tensor(u.param).shape;
    const OpAttrs attrs = attrs_for(i);
    switch (spec.kind) {
      case OptimizerKind::SGD:
        g.AddOp(OpCode::SgdUpdate, with_rate({u.param, u.grad}), attrs, {});
        break;
      case OptimizerKind::Momentum: {
        const TensorId accum = State(g, name + "/momentum", shape, InitSpec::Zeros());
        g.AddOp(OpCode::MomentumUpdate, with_rate({u.param, u.grad, accum}), attrs, {});
        break;
      }
      case OptimizerKind::Adam: {
        const TensorId m = State(g, name + "/adam_m", shape, InitSpec::Zeros());
        const TensorId v = State(g, name + "/adam_v", shape, InitSpec::Zeros());
        g.AddOp(OpCode::AdamUpdate, with_rate({u.param, u.grad, m, v, powers}), attrs, {});
        break;
      }
      case OptimizerKind::AdamWeightDecay: {
        // MindSpore's AdamWeightDecay names its moments adam_m, adam_v too.
        const TensorId m = State(g, name + "/adam_m", shape, InitSpec::Zeros());
        const TensorId v = State(g, name + "/adam_v", shape, InitSpec::Zeros());
        g.AddOp(OpCode::AdamWeightDecay, with_rate({u.param, u.grad, m, v}), attrs, {});
        break;
      }
      case OptimizerKind::Lamb:
        AppendLamb(g, name, u, powers, attrs, norm_groups.empty() ? NormGroup{} : norm_groups[i], with_status,
                   with_rate);
        break;
    }
  }
  // The step advances after every update has read the rate; an overflowed
  // step skips it as it skips the updates (MindSpore's optimizer, whose
  // get_lr advances global_step, does not run then).
  if (step != kInvalidTensor) {
    std::vector<TensorId> in = {step};
    if (loss_scale_status != kInvalidTensor) in.push_back(loss_scale_status);
    g.AddOp(OpCode::StepAdvance, in, {}, {}, "lr/advance");
  }
  return g.status().WithContext("AppendOptimizer");
}

}  // namespace sinkrt::host
