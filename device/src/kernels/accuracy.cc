// ArgMaxAccuracy: how many rows of logits [N, C] have their argmax (the first
// one on ties) at the row's label. The count is an f32 scalar so that eval
// outputs sum across steps and ranks like the loss; a label outside [0, C)
// never matches (accuracy is a metric, not a training step, so it does not
// fail).
#include <string>

#include "device/src/kernels/check.h"
#include "device/src/kernels/kernel_list.h"

namespace sinkrt::device {
namespace {

struct AccuracyState : KernelState {
  int64_t rows = 0, classes = 0;
};

Status AccuracyPrepare(const KernelArgs& args, PrepareContext&, std::unique_ptr<KernelState>* state) {
  SINKRT_RETURN_IF_ERROR(CheckOperands(args, 2, 1));
  SINKRT_RETURN_IF_ERROR(CheckNoOptions(args));
  SINKRT_RETURN_IF_ERROR(CheckDType(args, In(0), DType::F32));
  SINKRT_RETURN_IF_ERROR(CheckRank(args, In(0), 2, "[N, C]"));
  SINKRT_RETURN_IF_ERROR(CheckDType(args, In(1), DType::I32));
  const TensorRef& logits = args.inputs[0];
  SINKRT_RETURN_IF_ERROR(
      CheckShape(args, In(1), Shape{logits.dim(0)},
                 "[N=" + std::to_string(logits.dim(0)) + "] for " + ShapeToString(logits.shape) + " logits"));
  SINKRT_RETURN_IF_ERROR(CheckDType(args, Out(0), DType::F32));
  SINKRT_RETURN_IF_ERROR(CheckShape(args, Out(0), Shape{}, "[] (a scalar)"));
  SINKRT_RETURN_IF_ERROR(CheckNoOverlap(args, /*allow_exact_alias=*/false));
  auto s = std::make_unique<AccuracyState>();
  s->rows = logits.dim(0);
  s->classes = logits.dim(1);
  *state = std::move(s);
  return Status::Ok();
}

Status AccuracyRun(const KernelArgs& args, KernelState* state, RunContext&) {
  const auto& s = *static_cast<AccuracyState*>(state);
  const float* logits = args.inputs[0].f32();
  const int32_t* labels = args.inputs[1].i32();
  int64_t correct = 0;
  for (int64_t r = 0; r < s.rows && s.classes > 0; ++r) {
    const float* x = logits + r * s.classes;
    int64_t best = 0;
    for (int64_t j = 1; j < s.classes; ++j) {
      if (x[j] > x[best]) best = j;
    }
    correct += best == labels[r];
  }
  *args.outputs[0].f32() = static_cast<float>(correct);
  return Status::Ok();
}

}  // namespace

const KernelImpl kArgMaxAccuracyKernel = {AccuracyPrepare, AccuracyRun};

}  // namespace sinkrt::device
