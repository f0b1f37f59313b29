/// \file
/// Learning-rate schedules computed on the device from the optimizer's step
/// counter (docs/guide/lr_schedules.md): MindSpore's nn.learning_rate_schedule
/// classes, warmup then cosine, and tables (MindSpore's nn.dynamic_lr lists,
/// which the functions below build with MindSpore's formulas).
///
/// A schedule is a plain value: OptimizerSpec::schedule carries it, graph
/// files store it (format 1.3), and the compiled step computes the rate of
/// step t (t = 0, 1, ...: optimizer steps, as MindSpore's global_step) in
/// float64 on the device, rounded once to float32.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sinkrt/runtime/status.h"

namespace sinkrt::host {

/// Which formula; the values of schemas/common.fbs's LrScheduleKind.
enum class LrScheduleKind : uint8_t {
  None = 0,              ///< no schedule: the optimizer's fixed learning_rate
  WarmUp = 1,            ///< nn.WarmUpLR
  CosineDecay = 2,       ///< nn.CosineDecayLR
  PolynomialDecay = 3,   ///< nn.PolynomialDecayLR
  ExponentialDecay = 4,  ///< nn.ExponentialDecayLR
  NaturalExpDecay = 5,   ///< nn.NaturalExpDecayLR
  InverseDecay = 6,      ///< nn.InverseDecayLR
  WarmupCosine = 7,      ///< WarmUpLR for warmup_steps, then CosineDecayLR from there
  Table = 8,             ///< values[step], the last value past the end
};

/// A schedule and its arguments (MindSpore's names). Build one with the
/// factories; ValidateLrSchedule checks it with MindSpore's messages.
struct LrSchedule {
  LrScheduleKind kind = LrScheduleKind::None;  ///< which formula
  double learning_rate = 0;                    ///< the start rate; the cosines' max_lr
  double end_learning_rate = 0;                ///< PolynomialDecay's end; the cosines' min_lr
  double decay_rate = 0;                       ///< Exponential/NaturalExp/InverseDecay
  int64_t decay_steps = 0;                     ///< every kind but WarmUp and Table
  int64_t warmup_steps = 0;                    ///< WarmUp, WarmupCosine
  double power = 0;                            ///< PolynomialDecay
  bool is_stair = false;                       ///< Exponential/NaturalExp/InverseDecay
  bool update_decay_steps = false;             ///< PolynomialDecay
  std::vector<float> values;                   ///< Table: the rate at each step

  bool enabled() const { return kind != LrScheduleKind::None; }  ///< a schedule, not the fixed rate

  /// nn.WarmUpLR(learning_rate, warmup_steps).
  static LrSchedule WarmUp(double learning_rate, int64_t warmup_steps);
  /// nn.CosineDecayLR(min_lr, max_lr, decay_steps).
  static LrSchedule CosineDecay(double min_lr, double max_lr, int64_t decay_steps);
  /// nn.PolynomialDecayLR(learning_rate, end_learning_rate, decay_steps, power, update_decay_steps).
  static LrSchedule PolynomialDecay(double learning_rate, double end_learning_rate, int64_t decay_steps, double power,
                                    bool update_decay_steps = false);
  /// nn.ExponentialDecayLR(learning_rate, decay_rate, decay_steps, is_stair).
  static LrSchedule ExponentialDecay(double learning_rate, double decay_rate, int64_t decay_steps,
                                     bool is_stair = false);
  /// nn.NaturalExpDecayLR(learning_rate, decay_rate, decay_steps, is_stair).
  static LrSchedule NaturalExpDecay(double learning_rate, double decay_rate, int64_t decay_steps,
                                    bool is_stair = false);
  /// nn.InverseDecayLR(learning_rate, decay_rate, decay_steps, is_stair).
  static LrSchedule InverseDecay(double learning_rate, double decay_rate, int64_t decay_steps, bool is_stair = false);
  /// WarmUpLR(max_lr, warmup_steps) for steps below warmup_steps, then
  /// CosineDecayLR(min_lr, max_lr, decay_steps) at step - warmup_steps.
  static LrSchedule WarmupCosine(double max_lr, double min_lr, int64_t warmup_steps, int64_t decay_steps);
  /// The rate of step i is values[i] (rounded to f32, as MindSpore's
  /// optimizer makes a float32 Tensor of a list); past the end, the last.
  static LrSchedule Table(const std::vector<double>& values);

  bool operator==(const LrSchedule&) const = default;  ///< field by field
};

/// MindSpore's class (or list function) name of a kind: "CosineDecayLR", ...
const char* LrScheduleKindName(LrScheduleKind kind);

/// MindSpore's argument checks for the schedule's class, with its messages
/// ("For 'CosineDecayLR', the 'decay_steps' must be int and must > 0, but
/// got '0' with type 'int'."); the table: non-empty, every value finite and
/// >= 0.
Status ValidateLrSchedule(const LrSchedule& schedule);

/// One line for run headers and sinkdump: "CosineDecayLR(min_lr=1e-05,
/// max_lr=0.001, decay_steps=1000)", "table of 500 rates 0.1 .. 0.001".
std::string DescribeLrSchedule(const LrSchedule& schedule);

/// MindSpore's nn.dynamic_lr lists, with its formulas and messages; pass
/// them to LrSchedule::Table.
/// @{
Result<std::vector<double>> PiecewiseConstantLr(const std::vector<int64_t>& milestone,
                                                const std::vector<double>& learning_rates);
Result<std::vector<double>> ExponentialDecayLr(double learning_rate, double decay_rate, int64_t total_step,
                                               int64_t step_per_epoch, int64_t decay_epoch, bool is_stair = false);
Result<std::vector<double>> NaturalExpDecayLr(double learning_rate, double decay_rate, int64_t total_step,
                                              int64_t step_per_epoch, int64_t decay_epoch, bool is_stair = false);
Result<std::vector<double>> InverseDecayLr(double learning_rate, double decay_rate, int64_t total_step,
                                           int64_t step_per_epoch, int64_t decay_epoch, bool is_stair = false);
Result<std::vector<double>> CosineDecayLr(double min_lr, double max_lr, int64_t total_step, int64_t step_per_epoch,
                                          int64_t decay_epoch);
Result<std::vector<double>> PolynomialDecayLr(double learning_rate, double end_learning_rate, int64_t total_step,
                                              int64_t step_per_epoch, int64_t decay_epoch, double power,
                                              bool update_decay_epoch = false);
Result<std::vector<double>> WarmupLr(double learning_rate, int64_t total_step, int64_t step_per_epoch,
                                     int64_t warmup_epoch);
/// @}

/// `sinkrun train --lr-schedule` text (docs/guide/lr_schedules.md), e.g.
/// "cosine:warmup=500,min=1e-5": the schedule it names, with `base_lr`
/// (--lr) as its learning rate and `total_steps` (the run's optimizer
/// steps) as the default decay_steps. Errors name the bad key or value.
Result<LrSchedule> ParseLrSchedule(const std::string& text, double base_lr, int64_t total_steps);

}  // namespace sinkrt::host
