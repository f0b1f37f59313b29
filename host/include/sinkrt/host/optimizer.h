/// \file
/// Optimizers as graph-level update ops (MindSpore's nn.SGD, nn.Momentum,
/// nn.Adam, nn.AdamWeightDecay, nn.Lamb): the update runs on the device
/// inside the sink (docs/guide/optimizers.md).
#pragma once

#include <string>
#include <vector>

#include "sinkrt/host/autodiff.h"
#include "sinkrt/host/graph.h"
#include "sinkrt/host/lr_schedule.h"

namespace sinkrt::host {

/// The optimizers a stream can run (MindSpore's SGD, Momentum, Adam,
/// AdamWeightDecay, Lamb).
enum class OptimizerKind : uint8_t { SGD, Momentum, Adam, AdamWeightDecay, Lamb };

/// MindSpore's group parameters, chosen by name: a parameter whose name
/// contains one of `names` trains with this group's weight decay and (when
/// > 0) learning rate. The first group that matches decides.
struct ParamGroup {
  std::vector<std::string> names;                      ///< substrings of parameter names (none empty)
  float weight_decay = 0.0f;                           ///< this group's decay
  float learning_rate = 0.0f;                          ///< this group's learning rate; 0: the optimizer's
  bool operator==(const ParamGroup&) const = default;  ///< field by field
};

/// MindSpore's default decay filter (nn.Optimizer's decay_filter): without
/// groups, a parameter whose name contains "beta" or "gamma" is not decayed.
inline const std::vector<std::string> kDefaultNoDecay = {"beta", "gamma"};

/// Which optimizer updates the parameters, and its hyperparameters.
struct OptimizerSpec {
  OptimizerKind kind = OptimizerKind::SGD;  ///< which optimizer
  float learning_rate = 0.01f;              ///< the step size
  float momentum = 0.9f;                    ///< Momentum
  bool nesterov = false;                    ///< Momentum
  /// Adam's coefficients.
  /// @{
  float beta1 = 0.9f, beta2 = 0.999f, epsilon = 1e-8f;
  /// @}
  /// The weight decay of every parameter in no group: added to the gradient
  /// (SGD, Momentum, Adam) or to the update (AdamWeightDecay, Lamb). Without
  /// groups, names matching kDefaultNoDecay are not decayed (MindSpore's
  /// default decay_filter).
  float weight_decay = 0.0f;
  std::vector<ParamGroup> groups;  ///< group parameters (ParamGroup)
  /// The learning rate as a function of the optimizer step, computed on the
  /// device (docs/guide/lr_schedules.md). When enabled, it replaces
  /// learning_rate, which is then not read (MindSpore's optimizer takes a
  /// LearningRateSchedule or a list as its learning_rate), and no group may
  /// set a learning rate of its own.
  LrSchedule schedule;
  /// Gradient clipping by global norm (MindSpore's ops.clip_by_global_norm,
  /// docs/guide/clipping.md): before the update every gradient is multiplied
  /// by clip_grad_norm / max(global_norm, clip_grad_norm), global_norm being
  /// the L2 norm of all the gradients together, computed on the device (after
  /// the data-parallel reduction, the loss scale taken out, over every
  /// rank's slices and blocks). 0: no clipping; else > 0 and finite.
  float clip_grad_norm = 0.0f;

  /// Plain SGD at learning rate `lr`.
  static OptimizerSpec Sgd(float lr);
  /// SGD with momentum (Nesterov's when `nesterov`).
  static OptimizerSpec Momentum(float lr, float momentum, bool nesterov = false);
  /// Adam with its coefficients.
  static OptimizerSpec Adam(float lr, float beta1 = 0.9f, float beta2 = 0.999f, float eps = 1e-8f);
  /// MindSpore's AdamWeightDecay (its defaults: eps 1e-6).
  static OptimizerSpec AdamWeightDecay(float lr, float weight_decay = 0.0f, float beta1 = 0.9f, float beta2 = 0.999f,
                                       float eps = 1e-6f);
  /// MindSpore's Lamb (its defaults: eps 1e-6).
  static OptimizerSpec Lamb(float lr, float weight_decay = 0.0f, float beta1 = 0.9f, float beta2 = 0.999f,
                            float eps = 1e-6f);

  bool operator==(const OptimizerSpec&) const = default;  ///< field by field
};

/// The learning rate and weight decay one parameter trains with.
struct ParamHyper {
  float learning_rate = 0.0f;  ///< the rate it steps with
  float weight_decay = 0.0f;   ///< its decay
};
/// What `spec` gives parameter `name`: the first group whose names it
/// contains, else the optimizer's rate and decay (no decay, without groups,
/// for the names in kDefaultNoDecay).
ParamHyper HyperFor(const OptimizerSpec& spec, const std::string& name);

/// MindSpore's usual recipe as groups: decay `weight_decay` for every
/// parameter but those whose names contain one of `no_decay` (e.g. "bias",
/// "beta", "gamma", "norm"), which get none.
void SetNoDecay(OptimizerSpec& spec, const std::vector<std::string>& no_decay);

/// "sgd", "momentum", "adam", "adamw" (or "adamweightdecay"), "lamb"
Result<OptimizerKind> ParseOptimizerKind(const std::string& name);
const char* OptimizerKindName(OptimizerKind kind);  ///< the names ParseOptimizerKind reads

/// The optimizer a command line names: `kind` by name, with the learning
/// rate and (Momentum) the momentum; the other settings at their defaults.
Result<OptimizerSpec> MakeOptimizer(const std::string& kind, float learning_rate, float momentum);

/// The one check of an optimizer's settings, whoever wrote them (code, a
/// graph file, sinkc or sinkrun flags): learning_rate > 0, momentum in
/// [0, 1), Adam's (AdamWeightDecay's, Lamb's) betas in (0, 1) and epsilon >
/// 0, weight_decay >= 0, all finite; each group with names (none empty), a
/// weight_decay >= 0 and a learning_rate >= 0 (0 with a schedule); with a
/// schedule, ValidateLrSchedule's checks (MindSpore's messages) instead of
/// learning_rate's; clip_grad_norm 0 or finite and > 0. The message names the optimizer and the setting
/// ("Momentum: momentum must be < 1 ..."); callers add where the spec came
/// from.
Status ValidateOptimizer(const OptimizerSpec& spec);

/// Lamb's reduction of a parameter's norms: where an update sees only a
/// block of its parameter, the ranks holding the other blocks (world ranks,
/// ascending) and this rank's position among them.
struct NormGroup {
  std::vector<uint32_t> ranks;  ///< empty: the update sees the whole parameter
  uint32_t position = 0;        ///< this rank's index in `ranks`
};

/// Adds optimizer state (zero-initialised OptState tensors named
/// "<param>/momentum", "<param>/adam_m", "<param>/adam_v" (Adam,
/// AdamWeightDecay), "<param>/lamb_m", "<param>/lamb_v", and "adam/powers",
/// "lamb/powers") and one update op per gradient (Lamb: LambNorms, then
/// LambUpdate). Update ops mutate param and state in place.
/// With a schedule: the step counter "lr/step" (i32 [1] OptState), an
/// LrSchedule op before the updates, whose f32 [1] output "lr" every update
/// reads (lr_input), and a StepAdvance op after them; returns that lr
/// tensor through `lr_out` when given (kInvalidTensor without a schedule).
/// `loss_scale_status` (docs/guide/loss_scale.md): GradOverflow's [2] status, read
/// by every update op (AdamPowers too) as its last input, to skip an
/// overflowed step and to take the scale out of the gradient.
/// `update_on` (optimizer parallel; empty, or one entry per gradient): the
/// update of grads[i] reads and writes update_on[i].param and reads
/// update_on[i].grad instead, a block of the parameter and of its reduced
/// gradient (equal shapes), and its state takes their shape while keeping
/// the parameter's name. An entry of kInvalidTensor ids keeps grads[i].
/// `norm_groups` (Lamb, clipping; empty, or one entry per gradient): the
/// group over which the sums of squares of what the update of grads[i]
/// sees are all-reduced (LambNorms' before LambUpdate reads them; the
/// clipping's global norm, docs/guide/clipping.md).
/// With spec.clip_grad_norm > 0: SumSquares over the update targets (one
/// per norm group, each all-reduced over its group), then ClipByGlobalNorm,
/// whose status [2] every update reads in place of `loss_scale_status`
/// (which it takes in), its factor carrying the clipping.
Status AppendOptimizer(Graph& g, const std::vector<ParamGrad>& grads, const OptimizerSpec& spec,
                       TensorId loss_scale_status = kInvalidTensor, const std::vector<ParamGrad>& update_on = {},
                       const std::vector<NormGroup>& norm_groups = {}, TensorId* lr_out = nullptr);

}  // namespace sinkrt::host
