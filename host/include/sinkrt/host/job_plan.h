/// \file
/// JobSpec and PlanJob: a training job as sinkc and `sinkrun train` take it
/// (the network, the batch, the devices, the parallel mode and its
/// settings), turned into what Compile and Model need: the parallel
/// context, the graph's batch and each rank's, the data-parallel groups
/// that share the dataset, the network sharded or searched, the
/// CompileOptions and the ModelOptions (docs/guide/job_plan.md).
///
/// ~~~
///   host::JobSpec spec;
///   spec.network = [](int64_t batch) { return MyNetworkWithLoss(batch); };
///   spec.batch = 32;                       // one data-parallel replica's
///   spec.devices = 4;
///   spec.mode = host::ParallelMode::SemiAutoParallel;
///   spec.strategy = "2x2";
///   auto plan = host::PlanJob(spec);       // refusals name the sinkrun flag
///   auto model = host::Model::Create(std::move(*plan->network), plan->loss, spec.optimizer,
///                                    links, plan->model_options);
///   // each rank's dataset: batches of plan->device_batch, sharded plan->data_groups ways
/// ~~~
///
/// The refusals are the command line's, in its words: a JobSpec field is
/// named by the sinkc/sinkrun flag that sets it (`strategy` as --strategy,
/// `micro_size` as --micro-size), as MindSpore's messages name the
/// set_auto_parallel_context argument.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "sinkrt/host/amp.h"
#include "sinkrt/host/auto_parallel.h"
#include "sinkrt/host/compiled_job.h"
#include "sinkrt/host/compiler.h"
#include "sinkrt/host/graph.h"
#include "sinkrt/host/loss_scale.h"
#include "sinkrt/host/model.h"
#include "sinkrt/host/optimizer.h"
#include "sinkrt/host/parallel_context.h"
#include "sinkrt/runtime/status.h"

namespace sinkrt::host {

/// The network at a given batch (every Input's leading dimension): sinkrt's
/// graphs have static shapes, and the plan decides the batch the whole graph
/// is built at (e.g. one replica's batch x the strategy's data-parallel
/// degree under semi_auto_parallel).
using NetworkAtBatch = std::function<Result<Graph>(int64_t batch)>;

/// A training job, as sinkc and `sinkrun train` take it on their command
/// lines. Every field has the command line's default.
struct JobSpec {
  /// The network at a batch. Under semi_auto_parallel and auto_parallel it
  /// carries its loss (Graph::SetLoss: a strategy shards the loss too) and
  /// `loss` is LossSpec::None().
  NetworkAtBatch network;
  /// The loss Model::Create appends to the network (stand_alone,
  /// data_parallel); None: the network computes it.
  LossSpec loss = LossSpec::None();
  OptimizerSpec optimizer;  ///< what the stream updates parameters with
  /// One data-parallel replica's batch (--batch): each rank's under
  /// data_parallel, the graph's divided by the strategy's data-parallel
  /// degree under semi_auto_parallel, the global batch's share per device
  /// under auto_parallel; with full_batch (or pipeline stages under
  /// semi_auto_parallel) every rank reads this whole batch. Under
  /// semi_auto_parallel and auto_parallel it must be at least 1.
  int64_t batch = 0;
  int devices = 1;  ///< device_num: the ranks of the job
  /// How messages name the device count, e.g. "--rank-table t.json (4
  /// ranks)"; empty: "--devices N".
  std::string devices_text;
  ParallelMode mode = ParallelMode::StandAlone;  ///< --parallel
  /// data_parallel: AllReduce Mean instead of Sum (--gradients-mean);
  /// unset: MindSpore's default, Sum. Set under another mode it is refused.
  std::optional<bool> gradients_mean;
  bool parameter_broadcast = false;       ///< data_parallel: --parameter-broadcast
  std::optional<CommFusion> comm_fusion;  ///< data_parallel: --comm-fusion; unset: auto
  /// semi_auto_parallel: a preset (data, model, DPxMP such as 2x2) or a
  /// strategy file (--strategy); empty: the network's own strategies.
  std::string strategy;
  /// semi_auto_parallel and auto_parallel: where SaveJobStrategies writes
  /// the strategies and parameter layouts (--strategy-save); empty: nowhere.
  std::string strategy_save;
  bool full_batch = false;  ///< semi_auto_parallel and auto_parallel: every rank reads the whole batch
  /// auto_parallel (docs/guide/auto_parallel.md): --search-mode (unset:
  /// dynamic_programming), --device-memory (per-rank arena limit; unset:
  /// unlimited), --calibration (empty: $SINKRT_CALIBRATION, else the
  /// built-in default), --fully-use-devices; and the transport the search
  /// prices collectives with ("tcp" when the ranks span hosts).
  /// @{
  std::optional<std::string> search_mode;
  std::optional<uint64_t> device_memory;
  std::string calibration;
  bool fully_use_devices = false;
  std::string search_transport = "shm";
  /// @}
  /// Pipeline stages (docs/guide/pipeline.md; data_parallel and
  /// semi_auto_parallel): --pipeline-stages, --micro-size (unset: 1),
  /// --pipeline-scheduler (unset: 1f1b) and --stage-of "LAYER=k,...". The
  /// last three are refused without stages.
  /// @{
  int pipeline_stages = 1;
  std::optional<int> micro_size;
  std::optional<std::string> pipeline_scheduler;
  std::string stage_of;
  /// @}
  int grad_accumulation = 1;  ///< --grad-accumulation: batches per optimizer step
  /// --enable-parallel-optimizer and --parallel-optimizer-config (unset:
  /// MindSpore's defaults; refused without the optimizer parallel).
  /// @{
  bool enable_parallel_optimizer = false;
  std::optional<ParallelOptimizerConfig> parallel_optimizer_config;
  /// @}
  /// --recompute: "all" or layer names (stand_alone and data_parallel
  /// without pipeline stages).
  std::vector<std::string> recompute;
  /// --sync-bn: every BatchNorm of the network is SyncBatchNorm (its
  /// statistics over the ranks that split the batch).
  bool sync_batch_norm = false;
  AmpLevel amp_level = AmpLevel::O0;  ///< --amp-level
  LossScaleManager loss_scale;        ///< --loss-scale-manager
  uint32_t queue_capacity = 16;       ///< device queue slots; MS_DATASET_SINK_QUEUE overrides it
  /// Where auto_parallel's compiled streams are kept and reused; empty: no
  /// cache (ModelOptions::compile_cache).
  std::string compile_cache;
};

/// What PlanJob decided: what Compile and Model need, and the batch
/// arithmetic a run prints.
struct JobPlan {
  ParallelContext context;  ///< checked (ParallelContext::Validate)
  /// The batch the whole network was built at: the replica's batch, x the
  /// strategy's data-parallel degree (semi_auto_parallel), x the devices
  /// (auto_parallel), or the batch itself with full_batch or pipeline
  /// stages under semi_auto_parallel.
  int64_t graph_batch = 0;
  /// The batch each rank's dataset pipeline makes: one data-parallel
  /// group's share of the graph's batch.
  int64_t device_batch = 0;
  /// How many ways the dataset's batches are sharded over the ranks (Model
  /// feeds shard p to data-parallel group p): the devices under
  /// data_parallel (per pipeline stage with stages), the strategy's
  /// data-parallel degree or the searched one, 1 with full_batch.
  int64_t data_groups = 1;
  /// The ranks a shard strategy spans: every device, or with pipeline
  /// stages one stage's.
  int strategy_devices = 1;
  /// The samples one batch of every rank holds together (one forward).
  int64_t global_batch = 0;
  /// The samples of one optimizer step: global_batch x grad_accumulation.
  int64_t step_samples = 0;
  /// The network to compile: at graph_batch, sharded with the strategy
  /// (semi_auto_parallel), with its recomputed layers. Under auto_parallel
  /// the network the search planned, without the searched strategies.
  std::optional<Graph> network;
  LossSpec loss = LossSpec::None();  ///< the JobSpec's
  /// auto_parallel: every rank compiled from one search (its plan in
  /// `searched->auto_parallel`); Model::Create takes it as it is.
  std::optional<CompiledJob> searched;
  /// What CompileJob compiles `network` with (every rank; sinkc's).
  CompileOptions compile_options;
  /// What Model::Create takes: the context, the pipeline's micro-batches
  /// and stages, amp_level and the loss-scale manager.
  ModelOptions model_options;
};

/// The job's parallel settings checked against each other and against the
/// devices, with the command line's messages; needs no network and starts
/// nothing (the strategy file is only looked for). PlanJob calls it first:
/// call it alone to refuse a job before anything costly.
Result<ParallelContext> CheckJobSpec(const JobSpec& spec);

/// Plans `spec`: CheckJobSpec, then builds the network at the graph's batch
/// (applying the strategy under semi_auto_parallel, searching and compiling
/// every rank under auto_parallel) and fills the options.
Result<JobPlan> PlanJob(const JobSpec& spec);

/// Writes spec.strategy_save (semi_auto_parallel, auto_parallel: the
/// searched strategies), MindSpore's strategy_ckpt_save_file; nothing when
/// it is empty. Errors start with "--strategy-save: ".
Status SaveJobStrategies(const JobSpec& spec, const JobPlan& plan);

/// The graph's batch under semi_auto_parallel: `batch` is one data-parallel
/// replica's, so the graph sees batch x the strategy's data-parallel
/// degree; with full_batch every rank reads the whole `batch`, which is then
/// the graph's.
int64_t SemiAutoGraphBatch(int64_t batch, int64_t data_parallel, bool full_batch);

/// The graph's batch under auto_parallel: `batch` x the device count, as
/// data_parallel's global batch (a run compares like for like with
/// strategy "data" at the same batch); with full_batch, `batch`.
int64_t AutoParallelGraphBatch(int64_t batch, int64_t devices, bool full_batch);

/// The ranks a shard strategy spans: every device, or with pipeline stages
/// one stage's (the stage's ops are partitioned over them).
int StrategyDevices(const ParallelContext& context);

/// Sets the strategies `plan` chose on `graph` (the network it searched, by
/// op name), e.g. to write them with SaveShardStrategies: the graph then
/// compiles under semi_auto_parallel to the searched streams.
Status ApplyAutoParallelPlan(const AutoParallelPlan& plan, Graph& graph);

/// A byte count as --device-memory takes it: plain bytes ("8589934592"), or
/// a number with a suffix KB, MB, GB (10^3, 10^6, 10^9) or KiB, MiB, GiB
/// (2^10, 2^20, 2^30), any case, e.g. "512MiB", "1.5GB". Positive; `flag`
/// names the setting in the message.
Result<uint64_t> ParseByteSize(const std::string& text, const std::string& flag);

}  // namespace sinkrt::host
