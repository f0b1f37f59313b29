// Sums of squares over norm groups and gradient clipping by global norm
// (passes/global_norm.h).
#include "host/src/passes/global_norm.h"

#include <algorithm>
#include <utility>

namespace sinkrt::host::passes {

TensorId ReduceOverNormGroup(Graph& g, TensorId sums, const NormGroup& group, const std::string& name) {
  if (group.ranks.size() <= 1) return sums;
  OpAttrs reduce;
  reduce.group = group.ranks;
  reduce.group_position = group.position;
  const TensorInfo& t = g.tensor(sums);
  return g.AddOp(OpCode::AllReduce, {sums}, reduce, {{t.shape, t.dtype}}, name).at(0);
}

TensorId AppendGlobalNormClip(Graph& g, const std::vector<ParamGrad>& targets,
                              const std::vector<NormGroup>& norm_groups, float clip_norm, TensorId status) {
  // The gradients whose squares are reduced over the same ranks share one
  // sum: one device and data parallel (whole, reduced gradients) one
  // SumSquares and no collective; slices and blocks one more per group.
  std::vector<std::pair<NormGroup, std::vector<TensorId>>> parts;
  for (size_t i = 0; i < targets.size(); ++i) {
    const NormGroup group = norm_groups.empty() ? NormGroup{} : norm_groups[i];
    auto same = [&](const auto& part) {
      return part.first.ranks == group.ranks && part.first.position == group.position;
    };
    auto it = std::find_if(parts.begin(), parts.end(), same);
    if (it == parts.end()) it = parts.insert(parts.end(), {group, {}});
    it->second.push_back(targets[i].grad);
  }
  std::vector<TensorId> inputs;
  for (size_t k = 0; k < parts.size(); ++k) {
    // Appended piecewise: GCC 12's -Wrestrict misreads operator+ on a
    // temporary here.
    std::string name = "clip/sum_squares";
    if (k > 0) name.append("_").append(std::to_string(k));
    const TensorId sum = g.AddOp(OpCode::SumSquares, parts[k].second, {}, {{{1}, DType::F32}}, name).at(0);
    inputs.push_back(ReduceOverNormGroup(g, sum, parts[k].first, name + "/reduced"));
  }
  if (status != kInvalidTensor) inputs.push_back(status);
  OpAttrs clip;
  clip.value = clip_norm;
  return g.AddOp(OpCode::ClipByGlobalNorm, inputs, clip, {{{2}, DType::F32}}, "clip/status").at(0);
}

}  // namespace sinkrt::host::passes
