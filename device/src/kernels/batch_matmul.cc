// BatchMatMul: y[..., M, N] = op(a)[..., M, K] · op(b)[..., K, N], batch
// dims broadcast (NumPy rules).
//
// Small products (attention's [16,16]·[16,16] per head and sample) run on
// small_gemm.h's hand-written kernel, one call per product; larger ones on
// one oneDNN matmul primitive over every batch. oneDNN 2.6 has no brgemm
// kernels on AVX2, and its gemm:jit reaches only 10–14 GFLOP/s on [16,16]
// products there, the hand kernel several times that
// (bench/batch_matmul_bench.cc; kSmallProductWork below says where the two
// cross).
//
// For oneDNN, as for MatMul, a transposed operand is the same bytes
// described with swapped strides, and broadcasting needs no copy either:
// both operands are described at y's rank, a missing or size-1 batch dim as
// extent 1, which oneDNN's matmul broadcasts. One primitive call covers
// every batch, so the many products pay one dispatch, not one per matrix.
//
// dtypes as MatMul: a and b both f32 or both bf16, y f32 (or bf16 with bf16
// sources). The hand kernel is f32 only; bf16 products of any size go to
// oneDNN, whose bf16 kernels accumulate in f32.
#include <omp.h>

#include <algorithm>
#include <string>
#include <utility>

#include "device/src/kernels/dnnl_kernel.h"
#include "device/src/kernels/kernel_list.h"
#include "device/src/kernels/parallel_range.h"
#include "device/src/kernels/small_gemm.h"

namespace sinkrt::device {
namespace {

using dnnl::memory;

// Products up to this many multiply-adds (M·N·K) take the hand kernel when
// K ≤ kSmallGemmMaxK. bench/batch_matmul_bench.cc's BM_Crossover, square
// S³ products on one AVX2 core (oneDNN 2.6, no brgemm), CPU-time medians:
// the hand kernel is 8–13× faster at 8³, 4–5× at 16³, 1.5–1.8× at 24³–32³,
// 1.1–1.3× at 48³, even from 64³ to 96³ and up to 1.4× slower at 128³,
// where oneDNN's packed, cache-blocked gemm pays off (the hand kernel
// blocks neither K nor M). Where they tie, oneDNN keeps the product: it
// scales to larger shapes and to ISAs the hand kernel does not exploit.
inline constexpr int64_t kSmallProductWork = 48 * 48 * 48;

// A batch of hand-kernel products is shared among the OpenMP team from this
// much work on (flops), the oneDNN kernels' bound: waking a passively
// waiting worker costs ~50 µs here, and 8 MFLOP is ~150 µs of this kernel
// on one core. The ViT's attention products split from batch 256 (8.4
// MFLOP). Not tuned further: on the loaded 2-core dev VM two threads ran
// in the time of one whatever the bound (bench/history/kernels.md, BatchMatMul).
inline constexpr int64_t kSmallParallelWork = kParallelWork;
// With the worker team (team/worker_team.h) a hand-off is a polled cache
// line, not a futex wake: products split from this much work on, as
// MatMul does.
inline constexpr int64_t kTeamSplitWork = 2'000'000;

// Either a oneDNN primitive (DnnlState) or, when `hand`, the small-product
// loop: product e of y (row-major over y's batch dims) reads a and b at
// offsets Σ_d index_d(e)·a_step[d] (resp. b_step), step 0 on a broadcast dim.
struct BatchMatMulState : DnnlState {
  bool hand = false;
  bool split = false;  // share the products among the worker team (or the OpenMP team)
  SmallGemmDims dims;
  int batch_rank = 0;
  int64_t products = 1;
  int64_t extent[kMaxRank] = {}, a_step[kMaxRank] = {}, b_step[kMaxRank] = {};
  int64_t y_step = 0;
};

// Products [begin, end) of s. The batch index is advanced as an odometer:
// dividing it out for every product costs up to a tenth of a [16,16] one.
void RunProducts(const BatchMatMulState& s, const float* a, const float* b, float* y, int64_t begin, int64_t end) {
  if (begin >= end) return;
  int64_t index[kMaxRank] = {}, oa = 0, ob = 0, rest = begin;
  for (int d = s.batch_rank - 1; d >= 0; --d) {
    index[d] = rest % s.extent[d];
    rest /= s.extent[d];
    oa += index[d] * s.a_step[d];
    ob += index[d] * s.b_step[d];
  }
  for (int64_t e = begin; e < end; ++e) {
    SmallGemm(s.dims, a + oa, b + ob, y + e * s.y_step);
    for (int d = s.batch_rank - 1; d >= 0; --d) {
      oa += s.a_step[d];
      ob += s.b_step[d];
      if (++index[d] < s.extent[d]) break;
      oa -= s.a_step[d] * s.extent[d];
      ob -= s.b_step[d] * s.extent[d];
      index[d] = 0;
    }
  }
}

Status BatchMatMulRun(const KernelArgs& args, KernelState* state, RunContext& ctx) {
  const auto& s = *static_cast<BatchMatMulState*>(state);
  if (!s.hand) return DnnlRun(args, state, ctx);
  const float* a = args.inputs[0].f32();
  const float* b = args.inputs[1].f32();
  float* y = args.outputs[0].f32();
  const int team = ctx.team ? ctx.team->size() : 1;
  if (s.split && team > 1) {
    // Contiguous equal shares: each product is still one SmallGemm call on
    // one thread, so the bits do not depend on the team size.
    ctx.team->Run(team, [&](int t) { RunProducts(s, a, b, y, s.products * t / team, s.products * (t + 1) / team); });
  } else if (s.split && omp_get_max_threads() > 1) {
    // No worker team (DeviceOptions::worker_team off): OpenMP's, as before.
#pragma omp parallel
    {
      const int64_t t = omp_get_thread_num(), n = omp_get_num_threads();
      RunProducts(s, a, b, y, s.products * t / n, s.products * (t + 1) / n);
    }
  } else {
    RunProducts(s, a, b, y, 0, s.products);
  }
  return Status::Ok();
}

// The hand path's state: batch dims of a, b padded on the left to y's.
std::unique_ptr<BatchMatMulState> HandState(const TensorRef& a, const TensorRef& b, const TensorRef& y,
                                            const SmallGemmDims& dims) {
  auto s = std::make_unique<BatchMatMulState>();
  s->hand = true;
  s->dims = dims;
  s->batch_rank = y.rank() - 2;
  const int64_t a_mat = a.dim(-1) * a.dim(-2), b_mat = b.dim(-1) * b.dim(-2);
  int64_t a_stride = a_mat, b_stride = b_mat;
  for (int d = s->batch_rank - 1; d >= 0; --d) {
    const int da = d - (y.rank() - a.rank()), db = d - (y.rank() - b.rank());
    const int64_t ea = da >= 0 ? a.shape[da] : 1, eb = db >= 0 ? b.shape[db] : 1;
    s->extent[d] = y.shape[d];
    s->a_step[d] = ea == 1 ? 0 : a_stride;
    s->b_step[d] = eb == 1 ? 0 : b_stride;
    a_stride *= ea;
    b_stride *= eb;
    s->products *= y.shape[d];
  }
  s->y_step = dims.m * dims.n;
  return s;
}

// `t` [..., rows, cols] described at rank `rank` as [batch..., r, c], where
// (r, c) = (rows, cols), or (cols, rows) with swapped strides when
// `transposed`. Missing leading batch dims are 1. In t's dtype (f32 or
// bf16, checked by the caller).
memory::desc OperandDesc(const TensorRef& t, int rank, bool transposed) {
  const int r = t.rank();
  memory::dims dims(rank, 1), strides(rank, 0);
  int64_t stride = 1;
  for (int d = r - 1; d >= 0; --d) {
    const int at = d + rank - r;
    dims[at] = t.shape[d];
    strides[at] = stride;
    stride *= t.shape[d];
  }
  // The padded leading dims have extent 1; any stride describes them.
  for (int at = 0; at < rank - r; ++at) strides[at] = stride;
  if (transposed) {
    std::swap(dims[rank - 1], dims[rank - 2]);
    std::swap(strides[rank - 1], strides[rank - 2]);
  }
  return memory::desc(dims, DnnlType(t.dtype), strides);
}

Status BatchMatMulPrepare(const KernelArgs& args, PrepareContext& ctx, std::unique_ptr<KernelState>* state) {
  SINKRT_RETURN_IF_ERROR(CheckOperands(args, 2, 1));
  SINKRT_ASSIGN_OR_RETURN(const fb::MatMulOptions* opts, GetOptions<fb::MatMulOptions>(args));
  SINKRT_RETURN_IF_ERROR(RequireDnnl(args, ctx));
  SINKRT_RETURN_IF_ERROR(CheckFloatDType(args, In(0)));
  SINKRT_RETURN_IF_ERROR(CheckSameDType(args, In(1), In(0)));
  const DType sources = args.inputs[0].dtype;
  SINKRT_RETURN_IF_ERROR(CheckResultDType(args, Out(0), sources));
  const bool ta = opts->transpose_a(), tb = opts->transpose_b();
  const TensorRef &a = args.inputs[0], &b = args.inputs[1], &y = args.outputs[0];
  if (a.rank() < 2) {
    return OpError(args, "input 0 has shape " + ShapeToString(a.shape) + ", expected rank >= 2 " +
                             (ta ? "[..., K, M] (transpose_a)" : "[..., M, K]"));
  }
  if (b.rank() < 2) {
    return OpError(args, "input 1 has shape " + ShapeToString(b.shape) + ", expected rank >= 2 " +
                             (tb ? "[..., N, K] (transpose_b)" : "[..., K, N]"));
  }
  const int64_t m = ta ? a.dim(-1) : a.dim(-2), k = ta ? a.dim(-2) : a.dim(-1);
  const int64_t kb = tb ? b.dim(-1) : b.dim(-2), n = tb ? b.dim(-2) : b.dim(-1);
  if (kb != k) {
    return OpError(args, "input 1 has shape " + ShapeToString(b.shape) + ", expected K=" + std::to_string(k) +
                             " in its " + (tb ? "last dim (transpose_b)" : "second-last dim") + " for input 0 " +
                             ShapeToString(a.shape) + (ta ? " (transpose_a)" : ""));
  }
  // y's batch dims are the broadcast of a's and b's, right-aligned.
  const int rank = std::max(a.rank(), b.rank());
  Shape want(rank);
  for (int d = 0; d < rank - 2; ++d) {
    const int da = d - (rank - a.rank()), db = d - (rank - b.rank());
    const int64_t ea = da >= 0 ? a.shape[da] : 1, eb = db >= 0 ? b.shape[db] : 1;
    if (ea != eb && ea != 1 && eb != 1) {
      return OpError(args, "batch dims of input 0 " + ShapeToString(a.shape) + " and input 1 " +
                               ShapeToString(b.shape) + " do not broadcast (" + std::to_string(ea) + " vs " +
                               std::to_string(eb) + " at batch dim " + std::to_string(d) + ")");
    }
    want[d] = ea == 1 ? eb : ea;
  }
  want[rank - 2] = m;
  want[rank - 1] = n;
  SINKRT_RETURN_IF_ERROR(CheckShape(
      args, Out(0), want,
      ShapeToString(want) + " (broadcast batch dims, M=" + std::to_string(m) + ", N=" + std::to_string(n) + ")"));
  SINKRT_RETURN_IF_ERROR(CheckNoOverlap(args, /*allow_exact_alias=*/false));

  if (sources == DType::F32 && k <= kSmallGemmMaxK && m * n * k <= kSmallProductWork) {
    auto s = HandState(a, b, y, SmallGemmDims{m, n, k, ta, tb});
    s->split = 2 * s->products * m * n * k >= (ctx.team_size > 1 ? kTeamSplitWork : kSmallParallelWork);
    *state = std::move(s);
    return Status::Ok();
  }
  return CatchDnnl(args, [&]() -> Status {
    const dnnl::engine& engine = ctx.dnnl->engine;
    const memory::desc a_md = OperandDesc(a, rank, ta);
    const memory::desc b_md = OperandDesc(b, rank, tb);
    const memory::desc y_md = PlainDesc(y.shape, y.dtype);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, y_md), MakeAttr(/*relu=*/false), engine);
    auto s = std::make_unique<BatchMatMulState>();
    s->Bind(DNNL_ARG_SRC, a_md, engine, a.data);
    s->Bind(DNNL_ARG_WEIGHTS, b_md, engine, b.data);
    s->Bind(DNNL_ARG_DST, y_md, engine, y.data);
    s->Finish(pd, engine, ctx);
    *state = std::move(s);
    return Status::Ok();
  });
}

}  // namespace

const KernelImpl kBatchMatMulKernel = {BatchMatMulPrepare, BatchMatMulRun};

}  // namespace sinkrt::device
