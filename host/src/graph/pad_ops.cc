// Graph builders for OneHot (ops.OneHot) and Pad (ops.Pad, nn.Pad, ops.pad;
// docs/reference/ops.md).
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "sinkrt/host/graph.h"

namespace sinkrt::host {

TensorId Graph::OneHot(TensorId indices, int64_t depth, float on_value, float off_value, int axis) {
  if (!status_.ok()) return kInvalidTensor;
  constexpr auto op = OpCode::OneHot;
  const std::string name = UniqueName("one_hot");
  if (!CheckInput(op, name, "indices", indices, DType::I32)) return kInvalidTensor;
  Shape shape = tensors_[indices].shape;
  const int rank = static_cast<int>(shape.size());
  // MindSpore's messages: "depth must be >= 0", "axis in [-1, ndim]".
  if (depth < 0) {
    FailOp(op, name, "depth must be >= 0, got " + std::to_string(depth));
    return kInvalidTensor;
  }
  if (axis < -1 || axis > rank) {
    FailOp(op, name,
           "axis must be in [-1, " + std::to_string(rank) + "] for indices " + ShapeToString(shape) + ", got " +
               std::to_string(axis));
    return kInvalidTensor;
  }
  shape.insert(shape.begin() + (axis == -1 ? rank : axis), depth);
  OpAttrs attrs;
  attrs.depth = depth;
  attrs.one_hot_axis = axis;
  attrs.on_value = on_value;
  attrs.off_value = off_value;
  return AddOp(op, {indices}, std::move(attrs), {{std::move(shape), DType::F32}}, name)[0];
}

namespace {

const char* PadModeName(PadMode mode) {
  switch (mode) {
    case PadMode::Constant:
      return "constant";
    case PadMode::Reflect:
      return "reflect";
    case PadMode::Symmetric:
      return "symmetric";
  }
  return "unknown";
}

}  // namespace

TensorId Graph::Pad(TensorId x, std::vector<std::pair<int64_t, int64_t>> paddings, PadMode mode, float value) {
  if (!status_.ok()) return kInvalidTensor;
  constexpr auto op = OpCode::Pad;
  const std::string name = UniqueName("pad");
  if (!CheckInput(op, name, "x", x, DType::F32)) return kInvalidTensor;
  Shape shape = tensors_[x].shape;
  if (mode != PadMode::Constant && mode != PadMode::Reflect && mode != PadMode::Symmetric) {
    FailOp(op, name, "mode " + std::to_string(static_cast<int>(mode)) + " is not constant, reflect or symmetric");
    return kInvalidTensor;
  }
  if (shape.empty() || shape.size() > 8) {
    FailOp(op, name, "x must have rank 1 to 8, got " + ShapeToString(shape));
    return kInvalidTensor;
  }
  if (paddings.size() != shape.size()) {
    FailOp(op, name,
           "paddings has " + std::to_string(paddings.size()) + " (before, after) pairs, expected one per axis of x " +
               ShapeToString(shape));
    return kInvalidTensor;
  }
  OpAttrs attrs;
  for (size_t d = 0; d < shape.size(); ++d) {
    const auto [before, after] = paddings[d];
    // reflect mirrors about the edge (padding < extent); symmetric repeats
    // it (padding <= extent); constant: any size that fits an int32.
    const int64_t limit = mode == PadMode::Reflect ? shape[d] - 1 : mode == PadMode::Symmetric ? shape[d] : INT32_MAX;
    if (before < 0 || after < 0 || before > limit || after > limit) {
      FailOp(op, name,
             "paddings (" + std::to_string(before) + ", " + std::to_string(after) + ") of axis " + std::to_string(d) +
                 " (extent " + std::to_string(shape[d]) + ") must be in [0, " +
                 std::to_string(std::max<int64_t>(limit, 0)) + "] in mode " + PadModeName(mode));
      return kInvalidTensor;
    }
    attrs.paddings.push_back(before);
    attrs.paddings.push_back(after);
    shape[d] += before + after;
  }
  attrs.pad_mode = mode;
  attrs.value = mode == PadMode::Constant ? value : 0.0f;
  return AddOp(op, {x}, std::move(attrs), {{std::move(shape), DType::F32}}, name)[0];
}

}  // namespace sinkrt::host
