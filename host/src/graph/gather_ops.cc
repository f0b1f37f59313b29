// Graph builder for Gather along axis 0 (an embedding lookup, docs/reference/ops.md).
#include "sinkrt/host/graph.h"

namespace sinkrt::host {

TensorId Graph::Gather(TensorId table, TensorId indices) {
  if (!status_.ok()) return kInvalidTensor;
  constexpr auto op = OpCode::Gather;
  const std::string name = UniqueName("gather");
  if (!CheckInput(op, name, "table", table, DType::F32) || !CheckInput(op, name, "indices", indices, DType::I32))
    return kInvalidTensor;
  const Shape& st = tensors_[table].shape;
  if (st.empty()) {
    FailOp(op, name, "table must be [V, ...] (rank >= 1), got a scalar []");
    return kInvalidTensor;
  }
  Shape out = tensors_[indices].shape;
  out.insert(out.end(), st.begin() + 1, st.end());
  return AddOp(op, {table, indices}, OpAttrs{}, {{std::move(out), DType::F32}}, name)[0];
}

}  // namespace sinkrt::host
