// Internals of autodiff shared by the walk (autodiff.cc) and the per-op
// gradient rules (grad_rules.cc).
//
// The backward pass is first recorded as a list of pending ops over "values"
// and only then written into the Graph. Whether a gradient op may write a
// parameter's Grad tensor directly (rather than through an AddN or a Copy)
// depends on every later use of its result, which is known only once the
// whole walk is done.
#pragma once

#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "sinkrt/host/graph.h"
#include "sinkrt/runtime/status.h"

namespace sinkrt::host::autodiff_internal {

// A tensor the backward pass reads: a forward tensor of the graph, or a
// value computed by a pending op. Values are f32 but for the gradients of
// BF16 tensors (Cast's rule).
struct Ref {
  bool pending = false;
  uint32_t id = 0;  // TensorId, or index into Backward::values()

  friend bool operator==(const Ref&, const Ref&) = default;
};

inline Ref Forward(TensorId t) { return Ref{false, t}; }

struct PendingOp {
  std::string name;
  OpCode op = OpCode::Invalid;
  std::vector<Ref> inputs;
  OpAttrs attrs;
  std::vector<uint32_t> outs;  // the values it computes, in output order (LayerNormGrad has three)
};

struct Value {
  Shape shape;
  uint32_t op = 0;  // the pending op computing it
  DType dtype = DType::F32;
};

class Backward {
 public:
  explicit Backward(const Graph& g);

  // Records an op and returns its result. `name` is made unique.
  Ref Emit(OpCode op, std::vector<Ref> inputs, OpAttrs attrs, Shape shape, const std::string& name,
           DType dtype = DType::F32);
  // An op with several f32 outputs, one value per shape (or per dtype given).
  std::vector<Ref> EmitMulti(OpCode op, std::vector<Ref> inputs, OpAttrs attrs, std::vector<Shape> shapes,
                             const std::string& name, std::vector<DType> dtypes = {});
  // What the rules read for forward tensor `t`: the tensor itself, or the
  // value that recomputes it (Remap; a recomputed segment).
  Ref Read(TensorId t) const;
  void Remap(TensorId t, Ref value);
  const Shape& shape(Ref r) const;
  DType dtype(Ref r) const;
  // `name` if no op has it yet, else name_1, name_2, ...
  std::string UniqueOpName(const std::string& name);

  const Graph& graph() const { return g_; }
  const std::vector<PendingOp>& ops() const { return ops_; }
  const std::vector<Value>& values() const { return values_; }

 private:
  const Graph& g_;
  std::vector<PendingOp> ops_;
  std::vector<Value> values_;
  std::unordered_set<std::string> names_;
  std::vector<std::optional<Ref>> remap_;  // per forward tensor
};

// Whether d(loss) flows through input `slot` of `op` (labels do not).
bool DifferentiableInput(OpCode op, size_t slot);
// Whether a gradient rule exists for `op`.
bool HasGradRule(OpCode op);

// Applies the rule of forward op `op`: `dy` holds the gradient of each
// output (nullopt where none reaches it), `wants` which inputs need one.
// Sets dx[i] for the wanted inputs; an entry may alias dy or another value.
Status ApplyGradRule(Backward& b, const OpNode& op, const std::vector<std::optional<Ref>>& dy,
                     const std::vector<bool>& wants, std::vector<std::optional<Ref>>& dx);

}  // namespace sinkrt::host::autodiff_internal
