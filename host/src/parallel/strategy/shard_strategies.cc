// The public face of presets and strategy files (sinkrt/host/shard_strategies.h)
// over parallel/strategy/strategy_presets.h, strategy_file.h and partition_plan.h.
#include "sinkrt/host/shard_strategies.h"

#include <map>
#include <vector>

#include "host/src/parallel/partition/partition_plan.h"
#include "host/src/parallel/strategy/strategy_file.h"
#include "host/src/parallel/strategy/strategy_presets.h"

namespace sinkrt::host {
namespace {

// A strategy file read, and checked against the job's device count.
Result<parallel::StrategyFileContents> ReadFor(const std::string& path, int64_t device_num) {
  SINKRT_ASSIGN_OR_RETURN(parallel::StrategyFileContents c, parallel::ReadStrategyFile(path));
  if (c.device_num != device_num)
    return InvalidArgument("strategy file " + path + " was written for " + std::to_string(c.device_num) +
                           " devices (device_num), the job has " + std::to_string(device_num));
  return c;
}

}  // namespace

bool IsStrategyPresetName(const std::string& strategy) { return parallel::IsStrategyPresetName(strategy); }

Result<int64_t> PresetDataParallel(const std::string& preset, int64_t device_num) {
  SINKRT_ASSIGN_OR_RETURN(const parallel::StrategyPreset p, parallel::ParseStrategyPreset(preset, device_num));
  return p.data_parallel;
}

Result<int64_t> StrategyDataParallel(const std::string& strategy, const Graph& graph, int64_t device_num) {
  if (IsStrategyPresetName(strategy)) return PresetDataParallel(strategy, device_num);
  const std::string source = strategy.empty() ? "graph '" + graph.name() + "'" : "strategy file " + strategy;
  const int64_t producer = graph.valid(graph.loss()) ? graph.producer(graph.loss()) : -1;
  if (producer < 0) return InvalidArgument(source + ": the graph has no loss op, whose strategy splits the batch");
  const OpNode& loss = graph.ops()[producer];
  parallel::Strategy given = loss.strategy;
  if (!strategy.empty()) {
    SINKRT_ASSIGN_OR_RETURN(const parallel::StrategyFileContents c, ReadFor(strategy, device_num));
    given.clear();
    for (const auto& [name, s] : c.ops)
      if (name == loss.name) given = s;
  }
  if (given.empty()) return device_num;
  // SparseSoftmaxCrossEntropy's labels [N]: their split is the batch's.
  if (loss.op == OpCode::SparseSoftmaxCrossEntropy && given.size() == 2 && given[1].size() == 1) return given[1][0];
  return InvalidArgument(source + ": the loss op " + loss.name + " has the strategy " + StrategyToString(given) +
                         ", which does not say how the batch (labels [N]) is split");
}

Status ApplyShardStrategy(const std::string& strategy, Graph& graph, int64_t device_num) {
  if (IsStrategyPresetName(strategy)) {
    SINKRT_ASSIGN_OR_RETURN(const parallel::StrategyPreset p, parallel::ParseStrategyPreset(strategy, device_num));
    return parallel::ApplyStrategyPreset(graph, p);
  }
  SINKRT_ASSIGN_OR_RETURN(const parallel::StrategyFileContents c, ReadFor(strategy, device_num));
  return parallel::ApplyStrategies(c, graph);
}

Status SaveShardStrategies(const std::string& path, const Graph& graph, int64_t device_num, bool full_batch) {
  std::vector<parallel::Strategy> strategies;
  for (const OpNode& op : graph.ops()) strategies.push_back(op.strategy);
  SINKRT_ASSIGN_OR_RETURN(
      const parallel::PartitionPlan plan,
      parallel::PlanPartition(
          graph, strategies,
          {.device_num = device_num, .full_batch = full_batch, .dataset_strategy = {}, .activation_inputs = {}}),
      "strategy file " + path + ": graph '" + graph.name() + "'");
  std::map<std::string, parallel::TensorLayout> layouts;
  for (TensorId t = 0; t < graph.tensors().size(); ++t)
    if (graph.tensor(t).kind == TensorKind::Param && plan.layout_owner[t] >= 0)
      layouts[graph.tensor(t).name] = plan.layouts[t];
  return parallel::WriteStrategyFile(path, graph, device_num, layouts);
}

}  // namespace sinkrt::host
