// MindSpore's AdamWeightDecay (nn.AdamWeightDecay, ops.AdamWeightDecay):
// Adam's moments without bias correction and the weight decay added to the
// update, not to the gradient (decoupled decay, docs/guide/optimizers.md):
//   m = β₁m + (1−β₁)g;  v = β₂v + (1−β₂)g²
//   param −= lr·(m/(√v + ε) + wd·param)
// Inputs param, grad, m, v (f32, one shape), then the loss-scale status
// when there is one (g = grad · status[1]; an overflowed step changes
// nothing). No outputs: param, m and v change in place.
#include <cmath>

#include "device/src/kernels/kernel_list.h"
#include "device/src/kernels/optimizer_common.h"
#include "device/src/kernels/parallel_range.h"

namespace sinkrt::device {
namespace {

constexpr size_t kOperands = 4;  // param, grad, m, v

struct AdamWeightDecayState : KernelState, AdamSettings {
  Extras extras;
};

Status AdamWeightDecayPrepare(const KernelArgs& args, PrepareContext&, std::unique_ptr<KernelState>* state) {
  auto s = std::make_unique<AdamWeightDecayState>();
  SINKRT_RETURN_IF_ERROR(ReadAdamOptions(args, s.get()));
  SINKRT_ASSIGN_OR_RETURN(s->extras, CheckParamInputs(args, kOperands, s->lr_input));
  SINKRT_RETURN_IF_ERROR(CheckInputsDisjoint(args));
  *state = std::move(s);
  return Status::Ok();
}

template <bool kScaled>
void AdamWeightDecayLoop(const AdamWeightDecayState& s, float lr, float* __restrict param, const float* __restrict grad,
                         float* __restrict m, float* __restrict v, int64_t n, float inv) {
  const float b1 = s.beta1, b2 = s.beta2, eps = s.eps, wd = s.wd;
  for (int64_t i = 0; i < n; ++i) {
    const float g = kScaled ? grad[i] * inv : grad[i];
    const float mi = b1 * m[i] + (1.0f - b1) * g;
    const float vi = b2 * v[i] + (1.0f - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    param[i] -= lr * (mi / (std::sqrt(vi) + eps) + wd * param[i]);
  }
}

Status AdamWeightDecayRun(const KernelArgs& args, KernelState* state, RunContext& ctx) {
  const auto& s = *static_cast<AdamWeightDecayState*>(state);
  float inv = 1.0f;
  if (SkipStep(args, s.extras, &inv)) return Status::Ok();
  const float lr = Rate(args, s.extras, s.lr);
  float* param = args.inputs[0].f32();
  const float* grad = args.inputs[1].f32();
  float* m = args.inputs[2].f32();
  float* v = args.inputs[3].f32();
  ForRange(ctx, args.inputs[0].numel, [&](int64_t b, int64_t e) {
    if (s.extras.scaled) {
      AdamWeightDecayLoop<true>(s, lr, param + b, grad + b, m + b, v + b, e - b, inv);
    } else {
      AdamWeightDecayLoop<false>(s, lr, param + b, grad + b, m + b, v + b, e - b, inv);
    }
  });
  return Status::Ok();
}

}  // namespace

const KernelImpl kAdamWeightDecayKernel = {AdamWeightDecayPrepare, AdamWeightDecayRun};

}  // namespace sinkrt::device
