// Strategy files: MindSpore's strategy_ckpt_save_file and
// strategy_ckpt_load_file, as JSON (the format is in docs/reference/file_formats.md,
// "Strategy files"). One records the shard strategy of every op that has
// one and the layout of every parameter, for the graph it was written for;
// loading it into another graph is refused. The file is bound to the graph
// without its strategies (GraphHashWithoutStrategies), so it applies to the
// graph whether or not strategies were set on it in C++ already.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "host/src/parallel/ops_info/op_sharding.h"
#include "host/src/parallel/tensor_layout/layout.h"
#include "sinkrt/host/graph.h"
#include "sinkrt/runtime/status.h"

namespace sinkrt::host::parallel {

inline constexpr const char* kStrategyFileFormat = "sinkrt-strategy";
inline constexpr int64_t kStrategyFileVersion = 1;

struct StrategyFileContents {
  std::string source;  // the path it was read from: errors name it
  std::string graph_name;
  uint64_t graph_hash = 0;  // GraphHashWithoutStrategies of that graph
  // Its inputs' shapes, so a hash mismatch can name the batch; empty in
  // files written before they were recorded.
  std::vector<std::pair<std::string, Shape>> inputs;
  int64_t device_num = 0;  // ranks of the stage
  int64_t stage = 0;       // pipeline stage (0 until pipelines exist)
  // In file order (the graph's op order when sinkrt wrote it).
  std::vector<std::pair<std::string, Strategy>> ops;
  // Parameter name -> its layout (shape: the whole parameter's).
  std::vector<std::pair<std::string, TensorLayout>> parameters;
};

// Writes the strategy of every op of `graph` that has one, and `layouts`
// (parameter name -> layout; each a Param of `graph` of that shape, on a
// device matrix of `device_num` ranks, not partial). Written to a
// temporary file and renamed.
Status WriteStrategyFile(const std::string& path, const Graph& graph, int64_t device_num,
                         const std::map<std::string, TensorLayout>& layouts);

// Reads and checks what needs no graph: JSON, format, version, the types of
// every field, and that each layout is well formed on device_num ranks.
// Errors name the file and the field.
Result<StrategyFileContents> ReadStrategyFile(const std::string& path);

// Sets each listed op's strategy on `graph` (others keep theirs). Refused,
// with `graph` left unchanged, when the file names an op or a parameter the
// graph does not have (the first one, in file order), when the graph's hash
// or name differs from the file's (naming the input whose shape differs:
// another batch), when a strategy does not fit its op's inputs (MindSpore's
// message), or when a parameter's layout is not the one the op strategies
// give it (naming both). Values from the file are cut to 80 characters in
// messages. Checks that need the job's device count are the compiler's.
Status ApplyStrategies(const StrategyFileContents& contents, Graph& graph);

}  // namespace sinkrt::host::parallel
