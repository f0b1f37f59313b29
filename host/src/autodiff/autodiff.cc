#include "sinkrt/host/autodiff.h"

#include <algorithm>
#include <optional>
#include <set>
#include <string>

#include "host/src/autodiff/grad_rules.h"

namespace sinkrt::host {
namespace autodiff_internal {

Backward::Backward(const Graph& g) : g_(g) {
  for (const OpNode& op : g.ops()) names_.insert(op.name);
}

std::string Backward::UniqueOpName(const std::string& name) {
  std::string n = name;
  for (int i = 1; names_.count(n); ++i) n = name + "_" + std::to_string(i);
  names_.insert(n);
  return n;
}

Ref Backward::Emit(OpCode op, std::vector<Ref> inputs, OpAttrs attrs, Shape shape, const std::string& name,
                   DType dtype) {
  const uint32_t v = static_cast<uint32_t>(values_.size());
  values_.push_back(Value{std::move(shape), static_cast<uint32_t>(ops_.size()), dtype});
  ops_.push_back(PendingOp{UniqueOpName(name), op, std::move(inputs), std::move(attrs), {v}});
  return Ref{true, v};
}

std::vector<Ref> Backward::EmitMulti(OpCode op, std::vector<Ref> inputs, OpAttrs attrs, std::vector<Shape> shapes,
                                     const std::string& name, std::vector<DType> dtypes) {
  std::vector<Ref> refs;
  std::vector<uint32_t> outs;
  for (size_t k = 0; k < shapes.size(); ++k) {
    Shape& shape = shapes[k];
    const uint32_t v = static_cast<uint32_t>(values_.size());
    values_.push_back(
        Value{std::move(shape), static_cast<uint32_t>(ops_.size()), k < dtypes.size() ? dtypes[k] : DType::F32});
    outs.push_back(v);
    refs.push_back(Ref{true, v});
  }
  ops_.push_back(PendingOp{UniqueOpName(name), op, std::move(inputs), std::move(attrs), std::move(outs)});
  return refs;
}

Ref Backward::Read(TensorId t) const { return t < remap_.size() && remap_[t] ? *remap_[t] : Forward(t); }

void Backward::Remap(TensorId t, Ref value) {
  if (remap_.size() <= t) remap_.resize(static_cast<size_t>(t) + 1);
  remap_[t] = value;
}

const Shape& Backward::shape(Ref r) const { return r.pending ? values_[r.id].shape : g_.tensor(r.id).shape; }

DType Backward::dtype(Ref r) const { return r.pending ? values_[r.id].dtype : g_.tensor(r.id).dtype; }

}  // namespace autodiff_internal

using autodiff_internal::Backward;
using autodiff_internal::Ref;

namespace {

std::string TensorIdText(const Graph& g, TensorId t) {
  return "tensor id " + std::to_string(t) + " is not a tensor of graph '" + g.name() + "'";
}

// Checks the seeds and the wrt tensors; names the first one that is wrong.
Status CheckOptions(const Graph& g, const BackwardOptions& o) {
  for (size_t i = 0; i < o.output_grads.size(); ++i) {
    const auto [t, seed] = o.output_grads[i];
    const std::string where = "AppendBackward: output_grads[" + std::to_string(i) + "]: ";
    if (!g.valid(t)) return InvalidArgument(where + TensorIdText(g, t));
    const TensorInfo& ti = g.tensor(t);
    if (!g.valid(seed)) return InvalidArgument(where + "the seed of '" + ti.name + "': " + TensorIdText(g, seed));
    const TensorInfo& si = g.tensor(seed);
    if (ti.dtype != DType::F32) {
      return InvalidArgument(where + "seeded tensor '" + ti.name + "' must be f32 (got " + DTypeName(ti.dtype) + ")");
    }
    if (seed == t) return InvalidArgument(where + "tensor '" + ti.name + "' cannot seed itself");
    if (si.dtype != ti.dtype || si.shape != ti.shape) {
      return InvalidArgument(where + "seed '" + si.name + "' (" + DTypeName(si.dtype) + " " + ShapeToString(si.shape) +
                             ") must match tensor '" + ti.name + "' (" + DTypeName(ti.dtype) + " " +
                             ShapeToString(ti.shape) + ")");
    }
    for (size_t j = 0; j < i; ++j)
      if (o.output_grads[j].first == t)
        return InvalidArgument(where + "tensor '" + ti.name + "' is seeded twice (also output_grads[" +
                               std::to_string(j) + "])");
  }
  for (size_t i = 0; i < o.wrt.size(); ++i) {
    const TensorId t = o.wrt[i];
    const std::string where = "AppendBackward: wrt[" + std::to_string(i) + "]: ";
    if (!g.valid(t)) return InvalidArgument(where + TensorIdText(g, t));
    const TensorInfo& ti = g.tensor(t);
    if (ti.kind == TensorKind::Param) {
      return InvalidArgument(where + "'" + ti.name +
                             "' is a Param; its gradient is returned with the other parameters'");
    }
    if (ti.dtype != DType::F32) {
      return InvalidArgument(where + "'" + ti.name + "' must be f32 (got " + DTypeName(ti.dtype) + ")");
    }
    for (size_t j = 0; j < i; ++j)
      if (o.wrt[j] == t)
        return InvalidArgument(where + "'" + ti.name + "' is listed twice (also wrt[" + std::to_string(j) + "])");
  }
  return Status::Ok();
}

// The loss, the options and the graph's state: names the first that is
// wrong.
Status CheckArguments(const Graph& g, TensorId loss, const BackwardOptions& options) {
  const bool has_loss = loss != kInvalidTensor;
  if (!has_loss && options.output_grads.empty()) {
    return FailedPrecondition("AppendBackward: the graph has no loss; call SetLoss first");
  }
  if (has_loss && !g.valid(loss)) {
    return InvalidArgument("AppendBackward: loss is not a tensor of graph '" + g.name() + "' (id " +
                           std::to_string(loss) + ")");
  }
  if (has_loss) {
    const TensorInfo& lt = g.tensor(loss);
    if (lt.dtype != DType::F32 || !lt.shape.empty()) {
      return InvalidArgument("AppendBackward: loss '" + lt.name + "' must be an f32 scalar (shape []), got " +
                             DTypeName(lt.dtype) + " " + ShapeToString(lt.shape));
    }
  }
  SINKRT_RETURN_IF_ERROR(CheckOptions(g, options));
  for (const TensorInfo& t : g.tensors()) {
    if (t.kind == TensorKind::Grad) {
      return FailedPrecondition("AppendBackward: graph '" + g.name() + "' already has a backward pass (Grad tensor '" +
                                t.name + "')");
    }
  }
  return Status::Ok();
}

// What the error of a missing rule says the op feeds.
std::string SeededText(const Graph& g, TensorId loss, const BackwardOptions& options) {
  const std::vector<TensorInfo>& tensors = g.tensors();
  if (loss != kInvalidTensor) return "the loss '" + tensors[loss].name + "'";
  std::string seeded = options.output_grads.size() == 1 ? "the seeded tensor" : "the seeded tensors";
  for (size_t i = 0; i < options.output_grads.size(); ++i)
    seeded += (i ? ", '" : " '") + tensors[options.output_grads[i].first].name + "'";
  return seeded;
}

// Which tensors depend on a Param (or a wrt tensor) through differentiable
// inputs: only those need gradients, so branches fed by Inputs and Consts
// alone (and labels, which are i32) are pruned.
std::vector<bool> NeedsGradient(const Graph& g, const BackwardOptions& options) {
  const std::vector<TensorInfo>& tensors = g.tensors();
  std::vector<bool> needs(tensors.size(), false);
  for (size_t t = 0; t < tensors.size(); ++t)
    needs[t] = tensors[t].kind == TensorKind::Param && tensors[t].dtype == DType::F32;
  for (TensorId t : options.wrt) needs[t] = true;
  for (const OpNode& op : g.ops()) {
    bool any = false;
    for (size_t i = 0; i < op.inputs.size(); ++i)
      any = any || (needs[op.inputs[i]] && autodiff_internal::DifferentiableInput(op.op, i));
    if (!any || op.op == OpCode::ArgMaxAccuracy) continue;
    // Gradients flow through float tensors: f32, and bf16 between Casts.
    for (TensorId o : op.outputs) needs[o] = tensors[o].dtype == DType::F32 || tensors[o].dtype == DType::BF16;
  }
  return needs;
}

// The backward pass as pending ops (grad_rules.h), before any is written.
struct Walk {
  explicit Walk(const Graph& g) : b(g), grads(g.tensors().size()) {}
  Backward b;
  // Gradient contributions per forward tensor, summed when an op needs them.
  // A seed from output_grads is a forward tensor (Ref::pending false).
  std::vector<std::vector<Ref>> grads;
  std::set<std::string> recomputed;   // segments already re-run
  std::vector<size_t> recompute_ops;  // the pending ops that re-run them
};

// A recomputed segment (Graph::Recompute) is re-run, whole and in forward
// order, right before the first of its ops' gradients: its rules then read
// the recomputed values, and its forward activations die with the forward
// pass. Tensors from outside it (its inputs, the checkpoints) are read as
// they are.
void RecomputeSegment(const Graph& g, size_t forward_ops, const std::string& segment, Walk& w) {
  const std::vector<TensorInfo>& tensors = g.tensors();
  for (size_t j = 0; j < forward_ops; ++j) {
    const OpNode& f = g.ops()[j];
    if (f.recompute != segment) continue;
    // BatchNorm updates its moving statistics in place: re-running it would
    // update them twice (and SyncBatchNorm's shift has moved). Its outputs
    // are kept from the forward pass instead.
    if (f.op == OpCode::BatchNorm) continue;
    std::vector<Ref> inputs;
    for (TensorId t : f.inputs) inputs.push_back(w.b.Read(t));
    std::vector<Shape> shapes;
    std::vector<DType> dtypes;
    for (TensorId t : f.outputs) {
      shapes.push_back(tensors[t].shape);
      dtypes.push_back(tensors[t].dtype);
    }
    const std::vector<Ref> outs =
        w.b.EmitMulti(f.op, std::move(inputs), f.attrs, std::move(shapes), "recompute/" + f.name, std::move(dtypes));
    w.recompute_ops.push_back(w.b.ops().size() - 1);
    for (size_t k = 0; k < f.outputs.size(); ++k) w.b.Remap(f.outputs[k], outs[k]);
  }
}

// The gradient of each output of `op`, its contributions summed into one.
void SumOutputGradients(const Graph& g, const OpNode& op, Walk& w, std::vector<std::optional<Ref>>& dy) {
  const std::vector<TensorInfo>& tensors = g.tensors();
  dy.assign(op.outputs.size(), std::nullopt);
  for (size_t k = 0; k < op.outputs.size(); ++k) {
    std::vector<Ref>& c = w.grads[op.outputs[k]];
    if (c.empty()) continue;
    if (c.size() > 1) {
      const Shape shape = tensors[op.outputs[k]].shape;
      // In the tensor's dtype: bf16 under amp (AddN sums in f32 and rounds once).
      c = {w.b.Emit(OpCode::AddN, c, OpAttrs{}, shape, tensors[op.outputs[k]].name + "/grad_sum",
                    tensors[op.outputs[k]].dtype)};
    }
    dy[k] = c[0];
  }
}

// Seeds the walk, then applies each forward op's rule in reverse order.
Status WalkBackward(const Graph& g, TensorId loss, const BackwardOptions& options, const std::vector<bool>& needs,
                    Walk& w) {
  const std::vector<TensorInfo>& tensors = g.tensors();
  const std::vector<OpNode>& ops = g.ops();
  const size_t forward_ops = ops.size();
  const bool has_loss = loss != kInvalidTensor;
  if (has_loss && needs[loss]) {
    OpAttrs seed;
    seed.value = options.seed;
    w.grads[loss].push_back(w.b.Emit(OpCode::Fill, {}, seed, Shape{}, tensors[loss].name + "/grad_seed"));
  }
  for (const auto& [t, seed] : options.output_grads)
    if (needs[t]) w.grads[t].push_back(autodiff_internal::Forward(seed));
  std::vector<std::optional<Ref>> dy, dx;
  std::vector<bool> wants;
  for (size_t i = forward_ops; i-- > 0;) {
    const OpNode& op = ops[i];
    bool has_dy = false;
    for (TensorId o : op.outputs) has_dy = has_dy || !w.grads[o].empty();
    if (!has_dy) continue;
    wants.assign(op.inputs.size(), false);
    bool any = false;
    for (size_t k = 0; k < op.inputs.size(); ++k) {
      wants[k] = needs[op.inputs[k]] && autodiff_internal::DifferentiableInput(op.op, k);
      any = any || wants[k];
    }
    if (!any) continue;
    if (!autodiff_internal::HasGradRule(op.op)) {
      return Unimplemented("AppendBackward: no gradient rule for op '" + op.name + "' (" + OpCodeName(op.op) +
                           "), which " + SeededText(g, loss, options) +
                           (has_loss || options.output_grads.size() == 1 ? " depends on" : " depend on"));
    }
    if (!op.recompute.empty() && w.recomputed.insert(op.recompute).second)
      RecomputeSegment(g, forward_ops, op.recompute, w);
    SumOutputGradients(g, op, w, dy);
    SINKRT_RETURN_IF_ERROR(autodiff_internal::ApplyGradRule(w.b, op, dy, wants, dx).WithContext("AppendBackward"));
    for (size_t k = 0; k < op.inputs.size(); ++k)
      if (dx[k]) w.grads[op.inputs[k]].push_back(*dx[k]);
  }
  for (TensorId t : options.wrt) {
    if (w.grads[t].empty()) {
      return InvalidArgument("AppendBackward: wrt tensor '" + tensors[t].name +
                             "' is not reached by any seed (no gradient of " + SeededText(g, loss, options) +
                             " flows to it)");
    }
  }
  return Status::Ok();
}

constexpr TensorId kNone = kInvalidTensor;

// How each target's gradient tensor (a parameter's Grad, a wrt tensor's
// gradient) is written. A value read by nothing else becomes the gradient
// tensor itself; otherwise (several contributions, a value shared with
// other readers, or a seed passed through unchanged) one AddN or Copy
// writes it, right after its last contribution so its AllReduce (or Send)
// can start.
struct WritePlan {
  std::vector<TensorId> targets;  // the parameters with a gradient, then the wrt tensors
  size_t param_count = 0;
  std::vector<bool> dead;                     // per pending op: not written
  std::vector<TensorId> owner;                // value -> target whose gradient it is
  std::vector<std::vector<TensorId>> finish;  // op -> targets summed after it
  std::vector<TensorId> finish_first;         // targets whose contributions are all seeds
};

// A recomputed op whose results no gradient reads (a segment's last op,
// whose output is the next layer's kept input) is not written.
std::vector<bool> DeadRecomputes(const Walk& w, std::vector<uint32_t>& refs) {
  const std::vector<autodiff_internal::PendingOp>& pending = w.b.ops();
  std::vector<bool> dead(pending.size(), false);
  for (size_t n = w.recompute_ops.size(); n-- > 0;) {
    const size_t i = w.recompute_ops[n];
    const autodiff_internal::PendingOp& p = pending[i];
    bool used = false;
    for (uint32_t v : p.outs) used = used || refs[v] > 0;
    if (used) continue;
    dead[i] = true;
    for (const Ref& r : p.inputs)
      if (r.pending) --refs[r.id];
  }
  return dead;
}

WritePlan PlanWrites(const Graph& g, const BackwardOptions& options, const Walk& w) {
  const std::vector<TensorInfo>& tensors = g.tensors();
  const std::vector<autodiff_internal::PendingOp>& pending = w.b.ops();
  const std::vector<autodiff_internal::Value>& values = w.b.values();
  WritePlan plan;
  std::vector<uint32_t> refs(values.size(), 0);
  for (const auto& p : pending)
    for (const Ref& r : p.inputs)
      if (r.pending) ++refs[r.id];
  for (size_t t = 0; t < tensors.size(); ++t)
    if (tensors[t].kind == TensorKind::Param && !w.grads[t].empty()) plan.targets.push_back(t);
  plan.param_count = plan.targets.size();
  plan.targets.insert(plan.targets.end(), options.wrt.begin(), options.wrt.end());
  for (TensorId p : plan.targets)
    for (const Ref& r : w.grads[p])
      if (r.pending) ++refs[r.id];
  plan.dead = DeadRecomputes(w, refs);
  plan.owner.assign(values.size(), kNone);
  plan.finish.resize(pending.size());
  for (TensorId p : plan.targets) {
    const std::vector<Ref>& c = w.grads[p];
    if (c.size() == 1 && c[0].pending && refs[c[0].id] == 1) {
      plan.owner[c[0].id] = p;
      continue;
    }
    int64_t last = -1;
    for (const Ref& r : c)
      if (r.pending) last = std::max<int64_t>(last, values[r.id].op);
    (last < 0 ? plan.finish_first : plan.finish[static_cast<size_t>(last)]).push_back(p);
  }
  return plan;
}

// Writes the pending ops and the gradient tensors into the graph.
class GraphWriter {
 public:
  GraphWriter(Graph& g, Walk& w, const WritePlan& plan)
      : g_(g), w_(w), plan_(plan), tensor_of_(w.b.values().size(), kNone), grad_of_(g.tensors().size(), kNone) {}

  Status Write() {
    const std::vector<autodiff_internal::PendingOp>& pending = w_.b.ops();
    WriteGrads(plan_.finish_first);
    for (size_t i = 0; i < pending.size(); ++i) {
      if (plan_.dead[i]) continue;
      WriteOp(pending[i]);
      WriteGrads(plan_.finish[i]);
      SINKRT_RETURN_IF_ERROR(g_.status(), "AppendBackward");
    }
    SINKRT_RETURN_IF_ERROR(g_.status(), "AppendBackward");
    return Status::Ok();
  }

  TensorId grad_of(TensorId t) const { return grad_of_[t]; }

 private:
  std::vector<TensorId> Resolve(const std::vector<Ref>& refs_in) const {
    std::vector<TensorId> ids;
    ids.reserve(refs_in.size());
    for (const Ref& r : refs_in) ids.push_back(r.pending ? tensor_of_[r.id] : r.id);
    return ids;
  }

  // A fresh tensor name for an output of an op with several (AddOp names
  // single outputs itself).
  std::string FreshName(const std::string& base) const {
    std::string n = base;
    for (int k = 1; g_.FindTensor(n) != kNone; ++k) n = base + "_" + std::to_string(k);
    return n;
  }

  TensorId MakeGrad(TensorId p, const Shape& shape) {
    const TensorInfo& target = g_.tensors()[p];
    TensorInfo info;
    const bool param = target.kind == TensorKind::Param;
    info.name = param ? target.name + "/grad" : FreshName(target.name + "/grad");
    info.dtype = DType::F32;
    info.shape = shape;
    info.kind = param ? TensorKind::Grad : TensorKind::Intermediate;
    info.init.kind = InitKind::None;
    return g_.AddTensor(std::move(info));
  }

  void WriteGrads(const std::vector<TensorId>& done) {
    for (TensorId target : done) {
      const std::vector<Ref>& c = w_.grads[target];
      const TensorId gt = MakeGrad(target, g_.tensors()[target].shape);
      g_.AddOpInto(c.size() > 1 ? OpCode::AddN : OpCode::Copy, Resolve(c), OpAttrs{}, {gt},
                   w_.b.UniqueOpName(g_.tensors()[target].name + "/grad"));
      grad_of_[target] = gt;
    }
  }

  void WriteOp(const autodiff_internal::PendingOp& p) {
    const std::vector<autodiff_internal::Value>& values = w_.b.values();
    if (p.outs.size() == 1 && plan_.owner[p.outs[0]] == kNone) {
      const autodiff_internal::Value& v = values[p.outs[0]];
      tensor_of_[p.outs[0]] = g_.AddOp(p.op, Resolve(p.inputs), p.attrs, {{v.shape, v.dtype}}, p.name)[0];
      return;
    }
    // Outputs that are a target's whole gradient are its gradient tensor.
    std::vector<TensorId> outs;
    for (size_t k = 0; k < p.outs.size(); ++k) {
      const uint32_t v = p.outs[k];
      if (const TensorId owner = plan_.owner[v]; owner != kNone) {
        tensor_of_[v] = grad_of_[owner] = MakeGrad(owner, values[v].shape);
      } else {
        TensorInfo info;
        info.name = FreshName(k == 0 ? p.name : p.name + ":" + std::to_string(k));
        info.dtype = values[v].dtype;
        info.shape = values[v].shape;
        info.init.kind = InitKind::None;
        tensor_of_[v] = g_.AddTensor(std::move(info));
      }
      outs.push_back(tensor_of_[v]);
    }
    g_.AddOpInto(p.op, Resolve(p.inputs), p.attrs, std::move(outs), p.name);
  }

  Graph& g_;
  Walk& w_;
  const WritePlan& plan_;
  std::vector<TensorId> tensor_of_;
  std::vector<TensorId> grad_of_;
};

}  // namespace

Result<std::vector<ParamGrad>> AppendBackward(Graph& g, TensorId loss, float seed_value) {
  BackwardOptions options;
  options.seed = seed_value;
  SINKRT_ASSIGN_OR_RETURN(BackwardResult r, AppendBackward(g, loss, options));
  return std::move(r.params);
}

Result<BackwardResult> AppendBackward(Graph& g, TensorId loss, const BackwardOptions& options) {
  if (!g.status().ok()) return g.status();
  SINKRT_RETURN_IF_ERROR(CheckArguments(g, loss, options));
  const std::vector<bool> needs = NeedsGradient(g, options);
  // Where no seed needs a gradient there is nothing to append (a loss that
  // depends on no parameter); wanted wrt gradients are then unreached.
  bool any_seed = loss != kInvalidTensor && needs[loss];
  for (const auto& [t, seed] : options.output_grads) any_seed = any_seed || needs[t];
  if (!any_seed && options.wrt.empty()) return BackwardResult{};

  Walk walk(g);
  SINKRT_RETURN_IF_ERROR(WalkBackward(g, loss, options, needs, walk));
  const WritePlan plan = PlanWrites(g, options, walk);
  GraphWriter writer(g, walk, plan);
  SINKRT_RETURN_IF_ERROR(writer.Write());

  BackwardResult result;
  result.params.reserve(plan.param_count);
  for (size_t i = 0; i < plan.param_count; ++i)
    result.params.push_back(ParamGrad{plan.targets[i], writer.grad_of(plan.targets[i])});
  for (TensorId t : options.wrt) result.wrt_grads.emplace_back(t, writer.grad_of(t));
  return result;
}

}  // namespace sinkrt::host
