/// \file
/// Whole-file reads and writes with errors that name the path.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "sinkrt/runtime/status.h"

namespace sinkrt {

/// The whole file's bytes; NotFound when it cannot be opened (the error names the path).
Result<std::vector<uint8_t>> ReadFileBytes(const std::string& path);
/// Writes to path.tmp and renames, so a reader never sees a half-written file.
Status WriteFileBytes(const std::string& path, std::span<const uint8_t> bytes);

}  // namespace sinkrt
