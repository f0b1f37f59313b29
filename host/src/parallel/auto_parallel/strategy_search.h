// AUTO_PARALLEL strategy search (issue 17) over abstract cost tables: each
// op offers candidate strategies with a time and a memory, each tensor
// between two ops a redistribution-time matrix over their candidates. The
// search knows nothing of layouts or devices; the cost model fills the
// tables, so the search is tested without one (docs/design/auto_parallel.md,
// "Search").
//
// Objective: minimise Σ node times + Σ edge times, subject to
// Σ node memories ≤ the per-rank limit. The sum of the chosen candidates'
// memories is the memory measure (MindSpore's, operator_costmodel.cc): the
// cost model puts into a candidate's memory whatever that op keeps alive
// for the step, so a sum over ops bounds the peak from above.
//
// Ties go toward data parallel (MindSpore's BreakingTiesForPreferringDataParallel):
// every unit of a chosen candidate's `data_parallel` key subtracts
// DataParallelBonus(problem) seconds from the objective. The bonus is
// kTieRelativeEpsilon × the problem's cost scale / (1 + the largest possible
// Σ key), so a plan with more data-parallel choices beats a faster plan only
// when the two times are within kTieRelativeEpsilon of the cost scale; the
// objective stays a sum over nodes and edges, so the search is exact for it
// and deterministic.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sinkrt/runtime/status.h"

namespace sinkrt::host::parallel {

// Two plans whose times differ by less than this fraction of the cost scale
// (Σ over ops of the slowest candidate + Σ over edges of the dearest finite
// entry) count as equal, and the more data-parallel one wins.
inline constexpr double kTieRelativeEpsilon = 1e-6;

// When the graph is not series-parallel, an op with three or more
// neighbours is eliminated into a table over its neighbours; a table past
// this many entries is refused rather than built.
inline constexpr uint64_t kMaxEliminationCells = uint64_t{1} << 22;

struct StrategyCandidate {
  std::string name;            // for messages and --explain
  double time_s = 0;           // the op's own time under this strategy
  uint64_t memory_bytes = 0;   // per rank
  uint32_t data_parallel = 0;  // tie-break preference: higher is more data parallel
};

struct SearchNode {
  std::string op;  // named in errors
  std::vector<StrategyCandidate> candidates;
  // A user-sharded op: this candidate, always (SEMI_AUTO inside AUTO, and
  // the seeds of sharding_propagation).
  std::optional<size_t> fixed;
};

// One tensor flowing producer → consumer. cost[i * consumer_candidates + j]:
// the redistribution time from the producer's output layout under its
// candidate i to the layout the consumer's candidate j reads. +infinity
// forbids the pair.
struct SearchEdge {
  size_t producer = 0;
  size_t consumer = 0;
  std::vector<double> cost;
};

struct SearchProblem {
  std::vector<SearchNode> nodes;
  std::vector<SearchEdge> edges;
};

// MindSpore's search_mode names. recursive_programming is refused by name.
enum class SearchMode { kDynamicProgramming, kShardingPropagation };
Result<SearchMode> ParseSearchMode(std::string_view name);
const char* SearchModeName(SearchMode mode);

struct SearchOptions {
  SearchMode mode = SearchMode::kDynamicProgramming;
  std::optional<uint64_t> memory_limit_bytes;  // per rank; none: unlimited
  bool prune = true;                           // ParetoCandidates before dynamic_programming
  // Under a memory limit each table entry keeps the Pareto front of (time,
  // memory) over the choices folded into it; a front past this many points
  // is thinned to evenly spaced ones (both ends kept) and the result says
  // it is not exact. The work per entry grows with its square.
  size_t max_pareto_labels = 64;
};

struct PlanCost {
  double time_s = 0;           // Σ node times + Σ edge times
  uint64_t memory_bytes = 0;   // Σ node memories
  uint64_t data_parallel = 0;  // Σ chosen data_parallel keys
};

struct SearchResult {
  std::vector<size_t> choice;  // per node, an index into its candidates
  PlanCost cost;
  size_t pruned_candidates = 0;         // dropped by ParetoCandidates
  size_t generalized_eliminations = 0;  // ops eliminated with 3+ neighbours
  // False only when a memory limit made a Pareto front exceed
  // max_pareto_labels: the plan fits the limit but may not be the fastest.
  bool exact = true;
};

// Every op has a candidate, fixed indices and edge endpoints are in range,
// matrices have the right size, costs are not NaN or negative, node times
// are finite.
Status ValidateProblem(const SearchProblem& problem);

PlanCost EvaluatePlan(const SearchProblem& problem, std::span<const size_t> choice);
// Seconds subtracted per unit of data_parallel key (see the file comment).
double DataParallelBonus(const SearchProblem& problem);
// The objective the search minimises: time − bonus × Σ keys.
double PlanScore(const SearchProblem& problem, std::span<const size_t> choice);

// Per node, the candidate indices kept (ascending). Candidate j is dropped
// when some i is at least as good in every term any plan can see: time,
// memory, data_parallel key, and every entry of every incident edge's row
// (or column) for j. Swapping j for i in any plan then costs nothing, so
// an optimum survives; equal candidates keep the lowest index. A node
// with a fixed candidate keeps only it.
std::vector<std::vector<size_t>> ParetoCandidates(const SearchProblem& problem);

// Runs options.mode. Errors: a memory limit below the smallest footprint
// any plan has (named); an op without candidates (named); no plan of finite
// cost; a non-series-parallel graph whose elimination table would exceed
// kMaxEliminationCells.
Result<SearchResult> SearchStrategies(const SearchProblem& problem, const SearchOptions& options);

}  // namespace sinkrt::host::parallel
