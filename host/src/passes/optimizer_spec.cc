// OptimizerSpec: its constructors, names, the one validation, and which
// learning rate and weight decay each parameter gets (group parameters).
#include <cctype>
#include <cmath>

#include "sinkrt/host/optimizer.h"

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

OptimizerSpec OptimizerSpec::AdamWeightDecay(float lr, float weight_decay, float beta1, float beta2, float eps) {
  OptimizerSpec s = Adam(lr, beta1, beta2, eps);
  s.kind = OptimizerKind::AdamWeightDecay;
  s.weight_decay = weight_decay;
  return s;
}

OptimizerSpec OptimizerSpec::Lamb(float lr, float weight_decay, float beta1, float beta2, float eps) {
  OptimizerSpec s = Adam(lr, beta1, beta2, eps);
  s.kind = OptimizerKind::Lamb;
  s.weight_decay = weight_decay;
  return s;
}

Result<OptimizerKind> ParseOptimizerKind(const std::string& name) {
  std::string n = name;
  for (char& c : n) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (n == "sgd") return OptimizerKind::SGD;
  if (n == "momentum") return OptimizerKind::Momentum;
  if (n == "adam") return OptimizerKind::Adam;
  if (n == "adamw" || n == "adamweightdecay") return OptimizerKind::AdamWeightDecay;
  if (n == "lamb") return OptimizerKind::Lamb;
  return InvalidArgument("unknown optimizer '" + name +
                         "'; valid names are 'sgd', 'momentum', 'adam', 'adamw' and 'lamb'");
}

const char* OptimizerKindName(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::SGD:
      return "sgd";
    case OptimizerKind::Momentum:
      return "momentum";
    case OptimizerKind::Adam:
      return "adam";
    case OptimizerKind::AdamWeightDecay:
      return "adamw";
    case OptimizerKind::Lamb:
      return "lamb";
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
    case OptimizerKind::AdamWeightDecay:
      return OptimizerSpec::AdamWeightDecay(learning_rate);
    case OptimizerKind::Lamb:
      return OptimizerSpec::Lamb(learning_rate);
  }
  return InvalidArgument("unknown optimizer '" + kind + "'");
}

ParamHyper HyperFor(const OptimizerSpec& spec, const std::string& name) {
  auto contains_any = [&](const std::vector<std::string>& parts) {
    for (const std::string& p : parts)
      if (name.find(p) != std::string::npos) return true;
    return false;
  };
  for (const ParamGroup& group : spec.groups) {
    if (!contains_any(group.names)) continue;
    return {group.learning_rate > 0 ? group.learning_rate : spec.learning_rate, group.weight_decay};
  }
  if (spec.groups.empty() && contains_any(kDefaultNoDecay)) return {spec.learning_rate, 0.0f};
  return {spec.learning_rate, spec.weight_decay};
}

void SetNoDecay(OptimizerSpec& spec, const std::vector<std::string>& no_decay) {
  spec.groups = {ParamGroup{.names = no_decay, .weight_decay = 0.0f, .learning_rate = 0.0f}};
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
    case OptimizerKind::AdamWeightDecay:
      return "AdamWeightDecay";
    case OptimizerKind::Lamb:
      return "Lamb";
  }
  return "?";
}

bool UsesBetas(OptimizerKind k) {
  return k == OptimizerKind::Adam || k == OptimizerKind::AdamWeightDecay || k == OptimizerKind::Lamb;
}

Status ValidateGroups(const OptimizerSpec& s, const std::string& who) {
  for (size_t i = 0; i < s.groups.size(); ++i) {
    const ParamGroup& group = s.groups[i];
    const std::string where = who + "group " + std::to_string(i) + ": ";
    if (group.names.empty()) return InvalidArgument(where + "names must not be empty (which parameters it holds)");
    for (const std::string& n : group.names)
      if (n.empty())
        return InvalidArgument(where + "a name filter is the empty string, which every parameter contains");
    if (!std::isfinite(group.weight_decay) || group.weight_decay < 0)
      return InvalidArgument(where + "weight_decay must be >= 0, but got " + std::to_string(group.weight_decay));
    if (!std::isfinite(group.learning_rate) || group.learning_rate < 0)
      return InvalidArgument(where + "learning_rate must be >= 0 (0: the optimizer's), but got " +
                             std::to_string(group.learning_rate));
  }
  return Status::Ok();
}

}  // namespace

// MindSpore's optimizer argument checks, with its wording where it has one,
// narrowed where a value MindSpore lets through cannot train: a learning
// rate of 0 changes nothing and a momentum of 1 or more never decays, so the
// update grows without bound (the ranges sinkrun's --lr and --momentum use).
Status ValidateOptimizer(const OptimizerSpec& s) {
  if (static_cast<int>(s.kind) > static_cast<int>(OptimizerKind::Lamb)) {
    return InvalidArgument("unknown optimizer kind " + std::to_string(static_cast<int>(s.kind)));
  }
  const std::string who = std::string(KindName(s.kind)) + ": ";
  auto finite = [](float v) { return std::isfinite(v); };
  if (s.schedule.enabled()) {
    SINKRT_RETURN_IF_ERROR(ValidateLrSchedule(s.schedule), KindName(s.kind));
    for (size_t i = 0; i < s.groups.size(); ++i)
      if (s.groups[i].learning_rate != 0)
        return InvalidArgument(who + "group " + std::to_string(i) +
                               " sets a learning_rate of its own, which a learning-rate schedule does not take "
                               "(the schedule sets every parameter's rate)");
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
  if (UsesBetas(s.kind)) {
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
  // MindSpore's _ClipByGlobalNorm check (validator.check_number GT 0.0),
  // with 0 kept for "no clipping"; NaN fails it, as it does there.
  if (s.clip_grad_norm != 0 && !(std::isfinite(s.clip_grad_norm) && s.clip_grad_norm > 0))
    return InvalidArgument(who + "For 'clip_by_global_norm', the 'clip_norm' must be greater than 0.0, but got " +
                           std::to_string(s.clip_grad_norm) + " (clip_grad_norm: 0 turns clipping off)");
  return ValidateGroups(s, who);
}

}  // namespace sinkrt::host
