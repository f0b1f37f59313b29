// Pieces shared by the graph file reader, writer and JSON converter.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sinkrt/fb/graph_generated.h"
#include "sinkrt/host/file_formats.h"
#include "sinkrt/host/graph.h"
#include "sinkrt/host/graph_file.h"
#include "sinkrt/runtime/status.h"

namespace sinkrt::host::graph_file {

// A reader refuses another major version; a minor version adds only fields
// an older reader may ignore (file_formats.h holds the version).
inline constexpr uint16_t kFormatMajor = kGraphFileFormat.major;
inline constexpr uint16_t kFormatMinor = kGraphFileFormat.minor;

// The verified fb::Graph inside `bytes` (which must outlive it), after the
// identifier and FlatBuffers verifier checks.
Result<const fb::Graph*> VerifyBinary(std::span<const uint8_t> bytes, const std::string& source);

// The binary graph file that JSON `text` spells; errors carry the parser's
// line and column.
Result<std::vector<uint8_t>> JsonToBinary(std::string_view text, const std::string& source);

// Rebuilds the Graph from a verified fb::Graph through the builder.
Result<GraphFile> ReadGraph(const fb::Graph& def, const std::string& source, const GraphLoadOptions& options);

// Forward ops: what a graph file may hold (autodiff and the optimizer pass
// add the rest when it is compiled).
bool IsForwardOp(OpCode op);
// How many inputs forward op `op` takes, or kAnyArity (one or more: Concat).
inline constexpr size_t kAnyArity = 0;
size_t ForwardArity(OpCode op);

// Appends forward op `op` to `g` through its builder method, so a file gets
// every check a graph built in C++ gets; the builder canonicalises `attrs`
// (normalised axes) in the op it adds. `target` is a Reshape's output shape.
// The error is the builder's, without the generated op name.
Status AddForwardOp(Graph& g, OpCode op, const std::vector<TensorId>& inputs, const OpAttrs& attrs,
                    const Shape& target);

}  // namespace sinkrt::host::graph_file
