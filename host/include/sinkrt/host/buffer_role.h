/// \file
/// BufferRole: what a buffer of the arena plan holds (PlannedBuffer::role).
#pragma once

#include <cstdint>

namespace sinkrt {

/// What a buffer holds, which decides when it lives. The enumerators and
/// their values are schemas/task_stream.fbs's BufferRole's
/// (host/src/util/schema_enums.h maps the two and checks they agree).
enum class BufferRole : uint8_t {
  Activation = 0,  ///< lives between its first write and last read in a step
  Input = 1,       ///< written by GetNext
  Param = 2,       ///< persistent, trained
  Grad = 3,        ///< persistent (fusion buckets work on it in place)
  OptState = 4,    ///< persistent optimizer state (momentum, Adam m/v, powers)
  Const = 5,       ///< persistent, written by init only
  Workspace = 6,   ///< kernel scratch planned by the compiler (max-pool indices)
  Output = 7,      ///< reported to the host (loss, metrics); persistent
  /// Optimizer parallel: this rank's dim-0 block of a Param or of a Grad,
  /// inside it (its bytes are the parameter's or gradient's own).
  /// @{
  ParamSlice = 8,
  GradSlice = 9,
  /// @}
  /// Persistent state the step updates in place and never trains
  /// (BatchNorm's moving mean and variance): written by init, kept in
  /// checkpoints, read by eval and predict.
  State = 10,
};

/// The role's name, as its enumerator is spelled ("OptState"); "" for a
/// value from outside the enum.
const char* BufferRoleName(BufferRole role);

}  // namespace sinkrt
