// MindSpore's Lamb (nn.Lamb) in two halves, so that a parameter updated in
// blocks on several ranks gets the trust ratio of the whole parameter: the
// compiler all-reduces LambNorms' sums over those ranks before LambUpdate
// reads them (docs/guide/optimizers.md).
//
// LambNorms: param, grad, m, v, powers [, status] -> sums f32 [3]
//   m = β₁m + (1−β₁)g;  v = β₂v + (1−β₂)g²   (in place)
//   m̂ = m/(1−β₁ᵗ);  v̂ = v/(1−β₂ᵗ)
//   sums = (Σw², Σg², Σĝ²) with ĝ = m̂/√(v̂ + ε) + wd·w
// LambUpdate: param, m, v, powers, sums [, status]
//   trust = ‖w‖ > 0 and ‖g‖ > 0 ? ‖w‖/‖ĝ‖ : 1, clipped to [0, 10]
//   param −= trust·lr·(m̂/(√v̂ + ε) + wd·w)
// MindSpore's own formula, quirks included: ĝ's ε sits under the root,
// the update's outside it. powers holds β₁ᵗ, β₂ᵗ already advanced for this
// step (AdamPowers). Under loss scaling g = grad · status[1] and an
// overflowed step changes nothing (LambNorms then writes zero sums).
#include <algorithm>
#include <cmath>

#include "device/src/kernels/kernel_list.h"
#include "device/src/kernels/optimizer_common.h"
#include "device/src/kernels/parallel_range.h"

namespace sinkrt::device {
namespace {

struct LambState : KernelState, AdamSettings {
  Extras extras;
};

constexpr size_t kNormsOperands = 5;   // param, grad, m, v, powers
constexpr size_t kUpdateOperands = 5;  // param, m, v, powers, sums

// Inputs 0..2 of `moments` (param and moments; Norms has grad at 1 too)
// f32 of one shape, powers [2] at `powers`, then after `n` the rate
// (lr_input) and perhaps the status.
Status CheckLambInputs(const KernelArgs& args, size_t n, std::initializer_list<int> same, int powers, size_t outputs,
                       LambState* s) {
  SINKRT_RETURN_IF_ERROR(ReadAdamOptions(args, s));
  SINKRT_ASSIGN_OR_RETURN(s->extras, CheckExtras(args, n, s->lr_input, outputs));
  for (int i : same) {
    SINKRT_RETURN_IF_ERROR(CheckDType(args, In(i), DType::F32));
    SINKRT_RETURN_IF_ERROR(CheckSameShape(args, In(i), In(0)));
  }
  SINKRT_RETURN_IF_ERROR(CheckPowers(args, powers));
  return CheckInputsDisjoint(args);
}

Status LambNormsPrepare(const KernelArgs& args, PrepareContext&, std::unique_ptr<KernelState>* state) {
  auto s = std::make_unique<LambState>();
  SINKRT_RETURN_IF_ERROR(CheckLambInputs(args, kNormsOperands, {0, 1, 2, 3}, 4, 1, s.get()));
  SINKRT_RETURN_IF_ERROR(CheckDType(args, Out(0), DType::F32));
  SINKRT_RETURN_IF_ERROR(CheckShape(args, Out(0), Shape{3}, "[3] (sums of w², g², ĝ²)"));
  *state = std::move(s);
  return Status::Ok();
}

// One serial pass in double: the sums are the same whatever the team size,
// so a sink of N stays bitwise N sinks of 1 and runs repeat exactly.
Status LambNormsRun(const KernelArgs& args, KernelState* state, RunContext&) {
  const auto& s = *static_cast<LambState*>(state);
  float* sums = args.outputs[0].f32();
  float inv = 1.0f;
  if (SkipStep(args, s.extras, &inv)) {
    std::fill(sums, sums + 3, 0.0f);
    return Status::Ok();
  }
  const float* __restrict param = args.inputs[0].f32();
  const float* __restrict grad = args.inputs[1].f32();
  float* __restrict m = args.inputs[2].f32();
  float* __restrict v = args.inputs[3].f32();
  const float* powers = args.inputs[4].f32();
  const float c1 = 1.0f - powers[0], c2 = 1.0f - powers[1];
  const float b1 = s.beta1, b2 = s.beta2, eps = s.eps, wd = s.wd;
  double w2 = 0, g2 = 0, h2 = 0;
  const int64_t n = args.inputs[0].numel;
  for (int64_t i = 0; i < n; ++i) {
    const float g = s.extras.scaled ? grad[i] * inv : grad[i];
    const float mi = b1 * m[i] + (1.0f - b1) * g;
    const float vi = b2 * v[i] + (1.0f - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const float hat = (mi / c1) / std::sqrt(vi / c2 + eps) + wd * param[i];
    w2 += static_cast<double>(param[i]) * param[i];
    g2 += static_cast<double>(g) * g;
    h2 += static_cast<double>(hat) * hat;
  }
  sums[0] = static_cast<float>(w2);
  sums[1] = static_cast<float>(g2);
  sums[2] = static_cast<float>(h2);
  return Status::Ok();
}

Status LambUpdatePrepare(const KernelArgs& args, PrepareContext&, std::unique_ptr<KernelState>* state) {
  auto s = std::make_unique<LambState>();
  SINKRT_RETURN_IF_ERROR(CheckLambInputs(args, kUpdateOperands, {0, 1, 2}, 3, 0, s.get()));
  SINKRT_RETURN_IF_ERROR(CheckDType(args, In(4), DType::F32));
  SINKRT_RETURN_IF_ERROR(CheckShape(args, In(4), Shape{3}, "[3] (LambNorms' sums)"));
  *state = std::move(s);
  return Status::Ok();
}

// MindSpore's trust ratio from the sums of squares.
float TrustRatio(const float* sums) {
  const float w_norm = std::sqrt(sums[0]), g_norm = std::sqrt(sums[1]), hat_norm = std::sqrt(sums[2]);
  const float ratio = w_norm > 0.0f && g_norm > 0.0f ? w_norm / hat_norm : 1.0f;
  return std::clamp(ratio, 0.0f, 10.0f);
}

Status LambUpdateRun(const KernelArgs& args, KernelState* state, RunContext& ctx) {
  const auto& s = *static_cast<LambState*>(state);
  float inv = 1.0f;
  if (SkipStep(args, s.extras, &inv)) return Status::Ok();
  float* param = args.inputs[0].f32();
  const float* m = args.inputs[1].f32();
  const float* v = args.inputs[2].f32();
  const float* powers = args.inputs[3].f32();
  const float c1 = 1.0f - powers[0], c2 = 1.0f - powers[1];
  const float step = TrustRatio(args.inputs[4].f32()) * Rate(args, s.extras, s.lr);
  const float eps = s.eps, wd = s.wd;
  ForRange(ctx, args.inputs[0].numel, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) param[i] -= step * ((m[i] / c1) / (std::sqrt(v[i] / c2) + eps) + wd * param[i]);
  });
  return Status::Ok();
}

}  // namespace

const KernelImpl kLambNormsKernel = {LambNormsPrepare, LambNormsRun};
const KernelImpl kLambUpdateKernel = {LambUpdatePrepare, LambUpdateRun};

}  // namespace sinkrt::device
