// The gradient rules of the ops that contract or pool: MatMul,
// BatchMatMul, BiasAdd, Conv2D, the pools, LayerNorm and BatchNorm.
#include <string>

#include "host/src/autodiff/grad_rule.h"

namespace sinkrt::host::autodiff_internal {
namespace {

// y = op(a)·op(b) with op(a) [M,K], op(b) [K,N]: d op(a) = dy·op(b)ᵀ and
// d op(b) = op(a)ᵀ·dy, transposed back where the input itself was transposed.
Status MatMulGrad(const Rule& r, Dx& dx) {
  const std::vector<bool>& wants = r.wants;
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
  return Status::Ok();
}

// As MatMulGrad over the last two dims; each product comes out with y's
// batch dims, and an input whose batch dims were broadcast sums them back.
Status BatchMatMulGrad(const Rule& r, Dx& dx) {
  const std::vector<bool>& wants = r.wants;
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
    const Ref prod = r.Emit(OpCode::BatchMatMul, {x, y}, MatMulAttrs(tx, ty), shape, reduce ? suffix + "/bmm" : suffix);
    return r.SumTo(prod, r.in_shape(i), suffix);
  };
  if (wants[1]) {
    dx[1] = !tb ? emit(1, a, dy, !ta, false, "grad_b") : emit(1, dy, a, true, ta, "grad_b");
  }
  if (wants[0]) {
    dx[0] = !ta ? emit(0, dy, b, false, !tb, "grad_a") : emit(0, b, dy, tb, true, "grad_a");
  }
  return Status::Ok();
}

Status BiasAddGrad(const Rule& r, Dx& dx) {
  if (r.want(1)) {
    dx[1] = r.Emit(OpCode::BiasAddGrad, {r.dy}, AxisAttrs(r.op.attrs.axis), r.in_shape(1), "grad_bias");
  }
  if (r.want(0)) dx[0] = r.dy;
  return Status::Ok();
}

Status Conv2DGrad(const Rule& r, Dx& dx) {
  // The filter gradient first, as for MatMul's weight.
  if (r.want(1)) {
    dx[1] = r.Emit(OpCode::Conv2DBackpropFilter, {r.dy, r.in(0)}, r.op.attrs, r.in_shape(1), "grad_filter");
  }
  if (r.want(0)) {
    dx[0] = r.Emit(OpCode::Conv2DBackpropInput, {r.dy, r.in(1)}, r.op.attrs, r.in_shape(0), "grad_input");
  }
  return Status::Ok();
}

Status MaxPool2DGrad(const Rule& r, Dx& dx) {
  if (r.want(0)) {
    if (r.op.outputs.size() < 2) {
      return Internal("MaxPool2D '" + r.op.name + "' has no workspace output");
    }
    dx[0] = r.Emit(OpCode::MaxPool2DGrad, {r.dy, r.in(0), r.out(1)}, r.op.attrs, r.in_shape(0), "grad");
  }
  return Status::Ok();
}

Status AvgPool2DGrad(const Rule& r, Dx& dx) {
  if (r.want(0)) dx[0] = r.Emit(OpCode::AvgPool2DGrad, {r.dy}, r.op.attrs, r.in_shape(0), "grad");
  return Status::Ok();
}

// One kernel gives all three: it reads the forward's per-row mean and
// rstd rather than keeping a normalised copy of x.
Status LayerNormGrad(const Rule& r, Dx& dx) {
  if (r.want(0) || r.want(1) || r.want(2)) {
    if (r.op.outputs.size() < 3) return Internal("LayerNorm '" + r.op.name + "' has no mean and rstd outputs");
    const std::vector<Ref> d =
        r.b.EmitMulti(OpCode::LayerNormGrad, {r.dy, r.in(0), r.in(1), r.out(1), r.out(2)}, r.op.attrs,
                      {r.in_shape(0), r.in_shape(1), r.in_shape(2)}, r.name("grad"), {r.dt(), r.dt(), r.dt()});
    for (size_t i = 0; i < 3; ++i)
      if (r.want(i)) dx[i] = d[i];
  }
  return Status::Ok();
}

// One kernel gives all three from the batch mean and rstd the forward
// kept. SyncBatchNorm (a 6th input: the group's sums, docs/guide/
// normalization.md): dx needs the group's sum(dy) and sum(dy * x_hat) too,
// so the local ones are AllReduced over the same group first; dgamma and
// dbeta stay this rank's sums (the data-parallel gradient reduction adds
// the ranks' as for any parameter).
Status BatchNormGrad(const Rule& r, Dx& dx) {
  if (!(r.want(0) || r.want(1) || r.want(2))) return Status::Ok();
  if (r.op.outputs.size() < 3) return Internal("BatchNorm '" + r.op.name + "' has no mean and rstd outputs");
  std::vector<Ref> in = {r.dy, r.in(0), r.in(1), r.out(1), r.out(2)};
  if (r.op.inputs.size() == 6) {
    const Shape sums{2, r.in_shape(1)[0]};
    const Ref local = r.Emit(OpCode::BatchNormGradStats, {r.dy, r.in(0), r.out(1), r.out(2)}, r.op.attrs, sums,
                             "grad_sums", DType::F32);
    OpAttrs comm;
    comm.group = r.op.attrs.group;
    comm.group_position = r.op.attrs.group_position;
    in.push_back(r.Emit(OpCode::AllReduce, {local}, comm, sums, "grad_sums/allreduce", DType::F32));
  }
  const std::vector<Ref> d =
      r.b.EmitMulti(OpCode::BatchNormGrad, std::move(in), r.op.attrs, {r.in_shape(0), r.in_shape(1), r.in_shape(2)},
                    r.name("grad"), {r.dt(), r.dt(), r.dt()});
  for (size_t i = 0; i < 3; ++i)
    if (r.want(i)) dx[i] = d[i];
  return Status::Ok();
}

constexpr GradRule kRules[] = {
    {OpCode::MatMul, MatMulGrad},       {OpCode::BatchMatMul, BatchMatMulGrad}, {OpCode::BiasAdd, BiasAddGrad},
    {OpCode::Conv2D, Conv2DGrad},       {OpCode::MaxPool2D, MaxPool2DGrad},     {OpCode::AvgPool2D, AvgPool2DGrad},
    {OpCode::LayerNorm, LayerNormGrad}, {OpCode::BatchNorm, BatchNormGrad},
};

}  // namespace

std::span<const GradRule> MatMulConvGradRules() { return kRules; }

}  // namespace sinkrt::host::autodiff_internal
