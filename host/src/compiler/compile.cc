// Compile(): the passes in order — training graph, lowering, memory plan,
// writer (docs/design/compiler.md) — and the report that tools and tests read.
#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "host/src/compiler/compile_pipeline.h"
#include "host/src/compiler/graph_hash.h"
#include "host/src/compiler/lowering.h"
#include "host/src/compiler/memory_limited_search.h"
#include "host/src/compiler/memory_planner.h"
#include "host/src/compiler/stream_writer.h"
#include "host/src/parallel/partition/partition.h"
#include "host/src/passes/accumulation.h"
#include "host/src/passes/amp.h"
#include "host/src/passes/dropout.h"
#include "host/src/passes/sync_batch_norm.h"
#include "host/src/passes/training_graph.h"
#include "sinkrt/host/compiler.h"
#include "sinkrt/runtime/stream_format.h"

namespace sinkrt::host {
namespace {

// Every rank of the world, ascending.
std::vector<uint32_t> WorldGroup(uint32_t world_size) {
  std::vector<uint32_t> all(world_size);
  for (uint32_t r = 0; r < world_size; ++r) all[r] = r;
  return all;
}

// SyncBatchNorm's group (docs/guide/normalization.md): the ranks that
// split its batch. Data parallel: the world. SEMI_AUTO: the ranks along
// the device-matrix axis that splits x's dim 0 (none: this rank alone).
passes::SyncGroupOf SyncGroups(const CompileOptions& o, const parallel::LocalGraph* local) {
  return [&o, local](const OpNode& op) -> std::vector<uint32_t> {
    if (o.parallel_mode == ParallelMode::DataParallel) return WorldGroup(o.world_size);
    if (!local || op.inputs.empty() || op.inputs[0] >= local->layouts.size()) return {o.rank};
    const parallel::TensorLayout& l = local->layouts[op.inputs[0]];
    if (l.tensor_map.empty() || l.tensor_map[0] < 0) return {o.rank};
    const int axis = l.tensor_map[0];
    std::vector<uint32_t> group;
    for (int64_t r : parallel::GroupAlong(l.device_matrix, std::span<const int>(&axis, 1), o.rank))
      group.push_back(static_cast<uint32_t>(r));
    return group;
  };
}

Status CheckOptions(const CompileOptions& o) {
  if (o.world_size == 0) return InvalidArgument("compile: world_size must be at least 1");
  if (o.rank >= o.world_size)
    return InvalidArgument("compile: rank " + std::to_string(o.rank) + " is outside world_size " +
                           std::to_string(o.world_size));
  // The same ranges the device's verifier enforces, refused here with the
  // option's name rather than at load.
  if (o.arena_alignment < 8 || o.arena_alignment > 4096 || (o.arena_alignment & (o.arena_alignment - 1)) != 0)
    return InvalidArgument("compile: arena_alignment " + std::to_string(o.arena_alignment) +
                           " must be a power of two in [8, 4096]");
  if (o.queue_capacity < 1 || o.queue_capacity > 4096)
    return InvalidArgument("compile: queue_capacity " + std::to_string(o.queue_capacity) + " must be in [1, 4096]");
  if (o.grad_accumulation < 1 || o.grad_accumulation > 1024)
    return InvalidArgument("compile: grad_accumulation " + std::to_string(o.grad_accumulation) +
                           " must be in [1, 1024]");
  if (o.grad_accumulation > 1 && o.pipeline.stages > 1)
    return Unimplemented("compile: grad_accumulation " + std::to_string(o.grad_accumulation) +
                         " with pipeline_stages " + std::to_string(o.pipeline.stages) +
                         " is not supported: the pipeline's micro_size already accumulates gradients over "
                         "micro-batches");
  if (o.grad_accumulation > 1 &&
      (o.parallel_mode == ParallelMode::SemiAutoParallel || o.parallel_mode == ParallelMode::AutoParallel))
    return Unimplemented("compile: grad_accumulation with " + std::string(ParallelModeName(o.parallel_mode)) +
                         " is not supported yet (stand_alone and data_parallel are)");
  if (o.amp_level != AmpLevel::O0 && o.pipeline.stages > 1)
    return Unimplemented(std::string("compile: amp_level ") + AmpLevelName(o.amp_level) + " with pipeline_stages " +
                         std::to_string(o.pipeline.stages) +
                         " is not supported yet (stand_alone, data_parallel "
                         "and semi_auto_parallel are)");
  SINKRT_RETURN_IF_ERROR(ValidateLossScaleManager(o.loss_scale), "compile");
  if (o.loss_scale.enabled() && o.pipeline.stages > 1)
    return Unimplemented(
        "compile: loss scaling with pipeline stages is not supported yet (stand_alone, "
        "data_parallel, semi_auto_parallel and auto_parallel are)");
  if (o.enable_parallel_optimizer && o.parallel_mode != ParallelMode::StandAlone) {
    if (o.pipeline.stages > 1)
      return Unimplemented("compile: enable_parallel_optimizer with pipeline_stages " +
                           std::to_string(o.pipeline.stages) + " is not supported yet (data_parallel is)");
    if (o.grad_accumulation > 1)
      return Unimplemented("compile: enable_parallel_optimizer with grad_accumulation " +
                           std::to_string(o.grad_accumulation) + " is not supported yet");
  }
  // MindSpore's context checks and messages.
  SINKRT_RETURN_IF_ERROR(ParallelContextFor(o).Validate({ParallelMode::StandAlone, ParallelMode::DataParallel,
                                                         ParallelMode::SemiAutoParallel, ParallelMode::AutoParallel}));
  return ValidateOptimizer(o.optimizer).WithContext("compile: optimizer");
}

// Lays the step programs end to end on one timeline (train_step, eval_step,
// predict_step) so that the planner sees their transients as never live
// together.
Result<std::vector<compiler::BufferLifetime>> Lifetimes(const compiler::LoweredStream& s) {
  int32_t tasks[4] = {};  // by ProgramKind
  for (const compiler::ProgramDef& p : s.programs)
    tasks[static_cast<int>(p.kind)] = static_cast<int32_t>(p.tasks.size());
  auto base_of = [&](ProgramKind kind) {
    switch (kind) {
      case ProgramKind::EvalStep:
        return tasks[1];
      case ProgramKind::PredictStep:
        return tasks[1] + tasks[2];
      default:
        return 0;
    }
  };
  std::vector<compiler::BufferLifetime> out;
  out.reserve(s.buffers.size());
  for (const compiler::BufferDef& b : s.buffers) {
    compiler::BufferLifetime l{
        .bytes = b.bytes, .persistent = b.persistent, .view_of = b.view_of, .view_offset = b.view_offset};
    // Lowering already gave a view group's root the whole group's lifetime;
    // a view takes it too (one it has alone may be empty: a piece nothing reads).
    const compiler::BufferDef& own = b.view_of >= 0 ? s.buffers[b.view_of] : b;
    if (!b.persistent) {
      if (own.first_use < 0) return Internal("compile: transient buffer '" + b.name + "' is used by no task");
      const int32_t base = base_of(b.program);
      l.first_use = base + own.first_use;
      l.last_use = base + own.last_use;
    }
    out.push_back(l);
  }
  return out;
}

std::string Size(uint64_t bytes) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%llu bytes (%.2f GiB)", static_cast<unsigned long long>(bytes),
                static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

std::string Describe(const compiler::BufferDef& b) {
  return "'" + b.name + "' " + DTypeName(b.dtype) + " " + ShapeToString(b.shape) + " of " + Size(b.bytes);
}

// The device refuses an arena above kMaxArenaBytes (the verifier's header
// check); refusing it here names the tensors that made it so large. The
// largest buffer, when above the limit, is named alone and before planning,
// so the planner never sums sizes that could wrap.
Status CheckBufferSizes(const compiler::LoweredStream& s) {
  const compiler::BufferDef* largest = nullptr;
  for (const compiler::BufferDef& b : s.buffers)
    if (!largest || b.bytes > largest->bytes) largest = &b;
  if (largest && largest->bytes > kMaxArenaBytes)
    return InvalidArgument("tensor " + Describe(*largest) + " is larger than the device's arena limit of " +
                           Size(kMaxArenaBytes));
  return Status::Ok();
}

Status CheckArenaSize(const compiler::LoweredStream& s, uint64_t arena_bytes) {
  if (arena_bytes <= kMaxArenaBytes) return Status::Ok();
  std::vector<const compiler::BufferDef*> largest;
  for (const compiler::BufferDef& b : s.buffers) largest.push_back(&b);
  const size_t shown = std::min<size_t>(3, largest.size());
  std::partial_sort(largest.begin(), largest.begin() + shown, largest.end(),
                    [](const compiler::BufferDef* a, const compiler::BufferDef* b) {
                      return a->bytes != b->bytes ? a->bytes > b->bytes : a < b;  // ties in table order
                    });
  std::string names;
  for (size_t i = 0; i < shown; ++i) names += (i ? ", " : "") + Describe(*largest[i]);
  return InvalidArgument("arena of " + Size(arena_bytes) + " is larger than the device's limit of " +
                         Size(kMaxArenaBytes) + "; the largest buffers: " + names);
}

// SEMI_AUTO_PARALLEL: this rank's local forward graph (docs/design/sharding.md),
// and each of its parameters' mirror group.
Result<parallel::LocalGraph> PartitionForward(const Graph& forward, const CompileOptions& o) {
  if (!forward.status().ok()) return forward.status();
  std::vector<parallel::Strategy> strategies;
  for (const OpNode& op : forward.ops()) strategies.push_back(op.strategy);
  SINKRT_ASSIGN_OR_RETURN(parallel::PartitionPlan plan, parallel::PlanPartition(forward, strategies,
                                                                                {.device_num = o.world_size,
                                                                                 .full_batch = o.full_batch,
                                                                                 .dataset_strategy = o.dataset_strategy,
                                                                                 .activation_inputs = {}}));
  return parallel::PartitionForRank(forward, plan, o.rank);
}

// Every buffer and queue column of a sharded tensor gets its layout and this
// rank's slice (fb::Slice): the forward tensors from the partition, each
// gradient and each optimizer state from its parameter.
// `layout_of`: per tensor of the training graph, its layout (nullptr: a
// whole tensor), of which the gradients and optimizer states are filled in
// here from their parameters'.
void AttachSlices(compiler::LoweredStream& lowered, const passes::TrainingGraph& tg,
                  std::vector<const parallel::TensorLayout*> layout_of, int64_t rank) {
  const Graph& g = tg.graph;
  for (const ParamGrad& pg : tg.grads) layout_of[pg.grad] = layout_of[pg.param];
  for (const OpNode& op : g.ops()) {
    if (op.op != OpCode::SgdUpdate && op.op != OpCode::MomentumUpdate && op.op != OpCode::AdamUpdate &&
        op.op != OpCode::AdamWeightDecay && op.op != OpCode::LambNorms)
      continue;
    const TensorId param = op.inputs[0];
    for (size_t k = 2; k < op.inputs.size(); ++k)
      if (g.tensor(op.inputs[k]).kind == TensorKind::OptState && g.tensor(op.inputs[k]).shape == g.tensor(param).shape)
        layout_of[op.inputs[k]] = layout_of[param];
  }
  auto slice = [&](TensorId t) -> std::optional<compiler::SliceInfo> {
    if (t == kInvalidTensor || t >= layout_of.size() || !layout_of[t]) return std::nullopt;
    const parallel::TensorLayout& l = *layout_of[t];
    // A buffer that is not exactly the slice (none today) gets no slice
    // rather than a wrong one.
    if (parallel::SliceShape(l) != g.tensor(t).shape) return std::nullopt;
    return compiler::SliceInfo{.global_shape = l.shape,
                               .offset = parallel::SliceOffset(l, rank),
                               .device_matrix = l.device_matrix,
                               .tensor_map = l.tensor_map,
                               .partial = l.partial};
  };
  for (compiler::BufferDef& b : lowered.buffers) b.slice = slice(b.tensor);
  for (compiler::QueueDef& q : lowered.queues)
    for (compiler::QueueColumnDef& c : q.columns) c.slice = slice(c.tensor);
}

// SEMI_AUTO_PARALLEL: every forward tensor's layout from the partition.
void AttachSlices(compiler::LoweredStream& lowered, const passes::TrainingGraph& tg, const parallel::LocalGraph& local,
                  int64_t rank) {
  std::vector<const parallel::TensorLayout*> layout_of(tg.graph.tensors().size(), nullptr);
  for (TensorId t = 0; t < local.layouts.size() && t < layout_of.size(); ++t)
    if (!local.layouts[t].device_matrix.empty()) layout_of[t] = &local.layouts[t];
  AttachSlices(lowered, tg, std::move(layout_of), rank);
}

// Optimizer parallel: a sharded parameter's optimizer state, and its block
// (shown by sinkdump), are dim-0 block `position` of `parts` of a tensor of
// the parameter's shape, so that the host reads and writes whole state
// (checkpoints stay strategy-independent). The gradient's block gets none:
// the gradient is whole in the arena.
void AttachOptimizerSlices(compiler::LoweredStream& lowered, const passes::TrainingGraph& tg) {
  const Graph& g = tg.graph;
  std::map<TensorId, const passes::OptimizerShard*> shard_of;  // update target -> shard
  for (const passes::OptimizerShard& s : tg.optimizer_shards) shard_of[s.param_slice] = &s;
  std::map<TensorId, const passes::OptimizerShard*> sliced;  // optimizer state or block -> shard
  for (const OpNode& op : g.ops()) {
    if (op.op != OpCode::MomentumUpdate && op.op != OpCode::AdamUpdate && op.op != OpCode::AdamWeightDecay &&
        op.op != OpCode::LambNorms)
      continue;
    auto it = shard_of.find(op.inputs[0]);
    if (it == shard_of.end()) continue;
    sliced[op.inputs[0]] = it->second;
    for (size_t k = 2; k < op.inputs.size(); ++k)
      if (g.tensor(op.inputs[k]).kind == TensorKind::OptState &&
          g.tensor(op.inputs[k]).shape == g.tensor(op.inputs[0]).shape)
        sliced[op.inputs[k]] = it->second;
  }
  std::map<TensorId, const compiler::SliceInfo*> param_slice;  // semi-auto: the parameter's own slice
  for (const compiler::BufferDef& b : lowered.buffers)
    if (b.persistent && b.slice && b.role == BufferRole::Param) param_slice[b.tensor] = &*b.slice;
  for (compiler::BufferDef& b : lowered.buffers) {
    auto it = sliced.find(b.tensor);
    if (it == sliced.end() || !b.persistent) continue;
    const passes::OptimizerShard& s = *it->second;
    const TensorId param = tg.grads[s.grad].param;
    const Shape& whole = g.tensor(param).shape;
    compiler::SliceInfo info{.global_shape = whole,
                             .offset = std::vector<int64_t>(whole.size(), 0),
                             .device_matrix = {static_cast<int64_t>(s.parts)},
                             .tensor_map = std::vector<int>(whole.size(), -1),
                             .partial = {}};
    info.tensor_map[0] = 0;
    // Under semi-auto the parameter is itself a slice: the block is a part
    // of that slice of the whole tensor. Its layout keeps the parameter's
    // device matrix and map (which cannot say that dim 0 is cut again);
    // the offset and the whole shape, which the host reads, are exact.
    if (auto p = param_slice.find(param); p != param_slice.end()) info = *p->second;
    info.offset[0] += s.row_begin;
    b.slice = std::move(info);
  }
}

// A pipeline stage under SEMI_AUTO_PARALLEL: the parameters' layouts over
// the stage's ranks (its queues and reports are whole,
// parallel/pipeline/pipeline_shard.h), `place` being this rank's among them.
void AttachParamSlices(compiler::LoweredStream& lowered, const passes::TrainingGraph& tg,
                       const std::map<std::string, parallel::TensorLayout>& layouts, uint32_t place) {
  std::vector<const parallel::TensorLayout*> layout_of(tg.graph.tensors().size(), nullptr);
  for (const ParamGrad& pg : tg.grads)
    if (auto it = layouts.find(tg.graph.tensor(pg.param).name); it != layouts.end()) layout_of[pg.param] = &it->second;
  AttachSlices(lowered, tg, std::move(layout_of), place);
}

// The passes after lowering: memory plan, writer, verifier, report.
Result<CompiledStream> EmitStream(const Graph& forward, const CompileOptions& options, const passes::TrainingGraph& tg,
                                  const compiler::LoweredStream& lowered) {
  SINKRT_RETURN_IF_ERROR(CheckBufferSizes(lowered), "compile graph '" + forward.name() + "'");
  SINKRT_ASSIGN_OR_RETURN(std::vector<compiler::BufferLifetime> lifetimes, Lifetimes(lowered));
  SINKRT_ASSIGN_OR_RETURN(compiler::MemoryPlan plan,
                          compiler::PlanMemory(std::move(lifetimes), options.arena_alignment),
                          "compile graph '" + forward.name() + "'");
  SINKRT_RETURN_IF_ERROR(CheckArenaSize(lowered, plan.arena_bytes), "compile graph '" + forward.name() + "'");

  const uint64_t stream_hash = compiler::StreamHash(GraphHash(forward), options);
  SINKRT_ASSIGN_OR_RETURN(
      std::vector<uint8_t> bytes,
      compiler::WriteTaskStream(lowered, plan,
                                {.rank = options.rank, .world_size = options.world_size, .graph_hash = stream_hash}));
  // Verified once, where the bytes are made; everything downstream carries
  // the VerifiedStream.
  SINKRT_ASSIGN_OR_RETURN(VerifiedStream verified, VerifyTaskStream(std::move(bytes)),
                          "compile graph '" + forward.name() + "': the task stream written");
  CompiledStream out{.stream = std::move(verified),
                     .report = {},
                     .graph_hash = stream_hash,
                     .input_columns = {},
                     .predict_columns = {}};

  CompileReport& r = out.report;
  r.arena_bytes = plan.arena_bytes;
  r.liveness_lower_bound = plan.liveness_lower_bound;
  r.persistent_bytes = plan.persistent_bytes;
  r.fused_kernels = lowered.fused_kernels;
  for (const compiler::ProgramDef& p : lowered.programs) {
    if (p.kind == ProgramKind::TrainStep) {
      r.train_tasks = p.tasks.size();
      r.comm_tasks = p.comm_tasks.size();
    }
    if (p.kind == ProgramKind::EvalStep) r.eval_tasks = p.tasks.size();
    if (p.kind == ProgramKind::PredictStep) r.predict_tasks = p.tasks.size();
  }
  const int32_t last_task = static_cast<int32_t>(std::max({r.train_tasks, r.eval_tasks, r.predict_tasks})) - 1;
  for (size_t i = 0; i < lowered.buffers.size(); ++i) {
    const compiler::BufferDef& b = lowered.buffers[i];
    PlannedBuffer pb{.name = b.name, .offset = plan.offsets[i], .bytes = b.bytes, .role = b.role};
    if (b.persistent) {
      pb.program = ProgramKind::Init;
      pb.first_use = 0;
      pb.last_use = last_task;
    } else if (b.view_of >= 0) {
      // Its bytes are its root's and so is its lifetime: reported on the root
      // alone, the view's own range is empty, so that a reader that treats
      // every buffer as its own interval still counts the group once.
      pb.program = b.program;
      pb.first_use = 0;
      pb.last_use = -1;
      pb.view_of = lowered.buffers[b.view_of].name;
    } else {
      pb.program = b.program;
      pb.first_use = b.first_use;
      pb.last_use = b.last_use;
    }
    r.buffers.push_back(std::move(pb));
  }
  r.activation_bytes = ArenaBytesOf(r.buffers, BufferRole::Activation);
  r.optimizer_shards = tg.optimizer_shard_report;
  for (const compiler::BucketDef& b : lowered.buckets) {
    if (b.kind != compiler::BucketDef::Kind::AllReduce) continue;
    GradientBucket gb;
    for (uint32_t i : b.buffers) gb.gradients.push_back(lowered.buffers[i].name);
    const uint32_t first = b.buffers.front(), last = b.buffers.back();
    gb.offset = plan.offsets[first];
    gb.bytes = plan.offsets[last] + lowered.buffers[last].bytes - gb.offset;
    r.buckets.push_back(std::move(gb));
  }
  for (TensorId t : tg.train_inputs.empty() ? tg.inputs : tg.train_inputs)
    out.input_columns.push_back(tg.graph.tensor(t).name);
  for (TensorId t : tg.predict_inputs) out.predict_columns.push_back(tg.graph.tensor(t).name);
  return out;
}

// Lamb and clipping under SEMI_AUTO_PARALLEL: per parameter this rank holds a slice of,
// the ranks whose slices together make the parameter once: the ranks
// holding each slice (those of one offset) in ascending order, and of each
// the one at this rank's place among the holders of its own slice. Every
// rank computes the same classes, so the groups agree.
std::map<TensorId, NormGroup> SliceNormGroups(const parallel::LocalGraph& local, uint32_t world_size, uint32_t rank) {
  std::map<TensorId, NormGroup> out;
  for (const parallel::LocalParameter& p : local.parameters) {
    if (p.layout.device_matrix.empty() || parallel::SliceShape(p.layout) == p.layout.shape) continue;
    std::map<std::vector<int64_t>, std::vector<uint32_t>> holders;  // slice offset -> ranks, ascending
    for (uint32_t r = 0; r < world_size; ++r) holders[parallel::SliceOffset(p.layout, r)].push_back(r);
    const std::vector<uint32_t>& mine = holders[parallel::SliceOffset(p.layout, rank)];
    const size_t place = static_cast<size_t>(std::find(mine.begin(), mine.end(), rank) - mine.begin());
    NormGroup group;
    for (const auto& [offset, ranks] : holders)
      if (place < ranks.size()) group.ranks.push_back(ranks[place]);
    std::sort(group.ranks.begin(), group.ranks.end());
    group.position =
        static_cast<uint32_t>(std::find(group.ranks.begin(), group.ranks.end(), rank) - group.ranks.begin());
    out[p.local] = std::move(group);
  }
  return out;
}

// A pipeline stage (compiler/compile_pipeline.h): its training graph, its
// transfers and buckets on the comm stream (LoweringOptions::pipeline), the
// gradients reduced over its stage's ranks.
Result<CompiledStream> CompilePipelineStage(const Graph& forward, const CompileOptions& options) {
  const bool sharded = options.parallel_mode == ParallelMode::SemiAutoParallel;
  // Under data parallel each stage's norm is all-reduced over the stages
  // (BuildPipelineStage's clip_span); a sharded stage's slices would need
  // their groups' sums on top.
  if (sharded && options.optimizer.clip_grad_norm > 0)
    return Unimplemented("compile graph '" + forward.name() + "': gradient clipping by global norm (clip_grad_norm " +
                         std::to_string(options.optimizer.clip_grad_norm) +
                         ") is not supported with pipeline stages under semi_auto_parallel yet (data_parallel "
                         "stages, and semi_auto_parallel without stages, clip)");
  SINKRT_ASSIGN_OR_RETURN(compiler::PipelineStageGraph stage, compiler::BuildPipelineStage(forward, options));
  // A stage's Lamb sees its slices only, and stages reduce no norms yet.
  if (sharded && options.optimizer.kind == OptimizerKind::Lamb)
    for (const auto& [name, layout] : stage.param_layouts)
      if (!layout.device_matrix.empty() && parallel::SliceShape(layout) != layout.shape)
        return Unimplemented("compile graph '" + forward.name() + "': Lamb cannot update parameter '" + name +
                             "' under pipeline stages with semi_auto_parallel: it holds a slice " +
                             ShapeToString(parallel::SliceShape(layout)) + " of " + ShapeToString(layout.shape) +
                             ", and Lamb's trust ratio needs the whole parameter's norm (not reduced over a "
                             "stage's slices yet); use AdamWeightDecay or a strategy that keeps it whole");
  const Graph& g = stage.tg.graph;
  // Data parallel: the stage's replicas average their gradients.
  // SEMI_AUTO_PARALLEL: each parameter's mirror group sums its slice's
  // (the loss is whole, so its seed already carries the mean).
  std::vector<std::vector<uint32_t>> grad_groups;
  bool reduces = false;
  for (const ParamGrad& pg : stage.tg.grads) {
    std::vector<uint32_t> group = stage.group;
    if (sharded) {
      auto it = stage.mirror_groups.find(g.tensor(pg.param).name);
      group = it != stage.mirror_groups.end() ? it->second : std::vector<uint32_t>{options.rank};
    }
    reduces = reduces || group.size() > 1;
    grad_groups.push_back(std::move(group));
  }
  if (!reduces) grad_groups.clear();
  SINKRT_ASSIGN_OR_RETURN(compiler::LoweredStream lowered,
                          compiler::Lower(stage.tg, {.fuse = options.fuse,
                                                     .eval_program = options.eval_program,
                                                     .predict_program = false,
                                                     .queue_capacity = options.queue_capacity,
                                                     .arena_alignment = options.arena_alignment,
                                                     .data_parallel = reduces,
                                                     .world_size = options.world_size,
                                                     .gradients_mean = options.gradients_mean && !sharded,
                                                     .parameter_broadcast = false,
                                                     .comm_fusion = options.comm_fusion,
                                                     .grad_groups = std::move(grad_groups),
                                                     .pipeline = true}),
                          "compile graph '" + forward.name() + "' stage " + std::to_string(stage.stage));
  if (sharded) AttachParamSlices(lowered, stage.tg, stage.param_layouts, stage.place);
  SINKRT_ASSIGN_OR_RETURN(CompiledStream out, EmitStream(forward, options, stage.tg, lowered));
  out.report.pipeline_stage = stage.stage;
  out.report.predicted_bubble = parallel::PredictedBubble(stage.schedule);
  return out;
}

}  // namespace

uint64_t ArenaBytesOf(const std::vector<PlannedBuffer>& buffers, BufferRole role) {
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  for (const PlannedBuffer& b : buffers)
    if (b.role == role) spans.emplace_back(b.offset, b.offset + b.bytes);
  std::sort(spans.begin(), spans.end());
  uint64_t covered = 0, end = 0;
  for (const auto& [lo, hi] : spans) {
    if (hi <= end) continue;
    covered += hi - std::max(lo, end);
    end = hi;
  }
  return covered;
}

ParallelContext ParallelContextFor(const CompileOptions& o) {
  const bool stand_alone = o.parallel_mode == ParallelMode::StandAlone;
  return ParallelContext{.mode = o.parallel_mode,
                         .device_num = stand_alone ? 1 : static_cast<int>(std::min<uint32_t>(o.world_size, 1u << 30)),
                         .global_rank = stand_alone ? 0 : static_cast<int>(std::min<uint32_t>(o.rank, 1u << 30)),
                         .gradients_mean = o.gradients_mean,
                         .parameter_broadcast = o.parameter_broadcast,
                         .full_batch = o.full_batch,
                         .dataset_strategy = o.dataset_strategy,
                         .search_mode = o.search_mode,
                         .device_memory_capacity = o.device_memory,
                         .calibration_file = o.calibration,
                         .fully_use_devices = o.fully_use_devices,
                         .comm_fusion = o.comm_fusion,
                         .enable_parallel_optimizer = o.enable_parallel_optimizer,
                         .parallel_optimizer_config = o.parallel_optimizer_config};
}

AutoParallelOptions AutoParallelOptionsFor(const CompileOptions& o) {
  AutoParallelOptions a;
  a.device_num = o.world_size;
  a.search_mode = o.search_mode;
  a.device_memory = o.device_memory;
  a.calibration = o.calibration;
  a.transport = o.search_transport;
  a.fully_use_devices = o.fully_use_devices;
  a.optimizer = o.optimizer;
  a.full_batch = o.full_batch;
  a.dataset_strategy = o.dataset_strategy;
  return a;
}

Result<CompiledStream> Compile(const Graph& forward, const CompileOptions& options) {
  SINKRT_RETURN_IF_ERROR(CheckOptions(options));
  if (options.parallel_mode == ParallelMode::AutoParallel) {
    // The search works on a copy, so that `forward` stays unplanned; what
    // it sets compiles as any semi-auto graph would (CompileJob plans once
    // for every rank instead of once per Compile).
    if (!forward.status().ok()) return forward.status();
    CompileOptions semi = options;
    semi.parallel_mode = ParallelMode::SemiAutoParallel;
    SINKRT_ASSIGN_OR_RETURN(
        auto searched,
        compiler::SearchAndCompileWithinLimit<CompiledStream>(
            forward, AutoParallelOptionsFor(options), [&](const Graph& planned) { return Compile(planned, semi); },
            [](const CompiledStream& s) { return s.report.arena_bytes; }),
        "compile graph '" + forward.name() + "'");
    CompiledStream out = std::move(searched.first);
    out.report.auto_parallel = std::move(searched.second);
    return out;
  }
  // Recomputation marks live on the network's ops; the partitioner and the
  // micro-batch cut build new ops without them.
  const bool recompute =
      std::any_of(forward.ops().begin(), forward.ops().end(), [](const OpNode& op) { return !op.recompute.empty(); });
  if (recompute && (options.pipeline.stages > 1 || options.parallel_mode == ParallelMode::SemiAutoParallel))
    return Unimplemented("compile graph '" + forward.name() + "': recompute is not supported with " +
                         (options.pipeline.stages > 1 ? std::string("pipeline stages")
                                                      : std::string(ParallelModeName(options.parallel_mode))) +
                         " yet (stand_alone and data_parallel are)");
  if (options.pipeline.stages > 1) return CompilePipelineStage(forward, options);
  const bool sharded = options.parallel_mode == ParallelMode::SemiAutoParallel;
  std::optional<parallel::LocalGraph> local;
  if (sharded) {
    SINKRT_ASSIGN_OR_RETURN(local, PartitionForward(forward, options),
                            "compile graph '" + forward.name() + "' for rank " + std::to_string(options.rank));
  }
  // gradients_mean under SEMI_AUTO_PARALLEL: the gradient of the mean of
  // the loss's D data-parallel slices. Each rank's loss is its slice's mean
  // (partial along D ranks), so backward seeds 1/D and the mirror groups
  // sum. This is the mean over the mirror group when every parameter's
  // group is the D replicas (the data and DPxMP presets), and stays right
  // when it is not: a parameter whose op sees the whole batch while the
  // loss splits it (no group, yet 1/D), or a plan that splits the batch
  // more ways before the loss than at it (a group of 2D ranks, yet 1/D).
  float loss_seed = 1.0f;
  if (sharded && options.gradients_mean) {
    const TensorId loss = local->graph.loss();
    const parallel::TensorLayout& l = local->layouts[loss];
    int64_t slices = 1;
    for (int a : l.partial) slices *= parallel::AxisSize(l.device_matrix, a);
    loss_seed = 1.0f / static_cast<float>(slices);
  }
  // Mixed precision on the graph this rank runs (after partitioning: the
  // amp pass keeps tensor ids, so the layouts stay valid).
  SINKRT_ASSIGN_OR_RETURN(Graph amp, passes::ApplyAmp(sharded ? local->graph : forward, options.amp_level),
                          "compile graph '" + forward.name() + "'");
  // Dropout's place in the global tensors (passes/dropout.h).
  passes::DropoutPlacement placement;
  if (options.parallel_mode == ParallelMode::DataParallel) {
    placement.replicas = options.world_size;
    placement.replica = options.rank;
    for (const TensorInfo& t : amp.tensors())  // the per-rank batch: the first input's dim 0
      if (t.kind == TensorKind::Input && !t.shape.empty()) {
        placement.batch = t.shape[0];
        break;
      }
  }
  if (sharded) {
    placement.block_of = [&](TensorId t) -> std::optional<passes::DropoutBlock> {
      if (t >= local->layouts.size() || local->layouts[t].device_matrix.empty()) return std::nullopt;
      const parallel::TensorLayout& l = local->layouts[t];
      if (parallel::SliceShape(l) != amp.tensor(t).shape) return std::nullopt;
      return passes::DropoutBlock{.global_shape = l.shape, .offset = parallel::SliceOffset(l, options.rank)};
    };
    // The batch's data-parallel split, as Model reads it from the inputs'
    // slices (PlanRankFeed: the first column's): its groups are fed
    // interleaved, not in blocks.
    for (TensorId t = 0; t < amp.tensors().size(); ++t) {
      const TensorInfo& in = amp.tensor(t);
      if (in.kind != TensorKind::Input || in.shape.empty() || in.shape[0] < 1) continue;
      if (t < local->layouts.size() && !local->layouts[t].device_matrix.empty() &&
          local->layouts[t].shape[0] % in.shape[0] == 0) {
        placement.global_batch = local->layouts[t].shape[0];
        placement.batch_groups = placement.global_batch / in.shape[0];
      }
      break;
    }
  }
  SINKRT_RETURN_IF_ERROR(passes::PlaceDropout(amp, placement), "compile graph '" + forward.name() + "'");
  SINKRT_ASSIGN_OR_RETURN(
      amp, passes::ExpandSyncBatchNorm(amp, SyncGroups(options, local ? &*local : nullptr), options.rank),
      "compile graph '" + forward.name() + "'");
  // Gradient accumulation: the gradient of the K batches' mean loss.
  const int accumulate = options.grad_accumulation;
  // Optimizer parallel (data parallel): rank r updates block r.
  // Optimizer parallel: a parameter's update is shared by the ranks that
  // hold it whole (data parallel) or hold the same slice of it (semi-auto:
  // its mirror group).
  std::optional<parallel::OptimizerSharding> zero;
  if (options.enable_parallel_optimizer && options.parallel_mode != ParallelMode::StandAlone) {
    zero = parallel::OptimizerSharding{.rank = options.rank,
                                       .group = WorldGroup(options.world_size),
                                       .groups = {},
                                       .threshold_kb = options.parallel_optimizer_config.threshold_kb,
                                       .alignment = options.arena_alignment};
    if (sharded)
      for (const parallel::LocalParameter& p : local->parameters) zero->groups[p.local] = p.mirror_group;
  }
  std::map<TensorId, NormGroup> slice_norm_groups;
  if (sharded && (options.optimizer.kind == OptimizerKind::Lamb || options.optimizer.clip_grad_norm > 0))
    slice_norm_groups = SliceNormGroups(*local, options.world_size, options.rank);
  SINKRT_ASSIGN_OR_RETURN(
      passes::TrainingGraph tg,
      passes::BuildTrainingGraph(amp, options.optimizer, options.eval_program, options.predict_program,
                                 /*accuracy_from_loss=*/sharded, loss_seed / static_cast<float>(accumulate),
                                 options.loss_scale, sharded ? WorldGroup(options.world_size) : std::vector<uint32_t>{},
                                 options.rank, zero ? &*zero : nullptr, slice_norm_groups));
  if (accumulate > 1) SINKRT_RETURN_IF_ERROR(passes::AccumulateGradients(tg, accumulate));
  std::vector<std::vector<uint32_t>> grad_groups;
  if (sharded) {
    for (const ParamGrad& pg : tg.grads) {
      std::vector<uint32_t> group = {options.rank};
      for (const parallel::LocalParameter& p : local->parameters)
        if (p.local == pg.param) group = p.mirror_group;
      grad_groups.push_back(std::move(group));
    }
  }
  SINKRT_ASSIGN_OR_RETURN(
      compiler::LoweredStream lowered,
      compiler::Lower(tg, {.fuse = options.fuse,
                           .eval_program = options.eval_program,
                           .predict_program = options.predict_program,
                           .queue_capacity = options.queue_capacity,
                           .arena_alignment = options.arena_alignment,
                           .data_parallel = options.parallel_mode == ParallelMode::DataParallel || sharded,
                           .world_size = options.world_size,
                           .gradients_mean = options.gradients_mean && !sharded,  // sharded: the seed is 1/D
                           .parameter_broadcast = options.parameter_broadcast && !sharded,
                           .comm_fusion = options.comm_fusion,
                           .grad_groups = std::move(grad_groups)}));
  if (sharded) AttachSlices(lowered, tg, *local, options.rank);
  AttachOptimizerSlices(lowered, tg);
  return EmitStream(forward, options, tg, lowered);
}

}  // namespace sinkrt::host
