// Sunk eval (docs/design/compiler.md): eval_step adds its metrics into an f64
// accumulator in the arena, so that a RunSink(EvalStep, N) over a whole
// eval pass answers with the pass's sums, one control round trip instead of
// one per batch. MindSpore launches eval one step at a time; this goes
// beyond it.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "host/src/compiler/lowering.h"
#include "host/src/compiler/program_plan.h"
#include "sinkrt/host/graph.h"

namespace sinkrt::host::compiler {

// The buffer the sums go to is named this (or with "_" appended until
// unique); the host finds it as eval_step's last report.
inline constexpr char kMetricSumsName[] = "eval/metric_sums";

// Appends to eval_step `prog` a MetricSum task that, every step, adds
// f64(loss) * rows and f64(correct count) (when `accuracy` is one of the
// reports) into a new persistent f64 [1 or 2] Output buffer; lists that
// buffer as the program's accumulator (zeroed when a sink starts) and as its
// last report. These are the host's per-batch sums of eval.cc, in its
// order, so the figures do not change. `rows` is the batch the host scores
// a step as: the eval queue's first column's dim 0. Does nothing when the
// program has no queue or its first report (the loss) is not an f32 scalar.
void AddMetricSums(const Graph& g, const ProgramPlan& plan, TensorId accuracy,
                   const std::function<uint32_t(TensorId)>& buffer_of, std::vector<BufferDef>* buffers,
                   ProgramDef* prog);

}  // namespace sinkrt::host::compiler
