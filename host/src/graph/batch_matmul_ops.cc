// Graph builder for BatchMatMul: matrix products over the last two dims,
// with the leading (batch) dims broadcast as NumPy and MindSpore do.
#include "sinkrt/host/graph.h"

#include <algorithm>
#include <utility>

namespace sinkrt::host {

namespace {

// Ranks the device kernels accept (device/src/kernels/check.h, kMaxRank):
// refused here so that a graph never compiles into a stream that fails at load.
constexpr size_t kMaxBatchMatMulRank = 8;

std::string Side(const Shape& s, bool transposed) { return ShapeToString(s) + (transposed ? " transposed" : ""); }

}  // namespace

TensorId Graph::BatchMatMul(TensorId a, TensorId b, bool transpose_a, bool transpose_b) {
  if (!status_.ok()) return kInvalidTensor;
  constexpr auto op = OpCode::BatchMatMul;
  const std::string name = UniqueName("batchmatmul");
  if (!CheckInput(op, name, "a", a, DType::F32) || !CheckInput(op, name, "b", b, DType::F32)) return kInvalidTensor;
  const Shape sa = tensors_[a].shape, sb = tensors_[b].shape;
  for (const auto& [role, s] : {std::pair<const char*, const Shape&>{"a", sa}, {"b", sb}}) {
    if (s.size() < 2 || s.size() > kMaxBatchMatMulRank) {
      FailOp(op, name,
             std::string(role) + " must have rank 2 to " + std::to_string(kMaxBatchMatMulRank) +
                 " ([..., rows, cols]), got " + ShapeToString(s));
      return kInvalidTensor;
    }
  }
  const size_t ra = sa.size(), rb = sb.size();
  const int64_t m = transpose_a ? sa[ra - 1] : sa[ra - 2], ka = transpose_a ? sa[ra - 2] : sa[ra - 1];
  const int64_t kb = transpose_b ? sb[rb - 1] : sb[rb - 2], n = transpose_b ? sb[rb - 2] : sb[rb - 1];
  if (ka != kb) {
    FailOp(op, name,
           "inner dimensions differ: a is " + Side(sa, transpose_a) + " (K=" + std::to_string(ka) + "), b is " +
               Side(sb, transpose_b) + " (K=" + std::to_string(kb) + ")");
    return kInvalidTensor;
  }
  Result<Shape> batch = BroadcastShapes(Shape(sa.begin(), sa.end() - 2), Shape(sb.begin(), sb.end() - 2));
  if (!batch.ok()) {
    FailOp(op, name,
           "batch dimensions of a " + ShapeToString(sa) + " and b " + ShapeToString(sb) +
               " do not broadcast: " + batch.status().message());
    return kInvalidTensor;
  }
  Shape y = std::move(batch).value();
  y.push_back(m);
  y.push_back(n);
  OpAttrs attrs;
  attrs.transpose_a = transpose_a;
  attrs.transpose_b = transpose_b;
  return AddOp(op, {a, b}, attrs, {{std::move(y), DType::F32}}, name)[0];
}

}  // namespace sinkrt::host
