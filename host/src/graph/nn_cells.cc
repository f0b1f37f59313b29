// MindSpore's nn losses and nn.Embedding as compositions of graph ops
// (sinkrt/host/nn.h).
#include "sinkrt/host/nn.h"

#include <algorithm>
#include <cctype>
#include <string>
#include <utility>
#include <vector>

#include "runtime/src/counter_random.h"
#include "sinkrt/host/tensor.h"

namespace sinkrt::host {
namespace {

// Records "<cell>: <message>" unless the graph has failed already.
TensorId FailCell(Graph& g, const std::string& cell, const std::string& message) {
  g.Fail(InvalidArgument(cell + ": " + message));
  return kInvalidTensor;
}

// False (after recording why) unless `t` is an f32 tensor of `g`.
bool CheckF32(Graph& g, const std::string& cell, const char* role, TensorId t) {
  if (!g.valid(t)) {
    FailCell(g, cell, std::string(role) + " is not a tensor of this graph (id " + std::to_string(t) + ")");
    return false;
  }
  const TensorInfo& info = g.tensor(t);
  if (info.dtype != DType::F32) {
    FailCell(g, cell,
             std::string(role) + " must be f32, got " + DTypeName(info.dtype) + " " + ShapeToString(info.shape) + " '" +
                 info.name + "'");
    return false;
  }
  return true;
}

// nn.Embedding's table with padding_idx: MindSpore materialises the
// initializer (init_data()) and zeroes the row. The values are the device's
// Normal(0, 0.01) stream element for element (runtime/src/counter_random.h,
// mean + stddev * z as the device computes it), so only the row differs
// from the table without padding_idx.
InitSpec PaddedNormalTable(int64_t vocab_size, int64_t embedding_size, uint64_t seed, int64_t padding_idx) {
  constexpr float kMean = 0.0f, kStddev = 0.01f;
  std::vector<float> v(static_cast<size_t>(vocab_size * embedding_size));
  for (size_t i = 0; i < v.size(); ++i) v[i] = kMean + kStddev * NormalAt(seed, i);
  std::fill_n(v.begin() + padding_idx * embedding_size, embedding_size, 0.0f);
  return InitSpec::Inline(std::move(v));
}

// `base`, or `base_<k>` for the first k that names no tensor of `g` yet.
std::string FreshName(const Graph& g, const std::string& base) {
  std::string name = base;
  for (int k = 1; g.valid(g.FindTensor(name)); ++k) name = base + "_" + std::to_string(k);
  return name;
}

TensorId Reduce(Graph& g, TensorId loss, Reduction reduction) {
  switch (reduction) {
    case Reduction::kMean:
      return g.ReduceMean(loss);
    case Reduction::kSum:
      return g.ReduceSum(loss);
    case Reduction::kNone:
      break;
  }
  return loss;
}

// (logits − labels) through `f`, reduced; the ops named under `cell`.
template <typename F>
TensorId DifferenceLoss(Graph& g, const char* cell, TensorId logits, TensorId labels, Reduction reduction, F f) {
  if (!g.status().ok()) return kInvalidTensor;
  if (!CheckF32(g, cell, "logits", logits) || !CheckF32(g, cell, "labels", labels)) return kInvalidTensor;
  Result<Shape> shape = BroadcastShapes(g.tensor(logits).shape, g.tensor(labels).shape);
  if (!shape.ok()) return FailCell(g, cell, "logits and labels: " + shape.status().message());
  NameScope scope(g, cell);
  return Reduce(g, f(g.Sub(logits, labels)), reduction);
}

}  // namespace

TensorId MSELoss(Graph& g, TensorId logits, TensorId labels, Reduction reduction) {
  return DifferenceLoss(g, "MSELoss", logits, labels, reduction, [&g](TensorId d) { return g.Square(d); });
}

TensorId L1Loss(Graph& g, TensorId logits, TensorId labels, Reduction reduction) {
  return DifferenceLoss(g, "L1Loss", logits, labels, reduction, [&g](TensorId d) { return g.Abs(d); });
}

TensorId SoftmaxCrossEntropyWithLogits(Graph& g, TensorId logits, TensorId labels, Reduction reduction) {
  constexpr const char* cell = "SoftmaxCrossEntropyWithLogits";
  if (!g.status().ok()) return kInvalidTensor;
  if (!CheckF32(g, cell, "logits", logits) || !CheckF32(g, cell, "labels", labels)) return kInvalidTensor;
  const Shape& sl = g.tensor(logits).shape;
  const Shape& sy = g.tensor(labels).shape;
  if (sl.size() != 2) return FailCell(g, cell, "logits must be [N,C], got " + ShapeToString(sl));
  if (sy != sl)
    return FailCell(
        g, cell,
        "labels must have the logits' shape " + ShapeToString(sl) + " (sparse=False), got " + ShapeToString(sy));
  // The graph has no Neg builder: the sign is a constant −1 factor (exact).
  const TensorId minus_one = g.Const(FreshName(g, std::string(cell) + ".minus_one"), {1}, InitSpec::Constant(-1.0f));
  NameScope scope(g, cell);
  const TensorId rows = g.ReduceSum(g.Mul(labels, g.LogSoftmax(logits, -1)), {-1});
  return Reduce(g, g.Mul(rows, minus_one), reduction);
}

TensorId Embedding(Graph& g, TensorId indices, int64_t vocab_size, int64_t embedding_size, const std::string& name,
                   uint64_t seed, std::optional<int64_t> padding_idx) {
  if (!g.status().ok()) return kInvalidTensor;
  const std::string cell = "Embedding '" + name + "'";
  if (vocab_size < 1 || embedding_size < 1)
    return FailCell(g, cell,
                    "vocab_size and embedding_size must be positive, got " + std::to_string(vocab_size) + " and " +
                        std::to_string(embedding_size));
  // MindSpore's check_int_range(padding_idx, 0, vocab_size, INC_LEFT).
  if (padding_idx && (*padding_idx < 0 || *padding_idx >= vocab_size))
    return FailCell(
        g, cell, "padding_idx must be in [0, " + std::to_string(vocab_size) + "), got " + std::to_string(*padding_idx));
  InitSpec init = InitSpec::Normal(0.0f, 0.01f, seed);
  if (padding_idx) init = PaddedNormalTable(vocab_size, embedding_size, seed, *padding_idx);
  const TensorId table = g.Param(name + ".embedding_table", {vocab_size, embedding_size}, std::move(init));
  NameScope scope(g, name);
  return g.Gather(table, indices);
}

TensorId OneHot(Graph& g, TensorId indices, int64_t depth, float on_value, float off_value, int axis) {
  return g.OneHot(indices, depth, on_value, off_value, axis);
}

TensorId Pad(Graph& g, TensorId x, std::vector<std::pair<int64_t, int64_t>> paddings, const std::string& mode) {
  if (!g.status().ok()) return kInvalidTensor;
  std::string m;
  for (char c : mode) m += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  PadMode pm = PadMode::Constant;
  if (m == "REFLECT") {
    pm = PadMode::Reflect;
  } else if (m == "SYMMETRIC") {
    pm = PadMode::Symmetric;
  } else if (m != "CONSTANT") {
    // MindSpore's nn.Pad: mode must be in ['CONSTANT', 'REFLECT', 'SYMMETRIC'].
    return FailCell(g, "Pad", "mode must be in ['CONSTANT', 'REFLECT', 'SYMMETRIC'], but got '" + mode + "'");
  }
  return g.Pad(x, std::move(paddings), pm, 0.0f);
}

}  // namespace sinkrt::host
