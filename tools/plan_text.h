// How sinkc and sinkrun train print a planned job: the auto_parallel search
// line, the strategy in force and the parallel context.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "sinkrt/host/auto_parallel.h"
#include "sinkrt/host/parallel_context.h"

namespace sinkrt::tools {

inline std::string MibText(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(bytes) / 1048576.0);
  return buf;
}

// The line every auto_parallel run prints: the search, its prediction and
// the calibration file it used.
inline std::string AutoParallelText(const host::AutoParallelPlan& plan) {
  char step[64], search[64];
  std::snprintf(step, sizeof step, "%.3f ms", plan.step_s * 1e3);
  std::snprintf(search, sizeof search, "%.1f ms", plan.search_s * 1e3);
  std::string s = "auto_parallel: " + plan.search_mode + " search on " + std::to_string(plan.device_num) +
                  (plan.device_num == 1 ? " device" : " devices") + " in " + search + " (" +
                  std::to_string(plan.candidates) + " candidates, " + std::to_string(plan.ops.size()) +
                  " ops): predicted step " + step + ", memory " + MibText(plan.memory_bytes) + " per rank";
  if (plan.memory_limit_bytes) {
    // The limit binds the compiled arena, which the search's estimate
    // leaves parts of out: say what was compiled, and how many searches it took.
    s += " (limit " + MibText(*plan.memory_limit_bytes);
    if (plan.compiled_arena_bytes) s += "; compiled arena " + MibText(plan.compiled_arena_bytes);
    if (plan.memory_searches > 1) s += ", searched " + std::to_string(plan.memory_searches) + " times to fit it";
    s += ")";
  }
  if (!plan.exact) s += ", not exact (Pareto fronts thinned under the limit)";
  return s + "; calibration " + plan.calibration + " (" + plan.transport + ")";
}

// How a run header and a report name the strategy in force.
inline std::string StrategyText(const std::string& strategy) {
  return strategy.empty() ? "the graph's (MindSpore's default where none)" : strategy;
}

// How a run header shows the context in force, e.g. "data_parallel
// (gradients_mean false: AllReduce sum)"; stand_alone has no AllReduce.
inline std::string ParallelContextText(host::ParallelMode mode, bool gradients_mean) {
  std::string s = host::ParallelModeName(mode);
  if (mode == host::ParallelMode::DataParallel)
    s += gradients_mean ? " (gradients_mean true: AllReduce mean)" : " (gradients_mean false: AllReduce sum)";
  if (mode == host::ParallelMode::AutoParallel) s += " (searched strategies, compiled as semi_auto_parallel)";
  return s;
}

}  // namespace sinkrt::tools
