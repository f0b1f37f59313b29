/// \file
/// Reverse-mode autodiff over a Graph.
#pragma once

#include <utility>
#include <vector>

#include "sinkrt/host/graph.h"

namespace sinkrt::host {

/// A parameter and its gradient tensor.
struct ParamGrad {
  TensorId param;  ///< the Param
  TensorId grad;   ///< TensorKind::Grad, same shape as param
};

/// Appends the backward graph of `loss` (a scalar) to `g`: seeds d(loss) =
/// `seed` (1; a sharded rank whose loss is one of D data-parallel slices
/// seeds 1/D, compile.cc), walks the ops in reverse, applies each op's gradient rule and sums the
/// contributions of tensors used more than once (AddN). Returns one gradient
/// per Param that the loss depends on, in parameter creation order. The
/// forward ops are left untouched.
Result<std::vector<ParamGrad>> AppendBackward(Graph& g, TensorId loss, float seed = 1.0f);

/// What a pipeline stage (docs/design/pipeline.md) needs beyond a scalar loss: a
/// stage other than the last has no loss, and its backward starts from the
/// gradients of the activations it sent, received from the next stage; every
/// stage but the first sends back the gradients of the activations it
/// received.
struct BackwardOptions {
  /// d(loss) when a loss is given.
  float seed = 1.0f;
  /// {tensor, seed}: d(tensor) = seed, a tensor of the same shape and dtype
  /// (f32), typically an Input fed with the next stage's gradient. A loss,
  /// these, or both seed the pass; where several reach one tensor their
  /// contributions are summed.
  std::vector<std::pair<TensorId, TensorId>> output_grads;
  /// Non-Param f32 tensors (Inputs or intermediates: a stage's received
  /// activations) whose gradients are wanted too. Each must be reached by a
  /// seed: an unreached one is an error rather than a zero fill, since it
  /// means the stage split or the seeds are wrong.
  std::vector<TensorId> wrt;
};

/// What AppendBackward(Graph&, const BackwardOptions&) adds.
struct BackwardResult {
  /// As AppendBackward above: one per Param the seeds reach, in creation order.
  std::vector<ParamGrad> params;
  /// {wrt tensor, its gradient}, in the order of BackwardOptions::wrt. Each
  /// gradient is a fresh tensor "<name>/grad" (made unique), of kind
  /// Intermediate: a transient buffer of the step that computes it, which
  /// the stage's Send reads in that same step. It is written right after its
  /// last contribution, as parameter gradients are, so it can be sent early.
  std::vector<std::pair<TensorId, TensorId>> wrt_grads;
};

/// The general form: `loss` may be kInvalidTensor when options.output_grads
/// is not empty. With an empty output_grads and wrt it appends exactly what
/// the form above appends. Errors name the offending tensor: a seed of the
/// wrong shape or dtype, an id outside the graph, a wrt tensor that is a
/// Param, not f32, or not reached by any seed.
Result<BackwardResult> AppendBackward(Graph& g, TensorId loss, const BackwardOptions& options);

}  // namespace sinkrt::host
