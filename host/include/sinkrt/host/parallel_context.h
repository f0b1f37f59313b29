/// \file
/// ParallelContext: MindSpore's set_auto_parallel_context, as a value.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sinkrt/runtime/status.h"

namespace sinkrt::host {

/// How a job is split over devices (MindSpore's parallel_mode).
enum class ParallelMode { StandAlone, DataParallel, SemiAutoParallel, AutoParallel };

/// "stand_alone", "data_parallel", "semi_auto_parallel", "auto_parallel".
const char* ParallelModeName(ParallelMode mode);
/// The mode a ParallelModeName names; any other name is an error in MindSpore's words.
Result<ParallelMode> ParseParallelMode(const std::string& name);

/// How one kind of collective is fused: comm_fusion's "allgather" and
/// "reducescatter" entries ({"mode": "auto" | "size", "config": MB}).
/// Checked and kept for the parallel optimizer; nothing emits these
/// collectives yet.
struct FusionThreshold {
  std::string mode = "auto";  ///< auto: 64 MB
  double size_mb = 64;        ///< the threshold in force ("auto": 64)
};

/// comm_fusion = {"openstate": ..., "allreduce": {"mode": "auto"|"size"|"index", "config": ...},
///                "allgather": {...}, "reducescatter": {...}}
/// How DATA_PARALLEL groups gradients into fused AllReduces (host/src/parallel/fusion_buckets.h;
/// mindspore-semantics.md §3). An "MB" is MindSpore's DP unit as coded, 262144 bytes.
struct CommFusion {
  std::string mode = "auto";      ///< auto: 64 MB buckets
  double size_mb = 64;            ///< mode "size": N MB buckets, 0: one per gradient (fractions allowed,
                                  ///< unlike MindSpore's int)
  std::vector<int> indices;       ///< mode "index": inclusive 0-based bucket ends, in parameter order
  bool openstate = true;          ///< false: no fusion of any kind, one AllReduce per gradient
  FusionThreshold allgather;      ///< kept for the parallel optimizer
  FusionThreshold reducescatter;  ///< kept for the parallel optimizer
};

/// MindSpore's comm_fusion dict as JSON, checked as
/// _AutoParallelContext.set_comm_fusion checks it, with its messages:
/// ~~~
///   {"openstate": true, "allreduce": {"mode": "auto" | "size" | "index", "config": 32 | [2, 5]},
///    "allgather": {"mode": "auto" | "size", "config": 32}, "reducescatter": {...}}
/// ~~~
/// Every top-level key is optional; an entry needs both "mode" and "config"
/// ("auto" ignores its config, MindSpore passes None). Keys are taken in the
/// order written, as Python's dict is: an "openstate": false turns fusion off,
/// and the entries after it are then not looked at (MindSpore returns early).
/// A wrong type is named as Python's type() prints it ("<class 'int'>").
/// Unknown keys inside an entry are refused (MindSpore ignores them).
Result<CommFusion> ParseCommFusion(const std::string& json);

/// MindSpore's parallel_optimizer_config (docs/guide/parallel_optimizer.md).
struct ParallelOptimizerConfig {
  /// parallel_optimizer_threshold: a parameter of fewer than this many KB
  /// (1024 bytes; shape[0] * ... * shape[n] * size(dtype)) stays replicated.
  int64_t threshold_kb = 64;
  /// optimizer_weight_shard_size: how many ranks share one parameter's
  /// update; -1: the whole data-parallel group (the only size this build
  /// runs).
  int64_t optimizer_weight_shard_size = -1;
  /// optimizer_level: "level1" shards the optimizer state and the update
  /// (ZeRO-1, what this build runs); "level2" would also shard the
  /// gradients and "level3" the weights.
  std::string optimizer_level = "level1";
  /// gradient_accumulation_shard: shard the accumulated gradients too. It
  /// only acts with gradient accumulation, which the parallel optimizer does
  /// not run with yet.
  bool gradient_accumulation_shard = false;

  /// Same settings.
  bool operator==(const ParallelOptimizerConfig&) const = default;
};

/// MindSpore's parallel_optimizer_config dict as JSON, checked as
/// set_parallel_optimizer_config checks it, with its messages:
/// ~~~
///   {"parallel_optimizer_threshold": 24, "gradient_accumulation_shard": false,
///    "optimizer_weight_shard_size": -1, "optimizer_level": "level1"}
/// ~~~
/// Every key is optional; an unknown key is refused ("Unknown config: [...]").
Result<ParallelOptimizerConfig> ParseParallelOptimizerConfig(const std::string& json);

/// MindSpore's default for gradients_mean: AllReduce sums the gradients.
/// A constant so that flag structs can start from it without building a
/// ParallelContext (which made GCC 12 -O3 warn -Wmaybe-uninitialized).
inline constexpr bool kDefaultGradientsMean = false;

/// MindSpore's auto-parallel context (set_auto_parallel_context): how a job is split over its devices.
struct ParallelContext {
  ParallelMode mode = ParallelMode::StandAlone;  ///< parallel_mode
  int device_num = 1;                            ///< devices in the job
  int global_rank = 0;                           ///< this device's rank
  bool gradients_mean = kDefaultGradientsMean;   ///< AllReduce Mean instead of Sum
  bool parameter_broadcast = false;              ///< init ends by broadcasting rank 0's Params
  /// MindSpore's dataset_strategy "full_batch": every rank loads the whole
  /// batch instead of its shard. Refused under data_parallel (Validate); it
  /// gets its meaning with semi_auto_parallel.
  bool full_batch = false;
  /// MindSpore's dataset_strategy as a tuple: per dataset input (in the
  /// order the network creates them), how many ways each dim is split, e.g.
  /// {{2, 1}, {2}}; each rank's queue then holds that slice (the ranks
  /// left over repeat it). Empty: the batch split the loss's strategy
  /// gives (dataset_strategy "data_parallel"), or full_batch. Only under
  /// semi_auto_parallel and auto_parallel, and not with full_batch.
  std::vector<std::vector<int64_t>> dataset_strategy;
  /// auto_parallel's search (docs/design/auto_parallel.md): MindSpore's
  /// auto_parallel_search_mode ("dynamic_programming" or
  /// "sharding_propagation"; "recursive_programming" passes Validate, as in
  /// MindSpore, and the search refuses it), its per-rank memory limit in
  /// bytes (device_memory_capacity; none: unlimited) and the calibration
  /// file of the cost model (empty: $SINKRT_CALIBRATION, else the built-in
  /// default). Read under auto_parallel only.
  /// @{
  std::string search_mode = "dynamic_programming";
  std::optional<uint64_t> device_memory_capacity;
  std::string calibration_file;
  /// @}
  /// MindSpore's set_algo_parameters(fully_use_devices=...): every MatMul,
  /// BatchMatMul and Conv2D uses all device_num ranks. MindSpore's default
  /// is true; sinkrt's is false (AutoParallelOptions::fully_use_devices).
  bool fully_use_devices = false;
  CommFusion comm_fusion;  ///< how gradients are fused into AllReduce buckets
  /// MindSpore's pipeline_stages and pipeline_config's pipeline_scheduler
  /// ("1f1b" or "gpipe"; docs/design/pipeline.md). The micro-batches
  /// (PipelineCell's micro_size) and the layers' stages (cell.pipeline_stage)
  /// belong to the network: ModelOptions and CompileOptions::pipeline. The
  /// stages run under data_parallel (each stage's device_num /
  /// pipeline_stages ranks are replicas of it) or semi_auto_parallel (the
  /// stage's ops are partitioned over them with their strategies, every rank
  /// reading the whole batch); auto_parallel is not supported with them yet.
  /// @{
  int pipeline_stages = 1;
  std::string pipeline_scheduler = "1f1b";
  /// @}
  /// MindSpore's grad_accumulation_step (docs/guide/grad_accumulation.md): one
  /// optimizer step is K dataset batches, forward and backward in turn with
  /// their gradients summed on the device, then one reduction and one
  /// update. sink_size, steps and cur_step_num count optimizer steps.
  /// Stand-alone and data_parallel; 1: none.
  int grad_accumulation_step = 1;
  /// MindSpore's enable_parallel_optimizer (docs/guide/parallel_optimizer.md):
  /// each of the N ranks holding a parameter (data_parallel: every rank;
  /// semi_auto_parallel and auto_parallel: the ranks holding the same
  /// slice, its mirror group) keeps and updates only its 1/N of that
  /// parameter's optimizer state, for every parameter the config lets it
  /// shard (ZeRO-1): the gradient is ReduceScattered into its block and the
  /// updated blocks AllGathered back. stand_alone has nothing to shard and
  /// ignores it.
  bool enable_parallel_optimizer = false;
  ParallelOptimizerConfig parallel_optimizer_config;  ///< parallel_optimizer_config

  /// MindSpore's checks and messages, e.g. "If parallel_mode is stand_alone,
  /// device_number must be 1, device_number: 4, parallel_mode:stand_alone".
  /// `supported` lists the modes this build can run; others are refused
  /// (kUnimplemented) after the value checks, and so is full_batch under
  /// data_parallel. Model::Create and the compiler pass every mode they
  /// run (auto_parallel plans, then runs as semi_auto_parallel).
  Status Validate(const std::vector<ParallelMode>& supported = {ParallelMode::StandAlone}) const;
};

/// global_rank is the rank a MindSpore process is. A Model drives every rank
/// from one host (devices[r] is rank r), so it has none of its own: anything
/// but 0 is refused, naming why, rather than ignored. (The compiler's
/// CompileOptions::rank is the rank a stream is compiled for.)
Status CheckModelGlobalRank(const ParallelContext& context);

}  // namespace sinkrt::host
