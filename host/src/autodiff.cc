#include "sinkrt/host/autodiff.h"

#include <algorithm>
#include <optional>

#include "grad_rules.h"

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

Ref Backward::Emit(fb::OpCode op, std::vector<Ref> inputs, OpAttrs attrs, Shape shape,
                   const std::string& name) {
  const uint32_t v = static_cast<uint32_t>(values_.size());
  values_.push_back(Value{std::move(shape), static_cast<uint32_t>(ops_.size())});
  ops_.push_back(PendingOp{UniqueOpName(name), op, std::move(inputs), std::move(attrs), v});
  return Ref{true, v};
}

std::vector<Ref> Backward::EmitMulti(fb::OpCode op, std::vector<Ref> inputs, OpAttrs attrs,
                                     std::vector<Shape> shapes, const std::string& name) {
  const uint32_t first = static_cast<uint32_t>(values_.size());
  std::vector<Ref> refs;
  for (Shape& s : shapes) {
    refs.push_back(Ref{true, static_cast<uint32_t>(values_.size())});
    values_.push_back(Value{std::move(s), static_cast<uint32_t>(ops_.size())});
  }
  ops_.push_back(PendingOp{UniqueOpName(name), op, std::move(inputs), std::move(attrs), first,
                           static_cast<uint32_t>(refs.size())});
  return refs;
}

const Shape& Backward::shape(Ref r) const {
  return r.pending ? values_[r.id].shape : g_.tensor(r.id).shape;
}

}  // namespace autodiff_internal

using autodiff_internal::Backward;
using autodiff_internal::Ref;

Result<std::vector<ParamGrad>> AppendBackward(Graph& g, TensorId loss) {
  if (!g.status().ok()) return g.status();
  if (loss == kInvalidTensor) {
    return FailedPrecondition("AppendBackward: the graph has no loss; call SetLoss first");
  }
  if (!g.valid(loss)) {
    return InvalidArgument("AppendBackward: loss is not a tensor of graph '" + g.name() +
                           "' (id " + std::to_string(loss) + ")");
  }
  const TensorInfo& lt = g.tensor(loss);
  if (lt.dtype != DType::F32 || !lt.shape.empty()) {
    return InvalidArgument("AppendBackward: loss '" + lt.name +
                           "' must be an f32 scalar (shape []), got " + DTypeName(lt.dtype) +
                           " " + ShapeToString(lt.shape));
  }
  for (const TensorInfo& t : g.tensors()) {
    if (t.kind == TensorKind::Grad) {
      return FailedPrecondition("AppendBackward: graph '" + g.name() +
                                "' already has a backward pass (Grad tensor '" + t.name + "')");
    }
  }

  const std::vector<TensorInfo>& tensors = g.tensors();
  const std::vector<OpNode>& ops = g.ops();
  const size_t forward_ops = ops.size();

  // Which tensors depend on a Param through differentiable inputs: only
  // those need gradients, so branches fed by Inputs and Consts alone (and
  // labels, which are i32) are pruned.
  std::vector<bool> needs(tensors.size(), false);
  for (size_t t = 0; t < tensors.size(); ++t)
    needs[t] = tensors[t].kind == TensorKind::Param && tensors[t].dtype == DType::F32;
  for (const OpNode& op : ops) {
    bool any = false;
    for (size_t i = 0; i < op.inputs.size(); ++i)
      any = any || (needs[op.inputs[i]] && autodiff_internal::DifferentiableInput(op.op, i));
    if (!any || op.op == fb::OpCode::ArgMaxAccuracy) continue;
    for (TensorId o : op.outputs) needs[o] = tensors[o].dtype == DType::F32;
  }
  if (!needs[loss]) return std::vector<ParamGrad>{};

  Backward b(g);
  // Gradient contributions per forward tensor, summed when an op needs them.
  std::vector<std::vector<Ref>> grads(tensors.size());
  {
    OpAttrs seed;
    seed.value = 1.0f;
    grads[loss].push_back(b.Emit(fb::OpCode::Fill, {}, seed, Shape{}, lt.name + "/grad_seed"));
  }
  std::vector<std::optional<Ref>> dy, dx;
  std::vector<bool> wants;
  for (size_t i = forward_ops; i-- > 0;) {
    const OpNode& op = ops[i];
    bool has_dy = false;
    for (TensorId o : op.outputs) has_dy = has_dy || !grads[o].empty();
    if (!has_dy) continue;
    wants.assign(op.inputs.size(), false);
    bool any = false;
    for (size_t k = 0; k < op.inputs.size(); ++k) {
      wants[k] = needs[op.inputs[k]] && autodiff_internal::DifferentiableInput(op.op, k);
      any = any || wants[k];
    }
    if (!any) continue;
    if (!autodiff_internal::HasGradRule(op.op)) {
      return Unimplemented("AppendBackward: no gradient rule for op '" + op.name + "' (" +
                           fb::EnumNameOpCode(op.op) + "), which the loss '" + lt.name +
                           "' depends on");
    }
    dy.assign(op.outputs.size(), std::nullopt);
    for (size_t k = 0; k < op.outputs.size(); ++k) {
      std::vector<Ref>& c = grads[op.outputs[k]];
      if (c.empty()) continue;
      if (c.size() > 1) {
        const Shape shape = tensors[op.outputs[k]].shape;
        c = {b.Emit(fb::OpCode::AddN, c, OpAttrs{}, shape,
                    tensors[op.outputs[k]].name + "/grad_sum")};
      }
      dy[k] = c[0];
    }
    SINKRT_RETURN_IF_ERROR(autodiff_internal::ApplyGradRule(b, op, dy, wants, dx)
                               .WithContext("AppendBackward"));
    for (size_t k = 0; k < op.inputs.size(); ++k)
      if (dx[k]) grads[op.inputs[k]].push_back(*dx[k]);
  }

  // Decide how each parameter's Grad tensor is written. A value read by
  // nothing else becomes the Grad tensor itself; otherwise (several
  // contributions, or a value shared with other readers) one AddN or Copy
  // writes it, right after its last contribution so its AllReduce can start.
  const std::vector<autodiff_internal::PendingOp>& pending = b.ops();
  const std::vector<autodiff_internal::Value>& values = b.values();
  std::vector<uint32_t> refs(values.size(), 0);
  for (const auto& p : pending)
    for (const Ref& r : p.inputs)
      if (r.pending) ++refs[r.id];
  std::vector<TensorId> params;
  for (size_t t = 0; t < tensors.size(); ++t)
    if (tensors[t].kind == TensorKind::Param && !grads[t].empty()) params.push_back(t);
  for (TensorId p : params)
    for (const Ref& r : grads[p]) ++refs[r.id];

  constexpr TensorId kNone = kInvalidTensor;
  std::vector<TensorId> owner(values.size(), kNone);     // value -> param whose Grad it is
  std::vector<std::vector<TensorId>> finish(pending.size());  // op -> params summed after it
  for (TensorId p : params) {
    const std::vector<Ref>& c = grads[p];
    // A result of a multi-output op (Split) is never the Grad tensor itself:
    // a Copy writes it, so that the op's outputs stay plain intermediates.
    if (c.size() == 1 && refs[c[0].id] == 1 && pending[values[c[0].id].op].outputs == 1) {
      owner[c[0].id] = p;
      continue;
    }
    uint32_t last = 0;
    for (const Ref& r : c) last = std::max(last, values[r.id].op);
    finish[last].push_back(p);
  }

  std::vector<TensorId> tensor_of(values.size(), kNone);
  std::vector<TensorId> grad_of(tensors.size(), kNone);
  auto resolve = [&](const std::vector<Ref>& refs_in) {
    std::vector<TensorId> ids;
    ids.reserve(refs_in.size());
    for (const Ref& r : refs_in) ids.push_back(r.pending ? tensor_of[r.id] : r.id);
    return ids;
  };
  auto make_grad = [&](TensorId p, const Shape& shape) {
    TensorInfo info;
    info.name = tensors[p].name + "/grad";
    info.dtype = DType::F32;
    info.shape = shape;
    info.kind = TensorKind::Grad;
    info.init.kind = fb::InitKind::None;
    return g.AddTensor(std::move(info));
  };
  for (size_t i = 0; i < pending.size(); ++i) {
    const autodiff_internal::PendingOp& p = pending[i];
    const Shape& shape = values[p.out].shape;
    if (p.outputs > 1) {
      std::vector<std::pair<Shape, DType>> shapes;
      for (uint32_t k = 0; k < p.outputs; ++k) shapes.push_back({values[p.out + k].shape, DType::F32});
      const std::vector<TensorId> ids = g.AddOp(p.op, resolve(p.inputs), p.attrs, std::move(shapes), p.name);
      for (uint32_t k = 0; k < p.outputs; ++k) tensor_of[p.out + k] = ids[k];
    } else if (owner[p.out] != kNone) {
      const TensorId param = owner[p.out];
      const TensorId gt = make_grad(param, shape);
      g.AddOpInto(p.op, resolve(p.inputs), p.attrs, {gt}, p.name);
      tensor_of[p.out] = grad_of[param] = gt;
    } else {
      tensor_of[p.out] =
          g.AddOp(p.op, resolve(p.inputs), p.attrs, {{shape, DType::F32}}, p.name)[0];
    }
    for (TensorId param : finish[i]) {
      const std::vector<Ref>& c = grads[param];
      const TensorId gt = make_grad(param, tensors[param].shape);
      g.AddOpInto(c.size() > 1 ? fb::OpCode::AddN : fb::OpCode::Copy, resolve(c), OpAttrs{},
                  {gt}, b.UniqueOpName(tensors[param].name + "/grad"));
      grad_of[param] = gt;
    }
    SINKRT_RETURN_IF_ERROR(g.status(), "AppendBackward");
  }

  std::vector<ParamGrad> result;
  result.reserve(params.size());
  for (TensorId p : params) result.push_back(ParamGrad{p, grad_of[p]});
  return result;
}

}  // namespace sinkrt::host
