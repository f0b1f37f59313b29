// The gradient rules of the ops that move or copy bytes (Reshape,
// Flatten, Copy, Transpose, Concat, Split, Gather) or broadcast and sum
// them (AddN, BroadcastTo, SumToShape).
#include <string>
#include <utility>

#include "host/src/autodiff/grad_rule.h"

namespace sinkrt::host::autodiff_internal {
namespace {

// Reshape, Flatten: a byte copy, so the gradient keeps dy's dtype (bf16
// between Casts).
Status ReshapeGrad(const Rule& r, Dx& dx) {
  if (r.want(0)) dx[0] = r.Emit(OpCode::Reshape, {r.dy}, OpAttrs{}, r.in_shape(0), "grad", r.b.dtype(r.dy));
  return Status::Ok();
}

Status CopyGrad(const Rule& r, Dx& dx) {
  if (r.want(0)) dx[0] = r.dy;
  return Status::Ok();
}

Status AddNGrad(const Rule& r, Dx& dx) {
  for (size_t i = 0; i < r.op.inputs.size(); ++i)
    if (r.want(i)) dx[i] = r.dy;
  return Status::Ok();
}

// y = scale·broadcast(x): dx = scale·SumToShape(dy); a same-shape
// BroadcastTo is the scalar multiply.
Status BroadcastToGrad(const Rule& r, Dx& dx) {
  if (r.want(0)) {
    const Ref summed = r.SumTo(r.dy, r.in_shape(0), "grad/sum");
    dx[0] = r.op.attrs.scale == 1.0f
                ? summed
                : r.Emit(OpCode::BroadcastTo, {summed}, ScaleAttrs(r.op.attrs.scale), r.in_shape(0), "grad");
  }
  return Status::Ok();
}

Status SumToShapeGrad(const Rule& r, Dx& dx) {
  if (r.want(0)) dx[0] = r.Emit(OpCode::BroadcastTo, {r.dy}, ScaleAttrs(1.0f), r.in_shape(0), "grad");
  return Status::Ok();
}

Status GatherGrad(const Rule& r, Dx& dx) {
  if (r.want(0)) dx[0] = r.Emit(OpCode::GatherGrad, {r.dy, r.in(1)}, OpAttrs{}, r.in_shape(0), "grad");
  return Status::Ok();
}

Status TransposeGrad(const Rule& r, Dx& dx) {
  if (r.want(0)) {
    OpAttrs inverse;
    inverse.perm.resize(r.op.attrs.perm.size());
    for (size_t i = 0; i < r.op.attrs.perm.size(); ++i) inverse.perm[r.op.attrs.perm[i]] = static_cast<int>(i);
    dx[0] = r.Emit(OpCode::Transpose, {r.dy}, std::move(inverse), r.in_shape(0), "grad", r.b.dtype(r.dy));
  }
  return Status::Ok();
}

// One Split into the inputs' extents along the axis feeds every input.
Status ConcatGrad(const Rule& r, Dx& dx) {
  const OpNode& op = r.op;
  std::vector<Shape> shapes;
  OpAttrs split = AxisAttrs(op.attrs.axis);
  for (size_t i = 0; i < op.inputs.size(); ++i) {
    shapes.push_back(r.in_shape(i));
    split.sizes.push_back(r.in_shape(i)[op.attrs.axis]);
  }
  std::vector<DType> dtypes(op.inputs.size(), r.b.dtype(r.dy));
  const std::vector<Ref> parts =
      r.b.EmitMulti(OpCode::Split, {r.dy}, std::move(split), std::move(shapes), r.name("grad"), std::move(dtypes));
  for (size_t i = 0; i < op.inputs.size(); ++i)
    if (r.want(i)) dx[i] = parts[i];
  return Status::Ok();
}

// Split's results each take one gradient; a result nothing read
// contributes zeros.
Ref SplitGradOf(Backward& b, const OpNode& op, const std::vector<std::optional<Ref>>& dy) {
  std::vector<Ref> parts;
  for (size_t k = 0; k < op.outputs.size(); ++k) {
    if (k < dy.size() && dy[k]) {
      parts.push_back(*dy[k]);
      continue;
    }
    OpAttrs zero;
    zero.value = 0.0f;
    parts.push_back(b.Emit(OpCode::Fill, {}, zero, b.graph().tensor(op.outputs[k]).shape, op.name + "/grad_zeros",
                           b.graph().tensor(op.outputs[k]).dtype));
  }
  return b.Emit(OpCode::Concat, std::move(parts), AxisAttrs(op.attrs.axis), b.graph().tensor(op.inputs[0]).shape,
                op.name + "/grad", b.graph().tensor(op.inputs[0]).dtype);
}

// The slice of dy that x became; reflect and symmetric add each mirrored
// element back onto its source (PadGrad, Pad's own options).
Status PadGrad(const Rule& r, Dx& dx) {
  if (r.want(0)) dx[0] = r.Emit(OpCode::PadGrad, {r.dy}, r.op.attrs, r.in_shape(0), "grad");
  return Status::Ok();
}

// Split's outputs each carry a gradient, any of them may be missing.
Status SplitGrad(const Rule& r, Dx& dx) {
  if (!r.wants.empty() && r.wants[0]) dx[0] = SplitGradOf(r.b, r.op, r.dys);
  return Status::Ok();
}

constexpr GradRule kRules[] = {
    {OpCode::Reshape, ReshapeGrad},
    {OpCode::Flatten, ReshapeGrad},
    {OpCode::Copy, CopyGrad},
    {OpCode::AddN, AddNGrad},
    {OpCode::BroadcastTo, BroadcastToGrad},
    {OpCode::SumToShape, SumToShapeGrad},
    {OpCode::Gather, GatherGrad},
    {OpCode::Pad, PadGrad},
    {OpCode::Transpose, TransposeGrad},
    {OpCode::Concat, ConcatGrad},
    {OpCode::Split, SplitGrad, /*reads_every_output=*/true},
};

}  // namespace

std::span<const GradRule> ShapeGradRules() { return kRules; }

}  // namespace sinkrt::host::autodiff_internal
