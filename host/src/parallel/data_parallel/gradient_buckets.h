// Which collective reduces each gradient of train_step, and in which
// bucket: the plans lowering turns into train_step's comm-stream buckets
// (compiler/gradient_collectives.h). Plain facts in, plain buckets out:
// gradient sizes and the compute position that writes them, each
// gradient's mirror group, optimizer parallel's sharded gradients.
//
// A gradient is either AllReduced over its group, fused with others of the
// same group into buckets (fusion_buckets.h), or, when optimizer parallel
// shards its parameter, ReduceScattered into this rank's block; the
// updated blocks are then AllGathered back into the parameter.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "host/src/parallel/data_parallel/fusion_buckets.h"
#include "sinkrt/host/parallel_context.h"
#include "sinkrt/runtime/status.h"

namespace sinkrt::host::parallel {

// The AllReduce buckets, in the order they are ready, and the ranks each
// one reduces over.
struct AllReduceBuckets {
  std::vector<FusionBucket> buckets;          // gradients: indices into the whole gradient list
  std::vector<std::vector<uint32_t>> groups;  // per bucket
};

// The buckets of every gradient not `scattered` (one flag per gradient).
// `grad_groups` empty: every gradient over the world [0, world_size), as
// PlanGradientBuckets makes them; else one mirror group per gradient
// (sharded): buckets form per group (a group of one rank sums nothing, so
// its gradients get none), merged in the order their gradients are ready.
Result<AllReduceBuckets> PlanAllReduceBuckets(std::span<const FusionGradient> grads, const std::vector<bool>& scattered,
                                              const std::vector<std::vector<uint32_t>>& grad_groups,
                                              uint32_t world_size, const CommFusion& fusion);

// A gradient optimizer parallel ReduceScatters (passes::OptimizerShard's
// facts).
struct ScatteredGradient {
  size_t grad = 0;              // index into the gradient list
  std::vector<uint32_t> group;  // the ranks sharing its update
  uint64_t bytes = 0;           // of the whole parameter
};

// A ReduceScatter or AllGather bucket of optimizer parallel.
struct ShardBucket {
  std::vector<size_t> shards;   // indices into the ScatteredGradient list, in bucket order
  std::vector<uint32_t> group;  // the ranks of every shard in it
  int64_t ready_at = 0;         // ReduceScatter: the last of its gradients; AllGather: -1
};

// The sharded gradients in ReduceScatter buckets of at most comm_fusion's
// reducescatter size (the gradient that crosses it still joins, as
// AllReduce buckets do), one group's gradients per bucket, in the order
// they are ready.
Result<std::vector<ShardBucket>> PlanScatterBuckets(std::span<const ScatteredGradient> shards,
                                                    std::span<const FusionGradient> grads, const CommFusion& fusion);

// The updated blocks in AllGather buckets of at most comm_fusion's
// allgather size, one group's per bucket, taken in the order their updates
// run (that of the ReduceScatter buckets).
std::vector<ShardBucket> PlanGatherBuckets(const std::vector<ShardBucket>& scatter,
                                           std::span<const ScatteredGradient> shards, const CommFusion& fusion);

}  // namespace sinkrt::host::parallel
