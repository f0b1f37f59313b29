// Serialises a lowered, planned stream into the .tstream file format:
//
//   [uint32 size]["SKTS" FlatBuffer][pad to 64][blob section]
//
// (sinkrt/runtime/stream_format.h). The builder runs with ForceDefaults(false), so a
// field equal to its schema default is left out, and every table is built in
// the order of the lowered structs, which is itself derived from tensor and
// op indices only — the same input always gives the same bytes.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "host/src/compiler/lowering.h"
#include "host/src/compiler/memory_planner.h"
#include "sinkrt/fb/task_stream_generated.h"
#include "sinkrt/host/graph.h"
#include "sinkrt/runtime/status.h"

namespace sinkrt::host::compiler {

struct StreamHeaderInfo {
  uint32_t rank = 0;
  uint32_t world_size = 1;
  uint64_t graph_hash = 0;
};

// `plan.offsets[i]` is the offset of `stream.buffers[i]`. Inline initial
// values go to the blob section, each at a 64-byte aligned offset.
Result<std::vector<uint8_t>> WriteTaskStream(const LoweredStream& stream, const MemoryPlan& plan,
                                             const StreamHeaderInfo& header);

}  // namespace sinkrt::host::compiler
