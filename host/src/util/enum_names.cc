// The host's public enums' name functions. Each is a switch over every
// enumerator (the lists in schema_enums.h), so -Wswitch names a case an
// enumerator added to a public enum but not to its list lacks.
#include "host/src/util/schema_enums.h"

namespace sinkrt {

#define SINKRT_NAME_CASE(Enum, name) \
  case Enum::name:                   \
    return #name;

const char* OpCodeName(OpCode op) {
#define SINKRT_OP_CODE_CASE(name) SINKRT_NAME_CASE(OpCode, name)
  switch (op) { SINKRT_OP_CODE_ENUMERATORS(SINKRT_OP_CODE_CASE) }
#undef SINKRT_OP_CODE_CASE
  return "";  // a value from outside the enum, as fb::EnumNameOpCode says
}

const char* InitKindName(InitKind kind) {
#define SINKRT_INIT_KIND_CASE(name) SINKRT_NAME_CASE(InitKind, name)
  switch (kind) { SINKRT_INIT_KIND_ENUMERATORS(SINKRT_INIT_KIND_CASE) }
#undef SINKRT_INIT_KIND_CASE
  return "";
}

const char* BufferRoleName(BufferRole role) {
#define SINKRT_BUFFER_ROLE_CASE(name) SINKRT_NAME_CASE(BufferRole, name)
  switch (role) { SINKRT_BUFFER_ROLE_ENUMERATORS(SINKRT_BUFFER_ROLE_CASE) }
#undef SINKRT_BUFFER_ROLE_CASE
  return "";
}

#undef SINKRT_NAME_CASE

}  // namespace sinkrt
