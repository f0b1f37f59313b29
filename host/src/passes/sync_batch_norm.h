// SyncBatchNorm (docs/guide/normalization.md): each BatchNorm marked `sync`
// normalises with the statistics of the whole group's batch. The pass runs
// on the forward graph a rank trains, before autodiff: such a BatchNorm gets
// BatchNormStats (its batch's per-channel sums about the moving mean, which
// every member of the group holds equal) and an AllReduce of those sums
// over `group` as a 6th input; its gradient rule then reduces the backward's
// two sums over the same group. A group of one rank leaves the graph as it is.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "sinkrt/host/graph.h"
#include "sinkrt/runtime/status.h"

namespace sinkrt::host::passes {

// The ranks whose batches one sync BatchNorm op normalises together
// (ascending world ranks, this rank among them).
using SyncGroupOf = std::function<std::vector<uint32_t>(const OpNode& op)>;

// Every tensor of `forward` keeps its id (the new sums come after them), so
// layouts indexed by id stay valid. `rank`: this rank, a member of each group.
Result<Graph> ExpandSyncBatchNorm(const Graph& forward, const SyncGroupOf& group_of, uint32_t rank);

// Whether `g` has a BatchNorm marked sync.
bool HasSyncBatchNorm(const Graph& g);

}  // namespace sinkrt::host::passes
