// Sums of squares reduced over the ranks that hold the rest of a tensor:
// what Lamb's trust ratio (per parameter) and gradient clipping by global
// norm (over every gradient, docs/guide/clipping.md) both need of a
// parameter updated in slices or blocks.
#pragma once

#include <string>
#include <vector>

#include "sinkrt/host/optimizer.h"

namespace sinkrt::host::passes {

// `sums` (f32 [k]) all-reduced (summed) over `group` when it has other
// ranks, so that it covers the whole parameter once; else `sums` itself.
TensorId ReduceOverNormGroup(Graph& g, TensorId sums, const NormGroup& group, const std::string& name);

// MindSpore's clip_by_global_norm before the updates: the sum of squares
// of `targets`' gradients (what each update reads; blocks where the
// parallel optimizer shards), one SumSquares per distinct norm group in
// the order the groups first appear, each reduced over its group; then
// ClipByGlobalNorm with `status` (kInvalidTensor without loss scaling).
// Returns its status [2], which the updates read instead of `status`.
// `norm_groups`: empty, or one per target (AppendOptimizer's).
TensorId AppendGlobalNormClip(Graph& g, const std::vector<ParamGrad>& targets,
                              const std::vector<NormGroup>& norm_groups, float clip_norm, TensorId status);

}  // namespace sinkrt::host::passes
