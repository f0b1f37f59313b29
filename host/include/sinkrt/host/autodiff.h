// Reverse-mode autodiff over a Graph.
#pragma once

#include <vector>

#include "sinkrt/host/graph.h"

namespace sinkrt::host {

struct ParamGrad {
  TensorId param;
  TensorId grad;  // TensorKind::Grad, same shape as param
};

// Appends the backward graph of `loss` (a scalar) to `g`: seeds d(loss) =
// `seed` (1; a sharded rank whose loss is one of D data-parallel slices
// seeds 1/D, compile.cc), walks the ops in reverse, applies each op's gradient rule and sums the
// contributions of tensors used more than once (AddN). Returns one gradient
// per Param that the loss depends on, in parameter creation order. The
// forward ops are left untouched.
Result<std::vector<ParamGrad>> AppendBackward(Graph& g, TensorId loss, float seed = 1.0f);

}  // namespace sinkrt::host
