// Graph builders for element-wise ops: NumPy-broadcasting binaries (Add,
// Sub, Mul, Div, Maximum, Minimum, Pow), activations (Relu, Gelu in both
// forms, Tanh, Sigmoid) and unary math (Exp, Log, Sqrt, Rsqrt, Square, Abs,
// Erf).
#include "sinkrt/host/graph.h"

#include <algorithm>
#include <utility>

namespace sinkrt::host {

Result<Shape> BroadcastShapes(const Shape& a, const Shape& b) {
  const size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    // Shapes align at their last axis; missing leading axes count as 1.
    const int64_t da = i + a.size() < rank ? 1 : a[i + a.size() - rank];
    const int64_t db = i + b.size() < rank ? 1 : b[i + b.size() - rank];
    if (da == db || db == 1) {
      out[i] = da;
    } else if (da == 1) {
      out[i] = db;
    } else {
      return InvalidArgument("operands could not be broadcast together with shapes " + ShapeToString(a) + " and " +
                             ShapeToString(b) + " (" + std::to_string(da) + " vs " + std::to_string(db) +
                             " at broadcast axis " + std::to_string(i) + ")");
    }
  }
  return out;
}

TensorId Graph::Broadcasting(OpCode op, TensorId a, TensorId b, const char* base) {
  if (!status_.ok()) return kInvalidTensor;
  const std::string name = UniqueName(base);
  if (!CheckInput(op, name, "a", a, DType::F32) || !CheckInput(op, name, "b", b, DType::F32)) return kInvalidTensor;
  Result<Shape> shape = BroadcastShapes(tensors_[a].shape, tensors_[b].shape);
  if (!shape.ok()) {
    FailOp(op, name, shape.status().message());
    return kInvalidTensor;
  }
  return AddOp(op, {a, b}, OpAttrs{}, {{std::move(shape).value(), DType::F32}}, name)[0];
}

TensorId Graph::Add(TensorId a, TensorId b) { return Broadcasting(OpCode::Add, a, b, "add"); }
TensorId Graph::Sub(TensorId a, TensorId b) { return Broadcasting(OpCode::Sub, a, b, "sub"); }
TensorId Graph::Mul(TensorId a, TensorId b) { return Broadcasting(OpCode::Mul, a, b, "mul"); }
TensorId Graph::Div(TensorId a, TensorId b) { return Broadcasting(OpCode::Div, a, b, "div"); }
TensorId Graph::Maximum(TensorId a, TensorId b) { return Broadcasting(OpCode::Maximum, a, b, "maximum"); }
TensorId Graph::Minimum(TensorId a, TensorId b) { return Broadcasting(OpCode::Minimum, a, b, "minimum"); }
TensorId Graph::Pow(TensorId a, TensorId b) { return Broadcasting(OpCode::Pow, a, b, "pow"); }

TensorId Graph::Unary(OpCode op, TensorId x, const char* base) {
  if (!status_.ok()) return kInvalidTensor;
  const std::string name = UniqueName(base);
  if (!CheckInput(op, name, "x", x, DType::F32)) return kInvalidTensor;
  Shape shape = tensors_[x].shape;
  return AddOp(op, {x}, OpAttrs{}, {{std::move(shape), DType::F32}}, name)[0];
}

TensorId Graph::Relu(TensorId x) { return Unary(OpCode::Relu, x, "relu"); }
TensorId Graph::Gelu(TensorId x) { return Unary(OpCode::Gelu, x, "gelu"); }
// The tanh form keeps its op code (Gelu: old files and streams mean what
// they meant); the exact form is an op of its own.
TensorId Graph::Gelu(TensorId x, bool approximate) { return approximate ? Gelu(x) : Unary(OpCode::GeluErf, x, "gelu"); }
TensorId Graph::Erf(TensorId x) { return Unary(OpCode::Erf, x, "erf"); }
TensorId Graph::Tanh(TensorId x) { return Unary(OpCode::Tanh, x, "tanh"); }
TensorId Graph::Sigmoid(TensorId x) { return Unary(OpCode::Sigmoid, x, "sigmoid"); }
TensorId Graph::Exp(TensorId x) { return Unary(OpCode::Exp, x, "exp"); }
TensorId Graph::Log(TensorId x) { return Unary(OpCode::Log, x, "log"); }
TensorId Graph::Sqrt(TensorId x) { return Unary(OpCode::Sqrt, x, "sqrt"); }
TensorId Graph::Rsqrt(TensorId x) { return Unary(OpCode::Rsqrt, x, "rsqrt"); }
TensorId Graph::Square(TensorId x) { return Unary(OpCode::Square, x, "square"); }
TensorId Graph::Abs(TensorId x) { return Unary(OpCode::Abs, x, "abs"); }

}  // namespace sinkrt::host
