// host/src/parallel/: parallel planning — deciding, from the training graph
// and the parallel context, what each rank computes and what the ranks must
// communicate. It sits between the training graph (graph → autodiff →
// optimizer) and lowering in the compiler's pipeline (docs/design/compiler.md): the
// compiler hands it plain facts (gradient sizes and when backward writes
// them, the buffers each task touches) and gets plans back as plain data
// (buckets, a schedule) that lowering turns into tasks. Nothing here knows the
// task-stream format or the lowered structs. Today it holds DATA_PARALLEL's
// gradient reduction (this file and fusion_buckets.h); the layouts,
// redistribution, cost model and strategy search of the sharding modes
// belong here too.
//
// Gradient reduction (DATA_PARALLEL). The gradients are grouped into fusion
// buckets (fusion_buckets.h) and the compiler lays the Grad buffers out
// bucket by bucket, hence contiguously in the arena, so that one AllReduce
// reduces one byte range in place. train_step gets a second stream, "comm":
// for bucket k, event 2k ("ready") is recorded on the compute stream right
// after the task that writes the bucket's last gradient; the comm stream
// waits for it, runs the AllReduce and records event 2k + 1 ("done"); the
// compute stream waits for "done" right before its first later task that
// touches one of the bucket's gradients (the optimizer update), or at its
// end. The updates, which the training graph lists in parameter order, run
// bucket by bucket. So the rest of backward overlaps the reductions, and the
// updates of an early bucket overlap the reduction of later ones.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "host/src/parallel/data_parallel/fusion_buckets.h"
#include "sinkrt/host/parallel_context.h"
#include "sinkrt/runtime/status.h"

namespace sinkrt::host::parallel {

// Events a program may have (the task-stream verifier refuses more); the
// schedule uses two per bucket.
inline constexpr size_t kMaxEvents = 65536;

// PlanFusionBuckets, refused when the buckets need more events than a
// program may have.
Result<std::vector<FusionBucket>> PlanGradientBuckets(std::span<const FusionGradient> gradients,
                                                      const CommFusion& fusion);

// One task of train_step's compute stream, as the schedule sees it.
struct ComputeTask {
  bool kernel = false;  // only kernels are reordered or belong to a bucket
  // A collective of the sharded graph: it moves to the comm stream at its
  // place (the communicator is driven from one thread), with the compute
  // stream waiting for it right away.
  bool collective = false;
  std::vector<uint32_t> operands;  // kernel: its input and output buffers
  std::vector<uint32_t> touched;   // every buffer it touches (a kernel's fused bias too)
  std::vector<uint32_t> written;   // kernel: outputs and the inputs it updates in place
};

// One task of a scheduled stream.
struct ScheduledTask {
  enum class Kind : uint8_t { Compute, RecordEvent, WaitEvent, Bucket };
  Kind kind = Kind::Compute;
  // Compute: index of the ComputeTask; Bucket: the bucket whose collective
  // this is (an AllReduce, or optimizer parallel's ReduceScatter or
  // AllGather).
  size_t index = 0;
  uint32_t event = 0;  // RecordEvent, WaitEvent
  std::string name;    // "bucket3/ready"; empty for Compute
};

struct ReductionSchedule {
  std::vector<ScheduledTask> compute;  // every ComputeTask once, events spliced in
  std::vector<ScheduledTask> comm;     // the "comm" stream
  uint32_t num_events = 0;
};

// One collective of the comm stream's buckets.
struct CommBucket {
  std::vector<uint32_t> buffers;  // every buffer it reads or writes
  // The index in `tasks` of the task that writes its last input (a
  // gradient); -1: ready after the last task that writes one of `buffers`
  // once the updates are ordered (optimizer parallel's AllGather of the
  // updated parameter blocks; it then neither orders the updates nor is
  // waited for before the step ends).
  int64_t ready_at = 0;
  std::string collective = "allreduce";  // its comm task is "bucket<k>/<collective>"
};

// The schedule above for `tasks` (train_step's compute stream, without
// events). Collective tasks go to the comm stream in compute order among the
// buckets: event pair (2·buckets + 2j, +1) for the j-th. Buckets are given
// in the order their inputs are ready (ties: as listed), and the updates
// run in bucket order.
ReductionSchedule ScheduleGradientReduction(std::span<const ComputeTask> tasks, std::span<const CommBucket> buckets);

}  // namespace sinkrt::host::parallel
