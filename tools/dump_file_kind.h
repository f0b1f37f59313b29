// What a file that is not a task stream is, so that sinkdump can say
// "a graph file: compile it with sinkc" instead of a FlatBuffers detail.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace sinkrt::tools {

// A message for a directory at `path`, naming the rank_*.tstream files it
// holds; empty when `path` is not a directory.
std::optional<std::string> DescribeDirectory(const std::string& path);

// A message naming what `bytes` (read from `path`) are when they are a file
// of sinkrt's own other than a task stream (graph file, JSON or FlatBuffers;
// sinkc manifest; checkpoint); empty when they are none of these.
std::optional<std::string> DescribeOtherFile(const std::string& path, std::span<const uint8_t> bytes);

}  // namespace sinkrt::tools
