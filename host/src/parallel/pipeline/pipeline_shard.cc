// A pipeline stage partitioned over its ranks (parallel/pipeline/pipeline_shard.h).
#include "host/src/parallel/pipeline/pipeline_shard.h"

#include <utility>

#include "host/src/parallel/partition/partition.h"
#include "host/src/parallel/partition/partition_plan.h"

namespace sinkrt::host::parallel {
namespace {

// A strategy that splits nothing: one 1 per dim of each input.
parallel::Strategy Whole(const Graph& g, const OpNode& op) {
  parallel::Strategy s;
  for (TensorId t : op.inputs) s.emplace_back(g.tensor(t).shape.size(), 1);
  return s;
}

}  // namespace

Result<ShardedStage> ShardPipelineStage(const StageGraph& stage, TensorId loss, uint32_t ranks, uint32_t place,
                                        uint32_t first_rank) {
  const std::string where =
      "pipeline stage " + std::to_string(stage.stage) + " over its " + std::to_string(ranks) + " ranks";
  Graph g = stage.graph;
  const size_t stage_tensors = g.tensors().size();
  std::vector<TensorId> whole_of(stage_tensors, kInvalidTensor);
  for (TensorId s : stage.sent) {
    const TensorInfo& info = g.tensor(s);
    whole_of[s] = g.AddOp(OpCode::Copy, {s}, OpAttrs{}, {{info.shape, info.dtype}}, info.name + "/whole").at(0);
  }
  SINKRT_RETURN_IF_ERROR(g.status(), where);

  std::vector<parallel::Strategy> strategies;
  const int64_t loss_op = g.valid(loss) ? g.producer(loss) : -1;
  for (size_t i = 0; i < g.ops().size(); ++i) {
    const OpNode& op = g.ops()[i];
    const bool whole = op.op == OpCode::Copy && i >= stage.graph.ops().size();
    strategies.push_back(whole || static_cast<int64_t>(i) == loss_op ? Whole(g, op) : op.strategy);
  }
  SINKRT_ASSIGN_OR_RETURN(
      parallel::PartitionPlan plan,
      parallel::PlanPartition(
          g, strategies,
          {.device_num = ranks, .full_batch = true, .dataset_strategy = {}, .activation_inputs = stage.received}),
      where);
  SINKRT_ASSIGN_OR_RETURN(parallel::LocalGraph part, parallel::PartitionForRank(g, plan, place, first_rank), where);

  ShardedStage out;
  out.local_of.assign(stage_tensors, kInvalidTensor);
  for (TensorId t = 0; t < stage_tensors; ++t)
    out.local_of[t] = part.local_of[whole_of[t] != kInvalidTensor ? whole_of[t] : t];
  out.local.stage = stage.stage;
  out.local.original = stage.original;
  for (TensorId r : stage.received) out.local.received.push_back(out.local_of[r]);
  for (TensorId s : stage.sent) out.local.sent.push_back(out.local_of[s]);
  for (const parallel::LocalParameter& p : part.parameters) {
    const std::string& name = part.graph.tensor(p.local).name;
    out.param_layouts[name] = p.layout;
    out.mirror_groups[name] = p.mirror_group;
  }
  out.local.graph = std::move(part.graph);
  return out;
}

}  // namespace sinkrt::host::parallel
