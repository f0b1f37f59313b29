// libFuzzer target for graph files (host/graph_file.h).
//
// The input is a graph file as sinkc reads it: binary (SKGR) or JSON text.
// ParseGraph is a trust boundary of the offline compiler: a graph it
// accepts goes straight into autodiff and the compiler. So for every
// accepted file this target checks the loader's promises: the graph is
// valid (no builder error, a scalar f32 loss, every op's tensors inside the
// graph), it serialises again, and that file parses to the same graph (equal
// GraphHash and equal bytes). A broken promise aborts with a message.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>

#include "fuzz_support.h"
#include "sinkrt/host/compiler.h"
#include "sinkrt/host/graph_file.h"

using namespace sinkrt;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = host::ParseGraph(std::span(data, size), "fuzz");
  if (!file.ok()) {
    FUZZ_CHECK(!file.status().message().empty());
    return 0;
  }
  const host::Graph& g = file->graph;
  FUZZ_CHECK(g.status().ok());
  FUZZ_CHECK(g.valid(g.loss()));
  FUZZ_CHECK(g.tensor(g.loss()).shape.empty());
  for (const host::OpNode& op : g.ops()) {
    for (host::TensorId t : op.inputs) FUZZ_CHECK(g.valid(t));
    for (host::TensorId t : op.outputs) FUZZ_CHECK(g.valid(t));
  }
  for (host::TensorId t : g.outputs()) FUZZ_CHECK(g.valid(t));

  auto bytes = host::SerializeGraph(g, file->optimizer);
  FUZZ_CHECK(bytes.ok());
  auto again = host::ParseGraph(*bytes, "fuzz-again");
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(host::GraphHash(again->graph) == host::GraphHash(g));
  auto bytes_again = host::SerializeGraph(again->graph, again->optimizer);
  FUZZ_CHECK(bytes_again.ok() && *bytes_again == *bytes);
  return 0;
}
