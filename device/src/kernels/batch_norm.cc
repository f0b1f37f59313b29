// BatchNorm over channel axis 1 and its helpers (docs/guide/normalization.md).
//
// x [N, C, ...] is seen as [N, C, S] (S = 1 for BatchNorm1d's [N, C]); each
// channel's statistics cover its M = N·S elements. Every per-channel sum is
// taken in double from float partial sums: a plane of S contiguous floats
// adds in 16 explicit float lanes (the loop vectorises and its order is
// fixed), each plane's total into the channel's double. With S = 1 the
// channels are the columns of [N, C]: every loop runs along a row's run of
// channels (it vectorises across channels), each channel gathering
// kRowChunk rows in a float before adding them into its double. The team
// splits the channels, each part whole channels, so the bits never depend
// on the thread count.
//
// Training (BatchNorm) normalises with the batch's mean and biased
// variance, then updates the moving statistics in place with MindSpore's
// momentum: moving = momentum·moving + (1 − momentum)·batch, the batch
// variance unbiased (M / (M − 1)) as Ascend's BNTrainingUpdate, cuDNN and
// PyTorch take it. SyncBatchNorm gives it a 6th input: the group's sums of
// (x − shift) and (x − shift)², shift = the moving mean every member holds,
// over group_size · M elements. All f32: amp keeps BatchNorm in f32.
#include <algorithm>
#include <cmath>

#include "device/src/kernels/check.h"
#include "device/src/kernels/kernel_list.h"
#include "device/src/kernels/parallel_range.h"
#include "device/src/kernels/vector_math.h"
#include "device/src/team/worker_team.h"

namespace sinkrt::device {
namespace {

constexpr int kLanes = 16;

struct BatchNormState : KernelState {
  int64_t n = 0, c = 0, s = 0;
  float epsilon = 1e-5f, momentum = 0.9f;
  int64_t group = 1;  // ranks the reduced sums cover (SyncBatchNorm)
  bool sums = false;  // BatchNorm/BatchNormGrad: the group's sums are an input
  int parts = 1;      // channel parts across the team
  double count() const { return static_cast<double>(n) * static_cast<double>(s); }
};

// ---- per-plane sums in 16 float lanes -------------------------------------

inline double LaneTotal(const float* acc) {
  double t = 0;
  for (int j = 0; j < kLanes; ++j) t += acc[j];
  return t;
}

// Σ (p[i] − shift) over a plane.
SINKRT_VECTOR_CLONES double PlaneSum(const float* __restrict p, int64_t s, float shift) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= s; i += kLanes)
    for (int j = 0; j < kLanes; ++j) acc[j] += p[i + j] - shift;
  for (int j = 0; i < s; ++i, ++j) acc[j] += p[i] - shift;
  return LaneTotal(acc);
}

// Σ (p[i] − m)² over a plane.
SINKRT_VECTOR_CLONES double PlaneSquares(const float* __restrict p, int64_t s, float m) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= s; i += kLanes)
    for (int j = 0; j < kLanes; ++j) {
      const float d = p[i + j] - m;
      acc[j] += d * d;
    }
  for (int j = 0; i < s; ++i, ++j) {
    const float d = p[i] - m;
    acc[j] += d * d;
  }
  return LaneTotal(acc);
}

// Σ dy and Σ dy·(x − m) over a plane.
SINKRT_VECTOR_CLONES void PlaneGradSums(const float* __restrict dy, const float* __restrict x, int64_t s, float m,
                                        double* sdy, double* sdyx) {
  float a[kLanes] = {}, b[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= s; i += kLanes)
    for (int j = 0; j < kLanes; ++j) {
      a[j] += dy[i + j];
      b[j] += dy[i + j] * (x[i + j] - m);
    }
  for (int j = 0; i < s; ++i, ++j) {
    a[j] += dy[i];
    b[j] += dy[i] * (x[i] - m);
  }
  *sdy += LaneTotal(a);
  *sdyx += LaneTotal(b);
}

// y = (x − m)·a + b over a plane (x − m first: no cancellation when
// |mean| ≫ std).
SINKRT_VECTOR_CLONES void PlaneAffine(const float* __restrict x, float* __restrict y, int64_t s, float m, float a,
                                      float b) {
  for (int64_t i = 0; i < s; ++i) y[i] = (x[i] - m) * a + b;
}

// dx = a·dy + b·(x − m) + k over a plane.
SINKRT_VECTOR_CLONES void PlaneGrad(const float* __restrict dy, const float* __restrict x, float* __restrict dx,
                                    int64_t s, float m, float a, float b, float k) {
  for (int64_t i = 0; i < s; ++i) dx[i] = a * dy[i] + b * (x[i] - m) + k;
}

// ---- [N, C] rows: a run of k channels of one row, one lane a channel -----

// acc[j] += x[j] − shift[j].
SINKRT_VECTOR_CLONES void RowSum(const float* __restrict x, const float* __restrict shift, int64_t k,
                                 float* __restrict acc) {
  for (int64_t j = 0; j < k; ++j) acc[j] += x[j] - shift[j];
}

// acc[j] += (x[j] − m[j])².
SINKRT_VECTOR_CLONES void RowSquares(const float* __restrict x, const float* __restrict m, int64_t k,
                                     float* __restrict acc) {
  for (int64_t j = 0; j < k; ++j) {
    const float d = x[j] - m[j];
    acc[j] += d * d;
  }
}

// a[j] += dy[j]; b[j] += dy[j]·(x[j] − m[j]).
SINKRT_VECTOR_CLONES void RowGradSums(const float* __restrict dy, const float* __restrict x, const float* __restrict m,
                                      int64_t k, float* __restrict a, float* __restrict b) {
  for (int64_t j = 0; j < k; ++j) {
    a[j] += dy[j];
    b[j] += dy[j] * (x[j] - m[j]);
  }
}

// y[j] = (x[j] − m[j])·a[j] + b[j].
SINKRT_VECTOR_CLONES void RowAffine(const float* __restrict x, float* __restrict y, int64_t k,
                                    const float* __restrict m, const float* __restrict a, const float* __restrict b) {
  for (int64_t j = 0; j < k; ++j) y[j] = (x[j] - m[j]) * a[j] + b[j];
}

// dx[j] = a[j]·dy[j] + b[j]·(x[j] − m[j]) + c[j].
SINKRT_VECTOR_CLONES void RowGrad(const float* __restrict dy, const float* __restrict x, float* __restrict dx,
                                  int64_t k, const float* __restrict m, const float* __restrict a,
                                  const float* __restrict b, const float* __restrict c) {
  for (int64_t j = 0; j < k; ++j) dx[j] = a[j] * dy[j] + b[j] * (x[j] - m[j]) + c[j];
}

// ---- checks ---------------------------------------------------------------

// x [N, C, ...] as [N, C, S], the options, and every [C] operand.
Status CheckChannels(const KernelArgs& args, Operand x_at, std::initializer_list<Operand> per_channel,
                     BatchNormState* s) {
  SINKRT_ASSIGN_OR_RETURN(const fb::BatchNormOptions* opts, GetOptions<fb::BatchNormOptions>(args));
  if (!(opts->epsilon() > 0.0f) || !std::isfinite(opts->epsilon()))
    return OpError(args, "epsilon must be a positive finite number, got " + std::to_string(opts->epsilon()));
  if (!(opts->momentum() >= 0.0f && opts->momentum() <= 1.0f))
    return OpError(args, "momentum must be in [0, 1], got " + std::to_string(opts->momentum()));
  if (opts->group_size() < 1) return OpError(args, "group_size must be at least 1");
  for (int i = 0; i < static_cast<int>(args.inputs.size()); ++i)
    SINKRT_RETURN_IF_ERROR(CheckDType(args, In(i), DType::F32));
  for (int i = 0; i < static_cast<int>(args.outputs.size()); ++i)
    SINKRT_RETURN_IF_ERROR(CheckDType(args, Out(i), DType::F32));
  const TensorRef& x = Get(args, x_at);
  if (x.rank() < 2)
    return OpError(args, x_at.Name() + " has shape " + ShapeToString(x.shape) + ", expected [N, C, ...]");
  s->n = x.dim(0);
  s->c = x.dim(1);
  s->s = s->n * s->c == 0 ? 0 : x.numel / (s->n * s->c);
  s->epsilon = opts->epsilon();
  s->momentum = opts->momentum();
  s->group = opts->group_size();
  const std::string want = "[C=" + std::to_string(s->c) + "] for " + x_at.Name() + " " + ShapeToString(x.shape);
  for (Operand o : per_channel) SINKRT_RETURN_IF_ERROR(CheckShape(args, o, Shape{s->c}, want));
  return Status::Ok();
}

Status CheckSums(const KernelArgs& args, Operand o, const BatchNormState& s) {
  return CheckShape(args, o, Shape{2, s.c}, "[2, C=" + std::to_string(s.c) + "] (two sums per channel)");
}

// Whole channels per part; a part should outlast the hand-off to a worker.
void PlanParts(const PrepareContext& ctx, BatchNormState* s) {
  const int64_t elements = s->n * s->c * s->s;
  s->parts = static_cast<int>(
      std::max<int64_t>(1, std::min<int64_t>({std::max(ctx.team_size, 1), s->c, elements / kMinPartElements})));
}

template <typename F>
void ForChannels(RunContext& ctx, const BatchNormState& s, F&& fn) {
  const int parts = ctx.team ? std::min(ctx.team->size(), s.parts) : 1;
  if (parts <= 1) {
    fn(int64_t{0}, s.c);
    return;
  }
  ctx.team->Run(parts, [&](int p) { fn(PartBegin(s.c, parts, p, 1), PartBegin(s.c, parts, p + 1, 1)); });
}

// ---- the channel loops ----------------------------------------------------

// [N, C]: channels per run of a row, and rows a float partial sum gathers
// before it adds into the channel's double (its error stays that of
// kRowChunk float additions, as a plane lane's does).
constexpr int64_t kColumns = 256;
constexpr int64_t kRowChunk = 32;

// Per channel c of [c0, c1) of [N, C] (row n at x + n·C): one or two double
// totals of what `add(n, b0, k, acc1, acc2)` adds into the float lanes of
// channels [b0, b0 + k), kRowChunk rows at a time, rows in order.
template <typename AddRow>
void ColumnTotals(const BatchNormState& s, int64_t c0, int64_t c1, double* t1, double* t2, AddRow&& add) {
  float acc1[kColumns], acc2[kColumns];
  for (int64_t b0 = c0; b0 < c1; b0 += kColumns) {
    const int64_t k = std::min(kColumns, c1 - b0);
    std::fill_n(t1 + b0, k, 0.0);
    if (t2) std::fill_n(t2 + b0, k, 0.0);
    for (int64_t n0 = 0; n0 < s.n; n0 += kRowChunk) {
      std::fill_n(acc1, k, 0.0f);
      std::fill_n(acc2, k, 0.0f);
      for (int64_t n = n0; n < std::min(s.n, n0 + kRowChunk); ++n) add(n, b0, k, acc1, acc2);
      for (int64_t j = 0; j < k; ++j) t1[b0 + j] += acc1[j];
      if (t2)
        for (int64_t j = 0; j < k; ++j) t2[b0 + j] += acc2[j];
    }
  }
}

// Per channel in [c0, c1): sum[c] = Σ (x − shift[c]) (shift null: 0), in
// double; column form when S = 1.
void ChannelSums(const float* x, const BatchNormState& s, int64_t c0, int64_t c1, const float* shift, double* sum) {
  if (s.s == 1) {
    // Without a shift, about row 0's values (x itself): the float chunks
    // then hold deviations, accurate for channels far from zero, and
    // N·row 0 adds back in double.
    const float* about = shift ? shift : x;
    ColumnTotals(s, c0, c1, sum, nullptr, [&](int64_t n, int64_t b0, int64_t k, float* acc, float*) {
      RowSum(x + n * s.c + b0, about + b0, k, acc);
    });
    if (!shift)
      for (int64_t c = c0; c < c1; ++c) sum[c] += static_cast<double>(s.n) * x[c];
    return;
  }
  for (int64_t c = c0; c < c1; ++c) sum[c] = 0;
  for (int64_t n = 0; n < s.n; ++n) {
    const float* row = x + n * s.c * s.s;
    for (int64_t c = c0; c < c1; ++c) sum[c] += PlaneSum(row + c * s.s, s.s, shift ? shift[c] : 0.0f);
  }
}

// Per channel in [c0, c1): sq[c] = Σ (x − about[c])², in double.
void ChannelSquares(const float* x, const BatchNormState& s, int64_t c0, int64_t c1, const float* about, double* sq) {
  if (s.s == 1) {
    ColumnTotals(s, c0, c1, sq, nullptr, [&](int64_t n, int64_t b0, int64_t k, float* acc, float*) {
      RowSquares(x + n * s.c + b0, about + b0, k, acc);
    });
    return;
  }
  for (int64_t c = c0; c < c1; ++c) sq[c] = 0;
  for (int64_t n = 0; n < s.n; ++n) {
    const float* row = x + n * s.c * s.s;
    for (int64_t c = c0; c < c1; ++c) sq[c] += PlaneSquares(row + c * s.s, s.s, about[c]);
  }
}

// Per-channel coefficients of a block of at most kBlock channels (a
// [N, C] row's run of them in one loop).
constexpr int64_t kBlock = kColumns;
struct Coefficients {
  float m[kBlock], a[kBlock], b[kBlock], k[kBlock];
};

// Channels [c0, c1) (c1 − c0 ≤ kBlock; coefficient j is channel c0 + j):
// y = (x − m)·a + b, or with dy, dx = a·dy + b·(x − m) + k.
void ChannelApply(const float* dy, const float* x, float* y, const BatchNormState& s, int64_t c0, int64_t c1,
                  const Coefficients& f) {
  for (int64_t n = 0; n < s.n; ++n) {
    const int64_t row = n * s.c * s.s;
    if (s.s == 1) {
      // Columns: the channels of one row are contiguous.
      if (dy) {
        RowGrad(dy + row + c0, x + row + c0, y + row + c0, c1 - c0, f.m, f.a, f.b, f.k);
      } else {
        RowAffine(x + row + c0, y + row + c0, c1 - c0, f.m, f.a, f.b);
      }
      continue;
    }
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t at = row + c * s.s, j = c - c0;
      if (dy) {
        PlaneGrad(dy + at, x + at, y + at, s.s, f.m[j], f.a[j], f.b[j], f.k[j]);
      } else {
        PlaneAffine(x + at, y + at, s.s, f.m[j], f.a[j], f.b[j]);
      }
    }
  }
}

// ---- BatchNorm (training) -------------------------------------------------

// x, gamma, beta, moving_mean, moving_variance [, sums [2, C]] -> y, mean, rstd.
Status BatchNormPrepare(const KernelArgs& args, PrepareContext& ctx, std::unique_ptr<KernelState>* state) {
  const bool sums = args.inputs.size() == 6;
  SINKRT_RETURN_IF_ERROR(CheckOperands(args, sums ? 6 : 5, 3));
  auto s = std::make_unique<BatchNormState>();
  SINKRT_RETURN_IF_ERROR(CheckChannels(args, In(0), {In(1), In(2), In(3), In(4), Out(1), Out(2)}, s.get()));
  SINKRT_RETURN_IF_ERROR(CheckSameShape(args, Out(0), In(0)));
  s->sums = sums;
  if (sums) SINKRT_RETURN_IF_ERROR(CheckSums(args, In(5), *s));
  if (!sums && s->group != 1) return OpError(args, "group_size is " + std::to_string(s->group) + " without sums");
  // PyTorch's message: the unbiased variance of one value has no meaning.
  if (s->count() * static_cast<double>(s->group) < 2)
    return OpError(
        args, "expected more than 1 value per channel when training, got x " + ShapeToString(Get(args, In(0)).shape));
  SINKRT_RETURN_IF_ERROR(CheckNoOverlap(args, /*allow_exact_alias=*/false));
  // The moving statistics are written in place: they share no byte with
  // any other operand (gamma and beta may be one tensor).
  for (int w : {3, 4})
    for (int i = 0; i < static_cast<int>(args.inputs.size()); ++i)
      if (i != w && Overlaps(args.inputs[w], args.inputs[i]))
        return OpError(args, In(w).Name() + " (updated in place) overlaps " + In(i).Name());
  // Per channel: the two double sums, then the affine coefficients.
  ctx.scratch_bytes = std::max<uint64_t>(ctx.scratch_bytes, static_cast<uint64_t>(s->c) * 16 + 8);
  PlanParts(ctx, s.get());
  *state = std::move(s);
  return Status::Ok();
}

Status BatchNormRun(const KernelArgs& args, KernelState* state, RunContext& ctx) {
  const auto& s = *static_cast<BatchNormState*>(state);
  const float* x = args.inputs[0].f32();
  const float* gamma = args.inputs[1].f32();
  const float* beta = args.inputs[2].f32();
  float* moving_mean = args.inputs[3].f32();
  float* moving_var = args.inputs[4].f32();
  float* mean = args.outputs[1].f32();
  float* rstd = args.outputs[2].f32();
  double* d1 = reinterpret_cast<double*>(ctx.scratch);
  double* d2 = d1 + s.c;
  const double m = s.count() * static_cast<double>(s.group);
  ForChannels(ctx, s, [&](int64_t c0, int64_t c1) {
    if (s.sums) {
      // The group's sums about the moving mean.
      const float* sums = args.inputs[5].f32();
      for (int64_t c = c0; c < c1; ++c) {
        const double shifted = sums[c] / m;
        d1[c] = moving_mean[c] + shifted;
        d2[c] = std::max(0.0, sums[s.c + c] / m - shifted * shifted);
      }
    } else {
      // Two passes: the mean, then the squares about it (accurate when
      // |mean| ≫ std).
      ChannelSums(x, s, c0, c1, nullptr, d1);
      for (int64_t c = c0; c < c1; ++c) {
        d1[c] /= m;
        mean[c] = static_cast<float>(d1[c]);
      }
      ChannelSquares(x, s, c0, c1, mean, d2);
      for (int64_t c = c0; c < c1; ++c) d2[c] /= m;
    }
    for (int64_t b0 = c0; b0 < c1; b0 += kBlock) {
      const int64_t b1 = std::min(c1, b0 + kBlock);
      Coefficients f;
      for (int64_t c = b0; c < b1; ++c) {
        const double r = 1.0 / std::sqrt(d2[c] + static_cast<double>(s.epsilon));
        mean[c] = static_cast<float>(d1[c]);
        rstd[c] = static_cast<float>(r);
        // The moving statistics last: SyncBatchNorm's shift read them above.
        const float mo = s.momentum;
        moving_mean[c] = mo * moving_mean[c] + (1.0f - mo) * mean[c];
        moving_var[c] = mo * moving_var[c] + (1.0f - mo) * static_cast<float>(d2[c] * m / (m - 1.0));
        f.m[c - b0] = mean[c];
        f.a[c - b0] = static_cast<float>(static_cast<double>(gamma[c]) * r);
        f.b[c - b0] = beta[c];
      }
      ChannelApply(nullptr, x, args.outputs[0].f32(), s, b0, b1, f);
    }
  });
  return Status::Ok();
}

// ---- BatchNormInfer (eval, predict) ---------------------------------------

// x, gamma, beta, moving_mean, moving_variance -> y.
Status BatchNormInferPrepare(const KernelArgs& args, PrepareContext& ctx, std::unique_ptr<KernelState>* state) {
  SINKRT_RETURN_IF_ERROR(CheckOperands(args, 5, 1));
  auto s = std::make_unique<BatchNormState>();
  SINKRT_RETURN_IF_ERROR(CheckChannels(args, In(0), {In(1), In(2), In(3), In(4)}, s.get()));
  SINKRT_RETURN_IF_ERROR(CheckSameShape(args, Out(0), In(0)));
  SINKRT_RETURN_IF_ERROR(CheckNoOverlap(args, /*allow_exact_alias=*/false));
  PlanParts(ctx, s.get());
  *state = std::move(s);
  return Status::Ok();
}

Status BatchNormInferRun(const KernelArgs& args, KernelState* state, RunContext& ctx) {
  const auto& s = *static_cast<BatchNormState*>(state);
  const float* gamma = args.inputs[1].f32();
  const float* beta = args.inputs[2].f32();
  const float* mm = args.inputs[3].f32();
  const float* mv = args.inputs[4].f32();
  ForChannels(ctx, s, [&](int64_t c0, int64_t c1) {
    for (int64_t b0 = c0; b0 < c1; b0 += kBlock) {
      const int64_t b1 = std::min(c1, b0 + kBlock);
      Coefficients f;
      for (int64_t c = b0; c < b1; ++c) {
        f.m[c - b0] = mm[c];
        f.a[c - b0] =
            static_cast<float>(static_cast<double>(gamma[c]) / std::sqrt(static_cast<double>(mv[c]) + s.epsilon));
        f.b[c - b0] = beta[c];
      }
      ChannelApply(nullptr, args.inputs[0].f32(), args.outputs[0].f32(), s, b0, b1, f);
    }
  });
  return Status::Ok();
}

// ---- BatchNormStats (SyncBatchNorm's local sums) --------------------------

// x, shift [C] -> [2, C]: Σ (x − shift), Σ (x − shift)².
Status BatchNormStatsPrepare(const KernelArgs& args, PrepareContext& ctx, std::unique_ptr<KernelState>* state) {
  SINKRT_RETURN_IF_ERROR(CheckOperands(args, 2, 1));
  auto s = std::make_unique<BatchNormState>();
  SINKRT_RETURN_IF_ERROR(CheckChannels(args, In(0), {In(1)}, s.get()));
  SINKRT_RETURN_IF_ERROR(CheckSums(args, Out(0), *s));
  SINKRT_RETURN_IF_ERROR(CheckNoOverlap(args, /*allow_exact_alias=*/false));
  ctx.scratch_bytes = std::max<uint64_t>(ctx.scratch_bytes, static_cast<uint64_t>(s->c) * 16);
  PlanParts(ctx, s.get());
  *state = std::move(s);
  return Status::Ok();
}

Status BatchNormStatsRun(const KernelArgs& args, KernelState* state, RunContext& ctx) {
  const auto& s = *static_cast<BatchNormState*>(state);
  const float* x = args.inputs[0].f32();
  const float* shift = args.inputs[1].f32();
  float* out = args.outputs[0].f32();
  double* d1 = reinterpret_cast<double*>(ctx.scratch);
  double* d2 = d1 + s.c;
  ForChannels(ctx, s, [&](int64_t c0, int64_t c1) {
    ChannelSums(x, s, c0, c1, shift, d1);
    ChannelSquares(x, s, c0, c1, shift, d2);
    for (int64_t c = c0; c < c1; ++c) {
      out[c] = static_cast<float>(d1[c]);
      out[s.c + c] = static_cast<float>(d2[c]);
    }
  });
  return Status::Ok();
}

// ---- the gradient ---------------------------------------------------------

// Σ dy and Σ dy·x̂ per channel of [c0, c1), in double.
void ChannelGradSums(const float* dy, const float* x, const float* mean, const float* rstd, const BatchNormState& s,
                     int64_t c0, int64_t c1, double* sdy, double* sdyx) {
  if (s.s == 1) {
    ColumnTotals(s, c0, c1, sdy, sdyx, [&](int64_t n, int64_t b0, int64_t k, float* a, float* b) {
      RowGradSums(dy + n * s.c + b0, x + n * s.c + b0, mean + b0, k, a, b);
    });
  } else {
    for (int64_t c = c0; c < c1; ++c) sdy[c] = sdyx[c] = 0;
    for (int64_t n = 0; n < s.n; ++n) {
      const int64_t row = n * s.c * s.s;
      for (int64_t c = c0; c < c1; ++c)
        PlaneGradSums(dy + row + c * s.s, x + row + c * s.s, s.s, mean[c], &sdy[c], &sdyx[c]);
    }
  }
  for (int64_t c = c0; c < c1; ++c) sdyx[c] *= rstd[c];
}

// dy, x, mean, rstd -> [2, C]: Σ dy, Σ dy·x̂ (SyncBatchNorm's backward sums).
Status BatchNormGradStatsPrepare(const KernelArgs& args, PrepareContext& ctx, std::unique_ptr<KernelState>* state) {
  SINKRT_RETURN_IF_ERROR(CheckOperands(args, 4, 1));
  auto s = std::make_unique<BatchNormState>();
  SINKRT_RETURN_IF_ERROR(CheckChannels(args, In(1), {In(2), In(3)}, s.get()));
  SINKRT_RETURN_IF_ERROR(CheckSameShape(args, In(0), In(1)));
  SINKRT_RETURN_IF_ERROR(CheckSums(args, Out(0), *s));
  SINKRT_RETURN_IF_ERROR(CheckNoOverlap(args, /*allow_exact_alias=*/false));
  ctx.scratch_bytes = std::max<uint64_t>(ctx.scratch_bytes, static_cast<uint64_t>(s->c) * 16);
  PlanParts(ctx, s.get());
  *state = std::move(s);
  return Status::Ok();
}

Status BatchNormGradStatsRun(const KernelArgs& args, KernelState* state, RunContext& ctx) {
  const auto& s = *static_cast<BatchNormState*>(state);
  double* d1 = reinterpret_cast<double*>(ctx.scratch);
  double* d2 = d1 + s.c;
  float* out = args.outputs[0].f32();
  ForChannels(ctx, s, [&](int64_t c0, int64_t c1) {
    ChannelGradSums(args.inputs[0].f32(), args.inputs[1].f32(), args.inputs[2].f32(), args.inputs[3].f32(), s, c0, c1,
                    d1, d2);
    for (int64_t c = c0; c < c1; ++c) {
      out[c] = static_cast<float>(d1[c]);
      out[s.c + c] = static_cast<float>(d2[c]);
    }
  });
  return Status::Ok();
}

// dy, x, gamma, mean, rstd [, the group's sums [2, C]] -> dx, dgamma, dbeta.
Status BatchNormGradPrepare(const KernelArgs& args, PrepareContext& ctx, std::unique_ptr<KernelState>* state) {
  const bool sums = args.inputs.size() == 6;
  SINKRT_RETURN_IF_ERROR(CheckOperands(args, sums ? 6 : 5, 3));
  auto s = std::make_unique<BatchNormState>();
  SINKRT_RETURN_IF_ERROR(CheckChannels(args, In(1), {In(2), In(3), In(4), Out(1), Out(2)}, s.get()));
  SINKRT_RETURN_IF_ERROR(CheckSameShape(args, In(0), In(1)));
  SINKRT_RETURN_IF_ERROR(CheckSameShape(args, Out(0), In(1)));
  s->sums = sums;
  if (sums) SINKRT_RETURN_IF_ERROR(CheckSums(args, In(5), *s));
  if (!sums && s->group != 1) return OpError(args, "group_size is " + std::to_string(s->group) + " without sums");
  SINKRT_RETURN_IF_ERROR(CheckNoOverlap(args, /*allow_exact_alias=*/false));
  ctx.scratch_bytes = std::max<uint64_t>(ctx.scratch_bytes, static_cast<uint64_t>(s->c) * 16);
  PlanParts(ctx, s.get());
  *state = std::move(s);
  return Status::Ok();
}

// With x̂ = (x − mean)·rstd and the sums over the M elements normalised
// together (this batch's, or the group's under SyncBatchNorm):
//   dx = gamma·rstd·(dy − Σdy/M − x̂·Σdy·x̂/M) = a·dy + b·x + k,
//   dgamma = Σ dy·x̂ and dbeta = Σ dy over this batch.
Status BatchNormGradRun(const KernelArgs& args, KernelState* state, RunContext& ctx) {
  const auto& s = *static_cast<BatchNormState*>(state);
  const float* dy = args.inputs[0].f32();
  const float* x = args.inputs[1].f32();
  const float* gamma = args.inputs[2].f32();
  const float* mean = args.inputs[3].f32();
  const float* rstd = args.inputs[4].f32();
  float* dgamma = args.outputs[1].f32();
  float* dbeta = args.outputs[2].f32();
  double* sdy = reinterpret_cast<double*>(ctx.scratch);
  double* sdyx = sdy + s.c;
  const double m = s.count() * static_cast<double>(s.group);
  ForChannels(ctx, s, [&](int64_t c0, int64_t c1) {
    ChannelGradSums(dy, x, mean, rstd, s, c0, c1, sdy, sdyx);
    for (int64_t b0 = c0; b0 < c1; b0 += kBlock) {
      const int64_t b1 = std::min(c1, b0 + kBlock);
      Coefficients f;
      for (int64_t c = b0; c < b1; ++c) {
        dgamma[c] = static_cast<float>(sdyx[c]);
        dbeta[c] = static_cast<float>(sdy[c]);
        const double g_dy = s.sums ? args.inputs[5].f32()[c] : sdy[c];
        const double g_dyx = s.sums ? args.inputs[5].f32()[s.c + c] : sdyx[c];
        const double r = rstd[c];
        const double scale = static_cast<double>(gamma[c]) * r;
        f.m[c - b0] = mean[c];
        f.a[c - b0] = static_cast<float>(scale);
        f.b[c - b0] = static_cast<float>(-scale * r * g_dyx / m);  // multiplies x − mean
        f.k[c - b0] = static_cast<float>(-scale * g_dy / m);
      }
      ChannelApply(dy, x, args.outputs[0].f32(), s, b0, b1, f);
    }
  });
  return Status::Ok();
}

}  // namespace

const KernelImpl kBatchNormKernel = {BatchNormPrepare, BatchNormRun};
const KernelImpl kBatchNormInferKernel = {BatchNormInferPrepare, BatchNormInferRun};
const KernelImpl kBatchNormStatsKernel = {BatchNormStatsPrepare, BatchNormStatsRun};
const KernelImpl kBatchNormGradKernel = {BatchNormGradPrepare, BatchNormGradRun};
const KernelImpl kBatchNormGradStatsKernel = {BatchNormGradStatsPrepare, BatchNormGradStatsRun};

}  // namespace sinkrt::device
