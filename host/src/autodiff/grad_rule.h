// What one gradient rule is: a small function registered for its forward
// op code, as MindSpore's bprop registry and TFLM's kernel registration
// keep one function per op. The rules live in files by op family
// (grad_rules_*.cc), each listing its table; grad_rules.cc joins the tables
// into the registry ApplyGradRule looks an op up in.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "host/src/autodiff/grad_rules.h"

namespace sinkrt::host::autodiff_internal {

// Everything a rule reads, with helpers that emit the common patterns.
struct Rule {
  Backward& b;
  const OpNode& op;
  Ref dy;                                      // gradient of output 0 (unset for a rule that reads every output's)
  const std::vector<std::optional<Ref>>& dys;  // per output, nullopt where none reaches it
  const std::vector<bool>& wants;              // which inputs need a gradient

  bool want(size_t i) const { return i < wants.size() && wants[i]; }
  const Graph& g() const { return b.graph(); }
  Ref in(size_t i) const { return b.Read(op.inputs[i]); }
  Ref out(size_t i) const { return b.Read(op.outputs[i]); }
  const Shape& in_shape(size_t i) const { return g().tensor(op.inputs[i]).shape; }
  std::string name(const std::string& suffix) const { return op.name + "/" + suffix; }

  // The dtype the op computes in (bf16 under amp, docs/guide/amp.md): its
  // gradients are computed in it too, since every float input of an op has
  // its dtype (the amp pass casts them), except LayerNorm's f32 statistics.
  DType dt() const {
    const DType t = g().tensor(op.outputs.at(0)).dtype;
    return t == DType::BF16 ? t : DType::F32;
  }

  // `dtype` Invalid: dt().
  Ref Emit(OpCode code, std::vector<Ref> inputs, OpAttrs attrs, Shape shape, const std::string& suffix,
           DType dtype = DType::Invalid) const {
    return b.Emit(code, std::move(inputs), std::move(attrs), std::move(shape), name(suffix),
                  dtype == DType::Invalid ? dt() : dtype);
  }

  // Undoes NumPy broadcasting: sums `v` back to `shape` when they differ.
  Ref SumTo(Ref v, const Shape& shape, const std::string& suffix) const {
    if (b.shape(v) == shape) return v;
    return Emit(OpCode::SumToShape, {v}, OpAttrs{}, shape, suffix, b.dtype(v));
  }
};

using Dx = std::vector<std::optional<Ref>>;

// Sets dx[i] for the wanted inputs (dx has one entry per input, all unset).
using GradRuleFn = Status (*)(const Rule& r, Dx& dx);

struct GradRule {
  OpCode op = OpCode::Invalid;
  GradRuleFn fn = nullptr;
  // The rule runs even when output 0 has no gradient, reading `dys` (Split:
  // any of its outputs may carry one). Every other rule runs only when
  // output 0 has one (MaxPool2D's second output is the workspace, which
  // carries none).
  bool reads_every_output = false;
};

// The families' tables; an op is in one of them at most.
std::span<const GradRule> MatMulConvGradRules();   // grad_rules_dense.cc
std::span<const GradRule> ElementwiseGradRules();  // grad_rules_elementwise.cc
std::span<const GradRule> ShapeGradRules();        // grad_rules_shape.cc
std::span<const GradRule> CommGradRules();         // grad_rules_comm.cc

inline OpAttrs AxisAttrs(int axis) {
  OpAttrs a;
  a.axis = axis;
  return a;
}

inline OpAttrs ScaleAttrs(float scale) {
  OpAttrs a;
  a.scale = scale;
  return a;
}

inline OpAttrs MatMulAttrs(bool ta, bool tb) {
  OpAttrs a;
  a.transpose_a = ta;
  a.transpose_b = tb;
  return a;
}

}  // namespace sinkrt::host::autodiff_internal
