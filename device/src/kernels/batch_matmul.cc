// BatchMatMul: y[..., M, N] = op(a)[..., M, K] · op(b)[..., K, N] on one
// oneDNN matmul primitive, batch dims broadcast (NumPy rules).
//
// As for MatMul, a transposed operand is the same bytes described with
// swapped strides, and broadcasting needs no copy either: both operands are
// described at y's rank, a missing or size-1 batch dim as extent 1, which
// oneDNN's matmul broadcasts. One primitive call covers every batch, so the
// many tiny products of attention ([16,16]·[16,16] per head and sample) pay
// one dispatch, not one per matrix. (bench/batch_matmul_bench.cc measures it
// against hand-written [16,16] loops, which it beats by 1.4-1.6x even on an
// AVX2-only machine where oneDNN 2.6 cannot use its brgemm kernels.)
#include <algorithm>
#include <string>
#include <utility>

#include "dnnl_kernel.h"
#include "kernel_list.h"

namespace sinkrt::device {
namespace {

using dnnl::memory;

// `t` [..., rows, cols] described at rank `rank` as [batch..., r, c], where
// (r, c) = (rows, cols), or (cols, rows) with swapped strides when
// `transposed`. Missing leading batch dims are 1.
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
  return memory::desc(dims, memory::data_type::f32, strides);
}

Status BatchMatMulPrepare(const KernelArgs& args, PrepareContext& ctx,
                          std::unique_ptr<KernelState>* state) {
  SINKRT_RETURN_IF_ERROR(CheckOperands(args, 2, 1));
  SINKRT_ASSIGN_OR_RETURN(const fb::MatMulOptions* opts, GetOptions<fb::MatMulOptions>(args));
  SINKRT_RETURN_IF_ERROR(RequireDnnl(args, ctx));
  for (int i = 0; i < 2; ++i) SINKRT_RETURN_IF_ERROR(CheckDType(args, In(i), DType::F32));
  SINKRT_RETURN_IF_ERROR(CheckDType(args, Out(0), DType::F32));
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
  SINKRT_RETURN_IF_ERROR(CheckShape(args, Out(0), want,
                                    ShapeToString(want) + " (broadcast batch dims, M=" + std::to_string(m) +
                                        ", N=" + std::to_string(n) + ")"));
  SINKRT_RETURN_IF_ERROR(CheckNoOverlap(args, /*allow_exact_alias=*/false));

  return CatchDnnl(args, [&]() -> Status {
    const dnnl::engine& engine = ctx.dnnl->engine;
    const memory::desc a_md = OperandDesc(a, rank, ta);
    const memory::desc b_md = OperandDesc(b, rank, tb);
    const memory::desc y_md = PlainDesc(y.shape);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, y_md), MakeAttr(/*relu=*/false),
                                          engine);
    auto s = std::make_unique<DnnlState>();
    s->Bind(DNNL_ARG_SRC, a_md, engine, a.data);
    s->Bind(DNNL_ARG_WEIGHTS, b_md, engine, b.data);
    s->Bind(DNNL_ARG_DST, y_md, engine, y.data);
    s->Finish(pd, engine, ctx);
    *state = std::move(s);
    return Status::Ok();
  });
}

}  // namespace

const KernelImpl kBatchMatMulKernel = {BatchMatMulPrepare, DnnlRun};

}  // namespace sinkrt::device
