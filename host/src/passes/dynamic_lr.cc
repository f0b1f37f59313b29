// MindSpore's nn.dynamic_lr lists (mindspore/nn/dynamic_lr.py), in float64
// with its formulas and argument checks: a rate per step, which
// LrSchedule::Table hands to the device.
#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>
#include <vector>

#include "host/src/passes/lr_checks.h"
#include "sinkrt/host/lr_schedule.h"

namespace sinkrt::host {
namespace {

// dynamic_lr.py's _check_inputs, in its order.
Status CheckDecayInputs(double learning_rate, double decay_rate, int64_t total_step, int64_t step_per_epoch,
                        int64_t decay_epoch) {
  SINKRT_RETURN_IF_ERROR(CheckPositiveInt(nullptr, "total_step", total_step));
  SINKRT_RETURN_IF_ERROR(CheckPositiveInt(nullptr, "step_per_epoch", step_per_epoch));
  SINKRT_RETURN_IF_ERROR(CheckPositiveInt(nullptr, "decay_epoch", decay_epoch));
  SINKRT_RETURN_IF_ERROR(CheckFloat(nullptr, "learning_rate", learning_rate, true));
  return CheckFloat(nullptr, "decay_rate", decay_rate, true);
}

// floor(i / step_per_epoch): Python's math.floor of a true division, which
// for non-negative ints is the integer quotient.
double Epoch(int64_t i, int64_t step_per_epoch) { return static_cast<double>(i / step_per_epoch); }

}  // namespace

Result<std::vector<double>> PiecewiseConstantLr(const std::vector<int64_t>& milestone,
                                                const std::vector<double>& learning_rates) {
  if (milestone.size() != learning_rates.size())
    return InvalidArgument(
        "For 'piecewise_constant_lr', the size of 'milestone' must be same with the size of 'learning_rates', but "
        "got 'milestone' size: " +
        std::to_string(milestone.size()) + ", 'learning_rates' size: " + std::to_string(learning_rates.size()) + ".");
  std::vector<double> lr;
  int64_t last = 0;
  for (size_t i = 0; i < milestone.size(); ++i) {
    const std::string m = "milestone[" + std::to_string(i) + "]";
    SINKRT_RETURN_IF_ERROR(CheckPositiveInt(nullptr, m.c_str(), milestone[i]));
    const std::string r = "learning_rates[" + std::to_string(i) + "]";
    if (!std::isfinite(learning_rates[i]))
      return InvalidArgument(Who(nullptr, r.c_str()) + " must be a legal float, but got '" + Repr(learning_rates[i]) +
                             "'.");
    if (milestone[i] < last)
      return InvalidArgument("For 'piecewise_constant_lr', the value of milestone[" + std::to_string(i) +
                             "] must be greater than milestone[" + std::to_string(i - 1) + "], but got milestone[" +
                             std::to_string(i) + "]: " + std::to_string(milestone[i]) + ", milestone[" +
                             std::to_string(i - 1) + "]: " + std::to_string(milestone[i - 1]) + ".");
    lr.insert(lr.end(), static_cast<size_t>(milestone[i] - last), learning_rates[i]);
    last = milestone[i];
  }
  return lr;
}

Result<std::vector<double>> ExponentialDecayLr(double learning_rate, double decay_rate, int64_t total_step,
                                               int64_t step_per_epoch, int64_t decay_epoch, bool is_stair) {
  SINKRT_RETURN_IF_ERROR(CheckDecayInputs(learning_rate, decay_rate, total_step, step_per_epoch, decay_epoch));
  std::vector<double> lr;
  for (int64_t i = 0; i < total_step; ++i) {
    const double p = Epoch(i, step_per_epoch) / static_cast<double>(decay_epoch);
    lr.push_back(learning_rate * std::pow(decay_rate, is_stair ? std::floor(p) : p));
  }
  return lr;
}

Result<std::vector<double>> NaturalExpDecayLr(double learning_rate, double decay_rate, int64_t total_step,
                                              int64_t step_per_epoch, int64_t decay_epoch, bool is_stair) {
  SINKRT_RETURN_IF_ERROR(CheckDecayInputs(learning_rate, decay_rate, total_step, step_per_epoch, decay_epoch));
  std::vector<double> lr;
  const double d = static_cast<double>(decay_epoch);
  for (int64_t i = 0; i < total_step; ++i) {
    const double e = Epoch(i, step_per_epoch);
    // MindSpore: learning_rate * math.e ** (-decay_rate * x), x the epoch
    // (is_stair: floor(epoch / decay_epoch) * decay_epoch).
    const double x = is_stair ? std::floor(e / d) * d : e;
    lr.push_back(learning_rate * std::pow(std::numbers::e, -decay_rate * x));
  }
  return lr;
}

Result<std::vector<double>> InverseDecayLr(double learning_rate, double decay_rate, int64_t total_step,
                                           int64_t step_per_epoch, int64_t decay_epoch, bool is_stair) {
  SINKRT_RETURN_IF_ERROR(CheckDecayInputs(learning_rate, decay_rate, total_step, step_per_epoch, decay_epoch));
  std::vector<double> lr;
  const double d = static_cast<double>(decay_epoch);
  for (int64_t i = 0; i < total_step; ++i) {
    const double e = Epoch(i, step_per_epoch);
    lr.push_back(is_stair ? learning_rate / (1 + decay_rate * std::floor(e / d))
                          : learning_rate / (1 + decay_rate * e / d));
  }
  return lr;
}

Result<std::vector<double>> CosineDecayLr(double min_lr, double max_lr, int64_t total_step, int64_t step_per_epoch,
                                          int64_t decay_epoch) {
  SINKRT_RETURN_IF_ERROR(CheckFloat(nullptr, "min_lr", min_lr, false));
  SINKRT_RETURN_IF_ERROR(CheckFloat(nullptr, "max_lr", max_lr, true));
  SINKRT_RETURN_IF_ERROR(CheckPositiveInt(nullptr, "total_step", total_step));
  SINKRT_RETURN_IF_ERROR(CheckPositiveInt(nullptr, "step_per_epoch", step_per_epoch));
  SINKRT_RETURN_IF_ERROR(CheckPositiveInt(nullptr, "decay_epoch", decay_epoch));
  if (min_lr >= max_lr)
    return InvalidArgument(
        "For 'cosine_decay_lr', the 'max_lr' should be greater than the 'min_lr', but got "
        "'max_lr' value: " +
        Repr(max_lr) + ", 'min_lr' value: " + Repr(min_lr) + ".");
  const double delta = 0.5 * (max_lr - min_lr);
  const double d = static_cast<double>(decay_epoch);
  std::vector<double> lr;
  for (int64_t i = 0; i < total_step; ++i) {
    const double e = std::min(Epoch(i, step_per_epoch), d);
    lr.push_back(min_lr + delta * (1 + std::cos(std::numbers::pi * e / d)));
  }
  return lr;
}

Result<std::vector<double>> PolynomialDecayLr(double learning_rate, double end_learning_rate, int64_t total_step,
                                              int64_t step_per_epoch, int64_t decay_epoch, double power,
                                              bool update_decay_epoch) {
  SINKRT_RETURN_IF_ERROR(CheckFloat(nullptr, "learning_rate", learning_rate, true));
  SINKRT_RETURN_IF_ERROR(CheckFloat(nullptr, "end_learning_rate", end_learning_rate, false));
  SINKRT_RETURN_IF_ERROR(CheckFloat(nullptr, "power", power, true));
  SINKRT_RETURN_IF_ERROR(CheckPositiveInt(nullptr, "total_step", total_step));
  SINKRT_RETURN_IF_ERROR(CheckPositiveInt(nullptr, "step_per_epoch", step_per_epoch));
  SINKRT_RETURN_IF_ERROR(CheckPositiveInt(nullptr, "decay_epoch", decay_epoch));
  const double origin = static_cast<double>(decay_epoch);
  const double delta = learning_rate - end_learning_rate;
  std::vector<double> lr;
  for (int64_t i = 0; i < total_step; ++i) {
    const double e = Epoch(i, step_per_epoch);
    // update_decay_epoch: the decay span grows to the next multiple of
    // decay_epoch (at least one); else the epoch stops at decay_epoch.
    const double span = update_decay_epoch ? origin * std::max(std::ceil(e / origin), 1.0) : origin;
    const double t = update_decay_epoch ? e : std::min(e, origin);
    lr.push_back(delta * std::pow(1 - t / span, power) + end_learning_rate);
  }
  return lr;
}

Result<std::vector<double>> WarmupLr(double learning_rate, int64_t total_step, int64_t step_per_epoch,
                                     int64_t warmup_epoch) {
  SINKRT_RETURN_IF_ERROR(CheckFloat(nullptr, "learning_rate", learning_rate, false));
  SINKRT_RETURN_IF_ERROR(CheckPositiveInt(nullptr, "warmup_epoch", warmup_epoch));
  SINKRT_RETURN_IF_ERROR(CheckPositiveInt(nullptr, "total_step", total_step));
  SINKRT_RETURN_IF_ERROR(CheckPositiveInt(nullptr, "step_per_epoch", step_per_epoch));
  const double w = static_cast<double>(warmup_epoch);
  std::vector<double> lr;
  for (int64_t i = 0; i < total_step; ++i) lr.push_back(learning_rate * std::min(Epoch(i, step_per_epoch), w) / w);
  return lr;
}

}  // namespace sinkrt::host
