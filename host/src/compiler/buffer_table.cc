#include "host/src/compiler/buffer_table.h"

#include <algorithm>
#include <limits>
#include <set>
#include <string>
#include <utility>

namespace sinkrt::host::compiler {
namespace {

// Persistent roles in buffer-table order.
int PersistentRank(BufferRole role) {
  switch (role) {
    case BufferRole::Param:
      return 0;
    case BufferRole::Const:
      return 1;
    case BufferRole::OptState:
      return 2;
    case BufferRole::Grad:
      return 3;
    case BufferRole::Output:
      return 4;
    case BufferRole::State:
      return 5;
    default:
      return 6;
  }
}

BufferRole RoleOf(const Graph& g, const GraphFacts& f, TensorId t) {
  const TensorInfo& info = g.tensor(t);
  switch (info.kind) {
    case TensorKind::Param:
      return BufferRole::Param;
    case TensorKind::Const:
      return BufferRole::Const;
    case TensorKind::OptState:
      return BufferRole::OptState;
    case TensorKind::State:
      return BufferRole::State;
    case TensorKind::Grad:
      return BufferRole::Grad;
    case TensorKind::Input:
      return BufferRole::Input;
    case TensorKind::Intermediate:
      break;
  }
  if (f.reported[t]) return BufferRole::Output;
  if (f.producer[t] >= 0 && g.ops()[f.producer[t]].op == OpCode::MaxPool2D && f.producer_slot[t] == 1)
    return BufferRole::Workspace;
  return BufferRole::Activation;
}

}  // namespace

bool HasInitializer(TensorKind k) {
  return k == TensorKind::Param || k == TensorKind::Const || k == TensorKind::OptState || k == TensorKind::State;
}

bool IsPersistentRole(BufferRole r) {
  return r == BufferRole::Param || r == BufferRole::Const || r == BufferRole::OptState || r == BufferRole::Grad ||
         r == BufferRole::Output || r == BufferRole::ParamSlice || r == BufferRole::GradSlice || r == BufferRole::State;
}

Result<uint64_t> BufferBytes(const TensorInfo& info) {
  const int64_t elements = NumElements(info.shape);
  const uint64_t size = DTypeSize(info.dtype);
  if (elements < 0 || size == 0 || static_cast<uint64_t>(elements) > (uint64_t{1} << 62) / size)
    return InvalidArgument("tensor '" + info.name + "' of shape " + ShapeToString(info.shape) +
                           " is too large for a buffer");
  return static_cast<uint64_t>(elements) * size;
}

Result<BufferTable> BuildBufferTable(const passes::TrainingGraph& tg, const GraphFacts& facts,
                                     const std::vector<ProgramPlan>& plans, const std::vector<ProgramViews>& views,
                                     const std::map<TensorId, size_t>& grad_rank) {
  const Graph& g = tg.graph;
  BufferTable table;

  std::vector<BufferRole>& role = table.role;
  role.resize(g.tensors().size());
  for (TensorId t = 0; t < g.tensors().size(); ++t) role[t] = RoleOf(g, facts, t);
  // Optimizer parallel: blocks of a parameter and of its gradient, views
  // that live as long as what they are blocks of.
  for (const passes::OptimizerShard& s : tg.optimizer_shards) {
    role[s.param_slice] = BufferRole::ParamSlice;
    role[s.grad_slice] = BufferRole::GradSlice;
  }

  // Which tensors each program touches.
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
    // A root only its views are read through still holds their bytes.
    for (const auto& [t, v] : views[p])
      if (transient_used[p].count(t)) touch(p, v.root);
  }

  // Data parallel: the gradients in bucket order; everything else keeps
  // tensor order within its role.
  auto layout_rank = [&](TensorId t) {
    auto it = grad_rank.find(t);
    return it == grad_rank.end() ? 0 : it->second;
  };

  BufferMaps& maps = table.maps;
  maps.transient.resize(plans.size());
  std::set<std::string> names;
  auto add_buffer = [&](TensorId t, bool persistent, ProgramKind program, std::string name) -> Status {
    const TensorInfo& info = g.tensor(t);
    BufferDef b;
    b.name = std::move(name);
    b.tensor = t;
    b.dtype = info.dtype;
    b.shape = info.shape;
    b.role = role[t];
    b.persistent = persistent;
    b.program = program;
    if (b.role == BufferRole::Workspace) {
      // docs/reference/ops.md: 4 bytes of argmax per element of the pooled output.
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
    if (table.buffers.size() >= std::numeric_limits<uint32_t>::max())
      return ResourceExhausted("more than 2^32 - 1 buffers");
    table.buffers.push_back(std::move(b));
    return Status::Ok();
  };

  // The host finds the metrics by these names; a graph that already uses a
  // name for another tensor keeps the metric's own tensor name instead.
  auto buffer_name = [&](TensorId t) {
    const char* alias = t == tg.loss ? "loss" : t == tg.accuracy ? "accuracy" : nullptr;
    if (alias && (g.tensor(t).name == alias || g.FindTensor(alias) == kInvalidTensor)) return std::string(alias);
    return g.tensor(t).name;
  };

  std::vector<TensorId> persistent_order(persistent_used.begin(), persistent_used.end());
  std::stable_sort(persistent_order.begin(), persistent_order.end(), [&](TensorId a, TensorId b) {
    if (PersistentRank(role[a]) != PersistentRank(role[b])) return PersistentRank(role[a]) < PersistentRank(role[b]);
    return layout_rank(a) < layout_rank(b);
  });
  for (TensorId t : persistent_order) {
    maps.persistent[t] = static_cast<uint32_t>(table.buffers.size());
    SINKRT_RETURN_IF_ERROR(add_buffer(t, true, ProgramKind::Init, buffer_name(t)));
  }
  for (const passes::OptimizerShard& s : tg.optimizer_shards) {
    const ParamGrad& pg = tg.grads.at(s.grad);
    for (auto [view, root] : {std::pair{s.param_slice, pg.param}, std::pair{s.grad_slice, pg.grad}}) {
      auto v = maps.persistent.find(view);
      auto r = maps.persistent.find(root);
      if (v == maps.persistent.end() || r == maps.persistent.end())
        return Internal("optimizer parallel: no buffer for '" + g.tensor(view).name + "' or '" + g.tensor(root).name +
                        "'");
      table.buffers[v->second].view_of = r->second;
      table.buffers[v->second].view_offset = s.offset_bytes;
    }
  }
  for (size_t p = 0; p < plans.size(); ++p) {
    const std::string prefix = p == 0 ? "" : plans[p].stem + "/";
    for (TensorId t : transient_used[p]) {
      maps.transient[p][t] = static_cast<uint32_t>(table.buffers.size());
      SINKRT_RETURN_IF_ERROR(add_buffer(t, false, plans[p].kind, prefix + buffer_name(t)));
    }
    for (const auto& [t, v] : views[p]) {
      auto it = maps.transient[p].find(t);
      if (it == maps.transient[p].end()) continue;  // a piece nothing reads
      BufferDef& b = table.buffers[it->second];
      b.view_of = maps.transient[p].at(v.root);
      b.view_offset = v.offset;
    }
  }
  return table;
}

}  // namespace sinkrt::host::compiler
