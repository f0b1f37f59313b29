// Bytes -> GraphFile: which spelling the bytes are, and the files around it.
#include <algorithm>
#include <cctype>

#include "host/src/graph/file/graph_file_internal.h"
#include "runtime/src/file_io.h"

namespace sinkrt::host {
namespace graph_file {
namespace {

bool HasIdentifier(std::span<const uint8_t> bytes) {
  return bytes.size() >= 8 && flatbuffers::BufferHasIdentifier(bytes.data(), fb::GraphIdentifier());
}

// JSON starts with an object (or a comment: the FlatBuffers parser takes them).
bool LooksLikeJson(std::span<const uint8_t> bytes) {
  auto it = std::find_if(bytes.begin(), bytes.end(), [](uint8_t c) { return !std::isspace(c); });
  return it != bytes.end() && (*it == '{' || *it == '/');
}

// "; this one says 'SKTS'" when bytes 4..8 look like another file's
// identifier (a task stream, a checkpoint), else nothing.
std::string OtherIdentifier(std::span<const uint8_t> bytes) {
  if (bytes.size() < 8) return "";
  std::string id(bytes.begin() + 4, bytes.begin() + 8);
  for (char c : id)
    if (!std::isalnum(static_cast<unsigned char>(c))) return "";
  return "; this one says '" + id + "'";
}

}  // namespace

Result<const fb::Graph*> VerifyBinary(std::span<const uint8_t> bytes, const std::string& source) {
  if (!HasIdentifier(bytes)) return InvalidArgument(source + ": not a binary graph file (identifier 'SKGR')");
  flatbuffers::Verifier verifier(bytes.data(), bytes.size());
  if (!fb::VerifyGraphBuffer(verifier))
    return InvalidArgument(source + ": corrupt binary graph file: the FlatBuffers verifier rejects its " +
                           std::to_string(bytes.size()) + " bytes (truncated or damaged)");
  return fb::GetGraph(bytes.data());
}

}  // namespace graph_file

Result<GraphFile> ParseGraph(std::span<const uint8_t> bytes, const std::string& source,
                             const GraphLoadOptions& options) {
  if (bytes.empty()) return InvalidArgument(source + ": empty file (expected a binary graph file or JSON)");
  if (options.batch < 0)
    return InvalidArgument(source + ": GraphLoadOptions.batch is " + std::to_string(options.batch) +
                           " (> 0 sets the batch, 0 keeps the file's)");
  std::vector<uint8_t> from_json;
  if (!graph_file::HasIdentifier(bytes)) {
    if (!graph_file::LooksLikeJson(bytes))
      return InvalidArgument(source + ": neither a binary graph file (identifier 'SKGR' at byte 4" +
                             graph_file::OtherIdentifier(bytes) + ") nor JSON (an object, '{')");
    SINKRT_ASSIGN_OR_RETURN(
        from_json, graph_file::JsonToBinary({reinterpret_cast<const char*>(bytes.data()), bytes.size()}, source));
    bytes = from_json;
  }
  SINKRT_ASSIGN_OR_RETURN(const fb::Graph* def, graph_file::VerifyBinary(bytes, source));
  return graph_file::ReadGraph(*def, source, options);
}

Status SaveGraph(const std::string& path, const Graph& graph, const std::optional<OptimizerSpec>& optimizer) {
  SINKRT_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, SerializeGraph(graph, optimizer));
  const bool json = path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0;
  if (json) {
    SINKRT_ASSIGN_OR_RETURN(std::string text, GraphToJson(bytes, path));
    bytes.assign(text.begin(), text.end());
  }
  // WriteFileBytes writes path.tmp beside it and renames.
  return WriteFileBytes(path, bytes);
}

Result<GraphFile> LoadGraph(const std::string& path, const GraphLoadOptions& options) {
  SINKRT_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes,
                          ReadFileBytes(path, {kFlatBufferFileLimit.max_bytes, "a graph file"}));
  return ParseGraph(bytes, path, options);
}

}  // namespace sinkrt::host
