/// \file
/// AUTO_PARALLEL (docs/design/auto_parallel.md): the host searches a shard strategy
/// for every op of a single-device graph against a calibrated cost model and
/// sets it on the graph, which then compiles as SEMI_AUTO_PARALLEL.
///
/// ~~~
///   AutoParallelOptions o{.device_num = 4};
///   Result<AutoParallelPlan> plan = PlanAutoParallel(graph, o);  // graph has its loss
///   std::cout << ExplainPlan(*plan);                               // sinkc --explain
///   CompileOptions co{...}; co.parallel_mode = ParallelMode::SemiAutoParallel;
/// ~~~
///
/// Compile with ParallelMode::AutoParallel does the same on a copy of the
/// graph; Model and the tools plan once and compile every rank from it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sinkrt/host/graph.h"
#include "sinkrt/host/optimizer.h"
#include "sinkrt/runtime/status.h"

namespace sinkrt::host {

/// What PlanAutoParallel searches under: the devices, the search, memory and the dataset context.
struct AutoParallelOptions {
  int64_t device_num = 1;  ///< ranks to split the job over
  /// MindSpore's auto_parallel_search_mode: "dynamic_programming" (exact for
  /// the cost model) or "sharding_propagation" (ops the user sharded fix
  /// their strategy, the rest follow at least redistribution cost).
  std::string search_mode = "dynamic_programming";
  /// Per-rank memory limit in bytes (MindSpore's device_memory_capacity);
  /// none: unlimited.
  std::optional<uint64_t> device_memory;
  /// Calibration file; empty: $SINKRT_CALIBRATION, else the built-in default.
  std::string calibration;
  /// MindSpore's algo parameter: true makes every MatMul, BatchMatMul and
  /// Conv2D split over all device_num ranks; false (sinkrt's default) also
  /// offers them splits over fewer ranks, repeated on the rest, which wins
  /// where a small GEMM would otherwise be redistributed around (the zoo
  /// MLP's 256x10 head, replicated after a Megatron pair, measured 1.24x
  /// faster than forcing it apart; bench/history/parallel.md). Other ops may
  /// always repeat (a bias add between two model-parallel layers).
  bool fully_use_devices = false;
  std::string transport = "shm";  ///< which of the calibration's collective fits: "shm" or "tcp"
  OptimizerSpec optimizer;        ///< its state per parameter counts in memory
  /// The dataset context of the run (ParallelContext): with neither, every
  /// dataset input is split as the loss splits its labels, which the search
  /// takes into account; with either, the inputs' layouts are fixed.
  /// @{
  bool full_batch = false;
  std::vector<std::vector<int64_t>> dataset_strategy;
  /// @}
};

/// What the search chose for one op, and what it turned down (sinkc --explain).
struct OpPlanChoice {
  std::string op;                              ///< the op's name
  std::vector<std::vector<int64_t>> strategy;  ///< chosen; empty for an op without a rule (Reshape)
  bool fixed = false;                          ///< the user's strategy, kept
  double compute_s = 0;                        ///< forward + backward compute per rank
  double communication_s = 0;                  ///< its forward/backward AllReduces + exposed gradient sync
  double redistribution_s = 0;                 ///< of the tensors it reads, from their producers' layouts
  uint64_t memory_bytes = 0;                   ///< parameters, gradients, optimizer state, kept activations
  /// The alternative whose swap in (every other op as chosen) costs least;
  /// empty strategy when the op had no other candidate.
  std::vector<std::vector<int64_t>> rejected;
  double rejected_extra_s = 0;  ///< how much slower the step would be with it
  std::string reason;           ///< "communication +0.41 ms, compute -0.02 ms" or "memory over the limit"
};

/// What PlanAutoParallel chose, with its predictions and the search's size.
struct AutoParallelPlan {
  std::string search_mode;                     ///< the search that ran
  std::string calibration;                     ///< the file used (Calibration::source)
  std::string transport;                       ///< the collective fits it priced with: "shm" or "tcp"
  int64_t device_num = 1;                      ///< ranks the plan splits over
  double step_s = 0;                           ///< predicted training step time per rank
  uint64_t memory_bytes = 0;                   ///< predicted per rank (the search's measure)
  std::optional<uint64_t> memory_limit_bytes;  ///< the per-rank limit the compiled arena keeps to; none: unlimited
  /// The largest per-rank arena compiled from the plan (0 when only searched,
  /// not compiled): within memory_limit_bytes, or the compile was refused.
  uint64_t compiled_arena_bytes = 0;
  /// Searches run: more than 1 when an arena compiled over the limit and the
  /// search ran again under a limit lowered by the excess.
  int memory_searches = 1;
  bool exact = true;              ///< false: a Pareto front was thinned under the memory limit
  size_t candidates = 0;          ///< strategies enumerated over all ops
  size_t pruned = 0;              ///< dropped by the Pareto filter
  double search_s = 0;            ///< wall time of the search
  std::vector<OpPlanChoice> ops;  ///< in graph order
};

/// Searches a strategy for every op of `graph` (which must have its loss)
/// on options.device_num ranks and sets it (Graph::Shard); ops that already
/// have one keep it. Errors name what is wrong: an unknown search mode or
/// transport, an unreadable calibration, a memory limit below the smallest
/// footprint any plan has (which it names). On error `graph` is unchanged.
Result<AutoParallelPlan> PlanAutoParallel(Graph& graph, const AutoParallelOptions& options);

/// The plan as sinkc --explain prints it: one line per op with its chosen
/// strategy, compute, communication, redistribution and memory, and the
/// best rejected alternative with why; then the predicted step time and
/// memory, and the calibration file used.
std::string ExplainPlan(const AutoParallelPlan& plan);

}  // namespace sinkrt::host
