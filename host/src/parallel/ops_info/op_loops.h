// The loop dims of each forward op, for its sharding rule (op_sharding.h):
// the iteration space of the op, and for every input and output dim the
// loop that indexes it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sinkrt/host/graph.h"
#include "sinkrt/runtime/status.h"

namespace sinkrt::host::parallel {

struct OpLoops {
  std::vector<int64_t> extents;           // per loop dim
  std::vector<bool> reduction;            // not indexing the outputs: a split leaves them partial
  std::vector<std::string> fixed;         // non-empty: why the loop may not be split
  std::vector<std::vector<int>> inputs;   // per input dim: its loop, or -1 (a broadcast dim of 1)
  std::vector<std::vector<int>> outputs;  // per output dim: its loop, or -1 (whole on every rank)
  bool mean = false;                      // the reduction is a mean (its partial sums need / n)

  int AddLoop(int64_t extent, bool is_reduction = false, std::string fixed_because = "");
};

// The loops of `op`, or Unimplemented naming an op with no sharding rule
// (the partitioner handles Reshape and Flatten itself: they re-describe
// bytes and have no loops).
Result<OpLoops> LoopsOf(const Graph& g, const OpNode& op);

}  // namespace sinkrt::host::parallel
