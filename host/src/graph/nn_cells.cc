// MindSpore's nn losses and nn.Embedding as compositions of graph ops
// (sinkrt/host/nn.h).
#include "sinkrt/host/nn.h"

#include <string>

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
                   uint64_t seed) {
  if (!g.status().ok()) return kInvalidTensor;
  const std::string cell = "Embedding '" + name + "'";
  if (vocab_size < 1 || embedding_size < 1)
    return FailCell(g, cell,
                    "vocab_size and embedding_size must be positive, got " + std::to_string(vocab_size) + " and " +
                        std::to_string(embedding_size));
  const TensorId table =
      g.Param(name + ".embedding_table", {vocab_size, embedding_size}, InitSpec::Normal(0.0f, 0.01f, seed));
  NameScope scope(g, name);
  return g.Gather(table, indices);
}

}  // namespace sinkrt::host
