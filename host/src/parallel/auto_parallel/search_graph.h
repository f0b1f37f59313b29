// AUTO_PARALLEL's search problem for a forward graph (strategy_search.h):
// one search node per op, its candidates the op's enumerated strategies
// (strategy_enumeration.h) priced by the cost model (cost_model.h), one
// edge per tensor between ops priced by the redistribution the partitioner
// would plan between them (partition_plan.h). The costs are those of the
// stream Compile then writes:
// - an op's output reaches its readers as the op leaves it, pending sums
//   included, and each reader pays the redistribution from there to the
//   layout its candidate reads, forward and (for a tensor with a
//   gradient) backward; the op pays the AllReduce of a partial output only
//   when nothing reads it (cost_model.h);
// - Reshape and Flatten have no rule: they follow their input, so their
//   candidates mirror those of the op they follow (an edge that allows
//   only the matching pair), each paying the gather of the splits it
//   cannot carry;
// - dataset inputs are split as the loss splits its labels (the
//   partitioner's default), so an op reading one is joined to the loss op
//   by an edge; with full_batch or a dataset_strategy their layouts are
//   fixed and the reader pays its redistribution alone;
// - a parameter read by several ops must have one layout: their
//   candidates that disagree are joined by an infinite edge;
// - an op the user sharded has one candidate, fixed.
// Redistribution costs are memoised by (from, to, dtype): a transformer's
// blocks repeat the same few pairs.
#pragma once

#include <cstdint>
#include <vector>

#include "host/src/parallel/auto_parallel/cost_model.h"
#include "host/src/parallel/auto_parallel/strategy_search.h"
#include "host/src/parallel/partition/partition_plan.h"
#include "sinkrt/host/graph.h"
#include "sinkrt/runtime/status.h"

namespace sinkrt::host::parallel {

struct OpCandidate {
  Strategy strategy;  // empty for a follower (Reshape, Flatten)
  OpCost cost;        // zero for a follower
  // Seconds of redistribution the op pays alone: a fixed dataset input
  // brought to its layout, a follower's gather.
  double own_redistribution_s = 0;
  // Of cost.comm_fwd_s, what resolving outputs that other ops read costs:
  // their readers pay their own redistribution instead.
  double readers_resolve_s = 0;
  std::vector<TensorLayout> outputs;  // as the op leaves them (partial included)

  double TimeSeconds() const { return cost.StepSeconds() - readers_resolve_s + own_redistribution_s; }
  double CommunicationSeconds() const {
    return cost.comm_fwd_s - readers_resolve_s + cost.comm_bwd_s + cost.exposed_grad_sync_s;
  }
};

// Which tensor an edge carries: input `input` of the consumer's op.
struct EdgeTensor {
  size_t input = 0;
  bool constraint = false;  // a shared parameter's agreement, not a tensor
};

struct SearchGraph {
  SearchProblem problem;                      // node i is op i of the graph
  std::vector<std::vector<OpCandidate>> ops;  // per op, parallel to problem.nodes[i].candidates
  std::vector<EdgeTensor> edge_tensors;       // parallel to problem.edges
  // Per op: the op a follower (Reshape, Flatten) mirrors, candidate for
  // candidate, or -1; a fixed-input follower mirrors nothing.
  std::vector<int64_t> follows;
  size_t enumerated = 0;  // strategies over all ops
};

struct SearchGraphOptions {
  int64_t device_num = 1;
  bool fully_use_devices = false;  // strategy_enumeration.h
  // Per Input tensor (kInvalid layout elsewhere): its fixed layout, or
  // empty when the batch follows the loss.
  std::vector<TensorLayout> fixed_inputs;
};

// The problem for `g` (its loss set). The context's graph must be `g`.
Result<SearchGraph> BuildSearchGraph(const Graph& g, const CostContext& ctx, const SearchGraphOptions& options);

}  // namespace sinkrt::host::parallel
