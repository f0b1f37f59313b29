// The one place where runtime's public enums (DType, ProgramKind) meet the
// schemas' (fb::DType, fb::ProgramKind): the public enums copy the schemas'
// enumerators and values, so the mapping is a cast, and the static_asserts
// below stop the build if one of them drifts. A value the schema gains that
// the API lacks fails SchemaEnums.* (test), which walks the schema's values.
// host/src/util/schema_enums.h does the same for the host's enums.
#pragma once

#include <cstddef>
#include <cstdint>

#include "sinkrt/fb/common_generated.h"
#include "sinkrt/fb/task_stream_generated.h"
#include "sinkrt/runtime/dtype.h"
#include "sinkrt/runtime/program_kind.h"

namespace sinkrt {

// Every enumerator of each pair, by name.
#define SINKRT_DTYPE_ENUMERATORS(X) X(Invalid) X(F32) X(F64) X(I32) X(I64) X(U8) X(BF16)
#define SINKRT_PROGRAM_KIND_ENUMERATORS(X) X(Init) X(TrainStep) X(EvalStep) X(PredictStep)

#define SINKRT_SAME_ENUMERATOR(Api, Fb, name)                                        \
  static_assert(static_cast<uint64_t>(Api::name) == static_cast<uint64_t>(Fb::name), \
                #Api "::" #name " differs from the schema's " #Fb "::" #name);
#define SINKRT_SAME_DTYPE(name) SINKRT_SAME_ENUMERATOR(DType, fb::DType, name)
#define SINKRT_SAME_PROGRAM_KIND(name) SINKRT_SAME_ENUMERATOR(ProgramKind, fb::ProgramKind, name)
SINKRT_DTYPE_ENUMERATORS(SINKRT_SAME_DTYPE)
SINKRT_PROGRAM_KIND_ENUMERATORS(SINKRT_SAME_PROGRAM_KIND)
#undef SINKRT_SAME_DTYPE
#undef SINKRT_SAME_PROGRAM_KIND

/// API enum -> schema enum, where a FlatBuffer is built.
/// @{
constexpr fb::DType ToFb(DType t) { return static_cast<fb::DType>(t); }
constexpr fb::ProgramKind ToFb(ProgramKind k) { return static_cast<fb::ProgramKind>(k); }
/// @}
/// Schema enum -> API enum, where a FlatBuffer is read. A value from outside
/// the enum stays as it is (DTypeName says "invalid", DTypeSize 0).
/// @{
constexpr DType FromFb(fb::DType t) { return static_cast<DType>(t); }
constexpr ProgramKind FromFb(fb::ProgramKind k) { return static_cast<ProgramKind>(k); }
/// @}

/// DTypeSize and DTypeName for code that reads a stream's dtype fields: the
/// conversion at that boundary, in this one place.
/// @{
inline size_t DTypeSize(fb::DType t) { return DTypeSize(FromFb(t)); }
inline const char* DTypeName(fb::DType t) { return DTypeName(FromFb(t)); }
/// @}

}  // namespace sinkrt
