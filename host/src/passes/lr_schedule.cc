// Learning-rate schedules: the factories, MindSpore's argument checks with
// its messages (mindspore/_checkparam.py's check_number wording, and the
// classes' own texts in nn/learning_rate_schedule.py), and the description
// tools print. The formulas run on the device (device/src/kernels/lr_schedule.cc).
#include <cmath>
#include <sstream>
#include <string>

#include "host/src/passes/lr_checks.h"
#include "sinkrt/host/lr_schedule.h"

namespace sinkrt::host {

LrSchedule LrSchedule::WarmUp(double learning_rate, int64_t warmup_steps) {
  LrSchedule s;
  s.kind = LrScheduleKind::WarmUp;
  s.learning_rate = learning_rate;
  s.warmup_steps = warmup_steps;
  return s;
}

LrSchedule LrSchedule::CosineDecay(double min_lr, double max_lr, int64_t decay_steps) {
  LrSchedule s;
  s.kind = LrScheduleKind::CosineDecay;
  s.learning_rate = max_lr;
  s.end_learning_rate = min_lr;
  s.decay_steps = decay_steps;
  return s;
}

LrSchedule LrSchedule::PolynomialDecay(double learning_rate, double end_learning_rate, int64_t decay_steps,
                                       double power, bool update_decay_steps) {
  LrSchedule s;
  s.kind = LrScheduleKind::PolynomialDecay;
  s.learning_rate = learning_rate;
  s.end_learning_rate = end_learning_rate;
  s.decay_steps = decay_steps;
  s.power = power;
  s.update_decay_steps = update_decay_steps;
  return s;
}

namespace {

LrSchedule Decay(LrScheduleKind kind, double learning_rate, double decay_rate, int64_t decay_steps, bool is_stair) {
  LrSchedule s;
  s.kind = kind;
  s.learning_rate = learning_rate;
  s.decay_rate = decay_rate;
  s.decay_steps = decay_steps;
  s.is_stair = is_stair;
  return s;
}

}  // namespace

LrSchedule LrSchedule::ExponentialDecay(double learning_rate, double decay_rate, int64_t decay_steps, bool is_stair) {
  return Decay(LrScheduleKind::ExponentialDecay, learning_rate, decay_rate, decay_steps, is_stair);
}

LrSchedule LrSchedule::NaturalExpDecay(double learning_rate, double decay_rate, int64_t decay_steps, bool is_stair) {
  return Decay(LrScheduleKind::NaturalExpDecay, learning_rate, decay_rate, decay_steps, is_stair);
}

LrSchedule LrSchedule::InverseDecay(double learning_rate, double decay_rate, int64_t decay_steps, bool is_stair) {
  return Decay(LrScheduleKind::InverseDecay, learning_rate, decay_rate, decay_steps, is_stair);
}

LrSchedule LrSchedule::WarmupCosine(double max_lr, double min_lr, int64_t warmup_steps, int64_t decay_steps) {
  LrSchedule s = CosineDecay(min_lr, max_lr, decay_steps);
  s.kind = LrScheduleKind::WarmupCosine;
  s.warmup_steps = warmup_steps;
  return s;
}

LrSchedule LrSchedule::Table(const std::vector<double>& values) {
  LrSchedule s;
  s.kind = LrScheduleKind::Table;
  s.values.reserve(values.size());
  for (double v : values) s.values.push_back(static_cast<float>(v));
  return s;
}

const char* LrScheduleKindName(LrScheduleKind kind) {
  switch (kind) {
    case LrScheduleKind::None:
      return "none";
    case LrScheduleKind::WarmUp:
      return "WarmUpLR";
    case LrScheduleKind::CosineDecay:
      return "CosineDecayLR";
    case LrScheduleKind::PolynomialDecay:
      return "PolynomialDecayLR";
    case LrScheduleKind::ExponentialDecay:
      return "ExponentialDecayLR";
    case LrScheduleKind::NaturalExpDecay:
      return "NaturalExpDecayLR";
    case LrScheduleKind::InverseDecay:
      return "InverseDecayLR";
    case LrScheduleKind::WarmupCosine:
      return "WarmupCosine";
    case LrScheduleKind::Table:
      return "table";
  }
  return "?";
}

namespace {

// CosineDecayLR's own text (learning_rate_schedule.py).
Status CheckMinBelowMax(const char* cls, double min_lr, double max_lr) {
  if (min_lr < max_lr) return Status::Ok();
  return InvalidArgument(std::string("For '") + cls + "', the 'max_lr' must be greater than the 'min_lr', but got " +
                         "'max_lr' value: " + Repr(max_lr) + ", 'min_lr' value: " + Repr(min_lr) + ".");
}

Status ValidateTable(const LrSchedule& s) {
  if (s.values.empty()) return InvalidArgument("For 'Optimizer', the learning rate table is empty");
  for (size_t i = 0; i < s.values.size(); ++i)
    if (!std::isfinite(s.values[i]) || s.values[i] < 0)
      return InvalidArgument("For 'Optimizer', the learning rate table's value [" + std::to_string(i) +
                             "] must be a finite float >= 0, but got '" + Repr(s.values[i]) + "'.");
  return Status::Ok();
}

}  // namespace

Status ValidateLrSchedule(const LrSchedule& s) {
  const char* cls = LrScheduleKindName(s.kind);
  switch (s.kind) {
    case LrScheduleKind::None:
      return Status::Ok();
    case LrScheduleKind::WarmUp:
      SINKRT_RETURN_IF_ERROR(CheckFloat(cls, "learning_rate", s.learning_rate, false));
      return CheckPositiveInt(cls, "warmup_steps", s.warmup_steps);
    case LrScheduleKind::WarmupCosine:
      SINKRT_RETURN_IF_ERROR(CheckPositiveInt(cls, "warmup_steps", s.warmup_steps));
      [[fallthrough]];
    case LrScheduleKind::CosineDecay:
      SINKRT_RETURN_IF_ERROR(CheckFloat(cls, "min_lr", s.end_learning_rate, false));
      SINKRT_RETURN_IF_ERROR(CheckFloat(cls, "max_lr", s.learning_rate, true));
      SINKRT_RETURN_IF_ERROR(CheckPositiveInt(cls, "decay_steps", s.decay_steps));
      return CheckMinBelowMax(cls, s.end_learning_rate, s.learning_rate);
    case LrScheduleKind::PolynomialDecay:
      SINKRT_RETURN_IF_ERROR(CheckFloat(cls, "learning_rate", s.learning_rate, true));
      SINKRT_RETURN_IF_ERROR(CheckFloat(cls, "end_learning_rate", s.end_learning_rate, false));
      SINKRT_RETURN_IF_ERROR(CheckPositiveInt(cls, "decay_steps", s.decay_steps));
      return CheckFloat(cls, "power", s.power, true);
    case LrScheduleKind::ExponentialDecay:
    case LrScheduleKind::NaturalExpDecay:
    case LrScheduleKind::InverseDecay:
      // learning_rate_schedule.py's _check_inputs, in its order.
      SINKRT_RETURN_IF_ERROR(CheckPositiveInt(cls, "decay_steps", s.decay_steps));
      SINKRT_RETURN_IF_ERROR(CheckFloat(cls, "learning_rate", s.learning_rate, true));
      return CheckFloat(cls, "decay_rate", s.decay_rate, true);
    case LrScheduleKind::Table:
      return ValidateTable(s);
  }
  return InvalidArgument("unknown learning-rate schedule kind " + std::to_string(static_cast<int>(s.kind)));
}

std::string DescribeLrSchedule(const LrSchedule& s) {
  std::ostringstream o;
  o.precision(6);
  const char* cls = LrScheduleKindName(s.kind);
  switch (s.kind) {
    case LrScheduleKind::None:
      return "fixed";
    case LrScheduleKind::WarmUp:
      o << cls << "(learning_rate=" << s.learning_rate << ", warmup_steps=" << s.warmup_steps << ")";
      break;
    case LrScheduleKind::CosineDecay:
      o << cls << "(min_lr=" << s.end_learning_rate << ", max_lr=" << s.learning_rate
        << ", decay_steps=" << s.decay_steps << ")";
      break;
    case LrScheduleKind::WarmupCosine:
      o << "WarmUpLR(learning_rate=" << s.learning_rate << ", warmup_steps=" << s.warmup_steps
        << ") then CosineDecayLR(min_lr=" << s.end_learning_rate << ", max_lr=" << s.learning_rate
        << ", decay_steps=" << s.decay_steps << ")";
      break;
    case LrScheduleKind::PolynomialDecay:
      o << cls << "(learning_rate=" << s.learning_rate << ", end_learning_rate=" << s.end_learning_rate
        << ", decay_steps=" << s.decay_steps << ", power=" << s.power
        << ", update_decay_steps=" << (s.update_decay_steps ? "True" : "False") << ")";
      break;
    case LrScheduleKind::ExponentialDecay:
    case LrScheduleKind::NaturalExpDecay:
    case LrScheduleKind::InverseDecay:
      o << cls << "(learning_rate=" << s.learning_rate << ", decay_rate=" << s.decay_rate
        << ", decay_steps=" << s.decay_steps << ", is_stair=" << (s.is_stair ? "True" : "False") << ")";
      break;
    case LrScheduleKind::Table:
      o << "table of " << s.values.size() << " rates";
      if (!s.values.empty()) o << " " << s.values.front() << " .. " << s.values.back();
      break;
  }
  return o.str();
}

}  // namespace sinkrt::host
