// What every optimizer update kernel checks and reads alike: finite
// hyperparameters, the loss-scale status input (docs/guide/loss_scale.md),
// AdamOptions, and the learning rate (read in one place, LearningRate).
#pragma once

#include <string>

#include "device/src/kernels/check.h"

namespace sinkrt::device {

Status CheckFinite(const KernelArgs& args, const char* name, float v);
Status CheckBeta(const KernelArgs& args, const char* name, float v);

// Whether the task has the loss-scale status after its `n` inputs, which
// it checks: f32 [2].
Result<bool> CheckStatusInput(const KernelArgs& args, size_t n);

// `n` same-shape f32 inputs (param, grad, state...), perhaps the status,
// no outputs.
Result<bool> CheckParamInputs(const KernelArgs& args, size_t n);

// Under loss scaling, whether this step overflowed (the update then
// returns before touching anything); else `*inv` is the gradient's factor.
bool SkipStep(const KernelArgs& args, bool scaled, size_t n, float* inv);

// AdamOptions' settings (Adam, AdamPowers, AdamWeightDecay, Lamb), checked.
struct AdamSettings {
  float lr = 0, beta1 = 0, beta2 = 0, eps = 0, wd = 0;
};
Status ReadAdamOptions(const KernelArgs& args, AdamSettings* s);

// beta1^t, beta2^t: f32 [2] at input `index`.
Status CheckPowers(const KernelArgs& args, int index);

// The learning rate an update steps with this step: the one place an
// update kernel reads it.
inline float LearningRate(const AdamSettings& s) { return s.lr; }

}  // namespace sinkrt::device
