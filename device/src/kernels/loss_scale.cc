// GradOverflow and LossScaleUpdate (docs/guide/loss_scale.md): the device half of
// MindSpore's TrainOneStepWithLossScaleCell, so that an overflowed step is
// found, skipped and the scale adjusted inside the sink. The optimizer
// updates read GradOverflow's status (optimizer_update.cc).
#include <bit>
#include <cmath>
#include <cstdint>
#include <string>

#include "device/src/kernels/check.h"
#include "device/src/kernels/kernel_list.h"
#include "runtime/src/loss_scale_rule.h"

namespace sinkrt::device {
namespace {

struct LossScaleState : KernelState {
  bool check = true, dynamic = false;
  float factor = 2.0f;
  int32_t window = 2000;
};

Status CheckScalarScale(const KernelArgs& args) {
  SINKRT_RETURN_IF_ERROR(CheckDType(args, In(0), DType::F32));
  return CheckShape(args, In(0), Shape{}, "[] (the loss scale)");
}

Status GradOverflowPrepare(const KernelArgs& args, PrepareContext&, std::unique_ptr<KernelState>* state) {
  SINKRT_RETURN_IF_ERROR(CheckOperandsAtLeast(args, 1, 1));
  SINKRT_ASSIGN_OR_RETURN(const fb::LossScaleOptions* opts, GetOptions<fb::LossScaleOptions>(args));
  SINKRT_RETURN_IF_ERROR(CheckScalarScale(args));
  for (size_t i = 1; i < args.inputs.size(); ++i)
    SINKRT_RETURN_IF_ERROR(CheckDType(args, In(static_cast<int>(i)), DType::F32));
  SINKRT_RETURN_IF_ERROR(CheckDType(args, Out(0), DType::F32));
  SINKRT_RETURN_IF_ERROR(CheckShape(args, Out(0), Shape{2}, "[2] (overflow, 1/loss_scale)"));
  SINKRT_RETURN_IF_ERROR(CheckNoOverlap(args, /*allow_exact_alias=*/false));
  auto s = std::make_unique<LossScaleState>();
  s->check = opts->check();
  *state = std::move(s);
  return Status::Ok();
}

// Whether every value is finite: the largest exponent field seen, an
// integer max that vectorises (a float sum would need -ffast-math, which
// would also let the compiler assume there are no infinities).
bool AllFinite(const float* x, int64_t n) {
  constexpr uint32_t kExponent = 0x7f800000u;
  uint32_t largest = 0;
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t e = std::bit_cast<uint32_t>(x[i]) & kExponent;
    largest = e > largest ? e : largest;
  }
  return largest != kExponent;
}

Status GradOverflowRun(const KernelArgs& args, KernelState* state, RunContext&) {
  const auto& s = *static_cast<LossScaleState*>(state);
  bool overflow = false;
  if (s.check)
    for (size_t i = 1; i < args.inputs.size() && !overflow; ++i)
      overflow = !AllFinite(args.inputs[i].f32(), args.inputs[i].numel);
  float* status = args.outputs[0].f32();
  status[0] = overflow ? 1.0f : 0.0f;
  status[1] = 1.0f / args.inputs[0].f32()[0];
  return Status::Ok();
}

Status LossScaleUpdatePrepare(const KernelArgs& args, PrepareContext&, std::unique_ptr<KernelState>* state) {
  SINKRT_RETURN_IF_ERROR(CheckOperands(args, 3, 0));
  SINKRT_ASSIGN_OR_RETURN(const fb::LossScaleOptions* opts, GetOptions<fb::LossScaleOptions>(args));
  SINKRT_RETURN_IF_ERROR(CheckScalarScale(args));
  SINKRT_RETURN_IF_ERROR(CheckDType(args, In(1), DType::I32));
  SINKRT_RETURN_IF_ERROR(CheckShape(args, In(1), Shape{3}, "[3] (steps, last_overflow_iter, overflow_steps)"));
  SINKRT_RETURN_IF_ERROR(CheckDType(args, In(2), DType::F32));
  SINKRT_RETURN_IF_ERROR(CheckShape(args, In(2), Shape{2}, "[2] (GradOverflow's status)"));
  SINKRT_RETURN_IF_ERROR(CheckInputsDisjoint(args));
  if (opts->dynamic()) {
    if (!(opts->scale_factor() > 0.0f) || !std::isfinite(opts->scale_factor()))
      return OpError(args, "scale_factor is " + std::to_string(opts->scale_factor()) + ", expected a finite value > 0");
    if (opts->scale_window() <= 0)
      return OpError(args, "scale_window is " + std::to_string(opts->scale_window()) + ", expected > 0");
  }
  auto s = std::make_unique<LossScaleState>();
  s->dynamic = opts->dynamic();
  s->factor = opts->scale_factor();
  s->window = opts->scale_window();
  *state = std::move(s);
  return Status::Ok();
}

Status LossScaleUpdateRun(const KernelArgs& args, KernelState* state, RunContext&) {
  const auto& s = *static_cast<LossScaleState*>(state);
  float* scale = args.inputs[0].f32();
  int32_t* c = args.inputs[1].i32();
  LossScaleCounters counters{.steps = c[0], .last_overflow_iter = c[1], .overflow_steps = c[2]};
  const bool overflow = args.inputs[2].f32()[0] != 0.0f;
  if (s.dynamic) {
    DynamicLossScaleStep(s.factor, s.window, overflow, scale, &counters);
  } else {
    FixedLossScaleStep(overflow, &counters);
  }
  c[0] = counters.steps;
  c[1] = counters.last_overflow_iter;
  c[2] = counters.overflow_steps;
  return Status::Ok();
}

}  // namespace

const KernelImpl kGradOverflowKernel = {GradOverflowPrepare, GradOverflowRun};
const KernelImpl kLossScaleUpdateKernel = {LossScaleUpdatePrepare, LossScaleUpdateRun};

}  // namespace sinkrt::device
