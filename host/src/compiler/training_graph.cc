#include "compiler/training_graph.h"

#include <algorithm>
#include <string>
#include <utility>

namespace sinkrt::host::compiler {
namespace {

std::string GraphContext(const Graph& g) { return "compile graph '" + g.name() + "'"; }

void AppendUnique(std::vector<TensorId>& list, TensorId t) {
  if (std::find(list.begin(), list.end(), t) == list.end()) list.push_back(t);
}

// The labels for accuracy: the first i32 Input, if its batch matches the
// logits'. Anything else (a regression output, no labels) gets no metric
// rather than an error, because eval still reports loss and outputs.
TensorId AccuracyLabels(const Graph& g, TensorId logits) {
  const TensorInfo& l = g.tensor(logits);
  if (l.shape.size() != 2 || l.dtype != DType::F32) return kInvalidTensor;
  for (TensorId t = 0; t < g.tensors().size(); ++t) {
    const TensorInfo& info = g.tensor(t);
    if (info.kind != TensorKind::Input || info.dtype != DType::I32) continue;
    if (info.shape.size() == 1 && info.shape[0] == l.shape[0]) return t;
    return kInvalidTensor;  // only the first i32 input is the label column
  }
  return kInvalidTensor;
}

}  // namespace

Result<TrainingGraph> BuildTrainingGraph(const Graph& forward, const OptimizerSpec& optimizer,
                                         bool with_eval) {
  if (!forward.status().ok()) return forward.status().WithContext(GraphContext(forward));
  if (!forward.valid(forward.loss()))
    return FailedPrecondition(GraphContext(forward) + ": the graph has no loss (call SetLoss)");
  for (TensorId t : forward.outputs())
    if (!forward.valid(t))
      return InvalidArgument(GraphContext(forward) + ": output tensor id " + std::to_string(t) +
                             " is out of range");

  TrainingGraph tg;
  tg.graph = forward;
  Graph& g = tg.graph;
  tg.forward_ops = g.ops().size();
  tg.loss = g.loss();

  auto grads = AppendBackward(g, tg.loss);
  if (!grads.ok()) return grads.status().WithContext(GraphContext(forward) + ": backward");
  tg.grads = std::move(grads).value();
  Status st = AppendOptimizer(g, tg.grads, optimizer);
  if (!st.ok()) return st.WithContext(GraphContext(forward) + ": optimizer");
  if (!g.status().ok()) return g.status().WithContext(GraphContext(forward));
  tg.train_ops = g.ops().size();

  if (with_eval && !g.outputs().empty()) {
    const TensorId logits = g.outputs().front();
    const TensorId labels = AccuracyLabels(g, logits);
    if (labels != kInvalidTensor) {
      tg.accuracy = g.ArgMaxAccuracy(logits, labels);
      if (!g.status().ok() || !g.valid(tg.accuracy))
        return g.status().WithContext(GraphContext(forward) + ": eval accuracy on '" +
                                      g.tensor(logits).name + "'");
    }
  }

  for (TensorId t = 0; t < g.tensors().size(); ++t)
    if (g.tensor(t).kind == TensorKind::Input) tg.inputs.push_back(t);

  for (size_t i = 0; i < tg.train_ops; ++i) tg.train_program.push_back(i);
  tg.train_reports = {tg.loss};
  if (with_eval) {
    for (size_t i = 0; i < tg.forward_ops; ++i) tg.eval_program.push_back(i);
    for (size_t i = tg.train_ops; i < g.ops().size(); ++i) tg.eval_program.push_back(i);
    AppendUnique(tg.eval_reports, tg.loss);
    if (tg.accuracy != kInvalidTensor) AppendUnique(tg.eval_reports, tg.accuracy);
    for (TensorId t : g.outputs()) AppendUnique(tg.eval_reports, t);
  }
  return tg;
}

}  // namespace sinkrt::host::compiler
