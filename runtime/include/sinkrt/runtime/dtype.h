/// \file
/// Element types and shapes as both sides of the task stream see them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace sinkrt {

/// An element type. The enumerators and their values are schemas/common.fbs's
/// DType's, so a stream stores the value as is (runtime/src/schema_enums.h
/// maps the two and checks they agree).
enum class DType : uint8_t {
  Invalid = 0,
  F32 = 1,
  F64 = 2,
  I32 = 3,
  I64 = 4,
  U8 = 5,
  BF16 = 6,
};

/// Bytes per element; 0 for Invalid or an unknown value.
size_t DTypeSize(DType t);
/// The type's short name for messages: the enumerator's name in lower case
/// ("f32", "bf16", "invalid"); "invalid" for an unknown value too.
const char* DTypeName(DType t);

/// A tensor's dims, outermost first; empty for a scalar.
using Shape = std::vector<int64_t>;

/// Product of dims; 1 for a scalar. Returns -1 on a negative dim or overflow
/// past 2^62, so callers checking untrusted shapes cannot be fooled.
int64_t NumElements(std::span<const int64_t> shape);
/// "[2,3]": a shape for messages.
std::string ShapeToString(std::span<const int64_t> shape);

}  // namespace sinkrt
