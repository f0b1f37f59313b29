#include "host/src/compiler/fusion.h"

#include <map>

namespace sinkrt::host::compiler {
namespace {

// Reads and in-place writes of each tensor within one program, by position.
struct ProgramUses {
  std::vector<int32_t> readers;                        // number of input slots reading the tensor
  std::vector<int64_t> last_reader;                    // position of a reader (the only one when readers == 1)
  std::vector<int64_t> position;                       // position of the producing op in the program, or -1
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

int NormalisedAxis(int axis, size_t rank) { return axis < 0 ? axis + static_cast<int>(rank) : axis; }

}  // namespace

std::vector<KernelPlan> PlanKernels(const Graph& g, const GraphFacts& f, const std::vector<size_t>& ops, bool fuse) {
  const ProgramUses u = fuse ? CountUses(g, ops) : ProgramUses{};
  std::vector<bool> absorbed(ops.size(), false);
  std::vector<KernelPlan> kernels;
  for (size_t pos = 0; pos < ops.size(); ++pos) {
    if (absorbed[pos]) continue;
    const OpNode& op = g.ops()[ops[pos]];
    KernelPlan k{.ops = {ops[pos]}, .inputs = op.inputs, .outputs = op.outputs};
    const bool head = op.op == OpCode::MatMul || op.op == OpCode::Conv2D;
    if (fuse && head && op.outputs.size() == 1) {
      const TensorId t = op.outputs[0];
      const TensorInfo& ti = g.tensor(t);
      const size_t want_rank = op.op == OpCode::MatMul ? 2 : 4;
      const int64_t j = SoleReader(g, f, u, t);
      const OpNode* bias_add = j > static_cast<int64_t>(pos) ? &g.ops()[ops[j]] : nullptr;
      bool ok = bias_add && bias_add->op == OpCode::BiasAdd && bias_add->inputs.size() == 2 &&
                bias_add->outputs.size() == 1 && bias_add->inputs[0] == t && bias_add->inputs[1] != t &&
                ti.shape.size() == want_rank && NormalisedAxis(bias_add->attrs.axis, want_rank) == 1;
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
          if (relu.op == OpCode::Relu && relu.inputs.size() == 1 && relu.outputs.size() == 1) {
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

}  // namespace sinkrt::host::compiler
