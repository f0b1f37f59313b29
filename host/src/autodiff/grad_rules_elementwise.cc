// The gradient rules of the elementwise ops (arithmetic, activations, unary
// math, softmax and its loss, Cast, Select, CausalMask) and of the
// reductions.
#include <algorithm>
#include <string>

#include "host/src/autodiff/grad_rule.h"

namespace sinkrt::host::autodiff_internal {
namespace {

// Add, Sub, Mul with NumPy broadcasting: each input's gradient summed back
// to its shape.
Status BroadcastingGrad(const Rule& r, Dx& dx) {
  const std::vector<bool>& wants = r.wants;
  const char* const suffix[2] = {"grad_a", "grad_b"};
  for (size_t i = 0; i < 2; ++i) {
    if (!wants[i]) continue;
    const std::string s = suffix[i];
    switch (r.op.op) {
      case OpCode::Add:
        dx[i] = r.SumTo(r.dy, r.in_shape(i), s);
        break;
      case OpCode::Sub:
        if (i == 0) {
          dx[i] = r.SumTo(r.dy, r.in_shape(i), s);
        } else {
          // Reduce first: Neg then runs over the (smaller) input shape.
          const Ref summed = r.SumTo(r.dy, r.in_shape(i), s + "/sum");
          dx[i] = r.Emit(OpCode::Neg, {summed}, OpAttrs{}, r.in_shape(i), s);
        }
        break;
      default: {  // Mul: d a = dy·b, d b = dy·a, each summed back to its input's shape
        const Ref prod = r.Emit(OpCode::Mul, {r.dy, r.in(1 - i)}, OpAttrs{}, r.b.shape(r.dy),
                                r.b.shape(r.dy) == r.in_shape(i) ? s : s + "/mul");
        dx[i] = r.SumTo(prod, r.in_shape(i), s);
        break;
      }
    }
  }
  return Status::Ok();
}

// Div, Maximum, Minimum, Pow (MindSpore's bprops): each input's gradient at
// the broadcast shape, then summed back to the input's shape.
Ref Binary(const Rule& r, OpCode op, Ref a, Ref b, const std::string& suffix) {
  return r.Emit(op, {a, b}, OpAttrs{}, r.b.shape(r.dy), suffix);
}

// a / b: d a = dy / b, d b = -(dy / b)·y.
Status DivGrad(const Rule& r, Dx& dx) {
  const Ref over_b = Binary(r, OpCode::Div, r.dy, r.in(1), "grad_a/div");
  if (r.want(0)) dx[0] = r.SumTo(over_b, r.in_shape(0), "grad_a");
  if (r.want(1)) {
    // Reduce first: Neg then runs over the (smaller) input shape.
    const Ref summed = r.SumTo(Binary(r, OpCode::Mul, over_b, r.out(0), "grad_b/mul"), r.in_shape(1), "grad_b/sum");
    dx[1] = r.Emit(OpCode::Neg, {summed}, OpAttrs{}, r.in_shape(1), "grad_b");
  }
  return Status::Ok();
}

// max/min(a, b): dy to the chosen operand, half to each at a tie
// (MindSpore's MaximumGrad/MinimumGrad): b's mask is a's with the operands
// swapped.
template <OpCode kMask>
Status ExtremumGrad(const Rule& r, Dx& dx) {
  const char* const suffix[2] = {"grad_a", "grad_b"};
  for (size_t i = 0; i < 2; ++i) {
    if (!r.want(i)) continue;
    const std::string s = suffix[i];
    const Ref mask = Binary(r, kMask, r.in(i), r.in(1 - i), s + "/mask");
    dx[i] = r.SumTo(Binary(r, OpCode::Mul, r.dy, mask, s + "/mul"), r.in_shape(i), s);
  }
  return Status::Ok();
}

// x^e: d x = dy·e·x^(e-1); d e = dy·y·log(x), with log(x) read as 0 for
// x < 0 (MindSpore's Pow bprop).
Status PowGrad(const Rule& r, Dx& dx) {
  if (r.want(0)) {
    const Ref base = Binary(r, OpCode::PowGradBase, r.in(0), r.in(1), "grad_a/base");
    dx[0] = r.SumTo(Binary(r, OpCode::Mul, r.dy, base, "grad_a/mul"), r.in_shape(0), "grad_a");
  }
  if (r.want(1)) {
    const Ref log = r.Emit(OpCode::PowGradLog, {r.in(0)}, OpAttrs{}, r.in_shape(0), "grad_b/log");
    const Ref dy_y = Binary(r, OpCode::Mul, r.dy, r.out(0), "grad_b/dy_y");
    dx[1] = r.SumTo(Binary(r, OpCode::Mul, dy_y, log, "grad_b/mul"), r.in_shape(1), "grad_b");
  }
  return Status::Ok();
}

// dx = kind(dy, x or y): the activations' gradient kernels.
template <OpCode kGrad, bool kReadsOutput>
Status ActivationGrad(const Rule& r, Dx& dx) {
  if (r.want(0)) {
    dx[0] = r.Emit(kGrad, {r.dy, kReadsOutput ? r.out(0) : r.in(0)}, OpAttrs{}, r.in_shape(0), "grad");
  }
  return Status::Ok();
}

Status NegGrad(const Rule& r, Dx& dx) {
  if (r.want(0)) dx[0] = r.Emit(OpCode::Neg, {r.dy}, OpAttrs{}, r.in_shape(0), "grad");
  return Status::Ok();
}

// The unary math ops, composed from existing kernels (MindSpore's forms
// written with Mul, Div, Rsqrt, Square and BroadcastTo's scale). Each
// intermediate has the input's shape and the gradient's dtype.
Ref Times(const Rule& r, Ref a, Ref b, const std::string& suffix) {
  return r.Emit(OpCode::Mul, {a, b}, OpAttrs{}, r.in_shape(0), suffix);
}
Ref Scaled(const Rule& r, Ref v, float scale, const std::string& suffix) {
  return r.Emit(OpCode::BroadcastTo, {v}, ScaleAttrs(scale), r.in_shape(0), suffix);
}
Ref Apply(const Rule& r, OpCode op, Ref v, const std::string& suffix) {
  return r.Emit(op, {v}, OpAttrs{}, r.in_shape(0), suffix);
}

// d exp(x) = dy·y.
Status ExpGrad(const Rule& r, Dx& dx) {
  if (r.want(0)) dx[0] = Times(r, r.dy, r.out(0), "grad");
  return Status::Ok();
}

// d log(x) = dy / x (MindSpore: reciprocal(x)·dy), defined for x < 0 too:
// log's own NaN there does not reach the gradient.
Status LogGrad(const Rule& r, Dx& dx) {
  if (r.want(0)) dx[0] = r.Emit(OpCode::Div, {r.dy, r.in(0)}, OpAttrs{}, r.in_shape(0), "grad");
  return Status::Ok();
}

// d sqrt(x) = dy / (2 sqrt(x)) = 0.5·dy·rsqrt(x).
Status SqrtGrad(const Rule& r, Dx& dx) {
  if (r.want(0)) {
    const Ref prod = Times(r, r.dy, Apply(r, OpCode::Rsqrt, r.in(0), "grad/rsqrt"), "grad/mul");
    dx[0] = Scaled(r, prod, 0.5f, "grad");
  }
  return Status::Ok();
}

// d rsqrt(x) = -0.5·dy·y³ (MindSpore's RsqrtGrad).
Status RsqrtGrad(const Rule& r, Dx& dx) {
  if (r.want(0)) {
    const Ref y = r.out(0);
    const Ref cube = Times(r, y, Apply(r, OpCode::Square, y, "grad/square"), "grad/cube");
    dx[0] = Scaled(r, Times(r, r.dy, cube, "grad/mul"), -0.5f, "grad");
  }
  return Status::Ok();
}

// d x² = 2·dy·x.
Status SquareGrad(const Rule& r, Dx& dx) {
  if (r.want(0)) dx[0] = Scaled(r, Times(r, r.dy, r.in(0), "grad/mul"), 2.0f, "grad");
  return Status::Ok();
}

// d dropout(x) = dy · mask / (1 − p): DropoutGrad redraws the op's mask from
// the same step and global indices (its attributes are the op's), so no
// mask is kept from the forward (docs/guide/dropout.md).
Status DropoutGrad(const Rule& r, Dx& dx) {
  if (r.op.inputs.size() != 2)
    return Internal("Dropout '" + r.op.name + "' has no step counter (the training graph adds it)");
  if (r.want(0)) dx[0] = r.Emit(OpCode::DropoutGrad, {r.dy, r.in(1)}, r.op.attrs, r.in_shape(0), "grad");
  return Status::Ok();
}

// Softmax, LogSoftmax: the kernel reads dy and y along the op's axis.
template <OpCode kGrad>
Status SoftmaxGrad(const Rule& r, Dx& dx) {
  if (r.want(0)) {
    dx[0] = r.Emit(kGrad, {r.dy, r.out(0)}, AxisAttrs(r.op.attrs.axis), r.in_shape(0), "grad");
  }
  return Status::Ok();
}

Status SparseSoftmaxCrossEntropyGrad(const Rule& r, Dx& dx) {
  if (r.want(0)) {
    dx[0] = r.Emit(OpCode::SparseSoftmaxCrossEntropyGrad, {r.in(0), r.in(1), r.dy}, OpAttrs{}, r.in_shape(0), "grad");
  }
  return Status::Ok();
}

// dy has the reduced shape; every element of x receives its row's gradient
// (times 1/count for the mean).
Ref ReduceGradOf(const Rule& r) {
  const Shape& sx = r.in_shape(0);
  const std::vector<int>& axes = r.op.attrs.axes;
  auto reduced = [&](size_t i) {
    return axes.empty() || std::binary_search(axes.begin(), axes.end(), static_cast<int>(i));
  };
  Shape keep;
  size_t leading = 0;  // reduced axes 0..leading-1
  int64_t count = 1;
  for (size_t i = 0; i < sx.size(); ++i) {
    keep.push_back(reduced(i) ? 1 : sx[i]);
    if (reduced(i)) count *= sx[i];
    if (reduced(i) && leading == i) ++leading;
  }
  Ref dy = r.dy;
  const Shape& sy = r.b.shape(dy);
  // NumPy broadcasting prepends missing axes, which is right only when the
  // dropped axes are leading ones; otherwise put the 1s back explicitly.
  const Shape tail(keep.begin() + static_cast<std::ptrdiff_t>(leading), keep.end());
  if (sy != keep && sy != tail) dy = r.Emit(OpCode::Reshape, {dy}, OpAttrs{}, keep, "grad/keep_dims");
  const float scale = r.op.op == OpCode::ReduceMean && count > 0 ? 1.0f / static_cast<float>(count) : 1.0f;
  return r.Emit(OpCode::BroadcastTo, {dy}, ScaleAttrs(scale), sx, "grad");
}

Status ReduceGrad(const Rule& r, Dx& dx) {
  if (r.want(0)) dx[0] = ReduceGradOf(r);
  return Status::Ok();
}

// The input's shape with the reduced axes kept as 1.
Shape KeptShape(const Rule& r) {
  const std::vector<int>& axes = r.op.attrs.axes;
  Shape keep = r.in_shape(0);
  for (size_t i = 0; i < keep.size(); ++i) {
    if (axes.empty() || std::binary_search(axes.begin(), axes.end(), static_cast<int>(i))) keep[i] = 1;
  }
  return keep;
}

// MindSpore's _min_or_max_grad: dy goes to the elements equal to the max,
// split evenly among them at a tie; a NaN max (equal to nothing) gives 0.
// dx = EqualMask(x, y) · dy / max(count, 1), the count summed over the
// reduced axes (MindSpore adds 1e-24 to it: the same values in f32).
Status ReduceMaxGrad(const Rule& r, Dx& dx) {
  if (!r.want(0)) return Status::Ok();
  const Shape& sx = r.in_shape(0);
  const Shape keep = KeptShape(r);
  auto kept = [&](Ref v, const std::string& suffix) {
    return r.b.shape(v) == keep ? v : r.Emit(OpCode::Reshape, {v}, OpAttrs{}, keep, suffix);
  };
  const Ref y = kept(r.out(0), "grad/max_kept");
  const Ref dy = kept(r.dy, "grad/keep_dims");
  const Ref hits = r.Emit(OpCode::EqualMask, {r.in(0), y}, OpAttrs{}, sx, "grad/hits");
  OpAttrs sum;
  sum.axes = r.op.attrs.axes;
  sum.keep_dims = true;
  const Ref count = r.Emit(OpCode::ReduceSum, {hits}, sum, keep, "grad/count");
  OpAttrs one;
  one.value = 1.0f;
  const Ref ones = r.Emit(OpCode::Fill, {}, one, keep, "grad/one");
  const Ref at_least_1 = r.Emit(OpCode::Maximum, {count, ones}, OpAttrs{}, keep, "grad/count_at_least_1");
  const Ref share = r.Emit(OpCode::Div, {dy, at_least_1}, OpAttrs{}, keep, "grad/share");
  dx[0] = r.Emit(OpCode::Mul, {hits, share}, OpAttrs{}, sx, "grad");
  return Status::Ok();
}

// cond ? x : y: dx = select(cond, dy, 0), dy = select(cond, 0, dy), each
// summed back to its input's shape (MindSpore's Select bprop); cond gets
// none.
Status SelectGrad(const Rule& r, Dx& dx) {
  if (!r.want(1) && !r.want(2)) return Status::Ok();
  const Shape& shape = r.b.shape(r.dy);
  OpAttrs zero;
  zero.value = 0.0f;
  const Ref zeros = r.Emit(OpCode::Fill, {}, zero, shape, "grad/zeros");
  if (r.want(1)) {
    const Ref picked = r.Emit(OpCode::Select, {r.in(0), r.dy, zeros}, OpAttrs{}, shape, "grad_x/select");
    dx[1] = r.SumTo(picked, r.in_shape(1), "grad_x");
  }
  if (r.want(2)) {
    const Ref picked = r.Emit(OpCode::Select, {r.in(0), zeros, r.dy}, OpAttrs{}, shape, "grad_y/select");
    dx[2] = r.SumTo(picked, r.in_shape(2), "grad_y");
  }
  return Status::Ok();
}

// The kept elements pass dy, the masked ones none: the mask itself with
// fill 0.
Status CausalMaskGrad(const Rule& r, Dx& dx) {
  if (!r.want(0)) return Status::Ok();
  OpAttrs zero;
  zero.value = 0.0f;
  dx[0] = r.Emit(OpCode::CausalMask, {r.dy}, zero, r.in_shape(0), "grad");
  return Status::Ok();
}

// Back to the input's dtype.
Status CastGrad(const Rule& r, Dx& dx) {
  if (r.want(0)) {
    OpAttrs back;
    back.cast_to = r.g().tensor(r.op.inputs[0]).dtype;
    dx[0] = r.Emit(OpCode::Cast, {r.dy}, back, r.in_shape(0), "grad", back.cast_to);
  }
  return Status::Ok();
}

constexpr GradRule kRules[] = {
    {OpCode::Add, BroadcastingGrad},
    {OpCode::Sub, BroadcastingGrad},
    {OpCode::Mul, BroadcastingGrad},
    {OpCode::Div, DivGrad},
    {OpCode::Maximum, ExtremumGrad<OpCode::MaximumGradMask>},
    {OpCode::Minimum, ExtremumGrad<OpCode::MinimumGradMask>},
    {OpCode::Pow, PowGrad},
    {OpCode::Relu, ActivationGrad<OpCode::ReluGrad, true>},
    {OpCode::Gelu, ActivationGrad<OpCode::GeluGrad, false>},
    {OpCode::GeluErf, ActivationGrad<OpCode::GeluErfGrad, false>},
    {OpCode::Erf, ActivationGrad<OpCode::ErfGrad, false>},
    {OpCode::Tanh, ActivationGrad<OpCode::TanhGrad, true>},
    {OpCode::Sigmoid, ActivationGrad<OpCode::SigmoidGrad, true>},
    {OpCode::Neg, NegGrad},
    {OpCode::Exp, ExpGrad},
    {OpCode::Log, LogGrad},
    {OpCode::Sqrt, SqrtGrad},
    {OpCode::Rsqrt, RsqrtGrad},
    {OpCode::Square, SquareGrad},
    {OpCode::Abs, ActivationGrad<OpCode::AbsGrad, false>},
    {OpCode::Dropout, DropoutGrad},
    {OpCode::Softmax, SoftmaxGrad<OpCode::SoftmaxGrad>},
    {OpCode::LogSoftmax, SoftmaxGrad<OpCode::LogSoftmaxGrad>},
    {OpCode::SparseSoftmaxCrossEntropy, SparseSoftmaxCrossEntropyGrad},
    {OpCode::ReduceSum, ReduceGrad},
    {OpCode::ReduceMean, ReduceGrad},
    {OpCode::ReduceMax, ReduceMaxGrad},
    {OpCode::Select, SelectGrad},
    {OpCode::CausalMask, CausalMaskGrad},
    {OpCode::Cast, CastGrad},
};

}  // namespace

std::span<const GradRule> ElementwiseGradRules() { return kRules; }

}  // namespace sinkrt::host::autodiff_internal
