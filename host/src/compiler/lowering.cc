#include "host/src/compiler/lowering.h"

#include <algorithm>
#include <functional>
#include <map>
#include <string>
#include <utility>

#include "host/src/compiler/buffer_table.h"
#include "host/src/compiler/fusion.h"
#include "host/src/compiler/gradient_collectives.h"
#include "host/src/compiler/metric_sums.h"
#include "host/src/compiler/program_plan.h"
#include "host/src/compiler/views.h"

namespace sinkrt::host::compiler {
namespace {

// The buffer of tensor `t` in step program `program`.
struct BufferOf {
  const BufferTable& table;
  int program;
  uint32_t operator()(TensorId t) const { return table.maps.Find(IsPersistentRole(table.role[t]), program, t); }
};

// train_step, then eval_step and predict_step when asked for, as kernels.
std::vector<ProgramPlan> PlanPrograms(const passes::TrainingGraph& tg, const GraphFacts& facts,
                                      const LoweringOptions& options) {
  const Graph& g = tg.graph;
  std::vector<ProgramPlan> plans;
  plans.push_back({ProgramKind::TrainStep, "train_step", "train", tg.train_inputs.empty() ? tg.inputs : tg.train_inputs,
                   PlanKernels(g, facts, tg.train_program, options.fuse), tg.train_reports});
  if (options.eval_program)
    plans.push_back({ProgramKind::EvalStep, "eval_step", "eval", tg.inputs,
                     PlanKernels(g, facts, tg.eval_program, options.fuse), tg.eval_reports});
  if (options.predict_program)
    plans.push_back({ProgramKind::PredictStep, "predict_step", "predict", tg.predict_inputs,
                     PlanKernels(g, facts, tg.predict_program, options.fuse), tg.predict_reports});
  for (size_t p = 1; p < plans.size(); ++p) UseMovingStatistics(g, plans[p].kernels);
  return plans;
}

// Initializers, in buffer order. Returns their indices.
Result<std::vector<uint32_t>> AddInitializers(const Graph& g, LoweredStream& out) {
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
    if (init.init.kind == InitKind::Inline && init.init.data.size() != buf.bytes)
      return InvalidArgument("tensor '" + buf.name + "' has " + std::to_string(init.init.data.size()) +
                             " bytes of inline initial data, its buffer holds " + std::to_string(buf.bytes));
    if (init.init.kind != InitKind::Inline) init.init.data.clear();
    all_initializers.push_back(static_cast<uint32_t>(out.initializers.size()));
    out.initializers.push_back(std::move(init));
  }
  return all_initializers;
}

ProgramDef InitProgram(std::vector<uint32_t> initializers, const std::vector<BufferDef>& buffers,
                       const LoweringOptions& options) {
  ProgramDef init;
  init.name = "init";
  init.kind = ProgramKind::Init;
  init.tasks.push_back({"init", InitTaskDef{std::move(initializers)}});
  if (options.data_parallel && options.parameter_broadcast) {
    // Replicas start from rank 0's values (MindSpore's _broadcast_params),
    // after their own initialisation so that every buffer is written.
    BroadcastDef broadcast;  // group 0 ("world"), root rank 0
    for (uint32_t b = 0; b < buffers.size(); ++b)
      if (buffers[b].role == BufferRole::Param) broadcast.buffers.push_back(b);
    if (!broadcast.buffers.empty()) init.tasks.push_back({"parameter_broadcast", std::move(broadcast)});
  }
  return init;
}

// A program's GetNext and its queue. A program without inputs (a graph that
// trains towards constants) has no queue to pop: a queue needs at least
// one column.
void AddGetNext(const Graph& g, const ProgramPlan& plan, const BufferOf& buffer_of, const LoweringOptions& options,
                LoweredStream& out, ProgramDef& prog) {
  if (plan.inputs.empty()) return;
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

// One kernel's task(s): a collective or a transfer of the graph becomes its
// task, any other op a kernel.
void AddKernelTask(const Graph& g, const KernelPlan& k, bool train_step, const BufferOf& buffer_of,
                   const LoweringOptions& options, LoweredStream& out, ProgramDef& prog) {
  const OpNode& head = g.ops()[k.ops[0]];
  KernelDef kd;
  kd.op = k.code == OpCode::Invalid ? head.op : k.code;
  kd.attrs = head.attrs;
  kd.fused_activation = k.activation;
  for (TensorId t : k.inputs) kd.inputs.push_back(buffer_of(t));
  for (TensorId t : k.outputs) kd.outputs.push_back(buffer_of(t));
  if (k.bias != kInvalidTensor) kd.fused_bias = static_cast<int32_t>(buffer_of(k.bias));
  std::string name = head.name;
  for (size_t i = 1; i < k.ops.size(); ++i) name += "+" + g.ops()[k.ops[i]].name;
  if (train_step && k.ops.size() > 1) ++out.fused_kernels;
  if (IsCollectiveOp(kd.op)) {
    AddCollective(kd, name, out.groups, options.world_size, prog.tasks);
    return;
  }
  if (kd.op == OpCode::Send || kd.op == OpCode::Recv) {
    const uint32_t group = GroupIndex(out.groups, head.attrs.group, options.world_size);
    if (kd.op == OpCode::Send)
      prog.tasks.push_back({std::move(name), SendDef{.group = group,
                                                     .peer = head.attrs.peer,
                                                     .buffer = kd.inputs.at(0),
                                                     .order = head.attrs.comm_order,
                                                     .channel = head.attrs.channel}});
    else
      prog.tasks.push_back(
          {std::move(name),
           RecvDef{
               .group = group, .peer = head.attrs.peer, .buffer = kd.outputs.at(0), .order = head.attrs.comm_order}});
    return;
  }
  // A gradient summed over micro-batches: acc = acc + g in place (AddN
  // allows its output to be one of its inputs).
  if (kd.op == OpCode::AccumulateGrad) {
    kd.op = OpCode::AddN;
    kd.attrs = OpAttrs{};
    kd.outputs = {kd.inputs.at(0)};
  }
  // Eval and predict run without dropout (nn.Dropout outside set_train):
  // x passes through, the step is not read.
  if (kd.op == OpCode::Dropout && !train_step) {
    kd.op = OpCode::Copy;
    kd.attrs = OpAttrs{};
    kd.inputs.resize(1);
  }
  // GradAllReduce is the identity in the forward (its gradient is the
  // AllReduce).
  if (kd.op == OpCode::GradAllReduce) {
    kd.op = OpCode::Copy;
    kd.attrs = OpAttrs{};
  }
  prog.tasks.push_back({std::move(name), std::move(kd)});
}

// The comm stream: a pipeline stage's transfers (and train_step's
// gradient buckets), or data parallel's gradient reduction.
Status AddCommStream(const ProgramPlan& plan, bool train_step, const LoweringOptions& options,
                     const std::vector<int64_t>& bucket_ready_at, const LoweredStream& out, ProgramDef& prog) {
  if (train_step && options.pipeline) {
    SINKRT_RETURN_IF_ERROR(AddPipelineComm(prog, out.buffers, out.buckets, bucket_ready_at,
                                           options.gradients_mean ? fb::ReduceOp::Mean : fb::ReduceOp::Sum),
                           "train_step");
  } else if (options.pipeline && plan.kind == ProgramKind::EvalStep) {
    // Its transfers and collectives; eval reduces no gradient.
    SINKRT_RETURN_IF_ERROR(AddPipelineComm(prog, out.buffers, {}, {}, fb::ReduceOp::Sum), "eval_step");
  } else if (train_step && options.data_parallel) {
    // Events touch no buffer and the comm stream only persistent
    // gradients and parameters, so liveness below just counts the compute
    // stream.
    AddGradientReduction(prog, out.buffers, out.buckets, bucket_ready_at,
                         options.gradients_mean ? fb::ReduceOp::Mean : fb::ReduceOp::Sum);
  }
  return Status::Ok();
}

// Liveness of this program's transients, in task order.
void MarkLiveness(const ProgramDef& prog, std::vector<BufferDef>& buffers) {
  auto use = [&](uint32_t b, int32_t task) {
    BufferDef& buf = buffers[b];
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
    const std::vector<uint32_t> comm = TaskBuffers(prog.comm_tasks[i + 1]);
    comm_buffers[wait->event] = comm;
    comm_buffers[wait->event + 1] = comm;
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
    if (!buffers[b].persistent) use(b, static_cast<int32_t>(prog.tasks.size() - 1));
}

// Step program `p` (0: train_step) as tasks, with its comm stream and its
// transients' liveness.
Result<ProgramDef> LowerProgram(const passes::TrainingGraph& tg, const std::vector<ProgramPlan>& plans, size_t p,
                                const BufferTable& table, const LoweringOptions& options,
                                const std::vector<int64_t>& bucket_ready_at, LoweredStream& out) {
  const Graph& g = tg.graph;
  const ProgramPlan& plan = plans[p];
  ProgramDef prog;
  prog.name = plan.name;
  prog.kind = plan.kind;
  const BufferOf buffer_of{table, static_cast<int>(p)};
  AddGetNext(g, plan, buffer_of, options, out, prog);
  for (const KernelPlan& k : plan.kernels) AddKernelTask(g, k, p == 0, buffer_of, options, out, prog);
  for (TensorId t : plan.reports) prog.reports.push_back(buffer_of(t));
  if (plan.kind == ProgramKind::EvalStep) AddMetricSums(g, plan, tg.accuracy, buffer_of, &out.buffers, &prog);
  SINKRT_RETURN_IF_ERROR(AddCommStream(plan, p == 0, options, bucket_ready_at, out, prog));
  MarkLiveness(prog, out.buffers);
  return prog;
}

// A view group is one buffer to the planner: its root lives from the first
// use of any member to the last (views' tasks never touch the root's index).
void ExtendViewRoots(std::vector<BufferDef>& buffers) {
  for (BufferDef& view : buffers) {
    if (view.view_of < 0 || view.first_use < 0) continue;
    BufferDef& root = buffers[view.view_of];
    root.first_use = root.first_use < 0 ? view.first_use : std::min(root.first_use, view.first_use);
    root.last_use = std::max(root.last_use, view.last_use);
  }
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
  SINKRT_ASSIGN_OR_RETURN(GraphFacts facts, AnalyseGraph(tg));
  std::vector<ProgramPlan> plans = PlanPrograms(tg, facts, options);
  // Views leave the kernel lists before anything counts task positions.
  std::vector<ProgramViews> views;
  for (ProgramPlan& plan : plans) views.push_back(PlanViews(tg.graph, facts, plan, options.arena_alignment));

  // Data parallel: the buckets decide the Grad buffers' order, so they come
  // before the buffer table.
  GradientCollectivePlan collectives;
  if (options.data_parallel) {
    SINKRT_ASSIGN_OR_RETURN(collectives, PlanGradientCollectives(tg, plans[0], options));
  }

  SINKRT_ASSIGN_OR_RETURN(BufferTable table, BuildBufferTable(tg, facts, plans, views, collectives.grad_rank));
  LoweredStream out;
  out.buffers = std::move(table.buffers);
  SINKRT_ASSIGN_OR_RETURN(std::vector<uint32_t> initializers, AddInitializers(tg.graph, out));
  out.programs.push_back(InitProgram(std::move(initializers), out.buffers, options));
  std::vector<int64_t> bucket_ready_at;  // per entry of out.buckets
  if (options.data_parallel) {
    SINKRT_ASSIGN_OR_RETURN(bucket_ready_at, AddGradientBuckets(tg, collectives, table.maps, options, out));
  }
  for (size_t p = 0; p < plans.size(); ++p) {
    SINKRT_ASSIGN_OR_RETURN(ProgramDef prog, LowerProgram(tg, plans, p, table, options, bucket_ready_at, out));
    out.programs.push_back(std::move(prog));
  }
  ExtendViewRoots(out.buffers);
  return out;
}

}  // namespace sinkrt::host::compiler
