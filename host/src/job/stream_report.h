// What the host knows about a compiled stream, rebuilt from the stream
// alone: a job read from disk has no compiler report to carry.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "sinkrt/fb/task_stream_generated.h"
#include "sinkrt/host/compiler.h"
#include "sinkrt/host/tensor.h"
#include "sinkrt/runtime/task_stream_verifier.h"

namespace sinkrt::host::job {

// The columns of the queue called `name` (per-rank batch shapes), in order;
// empty when the stream has no such queue.
std::vector<ColumnSpec> QueueColumns(const VerifiedStream& stream, std::string_view name);

// A sharded buffer's or queue column's layout and slice, as the stream
// states it (fb::Slice; the verifier has checked it against the shape).
struct StreamSlice {
  Shape global_shape;
  std::vector<int64_t> offset;
  std::vector<int64_t> device_matrix;
  std::vector<int> tensor_map;
  std::vector<int> partial;
};
std::optional<StreamSlice> ReadSlice(const fb::Slice* slice);

// Per column of the queue called `name`: its slice of the global batch
// (nullopt: the rank's queue holds the whole batch column).
std::vector<std::optional<StreamSlice>> QueueSlices(const VerifiedStream& stream, std::string_view name);

// A CompiledStream whose report (arena, liveness bound, persistent bytes,
// task counts, buffers without their lifetimes, the fusion buckets), queue
// columns and graph hash are read from `stream` itself.
CompiledStream CompiledStreamFrom(VerifiedStream stream);

}  // namespace sinkrt::host::job
