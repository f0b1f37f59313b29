// Gradient fusion buckets for DATA_PARALLEL: which gradients each fused,
// in-place AllReduce of train_step reduces, and in what order the buckets
// are reduced (mindspore-semantics.md §3; MindSpore's backend pass is
// communication_op_fusion.cc).
//
// Gradient order. A bucket can be reduced once backward has written all its
// gradients, so for "auto", "size" and openstate=false the gradients are
// taken in the order backward finishes them (the compute position of the
// task that writes each one; ties in parameter order), and a bucket closes
// as soon as it is full. MindSpore itself walks its AllReduce nodes in
// parameter order; ours gives the same kind of buckets but lets the first
// ones start while backward is still running. For "index" the split indices
// are MindSpore's: inclusive 0-based bucket ends in *parameter* order (the
// order of the optimizer's parameter list), so a user's
// all_reduce_fusion_config selects the same parameters as in MindSpore; such
// a bucket is ready when its last-written gradient is.
//
// Sizes ("auto": 64 MB, "size": N MB) follow MindSpore's DP split as coded:
// the threshold is N × 262144 bytes (kDefaultThresholdMb2Byte, not 2^20),
// and the gradient that takes a bucket past it still joins that bucket,
// which then closes; the next bucket starts empty.
//
// A bucket holds one dtype (MindSpore's fusion key includes it): a run of
// another dtype starts a new bucket.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "sinkrt/host/parallel_context.h"
#include "sinkrt/runtime/dtype.h"
#include "sinkrt/runtime/status.h"

namespace sinkrt::host::parallel {

// communication_op_fusion.cc: threshold bytes = MB × kDefaultThresholdMb2Byte.
inline constexpr uint64_t kFusionBytesPerMb = 262144;
inline constexpr double kAutoFusionMb = 64;

struct FusionGradient {
  std::string name;  // for messages
  uint64_t bytes = 0;
  DType dtype = DType::F32;
  int64_t written_at = 0;  // compute position of the task that writes it last
};

struct FusionBucket {
  std::vector<size_t> gradients;  // indices into the input list, in arena order
  int64_t ready_at = 0;           // the latest written_at among them
  uint64_t bytes = 0;             // sum of the gradients' bytes
};

// `gradients` in parameter order. Returns the buckets in the order their
// AllReduces run: by ready_at, so the comm stream never waits on a bucket
// while a later-numbered one is already complete. Every gradient is in
// exactly one bucket. Fails on an "index" split index at or past the
// gradient count (MindSpore warns and ignores it; sinkrt refuses a config
// that cannot mean what it says).
Result<std::vector<FusionBucket>> PlanFusionBuckets(std::span<const FusionGradient> gradients,
                                                    const CommFusion& fusion);

}  // namespace sinkrt::host::parallel
