// Conv2D (with fused bias and ReLU), Conv2DBackpropInput and
// Conv2DBackpropFilter on oneDNN primitives.
//
// Tensors stay in the arena's plain NCHW / OIHW layouts: we describe them to
// oneDNN as they are rather than adding reorders into blocked layouts, which
// would need extra arena buffers and copies every step. The backward
// primitives need a forward primitive descriptor as a hint; it is built from
// the same shapes. The bias gradient is not computed here (BiasAddGrad does
// it), so backward-weights has no bias.
//
// dtypes: each kernel's two inputs (x and w, dy and w, dy and x) are both
// f32 or both bf16; its output is f32, or with bf16 inputs f32 or bf16
// (oneDNN accumulates bf16 in f32 and stores either). Conv2D's fused bias
// follows the output's rule.
#include <string>

#include "device/src/kernels/dnnl_kernel.h"
#include "device/src/kernels/kernel_list.h"

namespace sinkrt::device {
namespace {

using dnnl::memory;

// Everything about one convolution, from x [N,C,H,W] and w [O,C,KH,KW].
struct ConvGeometry {
  int64_t n, c, h, w, o, kh, kw, oh, ow;
  memory::dims strides, dilates, pad_l, pad_r;  // dilates as oneDNN counts: dilation − 1
  Shape x_shape() const { return {n, c, h, w}; }
  Shape w_shape() const { return {o, c, kh, kw}; }
  Shape y_shape() const { return {n, o, oh, ow}; }
};

Status CheckConvOptions(const KernelArgs& args, const fb::Conv2DOptions& o) {
  if (o.stride_h() < 1 || o.stride_w() < 1) {
    return OpError(args,
                   "strides (" + std::to_string(o.stride_h()) + ", " + std::to_string(o.stride_w()) + ") must be ≥ 1");
  }
  if (o.dilation_h() < 1 || o.dilation_w() < 1) {
    return OpError(
        args, "dilations (" + std::to_string(o.dilation_h()) + ", " + std::to_string(o.dilation_w()) + ") must be ≥ 1");
  }
  if (o.pad_top() < 0 || o.pad_bottom() < 0 || o.pad_left() < 0 || o.pad_right() < 0) {
    return OpError(args, "paddings must be ≥ 0");
  }
  return Status::Ok();
}

// x and w are the forward input and weights shapes (NCHW, OIHW), each named
// by the operand it came from, for messages.
Result<ConvGeometry> Geometry(const KernelArgs& args, const fb::Conv2DOptions& o, const TensorRef& x, Operand x_op,
                              const TensorRef& w, Operand w_op) {
  SINKRT_RETURN_IF_ERROR(CheckConvOptions(args, o));
  SINKRT_RETURN_IF_ERROR(CheckRank(args, x_op, 4, "[N, C, H, W]"));
  SINKRT_RETURN_IF_ERROR(CheckRank(args, w_op, 4, "[O, C, KH, KW]"));
  ConvGeometry g;
  g.n = x.dim(0), g.c = x.dim(1), g.h = x.dim(2), g.w = x.dim(3);
  g.o = w.dim(0), g.kh = w.dim(2), g.kw = w.dim(3);
  if (w.dim(1) != g.c) {
    return OpError(args, w_op.Name() + " has shape " + ShapeToString(w.shape) + ", expected [O, C=" +
                             std::to_string(g.c) + ", KH, KW] for a " + ShapeToString(x.shape) + " " + x_op.Name());
  }
  const int64_t eff_kh = static_cast<int64_t>(o.dilation_h()) * (g.kh - 1) + 1;
  const int64_t eff_kw = static_cast<int64_t>(o.dilation_w()) * (g.kw - 1) + 1;
  const int64_t span_h = g.h + o.pad_top() + o.pad_bottom() - eff_kh;
  const int64_t span_w = g.w + o.pad_left() + o.pad_right() - eff_kw;
  if (g.kh < 1 || g.kw < 1 || span_h < 0 || span_w < 0) {
    return OpError(args, "the " + std::to_string(g.kh) + "x" + std::to_string(g.kw) + " kernel (dilated " +
                             std::to_string(eff_kh) + "x" + std::to_string(eff_kw) + ") does not fit the padded " +
                             std::to_string(g.h) + "x" + std::to_string(g.w) + " input");
  }
  g.oh = span_h / o.stride_h() + 1;
  g.ow = span_w / o.stride_w() + 1;
  g.strides = {o.stride_h(), o.stride_w()};
  g.dilates = {o.dilation_h() - 1, o.dilation_w() - 1};
  g.pad_l = {o.pad_top(), o.pad_left()};
  g.pad_r = {o.pad_bottom(), o.pad_right()};
  return g;
}

std::string YDesc(const ConvGeometry& g) {
  return "[N=" + std::to_string(g.n) + ", O=" + std::to_string(g.o) + ", OH=" + std::to_string(g.oh) +
         ", OW=" + std::to_string(g.ow) + "]";
}

// The two inputs share an f32 or bf16 dtype, which it returns; the output
// is f32 or (with bf16 inputs) bf16.
Result<DType> CheckConvDTypes(const KernelArgs& args) {
  SINKRT_RETURN_IF_ERROR(CheckFloatDType(args, In(0)));
  SINKRT_RETURN_IF_ERROR(CheckSameDType(args, In(1), In(0)));
  SINKRT_RETURN_IF_ERROR(CheckResultDType(args, Out(0), args.inputs[0].dtype));
  return args.inputs[0].dtype;
}

// The dtypes of x, w, y and the bias as one primitive sees them.
struct ConvTypes {
  DType x = DType::F32, w = DType::F32, y = DType::F32, bias = DType::F32;
};

// The forward descriptor every conv kernel builds (the backward ones as a
// hint), optionally with a bias.
dnnl::convolution_forward::primitive_desc ForwardPd(const ConvGeometry& g, const ConvTypes& t, bool bias,
                                                    const dnnl::primitive_attr& attr, const dnnl::engine& engine) {
  const memory::desc x_md = PlainDesc(g.x_shape(), t.x), w_md = PlainDesc(g.w_shape(), t.w),
                     y_md = PlainDesc(g.y_shape(), t.y);
  const auto kind = dnnl::prop_kind::forward_training;
  const auto algo = dnnl::algorithm::convolution_direct;
  const dnnl::convolution_forward::desc desc =
      bias ? dnnl::convolution_forward::desc(kind, algo, x_md, w_md, PlainDesc({g.o}, t.bias), y_md, g.strides,
                                             g.dilates, g.pad_l, g.pad_r)
           : dnnl::convolution_forward::desc(kind, algo, x_md, w_md, y_md, g.strides, g.dilates, g.pad_l, g.pad_r);
  return dnnl::convolution_forward::primitive_desc(desc, attr, engine);
}

Status Conv2DPrepare(const KernelArgs& args, PrepareContext& ctx, std::unique_ptr<KernelState>* state) {
  SINKRT_RETURN_IF_ERROR(CheckOperands(args, 2, 1, /*allow_fusion=*/true));
  SINKRT_ASSIGN_OR_RETURN(const fb::Conv2DOptions* opts, GetOptions<fb::Conv2DOptions>(args));
  SINKRT_RETURN_IF_ERROR(RequireDnnl(args, ctx));
  SINKRT_ASSIGN_OR_RETURN(const DType sources, CheckConvDTypes(args));
  const TensorRef &x = args.inputs[0], &w = args.inputs[1], &y = args.outputs[0];
  SINKRT_ASSIGN_OR_RETURN(const ConvGeometry g, Geometry(args, *opts, x, In(0), w, In(1)));
  SINKRT_RETURN_IF_ERROR(CheckShape(args, Out(0), g.y_shape(), YDesc(g)));
  bool has_bias = false, relu = false;
  SINKRT_RETURN_IF_ERROR(CheckFusion(args, g.o, "O", sources, &has_bias, &relu));
  SINKRT_RETURN_IF_ERROR(CheckNoOverlap(args, /*allow_exact_alias=*/false));
  return CatchDnnl(args, [&]() -> Status {
    const dnnl::engine& engine = ctx.dnnl->engine;
    const ConvTypes types{sources, sources, y.dtype, has_bias ? args.fused_bias.dtype : DType::F32};
    const auto pd = ForwardPd(g, types, has_bias, MakeAttr(relu), engine);
    auto s = std::make_unique<DnnlState>();
    s->Bind(DNNL_ARG_SRC, pd.src_desc(), engine, x.data);
    s->Bind(DNNL_ARG_WEIGHTS, pd.weights_desc(), engine, w.data);
    if (has_bias) s->Bind(DNNL_ARG_BIAS, pd.bias_desc(), engine, args.fused_bias.data);
    s->Bind(DNNL_ARG_DST, pd.dst_desc(), engine, y.data);
    s->Finish(pd, engine, ctx);
    *state = std::move(s);
    return Status::Ok();
  });
}

// What the two backward kernels check alike: dy [N,O,OH,OW] is input 0;
// the forward x [N,C,H,W] and w [O,C,KH,KW] are input 1 and output 0 in
// either order, each named by the operand it is.
Result<ConvGeometry> BackwardGeometry(const KernelArgs& args, PrepareContext& ctx, Operand x_op, Operand w_op) {
  SINKRT_RETURN_IF_ERROR(CheckOperands(args, 2, 1));
  SINKRT_ASSIGN_OR_RETURN(const fb::Conv2DOptions* opts, GetOptions<fb::Conv2DOptions>(args));
  SINKRT_RETURN_IF_ERROR(RequireDnnl(args, ctx));
  SINKRT_RETURN_IF_ERROR(CheckConvDTypes(args).status());
  const TensorRef& x = Get(args, x_op);
  SINKRT_ASSIGN_OR_RETURN(const ConvGeometry g, Geometry(args, *opts, x, x_op, Get(args, w_op), w_op));
  SINKRT_RETURN_IF_ERROR(
      CheckShape(args, In(0), g.y_shape(), YDesc(g) + " for a " + ShapeToString(x.shape) + " " + x_op.Name()));
  SINKRT_RETURN_IF_ERROR(CheckNoOverlap(args, /*allow_exact_alias=*/false));
  return g;
}

// convolution_backward_data or _weights over tensors of dtypes `t` (x or dx,
// w or dw, dy), with the forward descriptor as hint. The hint has dy's dtype
// throughout: a forward conv of bf16 x and w into f32 y exists, but none with
// an f32 x and bf16 w, as dx f32 from bf16 dy and w would ask for.
template <typename Backward>
typename Backward::primitive_desc BackwardPd(const ConvGeometry& g, const ConvTypes& t, const dnnl::engine& engine) {
  const dnnl::primitive_attr attr = MakeAttr(false);
  const auto hint = ForwardPd(g, ConvTypes{t.y, t.y, t.y}, false, attr, engine);
  const typename Backward::desc desc(dnnl::algorithm::convolution_direct, PlainDesc(g.x_shape(), t.x),
                                     PlainDesc(g.w_shape(), t.w), PlainDesc(g.y_shape(), t.y), g.strides, g.dilates,
                                     g.pad_l, g.pad_r);
  return typename Backward::primitive_desc(desc, attr, engine, hint);
}

// dy [N,O,OH,OW], w [O,C,KH,KW] -> dx [N,C,H,W] (the output's shape).
Status BackpropInputPrepare(const KernelArgs& args, PrepareContext& ctx, std::unique_ptr<KernelState>* state) {
  SINKRT_ASSIGN_OR_RETURN(const ConvGeometry g, BackwardGeometry(args, ctx, Out(0), In(1)));
  const TensorRef &dy = args.inputs[0], &w = args.inputs[1], &dx = args.outputs[0];
  return CatchDnnl(args, [&]() -> Status {
    const dnnl::engine& engine = ctx.dnnl->engine;
    const ConvTypes types{dx.dtype, w.dtype, dy.dtype};
    const auto pd = BackwardPd<dnnl::convolution_backward_data>(g, types, engine);
    auto s = std::make_unique<DnnlState>();
    s->Bind(DNNL_ARG_DIFF_DST, pd.diff_dst_desc(), engine, dy.data);
    s->Bind(DNNL_ARG_WEIGHTS, pd.weights_desc(), engine, w.data);
    s->Bind(DNNL_ARG_DIFF_SRC, pd.diff_src_desc(), engine, dx.data);
    s->Finish(pd, engine, ctx);
    *state = std::move(s);
    return Status::Ok();
  });
}

// dy [N,O,OH,OW], x [N,C,H,W] -> dw [O,C,KH,KW] (the output's shape).
Status BackpropFilterPrepare(const KernelArgs& args, PrepareContext& ctx, std::unique_ptr<KernelState>* state) {
  SINKRT_ASSIGN_OR_RETURN(const ConvGeometry g, BackwardGeometry(args, ctx, In(1), Out(0)));
  const TensorRef &dy = args.inputs[0], &x = args.inputs[1], &dw = args.outputs[0];
  return CatchDnnl(args, [&]() -> Status {
    const dnnl::engine& engine = ctx.dnnl->engine;
    const ConvTypes types{x.dtype, dw.dtype, dy.dtype};
    const auto pd = BackwardPd<dnnl::convolution_backward_weights>(g, types, engine);
    auto s = std::make_unique<DnnlState>();
    s->Bind(DNNL_ARG_SRC, pd.src_desc(), engine, x.data);
    s->Bind(DNNL_ARG_DIFF_DST, pd.diff_dst_desc(), engine, dy.data);
    s->Bind(DNNL_ARG_DIFF_WEIGHTS, pd.diff_weights_desc(), engine, dw.data);
    s->Finish(pd, engine, ctx);
    *state = std::move(s);
    return Status::Ok();
  });
}

}  // namespace

const KernelImpl kConv2DKernel = {Conv2DPrepare, DnnlRun};
const KernelImpl kConv2DBackpropInputKernel = {BackpropInputPrepare, DnnlRun};
const KernelImpl kConv2DBackpropFilterKernel = {BackpropFilterPrepare, DnnlRun};

}  // namespace sinkrt::device
