// Softmax and LogSoftmax along one axis, and their gradients.
//
// A tensor is seen as [outer, A, inner] around the axis. The common case is
// the last axis (inner = 1): each row is contiguous. Otherwise the per-position
// running values (max, sum) live in the kernel scratch, 2·inner floats, so
// that every loop stays contiguous over inner. exp is vector_math.h's
// FastExp, so that the loops vectorise; the last-axis rows run in functions
// compiled per ISA (SINKRT_VECTOR_CLONES), with their sums inline (RowSum).
//
// Operands are all f32 or all bf16 (mixed precision). bf16 runs the f32
// code on staged copies: a block of rows (or one [A, inner] slice) is
// widened into f32 kernel scratch, computed exactly as f32, and rounded once
// into the output; so a bf16 result is the rounded f32 result on the widened
// inputs, with every sum in f32. (The f32 rows keep exp values in y to sum
// and rescale them, which a bf16 y could not hold.)
#include <algorithm>
#include <cmath>

#include "device/src/kernels/check.h"
#include "device/src/kernels/kernel_list.h"
#include "device/src/kernels/parallel_range.h"
#include "device/src/kernels/storage.h"
#include "device/src/kernels/sum.h"
#include "device/src/kernels/vector_math.h"

namespace sinkrt::device {
namespace {

struct AxisState : KernelState {
  int64_t outer = 1, axis_len = 1, inner = 1;
  int64_t stage_rows = 1;  // bf16, last axis: rows widened at a time
};

// bf16 stages this many floats of rows at a time (at least one row): enough
// to amortise the per-ISA row function's call, small enough to stay in L2.
constexpr int64_t kStageFloats = 4096;

// Shared prepare: `inputs` same-shape tensors (x, or dy and y) and one
// output of that shape, all f32 or all bf16; AxisOptions.axis normalised.
Status AxisPrepare(const KernelArgs& args, size_t inputs, PrepareContext& ctx, std::unique_ptr<KernelState>* state) {
  SINKRT_RETURN_IF_ERROR(CheckOperands(args, inputs, 1));
  SINKRT_ASSIGN_OR_RETURN(const fb::AxisOptions* opts, GetOptions<fb::AxisOptions>(args));
  SINKRT_ASSIGN_OR_RETURN(const DType dtype, CheckAllFloatDType(args));
  for (size_t i = 0; i < inputs; ++i) {
    SINKRT_RETURN_IF_ERROR(CheckSameShape(args, In(static_cast<int>(i)), In(0)));
  }
  SINKRT_RETURN_IF_ERROR(CheckSameShape(args, Out(0), In(0)));
  const TensorRef& x = args.inputs[0];
  if (x.rank() == 0) return OpError(args, "input 0 is a scalar; it needs an axis");
  SINKRT_RETURN_IF_ERROR(CheckAxis(args, opts->axis(), x.rank(), In(0)));
  SINKRT_RETURN_IF_ERROR(CheckNoOverlap(args, /*allow_exact_alias=*/false));
  auto s = std::make_unique<AxisState>();
  const int axis = opts->axis();
  for (int d = 0; d < axis; ++d) s->outer *= x.dim(d);
  s->axis_len = x.dim(axis);
  for (int d = axis + 1; d < x.rank(); ++d) s->inner *= x.dim(d);
  uint64_t floats = s->inner > 1 ? 2 * s->inner : 0;  // f32: the strided running values
  if (dtype == DType::BF16) {
    // Staged copies: x and y (Softmax) or dy, y and dx (the gradients), of a
    // block of rows or of one [A, inner] slice, plus the running values.
    const uint64_t staged = static_cast<uint64_t>(inputs) + 1;
    if (s->inner == 1) {
      s->stage_rows =
          std::clamp<int64_t>(kStageFloats / std::max<int64_t>(s->axis_len, 1), 1, std::max<int64_t>(s->outer, 1));
      floats = staged * static_cast<uint64_t>(s->stage_rows * s->axis_len);
    } else {
      floats += staged * static_cast<uint64_t>(s->axis_len * s->inner);
    }
  }
  ctx.scratch_bytes = std::max<uint64_t>(ctx.scratch_bytes, floats * sizeof(float));
  *state = std::move(s);
  return Status::Ok();
}

Status UnaryAxisPrepare(const KernelArgs& args, PrepareContext& ctx, std::unique_ptr<KernelState>* state) {
  return AxisPrepare(args, 1, ctx, state);
}
Status GradAxisPrepare(const KernelArgs& args, PrepareContext& ctx, std::unique_ptr<KernelState>* state) {
  return AxisPrepare(args, 2, ctx, state);
}

// max of x[0..n), n ≥ 1, over 8 lanes so that the loop vectorises (max is
// exact, so the order does not change the result).
inline float RowMax(const float* __restrict x, int64_t n) {
  float m = x[0];
  int64_t i = 0;
  if (n >= 8) {
    float lane[8];
    for (int j = 0; j < 8; ++j) lane[j] = x[j];
    for (i = 8; i + 8 <= n; i += 8)
      for (int j = 0; j < 8; ++j) lane[j] = lane[j] < x[i + j] ? x[i + j] : lane[j];
    m = lane[0];
    for (int j = 1; j < 8; ++j) m = std::max(m, lane[j]);
  }
  for (; i < n; ++i) m = std::max(m, x[i]);
  return m;
}

template <bool kLog>
inline void SoftmaxRow(const float* __restrict x, float* __restrict y, int64_t n) {
  const float m = RowMax(x, n);
  for (int64_t i = 0; i < n; ++i) y[i] = FastExp(x[i] - m);
  const float s = RowSum(y, n);
  if constexpr (kLog) {
    // (x − m) − log s, not x − (m + log s): near the maximum the result is
    // small and the second form would lose it to the rounding of m + log s.
    const float log_s = std::log(s);
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - m) - log_s;
  } else {
    const float inv = 1.0f / s;
    for (int64_t i = 0; i < n; ++i) y[i] *= inv;
  }
}

// `rows` contiguous rows of n.
SINKRT_VECTOR_CLONES void SoftmaxRows(const float* __restrict x, float* __restrict y, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) SoftmaxRow<false>(x + r * n, y + r * n, n);
}
SINKRT_VECTOR_CLONES void LogSoftmaxRows(const float* __restrict x, float* __restrict y, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) SoftmaxRow<true>(x + r * n, y + r * n, n);
}

// x, y: [A, I] slices; m, s: I floats of scratch.
template <bool kLog>
void SoftmaxStrided(const float* __restrict x, float* __restrict y, int64_t a_len, int64_t inner, float* __restrict m,
                    float* __restrict s) {
  std::copy(x, x + inner, m);
  for (int64_t a = 1; a < a_len; ++a) {
    const float* xa = x + a * inner;
    for (int64_t i = 0; i < inner; ++i) m[i] = std::max(m[i], xa[i]);
  }
  std::fill(s, s + inner, 0.0f);
  for (int64_t a = 0; a < a_len; ++a) {
    const float* xa = x + a * inner;
    float* ya = y + a * inner;
    for (int64_t i = 0; i < inner; ++i) {
      ya[i] = FastExp(xa[i] - m[i]);
      s[i] += ya[i];
    }
  }
  if constexpr (kLog) {
    for (int64_t i = 0; i < inner; ++i) s[i] = std::log(s[i]);
    for (int64_t a = 0; a < a_len; ++a) {
      const float* xa = x + a * inner;
      float* ya = y + a * inner;
      for (int64_t i = 0; i < inner; ++i) ya[i] = (xa[i] - m[i]) - s[i];
    }
  } else {
    for (int64_t i = 0; i < inner; ++i) s[i] = 1.0f / s[i];
    for (int64_t a = 0; a < a_len; ++a) {
      float* ya = y + a * inner;
      for (int64_t i = 0; i < inner; ++i) ya[i] *= s[i];
    }
  }
}

// bf16: the f32 code below on staged f32 copies (scratch laid out as
// AxisPrepare sized it).
template <bool kLog>
Status SoftmaxRunBf16(const KernelArgs& args, const AxisState& s, RunContext& ctx) {
  const bf16_t* x = Data<bf16_t>(args.inputs[0]);
  bf16_t* y = Data<bf16_t>(args.outputs[0]);
  float* xf = reinterpret_cast<float*>(ctx.scratch);
  if (s.inner == 1) {
    const int64_t n = s.axis_len;
    float* yf = xf + s.stage_rows * n;
    for (int64_t r0 = 0; r0 < s.outer; r0 += s.stage_rows) {
      const int64_t rows = std::min(s.stage_rows, s.outer - r0);
      Widen(x + r0 * n, xf, rows * n);
      (kLog ? LogSoftmaxRows : SoftmaxRows)(xf, yf, rows, n);
      Narrow(yf, y + r0 * n, rows * n);
    }
    return Status::Ok();
  }
  const int64_t slice = s.axis_len * s.inner;
  float* yf = xf + slice;
  float* m = yf + slice;
  for (int64_t o = 0; o < s.outer; ++o) {
    Widen(x + o * slice, xf, slice);
    SoftmaxStrided<kLog>(xf, yf, s.axis_len, s.inner, m, m + s.inner);
    Narrow(yf, y + o * slice, slice);
  }
  return Status::Ok();
}

template <bool kLog>
Status SoftmaxRun(const KernelArgs& args, KernelState* state, RunContext& ctx) {
  const auto& s = *static_cast<AxisState*>(state);
  if (s.axis_len == 0) return Status::Ok();
  if (args.outputs[0].dtype == DType::BF16) return SoftmaxRunBf16<kLog>(args, s, ctx);
  const float* x = args.inputs[0].f32();
  float* y = args.outputs[0].f32();
  const int64_t slice = s.axis_len * s.inner;
  if (s.inner == 1) {
    // Rows are independent: split across the team, no bit changes.
    const int64_t n = s.axis_len;
    ForRange(
        ctx, s.outer,
        [&](int64_t b, int64_t e) { (kLog ? LogSoftmaxRows : SoftmaxRows)(x + b * n, y + b * n, e - b, n); },
        RowsPerPart(n));
    return Status::Ok();
  }
  float* scratch = reinterpret_cast<float*>(ctx.scratch);
  for (int64_t o = 0; o < s.outer; ++o)
    SoftmaxStrided<kLog>(x + o * slice, y + o * slice, s.axis_len, s.inner, scratch, scratch + s.inner);
  return Status::Ok();
}

// `rows` contiguous rows of n (the axis is the last one).
SINKRT_VECTOR_CLONES void SoftmaxGradRows(const float* __restrict dy, const float* __restrict y, float* __restrict dx,
                                          int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* g = dy + r * n;
    const float* v = y + r * n;
    float* d = dx + r * n;
    const float dot = RowDot(g, v, n);
    for (int64_t i = 0; i < n; ++i) d[i] = v[i] * (g[i] - dot);
  }
}
SINKRT_VECTOR_CLONES void LogSoftmaxGradRows(const float* __restrict dy, const float* __restrict y,
                                             float* __restrict dx, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* g = dy + r * n;
    const float* v = y + r * n;
    float* d = dx + r * n;
    const float sum = RowSum(g, n);
    for (int64_t i = 0; i < n; ++i) d[i] = g[i] - FastExp(v[i]) * sum;
  }
}

// One [A, inner] slice of the gradient; acc: inner floats of scratch.
template <bool kLog>
inline void SoftmaxGradStrided(const float* __restrict g, const float* __restrict v, float* __restrict d, int64_t a_len,
                               int64_t inner, float* __restrict acc) {
  std::fill(acc, acc + inner, 0.0f);
  for (int64_t a = 0; a < a_len; ++a) {
    const float* ga = g + a * inner;
    const float* va = v + a * inner;
    for (int64_t i = 0; i < inner; ++i) acc[i] += kLog ? ga[i] : ga[i] * va[i];
  }
  for (int64_t a = 0; a < a_len; ++a) {
    const float* ga = g + a * inner;
    const float* va = v + a * inner;
    float* da = d + a * inner;
    for (int64_t i = 0; i < inner; ++i) {
      da[i] = kLog ? ga[i] - FastExp(va[i]) * acc[i] : va[i] * (ga[i] - acc[i]);
    }
  }
}

// bf16: the f32 code on staged copies, as SoftmaxRunBf16.
template <bool kLog>
Status SoftmaxGradRunBf16(const KernelArgs& args, const AxisState& s, RunContext& ctx) {
  const bf16_t* dy = Data<bf16_t>(args.inputs[0]);
  const bf16_t* y = Data<bf16_t>(args.inputs[1]);
  bf16_t* dx = Data<bf16_t>(args.outputs[0]);
  float* dyf = reinterpret_cast<float*>(ctx.scratch);
  if (s.inner == 1) {
    const int64_t n = s.axis_len, block = s.stage_rows * n;
    float *yf = dyf + block, *dxf = yf + block;
    for (int64_t r0 = 0; r0 < s.outer; r0 += s.stage_rows) {
      const int64_t rows = std::min(s.stage_rows, s.outer - r0);
      Widen(dy + r0 * n, dyf, rows * n);
      Widen(y + r0 * n, yf, rows * n);
      (kLog ? LogSoftmaxGradRows : SoftmaxGradRows)(dyf, yf, dxf, rows, n);
      Narrow(dxf, dx + r0 * n, rows * n);
    }
    return Status::Ok();
  }
  const int64_t slice = s.axis_len * s.inner;
  float *yf = dyf + slice, *dxf = yf + slice, *acc = dxf + slice;
  for (int64_t o = 0; o < s.outer; ++o) {
    Widen(dy + o * slice, dyf, slice);
    Widen(y + o * slice, yf, slice);
    SoftmaxGradStrided<kLog>(dyf, yf, dxf, s.axis_len, s.inner, acc);
    Narrow(dxf, dx + o * slice, slice);
  }
  return Status::Ok();
}

// SoftmaxGrad: dx = y·(dy − Σ dy·y).  LogSoftmaxGrad: dx = dy − exp(y)·Σ dy.
template <bool kLog>
Status SoftmaxGradRun(const KernelArgs& args, KernelState* state, RunContext& ctx) {
  const auto& s = *static_cast<AxisState*>(state);
  if (args.outputs[0].dtype == DType::BF16) return SoftmaxGradRunBf16<kLog>(args, s, ctx);
  const float* __restrict dy = args.inputs[0].f32();
  const float* __restrict y = args.inputs[1].f32();
  float* __restrict dx = args.outputs[0].f32();
  const int64_t a_len = s.axis_len, inner = s.inner, slice = a_len * inner;
  if (inner == 1) {
    ForRange(
        ctx, s.outer,
        [&](int64_t b, int64_t e) {
          (kLog ? LogSoftmaxGradRows : SoftmaxGradRows)(dy + b * a_len, y + b * a_len, dx + b * a_len, e - b, a_len);
        },
        RowsPerPart(a_len));
    return Status::Ok();
  }
  float* __restrict acc = reinterpret_cast<float*>(ctx.scratch);
  for (int64_t o = 0; o < s.outer; ++o) {
    SoftmaxGradStrided<kLog>(dy + o * slice, y + o * slice, dx + o * slice, a_len, inner, acc);
  }
  return Status::Ok();
}

}  // namespace

const KernelImpl kSoftmaxKernel = {UnaryAxisPrepare, SoftmaxRun<false>};
const KernelImpl kLogSoftmaxKernel = {UnaryAxisPrepare, SoftmaxRun<true>};
const KernelImpl kSoftmaxGradKernel = {GradAxisPrepare, SoftmaxGradRun<false>};
const KernelImpl kLogSoftmaxGradKernel = {GradAxisPrepare, SoftmaxGradRun<true>};

}  // namespace sinkrt::device
