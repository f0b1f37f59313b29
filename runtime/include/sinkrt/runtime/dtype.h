/// \file
/// Element types and shapes as both sides of the task stream see them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "sinkrt/fb/common_generated.h"

namespace sinkrt {

/// An element type (the schemas' enum).
using DType = fb::DType;

/// Bytes per element; 0 for Invalid or an unknown value.
size_t DTypeSize(DType t);
/// The type's short name for messages ("f32").
const char* DTypeName(DType t);

/// A tensor's dims, outermost first; empty for a scalar.
using Shape = std::vector<int64_t>;

/// Product of dims; 1 for a scalar. Returns -1 on a negative dim or overflow
/// past 2^62, so callers checking untrusted shapes cannot be fooled.
int64_t NumElements(std::span<const int64_t> shape);
/// "[2,3]": a shape for messages.
std::string ShapeToString(std::span<const int64_t> shape);

}  // namespace sinkrt
