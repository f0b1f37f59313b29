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

using DType = fb::DType;

/// Bytes per element; 0 for Invalid or an unknown value.
size_t DTypeSize(DType t);
const char* DTypeName(DType t);

using Shape = std::vector<int64_t>;

/// Product of dims; 1 for a scalar. Returns -1 on a negative dim or overflow
/// past 2^62, so callers checking untrusted shapes cannot be fooled.
int64_t NumElements(std::span<const int64_t> shape);
std::string ShapeToString(std::span<const int64_t> shape);

}  // namespace sinkrt
