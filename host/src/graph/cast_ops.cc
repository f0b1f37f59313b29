// Graph builder for Cast between F32 and BF16 (docs/reference/ops.md). Cast is the
// one op that reads or writes BF16 so far; every other builder refuses a
// BF16 input through CheckInput.
#include "sinkrt/host/graph.h"

namespace sinkrt::host {
namespace {

bool Castable(DType t) { return t == DType::F32 || t == DType::BF16; }

}  // namespace

TensorId Graph::Cast(TensorId x, DType to) {
  if (!status_.ok()) return kInvalidTensor;
  constexpr auto op = OpCode::Cast;
  const std::string name = UniqueName("cast");
  if (!valid(x)) {
    FailOp(op, name, "x is not a tensor of this graph (id " + std::to_string(x) + ")");
    return kInvalidTensor;
  }
  const TensorInfo& tx = tensors_[x];
  if (!Castable(tx.dtype)) {
    FailOp(op, name,
           std::string("x must be f32 or bf16, got ") + DTypeName(tx.dtype) + " " + ShapeToString(tx.shape) + " '" +
               tx.name + "'");
    return kInvalidTensor;
  }
  if (!Castable(to)) {
    FailOp(op, name, std::string("to must be f32 or bf16, got ") + DTypeName(to));
    return kInvalidTensor;
  }
  OpAttrs attrs;
  attrs.cast_to = to;
  return AddOp(op, {x}, attrs, {{tx.shape, to}}, name)[0];
}

}  // namespace sinkrt::host
