/// \file
/// Loss scaling: MindSpore's FixedLossScaleManager and
/// DynamicLossScaleManager (docs/guide/loss_scale.md), run inside the sink.
///
/// Backward is seeded with the loss scale instead of 1, so small gradients
/// survive low precision; every step the device checks the gradients for
/// inf and NaN, divides them by the scale inside the optimizer update, skips
/// the update of a step that overflowed, and (Dynamic) adjusts the scale —
/// with no host involvement. The scale and the overflowed steps are reported
/// once per sink.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "sinkrt/runtime/status.h"

namespace sinkrt::host {

/// Loss scaling for mixed precision (MindSpore's loss_scale_manager): none, fixed, or dynamic.
struct LossScaleManager {
  /// The kinds of MindSpore's managers; None: no loss scaling.
  enum class Kind : uint8_t { None, Fixed, Dynamic };
  Kind kind = Kind::None;  ///< which manager
  /// Fixed: the scale. Dynamic: init_loss_scale.
  float loss_scale = 1.0f;
  /// Fixed: skip the update of a step whose gradients overflowed (MindSpore's
  /// default); false: no check, every step updates. Dynamic always skips.
  bool drop_overflow_update = true;
  /// Dynamic: the scale is divided by scale_factor on an overflow (never
  /// below 1) and multiplied by it after scale_window steps without one.
  float scale_factor = 2.0f;
  int scale_window = 2000;  ///< Dynamic: steps without an overflow before the scale grows

  /// No loss scaling.
  static LossScaleManager None() { return {}; }
  /// MindSpore's defaults: FixedLossScaleManager(128.0, True) and
  /// DynamicLossScaleManager(2**24, 2, 2000).
  /// @{
  static LossScaleManager Fixed(float loss_scale = 128.0f, bool drop_overflow_update = true);
  static LossScaleManager Dynamic(float init_loss_scale = 16777216.0f, float scale_factor = 2.0f,
                                  int scale_window = 2000);
  /// @}

  /// Whether any loss scaling runs.
  bool enabled() const { return kind != Kind::None; }
  /// Whether the device checks the gradients (and so may skip an update).
  bool checks_overflow() const { return kind == Kind::Dynamic || (kind == Kind::Fixed && drop_overflow_update); }
  /// Same settings.
  bool operator==(const LossScaleManager&) const = default;
};

/// MindSpore's argument checks, naming the argument.
Status ValidateLossScaleManager(const LossScaleManager& m);

/// The command line's spelling: "none", "fixed[:SCALE[:DROP]]" (DROP true or
/// false) or "dynamic[:INIT[:FACTOR[:WINDOW]]]", e.g. "dynamic:65536:2:1000".
Result<LossScaleManager> ParseLossScaleManager(std::string_view text);
/// "FixedLossScaleManager(loss_scale=128, drop_overflow_update=True)", ...
std::string LossScaleManagerText(const LossScaleManager& m);

}  // namespace sinkrt::host
