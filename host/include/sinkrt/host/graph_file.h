/// \file
/// Graph files: a forward graph (with its loss and optimizer) on disk, the
/// input of sinkc and of anything that compiles offline.
///
/// Two spellings of one schema (schemas/graph.fbs): the binary FlatBuffer
/// (identifier "SKGR", extension .sgraph) that SaveGraph writes, and JSON
/// against the same schema through FlatBuffers' schema-driven parser, for
/// graphs written by hand (examples/*.json). LoadGraph tells them apart by
/// the identifier and rebuilds the Graph through its own builder, so a file
/// gets every check a graph built in C++ gets (shapes, dtypes, attributes),
/// and each error names the file, the op and the field.
///
/// Intermediate tensors may leave out their shape and dtype in a file (they
/// are inferred); what is given must equal the inferred value. A Reshape's
/// output shape is its target (one dimension may be -1), the one
/// intermediate shape a file must give. Ops may come in any order: they are
/// sorted topologically, and a cycle is an error naming its ops. Tensors
/// keep their file indices as TensorIds.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "sinkrt/host/graph.h"
#include "sinkrt/host/optimizer.h"
#include "sinkrt/runtime/status.h"

namespace sinkrt::host {

/// What a graph file holds besides the graph: the optimizer is optional (a
/// file may leave it to the job).
struct GraphFile {
  Graph graph;                             ///< the graph, with its loss
  std::optional<OptimizerSpec> optimizer;  ///< the optimizer the file names, if any
};

/// The binary graph file of `graph` (a forward graph: no Grad or OptState
/// tensors) with a loss. Deterministic: equal graphs give equal bytes.
/// Fails on a graph whose status() is an error or that has no loss.
Result<std::vector<uint8_t>> SerializeGraph(const Graph& graph, const std::optional<OptimizerSpec>& optimizer = {});

/// What a job may change in a graph as it loads (sinkc --batch, --seed).
struct GraphLoadOptions {
  /// Above 0: the leading (batch) dimension of every Input becomes `batch`, and
  /// every other shape is inferred anew. 0: as written.
  int64_t batch = 0;
  /// Added to the seed of every random initialiser (Uniform, Normal,
  /// Xavier*, He*): 0 keeps the file's seeds.
  uint64_t seed_offset = 0;
};

/// Parses a binary graph file, or JSON text against schemas/graph.fbs when
/// the bytes do not carry the "SKGR" identifier. `source` names the bytes
/// in errors (a path). A graph file is a training graph: it must name its
/// loss.
Result<GraphFile> ParseGraph(std::span<const uint8_t> bytes, const std::string& source = "graph",
                             const GraphLoadOptions& options = {});

/// The JSON spelling of a binary graph file (flatc's text generator, schema
/// field names, defaults left out, number arrays on one line). Stable:
/// ParseGraph of it and GraphToJson again give the same text. FlatBuffers
/// 2.0 prints floats with six decimals, so a graph whose JSON would read
/// back differently (a learning rate of 1e-7) is refused: keep it binary.
Result<std::string> GraphToJson(std::span<const uint8_t> binary, const std::string& source = "graph");

/// Files. SaveGraph writes binary, or JSON when `path` ends in ".json"; it
/// writes a temporary file and renames it, so a crash never leaves half a
/// graph under `path`.
Status SaveGraph(const std::string& path, const Graph& graph, const std::optional<OptimizerSpec>& optimizer = {});
/// Reads and parses the file at `path` (ParseGraph), applying `options`.
Result<GraphFile> LoadGraph(const std::string& path, const GraphLoadOptions& options = {});

}  // namespace sinkrt::host
