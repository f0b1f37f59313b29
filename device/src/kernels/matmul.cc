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
//
// On a device with a worker team, a large MatMul is split into one
// single-threaded primitive per thread over its own rows or columns of y
// (PlanSplit), run at once: DnnlSplitRun.
#include <algorithm>
#include <string>

#include "device/src/kernels/dnnl_kernel.h"
#include "device/src/kernels/kernel_list.h"

namespace sinkrt::device {
namespace {

using dnnl::memory;

// Below this much work (2·M·N·K) a MatMul runs whole on one thread: a part
// should be worth more than the hand-off.
constexpr int64_t kSplitWork = 2'000'000;
// Column boundaries fall on multiples of 16 (64 bytes of f32 output), so
// two parts never write one cache line; so do row boundaries, unless a row
// is whole cache lines.
constexpr int64_t kSplitAlign = 16;

// How a MatMul splits across the worker team: along M (rows of y and of
// op(a)) when op(a) is the larger operand, else along N (columns of y, of
// op(b) and of the bias), so that each part streams its own share of the
// larger operand and the weights a part reads stay in its core's cache
// from step to step. K is never split: each y element is one part's dot
// product, summed as the whole kernel would.
struct MatMulSplit {
  int parts = 1;
  bool rows = true;
};

MatMulSplit PlanSplit(int64_t m, int64_t n, int64_t k, int team) {
  MatMulSplit s;
  s.rows = m >= n;
  const int64_t extent = s.rows ? m : n;
  if (team <= 1 || 2 * m * n * k < kSplitWork) return s;
  s.parts = static_cast<int>(std::min<int64_t>(team, extent / kSplitAlign));
  if (s.parts < 1) s.parts = 1;
  return s;
}

void* Offset(void* base, int64_t bytes) { return static_cast<uint8_t*>(base) + bytes; }

Status MatMulPrepare(const KernelArgs& args, PrepareContext& ctx, std::unique_ptr<KernelState>* state) {
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
  const std::string a_desc = " for a " + ShapeToString(a.shape) + " input 0" + (ta ? " (transpose_a)" : "");
  const std::string ks = "K=" + std::to_string(k);
  SINKRT_RETURN_IF_ERROR(CheckShape(args, In(1), tb ? Shape{n, k} : Shape{k, n},
                                    (tb ? "[N, " + ks + "] (transpose_b)" : "[" + ks + ", N]") + a_desc));
  SINKRT_RETURN_IF_ERROR(
      CheckShape(args, Out(0), Shape{m, n}, "[M=" + std::to_string(m) + ", N=" + std::to_string(n) + "]"));
  bool has_bias = false, relu = false;
  SINKRT_RETURN_IF_ERROR(CheckFusion(args, n, "N", sources, &has_bias, &relu));
  SINKRT_RETURN_IF_ERROR(CheckNoOverlap(args, /*allow_exact_alias=*/false));

  const MatMulSplit split = PlanSplit(m, n, k, ctx.team_size);
  return CatchDnnl(args, [&]() -> Status {
    // A split kernel's parts are one thread each, and so is their oneDNN
    // kernel choice: create them under a one-thread OpenMP team.
    ScopedOmpThreads one(split.parts > 1 ? 1 : 0);
    const dnnl::engine& engine = ctx.dnnl->engine;
    const auto src_dt = DnnlType(sources);
    const size_t src_size = DTypeSize(sources), y_size = DTypeSize(args.outputs[0].dtype);
    auto s = std::make_unique<DnnlSplitState>();
    s->parts.resize(split.parts);
    s->status.resize(split.parts, dnnl_success);
    uint64_t scratch = 0;
    // Rows whose bytes fill whole cache lines split anywhere (the MLP's
    // 784-row dW halves evenly); anything else on 16-element bounds.
    const int64_t align = split.rows && n * y_size % 64 == 0 ? 1 : kSplitAlign;
    for (int p = 0; p < split.parts; ++p) {
      // Part p computes y[r0:r1, c0:c1]: rows of op(a), or columns of op(b)
      // and of the bias. Every slice keeps the full tensor's strides.
      const int64_t extent = split.rows ? m : n;
      const int64_t begin = PartBegin(extent, split.parts, p, align);
      const int64_t end = PartBegin(extent, split.parts, p + 1, align);
      const int64_t r0 = split.rows ? begin : 0, mp = split.rows ? end - begin : m;
      const int64_t c0 = split.rows ? 0 : begin, np = split.rows ? n : end - begin;
      const memory::desc a_md({mp, k}, src_dt, ta ? memory::dims{1, m} : memory::dims{k, 1});
      const memory::desc b_md({k, np}, src_dt, tb ? memory::dims{1, k} : memory::dims{n, 1});
      const memory::desc y_md({mp, np}, DnnlType(args.outputs[0].dtype), memory::dims{n, 1});
      const memory::desc bias_md = PlainDesc({1, np}, has_bias ? args.fused_bias.dtype : DType::F32);
      const dnnl::matmul::desc desc =
          has_bias ? dnnl::matmul::desc(a_md, b_md, bias_md, y_md) : dnnl::matmul::desc(a_md, b_md, y_md);
      const dnnl::matmul::primitive_desc pd(desc, MakeAttr(relu), engine);
      DnnlState& part = s->parts[p];
      part.Bind(DNNL_ARG_SRC, a_md, engine, Offset(a.data, (ta ? r0 : r0 * k) * src_size));
      part.Bind(DNNL_ARG_WEIGHTS, b_md, engine, Offset(b.data, (tb ? c0 * k : c0) * src_size));
      if (has_bias)
        part.Bind(DNNL_ARG_BIAS, bias_md, engine, Offset(args.fused_bias.data, c0 * DTypeSize(args.fused_bias.dtype)));
      part.Bind(DNNL_ARG_DST, y_md, engine, Offset(args.outputs[0].data, (r0 * n + c0) * y_size));
      part.scratch_offset = scratch;
      part.Finish(pd, engine, ctx);
      scratch += (pd.scratchpad_desc().get_size() + 63) / 64 * 64;
    }
    *state = std::move(s);
    return Status::Ok();
  });
}

}  // namespace

const KernelImpl kMatMulKernel = {MatMulPrepare, DnnlSplitRun};

}  // namespace sinkrt::device
