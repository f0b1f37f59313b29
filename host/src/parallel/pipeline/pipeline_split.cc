// Each pipeline stage's forward graph, cut out of the network
// (sinkrt/host/pipeline.h).
#include <map>
#include <string>

#include "sinkrt/host/pipeline.h"

namespace sinkrt::host {

Result<std::vector<StageGraph>> SplitStageGraphs(const Graph& g, const PipelineStages& stages) {
  SINKRT_RETURN_IF_ERROR(g.status(), "pipeline stage graphs");
  const std::vector<OpNode>& ops = g.ops();
  const std::vector<TensorInfo>& tensors = g.tensors();
  if (stages.op_stage.size() != ops.size())
    return InvalidArgument("the stage assignment covers " + std::to_string(stages.op_stage.size()) +
                           " ops, the network has " + std::to_string(ops.size()));
  std::vector<int64_t> producer(tensors.size(), -1);
  for (size_t i = 0; i < ops.size(); ++i)
    for (TensorId t : ops[i].outputs) producer[t] = static_cast<int64_t>(i);
  // Per tensor, the latest stage that reads it (or that must output it).
  std::vector<int> last_reader(tensors.size(), -1);
  for (size_t i = 0; i < ops.size(); ++i)
    for (TensorId t : ops[i].inputs) last_reader[t] = std::max(last_reader[t], stages.op_stage[i]);

  std::vector<StageGraph> out;
  for (int s = 0; s < stages.stages; ++s) {
    StageGraph sg;
    sg.stage = s;
    sg.graph = Graph(g.name() + ".stage" + std::to_string(s));
    std::map<TensorId, TensorId> local;  // network tensor -> this stage's
    auto add = [&](TensorId t, TensorKind kind) {
      TensorInfo info = tensors[t];
      info.kind = kind;
      if (kind == TensorKind::Input) info.init = InitSpec{};
      const TensorId id = sg.graph.AddTensor(std::move(info));
      local[t] = id;
      sg.original.push_back(t);
      return id;
    };
    for (size_t i = 0; i < ops.size(); ++i) {
      if (stages.op_stage[i] != s) continue;
      const OpNode& op = ops[i];
      std::vector<TensorId> inputs;
      for (TensorId t : op.inputs) {
        auto it = local.find(t);
        if (it != local.end()) {
          inputs.push_back(it->second);
          continue;
        }
        if (producer[t] < 0) {
          inputs.push_back(add(t, tensors[t].kind));  // a leaf this stage reads
        } else {
          // An earlier stage's tensor (data flows forward: AssignPipelineStages checked it).
          const TensorId id = add(t, TensorKind::Input);
          sg.received.push_back(id);
          inputs.push_back(id);
        }
      }
      std::vector<TensorId> outputs;
      for (TensorId t : op.outputs) outputs.push_back(add(t, TensorKind::Intermediate));
      sg.graph.AddOpInto(op.op, std::move(inputs), op.attrs, std::move(outputs), op.name);
      if (!op.strategy.empty()) sg.graph.Shard(op.name, op.strategy);
    }
    // Sent on: what this stage computes and a later stage reads.
    for (const auto& [t, id] : local)
      if (producer[t] >= 0 && stages.op_stage[static_cast<size_t>(producer[t])] == s && last_reader[t] > s)
        sg.sent.push_back(id);
    for (TensorId id : sg.sent) sg.graph.AddOutput(id);
    for (TensorId t : g.outputs()) {
      auto it = local.find(t);
      if (it != local.end() && producer[t] >= 0 && stages.op_stage[static_cast<size_t>(producer[t])] == s &&
          last_reader[t] <= s)
        sg.graph.AddOutput(it->second);
    }
    SINKRT_RETURN_IF_ERROR(sg.graph.status(), "pipeline stage " + std::to_string(s));
    out.push_back(std::move(sg));
  }
  return out;
}

}  // namespace sinkrt::host
