#include "compiler/lowering.h"

#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "compiler/fusion_buckets.h"

namespace sinkrt::host::compiler {
namespace {

// One kernel of a program before buffers exist: tensor ids, and the ops it
// stands for (more than one when fused).
struct KernelPlan {
  std::vector<size_t> ops;  // graph op indices; ops[0] is the kernel's op
  std::vector<TensorId> inputs, outputs;
  TensorId bias = kInvalidTensor;
  fb::Activation activation = fb::Activation::None;
};

struct ProgramPlan {
  fb::ProgramKind kind;
  std::string name;    // "train_step"
  std::string stem;    // "train": the queue's name and the transients' prefix
  std::vector<TensorId> inputs;  // the queue's columns, popped by GetNext first
  std::vector<KernelPlan> kernels;
  std::vector<TensorId> reports;
};

bool HasInitializer(TensorKind k) {
  return k == TensorKind::Param || k == TensorKind::Const || k == TensorKind::OptState;
}

// Persistent roles in buffer-table order.
int PersistentRank(fb::BufferRole role) {
  switch (role) {
    case fb::BufferRole::Param: return 0;
    case fb::BufferRole::Const: return 1;
    case fb::BufferRole::OptState: return 2;
    case fb::BufferRole::Grad: return 3;
    case fb::BufferRole::Output: return 4;
    default: return 5;
  }
}

std::string OpContext(const OpNode& op, size_t index) {
  return "op " + std::to_string(index) + " '" + op.name + "'";
}

// Per-tensor facts the lowering needs, computed once over the whole graph.
struct GraphFacts {
  std::vector<int64_t> producer;        // op index, or -1 for a leaf
  std::vector<int32_t> producer_slot;   // output slot within the producer
  std::vector<bool> reported;           // loss, graph outputs, accuracy: never fused away
};

Result<GraphFacts> Analyse(const TrainingGraph& tg) {
  const Graph& g = tg.graph;
  const size_t n = g.tensors().size();
  GraphFacts f;
  f.producer.assign(n, -1);
  f.producer_slot.assign(n, -1);
  f.reported.assign(n, false);
  for (TensorId t = 0; t < n; ++t) {
    const TensorInfo& info = g.tensor(t);
    if (DTypeSize(info.dtype) == 0)
      return InvalidArgument("tensor '" + info.name + "' has dtype " + DTypeName(info.dtype) +
                             ", which has no size");
    int64_t elements = NumElements(info.shape);
    if (elements < 0)
      return InvalidArgument("tensor '" + info.name + "' has an invalid shape " +
                             ShapeToString(info.shape));
  }
  for (size_t i = 0; i < g.ops().size(); ++i) {
    const OpNode& op = g.ops()[i];
    for (TensorId t : op.inputs)
      if (!g.valid(t))
        return InvalidArgument(OpContext(op, i) + " reads tensor id " + std::to_string(t) +
                               ", outside the graph's " + std::to_string(n) + " tensors");
    for (size_t s = 0; s < op.outputs.size(); ++s) {
      TensorId t = op.outputs[s];
      if (!g.valid(t))
        return InvalidArgument(OpContext(op, i) + " writes tensor id " + std::to_string(t) +
                               ", outside the graph's " + std::to_string(n) + " tensors");
      if (f.producer[t] >= 0)
        return InvalidArgument(OpContext(op, i) + " writes tensor '" + g.tensor(t).name +
                               "', already written by " +
                               OpContext(g.ops()[f.producer[t]], f.producer[t]));
      f.producer[t] = static_cast<int64_t>(i);
      f.producer_slot[t] = static_cast<int32_t>(s);
    }
  }
  f.reported[tg.loss] = true;
  for (TensorId t : g.outputs()) f.reported[t] = true;
  if (tg.accuracy != kInvalidTensor) f.reported[tg.accuracy] = true;
  return f;
}

fb::BufferRole RoleOf(const Graph& g, const GraphFacts& f, TensorId t) {
  const TensorInfo& info = g.tensor(t);
  switch (info.kind) {
    case TensorKind::Param: return fb::BufferRole::Param;
    case TensorKind::Const: return fb::BufferRole::Const;
    case TensorKind::OptState: return fb::BufferRole::OptState;
    case TensorKind::Grad: return fb::BufferRole::Grad;
    case TensorKind::Input: return fb::BufferRole::Input;
    case TensorKind::Intermediate: break;
  }
  if (f.reported[t]) return fb::BufferRole::Output;
  if (f.producer[t] >= 0 && g.ops()[f.producer[t]].op == fb::OpCode::MaxPool2D &&
      f.producer_slot[t] == 1)
    return fb::BufferRole::Workspace;
  return fb::BufferRole::Activation;
}

bool IsPersistentRole(fb::BufferRole r) {
  return r == fb::BufferRole::Param || r == fb::BufferRole::Const ||
         r == fb::BufferRole::OptState || r == fb::BufferRole::Grad ||
         r == fb::BufferRole::Output;
}

// ---- fusion -----------------------------------------------------------------

// Reads and in-place writes of each tensor within one program, by position.
struct ProgramUses {
  std::vector<int32_t> readers;      // number of input slots reading the tensor
  std::vector<int64_t> last_reader;  // position of a reader (the only one when readers == 1)
  std::vector<int64_t> position;     // position of the producing op in the program, or -1
  std::map<TensorId, std::vector<size_t>> mutated_at;  // positions of in-place updates
};

ProgramUses CountUses(const Graph& g, const std::vector<size_t>& ops) {
  ProgramUses u;
  const size_t n = g.tensors().size();
  u.readers.assign(n, 0);
  u.last_reader.assign(n, -1);
  u.position.assign(n, -1);
  for (size_t pos = 0; pos < ops.size(); ++pos) {
    const OpNode& op = g.ops()[ops[pos]];
    for (TensorId t : op.inputs) {
      ++u.readers[t];
      u.last_reader[t] = static_cast<int64_t>(pos);
    }
    for (TensorId t : op.outputs) u.position[t] = static_cast<int64_t>(pos);
    for (size_t slot : MutatedInputs(op.op))
      if (slot < op.inputs.size()) u.mutated_at[op.inputs[slot]].push_back(pos);
  }
  return u;
}

// The position of the single op that reads `t`, if `t` may be fused away:
// an intermediate with exactly one reading slot that nobody reports.
int64_t SoleReader(const Graph& g, const GraphFacts& f, const ProgramUses& u, TensorId t) {
  if (g.tensor(t).kind != TensorKind::Intermediate || f.reported[t]) return -1;
  if (u.readers[t] != 1) return -1;
  return u.last_reader[t];
}

int NormalisedAxis(int axis, size_t rank) {
  return axis < 0 ? axis + static_cast<int>(rank) : axis;
}

// Builds one program's kernels, folding fusable chains into their first op.
std::vector<KernelPlan> PlanKernels(const Graph& g, const GraphFacts& f,
                                    const std::vector<size_t>& ops, bool fuse) {
  const ProgramUses u = fuse ? CountUses(g, ops) : ProgramUses{};
  std::vector<bool> absorbed(ops.size(), false);
  std::vector<KernelPlan> kernels;
  for (size_t pos = 0; pos < ops.size(); ++pos) {
    if (absorbed[pos]) continue;
    const OpNode& op = g.ops()[ops[pos]];
    KernelPlan k{.ops = {ops[pos]}, .inputs = op.inputs, .outputs = op.outputs};
    const bool head = op.op == fb::OpCode::MatMul || op.op == fb::OpCode::Conv2D;
    if (fuse && head && op.outputs.size() == 1) {
      const TensorId t = op.outputs[0];
      const TensorInfo& ti = g.tensor(t);
      const size_t want_rank = op.op == fb::OpCode::MatMul ? 2 : 4;
      const int64_t j = SoleReader(g, f, u, t);
      const OpNode* bias_add = j > static_cast<int64_t>(pos) ? &g.ops()[ops[j]] : nullptr;
      bool ok = bias_add && bias_add->op == fb::OpCode::BiasAdd &&
                bias_add->inputs.size() == 2 && bias_add->outputs.size() == 1 &&
                bias_add->inputs[0] == t && bias_add->inputs[1] != t &&
                ti.shape.size() == want_rank &&
                NormalisedAxis(bias_add->attrs.axis, want_rank) == 1;
      if (ok) {
        // The bias must be a [C] vector of the same type, already written
        // when the head op runs, and not updated in place before the BiasAdd
        // would have read it.
        const TensorId b = bias_add->inputs[1];
        const TensorInfo& bi = g.tensor(b);
        ok = bi.dtype == ti.dtype && bi.shape.size() == 1 && bi.shape[0] == ti.shape[1] &&
             u.position[b] < static_cast<int64_t>(pos);
        if (ok) {
          if (auto it = u.mutated_at.find(b); it != u.mutated_at.end())
            for (size_t m : it->second)
              if (m > pos && static_cast<int64_t>(m) < j) ok = false;
        }
      }
      if (ok) {
        absorbed[j] = true;
        k.ops.push_back(ops[j]);
        k.bias = bias_add->inputs[1];
        k.outputs = bias_add->outputs;
        const TensorId y = bias_add->outputs[0];
        const int64_t r = SoleReader(g, f, u, y);
        if (r > j) {
          const OpNode& relu = g.ops()[ops[r]];
          if (relu.op == fb::OpCode::Relu && relu.inputs.size() == 1 && relu.outputs.size() == 1) {
            absorbed[r] = true;
            k.ops.push_back(ops[r]);
            k.activation = fb::Activation::Relu;
            k.outputs = relu.outputs;
          }
        }
      }
    }
    kernels.push_back(std::move(k));
  }
  return kernels;
}

// ---- buffers ------------------------------------------------------------------

Result<uint64_t> BufferBytes(const TensorInfo& info) {
  const int64_t elements = NumElements(info.shape);
  const uint64_t size = DTypeSize(info.dtype);
  if (elements < 0 || size == 0 ||
      static_cast<uint64_t>(elements) > (uint64_t{1} << 62) / size)
    return InvalidArgument("tensor '" + info.name + "' of shape " + ShapeToString(info.shape) +
                           " is too large for a buffer");
  return static_cast<uint64_t>(elements) * size;
}

// Maps tensors to buffer indices: one table for persistent tensors, one per
// program for transients.
struct BufferMaps {
  std::map<TensorId, uint32_t> persistent;
  std::vector<std::map<TensorId, uint32_t>> transient;  // per program plan

  uint32_t Find(bool persistent_role, int program, TensorId t) const {
    return persistent_role ? persistent.at(t) : transient[program].at(t);
  }
};

// ---- data parallel -------------------------------------------------------------

// Event limit of the format (the verifier refuses more); two per bucket.
constexpr size_t kMaxEvents = 65536;

// Each gradient of tg.grads (parameter order) with the train_step compute
// position of the task that writes it last: GetNext, if any, is position 0.
Result<std::vector<FusionGradient>> TrainGradients(const TrainingGraph& tg, const ProgramPlan& train) {
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
  std::vector<FusionGradient> out;
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

bool Touches(const TaskDef& task, const std::set<uint32_t>& buffers) {
  auto any = [&](const std::vector<uint32_t>& v) {
    return std::any_of(v.begin(), v.end(), [&](uint32_t b) { return buffers.count(b) > 0; });
  };
  if (const auto* k = std::get_if<KernelDef>(&task.body))
    return any(k->inputs) || any(k->outputs) ||
           (k->fused_bias >= 0 && buffers.count(static_cast<uint32_t>(k->fused_bias)) > 0);
  if (const auto* gn = std::get_if<GetNextDef>(&task.body)) return any(gn->outputs);
  return false;
}

// The optimizer updates end the step in parameter order, which is roughly
// the reverse of the order backward finishes the gradients: the first
// update would wait for the last bucket. Runs them bucket by bucket instead,
// so that bucket 0's updates overlap the later buckets' reductions. Only the
// trailing run of kernels at positions >= `after` (past every gradient's
// last write) that each touch one bucket's gradients is reordered, and only
// if no buffer one of them writes is touched by another (true of the
// updates: each owns its parameter and state; Adam's shared powers are only
// read there).
void OrderUpdatesByBucket(std::vector<TaskDef>& tasks, const std::map<uint32_t, size_t>& bucket_of,
                          size_t after) {
  auto bucket = [&](const TaskDef& t) -> int64_t {
    const auto* k = std::get_if<KernelDef>(&t.body);
    if (!k) return -1;
    int64_t found = -1;
    for (const std::vector<uint32_t>* list : {&k->inputs, &k->outputs})
      for (uint32_t b : *list)
        if (auto it = bucket_of.find(b); it != bucket_of.end()) {
          if (found >= 0 && found != static_cast<int64_t>(it->second)) return -1;
          found = static_cast<int64_t>(it->second);
        }
    return found;
  };
  size_t start = tasks.size();
  while (start > after && bucket(tasks[start - 1]) >= 0) --start;
  std::map<uint32_t, int> writers, touchers;
  for (size_t i = start; i < tasks.size(); ++i) {
    const KernelDef& k = std::get<KernelDef>(tasks[i].body);
    std::set<uint32_t> touched(k.inputs.begin(), k.inputs.end());
    touched.insert(k.outputs.begin(), k.outputs.end());
    if (k.fused_bias >= 0) touched.insert(static_cast<uint32_t>(k.fused_bias));
    for (uint32_t b : touched) ++touchers[b];
    for (uint32_t b : k.outputs) ++writers[b];
    for (size_t slot : MutatedInputs(k.op))
      if (slot < k.inputs.size()) ++writers[k.inputs[slot]];
  }
  for (const auto& [b, n] : writers)
    if (touchers[b] > 1) return;
  std::stable_sort(tasks.begin() + static_cast<std::ptrdiff_t>(start), tasks.end(),
                   [&](const TaskDef& a, const TaskDef& b) { return bucket(a) < bucket(b); });
}

// Splices the buckets' events into train_step's compute stream and writes
// its comm stream (the top of lowering.h). ready_at[k] is a compute position
// before any event is inserted.
void AddGradientReduction(ProgramDef& prog, const std::vector<BucketDef>& buckets,
                          const std::vector<int64_t>& ready_at, fb::ReduceOp op) {
  const size_t n = prog.tasks.size();
  const size_t count = buckets.size();
  std::map<uint32_t, size_t> bucket_of;
  for (size_t k = 0; k < count; ++k)
    for (uint32_t b : buckets[k].buffers) bucket_of[b] = k;
  const int64_t last_ready = *std::max_element(ready_at.begin(), ready_at.end());
  OrderUpdatesByBucket(prog.tasks, bucket_of, static_cast<size_t>(last_ready) + 1);
  // A bucket's gradients may not be touched between "ready" and "done": the
  // AllReduce rewrites them in place. Waiting at the first toucher, not
  // earlier, lets everything before it overlap the reduction.
  std::vector<size_t> consumer(count, n);
  for (size_t k = 0; k < count; ++k) {
    const std::set<uint32_t> mine(buckets[k].buffers.begin(), buckets[k].buffers.end());
    for (size_t i = static_cast<size_t>(ready_at[k]) + 1; i < n; ++i)
      if (Touches(prog.tasks[i], mine)) {
        consumer[k] = i;
        break;
      }
  }
  auto label = [](size_t k, const char* what) { return "bucket" + std::to_string(k) + "/" + what; };
  auto ready = [](size_t k) { return static_cast<uint32_t>(2 * k); };
  auto done = [](size_t k) { return static_cast<uint32_t>(2 * k + 1); };

  std::vector<TaskDef> compute;
  compute.reserve(n + 2 * count);
  for (size_t i = 0; i <= n; ++i) {
    for (size_t k = 0; k < count; ++k)
      if (consumer[k] == i) compute.push_back({label(k, "done"), EventWaitDef{done(k)}});
    if (i == n) break;
    compute.push_back(std::move(prog.tasks[i]));
    for (size_t k = 0; k < count; ++k)
      if (ready_at[k] == static_cast<int64_t>(i)) compute.push_back({label(k, "ready"), EventRecordDef{ready(k)}});
  }
  prog.tasks = std::move(compute);
  for (size_t k = 0; k < count; ++k) {
    prog.comm_tasks.push_back({label(k, "ready"), EventWaitDef{ready(k)}});
    prog.comm_tasks.push_back(
        {label(k, "allreduce"), AllReduceDef{.group = 0, .op = op, .buffers = buckets[k].buffers}});
    prog.comm_tasks.push_back({label(k, "done"), EventRecordDef{done(k)}});
  }
  prog.num_events = static_cast<uint32_t>(2 * count);
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
  SINKRT_ASSIGN_OR_RETURN(GraphFacts facts, Analyse(tg));
  for (size_t i = 0; i < g.ops().size(); ++i)
    if (g.ops()[i].op == fb::OpCode::MaxPool2D && g.ops()[i].outputs.size() != 2)
      return InvalidArgument(OpContext(g.ops()[i], i) + ": MaxPool2D must have two outputs " +
                             "(y and its argmax workspace), has " +
                             std::to_string(g.ops()[i].outputs.size()));

  std::vector<ProgramPlan> plans;
  plans.push_back({fb::ProgramKind::TrainStep, "train_step", "train", tg.inputs,
                   PlanKernels(g, facts, tg.train_program, options.fuse), tg.train_reports});
  if (options.eval_program)
    plans.push_back({fb::ProgramKind::EvalStep, "eval_step", "eval", tg.inputs,
                     PlanKernels(g, facts, tg.eval_program, options.fuse), tg.eval_reports});
  if (options.predict_program)
    plans.push_back({fb::ProgramKind::PredictStep, "predict_step", "predict", tg.predict_inputs,
                     PlanKernels(g, facts, tg.predict_program, options.fuse), tg.predict_reports});

  // Which tensors each program touches.
  std::vector<fb::BufferRole> role(g.tensors().size());
  for (TensorId t = 0; t < g.tensors().size(); ++t) role[t] = RoleOf(g, facts, t);
  std::set<TensorId> persistent_used;
  std::vector<std::set<TensorId>> transient_used(plans.size());
  auto touch = [&](size_t p, TensorId t) {
    if (IsPersistentRole(role[t]))
      persistent_used.insert(t);
    else
      transient_used[p].insert(t);
  };
  for (TensorId t = 0; t < g.tensors().size(); ++t)
    if (HasInitializer(g.tensor(t).kind)) persistent_used.insert(t);
  for (size_t p = 0; p < plans.size(); ++p) {
    for (TensorId t : plans[p].inputs) touch(p, t);
    for (const KernelPlan& k : plans[p].kernels) {
      for (TensorId t : k.inputs) touch(p, t);
      for (TensorId t : k.outputs) touch(p, t);
      if (k.bias != kInvalidTensor) touch(p, k.bias);
    }
    for (TensorId t : plans[p].reports) touch(p, t);
  }

  // Data parallel: the buckets decide the Grad buffers' order, so they come
  // before the buffer table.
  std::vector<FusionBucket> buckets;
  std::map<TensorId, size_t> grad_rank;  // place in the bucket-by-bucket layout
  if (options.data_parallel) {
    SINKRT_ASSIGN_OR_RETURN(std::vector<FusionGradient> grads, TrainGradients(tg, plans[0]));
    SINKRT_ASSIGN_OR_RETURN(buckets, PlanFusionBuckets(grads, options.comm_fusion));
    if (2 * buckets.size() > kMaxEvents)
      return InvalidArgument("data parallel: " + std::to_string(buckets.size()) +
                             " gradient AllReduces need more than the " + std::to_string(kMaxEvents) +
                             " events a program may have: turn comm_fusion's openstate on");
    for (const FusionBucket& b : buckets)
      for (size_t i : b.gradients) grad_rank.emplace(tg.grads[i].grad, grad_rank.size());
  }
  auto layout_rank = [&](TensorId t) {
    auto it = grad_rank.find(t);
    return it == grad_rank.end() ? 0 : it->second;
  };

  LoweredStream out;
  BufferMaps maps;
  maps.transient.resize(plans.size());
  std::set<std::string> names;
  auto add_buffer = [&](TensorId t, bool persistent, fb::ProgramKind program,
                        std::string name) -> Status {
    const TensorInfo& info = g.tensor(t);
    BufferDef b;
    b.name = std::move(name);
    b.tensor = t;
    b.dtype = info.dtype;
    b.shape = info.shape;
    b.role = role[t];
    b.persistent = persistent;
    b.program = program;
    if (b.role == fb::BufferRole::Workspace) {
      // docs/ops.md: 4 bytes of argmax per element of the pooled output.
      const TensorInfo& y = g.tensor(g.ops()[facts.producer[t]].outputs[0]);
      b.dtype = DType::U8;
      b.shape = {4 * NumElements(y.shape)};
      TensorInfo workspace;
      workspace.name = info.name;
      workspace.dtype = b.dtype;
      workspace.shape = b.shape;
      SINKRT_ASSIGN_OR_RETURN(b.bytes, BufferBytes(workspace));
    } else {
      SINKRT_ASSIGN_OR_RETURN(b.bytes, BufferBytes(info));
    }
    if (!names.insert(b.name).second)
      return InvalidArgument("two buffers are named '" + b.name +
                             "': tensor names must be unique (and not start with 'eval/' or "
                             "'predict/')");
    if (out.buffers.size() >= std::numeric_limits<uint32_t>::max())
      return ResourceExhausted("more than 2^32 - 1 buffers");
    out.buffers.push_back(std::move(b));
    return Status::Ok();
  };

  // The host finds the metrics by these names; a graph that already uses a
  // name for another tensor keeps the metric's own tensor name instead.
  auto buffer_name = [&](TensorId t) {
    const char* alias = t == tg.loss ? "loss" : t == tg.accuracy ? "accuracy" : nullptr;
    if (alias && (g.tensor(t).name == alias || g.FindTensor(alias) == kInvalidTensor))
      return std::string(alias);
    return g.tensor(t).name;
  };

  std::vector<TensorId> persistent_order(persistent_used.begin(), persistent_used.end());
  std::stable_sort(persistent_order.begin(), persistent_order.end(), [&](TensorId a, TensorId b) {
    if (PersistentRank(role[a]) != PersistentRank(role[b])) return PersistentRank(role[a]) < PersistentRank(role[b]);
    return layout_rank(a) < layout_rank(b);
  });
  for (TensorId t : persistent_order) {
    maps.persistent[t] = static_cast<uint32_t>(out.buffers.size());
    SINKRT_RETURN_IF_ERROR(add_buffer(t, true, fb::ProgramKind::Init, buffer_name(t)));
  }
  for (size_t p = 0; p < plans.size(); ++p) {
    const std::string prefix = p == 0 ? "" : plans[p].stem + "/";
    for (TensorId t : transient_used[p]) {
      maps.transient[p][t] = static_cast<uint32_t>(out.buffers.size());
      SINKRT_RETURN_IF_ERROR(add_buffer(t, false, plans[p].kind, prefix + buffer_name(t)));
    }
  }

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
    for (const FusionBucket& b : buckets) {
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
      for (const FusionBucket& b : buckets) ready_at.push_back(b.ready_at);
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
  return out;
}

}  // namespace sinkrt::host::compiler
