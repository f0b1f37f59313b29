/// \file
/// ProgramKind: the programs a task stream holds.
#pragma once

#include <cstdint>
#include <string_view>

namespace sinkrt {

/// A program of a task stream. The enumerators and their values are
/// schemas/task_stream.fbs's ProgramKind's (runtime/src/schema_enums.h maps
/// the two and checks they agree).
enum class ProgramKind : uint8_t {
  Init = 0,         ///< initialises parameters and constants, once after load
  TrainStep = 1,    ///< one training step
  EvalStep = 2,     ///< one evaluation step
  PredictStep = 3,  ///< one inference step
};

/// The program's name in messages and tools: "init", "train_step",
/// "eval_step", "predict_step" (the enumerator's name in snake case);
/// "unknown" for a value from outside the enum.
std::string_view ProgramKindName(ProgramKind kind);

}  // namespace sinkrt
