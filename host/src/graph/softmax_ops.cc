// Graph builders over class scores: Softmax, LogSoftmax, the sparse
// cross-entropy loss and the argmax accuracy metric.
#include "sinkrt/host/graph.h"

#include "host/src/graph/builder_helpers.h"

namespace sinkrt::host {

using internal::AxisRange;
using internal::NormalizeAxis;

TensorId Graph::AxisOp(OpCode op, TensorId x, int axis, const char* base) {
  if (!status_.ok()) return kInvalidTensor;
  const std::string name = UniqueName(base);
  if (!CheckInput(op, name, "x", x, DType::F32)) return kInvalidTensor;
  const Shape shape = tensors_[x].shape;
  const int a = NormalizeAxis(axis, shape.size());
  if (a < 0) {
    FailOp(op, name,
           "axis " + std::to_string(axis) + " is out of range for x " + ShapeToString(shape) +
               " (valid: " + AxisRange(shape.size()) + ")");
    return kInvalidTensor;
  }
  OpAttrs attrs;
  attrs.axis = a;
  return AddOp(op, {x}, attrs, {{shape, DType::F32}}, name)[0];
}

TensorId Graph::Softmax(TensorId x, int axis) { return AxisOp(OpCode::Softmax, x, axis, "softmax"); }

TensorId Graph::LogSoftmax(TensorId x, int axis) { return AxisOp(OpCode::LogSoftmax, x, axis, "logsoftmax"); }

bool Graph::CheckLogitsLabels(OpCode op, const std::string& name, TensorId logits, TensorId labels) {
  if (!CheckInput(op, name, "logits", logits, DType::F32) || !CheckInput(op, name, "labels", labels, DType::I32))
    return false;
  const Shape& sl = tensors_[logits].shape;
  const Shape& sy = tensors_[labels].shape;
  if (sl.size() != 2) {
    FailOp(op, name, "logits must be [N,C], got " + ShapeToString(sl));
    return false;
  }
  if (sy.size() != 1 || sy[0] != sl[0]) {
    FailOp(op, name,
           "labels must be [N] = [" + std::to_string(sl[0]) + "] for logits " + ShapeToString(sl) + ", got " +
               ShapeToString(sy));
    return false;
  }
  return true;
}

TensorId Graph::SparseSoftmaxCrossEntropy(TensorId logits, TensorId labels) {
  if (!status_.ok()) return kInvalidTensor;
  constexpr auto op = OpCode::SparseSoftmaxCrossEntropy;
  const std::string name = UniqueName("sparsesoftmaxcrossentropy");
  if (!CheckLogitsLabels(op, name, logits, labels)) return kInvalidTensor;
  return AddOp(op, {logits, labels}, OpAttrs{}, {{Shape{}, DType::F32}}, name)[0];
}

TensorId Graph::ArgMaxAccuracy(TensorId logits, TensorId labels) {
  if (!status_.ok()) return kInvalidTensor;
  constexpr auto op = OpCode::ArgMaxAccuracy;
  const std::string name = UniqueName("argmaxaccuracy");
  if (!CheckLogitsLabels(op, name, logits, labels)) return kInvalidTensor;
  return AddOp(op, {logits, labels}, OpAttrs{}, {{Shape{}, DType::F32}}, name)[0];
}

}  // namespace sinkrt::host
