#include "sinkrt/runtime/program_kind.h"

namespace sinkrt {

std::string_view ProgramKindName(ProgramKind kind) {
  switch (kind) {
    case ProgramKind::Init:
      return "init";
    case ProgramKind::TrainStep:
      return "train_step";
    case ProgramKind::EvalStep:
      return "eval_step";
    case ProgramKind::PredictStep:
      return "predict_step";
  }
  return "unknown";  // a value from outside the enum (untrusted bytes)
}

}  // namespace sinkrt
