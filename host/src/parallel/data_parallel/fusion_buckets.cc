#include "host/src/parallel/data_parallel/fusion_buckets.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace sinkrt::host::parallel {
namespace {

// Inclusive ends of the segments of `order` (positions into it).
using Segments = std::vector<size_t>;

// MindSpore's GetAllReduceSplitSegment over one segment [0, n): a gradient
// that takes the running total past the threshold closes the bucket it
// joined.
Segments SplitBySize(std::span<const FusionGradient> gradients, const std::vector<size_t>& order, uint64_t threshold) {
  Segments ends;
  uint64_t accumulated = 0;
  for (size_t j = 0; j < order.size(); ++j) {
    const uint64_t bytes = gradients[order[j]].bytes;
    if (accumulated + bytes > threshold) {
      ends.push_back(j);
      accumulated = 0;
    } else {
      accumulated += bytes;
    }
  }
  // MindSpore closes the tail only when it holds bytes; a tail of empty
  // gradients still needs a bucket here, since every gradient gets one.
  if (!order.empty() && (ends.empty() || ends.back() != order.size() - 1)) ends.push_back(order.size() - 1);
  return ends;
}

Result<Segments> SplitByIndex(size_t n, const std::vector<int>& indices) {
  Segments ends;
  for (size_t i = 0; i < indices.size(); ++i) {
    const int index = indices[i];
    // ParallelContext::Validate refuses these first with MindSpore's Python
    // messages; this is the backend's own check, for callers that skip it.
    if (index < 0 || (i > 0 && index <= indices[i - 1]))
      return InvalidArgument("invalid AllReduce split index " + std::to_string(i) + " " + std::to_string(index));
    if (static_cast<size_t>(index) >= n)
      return InvalidArgument("AllReduce's split index " + std::to_string(index) +
                             " is Greater than or equal to total gradient's number " + std::to_string(n));
    ends.push_back(static_cast<size_t>(index));
  }
  if (ends.empty() || ends.back() != n - 1) ends.push_back(n - 1);
  return ends;
}

uint64_t ThresholdBytes(double mb) {
  const double bytes = std::floor(mb * static_cast<double>(kFusionBytesPerMb));
  // Past 2^62 every model fits in one bucket; also keeps the sum above from overflowing.
  constexpr double kCap = static_cast<double>(uint64_t{1} << 62);
  return !(bytes < kCap) ? uint64_t{1} << 62 : static_cast<uint64_t>(std::max(bytes, 0.0));
}

}  // namespace

Result<std::vector<FusionBucket>> PlanFusionBuckets(std::span<const FusionGradient> gradients,
                                                    const CommFusion& fusion) {
  const size_t n = gradients.size();
  if (n == 0) return std::vector<FusionBucket>{};
  if (fusion.mode != "auto" && fusion.mode != "size" && fusion.mode != "index")
    return InvalidArgument("fusion method mode must be auto, index or size, but got " + fusion.mode);

  const bool by_index = fusion.openstate && fusion.mode == "index";
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  if (!by_index)
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return gradients[a].written_at < gradients[b].written_at; });

  Segments ends;
  if (!fusion.openstate) {
    ends.resize(n);
    std::iota(ends.begin(), ends.end(), 0);
  } else if (by_index) {
    SINKRT_ASSIGN_OR_RETURN(ends, SplitByIndex(n, fusion.indices));
  } else {
    ends = SplitBySize(gradients, order, ThresholdBytes(fusion.mode == "auto" ? kAutoFusionMb : fusion.size_mb));
  }

  std::vector<FusionBucket> buckets;
  size_t start = 0;
  for (size_t end : ends) {
    for (size_t j = start; j <= end; ++j) {
      const FusionGradient& g = gradients[order[j]];
      if (j == start || g.dtype != gradients[order[j - 1]].dtype) buckets.emplace_back();
      FusionBucket& b = buckets.back();
      b.gradients.push_back(order[j]);
      b.ready_at = std::max(b.ready_at, g.written_at);
      b.bytes += g.bytes;
    }
    start = end + 1;
  }
  // Index buckets follow parameter order, which backward finishes roughly
  // last to first; the comm stream takes them as they become ready.
  std::stable_sort(buckets.begin(), buckets.end(),
                   [](const FusionBucket& a, const FusionBucket& b) { return a.ready_at < b.ready_at; });
  return buckets;
}

}  // namespace sinkrt::host::parallel
