// One op copied into a graph under a name prefix: the step shared by the
// passes that repeat part of a graph per micro-batch (gradient
// accumulation, passes/accumulation.h; the pipeline's micro-batch cut,
// parallel/pipeline/pipeline_graph.h).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "sinkrt/host/graph.h"
#include "sinkrt/runtime/status.h"

namespace sinkrt::host::passes {

// Appends to `to` a copy of `op` (an op of `from`, which may be `to`
// itself) named prefix + op.name. Its inputs are read through `map` (from's
// tensor -> to's); an input not mapped yet is an Internal error naming the
// op and the tensor, after `where`. Each output is `output(t)` when that
// gives a tensor, else a new Intermediate tensor prefix + name; `map`
// records it.
Status CloneOp(const Graph& from, const OpNode& op, const std::string& prefix, Graph& to, std::vector<TensorId>& map,
               const std::string& where, const std::function<TensorId(TensorId)>& output = nullptr);

}  // namespace sinkrt::host::passes
