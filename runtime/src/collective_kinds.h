// Which task kinds of a stream are collectives, and which CollectiveUse bit
// (sinkrt/runtime/collective_use.h) each one sets.
#pragma once

#include <cstdint>

#include "sinkrt/fb/task_stream_generated.h"

namespace sinkrt {

/// The task kinds that talk to other ranks (they run on the comm stream and
/// need kFeatureCollectives).
bool IsCollective(fb::TaskBody kind);

/// The bit of a collective task kind; 0 for any other task.
uint32_t CollectiveUseOf(fb::TaskBody kind);

}  // namespace sinkrt
