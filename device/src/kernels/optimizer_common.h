// What every optimizer update kernel checks and reads alike: finite
// hyperparameters, the scheduled learning rate and the loss-scale status
// inputs (schemas/common.fbs above SgdOptions; docs/guide/lr_schedules.md,
// docs/guide/loss_scale.md), AdamOptions, and this step's rate (read in one
// place, Rate).
#pragma once

#include <string>

#include "device/src/kernels/check.h"

namespace sinkrt::device {

Status CheckFinite(const KernelArgs& args, const char* name, float v);
Status CheckBeta(const KernelArgs& args, const char* name, float v);

// Whether the task has the loss-scale status after its `n` inputs, which
// it checks: f32 [2].
Result<bool> CheckStatusInput(const KernelArgs& args, size_t n);

// Where an update finds its rate and the loss-scale status.
struct Extras {
  int lr_at = -1;  // the rate's input (lr_input), or -1: the options' learning_rate
  size_t status_at = 0;
  bool scaled = false;
};

// After the op's `n` own operands: the rate when `lr_input` (f32 [1]), then
// perhaps the status; checks the operand count (and `outputs` outputs) and both.
Result<Extras> CheckExtras(const KernelArgs& args, size_t n, bool lr_input, size_t outputs = 0);

// `n` same-shape f32 inputs (param, grad, state...), then the extras; no outputs.
Result<Extras> CheckParamInputs(const KernelArgs& args, size_t n, bool lr_input);

// Under loss scaling, whether this step overflowed (the update then
// returns before touching anything); else `*inv` is the gradient's factor.
bool SkipStep(const KernelArgs& args, const Extras& e, float* inv);

// This step's rate: the schedule's tensor, or the fixed one. The one place
// an update kernel reads it.
inline float Rate(const KernelArgs& args, const Extras& e, float fixed) {
  return e.lr_at >= 0 ? args.inputs[static_cast<size_t>(e.lr_at)].f32()[0] : fixed;
}

// AdamOptions' settings (Adam, AdamPowers, AdamWeightDecay, Lamb), checked.
struct AdamSettings {
  float lr = 0, beta1 = 0, beta2 = 0, eps = 0, wd = 0;
  bool lr_input = false;
};
Status ReadAdamOptions(const KernelArgs& args, AdamSettings* s);

// beta1^t, beta2^t: f32 [2] at input `index`.
Status CheckPowers(const KernelArgs& args, int index);

}  // namespace sinkrt::device
