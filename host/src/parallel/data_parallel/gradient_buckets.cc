#include "host/src/parallel/data_parallel/gradient_buckets.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include "host/src/parallel/data_parallel/gradient_reduction.h"

namespace sinkrt::host::parallel {
namespace {

// The gradient buckets: under data parallel, PlanGradientBuckets over every
// gradient (group: the world); sharded, the same per mirror group (a group
// of one rank sums nothing), the groups' buckets merged in the order their
// gradients are ready.
Result<std::vector<FusionBucket>> PlanGroupedBuckets(const std::vector<FusionGradient>& grads,
                                                     const std::vector<std::vector<uint32_t>>& grad_groups,
                                                     uint32_t world_size, const CommFusion& fusion,
                                                     std::vector<std::vector<uint32_t>>* groups) {
  std::vector<uint32_t> world;
  for (uint32_t r = 0; r < world_size; ++r) world.push_back(r);
  if (grad_groups.empty()) {
    SINKRT_ASSIGN_OR_RETURN(std::vector<FusionBucket> b, PlanGradientBuckets(grads, fusion));
    groups->assign(b.size(), world);
    return b;
  }
  if (grad_groups.size() != grads.size())
    return Internal("sharded: " + std::to_string(grad_groups.size()) + " mirror groups for " +
                    std::to_string(grads.size()) + " gradients");
  std::map<std::vector<uint32_t>, std::vector<size_t>> by_group;
  for (size_t i = 0; i < grads.size(); ++i)
    if (grad_groups[i].size() > 1) by_group[grad_groups[i]].push_back(i);
  std::vector<std::pair<FusionBucket, std::vector<uint32_t>>> all;
  for (const auto& [ranks, members] : by_group) {
    std::vector<FusionGradient> sub;
    for (size_t i : members) sub.push_back(grads[i]);
    SINKRT_ASSIGN_OR_RETURN(std::vector<FusionBucket> b, PlanGradientBuckets(sub, fusion));
    for (FusionBucket& bucket : b) {
      for (size_t& i : bucket.gradients) i = members[i];
      all.emplace_back(std::move(bucket), ranks);
    }
  }
  std::stable_sort(all.begin(), all.end(),
                   [](const auto& a, const auto& b) { return a.first.ready_at < b.first.ready_at; });
  std::vector<FusionBucket> out;
  groups->clear();
  for (auto& [bucket, ranks] : all) {
    out.push_back(std::move(bucket));
    groups->push_back(std::move(ranks));
  }
  return out;
}

// comm_fusion's "reducescatter" or "allgather" entry as a size split over
// gradients taken in the order backward finishes them (openstate false:
// one per parameter).
CommFusion SizeFusion(const CommFusion& fusion, const FusionThreshold& entry) {
  CommFusion f;
  f.openstate = fusion.openstate;
  f.mode = "size";
  f.size_mb = entry.size_mb;
  return f;
}

}  // namespace

Result<AllReduceBuckets> PlanAllReduceBuckets(std::span<const FusionGradient> grads, const std::vector<bool>& scattered,
                                              const std::vector<std::vector<uint32_t>>& grad_groups,
                                              uint32_t world_size, const CommFusion& fusion) {
  std::vector<FusionGradient> reduced;
  std::vector<size_t> reduced_index;
  std::vector<std::vector<uint32_t>> reduced_groups;
  for (size_t i = 0; i < grads.size(); ++i) {
    if (scattered[i]) continue;
    reduced.push_back(grads[i]);
    reduced_index.push_back(i);
    if (!grad_groups.empty()) reduced_groups.push_back(grad_groups.at(i));
  }
  AllReduceBuckets out;
  SINKRT_ASSIGN_OR_RETURN(out.buckets, PlanGroupedBuckets(reduced, reduced_groups, world_size, fusion, &out.groups));
  for (FusionBucket& b : out.buckets)
    for (size_t& i : b.gradients) i = reduced_index[i];
  return out;
}

Result<std::vector<ShardBucket>> PlanScatterBuckets(std::span<const ScatteredGradient> shards,
                                                    std::span<const FusionGradient> grads, const CommFusion& fusion) {
  std::map<std::vector<uint32_t>, std::vector<size_t>> by_group;
  for (size_t s = 0; s < shards.size(); ++s) by_group[shards[s].group].push_back(s);
  std::vector<ShardBucket> out;
  for (const auto& [group, members] : by_group) {
    std::vector<FusionGradient> sub;
    for (size_t s : members) sub.push_back(grads[shards[s].grad]);
    SINKRT_ASSIGN_OR_RETURN(std::vector<FusionBucket> buckets,
                            PlanFusionBuckets(sub, SizeFusion(fusion, fusion.reducescatter)));
    for (const FusionBucket& b : buckets) {
      ShardBucket z{.shards = {}, .group = group, .ready_at = b.ready_at};
      for (size_t i : b.gradients) z.shards.push_back(members[i]);
      out.push_back(std::move(z));
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.ready_at < b.ready_at; });
  return out;
}

std::vector<ShardBucket> PlanGatherBuckets(const std::vector<ShardBucket>& scatter,
                                           std::span<const ScatteredGradient> shards, const CommFusion& fusion) {
  const CommFusion f = SizeFusion(fusion, fusion.allgather);
  const uint64_t limit = static_cast<uint64_t>(f.size_mb * static_cast<double>(kFusionBytesPerMb));
  std::vector<ShardBucket> out;
  uint64_t bytes = 0;
  bool open = false;
  for (const ShardBucket& b : scatter)
    for (size_t s : b.shards) {
      if (!open || out.back().group != shards[s].group) {
        out.push_back({.shards = {}, .group = shards[s].group, .ready_at = -1});
        bytes = 0;
        open = true;
      }
      out.back().shards.push_back(s);
      bytes += shards[s].bytes;
      if (!f.openstate || bytes >= limit) open = false;
    }
  return out;
}

}  // namespace sinkrt::host::parallel
