#include "dump_file_kind.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <vector>

#include <flatbuffers/flatbuffers.h>
#include <nlohmann/json.hpp>

#include "sinkrt/fb/checkpoint_generated.h"
#include "sinkrt/fb/graph_generated.h"

namespace sinkrt::tools {

namespace fs = std::filesystem;

std::optional<std::string> DescribeDirectory(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return std::nullopt;
  std::vector<std::string> streams;
  for (const fs::directory_entry& e : fs::directory_iterator(path, ec)) {
    const std::string name = e.path().filename().string();
    if (name.starts_with("rank_") && name.ends_with(".tstream")) streams.push_back(name);
  }
  std::sort(streams.begin(), streams.end());
  std::string message = path + " is a directory, not a task stream";
  if (streams.empty()) return message;
  message += ": dump one of the streams in it:";
  for (const std::string& s : streams) message += ' ' + (fs::path(path) / s).string();
  return message;
}

std::optional<std::string> DescribeOtherFile(const std::string& path, std::span<const uint8_t> bytes) {
  // A task stream is size-prefixed; these files are plain FlatBuffers, whose
  // identifier sits at bytes 4..8 (schemas/*.fbs file_identifier).
  if (bytes.size() >= 8) {
    const char* data = reinterpret_cast<const char*>(bytes.data());
    if (flatbuffers::BufferHasIdentifier(data, fb::GraphIdentifier()))
      return path + " is a graph file (FlatBuffers, '" + fb::GraphIdentifier() +
             "'), not a task stream: compile it with sinkc";
    if (fb::CheckpointBufferHasIdentifier(data))
      return path + " is a sinkrt checkpoint ('" + fb::CheckpointIdentifier() +
             "'), not a task stream: it holds parameter values, not programs";
  }
  const auto first = std::find_if(bytes.begin(), bytes.end(), [](uint8_t c) { return !std::isspace(c); });
  if (first == bytes.end() || *first != '{') return std::nullopt;
  const nlohmann::json j = nlohmann::json::parse(bytes.begin(), bytes.end(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;
  if (j.contains("ranks") && j.contains("network")) {
    const std::string beside = (fs::path(path).parent_path() / "rank_0.tstream").string();
    return path + " is a sinkc manifest, not a task stream: dump " + beside + " beside it";
  }
  if (j.contains("tensors") || j.contains("format_major"))
    return path + " is a graph file (JSON), not a task stream: compile it with sinkc";
  return path + " is a JSON file, not a task stream";
}

}  // namespace sinkrt::tools
