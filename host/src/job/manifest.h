// manifest.json of a compiled job: what sinkc prints and writes beside the
// streams, and what ReadCompiledJob checks them against.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sinkrt/host/compiled_job.h"

namespace sinkrt::host::job {

inline constexpr const char* kManifestFormat = "sinkrt-job 1";

// One rank's file as the manifest lists it.
struct RankEntry {
  uint32_t rank = 0;
  std::string file;
  uint64_t bytes = 0;
  uint64_t arena_bytes = 0;   // the stream's arena, as the summary tools print it
  uint64_t stream_hash = 0;   // the stream header's graph_hash
  uint64_t content_hash = 0;  // FNV-1a 64 of the whole file
};

struct Manifest {
  std::string network_name;
  uint64_t network_hash = 0;
  uint64_t network_structure_hash = 0;  // 0: a manifest from before it was written
  std::string label_column;
  CompileOptions options;
  std::vector<RankEntry> ranks;
};

std::string RankFileName(uint32_t rank);  // "rank_K.tstream"
uint64_t ContentHash(std::span<const uint8_t> bytes);

nlohmann::ordered_json ManifestToJson(const CompiledJob& job);
// Errors name `path` and the key.
Result<Manifest> ParseManifest(const std::string& text, const std::string& path);

}  // namespace sinkrt::host::job
