#include "host/src/compiler/lowering.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include "host/src/compiler/buffer_table.h"
#include "host/src/compiler/fusion.h"
#include "host/src/compiler/metric_sums.h"
#include "host/src/compiler/program_plan.h"
#include "host/src/compiler/views.h"
#include "host/src/parallel/data_parallel/gradient_reduction.h"
#include "host/src/parallel/pipeline/pipeline_comm.h"

namespace sinkrt::host::compiler {
namespace {

// ---- data parallel: the compiler's side of parallel/data_parallel/gradient_reduction.h ----

// Each gradient of tg.grads (parameter order) with the train_step compute
// position of the task that writes it last: GetNext, if any, is position 0.
Result<std::vector<parallel::FusionGradient>> TrainGradients(const passes::TrainingGraph& tg, const ProgramPlan& train) {
  const Graph& g = tg.graph;
  // Task positions: GetNext first; a sharded graph's AllReduce op becomes
  // two tasks (a Copy, then the in-place AllReduce).
  int64_t pos = train.inputs.empty() ? -1 : 0;
  std::map<TensorId, int64_t> written;
  for (size_t k = 0; k < train.kernels.size(); ++k) {
    const KernelPlan& kernel = train.kernels[k];
    pos += g.ops()[kernel.ops[0]].op == fb::OpCode::AllReduce ? 2 : 1;
    for (TensorId t : kernel.outputs) written[t] = pos;
    for (size_t slot : MutatedInputs(g.ops()[kernel.ops[0]].op))
      if (slot < kernel.inputs.size()) written[kernel.inputs[slot]] = pos;
  }
  std::vector<parallel::FusionGradient> out;
  for (const ParamGrad& pg : tg.grads) {
    const TensorInfo& info = g.tensor(pg.grad);
    auto it = written.find(pg.grad);
    if (it == written.end())
      return Internal("data parallel: no train_step task writes the gradient '" + info.name + "'");
    SINKRT_ASSIGN_OR_RETURN(uint64_t bytes, BufferBytes(info));
    out.push_back({.name = info.name, .bytes = bytes, .dtype = info.dtype, .written_at = it->second});
  }
  return out;
}

// The gradient buckets: under data parallel, PlanGradientBuckets over every
// gradient (group: the world); sharded, the same per mirror group (a group
// of one rank sums nothing), the groups' buckets merged in the order their
// gradients are ready.
Result<std::vector<parallel::FusionBucket>> PlanGroupedBuckets(const std::vector<parallel::FusionGradient>& grads,
                                                               const LoweringOptions& options,
                                                               std::vector<std::vector<uint32_t>>* groups) {
  std::vector<uint32_t> world;
  for (uint32_t r = 0; r < options.world_size; ++r) world.push_back(r);
  if (options.grad_groups.empty()) {
    SINKRT_ASSIGN_OR_RETURN(std::vector<parallel::FusionBucket> b,
                            parallel::PlanGradientBuckets(grads, options.comm_fusion));
    groups->assign(b.size(), world);
    return b;
  }
  if (options.grad_groups.size() != grads.size())
    return Internal("sharded: " + std::to_string(options.grad_groups.size()) + " mirror groups for " +
                    std::to_string(grads.size()) + " gradients");
  std::map<std::vector<uint32_t>, std::vector<size_t>> by_group;
  for (size_t i = 0; i < grads.size(); ++i)
    if (options.grad_groups[i].size() > 1) by_group[options.grad_groups[i]].push_back(i);
  std::vector<std::pair<parallel::FusionBucket, std::vector<uint32_t>>> all;
  for (const auto& [ranks, members] : by_group) {
    std::vector<parallel::FusionGradient> sub;
    for (size_t i : members) sub.push_back(grads[i]);
    SINKRT_ASSIGN_OR_RETURN(std::vector<parallel::FusionBucket> b,
                            parallel::PlanGradientBuckets(sub, options.comm_fusion));
    for (parallel::FusionBucket& bucket : b) {
      for (size_t& i : bucket.gradients) i = members[i];
      all.emplace_back(std::move(bucket), ranks);
    }
  }
  std::stable_sort(all.begin(), all.end(),
                   [](const auto& a, const auto& b) { return a.first.ready_at < b.first.ready_at; });
  std::vector<parallel::FusionBucket> out;
  groups->clear();
  for (auto& [bucket, ranks] : all) {
    out.push_back(std::move(bucket));
    groups->push_back(std::move(ranks));
  }
  return out;
}

// ---- optimizer parallel: ReduceScatter and AllGather buckets ----

// comm_fusion's "reducescatter" or "allgather" entry as a size split over
// gradients taken in the order backward finishes them (openstate false:
// one per parameter).
CommFusion SizeFusion(const CommFusion& fusion, const FusionThreshold& entry) {
  CommFusion f;
  f.openstate = fusion.openstate;
  f.mode = "size";
  f.size_mb = entry.size_mb;
  return f;
}

struct OptimizerBuckets {
  std::vector<const passes::OptimizerShard*> shards;  // ReduceScatter: in the order backward finishes their gradients
  std::vector<uint32_t> group;                // the ranks of every shard in it
  int64_t ready_at = 0;                       // ReduceScatter: the last of its gradients
};

// The sharded gradients in ReduceScatter buckets of at most comm_fusion's
// reducescatter size (the gradient that crosses it still joins, as
// AllReduce buckets do), one group's gradients per bucket, in the order
// they are ready.
Result<std::vector<OptimizerBuckets>> PlanScatterBuckets(const passes::TrainingGraph& tg,
                                                         const std::vector<parallel::FusionGradient>& grads,
                                                         const CommFusion& fusion) {
  std::map<std::vector<uint32_t>, std::vector<const passes::OptimizerShard*>> by_group;
  for (const passes::OptimizerShard& s : tg.optimizer_shards) by_group[s.group].push_back(&s);
  std::vector<OptimizerBuckets> out;
  for (const auto& [group, shards] : by_group) {
    std::vector<parallel::FusionGradient> sub;
    for (const passes::OptimizerShard* s : shards) sub.push_back(grads.at(s->grad));
    SINKRT_ASSIGN_OR_RETURN(std::vector<parallel::FusionBucket> buckets,
                            parallel::PlanFusionBuckets(sub, SizeFusion(fusion, fusion.reducescatter)));
    for (const parallel::FusionBucket& b : buckets) {
      OptimizerBuckets z{.shards = {}, .group = group, .ready_at = b.ready_at};
      for (size_t i : b.gradients) z.shards.push_back(shards[i]);
      out.push_back(std::move(z));
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.ready_at < b.ready_at; });
  return out;
}

// The updated blocks in AllGather buckets of at most comm_fusion's
// allgather size, one group's per bucket, taken in the order their updates
// run (that of the ReduceScatter buckets).
std::vector<OptimizerBuckets> GatherBuckets(const std::vector<OptimizerBuckets>& scatter, const CommFusion& fusion) {
  const CommFusion f = SizeFusion(fusion, fusion.allgather);
  const uint64_t limit = static_cast<uint64_t>(f.size_mb * static_cast<double>(parallel::kFusionBytesPerMb));
  std::vector<OptimizerBuckets> out;
  uint64_t bytes = 0;
  bool open = false;
  for (const OptimizerBuckets& b : scatter)
    for (const passes::OptimizerShard* s : b.shards) {
      if (!open || out.back().group != s->group) {
        out.push_back({.shards = {}, .group = s->group, .ready_at = -1});
        bytes = 0;
        open = true;
      }
      out.back().shards.push_back(s);
      bytes += s->bytes;
      if (!f.openstate || bytes >= limit) open = false;
    }
  return out;
}

// What the schedule needs to know of a compute task: the buffers it touches.
parallel::ComputeTask ComputeTaskOf(const TaskDef& task) {
  parallel::ComputeTask c;
  if (const auto* k = std::get_if<KernelDef>(&task.body)) {
    c.kernel = true;
    c.operands = k->inputs;
    c.operands.insert(c.operands.end(), k->outputs.begin(), k->outputs.end());
    c.touched = c.operands;
    if (k->fused_bias >= 0) c.touched.push_back(static_cast<uint32_t>(k->fused_bias));
    c.written = k->outputs;
    for (size_t slot : MutatedInputs(k->op))
      if (slot < k->inputs.size()) c.written.push_back(k->inputs[slot]);
  } else {
    c.touched = TaskBuffers(task);  // GetNext, the graph's collectives: kept in place
    c.collective = std::holds_alternative<AllReduceDef>(task.body) ||
                   std::holds_alternative<AllGatherDef>(task.body) ||
                   std::holds_alternative<ReduceScatterDef>(task.body) ||
                   std::holds_alternative<AllToAllDef>(task.body);
  }
  return c;
}

// Group index of `ranks` in `groups`, added when new ("world" when it is
// every rank, else "ranks_0_2").
uint32_t GroupIndex(std::vector<CommGroupDef>& groups, const std::vector<uint32_t>& ranks, uint32_t world_size) {
  for (size_t i = 0; i < groups.size(); ++i)
    if (groups[i].ranks == ranks) return static_cast<uint32_t>(i);
  CommGroupDef g;
  bool world = ranks.size() == world_size;
  for (size_t i = 0; i < ranks.size() && world; ++i) world = ranks[i] == i;
  g.name = world ? "world" : "ranks";
  if (!world)
    for (uint32_t r : ranks) g.name += "_" + std::to_string(r);
  g.ranks = ranks;
  groups.push_back(std::move(g));
  return static_cast<uint32_t>(groups.size() - 1);
}

bool IsCollectiveOp(fb::OpCode op) {
  return op == fb::OpCode::AllReduce || op == fb::OpCode::AllGather || op == fb::OpCode::ReduceScatter ||
         op == fb::OpCode::AllToAll;
}

// A collective op of the sharded graph as its tasks: AllReduce reduces in
// place, so its input is first copied into its output.
void AddCollective(const KernelDef& k, const std::string& name, std::vector<CommGroupDef>& groups,
                   uint32_t world_size, std::vector<TaskDef>& tasks) {
  const uint32_t group = GroupIndex(groups, k.attrs.group, world_size);
  const fb::ReduceOp op = k.attrs.max ? fb::ReduceOp::Max : k.attrs.mean ? fb::ReduceOp::Mean : fb::ReduceOp::Sum;
  switch (k.op) {
    case fb::OpCode::AllReduce: {
      KernelDef copy;
      copy.op = fb::OpCode::Copy;
      copy.inputs = k.inputs;
      copy.outputs = k.outputs;
      tasks.push_back({name + "/copy", std::move(copy)});
      tasks.push_back({name, AllReduceDef{.group = group, .op = op, .buffers = k.outputs}});
      return;
    }
    case fb::OpCode::AllGather:
      tasks.push_back({name, AllGatherDef{.group = group, .input = k.inputs[0], .output = k.outputs[0]}});
      return;
    case fb::OpCode::ReduceScatter:
      tasks.push_back(
          {name, ReduceScatterDef{.group = group, .op = op, .input = k.inputs[0], .output = k.outputs[0]}});
      return;
    case fb::OpCode::AllToAll:
      tasks.push_back({name, AllToAllDef{.group = group, .input = k.inputs[0], .output = k.outputs[0]}});
      return;
    default:
      return;
  }
}

// Rewrites `prog`'s tasks as `schedule` lays them out on the compute and
// comm streams: its Compute entries index the tasks, its Bucket entries
// the buckets.
void ApplyCommSchedule(ProgramDef& prog, parallel::ReductionSchedule schedule, const std::vector<BucketDef>& buckets,
                       fb::ReduceOp op) {
  auto task_of = [&](parallel::ScheduledTask& s) -> TaskDef {
    using Kind = parallel::ScheduledTask::Kind;
    switch (s.kind) {
      case Kind::Compute: return std::move(prog.tasks[s.index]);
      case Kind::RecordEvent: return {std::move(s.name), EventRecordDef{s.event}};
      case Kind::WaitEvent: return {std::move(s.name), EventWaitDef{s.event}};
      case Kind::Bucket: {
        const BucketDef& b = buckets[s.index];
        switch (b.kind) {
          case BucketDef::Kind::AllReduce:
            return {std::move(s.name), AllReduceDef{.group = b.group, .op = op, .buffers = b.buffers}};
          case BucketDef::Kind::ReduceScatter:
            if (b.inputs.size() == 1)
              return {std::move(s.name), ReduceScatterDef{.group = b.group, .op = op, .input = b.inputs[0],
                                                          .output = b.outputs.at(0), .inputs = {}, .outputs = {}}};
            return {std::move(s.name), ReduceScatterDef{.group = b.group, .op = op, .input = 0, .output = 0,
                                                        .inputs = b.inputs, .outputs = b.outputs}};
          case BucketDef::Kind::AllGather:
            if (b.inputs.size() == 1)
              return {std::move(s.name), AllGatherDef{.group = b.group, .input = b.inputs[0],
                                                      .output = b.outputs.at(0), .inputs = {}, .outputs = {}}};
            return {std::move(s.name), AllGatherDef{.group = b.group, .input = 0, .output = 0, .inputs = b.inputs,
                                                    .outputs = b.outputs}};
        }
        return {};
      }
    }
    return {};
  };
  // Both streams take their tasks from the original list (a collective or
  // a transfer moves to comm), so neither replaces it before the other is
  // built.
  std::vector<TaskDef> compute, comm;
  compute.reserve(schedule.compute.size());
  for (parallel::ScheduledTask& s : schedule.compute) compute.push_back(task_of(s));
  for (parallel::ScheduledTask& s : schedule.comm) comm.push_back(task_of(s));
  prog.tasks = std::move(compute);
  prog.comm_tasks = std::move(comm);
  prog.num_events = schedule.num_events;
}

std::vector<std::vector<uint32_t>> BucketBuffers(const std::vector<BucketDef>& buckets) {
  std::vector<std::vector<uint32_t>> out;
  for (const BucketDef& b : buckets) out.push_back(b.buffers);
  return out;
}

// Splices the buckets' events into train_step's compute stream and writes
// its comm stream, as parallel::ScheduleGradientReduction orders them.
// ready_at[k] is a compute position before any event is inserted.
// A task touching a view touches its root's bytes too.
void AddViewRoots(parallel::ComputeTask& task, const std::vector<BufferDef>& buffers) {
  std::vector<uint32_t>& touched = task.touched;
  for (size_t k = 0, n = touched.size(); k < n; ++k)
    if (const int64_t root = buffers[touched[k]].view_of; root >= 0) touched.push_back(static_cast<uint32_t>(root));
}

void AddGradientReduction(ProgramDef& prog, const std::vector<BufferDef>& buffers,
                          const std::vector<BucketDef>& buckets, const std::vector<int64_t>& ready_at,
                          fb::ReduceOp op) {
  std::vector<parallel::ComputeTask> tasks;
  tasks.reserve(prog.tasks.size());
  for (const TaskDef& t : prog.tasks) {
    tasks.push_back(ComputeTaskOf(t));
    AddViewRoots(tasks.back(), buffers);
  }
  std::vector<parallel::CommBucket> comm;
  for (size_t k = 0; k < buckets.size(); ++k) {
    const BucketDef& b = buckets[k];
    comm.push_back({.buffers = b.buffers,
                    .ready_at = ready_at[k],
                    .collective = b.kind == BucketDef::Kind::AllReduce       ? "allreduce"
                                  : b.kind == BucketDef::Kind::ReduceScatter ? "reducescatter"
                                                                             : "allgather"});
  }
  ApplyCommSchedule(prog, parallel::ScheduleGradientReduction(tasks, comm), buckets, op);
}

// A pipeline stage's program: its Send and Recv tasks, its collectives and
// (train_step) the gradient buckets move to the comm stream as
// parallel::SchedulePipelineComm orders them.
Status AddPipelineComm(ProgramDef& prog, const std::vector<BufferDef>& buffers, const std::vector<BucketDef>& buckets,
                       const std::vector<int64_t>& ready_at, fb::ReduceOp op) {
  std::vector<parallel::ComputeTask> tasks;
  std::vector<parallel::PipelineTransfer> transfers;
  tasks.reserve(prog.tasks.size());
  for (size_t i = 0; i < prog.tasks.size(); ++i) {
    const TaskDef& t = prog.tasks[i];
    if (const auto* sd = std::get_if<SendDef>(&t.body))
      transfers.push_back({.task = i, .send = true, .order = sd->order, .channel = sd->channel});
    if (const auto* rv = std::get_if<RecvDef>(&t.body))
      transfers.push_back({.task = i, .send = false, .order = rv->order, .channel = 0});
    tasks.push_back(ComputeTaskOf(t));
    // A task that reads a view (a row block of a received tensor that a
    // ShardSlice cut) reads its root's bytes: it must wait for the receive
    // into the root.
    AddViewRoots(tasks.back(), buffers);
  }
  SINKRT_ASSIGN_OR_RETURN(parallel::ReductionSchedule schedule,
                          parallel::SchedulePipelineComm(tasks, transfers, BucketBuffers(buckets), ready_at));
  ApplyCommSchedule(prog, std::move(schedule), buckets, op);
  return Status::Ok();
}

}  // namespace

std::vector<uint32_t> TaskBuffers(const TaskDef& task) {
  if (const auto* k = std::get_if<KernelDef>(&task.body)) {
    std::vector<uint32_t> b = k->inputs;
    b.insert(b.end(), k->outputs.begin(), k->outputs.end());
    if (k->fused_bias >= 0) b.push_back(static_cast<uint32_t>(k->fused_bias));
    return b;
  }
  if (const auto* g = std::get_if<GetNextDef>(&task.body)) return g->outputs;
  if (const auto* a = std::get_if<AllReduceDef>(&task.body)) return a->buffers;
  if (const auto* b = std::get_if<BroadcastDef>(&task.body)) return b->buffers;
  auto pairs = [](const std::vector<uint32_t>& in, const std::vector<uint32_t>& out) {
    std::vector<uint32_t> b = in;
    b.insert(b.end(), out.begin(), out.end());
    return b;
  };
  if (const auto* g = std::get_if<AllGatherDef>(&task.body))
    return g->inputs.empty() ? std::vector<uint32_t>{g->input, g->output} : pairs(g->inputs, g->outputs);
  if (const auto* r = std::get_if<ReduceScatterDef>(&task.body))
    return r->inputs.empty() ? std::vector<uint32_t>{r->input, r->output} : pairs(r->inputs, r->outputs);
  if (const auto* a = std::get_if<AllToAllDef>(&task.body)) return {a->input, a->output};
  if (const auto* sd = std::get_if<SendDef>(&task.body)) return {sd->buffer};
  if (const auto* rv = std::get_if<RecvDef>(&task.body)) return {rv->buffer};
  return {};
}

std::pair<int64_t, int64_t> FanInOut(const Shape& shape) {
  if (shape.empty()) return {1, 1};
  if (shape.size() == 1) return {shape[0], shape[0]};
  if (shape.size() == 2) return {shape[0], shape[1]};
  int64_t receptive = 1;
  for (size_t i = 2; i < shape.size(); ++i) receptive *= shape[i];
  return {shape[1] * receptive, shape[0] * receptive};
}

Result<LoweredStream> Lower(const passes::TrainingGraph& tg, const LoweringOptions& options) {
  const Graph& g = tg.graph;
  SINKRT_ASSIGN_OR_RETURN(GraphFacts facts, AnalyseGraph(tg));

  std::vector<ProgramPlan> plans;
  plans.push_back({fb::ProgramKind::TrainStep, "train_step", "train", tg.train_inputs.empty() ? tg.inputs : tg.train_inputs,
                   PlanKernels(g, facts, tg.train_program, options.fuse), tg.train_reports});
  if (options.eval_program)
    plans.push_back({fb::ProgramKind::EvalStep, "eval_step", "eval", tg.inputs,
                     PlanKernels(g, facts, tg.eval_program, options.fuse), tg.eval_reports});
  if (options.predict_program)
    plans.push_back({fb::ProgramKind::PredictStep, "predict_step", "predict", tg.predict_inputs,
                     PlanKernels(g, facts, tg.predict_program, options.fuse), tg.predict_reports});

  // Views leave the kernel lists before anything counts task positions.
  std::vector<ProgramViews> views;
  for (ProgramPlan& plan : plans) views.push_back(PlanViews(g, facts, plan, options.arena_alignment));

  // Data parallel: the buckets decide the Grad buffers' order, so they come
  // before the buffer table.
  std::vector<parallel::FusionBucket> buckets;
  std::vector<std::vector<uint32_t>> bucket_group;  // the ranks of each bucket's AllReduce
  std::map<TensorId, size_t> grad_rank;  // place in the bucket-by-bucket layout
  std::vector<int64_t> bucket_ready_at;  // per entry of out.buckets
  std::vector<parallel::FusionGradient> grads;
  if (options.data_parallel) {
    SINKRT_ASSIGN_OR_RETURN(grads, TrainGradients(tg, plans[0]));
    // Optimizer parallel: a sharded parameter's gradient is ReduceScattered
    // on its own, the others fuse into AllReduce buckets as before.
    std::vector<bool> scattered(tg.grads.size(), false);
    for (const passes::OptimizerShard& s : tg.optimizer_shards) scattered.at(s.grad) = true;
    std::vector<parallel::FusionGradient> reduced;
    std::vector<size_t> reduced_index;
    LoweringOptions reduced_options = options;
    reduced_options.grad_groups.clear();
    for (size_t i = 0; i < grads.size(); ++i) {
      if (scattered[i]) continue;
      reduced.push_back(grads[i]);
      reduced_index.push_back(i);
      if (!options.grad_groups.empty()) reduced_options.grad_groups.push_back(options.grad_groups.at(i));
    }
    SINKRT_ASSIGN_OR_RETURN(buckets, PlanGroupedBuckets(reduced, reduced_options, &bucket_group));
    for (parallel::FusionBucket& b : buckets)
      for (size_t& i : b.gradients) i = reduced_index[i];
    for (const parallel::FusionBucket& b : buckets)
      for (size_t i : b.gradients) grad_rank.emplace(tg.grads[i].grad, grad_rank.size());
    // Gradients no group sums (a slice only this rank holds) come after.
    for (const ParamGrad& pg : tg.grads) grad_rank.emplace(pg.grad, grad_rank.size());
  }

  SINKRT_ASSIGN_OR_RETURN(BufferTable table, BuildBufferTable(tg, facts, plans, views, grad_rank));
  LoweredStream out;
  out.buffers = std::move(table.buffers);
  const BufferMaps& maps = table.maps;
  const std::vector<fb::BufferRole>& role = table.role;

  // Initializers, in buffer order.
  std::vector<uint32_t> all_initializers;
  for (uint32_t b = 0; b < out.buffers.size(); ++b) {
    const BufferDef& buf = out.buffers[b];
    if (!buf.persistent || !HasInitializer(g.tensor(buf.tensor).kind)) continue;
    InitializerDef init{.buffer = b, .init = g.tensor(buf.tensor).init};
    // 0 means "derive from the shape" (graph.h); a value the user set wins.
    // A slice of a sharded parameter takes the whole tensor's fans.
    const Shape& whole = init.init.global_shape.empty() ? buf.shape : init.init.global_shape;
    auto [fan_in, fan_out] = FanInOut(whole);
    if (init.init.fan_in == 0) init.init.fan_in = fan_in;
    if (init.init.fan_out == 0) init.init.fan_out = fan_out;
    if (init.init.kind == fb::InitKind::Inline && init.init.data.size() != buf.bytes)
      return InvalidArgument("tensor '" + buf.name + "' has " +
                             std::to_string(init.init.data.size()) +
                             " bytes of inline initial data, its buffer holds " +
                             std::to_string(buf.bytes));
    if (init.init.kind != fb::InitKind::Inline) init.init.data.clear();
    all_initializers.push_back(static_cast<uint32_t>(out.initializers.size()));
    out.initializers.push_back(std::move(init));
  }

  // Programs.
  ProgramDef init;
  init.name = "init";
  init.kind = fb::ProgramKind::Init;
  init.tasks.push_back({"init", InitTaskDef{all_initializers}});
  if (options.data_parallel && options.parameter_broadcast) {
    // Replicas start from rank 0's values (MindSpore's _broadcast_params),
    // after their own initialisation so that every buffer is written.
    BroadcastDef broadcast;  // group 0 ("world"), root rank 0
    for (uint32_t b = 0; b < out.buffers.size(); ++b)
      if (out.buffers[b].role == fb::BufferRole::Param) broadcast.buffers.push_back(b);
    if (!broadcast.buffers.empty()) init.tasks.push_back({"parameter_broadcast", std::move(broadcast)});
  }
  out.programs.push_back(std::move(init));
  if (options.data_parallel) {
    std::vector<uint32_t> world;
    for (uint32_t r = 0; r < options.world_size; ++r) world.push_back(r);
    GroupIndex(out.groups, world, options.world_size);  // group 0, as data parallel has always had it
    std::vector<std::pair<int64_t, BucketDef>> ready;  // (ready_at, bucket)
    for (size_t k = 0; k < buckets.size(); ++k) {
      BucketDef def;
      for (size_t i : buckets[k].gradients) def.buffers.push_back(maps.persistent.at(tg.grads[i].grad));
      def.group = GroupIndex(out.groups, bucket_group[k], options.world_size);
      ready.emplace_back(buckets[k].ready_at, std::move(def));
    }
    // Optimizer parallel: the sharded gradients' ReduceScatter buckets,
    // each ready when backward has written its last gradient, among the
    // reduced buckets in ready order; then the AllGather buckets of the
    // updated blocks, ready after their updates.
    SINKRT_ASSIGN_OR_RETURN(std::vector<OptimizerBuckets> zero, PlanScatterBuckets(tg, grads, options.comm_fusion));
    for (const OptimizerBuckets& z : zero) {
      BucketDef rs{.kind = BucketDef::Kind::ReduceScatter,
                   .buffers = {},
                   .group = GroupIndex(out.groups, z.group, options.world_size),
                   .inputs = {},
                   .outputs = {}};
      for (const passes::OptimizerShard* s : z.shards) {
        rs.inputs.push_back(maps.persistent.at(tg.grads[s->grad].grad));
        rs.outputs.push_back(maps.persistent.at(s->grad_slice));
      }
      rs.buffers = rs.inputs;
      rs.buffers.insert(rs.buffers.end(), rs.outputs.begin(), rs.outputs.end());
      ready.emplace_back(z.ready_at, std::move(rs));
    }
    if (!zero.empty())
      std::stable_sort(ready.begin(), ready.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const OptimizerBuckets& bucket : GatherBuckets(zero, options.comm_fusion)) {
      BucketDef ag{.kind = BucketDef::Kind::AllGather,
                   .buffers = {},
                   .group = GroupIndex(out.groups, bucket.group, options.world_size),
                   .inputs = {},
                   .outputs = {}};
      for (const passes::OptimizerShard* s : bucket.shards) {
        ag.inputs.push_back(maps.persistent.at(s->param_slice));
        ag.outputs.push_back(maps.persistent.at(tg.grads[s->grad].param));
      }
      ag.buffers = ag.inputs;
      ag.buffers.insert(ag.buffers.end(), ag.outputs.begin(), ag.outputs.end());
      ready.emplace_back(-1, std::move(ag));
    }
    if (2 * ready.size() > parallel::kMaxEvents)
      return InvalidArgument("data parallel: " + std::to_string(ready.size()) +
                             " gradient collectives need more than the " + std::to_string(parallel::kMaxEvents) +
                             " events a program may have: turn comm_fusion's openstate on");
    for (auto& [at, def] : ready) {
      bucket_ready_at.push_back(at);
      out.buckets.push_back(std::move(def));
    }
  }
  for (size_t p = 0; p < plans.size(); ++p) {
    const ProgramPlan& plan = plans[p];
    ProgramDef prog;
    prog.name = plan.name;
    prog.kind = plan.kind;
    auto buffer_of = [&](TensorId t) {
      return maps.Find(IsPersistentRole(role[t]), static_cast<int>(p), t);
    };
    // A program without inputs (a graph that trains towards constants) has
    // no queue to pop: a queue needs at least one column.
    if (!plan.inputs.empty()) {
      GetNextDef get_next;
      get_next.queue = static_cast<uint32_t>(out.queues.size());
      for (TensorId t : plan.inputs) get_next.outputs.push_back(buffer_of(t));
      prog.tasks.push_back({"GetNext:" + plan.stem, get_next});
      QueueDef q;
      q.name = plan.stem;
      q.capacity = options.queue_capacity;
      for (TensorId t : plan.inputs)
        q.columns.push_back({g.tensor(t).name, g.tensor(t).dtype, g.tensor(t).shape, t, std::nullopt});
      out.queues.push_back(std::move(q));
    }
    for (const KernelPlan& k : plan.kernels) {
      const OpNode& head = g.ops()[k.ops[0]];
      KernelDef kd;
      kd.op = head.op;
      kd.attrs = head.attrs;
      kd.fused_activation = k.activation;
      for (TensorId t : k.inputs) kd.inputs.push_back(buffer_of(t));
      for (TensorId t : k.outputs) kd.outputs.push_back(buffer_of(t));
      if (k.bias != kInvalidTensor) kd.fused_bias = static_cast<int32_t>(buffer_of(k.bias));
      std::string name = head.name;
      for (size_t i = 1; i < k.ops.size(); ++i) name += "+" + g.ops()[k.ops[i]].name;
      if (p == 0 && k.ops.size() > 1) ++out.fused_kernels;
      if (IsCollectiveOp(kd.op)) {
        AddCollective(kd, name, out.groups, options.world_size, prog.tasks);
        continue;
      }
      if (kd.op == fb::OpCode::Send || kd.op == fb::OpCode::Recv) {
        const uint32_t group = GroupIndex(out.groups, head.attrs.group, options.world_size);
        if (kd.op == fb::OpCode::Send)
          prog.tasks.push_back({std::move(name), SendDef{.group = group, .peer = head.attrs.peer,
                                                         .buffer = kd.inputs.at(0), .order = head.attrs.comm_order,
                                                         .channel = head.attrs.channel}});
        else
          prog.tasks.push_back({std::move(name), RecvDef{.group = group, .peer = head.attrs.peer,
                                                         .buffer = kd.outputs.at(0), .order = head.attrs.comm_order}});
        continue;
      }
      // A gradient summed over micro-batches: acc = acc + g in place (AddN
      // allows its output to be one of its inputs).
      if (kd.op == fb::OpCode::AccumulateGrad) {
        kd.op = fb::OpCode::AddN;
        kd.attrs = OpAttrs{};
        kd.outputs = {kd.inputs.at(0)};
      }
      // GradAllReduce is the identity in the forward (its gradient is the
      // AllReduce).
      if (kd.op == fb::OpCode::GradAllReduce) {
        kd.op = fb::OpCode::Copy;
        kd.attrs = OpAttrs{};
      }
      prog.tasks.push_back({std::move(name), std::move(kd)});
    }
    for (TensorId t : plan.reports) prog.reports.push_back(buffer_of(t));
    if (plan.kind == fb::ProgramKind::EvalStep)
      AddMetricSums(g, plan, tg.accuracy, buffer_of, &out.buffers, &prog);

    if (p == 0 && options.pipeline) {
      SINKRT_RETURN_IF_ERROR(AddPipelineComm(prog, out.buffers, out.buckets, bucket_ready_at,
                                             options.gradients_mean ? fb::ReduceOp::Mean : fb::ReduceOp::Sum),
                             "train_step");
    } else if (options.pipeline && plan.kind == fb::ProgramKind::EvalStep) {
      // Its transfers and collectives; eval reduces no gradient.
      SINKRT_RETURN_IF_ERROR(AddPipelineComm(prog, out.buffers, {}, {}, fb::ReduceOp::Sum), "eval_step");
    } else if (p == 0 && options.data_parallel) {
      // Events touch no buffer and the comm stream only persistent
      // gradients and parameters, so liveness below just counts the compute
      // stream.
      AddGradientReduction(prog, out.buffers, out.buckets, bucket_ready_at,
                           options.gradients_mean ? fb::ReduceOp::Mean : fb::ReduceOp::Sum);
    }

    // Liveness of this program's transients, in task order.
    auto use = [&](uint32_t b, int32_t task) {
      BufferDef& buf = out.buffers[b];
      if (buf.persistent) return;
      if (buf.first_use < 0 || task < buf.first_use) buf.first_use = task;
      buf.last_use = std::max(buf.last_use, task);
    };
    // A collective on the comm stream runs between its "ready" record and
    // its "done" wait on the compute stream: its buffers are live there.
    std::map<uint32_t, std::vector<uint32_t>> comm_buffers;  // event -> buffers
    for (size_t i = 0; i + 1 < prog.comm_tasks.size(); ++i) {
      // (A bucket's gradients are persistent; use() skips them.)
      const auto* wait = std::get_if<EventWaitDef>(&prog.comm_tasks[i].body);
      if (!wait) continue;
      const std::vector<uint32_t> buffers = TaskBuffers(prog.comm_tasks[i + 1]);
      comm_buffers[wait->event] = buffers;
      comm_buffers[wait->event + 1] = buffers;
    }
    for (size_t i = 0; i < prog.tasks.size(); ++i) {
      const TaskDef& t = prog.tasks[i];
      uint32_t event = UINT32_MAX;
      if (const auto* r = std::get_if<EventRecordDef>(&t.body)) event = r->event;
      if (const auto* w = std::get_if<EventWaitDef>(&t.body)) event = w->event;
      if (auto it = comm_buffers.find(event); it != comm_buffers.end())
        for (uint32_t b : it->second) use(b, static_cast<int32_t>(i));
      for (uint32_t b : TaskBuffers(t)) use(b, static_cast<int32_t>(i));
    }
    // A transient report (an Input the user asked to see) must survive to
    // the end of the step.
    for (uint32_t b : prog.reports)
      if (!out.buffers[b].persistent) use(b, static_cast<int32_t>(prog.tasks.size() - 1));
    out.programs.push_back(std::move(prog));
  }
  // A view group is one buffer to the planner: its root lives from the first
  // use of any member to the last (views' tasks never touch the root's index).
  for (BufferDef& view : out.buffers) {
    if (view.view_of < 0 || view.first_use < 0) continue;
    BufferDef& root = out.buffers[view.view_of];
    root.first_use = root.first_use < 0 ? view.first_use : std::min(root.first_use, view.first_use);
    root.last_use = std::max(root.last_use, view.last_use);
  }
  return out;
}

}  // namespace sinkrt::host::compiler
