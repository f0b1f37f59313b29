// Compile's pipeline path (compiler/compile_pipeline.h).
#include "host/src/compiler/compile_pipeline.h"

#include <algorithm>
#include <map>
#include <string>
#include <tuple>

#include "host/src/parallel/partition/partition.h"
#include "host/src/parallel/partition/partition_plan.h"
#include "host/src/parallel/pipeline/pipeline_graph.h"
#include "host/src/parallel/pipeline/pipeline_shard.h"
#include "host/src/parallel/strategy/strategy_presets.h"
#include "host/src/passes/dropout.h"
#include "host/src/passes/sync_batch_norm.h"
#include "sinkrt/host/calibration.h"
#include "sinkrt/host/pipeline.h"

namespace sinkrt::host::compiler {
namespace {

bool IsCommOp(OpCode op) {
  return op == OpCode::AllReduce || op == OpCode::AllGather || op == OpCode::ReduceScatter || op == OpCode::AllToAll ||
         op == OpCode::ShardSlice || op == OpCode::GradAllReduce;
}

// The network at the micro-batch size: its rows split M ways. With
// `keep_strategies` the ops get the network's shard strategies back (the
// "data" preset only serves the cut).
Result<Graph> MicroBatchGraph(const Graph& forward, int micro_size, bool keep_strategies) {
  if (micro_size == 1) return forward;
  Graph g = forward;
  SINKRT_ASSIGN_OR_RETURN(parallel::StrategyPreset preset, parallel::ParseStrategyPreset("data", micro_size));
  SINKRT_RETURN_IF_ERROR(parallel::ApplyStrategyPreset(g, preset),
                         "cutting the batch into " + std::to_string(micro_size) + " micro-batches");
  std::vector<parallel::Strategy> strategies;
  for (const OpNode& op : g.ops()) strategies.push_back(op.strategy);
  SINKRT_ASSIGN_OR_RETURN(
      parallel::PartitionPlan plan,
      parallel::PlanPartition(
          g, strategies,
          {.device_num = micro_size, .full_batch = false, .dataset_strategy = {}, .activation_inputs = {}}),
      "cutting the batch into " + std::to_string(micro_size) + " micro-batches");
  SINKRT_ASSIGN_OR_RETURN(parallel::LocalGraph local, parallel::PartitionForRank(g, plan, 0),
                          "cutting the batch into " + std::to_string(micro_size) + " micro-batches");
  for (const OpNode& op : local.graph.ops())
    if (IsCommOp(op.op))
      return InvalidArgument("the network does not cut into micro-batches by rows: op '" + op.name +
                             "' would need the other micro-batches' rows");
  if (local.graph.ops().size() != forward.ops().size())
    return InvalidArgument(
        "the network does not cut into micro-batches by rows: " + std::to_string(local.graph.ops().size()) +
        " ops at the micro-batch size, " + std::to_string(forward.ops().size()) + " in the network");
  Graph out = std::move(local.graph);
  if (keep_strategies)
    for (size_t i = 0; i < out.ops().size(); ++i) out.Shard(out.ops()[i].outputs.at(0), forward.ops()[i].strategy);
  SINKRT_RETURN_IF_ERROR(out.status(), "the network's shard strategies at the micro-batch size");
  return out;
}

// SyncBatchNorm (docs/guide/normalization.md): the replicas of a
// data-parallel stage (`group`, this rank among them) normalise each
// micro-batch with the statistics of all their rows, as data parallel does
// without stages. The stage graph is the micro-batch template, so every
// micro-batch gets its own reduction. Sets *synced and returns true when
// there is something to reduce.
Result<bool> SyncStageBatchNorms(const StageGraph& stage, const std::vector<uint32_t>& group, uint32_t rank,
                                 bool sharded, StageGraph* synced) {
  if (group.size() < 2 || !passes::HasSyncBatchNorm(stage.graph)) return false;
  if (sharded)
    return Unimplemented("SyncBatchNorm in pipeline stage " + std::to_string(stage.stage) +
                         " under semi_auto_parallel is not supported yet (data_parallel stages are; a stage of "
                         "one rank has nothing to reduce)");
  *synced = stage;
  SINKRT_ASSIGN_OR_RETURN(synced->graph, passes::ExpandSyncBatchNorm(
                                             stage.graph, [&](const OpNode&) { return group; }, rank));
  return true;
}

int64_t BatchOf(const Graph& g) {
  for (const TensorInfo& t : g.tensors())
    if (t.kind == TensorKind::Input && !t.shape.empty()) return t.shape[0];
  return -1;
}

// Dropout's place in the global tensors for a stage's rank: its replicas
// interleaved along dim 0 (data parallel). A stage split over several
// ranks under SEMI_AUTO_PARALLEL would need each block's place in its
// layout, which the stage's partition does not give back yet: refused.
Status PlaceStageDropout(Graph& stage, const CompileOptions& options, uint32_t per_stage, uint32_t place,
                         int64_t micro_batch) {
  const auto dropout =
      std::find_if(stage.ops().begin(), stage.ops().end(), [](const OpNode& op) { return op.op == OpCode::Dropout; });
  if (dropout == stage.ops().end()) return Status::Ok();
  if (options.parallel_mode == ParallelMode::SemiAutoParallel && per_stage > 1)
    return Unimplemented("Dropout ('" + dropout->name + "') in a pipeline stage of " + std::to_string(per_stage) +
                         " ranks under semi_auto_parallel is not supported yet (data_parallel stages, and "
                         "semi_auto_parallel with one rank a stage, are)");
  passes::DropoutPlacement placement;
  if (options.parallel_mode == ParallelMode::DataParallel) {
    placement.replicas = per_stage;
    placement.replica = place;
    placement.batch = micro_batch;
  }
  return passes::PlaceDropout(stage, placement);
}

}  // namespace

Result<PipelineStageGraph> BuildPipelineStage(const Graph& forward, const CompileOptions& options) {
  const PipelineConfig& config = options.pipeline;
  const std::string who =
      "compile graph '" + forward.name() + "' with pipeline_stages " + std::to_string(config.stages);
  SINKRT_RETURN_IF_ERROR(forward.status(), who);
  const bool sharded = options.parallel_mode == ParallelMode::SemiAutoParallel;
  if (options.parallel_mode != ParallelMode::DataParallel && !sharded)
    return InvalidArgument(who + ": pipeline stages run under data_parallel or semi_auto_parallel, not " +
                           std::string(ParallelModeName(options.parallel_mode)));
  if (sharded && !options.dataset_strategy.empty())
    return Unimplemented(who +
                         ": dataset_strategy is not supported with pipeline stages yet (every rank of a "
                         "stage reads the whole batch, as with full_batch)");
  if (options.parameter_broadcast)
    return Unimplemented(who +
                         ": parameter_broadcast is not supported with pipeline stages yet (a stage's replicas "
                         "start equal anyway: their parameters have the same seeds)");
  if (!forward.valid(forward.loss())) return FailedPrecondition(who + ": the graph has no loss (call SetLoss)");
  const int64_t batch = BatchOf(forward);
  if (batch < 1) return InvalidArgument(who + ": the graph has no dataset input with a batch dimension");
  const int device_num = static_cast<int>(std::min<uint32_t>(options.world_size, 1u << 30));
  SINKRT_RETURN_IF_ERROR(CheckPipelineConfig(config, device_num, batch), who);

  SINKRT_ASSIGN_OR_RETURN(Graph micro, MicroBatchGraph(forward, config.micro_size, sharded), who);
  // The balanced split prices ops with the built-in calibration unless one
  // is named: not $SINKRT_CALIBRATION, so that every rank's compile, here or
  // on another host, cuts the same stages.
  SINKRT_ASSIGN_OR_RETURN(const Calibration calibration,
                          options.calibration.empty() ? DefaultCalibration() : LoadCalibration(options.calibration),
                          who);
  SINKRT_ASSIGN_OR_RETURN(PipelineStages stages, AssignPipelineStages(micro, config, calibration), who);
  SINKRT_ASSIGN_OR_RETURN(std::vector<StageGraph> graphs, SplitStageGraphs(micro, stages), who);

  const int S = config.stages;
  // Per stage: network tensor -> its tensor in the stage graph.
  std::vector<std::map<TensorId, TensorId>> local(static_cast<size_t>(S));
  for (const StageGraph& sg : graphs)
    for (TensorId t = 0; t < sg.original.size(); ++t) local[static_cast<size_t>(sg.stage)][sg.original[t]] = t;
  // The links: every tensor a stage receives, from the stage that computes it.
  std::vector<std::tuple<int, int, TensorId>> crossing;  // (from, to, network tensor)
  for (const StageGraph& sg : graphs)
    for (TensorId r : sg.received) {
      const TensorId t = sg.original[r];
      const int64_t producer = micro.producer(t);
      if (producer < 0) return Internal(who + ": received tensor '" + micro.tensor(t).name + "' has no producer");
      crossing.emplace_back(stages.op_stage[static_cast<size_t>(producer)], sg.stage, t);
    }
  std::sort(crossing.begin(), crossing.end());
  std::vector<parallel::PipelineLink> links;
  for (const auto& [from, to, t] : crossing)
    links.push_back({.from = from, .to = to, .grad = micro.tensor(t).dtype == DType::F32});
  std::vector<double> fwd, bwd;
  for (double s : stages.stage_seconds) {
    fwd.push_back(s / 3);
    bwd.push_back(2 * s / 3);
  }
  SINKRT_ASSIGN_OR_RETURN(parallel::PipelineSchedule schedule,
                          parallel::PlanPipelineSchedule(S, config.micro_size, config.scheduler, links, fwd, bwd), who);

  PipelineStageGraph out;
  if (options.eval_program) {
    // eval_step: every micro-batch's forward in order, activations only.
    std::vector<parallel::PipelineLink> forward = links;
    for (parallel::PipelineLink& l : forward) l.grad = false;
    SINKRT_ASSIGN_OR_RETURN(out.eval_schedule,
                            parallel::PlanPipelineSchedule(S, config.micro_size, "gpipe", forward, fwd, bwd),
                            who + ": eval_step");
  }
  const int stage = StageOfRank(device_num, S, options.rank);
  const uint32_t per_stage = options.world_size / static_cast<uint32_t>(S);
  const uint32_t place = options.rank - static_cast<uint32_t>(stage) * per_stage;
  out.stage = stage;
  out.group = StageRanks(device_num, S, stage);

  // Dropout (passes/dropout.h): a stage's replicas are fed as data parallel
  // ranks are (train_loop: ShardBelowBatch over the replicas), so a
  // micro-batch's sample i is sample i·replicas + place of the replicas'
  // micro-batch; BuildPipelineStageGraph then stacks the micro-batches.
  SINKRT_RETURN_IF_ERROR(
      PlaceStageDropout(graphs[static_cast<size_t>(stage)].graph, options, per_stage, place, BatchOf(micro)), who);
  // SEMI_AUTO_PARALLEL: the stage graph partitioned over the stage's ranks
  // (parallel/pipeline/pipeline_shard.h); data parallel: each rank runs it whole.
  const StageGraph* mine_graph = &graphs[static_cast<size_t>(stage)];
  std::vector<TensorId> local_of(mine_graph->graph.tensors().size());
  for (TensorId t = 0; t < local_of.size(); ++t) local_of[t] = t;
  parallel::ShardedStage sharded_stage;
  if (sharded) {
    const TensorId loss_here = stage == S - 1 ? local[static_cast<size_t>(stage)].at(micro.loss()) : kInvalidTensor;
    SINKRT_ASSIGN_OR_RETURN(
        sharded_stage, parallel::ShardPipelineStage(*mine_graph, loss_here, per_stage, place, out.group.front()), who);
    mine_graph = &sharded_stage.local;
    local_of = sharded_stage.local_of;
    out.param_layouts = std::move(sharded_stage.param_layouts);
    out.mirror_groups = std::move(sharded_stage.mirror_groups);
    out.place = place;
  }

  StageGraph synced;
  SINKRT_ASSIGN_OR_RETURN(const bool sync, SyncStageBatchNorms(*mine_graph, out.group, options.rank, sharded, &synced),
                          who);
  if (sync) mine_graph = &synced;

  parallel::PipelineStageSpec spec;
  spec.stage = mine_graph;
  spec.schedule = &schedule;
  spec.eval_schedule = options.eval_program ? &out.eval_schedule : nullptr;
  spec.rank = options.rank;
  spec.optimizer = options.optimizer;
  for (int s = 0; s < S; ++s) spec.clip_span.ranks.push_back(static_cast<uint32_t>(s) * per_stage + place);
  spec.clip_span.position = static_cast<uint32_t>(stage);
  const std::map<TensorId, TensorId>& mine = local[static_cast<size_t>(stage)];
  for (size_t l = 0; l < crossing.size(); ++l) {
    const auto& [from, to, t] = crossing[l];
    if (from != stage && to != stage) continue;
    const int other = from == stage ? to : from;
    spec.links.push_back({.link = static_cast<int>(l),
                          .tensor = local_of[mine.at(t)],
                          .peer = static_cast<uint32_t>(other) * per_stage + place});
  }
  const TensorId loss = micro.loss();
  const int loss_stage = stages.op_stage[static_cast<size_t>(micro.producer(loss))];
  if (loss_stage != S - 1)
    return InvalidArgument(who + ": the loss '" + micro.tensor(loss).name + "' is computed in stage " +
                           std::to_string(loss_stage) + ", not in the last stage " + std::to_string(S - 1));
  if (stage == S - 1) spec.loss = local_of[mine.at(loss)];
  SINKRT_ASSIGN_OR_RETURN(out.tg, parallel::BuildPipelineStageGraph(spec), who);
  out.schedule = std::move(schedule);
  return out;
}

}  // namespace sinkrt::host::compiler
