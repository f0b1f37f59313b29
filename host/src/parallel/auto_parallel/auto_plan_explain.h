// What AUTO_PARALLEL tells a person about its choice (sinkc --explain):
// per op the chosen strategy's costs and the alternative that would have
// cost least to swap in, every other op kept as chosen.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "host/src/parallel/auto_parallel/search_graph.h"
#include "host/src/parallel/auto_parallel/strategy_search.h"
#include "sinkrt/host/auto_parallel.h"
#include "sinkrt/host/graph.h"

namespace sinkrt::host::parallel {

// Per op of `g` (graph order), from the search graph and its result.
// An alternative whose swap would break the memory limit is rejected for
// that; one that no neighbour's layout can be brought to is not offered.
std::vector<OpPlanChoice> ExplainChoices(const Graph& g, const SearchGraph& sg, const SearchResult& result,
                                         std::optional<uint64_t> memory_limit);

}  // namespace sinkrt::host::parallel
