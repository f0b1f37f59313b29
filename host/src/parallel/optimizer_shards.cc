#include "parallel/optimizer_shards.h"

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
    if (s.parts < 2) {
      d.reason = "one rank";
    } else if (optimizer == OptimizerKind::SGD) {
      d.reason = "SGD keeps no optimizer state";
    } else if (d.bytes < threshold) {
      d.reason = std::to_string(d.bytes) + " B < threshold " + std::to_string(s.threshold_kb) + " KB";
    } else if (p.shape.empty() || p.shape[0] % s.parts != 0) {
      d.reason = p.shape.empty() ? "a scalar has no dim 0 to split"
                                 : "dim 0 (" + std::to_string(p.shape[0]) + ") does not divide by " +
                                       std::to_string(s.parts) + " ranks";
    } else if ((d.bytes / s.parts) % s.alignment != 0) {
      d.reason = "a block of " + std::to_string(d.bytes / s.parts) + " B is not a multiple of the arena alignment " +
                 std::to_string(s.alignment);
    } else {
      d.sharded = true;
      const int64_t rows = p.shape[0] / s.parts;
      d.row_begin = rows * s.position;
      d.row_end = d.row_begin + rows;
      d.block_bytes = d.bytes / s.parts;
    }
    out.push_back(std::move(d));
  }
  return out;
}

std::string DescribeShard(const TensorInfo& param, const OptimizerShardDecision& d, uint32_t position) {
  std::string line = param.name + " " + ShapeToString(param.shape) + ": ";
  if (!d.sharded) return line + "replicated, " + d.reason;
  return line + "sharded, rank " + std::to_string(position) + " updates rows [" + std::to_string(d.row_begin) +
         ", " + std::to_string(d.row_end) + ")";
}

}  // namespace sinkrt::host::parallel
