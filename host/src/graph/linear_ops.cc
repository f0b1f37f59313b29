// Graph builders for the dense layers: MatMul and BiasAdd.
#include "sinkrt/host/graph.h"

namespace sinkrt::host {

TensorId Graph::MatMul(TensorId a, TensorId b, bool transpose_a, bool transpose_b) {
  if (!status_.ok()) return kInvalidTensor;
  constexpr auto op = OpCode::MatMul;
  const std::string name = UniqueName("matmul");
  if (!CheckInput(op, name, "a", a, DType::F32) || !CheckInput(op, name, "b", b, DType::F32)) return kInvalidTensor;
  const Shape sa = tensors_[a].shape, sb = tensors_[b].shape;
  if (sa.size() != 2 || sb.size() != 2) {
    FailOp(op, name,
           std::string(sa.size() != 2 ? "a" : "b") + " must be 2-D, got " + ShapeToString(sa.size() != 2 ? sa : sb));
    return kInvalidTensor;
  }
  const int64_t m = transpose_a ? sa[1] : sa[0], ka = transpose_a ? sa[0] : sa[1];
  const int64_t kb = transpose_b ? sb[1] : sb[0], n = transpose_b ? sb[0] : sb[1];
  if (ka != kb) {
    FailOp(op, name,
           "inner dimensions differ: a is " + ShapeToString(sa) + (transpose_a ? " transposed" : "") +
               " (K=" + std::to_string(ka) + "), b is " + ShapeToString(sb) + (transpose_b ? " transposed" : "") +
               " (K=" + std::to_string(kb) + ")");
    return kInvalidTensor;
  }
  OpAttrs attrs;
  attrs.transpose_a = transpose_a;
  attrs.transpose_b = transpose_b;
  return AddOp(op, {a, b}, attrs, {{{m, n}, DType::F32}}, name)[0];
}

TensorId Graph::BiasAdd(TensorId x, TensorId bias) {
  if (!status_.ok()) return kInvalidTensor;
  constexpr auto op = OpCode::BiasAdd;
  const std::string name = UniqueName("biasadd");
  if (!CheckInput(op, name, "x", x, DType::F32) || !CheckInput(op, name, "bias", bias, DType::F32))
    return kInvalidTensor;
  const Shape sx = tensors_[x].shape, sb = tensors_[bias].shape;
  if (sx.size() < 2) {
    FailOp(op, name, "x must have rank >= 2 ([N,C] or NCHW), got " + ShapeToString(sx));
    return kInvalidTensor;
  }
  // NCHW feature maps carry channels on axis 1; a [N, C] matrix on its last.
  const int axis = sx.size() >= 3 ? 1 : static_cast<int>(sx.size()) - 1;
  if (sb.size() != 1 || sb[0] != sx[axis]) {
    FailOp(op, name,
           "bias must be [C] = [" + std::to_string(sx[axis]) + "] for x " + ShapeToString(sx) + " (channel axis " +
               std::to_string(axis) + "), got " + ShapeToString(sb));
    return kInvalidTensor;
  }
  OpAttrs attrs;
  attrs.axis = axis;
  return AddOp(op, {x, bias}, attrs, {{sx, DType::F32}}, name)[0];
}

}  // namespace sinkrt::host
