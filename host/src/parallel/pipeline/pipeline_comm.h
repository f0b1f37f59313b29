// A pipeline stage's comm stream (docs/design/pipeline.md): the point to point
// transfers of the schedule (parallel/pipeline/pipeline_schedule.h) and the stage
// group's gradient buckets, with the events that order them against the
// compute stream.
//
// Each transfer j sits in the compute stream where the training graph put
// its Send or Recv op; it leaves it for the comm stream, and in its place the
// compute stream records event 2j: "ready" for a send (its data is
// written), "armed" for a receive (its buffer may be written from now on).
// The comm stream runs the transfers in their schedule order, each as
// wait 2j, the transfer, record 2j + 1 ("done"). The compute stream waits
// for a receive's "done" right before the first later task that touches its
// buffer, and for a send's "done" right before the next send on the same
// channel (whose buffer may reuse the bytes) or at the end of the step.
//
// The gradient buckets follow every transfer on the comm stream (the last
// backward's sends are what the previous stage waits for), each as
// gradient_reduction.h describes: event pair (2T + 2k, + 1).
//
// The stage graph's own collectives (SEMI_AUTO_PARALLEL inside the stage)
// move to the comm stream too, which one thread drives: collective c as
// wait (2T + 2B + 2c), the collective, record (+1), placed among the
// transfers where neither stream can wait for the other in a cycle; the
// compute stream records "ready" and waits for "done" in its place. An
// Internal error means the transfers' order contradicts the compute order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "host/src/parallel/data_parallel/gradient_reduction.h"
#include "sinkrt/runtime/status.h"

namespace sinkrt::host::parallel {

struct PipelineTransfer {
  size_t task = 0;  // its index in the compute tasks
  bool send = false;
  int64_t order = 0;
  int64_t channel = 0;  // sends: the channel whose previous send it waits for
};

// `tasks`: train_step's compute stream without events, the transfers
// included; the schedule's Compute entries index it (a transfer's on the
// comm stream). Buckets as ScheduleGradientReduction takes them.
Result<ReductionSchedule> SchedulePipelineComm(std::span<const ComputeTask> tasks,
                                               std::span<const PipelineTransfer> transfers,
                                               std::span<const std::vector<uint32_t>> bucket_buffers,
                                               std::span<const int64_t> ready_at);

}  // namespace sinkrt::host::parallel
