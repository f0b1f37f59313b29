#include "host/src/compiler/program_plan.h"

#include <string>

namespace sinkrt::host::compiler {
namespace {

std::string OpContext(const OpNode& op, size_t index) { return "op " + std::to_string(index) + " '" + op.name + "'"; }

}  // namespace

Result<GraphFacts> AnalyseGraph(const passes::TrainingGraph& tg) {
  const Graph& g = tg.graph;
  const size_t n = g.tensors().size();
  GraphFacts f;
  f.producer.assign(n, -1);
  f.producer_slot.assign(n, -1);
  f.reported.assign(n, false);
  for (TensorId t = 0; t < n; ++t) {
    const TensorInfo& info = g.tensor(t);
    if (DTypeSize(info.dtype) == 0)
      return InvalidArgument("tensor '" + info.name + "' has dtype " + DTypeName(info.dtype) + ", which has no size");
    int64_t elements = NumElements(info.shape);
    if (elements < 0)
      return InvalidArgument("tensor '" + info.name + "' has an invalid shape " + ShapeToString(info.shape));
  }
  for (size_t i = 0; i < g.ops().size(); ++i) {
    const OpNode& op = g.ops()[i];
    for (TensorId t : op.inputs)
      if (!g.valid(t))
        return InvalidArgument(OpContext(op, i) + " reads tensor id " + std::to_string(t) + ", outside the graph's " +
                               std::to_string(n) + " tensors");
    for (size_t s = 0; s < op.outputs.size(); ++s) {
      TensorId t = op.outputs[s];
      if (!g.valid(t))
        return InvalidArgument(OpContext(op, i) + " writes tensor id " + std::to_string(t) + ", outside the graph's " +
                               std::to_string(n) + " tensors");
      if (f.producer[t] >= 0)
        return InvalidArgument(OpContext(op, i) + " writes tensor '" + g.tensor(t).name + "', already written by " +
                               OpContext(g.ops()[f.producer[t]], f.producer[t]));
      f.producer[t] = static_cast<int64_t>(i);
      f.producer_slot[t] = static_cast<int32_t>(s);
    }
  }
  for (size_t i = 0; i < g.ops().size(); ++i)
    if (g.ops()[i].op == OpCode::MaxPool2D && g.ops()[i].outputs.size() != 2)
      return InvalidArgument(OpContext(g.ops()[i], i) + ": MaxPool2D must have two outputs " +
                             "(y and its argmax workspace), has " + std::to_string(g.ops()[i].outputs.size()));
  if (tg.loss != kInvalidTensor) f.reported[tg.loss] = true;
  for (TensorId t : g.outputs()) f.reported[t] = true;
  if (tg.accuracy != kInvalidTensor) f.reported[tg.accuracy] = true;
  return f;
}

void UseMovingStatistics(const Graph& g, std::vector<KernelPlan>& kernels) {
  std::vector<KernelPlan> kept;
  kept.reserve(kernels.size());
  for (KernelPlan& k : kernels) {
    const OpNode& head = g.ops()[k.ops[0]];
    if (head.op == OpCode::BatchNormStats) continue;
    if (head.op == OpCode::AllReduce && !k.inputs.empty()) {
      const int64_t from = g.producer(k.inputs[0]);
      if (from >= 0 && g.ops()[from].op == OpCode::BatchNormStats) continue;
    }
    if (head.op == OpCode::BatchNorm) {
      k.code = OpCode::BatchNormInfer;
      k.inputs.resize(5);
      k.outputs.resize(1);
    }
    kept.push_back(std::move(k));
  }
  kernels = std::move(kept);
}

}  // namespace sinkrt::host::compiler
