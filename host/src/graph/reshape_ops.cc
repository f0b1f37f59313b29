// Graph builders that change a tensor's shape, not its data: Reshape and
// Flatten.
#include "sinkrt/host/graph.h"

#include <utility>

namespace sinkrt::host {

TensorId Graph::Reshape(TensorId x, Shape shape) {
  if (!status_.ok()) return kInvalidTensor;
  constexpr auto op = OpCode::Reshape;
  const std::string name = UniqueName("reshape");
  if (!valid(x)) {
    FailOp(op, name, "x is not a tensor of this graph (id " + std::to_string(x) + ")");
    return kInvalidTensor;
  }
  const TensorInfo& tx = tensors_[x];
  const DType dtype = tx.dtype;
  const int64_t numel = NumElements(tx.shape);
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (infer >= 0) {
        FailOp(op, name, "shape " + ShapeToString(shape) + " has more than one -1");
        return kInvalidTensor;
      }
      infer = static_cast<int>(i);
    } else if (shape[i] <= 0) {
      FailOp(op, name, "shape " + ShapeToString(shape) + " must have positive dimensions (or one -1)");
      return kInvalidTensor;
    } else {
      if (known > (int64_t{1} << 62) / shape[i]) {
        FailOp(op, name, "shape " + ShapeToString(shape) + " has too many elements");
        return kInvalidTensor;
      }
      known *= shape[i];
    }
  }
  const std::string from = "cannot reshape x " + ShapeToString(tx.shape) + " (" + std::to_string(numel) +
                           " elements) into " + ShapeToString(shape);
  if (infer >= 0) {
    if (numel % known != 0) {
      FailOp(op, name, from + ": " + std::to_string(numel) + " is not a multiple of " + std::to_string(known));
      return kInvalidTensor;
    }
    shape[infer] = numel / known;
  } else if (known != numel) {
    FailOp(op, name, from + " (" + std::to_string(known) + " elements)");
    return kInvalidTensor;
  }
  return AddOp(op, {x}, OpAttrs{}, {{std::move(shape), dtype}}, name)[0];
}

TensorId Graph::Flatten(TensorId x) {
  if (!status_.ok()) return kInvalidTensor;
  constexpr auto op = OpCode::Flatten;
  const std::string name = UniqueName("flatten");
  if (!valid(x)) {
    FailOp(op, name, "x is not a tensor of this graph (id " + std::to_string(x) + ")");
    return kInvalidTensor;
  }
  const Shape sx = tensors_[x].shape;
  const DType dtype = tensors_[x].dtype;
  if (sx.empty()) {
    FailOp(op, name, "x must be [N, ...], got a scalar []");
    return kInvalidTensor;
  }
  int64_t rest = 1;
  for (size_t i = 1; i < sx.size(); ++i) rest *= sx[i];
  return AddOp(op, {x}, OpAttrs{}, {{Shape{sx[0], rest}, dtype}}, name)[0];
}

}  // namespace sinkrt::host
