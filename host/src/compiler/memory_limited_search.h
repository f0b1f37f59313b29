// auto_parallel under a per-rank memory limit (device_memory_capacity,
// --device-memory): the limit is a promise about the compiled arena, not
// about the search's estimate. The cost model prices each op's tensors;
// the compiled arena also holds what the passes after the search add
// (workspace, alignment, the optimizer's and the comm stream's buffers,
// liveness the model does not see), so a plan estimated at the limit
// compiled 3 % above it. SearchAndCompileWithinLimit searches, compiles,
// and while the arena is over the limit searches again with the limit
// lowered by the excess (halfway back up when that is below every plan),
// at most kMaxMemoryResearches times; when no search finds a plan that
// compiles within it, the compile is refused naming the limit and the
// smallest arena compiled.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>

#include "sinkrt/host/auto_parallel.h"
#include "sinkrt/host/compiler.h"
#include "sinkrt/host/graph.h"
#include "sinkrt/runtime/status.h"

namespace sinkrt::host::compiler {

// Searches after the first when the arena is over the limit.
inline constexpr int kMaxMemoryResearches = 6;

inline std::string BytesText(uint64_t bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f MiB (%llu bytes)", static_cast<double>(bytes) / 1048576.0,
                static_cast<unsigned long long>(bytes));
  return buf;
}

// `compile(planned)` compiles the searched graph: Result<Out>;
// `arena(out)` is its largest arena over the ranks it compiled.
template <typename Out, typename CompileFn, typename ArenaFn>
Result<std::pair<Out, AutoParallelPlan>> SearchAndCompileWithinLimit(const Graph& forward,
                                                                     const AutoParallelOptions& options,
                                                                     CompileFn&& compile, ArenaFn&& arena) {
  const std::optional<uint64_t> limit = options.device_memory;
  AutoParallelOptions search = options;
  uint64_t smallest = UINT64_MAX;
  // Search limits known to give a plan that compiles over the limit (hi)
  // and to be below every plan (lo): the next one lies between.
  uint64_t lo = 0, hi = limit.value_or(0);
  for (int attempt = 0; attempt <= kMaxMemoryResearches; ++attempt) {
    Graph planned = forward;
    Result<AutoParallelPlan> plan = PlanAutoParallel(planned, search);
    if (!plan.ok()) {
      if (attempt == 0) return plan.status();
      lo = *search.device_memory;  // lowered past every plan: go back up halfway
      search.device_memory = lo + (hi - lo) / 2;
      continue;
    }
    Result<Out> out = compile(planned);
    if (!out.ok()) return out.status();
    const uint64_t need = arena(*out);
    smallest = std::min(smallest, need);
    plan->compiled_arena_bytes = need;
    plan->memory_searches = attempt + 1;
    if (!limit || need <= *limit) {
      plan->memory_limit_bytes = limit;
      return std::pair<Out, AutoParallelPlan>(std::move(out).value(), std::move(plan).value());
    }
    // Lower the search's limit by what the compile added over it, at least
    // 1/64 of the limit: a few bytes over would find the same plan again.
    hi = *search.device_memory;
    const uint64_t excess = std::max(need - *limit, *limit / 64);
    search.device_memory = excess < hi && hi - excess > lo ? hi - excess : lo + (hi - lo) / 2;
    if (*search.device_memory <= lo || *search.device_memory >= hi) break;
  }
  return ResourceExhausted("the device memory limit of " + BytesText(*limit) +
                           " per rank (device_memory_capacity, --device-memory) cannot be met: the smallest arena "
                           "any searched plan compiled to needs " +
                           BytesText(smallest) +
                           " (the search's estimate leaves out workspace, alignment and buffers the passes after "
                           "it add); raise the limit to at least that, or use more devices");
}

}  // namespace sinkrt::host::compiler
