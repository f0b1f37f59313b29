// SEMI_AUTO_PARALLEL inside a pipeline stage (docs/design/pipeline.md): the
// stage's forward graph, at the micro-batch size, partitioned over the
// stage's n ranks with the ops' shard strategies, as one of them.
//
// The first version keeps every boundary whole, so that rank (k, j) and
// rank (k+1, j) agree on what crosses without agreeing on a layout:
// - each sent tensor gets a Copy whose strategy is all ones; the
//   partitioner gathers (or, for pending sums, reduces) it in front of the
//   Copy, and the Copy's output is what is sent;
// - every Input is whole on every rank (MindSpore's full_batch): the
//   dataset columns, so that each rank's micro-batch m holds the same rows
//   in every stage, and the received activations, whose first readers cut
//   out their slices; a received activation's gradient is reduced like any
//   activation's, so the gradient sent back is whole too;
// - the loss op's strategy is all ones (its logits are gathered), so that
//   the loss, eval's correct count and its logits are whole on every rank
//   of the last stage.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "host/src/parallel/tensor_layout/layout.h"
#include "sinkrt/host/pipeline.h"
#include "sinkrt/runtime/status.h"

namespace sinkrt::host::parallel {

struct ShardedStage {
  // The local graph, with `received` and `sent` in it (sent: the whole
  // copies); `original` is the stage graph's, unchanged.
  StageGraph local;
  // Per tensor of the stage graph: its tensor in the local graph (a sent
  // tensor: the whole copy that is sent).
  std::vector<TensorId> local_of;
  // By parameter name: its layout over the stage's ranks and its mirror
  // group in world ranks (this rank included).
  std::map<std::string, parallel::TensorLayout> param_layouts;
  std::map<std::string, std::vector<uint32_t>> mirror_groups;
};

// `stage`'s graph partitioned over `ranks` ranks as rank `place` of them,
// whose world ranks are first_rank..first_rank+ranks-1. `loss`: the loss
// in the stage graph, or kInvalidTensor.
Result<ShardedStage> ShardPipelineStage(const StageGraph& stage, TensorId loss, uint32_t ranks, uint32_t place,
                                        uint32_t first_rank);

}  // namespace sinkrt::host::parallel
