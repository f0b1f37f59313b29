#include "host/src/compiler/gradient_collectives.h"

#include <algorithm>
#include <utility>
#include <variant>

#include "host/src/parallel/data_parallel/gradient_reduction.h"
#include "host/src/parallel/pipeline/pipeline_comm.h"

namespace sinkrt::host::compiler {
namespace {

// Each gradient of tg.grads (parameter order) with the train_step compute
// position of the task that writes it last: GetNext, if any, is position 0.
Result<std::vector<parallel::FusionGradient>> TrainGradients(const passes::TrainingGraph& tg,
                                                             const ProgramPlan& train) {
  const Graph& g = tg.graph;
  // Task positions: GetNext first; a sharded graph's AllReduce op becomes
  // two tasks (a Copy, then the in-place AllReduce).
  int64_t pos = train.inputs.empty() ? -1 : 0;
  std::map<TensorId, int64_t> written;
  for (size_t k = 0; k < train.kernels.size(); ++k) {
    const KernelPlan& kernel = train.kernels[k];
    pos += g.ops()[kernel.ops[0]].op == OpCode::AllReduce ? 2 : 1;
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
    c.collective = std::holds_alternative<AllReduceDef>(task.body) || std::holds_alternative<AllGatherDef>(task.body) ||
                   std::holds_alternative<ReduceScatterDef>(task.body) ||
                   std::holds_alternative<AllToAllDef>(task.body);
  }
  return c;
}

// A task touching a view touches its root's bytes too.
void AddViewRoots(parallel::ComputeTask& task, const std::vector<BufferDef>& buffers) {
  std::vector<uint32_t>& touched = task.touched;
  for (size_t k = 0, n = touched.size(); k < n; ++k)
    if (const int64_t root = buffers[touched[k]].view_of; root >= 0) touched.push_back(static_cast<uint32_t>(root));
}

// Rewrites `prog`'s tasks as `schedule` lays them out on the compute and
// comm streams: its Compute entries index the tasks, its Bucket entries
// the buckets.
void ApplyCommSchedule(ProgramDef& prog, parallel::ReductionSchedule schedule, const std::vector<BucketDef>& buckets,
                       fb::ReduceOp op) {
  auto task_of = [&](parallel::ScheduledTask& s) -> TaskDef {
    using Kind = parallel::ScheduledTask::Kind;
    switch (s.kind) {
      case Kind::Compute:
        return std::move(prog.tasks[s.index]);
      case Kind::RecordEvent:
        return {std::move(s.name), EventRecordDef{s.event}};
      case Kind::WaitEvent:
        return {std::move(s.name), EventWaitDef{s.event}};
      case Kind::Bucket: {
        const BucketDef& b = buckets[s.index];
        switch (b.kind) {
          case BucketDef::Kind::AllReduce:
            return {std::move(s.name), AllReduceDef{.group = b.group, .op = op, .buffers = b.buffers}};
          case BucketDef::Kind::ReduceScatter:
            if (b.inputs.size() == 1)
              return {std::move(s.name), ReduceScatterDef{.group = b.group,
                                                          .op = op,
                                                          .input = b.inputs[0],
                                                          .output = b.outputs.at(0),
                                                          .inputs = {},
                                                          .outputs = {}}};
            return {std::move(s.name),
                    ReduceScatterDef{
                        .group = b.group, .op = op, .input = 0, .output = 0, .inputs = b.inputs, .outputs = b.outputs}};
          case BucketDef::Kind::AllGather:
            if (b.inputs.size() == 1)
              return {
                  std::move(s.name),
                  AllGatherDef{
                      .group = b.group, .input = b.inputs[0], .output = b.outputs.at(0), .inputs = {}, .outputs = {}}};
            return {std::move(s.name),
                    AllGatherDef{.group = b.group, .input = 0, .output = 0, .inputs = b.inputs, .outputs = b.outputs}};
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

// The facts of optimizer parallel's sharded gradients that the bucket
// planning reads, in tg.optimizer_shards' order.
std::vector<parallel::ScatteredGradient> ScatteredGradients(const passes::TrainingGraph& tg) {
  std::vector<parallel::ScatteredGradient> out;
  for (const passes::OptimizerShard& s : tg.optimizer_shards)
    out.push_back({.grad = s.grad, .group = s.group, .bytes = s.bytes});
  return out;
}

// A ReduceScatter bucket reads the gradients and writes their blocks; an
// AllGather bucket reads the parameter blocks and writes the parameters.
BucketDef ShardBucketDef(const passes::TrainingGraph& tg, const parallel::ShardBucket& bucket, BucketDef::Kind kind,
                         const BufferMaps& maps, const LoweringOptions& options, std::vector<CommGroupDef>& groups) {
  BucketDef def{.kind = kind,
                .buffers = {},
                .group = GroupIndex(groups, bucket.group, options.world_size),
                .inputs = {},
                .outputs = {}};
  for (size_t i : bucket.shards) {
    const passes::OptimizerShard& s = tg.optimizer_shards[i];
    if (kind == BucketDef::Kind::ReduceScatter) {
      def.inputs.push_back(maps.persistent.at(tg.grads[s.grad].grad));
      def.outputs.push_back(maps.persistent.at(s.grad_slice));
    } else {
      def.inputs.push_back(maps.persistent.at(s.param_slice));
      def.outputs.push_back(maps.persistent.at(tg.grads[s.grad].param));
    }
  }
  def.buffers = def.inputs;
  def.buffers.insert(def.buffers.end(), def.outputs.begin(), def.outputs.end());
  return def;
}

}  // namespace

Result<GradientCollectivePlan> PlanGradientCollectives(const passes::TrainingGraph& tg, const ProgramPlan& train,
                                                       const LoweringOptions& options) {
  GradientCollectivePlan plan;
  SINKRT_ASSIGN_OR_RETURN(plan.grads, TrainGradients(tg, train));
  std::vector<bool> scattered(tg.grads.size(), false);
  for (const passes::OptimizerShard& s : tg.optimizer_shards) scattered.at(s.grad) = true;
  SINKRT_ASSIGN_OR_RETURN(plan.reduced, parallel::PlanAllReduceBuckets(plan.grads, scattered, options.grad_groups,
                                                                       options.world_size, options.comm_fusion));
  for (const parallel::FusionBucket& b : plan.reduced.buckets)
    for (size_t i : b.gradients) plan.grad_rank.emplace(tg.grads[i].grad, plan.grad_rank.size());
  // Gradients no group sums (a slice only this rank holds) come after.
  for (const ParamGrad& pg : tg.grads) plan.grad_rank.emplace(pg.grad, plan.grad_rank.size());
  return plan;
}

Result<std::vector<int64_t>> AddGradientBuckets(const passes::TrainingGraph& tg, const GradientCollectivePlan& plan,
                                                const BufferMaps& maps, const LoweringOptions& options,
                                                LoweredStream& out) {
  std::vector<uint32_t> world;
  for (uint32_t r = 0; r < options.world_size; ++r) world.push_back(r);
  GroupIndex(out.groups, world, options.world_size);  // group 0, as data parallel has always had it
  std::vector<std::pair<int64_t, BucketDef>> ready;   // (ready_at, bucket)
  const std::vector<parallel::FusionBucket>& buckets = plan.reduced.buckets;
  for (size_t k = 0; k < buckets.size(); ++k) {
    BucketDef def;
    for (size_t i : buckets[k].gradients) def.buffers.push_back(maps.persistent.at(tg.grads[i].grad));
    def.group = GroupIndex(out.groups, plan.reduced.groups[k], options.world_size);
    ready.emplace_back(buckets[k].ready_at, std::move(def));
  }
  // Optimizer parallel: the sharded gradients' ReduceScatter buckets,
  // each ready when backward has written its last gradient, among the
  // reduced buckets in ready order; then the AllGather buckets of the
  // updated blocks, ready after their updates.
  const std::vector<parallel::ScatteredGradient> shards = ScatteredGradients(tg);
  SINKRT_ASSIGN_OR_RETURN(std::vector<parallel::ShardBucket> zero,
                          parallel::PlanScatterBuckets(shards, plan.grads, options.comm_fusion));
  for (const parallel::ShardBucket& z : zero)
    ready.emplace_back(z.ready_at, ShardBucketDef(tg, z, BucketDef::Kind::ReduceScatter, maps, options, out.groups));
  if (!zero.empty())
    std::stable_sort(ready.begin(), ready.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const parallel::ShardBucket& bucket : parallel::PlanGatherBuckets(zero, shards, options.comm_fusion))
    ready.emplace_back(-1, ShardBucketDef(tg, bucket, BucketDef::Kind::AllGather, maps, options, out.groups));
  if (2 * ready.size() > parallel::kMaxEvents)
    return InvalidArgument("data parallel: " + std::to_string(ready.size()) +
                           " gradient collectives need more than the " + std::to_string(parallel::kMaxEvents) +
                           " events a program may have: turn comm_fusion's openstate on");
  std::vector<int64_t> ready_at;
  for (auto& [at, def] : ready) {
    ready_at.push_back(at);
    out.buckets.push_back(std::move(def));
  }
  return ready_at;
}

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

bool IsCollectiveOp(OpCode op) {
  return op == OpCode::AllReduce || op == OpCode::AllGather || op == OpCode::ReduceScatter || op == OpCode::AllToAll;
}

void AddCollective(const KernelDef& k, const std::string& name, std::vector<CommGroupDef>& groups, uint32_t world_size,
                   std::vector<TaskDef>& tasks) {
  const uint32_t group = GroupIndex(groups, k.attrs.group, world_size);
  const fb::ReduceOp op = k.attrs.max ? fb::ReduceOp::Max : k.attrs.mean ? fb::ReduceOp::Mean : fb::ReduceOp::Sum;
  switch (k.op) {
    case OpCode::AllReduce: {
      KernelDef copy;
      copy.op = OpCode::Copy;
      copy.inputs = k.inputs;
      copy.outputs = k.outputs;
      tasks.push_back({name + "/copy", std::move(copy)});
      tasks.push_back({name, AllReduceDef{.group = group, .op = op, .buffers = k.outputs}});
      return;
    }
    case OpCode::AllGather:
      tasks.push_back({name, AllGatherDef{.group = group, .input = k.inputs[0], .output = k.outputs[0]}});
      return;
    case OpCode::ReduceScatter:
      tasks.push_back({name, ReduceScatterDef{.group = group, .op = op, .input = k.inputs[0], .output = k.outputs[0]}});
      return;
    case OpCode::AllToAll:
      tasks.push_back({name, AllToAllDef{.group = group, .input = k.inputs[0], .output = k.outputs[0]}});
      return;
    default:
      return;
  }
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

}  // namespace sinkrt::host::compiler
