// Fusion: one program's ops become kernels, some of which absorb the ops
// after them.
//
// With `fuse`, MatMul → BiasAdd [→ Relu] and Conv2D → BiasAdd [→ Relu]
// become one kernel (docs/reference/ops.md "Fusion") when, in the program being
// lowered, each dropped intermediate has exactly one reader (the next op of
// the chain) and is not a loss, graph output or report. The chain need not
// be adjacent in op order, so the bias must also be ready when the first op
// runs (a leaf, or produced earlier) and not be updated in place between.
// A fused-away intermediate is named by no kernel, so it gets no buffer.
#pragma once

#include <cstddef>
#include <vector>

#include "host/src/compiler/program_plan.h"
#include "sinkrt/host/graph.h"

namespace sinkrt::host::compiler {

// The kernels of the program that runs `ops` (graph op indices, in order),
// in that order; without `fuse`, one kernel per op.
std::vector<KernelPlan> PlanKernels(const Graph& g, const GraphFacts& f, const std::vector<size_t>& ops, bool fuse);

}  // namespace sinkrt::host::compiler
