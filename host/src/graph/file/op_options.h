// Which OpAttrs fields travel with which op, in both directions: the one
// mapping between the host's OpAttrs and the fb::OpOptions union, shared by
// the task stream writer and graph files (docs/reference/ops.md, "options" column).
#pragma once

#include <string>
#include <utility>

#include "sinkrt/fb/common_generated.h"
#include "sinkrt/host/graph.h"
#include "sinkrt/runtime/status.h"

namespace sinkrt::host {

// The OpOptions member `op` carries, or NONE for ops without options.
fb::OpOptions OpOptionsTypeFor(OpCode op);

// The OpOptions member for `op` built from `attrs`, or {NONE, 0}.
std::pair<fb::OpOptions, flatbuffers::Offset<void>> OpAttrsFor(flatbuffers::FlatBufferBuilder& fbb, OpCode op,
                                                               const OpAttrs& attrs);

// The OpAttrs that `options` (of union type `type`) give `op`. A missing
// member (NONE, null) reads as the schema defaults, so hand-written files
// may leave options out; a member of another type is an error that names
// both types.
Result<OpAttrs> OpAttrsFromOptions(OpCode op, fb::OpOptions type, const void* options);

}  // namespace sinkrt::host
