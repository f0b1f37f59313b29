#include "compiler/lowering.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include "compiler/buffer_table.h"
#include "compiler/fusion.h"
#include "compiler/program_plan.h"
#include "compiler/views.h"
#include "parallel/gradient_reduction.h"

namespace sinkrt::host::compiler {
namespace {

// ---- data parallel: the compiler's side of parallel/gradient_reduction.h ----

// Each gradient of tg.grads (parameter order) with the train_step compute
// position of the task that writes it last: GetNext, if any, is position 0.
Result<std::vector<parallel::FusionGradient>> TrainGradients(const TrainingGraph& tg, const ProgramPlan& train) {
  const Graph& g = tg.graph;
  const int64_t first_kernel = train.inputs.empty() ? 0 : 1;
  std::map<TensorId, int64_t> written;
  for (size_t k = 0; k < train.kernels.size(); ++k) {
    const KernelPlan& kernel = train.kernels[k];
    const int64_t pos = first_kernel + static_cast<int64_t>(k);
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
  } else if (const auto* gn = std::get_if<GetNextDef>(&task.body)) {
    c.touched = gn->outputs;
  }
  return c;
}

// Splices the buckets' events into train_step's compute stream and writes
// its comm stream, as parallel::ScheduleGradientReduction orders them.
// ready_at[k] is a compute position before any event is inserted.
void AddGradientReduction(ProgramDef& prog, const std::vector<BucketDef>& buckets,
                          const std::vector<int64_t>& ready_at, fb::ReduceOp op) {
  std::vector<parallel::ComputeTask> tasks;
  tasks.reserve(prog.tasks.size());
  for (const TaskDef& t : prog.tasks) tasks.push_back(ComputeTaskOf(t));
  std::vector<std::vector<uint32_t>> bucket_buffers;
  for (const BucketDef& b : buckets) bucket_buffers.push_back(b.buffers);
  parallel::ReductionSchedule schedule =
      parallel::ScheduleGradientReduction(tasks, bucket_buffers, ready_at);

  auto task_of = [&](parallel::ScheduledTask& s) -> TaskDef {
    using Kind = parallel::ScheduledTask::Kind;
    switch (s.kind) {
      case Kind::Compute: return std::move(prog.tasks[s.index]);
      case Kind::RecordEvent: return {std::move(s.name), EventRecordDef{s.event}};
      case Kind::WaitEvent: return {std::move(s.name), EventWaitDef{s.event}};
      case Kind::AllReduce:
        return {std::move(s.name),
                AllReduceDef{.group = 0, .op = op, .buffers = buckets[s.index].buffers}};
    }
    return {};
  };
  std::vector<TaskDef> compute;
  compute.reserve(schedule.compute.size());
  for (parallel::ScheduledTask& s : schedule.compute) compute.push_back(task_of(s));
  prog.tasks = std::move(compute);
  for (parallel::ScheduledTask& s : schedule.comm) prog.comm_tasks.push_back(task_of(s));
  prog.num_events = schedule.num_events;
}

}  // namespace

std::pair<int64_t, int64_t> FanInOut(const Shape& shape) {
  if (shape.empty()) return {1, 1};
  if (shape.size() == 1) return {shape[0], shape[0]};
  if (shape.size() == 2) return {shape[0], shape[1]};
  int64_t receptive = 1;
  for (size_t i = 2; i < shape.size(); ++i) receptive *= shape[i];
  return {shape[1] * receptive, shape[0] * receptive};
}

Result<LoweredStream> Lower(const TrainingGraph& tg, const LoweringOptions& options) {
  const Graph& g = tg.graph;
  SINKRT_ASSIGN_OR_RETURN(GraphFacts facts, AnalyseGraph(tg));

  std::vector<ProgramPlan> plans;
  plans.push_back({fb::ProgramKind::TrainStep, "train_step", "train", tg.inputs,
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
  std::map<TensorId, size_t> grad_rank;  // place in the bucket-by-bucket layout
  if (options.data_parallel) {
    SINKRT_ASSIGN_OR_RETURN(std::vector<parallel::FusionGradient> grads, TrainGradients(tg, plans[0]));
    SINKRT_ASSIGN_OR_RETURN(buckets, parallel::PlanGradientBuckets(grads, options.comm_fusion));
    for (const parallel::FusionBucket& b : buckets)
      for (size_t i : b.gradients) grad_rank.emplace(tg.grads[i].grad, grad_rank.size());
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
    auto [fan_in, fan_out] = FanInOut(buf.shape);
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
    CommGroupDef world;
    world.name = "world";
    for (uint32_t r = 0; r < options.world_size; ++r) world.ranks.push_back(r);
    out.groups.push_back(std::move(world));
    for (const parallel::FusionBucket& b : buckets) {
      BucketDef def;
      for (size_t i : b.gradients) def.buffers.push_back(maps.persistent.at(tg.grads[i].grad));
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
        q.columns.push_back({g.tensor(t).name, g.tensor(t).dtype, g.tensor(t).shape});
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
      prog.tasks.push_back({std::move(name), std::move(kd)});
    }
    for (TensorId t : plan.reports) prog.reports.push_back(buffer_of(t));

    if (p == 0 && options.data_parallel) {
      // Events touch no buffer and the comm stream only persistent
      // gradients, so liveness below just counts the compute stream.
      std::vector<int64_t> ready_at;
      for (const parallel::FusionBucket& b : buckets) ready_at.push_back(b.ready_at);
      AddGradientReduction(prog, out.buckets, ready_at,
                           options.gradients_mean ? fb::ReduceOp::Mean : fb::ReduceOp::Sum);
    }

    // Liveness of this program's transients, in task order.
    auto use = [&](uint32_t b, int32_t task) {
      BufferDef& buf = out.buffers[b];
      if (buf.persistent) return;
      if (buf.first_use < 0 || task < buf.first_use) buf.first_use = task;
      buf.last_use = std::max(buf.last_use, task);
    };
    for (size_t i = 0; i < prog.tasks.size(); ++i) {
      const int32_t task = static_cast<int32_t>(i);
      if (const auto* gn = std::get_if<GetNextDef>(&prog.tasks[i].body)) {
        for (uint32_t b : gn->outputs) use(b, task);
      } else if (const auto* kd = std::get_if<KernelDef>(&prog.tasks[i].body)) {
        for (uint32_t b : kd->inputs) use(b, task);
        for (uint32_t b : kd->outputs) use(b, task);
        if (kd->fused_bias >= 0) use(static_cast<uint32_t>(kd->fused_bias), task);
      }
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
