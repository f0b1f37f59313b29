// Learning-rate schedules on the device (docs/guide/lr_schedules.md): the
// optimizer's step counter in, the step's rate out, so a schedule costs no
// host round trip. The formulas are MindSpore's nn.learning_rate_schedule
// classes as their construct() computes them (e.g. NaturalExpDecayLR's
// exponent is decay_rate · step, not · step/decay_steps as its docstring
// says), evaluated in float64 and rounded once to the f32 rate, so the rate
// is the exactly rounded value of the formula up to the f64 error (~1e-16).
//
// StepAdvance moves the counter on after the updates, and not on an
// overflowed step under loss scaling: MindSpore's optimizer advances
// global_step inside get_lr(), and TrainOneStepWithLossScaleCell does not
// call the optimizer when the gradients overflowed.
#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>

#include "device/src/kernels/check.h"
#include "device/src/kernels/kernel_list.h"

namespace sinkrt::device {
namespace {

struct ScheduleState : KernelState {
  fb::LrScheduleKind kind = fb::LrScheduleKind::None;
  double lr = 0, end_lr = 0, decay_rate = 0, power = 0;
  double decay_steps = 0, warmup_steps = 0;
  bool is_stair = false, update_decay_steps = false;
  const float* values = nullptr;  // Table: in the stream's FlatBuffer, alive while the job is loaded
  int64_t n_values = 0;
};

// CosineDecayLR at step p (p >= 0): min + ½(max − min)(1 + cos(π·min(p, d)/d)).
double Cosine(const ScheduleState& s, double p) {
  p = std::min(p, s.decay_steps);
  return s.end_lr + 0.5 * (s.lr - s.end_lr) * (1.0 + std::cos(std::numbers::pi * p / s.decay_steps));
}

// The three decays' p: step / decay_steps, floored when is_stair.
double DecayFraction(const ScheduleState& s, double step) {
  const double p = step / s.decay_steps;
  return s.is_stair ? std::floor(p) : p;
}

double Polynomial(const ScheduleState& s, double step) {
  double d = s.decay_steps;
  if (s.update_decay_steps) {
    d *= std::max(std::ceil(step / d), 1.0);
  } else {
    step = std::min(step, d);
  }
  return (s.lr - s.end_lr) * std::pow(1.0 - step / d, s.power) + s.end_lr;
}

double RateAt(const ScheduleState& s, int64_t step_count) {
  const double step = static_cast<double>(step_count);
  switch (s.kind) {
    case fb::LrScheduleKind::WarmUp:
      return s.lr * std::min(step, s.warmup_steps) / s.warmup_steps;
    case fb::LrScheduleKind::CosineDecay:
      return Cosine(s, step);
    case fb::LrScheduleKind::WarmupCosine:
      return step < s.warmup_steps ? s.lr * step / s.warmup_steps : Cosine(s, step - s.warmup_steps);
    case fb::LrScheduleKind::PolynomialDecay:
      return Polynomial(s, step);
    case fb::LrScheduleKind::ExponentialDecay:
      return s.lr * std::pow(s.decay_rate, DecayFraction(s, step));
    case fb::LrScheduleKind::NaturalExpDecay: {
      const double p = s.is_stair ? std::floor(step / s.decay_steps) * s.decay_steps : step;
      return s.lr * std::exp(-s.decay_rate * p);
    }
    case fb::LrScheduleKind::InverseDecay:
      return s.lr / (1.0 + s.decay_rate * DecayFraction(s, step));
    case fb::LrScheduleKind::Table:
      return s.values[std::min(step_count, s.n_values - 1)];
    default:
      return 0;
  }
}

Status CheckStep(const KernelArgs& args) {
  SINKRT_RETURN_IF_ERROR(CheckDType(args, In(0), DType::I32));
  return CheckShape(args, In(0), Shape{1}, "[1] (the optimizer step, lr/step)");
}

// What the formula divides by or reads must make sense, whoever wrote the
// stream (the host checks with MindSpore's messages first).
Status CheckSchedule(const KernelArgs& args, const fb::LrScheduleOptions& o) {
  const auto kind = o.kind();
  if (kind == fb::LrScheduleKind::None || static_cast<int>(kind) > static_cast<int>(fb::LrScheduleKind::Table))
    return OpError(args, "schedule kind " + std::to_string(static_cast<int>(kind)) + " is not a schedule");
  if (kind == fb::LrScheduleKind::Table)
    return o.values() && o.values()->size() > 0 ? Status::Ok() : OpError(args, "the rate table is empty");
  const bool warms = kind == fb::LrScheduleKind::WarmUp || kind == fb::LrScheduleKind::WarmupCosine;
  if (warms && o.warmup_steps() <= 0)
    return OpError(args, "warmup_steps is " + std::to_string(o.warmup_steps()) + ", expected > 0");
  if (kind != fb::LrScheduleKind::WarmUp && o.decay_steps() <= 0)
    return OpError(args, "decay_steps is " + std::to_string(o.decay_steps()) + ", expected > 0");
  for (double v : {o.learning_rate(), o.end_learning_rate(), o.decay_rate(), o.power()})
    if (!std::isfinite(v)) return OpError(args, "a schedule argument is " + std::to_string(v) + ", expected finite");
  return Status::Ok();
}

Status LrSchedulePrepare(const KernelArgs& args, PrepareContext&, std::unique_ptr<KernelState>* state) {
  SINKRT_RETURN_IF_ERROR(CheckOperands(args, 1, 1));
  SINKRT_RETURN_IF_ERROR(CheckStep(args));
  SINKRT_RETURN_IF_ERROR(CheckDType(args, Out(0), DType::F32));
  SINKRT_RETURN_IF_ERROR(CheckShape(args, Out(0), Shape{1}, "[1] (the step's learning rate)"));
  SINKRT_ASSIGN_OR_RETURN(const fb::LrScheduleOptions* o, GetOptions<fb::LrScheduleOptions>(args));
  SINKRT_RETURN_IF_ERROR(CheckSchedule(args, *o));
  auto s = std::make_unique<ScheduleState>();
  s->kind = o->kind();
  s->lr = o->learning_rate();
  s->end_lr = o->end_learning_rate();
  s->decay_rate = o->decay_rate();
  s->power = o->power();
  s->decay_steps = static_cast<double>(o->decay_steps());
  s->warmup_steps = static_cast<double>(o->warmup_steps());
  s->is_stair = o->is_stair();
  s->update_decay_steps = o->update_decay_steps();
  if (o->values()) {
    s->values = o->values()->data();
    s->n_values = static_cast<int64_t>(o->values()->size());
  }
  *state = std::move(s);
  return Status::Ok();
}

// A negative count (a corrupted checkpoint) reads as step 0 rather than
// indexing before the table.
Status LrScheduleRun(const KernelArgs& args, KernelState* state, RunContext&) {
  const auto& s = *static_cast<ScheduleState*>(state);
  const int64_t step = std::max<int64_t>(args.inputs[0].i32()[0], 0);
  args.outputs[0].f32()[0] = static_cast<float>(RateAt(s, step));
  return Status::Ok();
}

struct AdvanceState : KernelState {
  bool scaled = false;
};

Status StepAdvancePrepare(const KernelArgs& args, PrepareContext&, std::unique_ptr<KernelState>* state) {
  const bool scaled = args.inputs.size() == 2;
  SINKRT_RETURN_IF_ERROR(CheckOperands(args, scaled ? 2 : 1, 0));
  SINKRT_RETURN_IF_ERROR(CheckStep(args));
  if (scaled) {
    SINKRT_RETURN_IF_ERROR(CheckDType(args, In(1), DType::F32));
    SINKRT_RETURN_IF_ERROR(CheckShape(args, In(1), Shape{2}, "[2] (GradOverflow's status)"));
  }
  auto s = std::make_unique<AdvanceState>();
  s->scaled = scaled;
  *state = std::move(s);
  return Status::Ok();
}

// Saturates at INT32_MAX (2^31 − 1 optimizer steps) instead of wrapping to
// a negative step.
Status StepAdvanceRun(const KernelArgs& args, KernelState* state, RunContext&) {
  const auto& s = *static_cast<AdvanceState*>(state);
  if (s.scaled && args.inputs[1].f32()[0] != 0.0f) return Status::Ok();
  int32_t* step = args.inputs[0].i32();
  if (step[0] < INT32_MAX) ++step[0];
  return Status::Ok();
}

}  // namespace

const KernelImpl kLrScheduleKernel = {LrSchedulePrepare, LrScheduleRun};
const KernelImpl kStepAdvanceKernel = {StepAdvancePrepare, StepAdvanceRun};

}  // namespace sinkrt::device
