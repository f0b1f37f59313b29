// MatMul: y[M,N] = act(a·b + bias) on a oneDNN matmul primitive.
//
// Transposes cost nothing: a transposed operand is the same arena bytes
// described with swapped strides (oneDNN's "ba" layout), so no copy is made.
// The fused bias is the primitive's bias input ([1, N], broadcast over rows)
// and a fused ReLU is an eltwise post-op.
//
// dtypes: a and b both f32 or both bf16. With bf16 sources oneDNN
// accumulates in f32 and stores y as f32 or bf16 (whichever y is); the bias
// may be either too. All-f32 is the full-precision path.
#include <string>

#include "dnnl_kernel.h"
#include "kernel_list.h"

namespace sinkrt::device {
namespace {

using dnnl::memory;

Status MatMulPrepare(const KernelArgs& args, PrepareContext& ctx,
                     std::unique_ptr<KernelState>* state) {
  SINKRT_RETURN_IF_ERROR(CheckOperands(args, 2, 1, /*allow_fusion=*/true));
  SINKRT_ASSIGN_OR_RETURN(const fb::MatMulOptions* opts, GetOptions<fb::MatMulOptions>(args));
  SINKRT_RETURN_IF_ERROR(RequireDnnl(args, ctx));
  SINKRT_RETURN_IF_ERROR(CheckFloatDType(args, In(0)));
  SINKRT_RETURN_IF_ERROR(CheckSameDType(args, In(1), In(0)));
  const DType sources = args.inputs[0].dtype;
  SINKRT_RETURN_IF_ERROR(CheckResultDType(args, Out(0), sources));
  const bool ta = opts->transpose_a(), tb = opts->transpose_b();
  SINKRT_RETURN_IF_ERROR(CheckRank(args, In(0), 2, ta ? "[K, M] (transpose_a)" : "[M, K]"));
  SINKRT_RETURN_IF_ERROR(CheckRank(args, In(1), 2, tb ? "[N, K] (transpose_b)" : "[K, N]"));
  const TensorRef &a = args.inputs[0], &b = args.inputs[1];
  const int64_t m = ta ? a.dim(1) : a.dim(0);
  const int64_t k = ta ? a.dim(0) : a.dim(1);
  const int64_t n = tb ? b.dim(0) : b.dim(1);
  const std::string a_desc = " for a " + ShapeToString(a.shape) + " input 0" +
                             (ta ? " (transpose_a)" : "");
  const std::string ks = "K=" + std::to_string(k);
  SINKRT_RETURN_IF_ERROR(CheckShape(args, In(1), tb ? Shape{n, k} : Shape{k, n},
                                    (tb ? "[N, " + ks + "] (transpose_b)" : "[" + ks + ", N]") +
                                        a_desc));
  SINKRT_RETURN_IF_ERROR(CheckShape(
      args, Out(0), Shape{m, n},
      "[M=" + std::to_string(m) + ", N=" + std::to_string(n) + "]"));
  bool has_bias = false, relu = false;
  SINKRT_RETURN_IF_ERROR(CheckFusion(args, n, "N", sources, &has_bias, &relu));
  SINKRT_RETURN_IF_ERROR(CheckNoOverlap(args, /*allow_exact_alias=*/false));

  return CatchDnnl(args, [&]() -> Status {
    const dnnl::engine& engine = ctx.dnnl->engine;
    const auto src_dt = DnnlType(sources);
    const memory::desc a_md({m, k}, src_dt, ta ? memory::dims{1, m} : memory::dims{k, 1});
    const memory::desc b_md({k, n}, src_dt, tb ? memory::dims{1, k} : memory::dims{n, 1});
    const memory::desc y_md = PlainDesc({m, n}, args.outputs[0].dtype);
    const memory::desc bias_md = PlainDesc({1, n}, has_bias ? args.fused_bias.dtype : DType::F32);
    const dnnl::matmul::desc desc = has_bias ? dnnl::matmul::desc(a_md, b_md, bias_md, y_md)
                                             : dnnl::matmul::desc(a_md, b_md, y_md);
    const dnnl::matmul::primitive_desc pd(desc, MakeAttr(relu), engine);
    auto s = std::make_unique<DnnlState>();
    s->Bind(DNNL_ARG_SRC, a_md, engine, a.data);
    s->Bind(DNNL_ARG_WEIGHTS, b_md, engine, b.data);
    if (has_bias) s->Bind(DNNL_ARG_BIAS, bias_md, engine, args.fused_bias.data);
    s->Bind(DNNL_ARG_DST, y_md, engine, args.outputs[0].data);
    s->Finish(pd, engine, ctx);
    *state = std::move(s);
    return Status::Ok();
  });
}

}  // namespace

const KernelImpl kMatMulKernel = {MatMulPrepare, DnnlRun};

}  // namespace sinkrt::device
