// MaxPool2D (training: writes its argmax workspace), MaxPool2DGrad,
// AvgPool2D and AvgPool2DGrad (padding excluded from the count) on oneDNN
// pooling primitives over plain NCHW arena tensors.
//
// The max-pool workspace is an arena buffer the compiler planned (u8,
// 4 bytes per element of y); the forward kernel writes it and the gradient
// kernel reads it, so both must agree on oneDNN's workspace layout. They do:
// both derive it from a forward primitive descriptor built from the same
// shapes and options on the same engine.
//
// dtypes: x, y, dy and dx share one, f32 or bf16 (oneDNN pools bf16 in f32
// and rounds each result once, so an f32 output would buy little). The
// workspace is the same u8 buffer either way.
#include <string>

#include "device/src/kernels/dnnl_kernel.h"
#include "device/src/kernels/kernel_list.h"

namespace sinkrt::device {
namespace {

using dnnl::memory;

struct PoolGeometry {
  int64_t n, c, h, w, oh, ow;
  memory::dims strides, kernel, pad_l, pad_r;
  Shape x_shape() const { return {n, c, h, w}; }
  Shape y_shape() const { return {n, c, oh, ow}; }
};

// x is the forward input (NCHW), named by the operand it came from.
Result<PoolGeometry> Geometry(const KernelArgs& args, const TensorRef& x, Operand x_op) {
  SINKRT_ASSIGN_OR_RETURN(const fb::Pool2DOptions* o, GetOptions<fb::Pool2DOptions>(args));
  if (o->kernel_h() < 1 || o->kernel_w() < 1 || o->stride_h() < 1 || o->stride_w() < 1) {
    return OpError(args, "kernel (" + std::to_string(o->kernel_h()) + ", " + std::to_string(o->kernel_w()) +
                             ") and strides (" + std::to_string(o->stride_h()) + ", " + std::to_string(o->stride_w()) +
                             ") must be ≥ 1");
  }
  // A padding as large as the window would allow a window made only of
  // padding: no maximum, and an average over nothing.
  const bool pads_ok = o->pad_top() >= 0 && o->pad_bottom() >= 0 && o->pad_left() >= 0 && o->pad_right() >= 0 &&
                       o->pad_top() < o->kernel_h() && o->pad_bottom() < o->kernel_h() &&
                       o->pad_left() < o->kernel_w() && o->pad_right() < o->kernel_w();
  if (!pads_ok) {
    return OpError(args, "paddings (top " + std::to_string(o->pad_top()) + ", bottom " +
                             std::to_string(o->pad_bottom()) + ", left " + std::to_string(o->pad_left()) + ", right " +
                             std::to_string(o->pad_right()) + ") must be ≥ 0 and smaller than the kernel");
  }
  SINKRT_RETURN_IF_ERROR(CheckRank(args, x_op, 4, "[N, C, H, W]"));
  PoolGeometry g;
  g.n = x.dim(0), g.c = x.dim(1), g.h = x.dim(2), g.w = x.dim(3);
  const int64_t span_h = g.h + o->pad_top() + o->pad_bottom() - o->kernel_h();
  const int64_t span_w = g.w + o->pad_left() + o->pad_right() - o->kernel_w();
  if (span_h < 0 || span_w < 0) {
    return OpError(args, "the " + std::to_string(o->kernel_h()) + "x" + std::to_string(o->kernel_w()) +
                             " window does not fit the padded " + std::to_string(g.h) + "x" + std::to_string(g.w) +
                             " " + x_op.Name());
  }
  g.oh = span_h / o->stride_h() + 1;
  g.ow = span_w / o->stride_w() + 1;
  g.strides = {o->stride_h(), o->stride_w()};
  g.kernel = {o->kernel_h(), o->kernel_w()};
  g.pad_l = {o->pad_top(), o->pad_left()};
  g.pad_r = {o->pad_bottom(), o->pad_right()};
  return g;
}

std::string YDesc(const PoolGeometry& g) {
  return "[N=" + std::to_string(g.n) + ", C=" + std::to_string(g.c) + ", OH=" + std::to_string(g.oh) +
         ", OW=" + std::to_string(g.ow) + "]";
}

// `dt`: the dtype of every float operand.
dnnl::pooling_forward::primitive_desc ForwardPd(const PoolGeometry& g, DType dt, dnnl::algorithm algo,
                                                const dnnl::primitive_attr& attr, const dnnl::engine& engine) {
  const dnnl::pooling_forward::desc desc(dnnl::prop_kind::forward_training, algo, PlainDesc(g.x_shape(), dt),
                                         PlainDesc(g.y_shape(), dt), g.strides, g.kernel, g.pad_l, g.pad_r);
  return dnnl::pooling_forward::primitive_desc(desc, attr, engine);
}

// The compiler's workspace buffer: u8 [4·numel(y)], large enough for oneDNN.
Status CheckWorkspace(const KernelArgs& args, Operand ws_op, const PoolGeometry& g, const memory::desc& ws_md) {
  SINKRT_RETURN_IF_ERROR(CheckDType(args, ws_op, DType::U8));
  const int64_t want = 4 * NumElements(g.y_shape());
  SINKRT_RETURN_IF_ERROR(
      CheckShape(args, ws_op, Shape{want}, ShapeToString(Shape{want}) + " (4 bytes per element of y)"));
  const uint64_t need = ws_md.get_size();
  if (need > Bytes(Get(args, ws_op))) {
    return OpError(args, ws_op.Name() + " (workspace) has " + std::to_string(Bytes(Get(args, ws_op))) +
                             " bytes, oneDNN needs " + std::to_string(need));
  }
  return Status::Ok();
}

// Input 0 is f32 or bf16, and the `others` have its dtype, which it returns.
Result<DType> CheckFloatOperands(const KernelArgs& args, std::initializer_list<Operand> others) {
  SINKRT_RETURN_IF_ERROR(CheckFloatDType(args, In(0)));
  for (Operand o : others) SINKRT_RETURN_IF_ERROR(CheckSameDType(args, o, In(0)));
  return args.inputs[0].dtype;
}

// x -> y, and with pooling_max the argmax workspace as output 1.
template <dnnl::algorithm kAlgo>
Status PoolPrepare(const KernelArgs& args, PrepareContext& ctx, std::unique_ptr<KernelState>* state) {
  constexpr bool kMax = kAlgo == dnnl::algorithm::pooling_max;
  SINKRT_RETURN_IF_ERROR(CheckOperands(args, 1, kMax ? 2 : 1));
  SINKRT_RETURN_IF_ERROR(RequireDnnl(args, ctx));
  SINKRT_ASSIGN_OR_RETURN(const DType dt, CheckFloatOperands(args, {Out(0)}));
  const TensorRef &x = args.inputs[0], &y = args.outputs[0];
  SINKRT_ASSIGN_OR_RETURN(const PoolGeometry g, Geometry(args, x, In(0)));
  SINKRT_RETURN_IF_ERROR(CheckShape(args, Out(0), g.y_shape(), YDesc(g)));
  SINKRT_RETURN_IF_ERROR(CheckNoOverlap(args, /*allow_exact_alias=*/false));
  return CatchDnnl(args, [&]() -> Status {
    const dnnl::engine& engine = ctx.dnnl->engine;
    const auto pd = ForwardPd(g, dt, kAlgo, MakeAttr(false), engine);
    if constexpr (kMax) SINKRT_RETURN_IF_ERROR(CheckWorkspace(args, Out(1), g, pd.workspace_desc()));
    auto s = std::make_unique<DnnlState>();
    s->Bind(DNNL_ARG_SRC, pd.src_desc(), engine, x.data);
    s->Bind(DNNL_ARG_DST, pd.dst_desc(), engine, y.data);
    if constexpr (kMax) s->Bind(DNNL_ARG_WORKSPACE, pd.workspace_desc(), engine, args.outputs[1].data);
    s->Finish(pd, engine, ctx);
    *state = std::move(s);
    return Status::Ok();
  });
}

// dy -> dx (the output's shape); with pooling_max also x (input 1, dx's
// shape) and the forward kernel's workspace (input 2).
template <dnnl::algorithm kAlgo>
Status PoolGradPrepare(const KernelArgs& args, PrepareContext& ctx, std::unique_ptr<KernelState>* state) {
  constexpr bool kMax = kAlgo == dnnl::algorithm::pooling_max;
  SINKRT_RETURN_IF_ERROR(CheckOperands(args, kMax ? 3 : 1, 1));
  SINKRT_RETURN_IF_ERROR(RequireDnnl(args, ctx));
  SINKRT_ASSIGN_OR_RETURN(const DType dt,
                          kMax ? CheckFloatOperands(args, {In(1), Out(0)}) : CheckFloatOperands(args, {Out(0)}));
  const TensorRef &dy = args.inputs[0], &dx = args.outputs[0];
  SINKRT_ASSIGN_OR_RETURN(const PoolGeometry g, Geometry(args, dx, Out(0)));
  SINKRT_RETURN_IF_ERROR(CheckShape(args, In(0), g.y_shape(), YDesc(g)));
  if constexpr (kMax) SINKRT_RETURN_IF_ERROR(CheckSameShape(args, In(1), Out(0)));
  SINKRT_RETURN_IF_ERROR(CheckNoOverlap(args, /*allow_exact_alias=*/false));
  return CatchDnnl(args, [&]() -> Status {
    const dnnl::engine& engine = ctx.dnnl->engine;
    const dnnl::primitive_attr attr = MakeAttr(false);
    const auto hint = ForwardPd(g, dt, kAlgo, attr, engine);
    if constexpr (kMax) SINKRT_RETURN_IF_ERROR(CheckWorkspace(args, In(2), g, hint.workspace_desc()));
    const dnnl::pooling_backward::desc desc(kAlgo, PlainDesc(g.x_shape(), dt), PlainDesc(g.y_shape(), dt), g.strides,
                                            g.kernel, g.pad_l, g.pad_r);
    const dnnl::pooling_backward::primitive_desc pd(desc, attr, engine, hint);
    auto s = std::make_unique<DnnlState>();
    s->Bind(DNNL_ARG_DIFF_DST, pd.diff_dst_desc(), engine, dy.data);
    if constexpr (kMax) s->Bind(DNNL_ARG_WORKSPACE, hint.workspace_desc(), engine, args.inputs[2].data);
    s->Bind(DNNL_ARG_DIFF_SRC, pd.diff_src_desc(), engine, dx.data);
    s->Finish(pd, engine, ctx);
    *state = std::move(s);
    return Status::Ok();
  });
}

}  // namespace

// Average pooling leaves padding out of the count.
const KernelImpl kMaxPool2DKernel = {PoolPrepare<dnnl::algorithm::pooling_max>, DnnlRun};
const KernelImpl kMaxPool2DGradKernel = {PoolGradPrepare<dnnl::algorithm::pooling_max>, DnnlRun};
const KernelImpl kAvgPool2DKernel = {PoolPrepare<dnnl::algorithm::pooling_avg_exclude_padding>, DnnlRun};
const KernelImpl kAvgPool2DGradKernel = {PoolGradPrepare<dnnl::algorithm::pooling_avg_exclude_padding>, DnnlRun};

}  // namespace sinkrt::device
