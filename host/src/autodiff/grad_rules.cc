// One gradient rule per differentiable op, in the ops of docs/reference/ops.md.
#include <algorithm>

#include "host/src/autodiff/grad_rules.h"

namespace sinkrt::host::autodiff_internal {
namespace {

using fb::OpCode;

// Everything a rule reads, with helpers that emit the common patterns.
struct Rule {
  Backward& b;
  const OpNode& op;
  Ref dy;  // gradient of output 0

  const Graph& g() const { return b.graph(); }
  Ref in(size_t i) const { return b.Read(op.inputs[i]); }
  Ref out(size_t i) const { return b.Read(op.outputs[i]); }
  const Shape& in_shape(size_t i) const { return g().tensor(op.inputs[i]).shape; }
  std::string name(const std::string& suffix) const { return op.name + "/" + suffix; }

  // The dtype the op computes in (bf16 under amp, docs/guide/amp.md): its
  // gradients are computed in it too, since every float input of an op has
  // its dtype (the amp pass casts them), except LayerNorm's f32 statistics.
  DType dt() const {
    const DType t = g().tensor(op.outputs.at(0)).dtype;
    return t == DType::BF16 ? t : DType::F32;
  }

  // `dtype` Invalid: dt().
  Ref Emit(OpCode code, std::vector<Ref> inputs, OpAttrs attrs, Shape shape,
           const std::string& suffix, DType dtype = DType::Invalid) const {
    return b.Emit(code, std::move(inputs), std::move(attrs), std::move(shape), name(suffix),
                  dtype == DType::Invalid ? dt() : dtype);
  }

  // Undoes NumPy broadcasting: sums `v` back to `shape` when they differ.
  Ref SumTo(Ref v, const Shape& shape, const std::string& suffix) const {
    if (b.shape(v) == shape) return v;
    return Emit(OpCode::SumToShape, {v}, OpAttrs{}, shape, suffix, b.dtype(v));
  }
};

OpAttrs AxisAttrs(int axis) {
  OpAttrs a;
  a.axis = axis;
  return a;
}

OpAttrs ScaleAttrs(float scale) {
  OpAttrs a;
  a.scale = scale;
  return a;
}

OpAttrs MatMulAttrs(bool ta, bool tb) {
  OpAttrs a;
  a.transpose_a = ta;
  a.transpose_b = tb;
  return a;
}

// y = op(a)·op(b) with op(a) [M,K], op(b) [K,N]: d op(a) = dy·op(b)ᵀ and
// d op(b) = op(a)ᵀ·dy, transposed back where the input itself was transposed.
void MatMulGrad(const Rule& r, const std::vector<bool>& wants,
                std::vector<std::optional<Ref>>& dx) {
  const bool ta = r.op.attrs.transpose_a, tb = r.op.attrs.transpose_b;
  const Ref a = r.in(0), b = r.in(1), dy = r.dy;
  // The second operand is the weight in x·W; its gradient goes first so that
  // its gradient AllReduce can start one kernel earlier.
  if (wants[1]) {
    if (!tb) {
      dx[1] = ta ? r.Emit(OpCode::MatMul, {a, dy}, MatMulAttrs(false, false), r.in_shape(1), "grad_b")
                 : r.Emit(OpCode::MatMul, {a, dy}, MatMulAttrs(true, false), r.in_shape(1), "grad_b");
    } else {
      dx[1] = ta ? r.Emit(OpCode::MatMul, {dy, a}, MatMulAttrs(true, true), r.in_shape(1), "grad_b")
                 : r.Emit(OpCode::MatMul, {dy, a}, MatMulAttrs(true, false), r.in_shape(1), "grad_b");
    }
  }
  if (wants[0]) {
    if (!ta) {
      dx[0] = tb ? r.Emit(OpCode::MatMul, {dy, b}, MatMulAttrs(false, false), r.in_shape(0), "grad_a")
                 : r.Emit(OpCode::MatMul, {dy, b}, MatMulAttrs(false, true), r.in_shape(0), "grad_a");
    } else {
      dx[0] = tb ? r.Emit(OpCode::MatMul, {b, dy}, MatMulAttrs(true, true), r.in_shape(0), "grad_a")
                 : r.Emit(OpCode::MatMul, {b, dy}, MatMulAttrs(false, true), r.in_shape(0), "grad_a");
    }
  }
}

// As MatMulGrad over the last two dims; each product comes out with y's
// batch dims, and an input whose batch dims were broadcast sums them back.
void BatchMatMulGrad(const Rule& r, const std::vector<bool>& wants,
                     std::vector<std::optional<Ref>>& dx) {
  const bool ta = r.op.attrs.transpose_a, tb = r.op.attrs.transpose_b;
  const Ref a = r.in(0), b = r.in(1), dy = r.dy;
  const Shape& sy = r.b.shape(dy);
  // y's batch dims with input i's last two.
  auto grad_shape = [&](size_t i) {
    const Shape& s = r.in_shape(i);
    Shape g(sy.begin(), sy.end() - 2);
    g.push_back(s[s.size() - 2]);
    g.push_back(s[s.size() - 1]);
    return g;
  };
  auto emit = [&](size_t i, Ref x, Ref y, bool tx, bool ty, const std::string& suffix) {
    const Shape shape = grad_shape(i);
    const bool reduce = shape != r.in_shape(i);
    const Ref prod = r.Emit(OpCode::BatchMatMul, {x, y}, MatMulAttrs(tx, ty), shape,
                            reduce ? suffix + "/bmm" : suffix);
    return r.SumTo(prod, r.in_shape(i), suffix);
  };
  if (wants[1]) {
    dx[1] = !tb ? emit(1, a, dy, !ta, false, "grad_b") : emit(1, dy, a, true, ta, "grad_b");
  }
  if (wants[0]) {
    dx[0] = !ta ? emit(0, dy, b, false, !tb, "grad_a") : emit(0, b, dy, tb, true, "grad_a");
  }
}

// Split's results each take one gradient; a result nothing read
// contributes zeros.
Ref SplitGrad(Backward& b, const OpNode& op, const std::vector<std::optional<Ref>>& dy) {
  std::vector<Ref> parts;
  for (size_t k = 0; k < op.outputs.size(); ++k) {
    if (k < dy.size() && dy[k]) {
      parts.push_back(*dy[k]);
      continue;
    }
    OpAttrs zero;
    zero.value = 0.0f;
    parts.push_back(b.Emit(OpCode::Fill, {}, zero, b.graph().tensor(op.outputs[k]).shape,
                           op.name + "/grad_zeros", b.graph().tensor(op.outputs[k]).dtype));
  }
  return b.Emit(OpCode::Concat, std::move(parts), AxisAttrs(op.attrs.axis),
                b.graph().tensor(op.inputs[0]).shape, op.name + "/grad", b.graph().tensor(op.inputs[0]).dtype);
}

void BroadcastingGrad(const Rule& r, const std::vector<bool>& wants,
                      std::vector<std::optional<Ref>>& dx) {
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
}

// dy has the reduced shape; every element of x receives its row's gradient
// (times 1/count for the mean).
Ref ReduceGrad(const Rule& r) {
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
  const float scale =
      r.op.op == OpCode::ReduceMean && count > 0 ? 1.0f / static_cast<float>(count) : 1.0f;
  return r.Emit(OpCode::BroadcastTo, {dy}, ScaleAttrs(scale), sx, "grad");
}

// The communication ops' rules (docs/design/sharding.md §6: a gradient has its
// tensor's layout, replicas hold the same gradient). Each emits the op's
// transpose over the same group.
OpAttrs CommAttrs(const OpAttrs& forward, bool mean = false, int axis = 0) {
  OpAttrs a;
  a.group = forward.group;
  a.group_position = forward.group_position;
  a.mean = mean;
  a.axis = axis;
  return a;
}

bool IsCommOp(OpCode op) {
  return op == OpCode::AllReduce || op == OpCode::AllGather || op == OpCode::ReduceScatter ||
         op == OpCode::AllToAll || op == OpCode::ShardSlice || op == OpCode::GradAllReduce;
}

std::optional<Ref> CommGrad(const Rule& r) {
  const OpAttrs& f = r.op.attrs;
  const Shape& sx = r.in_shape(0);
  const int64_t n = static_cast<int64_t>(f.group.size());
  // The gradient keeps dy's dtype: a redistributed bf16 activation has a
  // bf16 gradient (Cast's rule casts it back).
  const DType dt = r.b.dtype(r.dy);
  switch (r.op.op) {
    case OpCode::AllReduce:
      // Every addend gets the whole (replicated) gradient; a mean's is 1/n of it.
      if (!f.mean) return r.dy;
      return r.Emit(OpCode::BroadcastTo, {r.dy}, ScaleAttrs(1.0f / static_cast<float>(n)), sx, "grad", dt);
    case OpCode::GradAllReduce:
      return r.Emit(OpCode::AllReduce, {r.dy}, CommAttrs(f), sx, "grad", dt);
    case OpCode::AllGather: {
      // dy [n, ...] is the same on every member: keep this member's block.
      Shape block = r.b.shape(r.dy);
      block[0] = 1;
      const Ref mine = r.Emit(OpCode::ShardSlice, {r.dy}, CommAttrs(f, false, 0), block, "grad/shard_slice", dt);
      return r.Emit(OpCode::Reshape, {mine}, OpAttrs{}, sx, "grad", dt);
    }
    case OpCode::ReduceScatter: {
      // x [n, ...]: every member's addend needs the whole sum's gradient.
      Ref dx = r.Emit(OpCode::AllGather, {r.dy}, CommAttrs(f), sx, "grad", dt);
      if (f.mean) dx = r.Emit(OpCode::BroadcastTo, {dx}, ScaleAttrs(1.0f / static_cast<float>(n)), sx, "grad/mean", dt);
      return dx;
    }
    case OpCode::ShardSlice: {
      // Gather the members' blocks back along the sliced axis.
      const Shape& sy = r.b.shape(r.dy);
      const size_t d = static_cast<size_t>(f.axis < 0 ? f.axis + static_cast<int>(sx.size()) : f.axis);
      int64_t outer = 1, inner = 1;
      for (size_t i = 0; i < d; ++i) outer *= sy[i];
      for (size_t i = d + 1; i < sy.size(); ++i) inner *= sy[i];
      Shape gathered = {n};
      gathered.insert(gathered.end(), sy.begin(), sy.end());
      Ref g = r.Emit(OpCode::AllGather, {r.dy}, CommAttrs(f), gathered, "grad/allgather", dt);
      if (outer > 1) {
        g = r.Emit(OpCode::Reshape, {g}, OpAttrs{}, {n, outer, sy[d] * inner}, "grad/blocks", dt);
        OpAttrs t;
        t.perm = {1, 0, 2};
        g = r.Emit(OpCode::Transpose, {g}, std::move(t), {outer, n, sy[d] * inner}, "grad/to_dim", dt);
      }
      return r.Emit(OpCode::Reshape, {g}, OpAttrs{}, sx, "grad", dt);
    }
    case OpCode::AllToAll:
      // Its own inverse over the same group.
      return r.Emit(OpCode::AllToAll, {r.dy}, CommAttrs(f), sx, "grad", dt);
    default:
      return std::nullopt;
  }
}

}  // namespace

bool DifferentiableInput(fb::OpCode op, size_t slot) {
  switch (op) {
    case OpCode::SparseSoftmaxCrossEntropy: return slot == 0;
    case OpCode::ArgMaxAccuracy: return false;  // piecewise constant: no gradient
    case OpCode::Gather: return slot == 0;       // not the indices
    default: return true;
  }
}

bool HasGradRule(fb::OpCode op) {
  switch (op) {
    case OpCode::MatMul:
    case OpCode::BiasAdd:
    case OpCode::Add:
    case OpCode::Sub:
    case OpCode::Mul:
    case OpCode::Relu:
    case OpCode::Gelu:
    case OpCode::Tanh:
    case OpCode::Sigmoid:
    case OpCode::Neg:
    case OpCode::Softmax:
    case OpCode::LogSoftmax:
    case OpCode::SparseSoftmaxCrossEntropy:
    case OpCode::ReduceSum:
    case OpCode::ReduceMean:
    case OpCode::Reshape:
    case OpCode::Flatten:
    case OpCode::Copy:
    case OpCode::AddN:
    case OpCode::Conv2D:
    case OpCode::MaxPool2D:
    case OpCode::AvgPool2D:
    case OpCode::BroadcastTo:
    case OpCode::SumToShape:
    case OpCode::LayerNorm:
    case OpCode::Gather:
    case OpCode::Cast:
    case OpCode::BatchMatMul:
    case OpCode::Transpose:
    case OpCode::Concat:
    case OpCode::Split:
      return true;
    default:
      return IsCommOp(op);
  }
}

Status ApplyGradRule(Backward& b, const OpNode& op, const std::vector<std::optional<Ref>>& dy,
                     const std::vector<bool>& wants, std::vector<std::optional<Ref>>& dx) {
  dx.assign(op.inputs.size(), std::nullopt);
  // Split's outputs each carry a gradient, any of them may be missing.
  if (op.op == OpCode::Split) {
    if (!wants.empty() && wants[0]) dx[0] = SplitGrad(b, op, dy);
    return Status::Ok();
  }
  // Every other differentiable op reads its gradient from output 0
  // (MaxPool2D's second output is the workspace, which carries none).
  if (dy.empty() || !dy[0]) return Status::Ok();
  const Rule r{b, op, *dy[0]};
  auto want = [&](size_t i) { return i < wants.size() && wants[i]; };
  switch (op.op) {
    case OpCode::MatMul:
      MatMulGrad(r, wants, dx);
      break;
    case OpCode::BiasAdd:
      if (want(1)) {
        dx[1] = r.Emit(OpCode::BiasAddGrad, {r.dy}, AxisAttrs(op.attrs.axis), r.in_shape(1),
                       "grad_bias");
      }
      if (want(0)) dx[0] = r.dy;
      break;
    case OpCode::Add:
    case OpCode::Sub:
    case OpCode::Mul:
      BroadcastingGrad(r, wants, dx);
      break;
    case OpCode::Relu:
      if (want(0)) dx[0] = r.Emit(OpCode::ReluGrad, {r.dy, r.out(0)}, OpAttrs{}, r.in_shape(0), "grad");
      break;
    case OpCode::Gelu:
      if (want(0)) dx[0] = r.Emit(OpCode::GeluGrad, {r.dy, r.in(0)}, OpAttrs{}, r.in_shape(0), "grad");
      break;
    case OpCode::Tanh:
      if (want(0)) dx[0] = r.Emit(OpCode::TanhGrad, {r.dy, r.out(0)}, OpAttrs{}, r.in_shape(0), "grad");
      break;
    case OpCode::Sigmoid:
      if (want(0)) {
        dx[0] = r.Emit(OpCode::SigmoidGrad, {r.dy, r.out(0)}, OpAttrs{}, r.in_shape(0), "grad");
      }
      break;
    case OpCode::Neg:
      if (want(0)) dx[0] = r.Emit(OpCode::Neg, {r.dy}, OpAttrs{}, r.in_shape(0), "grad");
      break;
    case OpCode::Softmax:
      if (want(0)) {
        dx[0] = r.Emit(OpCode::SoftmaxGrad, {r.dy, r.out(0)}, AxisAttrs(op.attrs.axis),
                       r.in_shape(0), "grad");
      }
      break;
    case OpCode::LogSoftmax:
      if (want(0)) {
        dx[0] = r.Emit(OpCode::LogSoftmaxGrad, {r.dy, r.out(0)}, AxisAttrs(op.attrs.axis),
                       r.in_shape(0), "grad");
      }
      break;
    case OpCode::SparseSoftmaxCrossEntropy:
      if (want(0)) {
        dx[0] = r.Emit(OpCode::SparseSoftmaxCrossEntropyGrad, {r.in(0), r.in(1), r.dy},
                       OpAttrs{}, r.in_shape(0), "grad");
      }
      break;
    case OpCode::ReduceSum:
    case OpCode::ReduceMean:
      if (want(0)) dx[0] = ReduceGrad(r);
      break;
    case OpCode::Reshape:
    case OpCode::Flatten:
      // A byte copy: the gradient keeps dy's dtype (bf16 between Casts).
      if (want(0)) dx[0] = r.Emit(OpCode::Reshape, {r.dy}, OpAttrs{}, r.in_shape(0), "grad", r.b.dtype(r.dy));
      break;
    case OpCode::Copy:
      if (want(0)) dx[0] = r.dy;
      break;
    case OpCode::AddN:
      for (size_t i = 0; i < op.inputs.size(); ++i)
        if (want(i)) dx[i] = r.dy;
      break;
    case OpCode::Conv2D:
      // The filter gradient first, as for MatMul's weight.
      if (want(1)) {
        dx[1] = r.Emit(OpCode::Conv2DBackpropFilter, {r.dy, r.in(0)}, op.attrs, r.in_shape(1),
                       "grad_filter");
      }
      if (want(0)) {
        dx[0] = r.Emit(OpCode::Conv2DBackpropInput, {r.dy, r.in(1)}, op.attrs, r.in_shape(0),
                       "grad_input");
      }
      break;
    case OpCode::MaxPool2D:
      if (want(0)) {
        if (op.outputs.size() < 2) {
          return Internal("MaxPool2D '" + op.name + "' has no workspace output");
        }
        dx[0] = r.Emit(OpCode::MaxPool2DGrad, {r.dy, r.in(0), r.out(1)}, op.attrs, r.in_shape(0),
                       "grad");
      }
      break;
    case OpCode::AvgPool2D:
      if (want(0)) dx[0] = r.Emit(OpCode::AvgPool2DGrad, {r.dy}, op.attrs, r.in_shape(0), "grad");
      break;
    case OpCode::BroadcastTo:
      // y = scale·broadcast(x): dx = scale·SumToShape(dy); a same-shape
      // BroadcastTo is the scalar multiply.
      if (want(0)) {
        const Ref summed = r.SumTo(r.dy, r.in_shape(0), "grad/sum");
        dx[0] = op.attrs.scale == 1.0f ? summed
                                       : r.Emit(OpCode::BroadcastTo, {summed},
                                                ScaleAttrs(op.attrs.scale), r.in_shape(0), "grad");
      }
      break;
    case OpCode::SumToShape:
      if (want(0)) {
        dx[0] = r.Emit(OpCode::BroadcastTo, {r.dy}, ScaleAttrs(1.0f), r.in_shape(0), "grad");
      }
      break;
    case OpCode::LayerNorm:
      // One kernel gives all three: it reads the forward's per-row mean and
      // rstd rather than keeping a normalised copy of x.
      if (want(0) || want(1) || want(2)) {
        if (op.outputs.size() < 3) return Internal("LayerNorm '" + op.name + "' has no mean and rstd outputs");
        const std::vector<Ref> d =
            b.EmitMulti(OpCode::LayerNormGrad, {r.dy, r.in(0), r.in(1), r.out(1), r.out(2)}, op.attrs,
                        {r.in_shape(0), r.in_shape(1), r.in_shape(2)}, r.name("grad"), {r.dt(), r.dt(), r.dt()});
        for (size_t i = 0; i < 3; ++i)
          if (want(i)) dx[i] = d[i];
      }
      break;
    case OpCode::Gather:
      if (want(0)) {
        dx[0] = r.Emit(OpCode::GatherGrad, {r.dy, r.in(1)}, OpAttrs{}, r.in_shape(0), "grad");
      }
      break;
    case OpCode::Cast:
      // Back to the input's dtype.
      if (want(0)) {
        OpAttrs back;
        back.cast_to = r.g().tensor(op.inputs[0]).dtype;
        dx[0] = r.Emit(OpCode::Cast, {r.dy}, back, r.in_shape(0), "grad", back.cast_to);
      }
      break;
    case OpCode::BatchMatMul:
      BatchMatMulGrad(r, wants, dx);
      break;
    case OpCode::Transpose:
      if (want(0)) {
        OpAttrs inverse;
        inverse.perm.resize(op.attrs.perm.size());
        for (size_t i = 0; i < op.attrs.perm.size(); ++i) inverse.perm[op.attrs.perm[i]] = static_cast<int>(i);
        dx[0] = r.Emit(OpCode::Transpose, {r.dy}, std::move(inverse), r.in_shape(0), "grad", r.b.dtype(r.dy));
      }
      break;
    case OpCode::Concat: {
      // One Split into the inputs' extents along the axis feeds every input.
      std::vector<Shape> shapes;
      OpAttrs split = AxisAttrs(op.attrs.axis);
      for (size_t i = 0; i < op.inputs.size(); ++i) {
        shapes.push_back(r.in_shape(i));
        split.sizes.push_back(r.in_shape(i)[op.attrs.axis]);
      }
      std::vector<DType> dtypes(op.inputs.size(), r.b.dtype(r.dy));
      const std::vector<Ref> parts =
          b.EmitMulti(OpCode::Split, {r.dy}, std::move(split), std::move(shapes), r.name("grad"), std::move(dtypes));
      for (size_t i = 0; i < op.inputs.size(); ++i)
        if (want(i)) dx[i] = parts[i];
      break;
    }
    default:
      if (IsCommOp(op.op)) {
        if (want(0)) dx[0] = CommGrad(r);
        break;
      }
      return Unimplemented(std::string("no gradient rule for op '") + op.name + "' (" +
                           fb::EnumNameOpCode(op.op) + ")");
  }
  return Status::Ok();
}

}  // namespace sinkrt::host::autodiff_internal
