// Gather along axis 0 (an embedding lookup) and its gradient, a scatter-add
// (docs/reference/ops.md).
//
// The table is seen as [V, R]: V rows of R elements. Indices come from the
// dataset, so one outside [0, V) is a data error found in run(): it fails
// the step naming its position and value, as labels do in the loss.
#include <algorithm>
#include <cstring>
#include <string>

#include "device/src/kernels/check.h"
#include "device/src/kernels/kernel_list.h"

namespace sinkrt::device {
namespace {

struct GatherState : KernelState {
  int64_t count = 0;  // indices
  int64_t vocab = 0;  // V
  int64_t row = 0;    // R
};

// `table` [V, ...] (the forward's input or the gradient's output), `indices`
// i32 [...] and `rows` [..., table dims after 0] (the forward's output or
// the gradient's dy).
Status CheckGatherShapes(const KernelArgs& args, Operand table, Operand indices, Operand rows, GatherState* s) {
  SINKRT_RETURN_IF_ERROR(CheckNoOptions(args));
  SINKRT_RETURN_IF_ERROR(CheckDType(args, table, DType::F32));
  SINKRT_RETURN_IF_ERROR(CheckDType(args, indices, DType::I32));
  SINKRT_RETURN_IF_ERROR(CheckDType(args, rows, DType::F32));
  const TensorRef& t = Get(args, table);
  const TensorRef& i = Get(args, indices);
  if (t.rank() == 0) return OpError(args, table.Name() + " is a scalar, expected [V, ...]");
  if (t.dim(0) == 0) return OpError(args, table.Name() + " has shape " + ShapeToString(t.shape) + ", V must be >= 1");
  Shape want = i.shape;
  want.insert(want.end(), t.shape.begin() + 1, t.shape.end());
  SINKRT_RETURN_IF_ERROR(CheckShape(args, rows, want,
                                    ShapeToString(want) + " (" + indices.Name() + " " + ShapeToString(i.shape) +
                                        " then " + table.Name() + " " + ShapeToString(t.shape) +
                                        " without its first dim)"));
  s->count = i.numel;
  s->vocab = t.dim(0);
  s->row = t.numel / s->vocab;
  return Status::Ok();
}

Status IndexError(const KernelArgs& args, int64_t row, int32_t index, int64_t vocab) {
  return OpError(args, "index " + std::to_string(index) + " in row " + std::to_string(row) + " is outside [0, " +
                           std::to_string(vocab) + ")");
}

// Gather: table, indices -> y. GatherGrad: dy, indices -> dtable (the
// table's shape comes from the output buffer).
template <bool kGrad>
Status GatherPrepare(const KernelArgs& args, PrepareContext&, std::unique_ptr<KernelState>* state) {
  SINKRT_RETURN_IF_ERROR(CheckOperands(args, 2, 1));
  auto s = std::make_unique<GatherState>();
  const Operand table = kGrad ? Out(0) : In(0), rows = kGrad ? In(0) : Out(0);
  SINKRT_RETURN_IF_ERROR(CheckGatherShapes(args, table, In(1), rows, s.get()));
  SINKRT_RETURN_IF_ERROR(CheckNoOverlap(args, /*allow_exact_alias=*/false));
  *state = std::move(s);
  return Status::Ok();
}

Status GatherRun(const KernelArgs& args, KernelState* state, RunContext&) {
  const auto& s = *static_cast<GatherState*>(state);
  const float* __restrict table = args.inputs[0].f32();
  const int32_t* __restrict indices = args.inputs[1].i32();
  float* __restrict y = args.outputs[0].f32();
  for (int64_t n = 0; n < s.count; ++n) {
    const int32_t k = indices[n];
    if (k < 0 || k >= s.vocab) return IndexError(args, n, k, s.vocab);
    std::memcpy(y + n * s.row, table + k * s.row, static_cast<size_t>(s.row) * sizeof(float));
  }
  return Status::Ok();
}

// dtable = 0, then dtable[indices[n]] += dy[n] for n in order: a repeated
// index sums its rows in the same order every step.
Status GatherGradRun(const KernelArgs& args, KernelState* state, RunContext&) {
  const auto& s = *static_cast<GatherState*>(state);
  const float* __restrict dy = args.inputs[0].f32();
  const int32_t* __restrict indices = args.inputs[1].i32();
  float* __restrict dtable = args.outputs[0].f32();
  std::fill(dtable, dtable + s.vocab * s.row, 0.0f);
  for (int64_t n = 0; n < s.count; ++n) {
    const int32_t k = indices[n];
    if (k < 0 || k >= s.vocab) return IndexError(args, n, k, s.vocab);
    float* __restrict to = dtable + k * s.row;
    const float* __restrict from = dy + n * s.row;
    for (int64_t j = 0; j < s.row; ++j) to[j] += from[j];
  }
  return Status::Ok();
}

}  // namespace

const KernelImpl kGatherKernel = {GatherPrepare<false>, GatherRun};
const KernelImpl kGatherGradKernel = {GatherPrepare<true>, GatherGradRun};

}  // namespace sinkrt::device
