// Graph builders for ops that choose between values by a condition: Select
// (ops.select / Where, an f32 cond) and CausalMask (attention's masked fill).
#include <utility>

#include "sinkrt/host/graph.h"

namespace sinkrt::host {

TensorId Graph::Select(TensorId cond, TensorId x, TensorId y) {
  if (!status_.ok()) return kInvalidTensor;
  const OpCode op = OpCode::Select;
  const std::string name = UniqueName("select");
  // cond: f32, nonzero meaning true. A graph holds no bool or u8 tensor
  // (Input takes f32 features and i32 labels), so a condition is an f32
  // Input, a Const or a computed mask; the kernel takes u8 too.
  if (!CheckInput(op, name, "cond", cond, DType::F32) || !CheckInput(op, name, "x", x, DType::F32) ||
      !CheckInput(op, name, "y", y, DType::F32)) {
    return kInvalidTensor;
  }
  Result<Shape> xy = BroadcastShapes(tensors_[x].shape, tensors_[y].shape);
  Result<Shape> shape = xy.ok() ? BroadcastShapes(tensors_[cond].shape, *xy) : xy;
  if (!shape.ok()) {
    FailOp(op, name, shape.status().message());
    return kInvalidTensor;
  }
  return AddOp(op, {cond, x, y}, OpAttrs{}, {{std::move(shape).value(), DType::F32}}, name)[0];
}

TensorId Graph::CausalMask(TensorId scores, float fill) {
  if (!status_.ok()) return kInvalidTensor;
  const OpCode op = OpCode::CausalMask;
  const std::string name = UniqueName("causal_mask");
  if (!CheckInput(op, name, "scores", scores, DType::F32)) return kInvalidTensor;
  Shape shape = tensors_[scores].shape;
  if (shape.size() < 2) {
    FailOp(op, name, "scores must have rank >= 2 ([..., T, S]), got " + ShapeToString(shape));
    return kInvalidTensor;
  }
  OpAttrs attrs;
  attrs.value = fill;
  return AddOp(op, {scores}, std::move(attrs), {{std::move(shape), DType::F32}}, name)[0];
}

}  // namespace sinkrt::host
