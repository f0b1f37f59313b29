/// \file
/// MindSpore's loss-scale update rules (DynamicLossScaleUpdateCell,
/// FixedLossScaleUpdateCell; docs/guide/loss_scale.md), shared by the device's
/// LossScaleUpdate kernel and the host's reference and tests, so that both
/// follow one schedule.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace sinkrt {

/// The state a sunk run keeps in its arena: MindSpore's cur_iter (starting
/// at 1, here `steps` = cur_iter - 1, zero-initialised), last_overflow_iter
/// (starting at 0), and the overflowed steps so far (the report's
/// `overflow_steps` is the difference between two sinks).
struct LossScaleCounters {
  int32_t steps = 0;               ///< steps counted so far (MindSpore's cur_iter - 1)
  int32_t last_overflow_iter = 0;  ///< the cur_iter of the last overflow or scale increase
  int32_t overflow_steps = 0;      ///< steps that overflowed so far
};

/// One step of DynamicLossScaleUpdateCell: on overflow the scale is divided
/// by `factor` (never below 1); after `window` steps without one it is
/// multiplied by `factor`. Counts the step.
///
/// The scale stays finite: a change that would make it inf keeps the old
/// value, as mindspore.amp.DynamicLossScaler.adjust does
/// (select(_is_finite(scale * factor), scale * factor, scale)). An inf
/// scale would never come back (inf / factor is inf) and would make every
/// later step overflow and be skipped.
inline void DynamicLossScaleStep(float factor, int32_t window, bool overflow, float* scale, LossScaleCounters* c) {
  const int32_t cur_iter = c->steps + 1;
  const float on_overflow = overflow ? std::max(*scale * (1.0f / factor), 1.0f) : *scale;
  const bool should_inc = window <= cur_iter - c->last_overflow_iter;
  if (overflow || should_inc) c->last_overflow_iter = cur_iter;
  const float next = should_inc && !overflow ? on_overflow * factor : on_overflow;
  if (std::isfinite(next)) *scale = next;
  c->steps = cur_iter;
  if (overflow) ++c->overflow_steps;
}

/// FixedLossScaleUpdateCell: the scale never changes; the step is counted.
inline void FixedLossScaleStep(bool overflow, LossScaleCounters* c) {
  ++c->steps;
  if (overflow) ++c->overflow_steps;
}

}  // namespace sinkrt
