#include "host/src/parallel/data_parallel/optimizer_shards.h"

#include <algorithm>

namespace sinkrt::host::parallel {

std::vector<OptimizerShardDecision> PlanOptimizerShards(const Graph& g, std::span<const ParamGrad> grads,
                                                        OptimizerKind optimizer, const OptimizerSharding& s) {
  std::vector<OptimizerShardDecision> out;
  out.reserve(grads.size());
  const uint64_t threshold = static_cast<uint64_t>(s.threshold_kb) * 1024;
  for (const ParamGrad& pg : grads) {
    const TensorInfo& p = g.tensor(pg.param);
    OptimizerShardDecision d;
    const int64_t elements = NumElements(p.shape);
    d.bytes = elements > 0 ? static_cast<uint64_t>(elements) * DTypeSize(p.dtype) : 0;
    d.group = s.GroupOf(pg.param);
    const auto me = std::find(d.group.begin(), d.group.end(), s.rank);
    const uint32_t parts = static_cast<uint32_t>(d.group.size());
    d.position = static_cast<uint32_t>(me - d.group.begin());
    if (parts < 2 || me == d.group.end()) {
      d.reason = "no other rank holds it";
    } else if (optimizer == OptimizerKind::SGD) {
      d.reason = "SGD keeps no optimizer state";
    } else if (d.bytes < threshold) {
      d.reason = std::to_string(d.bytes) + " B < threshold " + std::to_string(s.threshold_kb) + " KB";
    } else if (p.shape.empty() || p.shape[0] % parts != 0) {
      d.reason = p.shape.empty() ? "a scalar has no dim 0 to split"
                                 : "dim 0 (" + std::to_string(p.shape[0]) + ") does not divide by " +
                                       std::to_string(parts) + " ranks";
    } else if ((d.bytes / parts) % s.alignment != 0) {
      d.reason = "a block of " + std::to_string(d.bytes / parts) + " B is not a multiple of the arena alignment " +
                 std::to_string(s.alignment);
    } else {
      d.sharded = true;
      const int64_t rows = p.shape[0] / parts;
      d.row_begin = rows * d.position;
      d.row_end = d.row_begin + rows;
      d.block_bytes = d.bytes / parts;
    }
    out.push_back(std::move(d));
  }
  return out;
}

std::string DescribeShard(const TensorInfo& param, const OptimizerShardDecision& d, uint32_t rank) {
  std::string line = param.name + " " + ShapeToString(param.shape) + ": ";
  if (!d.sharded) return line + "replicated, " + d.reason;
  line += "sharded, rank " + std::to_string(rank) + " updates rows [" + std::to_string(d.row_begin) + ", " +
          std::to_string(d.row_end) + ")";
  // A group that is not the world names itself.
  bool world = true;
  for (size_t i = 0; i < d.group.size() && world; ++i) world = d.group[i] == i;
  if (!world) {
    line += " among ranks [";
    for (size_t i = 0; i < d.group.size(); ++i) line += (i ? ", " : "") + std::to_string(d.group[i]);
    line += "]";
  }
  return line;
}

}  // namespace sinkrt::host::parallel
