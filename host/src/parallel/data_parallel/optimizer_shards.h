// Optimizer parallel (MindSpore's enable_parallel_optimizer, level1; ZeRO-1;
// docs/guide/parallel_optimizer.md): which parameters' updates the data-parallel
// ranks share, each rank updating one dim-0 block.
//
// The decision reads only shapes, dtypes and the options, so every rank of
// a job makes the same one. A parameter is sharded when all of these hold:
//   - the optimizer keeps state (Momentum, Adam; SGD has none to shard);
//   - its bytes are at least threshold_kb · 1024 (MindSpore's
//     parallel_optimizer_threshold: smaller ones are skipped);
//   - another rank holds it too (its group has more than one rank);
//   - it has a dim 0 that divides by the ranks (MindSpore splits dim 0);
//   - its block's bytes are a multiple of the arena alignment, because the
//     block is a view of the parameter inside the arena (compiler/views.h).
// Otherwise it stays replicated, with the reason.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "sinkrt/host/autodiff.h"
#include "sinkrt/host/graph.h"
#include "sinkrt/host/optimizer.h"

namespace sinkrt::host::parallel {

struct OptimizerSharding {
  uint32_t rank = 0;  // this rank, in the world
  // The ranks that share a parameter's update: under data parallel every
  // rank (`group`); under semi_auto_parallel the parameter's mirror group,
  // the ranks holding the same slice of it (`groups`, by parameter).
  std::vector<uint32_t> group;
  std::map<TensorId, std::vector<uint32_t>> groups;
  int64_t threshold_kb = 64;
  uint64_t alignment = 64;  // the arena's

  const std::vector<uint32_t>& GroupOf(TensorId param) const {
    auto it = groups.find(param);
    return it == groups.end() ? group : it->second;
  }
};

struct OptimizerShardDecision {
  bool sharded = false;
  std::vector<uint32_t> group;  // the ranks sharing the update
  uint32_t position = 0;        // this rank's place among them: its block
  // Sharded: rows [row_begin, row_end) of dim 0 are this rank's block.
  int64_t row_begin = 0, row_end = 0;
  // Bytes of the whole parameter and of one block.
  uint64_t bytes = 0, block_bytes = 0;
  std::string reason;  // why it stays replicated
};

// One decision per entry of `grads` (parameter order).
std::vector<OptimizerShardDecision> PlanOptimizerShards(const Graph& g, std::span<const ParamGrad> grads,
                                                        OptimizerKind optimizer, const OptimizerSharding& sharding);

// "fc1.weight [784,512]: sharded, rank 1 updates rows [392, 784)" or
// "fc3.bias [10]: replicated, 40 B < threshold 64 KB" (rows of this
// rank's slice under semi_auto_parallel).
std::string DescribeShard(const TensorInfo& param, const OptimizerShardDecision& d, uint32_t rank);

}  // namespace sinkrt::host::parallel
