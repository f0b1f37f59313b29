// LayerNorm over the last axis and its gradient (docs/reference/ops.md).
//
// x is seen as [rows, D]. The forward keeps only mean and rstd per row; the
// gradient recomputes the normalised row x̂ = (x − mean)·rstd from them.
// Row sums go through RowSum/RowDot (PairwiseSum/PairwiseDot, inline for
// rows up to a leaf), and the gradients of gamma and beta (sums over every
// row) through AddColumnSums's pairwise tree (column leaves filled during
// the gradient's one pass over the rows), so the results are accurate for
// long rows and many rows and bitwise the same run to run.
// Every inner loop runs contiguously over D, in row loops compiled per ISA
// (SINKRT_VECTOR_CLONES). The f32 kernels split their rows across the
// worker team (parallel_range.h) without changing a bit; bf16 runs on the
// calling stream's thread.
//
// Mixed precision: x, gamma, beta, y (and dy, dx, dgamma, dbeta) are all f32
// or all bf16; mean and rstd stay f32 (statistics). bf16 runs the f32 code on
// staged copies: gamma (and beta) widened once per run, and blocks of rows
// widened into f32 kernel scratch, computed exactly as f32 and rounded once
// into the output. So every statistic and every column sum is f32, and a bf16
// result is the rounded f32 result on the widened inputs.
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

struct LayerNormState : KernelState {
  int64_t rows = 0, d = 0;
  float epsilon = 1e-5f;
  int64_t stage_rows = 0;  // bf16: rows widened at a time
  int grad_parts = 1;      // f32 gradient: parts scratch was sized for
};

// The forward stages this many floats of x (and of y) at a time, at least a
// row. The gradient stages kColumnLeafRows rows, so that each block starts a
// column leaf (sum.h) and the leaves fill exactly as in one f32 pass.
constexpr int64_t kStageFloats = 4096;

// x [..., D] (input 0 of both ops; input 1 of the gradient), gamma [D] and
// the per-row statistics [rows]; fills rows, D and epsilon.
Status CheckLayerNormOperands(const KernelArgs& args, Operand x_at, Operand gamma_at, LayerNormState* s) {
  SINKRT_ASSIGN_OR_RETURN(const fb::LayerNormOptions* opts, GetOptions<fb::LayerNormOptions>(args));
  if (!(opts->epsilon() > 0.0f) || !std::isfinite(opts->epsilon()))
    return OpError(args, "epsilon must be a positive finite number, got " + std::to_string(opts->epsilon()));
  const TensorRef& x = Get(args, x_at);
  if (x.rank() == 0) return OpError(args, x_at.Name() + " is a scalar, expected [..., D]");
  s->d = x.dim(-1);
  if (s->d == 0) return OpError(args, x_at.Name() + " has shape " + ShapeToString(x.shape) + ", D must be >= 1");
  s->rows = x.numel / s->d;
  s->epsilon = opts->epsilon();
  const std::string d = "[D=" + std::to_string(s->d) + "] for " + x_at.Name() + " " + ShapeToString(x.shape);
  SINKRT_RETURN_IF_ERROR(CheckShape(args, gamma_at, Shape{s->d}, d));
  return Status::Ok();
}

Status CheckRowStats(const KernelArgs& args, Operand o, const LayerNormState& s) {
  SINKRT_RETURN_IF_ERROR(CheckDType(args, o, DType::F32));
  return CheckShape(args, o, Shape{s.rows}, "[rows=" + std::to_string(s.rows) + "] (one per row)");
}

// x, gamma, beta -> y, mean, rstd.
Status LayerNormPrepare(const KernelArgs& args, PrepareContext& ctx, std::unique_ptr<KernelState>* state) {
  SINKRT_RETURN_IF_ERROR(CheckOperands(args, 3, 3));
  auto s = std::make_unique<LayerNormState>();
  SINKRT_ASSIGN_OR_RETURN(const DType dtype, CheckFloatDType(args, {In(0), In(1), In(2), Out(0)}));
  SINKRT_RETURN_IF_ERROR(CheckLayerNormOperands(args, In(0), In(1), s.get()));
  SINKRT_RETURN_IF_ERROR(CheckSameShape(args, In(2), In(1)));
  SINKRT_RETURN_IF_ERROR(CheckSameShape(args, Out(0), In(0)));
  SINKRT_RETURN_IF_ERROR(CheckRowStats(args, Out(1), *s));
  SINKRT_RETURN_IF_ERROR(CheckRowStats(args, Out(2), *s));
  SINKRT_RETURN_IF_ERROR(CheckNoOverlap(args, /*allow_exact_alias=*/false));
  if (dtype == DType::BF16) {
    // gamma and beta, then x and y of a block of rows.
    s->stage_rows = std::clamp<int64_t>(kStageFloats / s->d, 1, std::max<int64_t>(s->rows, 1));
    const uint64_t floats = 2 * static_cast<uint64_t>(s->d) * (1 + static_cast<uint64_t>(s->stage_rows));
    ctx.scratch_bytes = std::max<uint64_t>(ctx.scratch_bytes, floats * sizeof(float));
  }
  *state = std::move(s);
  return Status::Ok();
}

// Two passes over each row (mean, then the variance of x − mean, which
// stays accurate when |mean| ≫ std), with y holding x − mean in between.
SINKRT_VECTOR_CLONES void LayerNormRows(const float* __restrict x, const float* __restrict gamma,
                                        const float* __restrict beta, float* __restrict y, float* __restrict mean,
                                        float* __restrict rstd, int64_t rows, int64_t d, float epsilon) {
  const float inv_d = 1.0f / static_cast<float>(d);
  for (int64_t r = 0; r < rows; ++r) {
    const float* __restrict xr = x + r * d;
    float* __restrict yr = y + r * d;
    const float m = RowSum(xr, d) * inv_d;
    for (int64_t i = 0; i < d; ++i) yr[i] = xr[i] - m;
    const float var = RowDot(yr, yr, d) * inv_d;
    const float rs = 1.0f / std::sqrt(var + epsilon);
    for (int64_t i = 0; i < d; ++i) yr[i] = yr[i] * rs * gamma[i] + beta[i];
    mean[r] = m;
    rstd[r] = rs;
  }
}

// bf16: LayerNormRows on staged f32 copies (scratch as LayerNormPrepare
// sized it); mean and rstd are written in place.
Status LayerNormRunBf16(const KernelArgs& args, const LayerNormState& s, RunContext& ctx) {
  const bf16_t* x = Data<bf16_t>(args.inputs[0]);
  bf16_t* y = Data<bf16_t>(args.outputs[0]);
  const int64_t d = s.d;
  float* gamma = reinterpret_cast<float*>(ctx.scratch);
  float* beta = gamma + d;
  float* xf = beta + d;
  float* yf = xf + s.stage_rows * d;
  Widen(Data<bf16_t>(args.inputs[1]), gamma, d);
  Widen(Data<bf16_t>(args.inputs[2]), beta, d);
  for (int64_t r0 = 0; r0 < s.rows; r0 += s.stage_rows) {
    const int64_t rows = std::min(s.stage_rows, s.rows - r0);
    Widen(x + r0 * d, xf, rows * d);
    LayerNormRows(xf, gamma, beta, yf, args.outputs[1].f32() + r0, args.outputs[2].f32() + r0, rows, d, s.epsilon);
    Narrow(yf, y + r0 * d, rows * d);
  }
  return Status::Ok();
}

Status LayerNormRun(const KernelArgs& args, KernelState* state, RunContext& ctx) {
  const auto& s = *static_cast<LayerNormState*>(state);
  if (args.outputs[0].dtype == DType::BF16) return LayerNormRunBf16(args, s, ctx);
  // Rows are independent: split across the team, no bit changes.
  const int64_t d = s.d;
  ForRange(
      ctx, s.rows,
      [&](int64_t b, int64_t e) {
        LayerNormRows(args.inputs[0].f32() + b * d, args.inputs[1].f32(), args.inputs[2].f32(),
                      args.outputs[0].f32() + b * d, args.outputs[1].f32() + b, args.outputs[2].f32() + b, e - b, d,
                      s.epsilon);
      },
      RowsPerPart(d));
  return Status::Ok();
}

// dy, x, gamma, mean, rstd -> dx, dgamma, dbeta.
Status LayerNormGradPrepare(const KernelArgs& args, PrepareContext& ctx, std::unique_ptr<KernelState>* state) {
  SINKRT_RETURN_IF_ERROR(CheckOperands(args, 5, 3));
  auto s = std::make_unique<LayerNormState>();
  SINKRT_ASSIGN_OR_RETURN(const DType dtype, CheckFloatDType(args, {In(0), In(1), In(2), Out(0), Out(1), Out(2)}));
  SINKRT_RETURN_IF_ERROR(CheckLayerNormOperands(args, In(1), In(2), s.get()));
  SINKRT_RETURN_IF_ERROR(CheckSameShape(args, In(0), In(1)));
  SINKRT_RETURN_IF_ERROR(CheckRowStats(args, In(3), *s));
  SINKRT_RETURN_IF_ERROR(CheckRowStats(args, In(4), *s));
  SINKRT_RETURN_IF_ERROR(CheckSameShape(args, Out(0), In(1)));
  for (int o : {1, 2}) SINKRT_RETURN_IF_ERROR(CheckSameShape(args, Out(o), In(2)));
  SINKRT_RETURN_IF_ERROR(CheckNoOverlap(args, /*allow_exact_alias=*/false));
  // x̂ and dy·gamma of one row (per part of the team, f32), and the column
  // leaves of dgamma and dbeta.
  s->grad_parts = dtype == DType::F32 ? std::max(ctx.team_size, 1) : 1;
  uint64_t floats = 2 * static_cast<uint64_t>(s->d) *
                    (static_cast<uint64_t>(s->grad_parts) + static_cast<uint64_t>(ColumnLeafCount(s->rows)));
  if (dtype == DType::BF16) {
    // gamma, the f32 dgamma and dbeta, then dy, x and dx of a block of rows.
    s->stage_rows = std::min<int64_t>(kColumnLeafRows, std::max<int64_t>(s->rows, 1));
    floats += static_cast<uint64_t>(s->d) * (3 + 3 * static_cast<uint64_t>(s->stage_rows));
  }
  ctx.scratch_bytes = std::max<uint64_t>(ctx.scratch_bytes, floats * sizeof(float));
  *state = std::move(s);
  return Status::Ok();
}

// One pass over each row: dx = rstd·(g − mean(g) − x̂·mean(g·x̂)) with
// g = dy·gamma and x̂ = (x − mean)·rstd (xhat and g: d floats of scratch
// each), and the rows' dy·x̂ and dy added into their column leaves
// (sum.h, AddColumnLeaves) for dgamma and dbeta.
SINKRT_VECTOR_CLONES void LayerNormGradRows(const float* __restrict dy, const float* __restrict x,
                                            const float* __restrict gamma, const float* __restrict mean,
                                            const float* __restrict rstd, float* __restrict dx, int64_t rows, int64_t d,
                                            float* __restrict xhat, float* __restrict g,
                                            float* __restrict dgamma_leaves, float* __restrict dbeta_leaves) {
  const float inv_d = 1.0f / static_cast<float>(d);
  for (int64_t r = 0; r < rows; ++r) {
    const float* __restrict xr = x + r * d;
    const float* __restrict dyr = dy + r * d;
    float* __restrict dxr = dx + r * d;
    float* __restrict lg = dgamma_leaves + (r / kColumnLeafRows) * d;
    float* __restrict lb = dbeta_leaves + (r / kColumnLeafRows) * d;
    if (r % kColumnLeafRows == 0) {
      for (int64_t i = 0; i < d; ++i) lg[i] = 0.0f, lb[i] = 0.0f;
    }
    const float m = mean[r], rs = rstd[r];
    for (int64_t i = 0; i < d; ++i) {
      const float xh = (xr[i] - m) * rs;
      xhat[i] = xh;
      g[i] = dyr[i] * gamma[i];
      lg[i] += dyr[i] * xh;
      lb[i] += dyr[i];
    }
    const float g_mean = RowSum(g, d) * inv_d;
    const float gx_mean = RowDot(g, xhat, d) * inv_d;
    for (int64_t i = 0; i < d; ++i) dxr[i] = rs * (g[i] - g_mean - xhat[i] * gx_mean);
  }
}

// With g = dy·gamma and x̂ = (x − mean)·rstd per row:
//   dx = rstd·(g − mean(g) − x̂·mean(g·x̂)),  dgamma = Σ_rows dy·x̂,  dbeta = Σ_rows dy.
// One pass over dy and x; the column sums come out as AddColumnSums's bits.
// bf16: LayerNormGradRows on staged f32 copies of kColumnLeafRows rows at a
// time (each block starts a column leaf, so the leaves fill as in one pass),
// and the f32 column sums rounded once into dgamma and dbeta.
Status LayerNormGradRunBf16(const KernelArgs& args, const LayerNormState& s, RunContext& ctx) {
  const int64_t d = s.d;
  float* xhat = reinterpret_cast<float*>(ctx.scratch);
  float* leaves = xhat + 2 * d;
  const int64_t leaf_floats = ColumnLeafCount(s.rows) * d;
  float* gamma = leaves + 2 * leaf_floats;
  float* dgamma = gamma + d;
  float* dbeta = dgamma + d;
  float* dyf = dbeta + d;
  float* xf = dyf + s.stage_rows * d;
  float* dxf = xf + s.stage_rows * d;
  const bf16_t* dy = Data<bf16_t>(args.inputs[0]);
  const bf16_t* x = Data<bf16_t>(args.inputs[1]);
  bf16_t* dx = Data<bf16_t>(args.outputs[0]);
  Widen(Data<bf16_t>(args.inputs[2]), gamma, d);
  for (int64_t r0 = 0; r0 < s.rows; r0 += s.stage_rows) {
    const int64_t rows = std::min(s.stage_rows, s.rows - r0);
    Widen(dy + r0 * d, dyf, rows * d);
    Widen(x + r0 * d, xf, rows * d);
    const int64_t leaf = (r0 / kColumnLeafRows) * d;
    LayerNormGradRows(dyf, xf, gamma, args.inputs[3].f32() + r0, args.inputs[4].f32() + r0, dxf, rows, d, xhat,
                      xhat + d, leaves + leaf, leaves + leaf_floats + leaf);
    Narrow(dxf, dx + r0 * d, rows * d);
  }
  std::fill(dgamma, dgamma + d, 0.0f);
  std::fill(dbeta, dbeta + d, 0.0f);
  AddColumnLeaves(leaves, s.rows, d, dgamma);
  AddColumnLeaves(leaves + leaf_floats, s.rows, d, dbeta);
  Narrow(dgamma, Data<bf16_t>(args.outputs[1]), d);
  Narrow(dbeta, Data<bf16_t>(args.outputs[2]), d);
  return Status::Ok();
}

// Split across the team by rows, in parts of whole column leaves (sum.h):
// each leaf is filled by one part, in row order, as unsplit, and dx's rows
// are independent, so no bit changes; the leaves' tree is then added on the
// calling thread.
Status LayerNormGradRun(const KernelArgs& args, KernelState* state, RunContext& ctx) {
  const auto& s = *static_cast<LayerNormState*>(state);
  if (args.outputs[0].dtype == DType::BF16) return LayerNormGradRunBf16(args, s, ctx);
  float* dgamma = args.outputs[1].f32();
  float* dbeta = args.outputs[2].f32();
  const int64_t d = s.d;
  float* scratch = reinterpret_cast<float*>(ctx.scratch);  // x̂ and g of each part
  float* leaves = scratch + 2 * d * s.grad_parts;
  const int64_t leaf_floats = ColumnLeafCount(s.rows) * d;
  const int team = ctx.team ? std::min(ctx.team->size(), s.grad_parts) : 1;
  const int parts = static_cast<int>(
      std::max<int64_t>(1, std::min<int64_t>({team, s.rows / kColumnLeafRows, s.rows * d / kMinPartElements})));
  auto part = [&](int p) {
    const int64_t b = PartBegin(s.rows, parts, p, kColumnLeafRows);
    const int64_t e = PartBegin(s.rows, parts, p + 1, kColumnLeafRows);
    float* xhat = scratch + 2 * d * p;
    const int64_t leaf = (b / kColumnLeafRows) * d;
    LayerNormGradRows(args.inputs[0].f32() + b * d, args.inputs[1].f32() + b * d, args.inputs[2].f32(),
                      args.inputs[3].f32() + b, args.inputs[4].f32() + b, args.outputs[0].f32() + b * d, e - b, d, xhat,
                      xhat + d, leaves + leaf, leaves + leaf_floats + leaf);
  };
  if (parts > 1) {
    ctx.team->Run(parts, part);
  } else {
    part(0);
  }
  std::fill(dgamma, dgamma + d, 0.0f);
  std::fill(dbeta, dbeta + d, 0.0f);
  AddColumnLeaves(leaves, s.rows, d, dgamma);
  AddColumnLeaves(leaves + leaf_floats, s.rows, d, dbeta);
  return Status::Ok();
}

}  // namespace

const KernelImpl kLayerNormKernel = {LayerNormPrepare, LayerNormRun};
const KernelImpl kLayerNormGradKernel = {LayerNormGradPrepare, LayerNormGradRun};

}  // namespace sinkrt::device
