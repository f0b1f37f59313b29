// PlanAutoParallel (sinkrt/host/auto_parallel.h): calibration, cost
// context, search problem, search, then the chosen strategies set on the
// graph once the partitioner has accepted them.
#include <chrono>
#include <cmath>
#include <limits>

#include "host/src/parallel/auto_parallel/auto_plan_explain.h"
#include "host/src/parallel/auto_parallel/cost_model.h"
#include "host/src/parallel/auto_parallel/search_graph.h"
#include "host/src/parallel/auto_parallel/strategy_search.h"
#include "host/src/parallel/partition/partition_plan.h"
#include "sinkrt/host/auto_parallel.h"
#include "sinkrt/host/calibration.h"

namespace sinkrt::host {
namespace {

using namespace parallel;

double OptimizerStateFactor(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::SGD:
      return 0;
    case OptimizerKind::Momentum:
      return 1;
    case OptimizerKind::Adam:
    case OptimizerKind::AdamWeightDecay:
    case OptimizerKind::Lamb:
      return 2;
  }
  return 1;
}

bool IsFollower(const OpNode& op) { return op.op == OpCode::Reshape || op.op == OpCode::Flatten; }

// A BatchNorm whose batch the plan splits normalises with the statistics of
// the ranks that split it (SyncBatchNorm; docs/guide/normalization.md), as
// MindSpore's BatchNormInfo replaces it by SyncBatchNorm: the search may
// split a batch for speed, but never changes what the step computes. The
// cost model priced its AllReduces.
void SyncSplitBatchNorms(Graph& planned) {
  for (size_t i = 0; i < planned.ops().size(); ++i) {
    const OpNode& op = planned.ops()[i];
    if (op.op != OpCode::BatchNorm || op.attrs.bn_sync || op.strategy.empty() || op.strategy[0].empty() ||
        op.strategy[0][0] < 2)
      continue;
    OpAttrs attrs = op.attrs;
    attrs.bn_sync = true;
    planned.ExtendOp(i, {}, attrs);
  }
}

}  // namespace

Result<AutoParallelPlan> PlanAutoParallel(Graph& graph, const AutoParallelOptions& options) {
  const std::string who = "auto_parallel: graph '" + graph.name() + "'";
  SINKRT_RETURN_IF_ERROR(graph.status(), who);
  if (options.device_num < 1)
    return InvalidArgument(who + ": device_num " + std::to_string(options.device_num) + " must be at least 1");
  if (graph.loss() == kInvalidTensor) return InvalidArgument(who + " has no loss: the search prices a training step");
  SINKRT_ASSIGN_OR_RETURN(const SearchMode mode, ParseSearchMode(options.search_mode), who);
  SINKRT_ASSIGN_OR_RETURN(const Calibration calibration, FindCalibration(options.calibration), who);
  SINKRT_ASSIGN_OR_RETURN(
      const CostContext ctx,
      MakeCostContext(graph, calibration,
                      CostOptions{.transport = options.transport,
                                  .optimizer_state_factor = OptimizerStateFactor(options.optimizer.kind)}),
      who);
  const PartitionOptions partition{.device_num = options.device_num,
                                   .full_batch = options.full_batch,
                                   .dataset_strategy = options.dataset_strategy,
                                   .activation_inputs = {}};
  SearchGraphOptions so;
  so.device_num = options.device_num;
  so.fully_use_devices = options.fully_use_devices;
  if (options.full_batch || !options.dataset_strategy.empty()) {
    // The inputs' layouts do not depend on any op's strategy: the
    // partitioner's placement under the defaults is theirs.
    SINKRT_ASSIGN_OR_RETURN(PartitionPlan placed, PlanPartition(graph, {}, partition), who);
    so.fixed_inputs = std::move(placed.layouts);
  }

  const auto start = std::chrono::steady_clock::now();
  SINKRT_ASSIGN_OR_RETURN(SearchGraph sg, BuildSearchGraph(graph, ctx, so), who);
  SearchOptions search{.mode = mode, .memory_limit_bytes = options.device_memory};
  SINKRT_ASSIGN_OR_RETURN(const SearchResult result, SearchStrategies(sg.problem, search),
                          who + " on " + std::to_string(options.device_num) + " devices");
  const double search_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  const std::vector<OpNode>& ops = graph.ops();
  std::vector<Strategy> strategies(ops.size());
  for (size_t i = 0; i < ops.size(); ++i)
    if (!IsFollower(ops[i])) strategies[i] = sg.ops[i][result.choice[i]].strategy;
  // What the cost model priced must be what Compile partitions.
  SINKRT_RETURN_IF_ERROR(PlanPartition(graph, strategies, partition).status(),
                         who + ": the searched strategies do not partition (a search bug)");
  Graph planned = graph;
  for (size_t i = 0; i < ops.size(); ++i)
    if (!strategies[i].empty() && ops[i].strategy.empty()) planned.Shard(ops[i].name, strategies[i]);
  SyncSplitBatchNorms(planned);
  SINKRT_RETURN_IF_ERROR(planned.status(), who + ": setting the searched strategies");

  AutoParallelPlan plan;
  plan.search_mode = SearchModeName(mode);
  plan.calibration = calibration.source;
  plan.transport = options.transport;
  plan.device_num = options.device_num;
  plan.step_s = result.cost.time_s;
  plan.memory_bytes = result.cost.memory_bytes;
  plan.memory_limit_bytes = options.device_memory;
  plan.exact = result.exact;
  plan.candidates = sg.enumerated;
  plan.pruned = result.pruned_candidates;
  plan.search_s = search_s;
  plan.ops = ExplainChoices(graph, sg, result, options.device_memory);
  graph = std::move(planned);
  return plan;
}

}  // namespace sinkrt::host
