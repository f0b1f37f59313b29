/// \file
/// Optimizers as graph-level update ops (MindSpore's nn.SGD, nn.Momentum,
/// nn.Adam): the update runs on the device inside the sink.
#pragma once

#include <string>
#include <vector>

#include "sinkrt/host/autodiff.h"
#include "sinkrt/host/graph.h"
#include "sinkrt/host/lr_schedule.h"

namespace sinkrt::host {

/// The optimizers a stream can run (MindSpore's SGD, Momentum, Adam).
enum class OptimizerKind : uint8_t { SGD, Momentum, Adam };

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
  float weight_decay = 0.0f;  ///< L2 weight decay, added to the gradient
  /// The learning rate as a function of the optimizer step, computed on the
  /// device (docs/guide/lr_schedules.md). When enabled, it replaces
  /// learning_rate, which is then not read (MindSpore's optimizer takes a
  /// LearningRateSchedule or a list as its learning_rate).
  LrSchedule schedule;

  /// Plain SGD at learning rate `lr`.
  static OptimizerSpec Sgd(float lr);
  /// SGD with momentum (Nesterov's when `nesterov`).
  static OptimizerSpec Momentum(float lr, float momentum, bool nesterov = false);
  /// Adam with its coefficients.
  static OptimizerSpec Adam(float lr, float beta1 = 0.9f, float beta2 = 0.999f, float eps = 1e-8f);
};

Result<OptimizerKind> ParseOptimizerKind(const std::string& name);  ///< "sgd", "momentum", "adam"
const char* OptimizerKindName(OptimizerKind kind);                  ///< the names ParseOptimizerKind reads

/// The optimizer a command line names: `kind` by name, with the learning
/// rate and (Momentum) the momentum; the other settings at their defaults.
Result<OptimizerSpec> MakeOptimizer(const std::string& kind, float learning_rate, float momentum);

/// The one check of an optimizer's settings, whoever wrote them (code, a
/// graph file, sinkc or sinkrun flags): learning_rate > 0, momentum in
/// [0, 1), Adam's betas in (0, 1) and epsilon > 0, weight_decay >= 0, all
/// finite; with a schedule, ValidateLrSchedule's checks (MindSpore's
/// messages) instead of learning_rate's. The message names the optimizer
/// and the setting ("Momentum: momentum must be < 1 ..."); callers add where
/// the spec came from.
Status ValidateOptimizer(const OptimizerSpec& spec);

/// Adds optimizer state (zero-initialised OptState tensors named
/// "<param>/momentum", "<param>/adam_m", "<param>/adam_v", and "adam/powers")
/// and one update op per gradient. Update ops mutate param and state in place.
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
Status AppendOptimizer(Graph& g, const std::vector<ParamGrad>& grads, const OptimizerSpec& spec,
                       TensorId loss_scale_status = kInvalidTensor, const std::vector<ParamGrad>& update_on = {},
                       TensorId* lr_out = nullptr);

}  // namespace sinkrt::host
