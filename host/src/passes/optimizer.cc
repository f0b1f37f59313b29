#include "sinkrt/host/optimizer.h"

#include <cctype>
#include <cmath>

namespace sinkrt::host {

OptimizerSpec OptimizerSpec::Sgd(float lr) {
  OptimizerSpec s;
  s.kind = OptimizerKind::SGD;
  s.learning_rate = lr;
  return s;
}

OptimizerSpec OptimizerSpec::Momentum(float lr, float momentum, bool nesterov) {
  OptimizerSpec s;
  s.kind = OptimizerKind::Momentum;
  s.learning_rate = lr;
  s.momentum = momentum;
  s.nesterov = nesterov;
  return s;
}

OptimizerSpec OptimizerSpec::Adam(float lr, float beta1, float beta2, float eps) {
  OptimizerSpec s;
  s.kind = OptimizerKind::Adam;
  s.learning_rate = lr;
  s.beta1 = beta1;
  s.beta2 = beta2;
  s.epsilon = eps;
  return s;
}

Result<OptimizerKind> ParseOptimizerKind(const std::string& name) {
  std::string n = name;
  for (char& c : n) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (n == "sgd") return OptimizerKind::SGD;
  if (n == "momentum") return OptimizerKind::Momentum;
  if (n == "adam") return OptimizerKind::Adam;
  return InvalidArgument("unknown optimizer '" + name + "'; valid names are 'sgd', 'momentum' and 'adam'");
}

const char* OptimizerKindName(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::SGD:
      return "sgd";
    case OptimizerKind::Momentum:
      return "momentum";
    case OptimizerKind::Adam:
      return "adam";
  }
  return "sgd";
}

Result<OptimizerSpec> MakeOptimizer(const std::string& kind, float learning_rate, float momentum) {
  SINKRT_ASSIGN_OR_RETURN(const OptimizerKind k, ParseOptimizerKind(kind));
  switch (k) {
    case OptimizerKind::SGD:
      return OptimizerSpec::Sgd(learning_rate);
    case OptimizerKind::Momentum:
      return OptimizerSpec::Momentum(learning_rate, momentum);
    case OptimizerKind::Adam:
      return OptimizerSpec::Adam(learning_rate);
  }
  return InvalidArgument("unknown optimizer '" + kind + "'");
}

namespace {

const char* KindName(OptimizerKind k) {
  switch (k) {
    case OptimizerKind::SGD:
      return "SGD";
    case OptimizerKind::Momentum:
      return "Momentum";
    case OptimizerKind::Adam:
      return "Adam";
  }
  return "?";
}

}  // namespace

// MindSpore's optimizer argument checks, with its wording where it has one,
// narrowed where a value MindSpore lets through cannot train: a learning
// rate of 0 changes nothing and a momentum of 1 or more never decays, so the
// update grows without bound (the ranges sinkrun's --lr and --momentum use).
Status ValidateOptimizer(const OptimizerSpec& s) {
  if (s.kind != OptimizerKind::SGD && s.kind != OptimizerKind::Momentum && s.kind != OptimizerKind::Adam) {
    return InvalidArgument("unknown optimizer kind " + std::to_string(static_cast<int>(s.kind)));
  }
  const std::string who = std::string(KindName(s.kind)) + ": ";
  auto finite = [](float v) { return std::isfinite(v); };
  if (s.schedule.enabled()) {
    SINKRT_RETURN_IF_ERROR(ValidateLrSchedule(s.schedule), KindName(s.kind));
  } else if (!finite(s.learning_rate) || !(s.learning_rate > 0)) {
    return InvalidArgument(who + "learning_rate must be > 0, but got " + std::to_string(s.learning_rate));
  }
  if (!finite(s.weight_decay) || s.weight_decay < 0) {
    return InvalidArgument(who + "weight_decay must be >= 0, but got " + std::to_string(s.weight_decay));
  }
  if (s.kind == OptimizerKind::Momentum) {
    if (!finite(s.momentum) || s.momentum < 0)
      return InvalidArgument(who + "momentum must be >= 0, but got " + std::to_string(s.momentum));
    if (s.momentum >= 1)
      return InvalidArgument(who +
                             "momentum must be < 1 (at 1 or more the accumulated update never decays "
                             "and training diverges), but got " +
                             std::to_string(s.momentum));
  }
  if (s.kind == OptimizerKind::Adam) {
    if (!(s.beta1 > 0 && s.beta1 < 1)) {
      return InvalidArgument(who + "beta1 must be in (0, 1), but got " + std::to_string(s.beta1));
    }
    if (!(s.beta2 > 0 && s.beta2 < 1)) {
      return InvalidArgument(who + "beta2 must be in (0, 1), but got " + std::to_string(s.beta2));
    }
    if (!(s.epsilon > 0) || !finite(s.epsilon)) {
      return InvalidArgument(who + "epsilon must be > 0, but got " + std::to_string(s.epsilon));
    }
  }
  return Status::Ok();
}

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

}  // namespace

Status AppendOptimizer(Graph& g, const std::vector<ParamGrad>& grads, const OptimizerSpec& spec,
                       TensorId loss_scale_status, const std::vector<ParamGrad>& update_on, TensorId* lr_out) {
  if (!g.status().ok()) return g.status();
  SINKRT_RETURN_IF_ERROR(ValidateOptimizer(spec), "AppendOptimizer");
  SINKRT_RETURN_IF_ERROR(CheckGrads(g, grads));
  if (!update_on.empty() && update_on.size() != grads.size())
    return InvalidArgument("AppendOptimizer: " + std::to_string(update_on.size()) + " update targets for " +
                           std::to_string(grads.size()) + " gradients");
  // What grads[i]'s update reads and writes.
  auto target = [&](size_t i) -> Result<ParamGrad> {
    if (update_on.empty() || update_on[i].param == kInvalidTensor) return grads[i];
    const ParamGrad& u = update_on[i];
    if (!g.valid(u.param) || !g.valid(u.grad) || g.tensor(u.param).shape != g.tensor(u.grad).shape ||
        g.tensor(u.param).dtype != DType::F32 || g.tensor(u.grad).dtype != DType::F32)
      return InvalidArgument("AppendOptimizer: the update target of '" + g.tensor(grads[i].param).name +
                             "' is not an f32 block and gradient block of one shape");
    return u;
  };

  // A schedule's rate, computed before any update reads it.
  TensorId step = kInvalidTensor, lr = kInvalidTensor;
  if (spec.schedule.enabled()) lr = AppendLrSchedule(g, spec.schedule, &step);
  if (lr_out) *lr_out = lr;
  // The update's inputs (schemas/common.fbs, SgdOptions): its own operands,
  // the rate tensor under a schedule, the loss-scale status last.
  auto with_status = [&](std::vector<TensorId> inputs) {
    if (lr != kInvalidTensor) inputs.push_back(lr);
    if (loss_scale_status != kInvalidTensor) inputs.push_back(loss_scale_status);
    return inputs;
  };
  OpAttrs attrs;
  attrs.learning_rate = spec.schedule.enabled() ? 0.0f : spec.learning_rate;
  attrs.lr_input = lr != kInvalidTensor;
  attrs.weight_decay = spec.weight_decay;
  switch (spec.kind) {
    case OptimizerKind::SGD:
      for (size_t i = 0; i < grads.size(); ++i) {
        SINKRT_ASSIGN_OR_RETURN(const ParamGrad u, target(i));
        g.AddOp(OpCode::SgdUpdate, with_status({u.param, u.grad}), attrs, {});
      }
      break;
    case OptimizerKind::Momentum:
      attrs.momentum = spec.momentum;
      attrs.nesterov = spec.nesterov;
      for (size_t i = 0; i < grads.size(); ++i) {
        SINKRT_ASSIGN_OR_RETURN(const ParamGrad u, target(i));
        const std::string name = g.tensor(grads[i].param).name;
        const Shape shape = g.tensor(u.param).shape;
        const TensorId accum = State(g, name + "/momentum", shape, InitSpec::Zeros());
        g.AddOp(OpCode::MomentumUpdate, with_status({u.param, u.grad, accum}), attrs, {});
      }
      break;
    case OptimizerKind::Adam: {
      attrs.beta1 = spec.beta1;
      attrs.beta2 = spec.beta2;
      attrs.epsilon = spec.epsilon;
      // β₁ᵗ and β₂ᵗ advance once per step, before any parameter reads them.
      const TensorId powers = State(g, "adam/powers", {2}, InitSpec::Constant(1.0f));
      std::vector<TensorId> powers_in = {powers};
      if (loss_scale_status != kInvalidTensor) powers_in.push_back(loss_scale_status);
      g.AddOp(OpCode::AdamPowers, powers_in, attrs, {});
      for (size_t i = 0; i < grads.size(); ++i) {
        SINKRT_ASSIGN_OR_RETURN(const ParamGrad u, target(i));
        const std::string name = g.tensor(grads[i].param).name;
        const Shape shape = g.tensor(u.param).shape;
        const TensorId m = State(g, name + "/adam_m", shape, InitSpec::Zeros());
        const TensorId v = State(g, name + "/adam_v", shape, InitSpec::Zeros());
        g.AddOp(OpCode::AdamUpdate, with_status({u.param, u.grad, m, v, powers}), attrs, {});
      }
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
