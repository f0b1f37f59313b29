// Graph builders that move elements between positions without arithmetic:
// Transpose, Concat and Split.
#include <algorithm>
#include <cstdint>
#include <utility>

#include "host/src/graph/builder_helpers.h"
#include "sinkrt/host/graph.h"

namespace sinkrt::host {

using internal::AxisRange;
using internal::NormalizeAxis;

namespace {

// The device's Transpose kernel walks at most this many dims (the issue's
// contract: any permutation up to rank 6).
constexpr size_t kMaxTransposeRank = 6;

std::string IntsToString(const std::vector<int>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(v[i]);
  }
  return s + "]";
}

std::string SizesToString(const std::vector<int64_t>& v) { return ShapeToString(Shape(v.begin(), v.end())); }

}  // namespace

TensorId Graph::Transpose(TensorId x, std::vector<int> perm) {
  if (!status_.ok()) return kInvalidTensor;
  constexpr auto op = OpCode::Transpose;
  const std::string name = UniqueName("transpose");
  if (!CheckInput(op, name, "x", x, DType::F32)) return kInvalidTensor;
  const Shape sx = tensors_[x].shape;
  const size_t rank = sx.size();
  const std::string given = "perm " + IntsToString(perm);
  if (rank > kMaxTransposeRank) {
    FailOp(op, name,
           "x " + ShapeToString(sx) + " has rank " + std::to_string(rank) + ", at most " +
               std::to_string(kMaxTransposeRank) + " is supported");
    return kInvalidTensor;
  }
  if (perm.size() != rank) {
    FailOp(op, name,
           given + " has " + std::to_string(perm.size()) + " entries, x " + ShapeToString(sx) + " has rank " +
               std::to_string(rank));
    return kInvalidTensor;
  }
  std::vector<bool> seen(rank, false);
  for (size_t i = 0; i < rank; ++i) {
    const int axis = NormalizeAxis(perm[i], rank);
    if (axis < 0) {
      FailOp(op, name,
             given + ": entry " + std::to_string(i) + " (" + std::to_string(perm[i]) + ") is out of range for x " +
                 ShapeToString(sx) + " (valid: " + AxisRange(rank) + ")");
      return kInvalidTensor;
    }
    if (seen[axis]) {
      FailOp(op, name, given + " is not a permutation: axis " + std::to_string(axis) + " appears twice");
      return kInvalidTensor;
    }
    seen[axis] = true;
    perm[i] = axis;
  }
  Shape y(rank);
  for (size_t i = 0; i < rank; ++i) y[i] = sx[perm[i]];
  OpAttrs attrs;
  attrs.perm = std::move(perm);
  return AddOp(op, {x}, std::move(attrs), {{std::move(y), DType::F32}}, name)[0];
}

TensorId Graph::Concat(std::vector<TensorId> xs, int axis) {
  if (!status_.ok()) return kInvalidTensor;
  constexpr auto op = OpCode::Concat;
  const std::string name = UniqueName("concat");
  if (xs.empty()) {
    FailOp(op, name, "needs at least one input");
    return kInvalidTensor;
  }
  for (size_t i = 0; i < xs.size(); ++i) {
    const std::string role = "input " + std::to_string(i);
    if (!CheckInput(op, name, role.c_str(), xs[i], DType::F32)) return kInvalidTensor;
  }
  const Shape s0 = tensors_[xs[0]].shape;
  const int a = NormalizeAxis(axis, s0.size());
  if (a < 0) {
    FailOp(op, name,
           "axis " + std::to_string(axis) + " is out of range for input 0 " + ShapeToString(s0) +
               " (valid: " + AxisRange(s0.size()) + ")");
    return kInvalidTensor;
  }
  Shape y = s0;
  for (size_t i = 1; i < xs.size(); ++i) {
    const Shape& si = tensors_[xs[i]].shape;
    bool same = si.size() == s0.size();
    for (size_t d = 0; same && d < si.size(); ++d) same = static_cast<int>(d) == a || si[d] == s0[d];
    if (!same) {
      FailOp(op, name,
             "input " + std::to_string(i) + " " + ShapeToString(si) + " does not match input 0 " + ShapeToString(s0) +
                 ": every dim but axis " + std::to_string(a) + " must be equal");
      return kInvalidTensor;
    }
    if (si[a] > INT64_MAX - y[a]) {
      FailOp(op, name, "the inputs' extents along axis " + std::to_string(a) + " overflow int64");
      return kInvalidTensor;
    }
    y[a] += si[a];
  }
  OpAttrs attrs;
  attrs.axis = a;
  return AddOp(op, std::move(xs), attrs, {{std::move(y), DType::F32}}, name)[0];
}

std::vector<TensorId> Graph::Split(TensorId x, int axis, std::vector<int64_t> sizes) {
  constexpr auto op = OpCode::Split;
  const std::vector<TensorId> failed(std::max<size_t>(sizes.size(), 1), kInvalidTensor);
  if (!status_.ok()) return failed;
  const std::string name = UniqueName("split");
  if (!CheckInput(op, name, "x", x, DType::F32)) return failed;
  const Shape sx = tensors_[x].shape;
  const int a = NormalizeAxis(axis, sx.size());
  if (a < 0) {
    FailOp(op, name,
           "axis " + std::to_string(axis) + " is out of range for x " + ShapeToString(sx) +
               " (valid: " + AxisRange(sx.size()) + ")");
    return failed;
  }
  if (sizes.empty()) {
    FailOp(op, name, "sizes is empty: Split makes one output per entry");
    return failed;
  }
  int64_t total = 0;
  for (size_t k = 0; k < sizes.size(); ++k) {
    if (sizes[k] < 1) {
      FailOp(op, name,
             "sizes " + SizesToString(sizes) + ": entry " + std::to_string(k) + " is " + std::to_string(sizes[k]) +
                 ", every output needs at least 1");
      return failed;
    }
    // Stops once past the extent, so that the sum cannot overflow.
    if (sizes[k] > sx[a] - total) {
      total = -1;
      break;
    }
    total += sizes[k];
  }
  if (total != sx[a]) {
    FailOp(op, name,
           "sizes " + SizesToString(sizes) + " do not sum to " + std::to_string(sx[a]) + ", the extent of axis " +
               std::to_string(a) + " of x " + ShapeToString(sx));
    return failed;
  }
  std::vector<std::pair<Shape, DType>> outputs;
  for (int64_t s : sizes) {
    Shape y = sx;
    y[a] = s;
    outputs.push_back({std::move(y), DType::F32});
  }
  OpAttrs attrs;
  attrs.axis = a;
  attrs.sizes = std::move(sizes);
  return AddOp(op, {x}, std::move(attrs), std::move(outputs), name);
}

}  // namespace sinkrt::host
