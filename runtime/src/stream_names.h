// Names of a stream's enum values for messages and tools (sinkdump), taking
// the schema's enums as a stream reader holds them: an op, a buffer role, a
// task kind, a program kind. An unknown value reads "Unknown" ("unknown" for
// a program kind, as ProgramKindName(ProgramKind) says).
#pragma once

#include <string_view>

#include "sinkrt/fb/task_stream_generated.h"

namespace sinkrt {

std::string_view OpCodeName(fb::OpCode op);
std::string_view BufferRoleName(fb::BufferRole role);
std::string_view TaskKindName(fb::TaskBody kind);
std::string_view ProgramKindName(fb::ProgramKind kind);

}  // namespace sinkrt
