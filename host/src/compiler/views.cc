#include "host/src/compiler/views.h"

#include <set>

#include "host/src/compiler/buffer_table.h"

namespace sinkrt::host::compiler {
namespace {

int NormalisedAxis(int axis, size_t rank) { return axis < 0 ? axis + static_cast<int>(rank) : axis; }

class ViewPlanner {
 public:
  ViewPlanner(const Graph& g, const GraphFacts& f, const ProgramPlan& plan, uint64_t alignment)
      : g_(g), f_(f), alignment_(alignment) {
    for (const KernelPlan& k : plan.kernels)
      for (size_t op : k.ops)
        for (size_t slot : MutatedInputs(g.ops()[op].op))
          if (slot < g.ops()[op].inputs.size()) refused_.insert(g.ops()[op].inputs[slot]);
    // The host reads reports (loss, accuracy, outputs, Inputs it asked to
    // see) by name at the end of the step: keep them out of any group.
    refused_.insert(plan.reports.begin(), plan.reports.end());
  }

  // Tries to turn the op of `k` into views; false leaves it a kernel.
  bool Try(const KernelPlan& k) {
    if (k.ops.size() != 1 || k.bias != kInvalidTensor) return false;
    const OpNode& op = g_.ops()[k.ops[0]];
    switch (op.op) {
      case OpCode::Reshape:
      case OpCode::Flatten:
        return TryReshape(op);
      case OpCode::Split:
        return TrySplit(op);
      case OpCode::Concat:
        return TryConcat(op);
      default:
        return false;
    }
  }

  ProgramViews take() { return std::move(views_); }

 private:
  uint64_t Bytes(TensorId t) const {
    Result<uint64_t> b = BufferBytes(g_.tensor(t));
    return b.ok() ? *b : 0;
  }

  // The rules of views.h for one member; `input_ok`: a dataset Input may be
  // the source of the group (it is written once, by GetNext, before anything
  // reads it).
  bool Member(TensorId t, bool input_ok) const {
    const TensorInfo& info = g_.tensor(t);
    if (info.kind == TensorKind::Input) {
      if (!input_ok) return false;
    } else if (info.kind != TensorKind::Intermediate) {
      return false;  // persistent: updated in place, or read by the host
    }
    if (f_.reported[t] || refused_.count(t)) return false;
    if (f_.producer[t] >= 0 && g_.ops()[f_.producer[t]].op == OpCode::MaxPool2D && f_.producer_slot[t] == 1)
      return false;
    return Bytes(t) > 0;
  }

  ViewOf RootOf(TensorId t) const {
    auto it = views_.find(t);
    return it == views_.end() ? ViewOf{t, 0} : it->second;
  }

  bool Aligned(uint64_t offset) const { return offset % alignment_ == 0; }

  bool TryReshape(const OpNode& op) {
    if (op.inputs.size() != 1 || op.outputs.size() != 1) return false;
    const TensorId x = op.inputs[0], y = op.outputs[0];
    if (!Member(x, true) || !Member(y, false)) return false;
    if (g_.tensor(x).dtype != g_.tensor(y).dtype || Bytes(x) != Bytes(y)) return false;
    views_[y] = RootOf(x);
    return true;
  }

  // Axis 0 only: then each output is one contiguous run of the input.
  bool TrySplit(const OpNode& op) {
    if (op.inputs.size() != 1 || op.outputs.empty()) return false;
    const TensorId x = op.inputs[0];
    const TensorInfo& xi = g_.tensor(x);
    if (xi.shape.empty() || NormalisedAxis(op.attrs.axis, xi.shape.size()) != 0) return false;
    if (!Member(x, true)) return false;
    const ViewOf root = RootOf(x);
    uint64_t offset = 0;
    for (TensorId y : op.outputs) {
      if (!Member(y, false) || g_.tensor(y).dtype != xi.dtype || !Aligned(root.offset + offset)) return false;
      offset += Bytes(y);
    }
    if (offset != Bytes(x)) return false;
    offset = 0;
    for (TensorId y : op.outputs) {
      views_[y] = {root.root, root.offset + offset};
      offset += Bytes(y);
    }
    return true;
  }

  // Axis 0 only: each input's group moves under the output, at the input's
  // place in it, so the input's producer writes straight into the output.
  bool TryConcat(const OpNode& op) {
    if (op.inputs.empty() || op.outputs.size() != 1) return false;
    const TensorId z = op.outputs[0];
    const TensorInfo& zi = g_.tensor(z);
    if (zi.shape.empty() || NormalisedAxis(op.attrs.axis, zi.shape.size()) != 0) return false;
    if (!Member(z, false)) return false;
    std::set<TensorId> roots;
    uint64_t offset = 0;
    for (TensorId x : op.inputs) {
      const ViewOf r = RootOf(x);
      // The input must be its whole group (not a piece of a larger one),
      // the group rooted in an op's output (GetNext writes an Input whole),
      // and every group distinct (one buffer cannot sit in two places).
      if (!Member(x, false) || !Member(r.root, false) || r.offset != 0 || Bytes(r.root) != Bytes(x) ||
          g_.tensor(x).dtype != zi.dtype || !roots.insert(r.root).second || !Aligned(offset))
        return false;
      offset += Bytes(x);
    }
    if (offset != Bytes(z)) return false;
    offset = 0;
    for (TensorId x : op.inputs) {
      const TensorId r = RootOf(x).root;
      for (auto& [t, v] : views_)
        if (v.root == r) v = {z, v.offset + offset};
      views_[r] = {z, offset};
      offset += Bytes(x);
    }
    return true;
  }

  const Graph& g_;
  const GraphFacts& f_;
  const uint64_t alignment_;
  std::set<TensorId> refused_;
  ProgramViews views_;
};

}  // namespace

ProgramViews PlanViews(const Graph& g, const GraphFacts& facts, ProgramPlan& plan, uint64_t alignment) {
  ViewPlanner planner(g, facts, plan, alignment);
  std::vector<KernelPlan> kept;
  kept.reserve(plan.kernels.size());
  for (KernelPlan& k : plan.kernels)
    if (!planner.Try(k)) kept.push_back(std::move(k));
  plan.kernels = std::move(kept);
  return planner.take();
}

}  // namespace sinkrt::host::compiler
