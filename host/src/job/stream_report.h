// What the host knows about a compiled stream, rebuilt from the stream
// alone: a job read from disk has no compiler report to carry.
#pragma once

#include <span>
#include <string_view>
#include <vector>

#include "sinkrt/host/compiler.h"
#include "sinkrt/host/tensor.h"
#include "sinkrt/runtime/task_stream_verifier.h"

namespace sinkrt::host::job {

// The columns of the queue called `name` (per-rank batch shapes), in order;
// empty when the stream has no such queue.
std::vector<ColumnSpec> QueueColumns(const StreamView& view, std::string_view name);

// `view` must verify `bytes`. Fills report (arena, liveness bound,
// persistent bytes, task counts, buffers without their lifetimes, the
// fusion buckets), the queues' columns and the header's graph hash.
CompiledStream StreamFromView(std::vector<uint8_t> bytes, const StreamView& view);

}  // namespace sinkrt::host::job
