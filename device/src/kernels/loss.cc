// SparseSoftmaxCrossEntropy (mean over rows of −log softmax at the label)
// and its gradient. Labels come from the dataset, so a label outside [0, C)
// is a data error found in run(), not a plan error: it fails the step with
// the row and the value.
#include <algorithm>
#include <cmath>
#include <string>

#include "device/src/kernels/check.h"
#include "device/src/kernels/kernel_list.h"
#include "device/src/kernels/sum.h"

namespace sinkrt::device {
namespace {

struct LossState : KernelState {
  int64_t rows = 0, classes = 0;
};

// logits [N, C] f32, labels [N] i32, then `extra` scalar f32 inputs (dloss).
Status CheckLogitsLabels(const KernelArgs& args, LossState* s) {
  SINKRT_RETURN_IF_ERROR(CheckNoOptions(args));
  SINKRT_RETURN_IF_ERROR(CheckDType(args, In(0), DType::F32));
  SINKRT_RETURN_IF_ERROR(CheckRank(args, In(0), 2, "[N, C]"));
  SINKRT_RETURN_IF_ERROR(CheckDType(args, In(1), DType::I32));
  const TensorRef& logits = args.inputs[0];
  const int64_t n = logits.dim(0), c = logits.dim(1);
  SINKRT_RETURN_IF_ERROR(CheckShape(args, In(1), Shape{n},
                                    "[N=" + std::to_string(n) + "] for " + ShapeToString(logits.shape) + " logits"));
  if (n == 0 || c == 0) {
    return OpError(args, "input 0 has shape " + ShapeToString(logits.shape) + ", needs at least one row and one class");
  }
  s->rows = n;
  s->classes = c;
  return Status::Ok();
}

Status LabelError(const KernelArgs& args, int64_t row, int32_t label, int64_t classes) {
  return OpError(args, "label " + std::to_string(label) + " in row " + std::to_string(row) + " is outside [0, " +
                           std::to_string(classes) + ")");
}

Status LossPrepare(const KernelArgs& args, PrepareContext& ctx, std::unique_ptr<KernelState>* state) {
  SINKRT_RETURN_IF_ERROR(CheckOperands(args, 2, 1));
  auto s = std::make_unique<LossState>();
  SINKRT_RETURN_IF_ERROR(CheckLogitsLabels(args, s.get()));
  SINKRT_RETURN_IF_ERROR(CheckDType(args, Out(0), DType::F32));
  SINKRT_RETURN_IF_ERROR(CheckShape(args, Out(0), Shape{}, "[] (a scalar)"));
  SINKRT_RETURN_IF_ERROR(CheckNoOverlap(args, /*allow_exact_alias=*/false));
  // One row of exponentials, then one loss per row: both summed pairwise.
  ctx.scratch_bytes = std::max<uint64_t>(ctx.scratch_bytes, (s->classes + s->rows) * sizeof(float));
  *state = std::move(s);
  return Status::Ok();
}

Status LossRun(const KernelArgs& args, KernelState* state, RunContext& ctx) {
  const auto& s = *static_cast<LossState*>(state);
  const float* __restrict logits = args.inputs[0].f32();
  const int32_t* __restrict labels = args.inputs[1].i32();
  float* __restrict e = reinterpret_cast<float*>(ctx.scratch);
  float* __restrict row_loss = e + s.classes;
  const int64_t c = s.classes;
  for (int64_t r = 0; r < s.rows; ++r) {
    const int32_t label = labels[r];
    if (label < 0 || label >= c) return LabelError(args, r, label, c);
    const float* x = logits + r * c;
    float m = x[0];
    for (int64_t j = 1; j < c; ++j) m = std::max(m, x[j]);
    for (int64_t j = 0; j < c; ++j) e[j] = std::exp(x[j] - m);
    row_loss[r] = m + std::log(PairwiseSum(e, c)) - x[label];
  }
  *args.outputs[0].f32() = PairwiseSum(row_loss, s.rows) / static_cast<float>(s.rows);
  return Status::Ok();
}

Status GradPrepare(const KernelArgs& args, PrepareContext&, std::unique_ptr<KernelState>* state) {
  SINKRT_RETURN_IF_ERROR(CheckOperands(args, 3, 1));
  auto s = std::make_unique<LossState>();
  SINKRT_RETURN_IF_ERROR(CheckLogitsLabels(args, s.get()));
  SINKRT_RETURN_IF_ERROR(CheckDType(args, In(2), DType::F32));
  SINKRT_RETURN_IF_ERROR(CheckShape(args, In(2), Shape{}, "[] (d loss, a scalar)"));
  SINKRT_RETURN_IF_ERROR(CheckDType(args, Out(0), DType::F32));
  SINKRT_RETURN_IF_ERROR(CheckSameShape(args, Out(0), In(0)));
  SINKRT_RETURN_IF_ERROR(CheckNoOverlap(args, /*allow_exact_alias=*/false));
  *state = std::move(s);
  return Status::Ok();
}

// dlogits = (softmax(logits) − onehot(label)) · dloss / N
Status GradRun(const KernelArgs& args, KernelState* state, RunContext&) {
  const auto& s = *static_cast<LossState*>(state);
  const float* __restrict logits = args.inputs[0].f32();
  const int32_t* __restrict labels = args.inputs[1].i32();
  float* __restrict dx = args.outputs[0].f32();
  const float g = *args.inputs[2].f32() / static_cast<float>(s.rows);
  const int64_t c = s.classes;
  for (int64_t r = 0; r < s.rows; ++r) {
    const int32_t label = labels[r];
    if (label < 0 || label >= c) return LabelError(args, r, label, c);
    const float* x = logits + r * c;
    float* d = dx + r * c;
    float m = x[0];
    for (int64_t j = 1; j < c; ++j) m = std::max(m, x[j]);
    for (int64_t j = 0; j < c; ++j) d[j] = std::exp(x[j] - m);
    const float scale = g / PairwiseSum(d, c);
    for (int64_t j = 0; j < c; ++j) d[j] *= scale;
    d[label] -= g;
  }
  return Status::Ok();
}

}  // namespace

const KernelImpl kSparseSoftmaxCrossEntropyKernel = {LossPrepare, LossRun};
const KernelImpl kSparseSoftmaxCrossEntropyGradKernel = {GradPrepare, GradRun};

}  // namespace sinkrt::device
