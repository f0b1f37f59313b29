// The SPMD partitioner's second half: rank r's local forward graph from the
// global graph and its partition plan (partition_plan.h; docs/design/sharding.md
// §5, §6).
//
// The local graph has the global graph's ops and names, with every tensor at
// its slice shape, and communication ops where the plan says: each
// redistribution step becomes an AllGather / ReduceScatter / AllToAll /
// AllReduce / ShardSlice over the ranks of its mesh axis (with the Reshapes
// and Transposes that bring a dim other than 0 to the front, since the
// collectives work on whole leading blocks), and each input whose gradient
// is partial gets a GradAllReduce over those axes. Parameters and constants
// keep their global initialisers, marked with the slice they hold, so that
// every rank draws exactly the values a single device would hold there.
// Autodiff, the optimizer and lowering then run on the local graph as on
// any other.
#pragma once

#include <cstdint>
#include <vector>

#include "host/src/parallel/partition/partition_plan.h"
#include "sinkrt/host/graph.h"
#include "sinkrt/runtime/status.h"

namespace sinkrt::host::parallel {

struct LocalParameter {
  TensorId local = kInvalidTensor;   // in the local graph
  TensorId global = kInvalidTensor;  // in the global graph
  TensorLayout layout;
  std::vector<uint32_t> mirror_group;  // ranks whose gradients of this slice are summed (this rank included)
};

struct LocalGraph {
  Graph graph;
  int64_t rank = 0;
  std::vector<TensorId> local_of;  // per global tensor: its local tensor
  // Per local tensor: the layout of the global tensor it is the slice of
  // (an empty device matrix for the intermediates of a redistribution).
  std::vector<TensorLayout> layouts;
  std::vector<LocalParameter> parameters;  // per Param of the global graph, in creation order
};

// Rank `rank`'s forward graph. `plan` must come from PlanPartition on `g`.
// The plan's ranks 0..n-1 are world ranks first_rank..first_rank+n-1 in
// every group it names (a pipeline stage's ranks, docs/design/pipeline.md).
Result<LocalGraph> PartitionForRank(const Graph& g, const PartitionPlan& plan, int64_t rank, uint32_t first_rank = 0);

}  // namespace sinkrt::host::parallel
