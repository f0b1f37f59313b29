// Optimizer updates with MindSpore's formulas (docs/reference/ops.md): SGD, Momentum
// (ApplyMomentum, optionally Nesterov), Adam and the per-step AdamPowers.
// They have no outputs: they mutate their first inputs (param and state) in
// place, which is why all inputs must be disjoint.
//
// Under loss scaling (docs/guide/loss_scale.md) each takes GradOverflow's status
// [2] as one more, last input: on an overflow the step leaves everything
// untouched (MindSpore skips the optimizer), else the gradient is
// grad · status[1], the scale taken back out.
//
// With a learning-rate schedule (lr_input in the options; schemas/common.fbs,
// SgdOptions) the rate is an f32 [1] input read every step, right after the
// op's own operands and before the status; else the options' learning_rate.
#include <cmath>
#include <string>

#include "device/src/kernels/check.h"
#include "device/src/kernels/kernel_list.h"
#include "device/src/kernels/optimizer_common.h"
#include "device/src/kernels/parallel_range.h"

namespace sinkrt::device {
namespace {

struct SgdState : KernelState {
  float lr = 0, wd = 0;
  Extras extras;
};

Status SgdPrepare(const KernelArgs& args, PrepareContext&, std::unique_ptr<KernelState>* state) {
  SINKRT_ASSIGN_OR_RETURN(const fb::SgdOptions* opts, GetOptions<fb::SgdOptions>(args));
  SINKRT_ASSIGN_OR_RETURN(const Extras extras, CheckParamInputs(args, 2, opts->lr_input()));
  SINKRT_RETURN_IF_ERROR(CheckFinite(args, "learning_rate", opts->learning_rate()));
  SINKRT_RETURN_IF_ERROR(CheckFinite(args, "weight_decay", opts->weight_decay()));
  SINKRT_RETURN_IF_ERROR(CheckInputsDisjoint(args));
  auto s = std::make_unique<SgdState>();
  s->lr = opts->learning_rate();
  s->wd = opts->weight_decay();
  s->extras = extras;
  *state = std::move(s);
  return Status::Ok();
}

// g = grad + wd·param; param −= lr·g (grad · inv under loss scaling)
Status SgdRun(const KernelArgs& args, KernelState* state, RunContext& ctx) {
  const auto& s = *static_cast<SgdState*>(state);
  float inv = 1.0f;
  if (SkipStep(args, s.extras, &inv)) return Status::Ok();
  float* __restrict param = args.inputs[0].f32();
  const float* __restrict grad = args.inputs[1].f32();
  const int64_t n = args.inputs[0].numel;
  const float lr = Rate(args, s.extras, s.lr), wd = s.wd;
  ForRange(ctx, n, [&](int64_t begin, int64_t end) {
    if (s.extras.scaled) {
      for (int64_t i = begin; i < end; ++i) param[i] -= lr * (grad[i] * inv + wd * param[i]);
    } else {
      for (int64_t i = begin; i < end; ++i) param[i] -= lr * (grad[i] + wd * param[i]);
    }
  });
  return Status::Ok();
}

struct MomentumState : KernelState {
  float lr = 0, momentum = 0, wd = 0;
  bool nesterov = false;
  Extras extras;
};

Status MomentumPrepare(const KernelArgs& args, PrepareContext&, std::unique_ptr<KernelState>* state) {
  SINKRT_ASSIGN_OR_RETURN(const fb::MomentumOptions* opts, GetOptions<fb::MomentumOptions>(args));
  SINKRT_ASSIGN_OR_RETURN(const Extras extras, CheckParamInputs(args, 3, opts->lr_input()));
  SINKRT_RETURN_IF_ERROR(CheckFinite(args, "learning_rate", opts->learning_rate()));
  SINKRT_RETURN_IF_ERROR(CheckFinite(args, "momentum", opts->momentum()));
  SINKRT_RETURN_IF_ERROR(CheckFinite(args, "weight_decay", opts->weight_decay()));
  SINKRT_RETURN_IF_ERROR(CheckInputsDisjoint(args));
  auto s = std::make_unique<MomentumState>();
  s->lr = opts->learning_rate();
  s->momentum = opts->momentum();
  s->wd = opts->weight_decay();
  s->nesterov = opts->nesterov();
  s->extras = extras;
  *state = std::move(s);
  return Status::Ok();
}

// g = grad + wd·param; accum = momentum·accum + g;
// param −= lr·(g + momentum·accum) (Nesterov) or lr·accum.
template <bool kNesterov, bool kScaled>
void MomentumLoop(const MomentumState& s, float* __restrict param, const float* __restrict grad,
                  float* __restrict accum, int64_t n, float lr, float inv) {
  const float mu = s.momentum, wd = s.wd;
  for (int64_t i = 0; i < n; ++i) {
    const float g = (kScaled ? grad[i] * inv : grad[i]) + wd * param[i];
    const float a = mu * accum[i] + g;
    accum[i] = a;
    param[i] -= kNesterov ? lr * (g + mu * a) : lr * a;
  }
}

Status MomentumRun(const KernelArgs& args, KernelState* state, RunContext& ctx) {
  const auto& s = *static_cast<MomentumState*>(state);
  float inv = 1.0f;
  if (SkipStep(args, s.extras, &inv)) return Status::Ok();
  const float lr = Rate(args, s.extras, s.lr);
  float* param = args.inputs[0].f32();
  const float* grad = args.inputs[1].f32();
  float* accum = args.inputs[2].f32();
  ForRange(ctx, args.inputs[0].numel, [&](int64_t begin, int64_t end) {
    float* p = param + begin;
    const float* g = grad + begin;
    float* a = accum + begin;
    const int64_t n = end - begin;
    if (s.extras.scaled) {
      s.nesterov ? MomentumLoop<true, true>(s, p, g, a, n, lr, inv) : MomentumLoop<false, true>(s, p, g, a, n, lr, inv);
    } else {
      s.nesterov ? MomentumLoop<true, false>(s, p, g, a, n, lr, inv)
                 : MomentumLoop<false, false>(s, p, g, a, n, lr, inv);
    }
  });
  return Status::Ok();
}

struct AdamState : KernelState, AdamSettings {
  Extras extras;
};

Status AdamPowersPrepare(const KernelArgs& args, PrepareContext&, std::unique_ptr<KernelState>* state) {
  SINKRT_RETURN_IF_ERROR(CheckOperands(args, args.inputs.size() == 2 ? 2 : 1, 0));
  SINKRT_RETURN_IF_ERROR(CheckPowers(args, 0));
  auto s = std::make_unique<AdamState>();
  SINKRT_ASSIGN_OR_RETURN(s->extras.scaled, CheckStatusInput(args, 1));
  s->extras.status_at = 1;
  SINKRT_RETURN_IF_ERROR(ReadAdamOptions(args, s.get()));
  *state = std::move(s);
  return Status::Ok();
}

Status AdamPowersRun(const KernelArgs& args, KernelState* state, RunContext&) {
  const auto& s = *static_cast<AdamState*>(state);
  float inv = 1.0f;
  if (SkipStep(args, s.extras, &inv)) return Status::Ok();
  float* powers = args.inputs[0].f32();
  powers[0] *= s.beta1;
  powers[1] *= s.beta2;
  return Status::Ok();
}

Status AdamPrepare(const KernelArgs& args, PrepareContext&, std::unique_ptr<KernelState>* state) {
  auto s = std::make_unique<AdamState>();
  SINKRT_RETURN_IF_ERROR(ReadAdamOptions(args, s.get()));
  SINKRT_ASSIGN_OR_RETURN(s->extras, CheckExtras(args, 5, s->lr_input));
  for (int i = 0; i < 4; ++i) {
    SINKRT_RETURN_IF_ERROR(CheckDType(args, In(i), DType::F32));
    SINKRT_RETURN_IF_ERROR(CheckSameShape(args, In(i), In(0)));
  }
  SINKRT_RETURN_IF_ERROR(CheckPowers(args, 4));
  SINKRT_RETURN_IF_ERROR(CheckInputsDisjoint(args));
  *state = std::move(s);
  return Status::Ok();
}

// g = grad + wd·param; m = β₁m + (1−β₁)g; v = β₂v + (1−β₂)g²;
// lr_t = lr·√(1−β₂ᵗ)/(1−β₁ᵗ); param −= lr_t·m/(√v + ε)
// (grad · inv under loss scaling: kScaled, a loop of its own)
template <bool kScaled>
void AdamLoop(const AdamState& s, float* __restrict param, const float* __restrict grad, float* __restrict m,
              float* __restrict v, float lr_t, int64_t n, float inv) {
  const float b1 = s.beta1, b2 = s.beta2, eps = s.eps, wd = s.wd;
  for (int64_t i = 0; i < n; ++i) {
    const float g = (kScaled ? grad[i] * inv : grad[i]) + wd * param[i];
    const float mi = b1 * m[i] + (1.0f - b1) * g;
    const float vi = b2 * v[i] + (1.0f - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    param[i] -= lr_t * mi / (std::sqrt(vi) + eps);
  }
}

Status AdamRun(const KernelArgs& args, KernelState* state, RunContext& ctx) {
  const auto& s = *static_cast<AdamState*>(state);
  float inv = 1.0f;
  if (SkipStep(args, s.extras, &inv)) return Status::Ok();
  const float* powers = args.inputs[4].f32();
  const float lr_t = Rate(args, s.extras, s.lr) * std::sqrt(1.0f - powers[1]) / (1.0f - powers[0]);
  float* param = args.inputs[0].f32();
  const float* grad = args.inputs[1].f32();
  float* m = args.inputs[2].f32();
  float* v = args.inputs[3].f32();
  ForRange(ctx, args.inputs[0].numel, [&](int64_t b, int64_t e) {
    if (s.extras.scaled) {
      AdamLoop<true>(s, param + b, grad + b, m + b, v + b, lr_t, e - b, inv);
    } else {
      AdamLoop<false>(s, param + b, grad + b, m + b, v + b, lr_t, e - b, inv);
    }
  });
  return Status::Ok();
}

}  // namespace

const KernelImpl kSgdUpdateKernel = {SgdPrepare, SgdRun};
const KernelImpl kMomentumUpdateKernel = {MomentumPrepare, MomentumRun};
const KernelImpl kAdamUpdateKernel = {AdamPrepare, AdamRun};
const KernelImpl kAdamPowersKernel = {AdamPowersPrepare, AdamPowersRun};

}  // namespace sinkrt::device
