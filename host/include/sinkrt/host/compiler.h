/// \file
/// The compiler: training graph -> one verified-format task stream.
///
/// ~~~
///   forward graph --AppendBackward--> + backward --AppendOptimizer--> + update
///     --lower (fusion, parallel planning, buffers, tasks)-->
///     --plan memory (liveness)--> --write--> bytes
/// ~~~
///
/// docs/design/compiler.md lists every pass in order, with its input, output, file
/// and invariants. The same graph and options always give byte-identical
/// streams.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sinkrt/host/amp.h"
#include "sinkrt/host/auto_parallel.h"
#include "sinkrt/host/buffer_role.h"
#include "sinkrt/host/graph.h"
#include "sinkrt/host/loss_scale.h"
#include "sinkrt/host/optimizer.h"
#include "sinkrt/host/parallel_context.h"
#include "sinkrt/host/pipeline.h"
#include "sinkrt/runtime/program_kind.h"
#include "sinkrt/runtime/status.h"
#include "sinkrt/runtime/task_stream_verifier.h"

namespace sinkrt::host {

/// What Compile builds: the optimizer, the programs, the parallel plan and the training features.
struct CompileOptions {
  OptimizerSpec optimizer;        ///< the optimizer the stream updates parameters with
  uint32_t queue_capacity = 16;   ///< MS_DATASET_SINK_QUEUE's default
  uint32_t rank = 0;              ///< this rank (MindSpore's global_rank)
  uint32_t world_size = 1;        ///< ranks in the job (MindSpore's device_num)
  uint32_t arena_alignment = 64;  ///< every buffer's offset in the arena is a multiple of this
  bool fuse = true;               ///< MatMul/Conv + BiasAdd + Relu into one kernel
  bool eval_program = true;       ///< also emit eval_step (forward, loss, outputs)
  /// Also emit predict_step: the forward ops outputs()[0] depends on, fed by
  /// queue "predict" with only the Inputs they read (not the label), and
  /// reporting outputs()[0]. Model turns it on for predict() and for eval's
  /// partial last batch.
  bool predict_program = false;

  /// The parallel plan (MindSpore's auto-parallel context; `rank` and
  /// `world_size` above are its global_rank and device_num). StandAlone
  /// ignores the fields below and emits no communication, whatever
  /// world_size says. DataParallel gives train_step a "comm" stream with one
  /// in-place AllReduce per gradient fusion bucket (parallel/fusion_buckets.h),
  /// overlapped with backward; eval and predict stay single-stream.
  /// SemiAutoParallel: see full_batch below. AutoParallel: Compile copies
  /// the graph, searches every op's strategy on it (PlanAutoParallel with
  /// the search fields below) and compiles the copy as SemiAutoParallel:
  /// the stream is a semi-auto stream, byte for byte what the searched
  /// strategies give under SemiAutoParallel (its header hash included), and
  /// CompileReport::auto_parallel holds the plan.
  ParallelMode parallel_mode = ParallelMode::StandAlone;
  bool gradients_mean = false;       ///< AllReduce Mean instead of Sum
  bool parameter_broadcast = false;  ///< init ends by broadcasting rank 0's Params
  CommFusion comm_fusion;            ///< how gradients are fused into AllReduce buckets
  /// SemiAutoParallel (docs/design/sharding.md): the forward graph is the whole
  /// model, with shard strategies on its ops (OpNode::strategy; MindSpore's
  /// default where none); the stream is rank `rank`'s slice of it, with the
  /// collectives its layouts need and each parameter's gradient reduced over
  /// its mirror group. full_batch: every rank reads the whole batch
  /// (MindSpore's dataset_strategy "full_batch"), else its slice.
  bool full_batch = false;
  /// SemiAutoParallel: ParallelContext::dataset_strategy (per dataset input
  /// in creation order, its splits; empty: the loss's batch split).
  std::vector<std::vector<int64_t>> dataset_strategy;
  /// AutoParallel only (ParallelContext's search_mode,
  /// device_memory_capacity and calibration_file): the search, the per-rank
  /// memory limit in bytes (none: unlimited), the calibration file (empty:
  /// $SINKRT_CALIBRATION, else the built-in default).
  /// @{
  std::string search_mode = "dynamic_programming";
  std::optional<uint64_t> device_memory;
  std::string calibration;
  /// @}
  bool fully_use_devices = false;  ///< ParallelContext::fully_use_devices
  /// Which of the calibration's collective fits prices communication: "shm"
  /// when the ranks share a host (sinkd's mesh then uses shared memory),
  /// "tcp" when they span hosts (sinkrun picks it from a rank table).
  std::string search_transport = "shm";
  /// Pipeline stages (MindSpore's pipeline_stages, PipelineCell's micro_size
  /// and pipeline_config's scheduler; docs/design/pipeline.md). stages 1: none.
  /// With S > 1 (data_parallel or semi_auto_parallel), rank r compiles stage
  /// r / (world_size / S): its share of every micro-batch's forward and
  /// backward in the schedule's order, the transfers to its neighbours on
  /// the comm stream, gradients summed over micro-batches and reduced over
  /// its stage's ranks (data parallel) or partitioned over them (semi-auto),
  /// one update per step. The network is the graph one replica trains (its
  /// batch is split into micro_size micro-batches); the first stage's queue
  /// holds the inputs, the last stage's the labels, and only the last stage
  /// reports the loss. eval_step runs the stages forward; no predict_step.
  PipelineConfig pipeline;
  /// Gradient accumulation (MindSpore's grad_accumulation_step; docs/
  /// grad_accumulation.md): train_step runs forward and backward on K
  /// batches in turn, summing their gradients, then one reduction (data
  /// parallel) and one optimizer update. Its queue holds K batches per
  /// entry (columns "image", "label", then "mb1/image", "mb1/label", ...);
  /// the loss it reports is their mean, and the gradients are those of that
  /// mean: one step on K batches of b equals one step on a batch of K·b.
  /// eval_step and predict_step read one batch. Stand-alone and data
  /// parallel; not with pipeline stages.
  int grad_accumulation = 1;
  /// Mixed precision (MindSpore's amp_level; docs/guide/amp.md): the forward graph
  /// is rewritten with Casts before autodiff, so the ops the level names
  /// compute in bf16; parameters, their gradients (and so the gradient
  /// reduction), the optimizer and the loss stay f32. O0: the f32 stream,
  /// byte for byte. Stand-alone, data parallel and semi-auto; not with
  /// pipeline stages.
  AmpLevel amp_level = AmpLevel::O0;
  /// Loss scaling (MindSpore's loss_scale_manager; docs/guide/loss_scale.md): the
  /// overflow check, the skipped update and the scale's schedule run inside
  /// train_step, which then also reports the scale and its counters.
  /// Not with pipeline stages.
  LossScaleManager loss_scale;
  /// Optimizer parallel (MindSpore's enable_parallel_optimizer and
  /// parallel_optimizer_config; docs/guide/parallel_optimizer.md), under
  /// DataParallel: every parameter of at least threshold_kb KB whose dim 0
  /// divides by world_size (and whose slice keeps the arena alignment) is
  /// updated in slices. Rank r holds the optimizer state of dim-0 block r
  /// only; the gradient is ReduceScattered into that block, the update
  /// writes it in place in the parameter, and an AllGather on the comm
  /// stream fills in the other ranks' blocks. Other parameters keep the
  /// AllReduce path; CompileReport::optimizer_shards says which and why.
  /// SGD has no state: nothing is sharded with it.
  bool enable_parallel_optimizer = false;
  ParallelOptimizerConfig parallel_optimizer_config;  ///< its threshold, shard size and level
};

/// The parallel context `options` compile under, for its checks (MindSpore's
/// messages): stand-alone as device_num 1 and rank 0 (its world_size is a
/// header-only value there), every other mode with world_size and rank.
ParallelContext ParallelContextFor(const CompileOptions& options);

/// What PlanAutoParallel is asked under options.parallel_mode AutoParallel:
/// device_num world_size, the optimizer, the search fields, full_batch and
/// dataset_strategy.
AutoParallelOptions AutoParallelOptionsFor(const CompileOptions& options);

/// One buffer of the arena plan: where it lies, what it holds and when it is live.
struct PlannedBuffer {
  std::string name;                          ///< its name in the stream
  uint64_t offset = 0;                       ///< its offset in the arena
  uint64_t bytes = 0;                        ///< its bytes
  BufferRole role = BufferRole::Activation;  ///< what it holds (Param, Grad, Activation, ...)
  /// First and last task index (in program order) that touch it; persistent
  /// buffers span every program: program Init, first_use 0, last_use the last
  /// task of the longest step program.
  /// @{
  int32_t first_use = 0, last_use = 0;
  /// @}
  ProgramKind program = ProgramKind::TrainStep;  ///< the program that uses it
  /// A view (docs/design/compiler.md "Views"): the buffer whose bytes it shares, its
  /// group's root; first_use 0 and last_use -1, as the root's range covers it.
  /// Empty for a buffer of its own.
  std::string view_of = {};
};

/// The arena bytes that the buffers of `role` cover: overlapping buffers
/// (transients sharing space, a view inside its root) count once.
uint64_t ArenaBytesOf(const std::vector<PlannedBuffer>& buffers, BufferRole role);

/// One fused gradient AllReduce of a DataParallel train_step: its gradients
/// (buffer names, in arena order) and the byte range it reduces in place.
struct GradientBucket {
  std::vector<std::string> gradients;  ///< buffer names, in arena order
  /// [offset, offset + bytes) of the arena
  /// @{
  uint64_t offset = 0, bytes = 0;
  /// @}
};

/// What Compile decided: the arena, the programs' sizes and the parallel plans.
struct CompileReport {
  uint64_t arena_bytes = 0;           ///< the arena's planned size
  uint64_t liveness_lower_bound = 0;  ///< max over time of live bytes
  uint64_t persistent_bytes = 0;      ///< bytes of buffers that live across steps (params, optimizer state)
  /// The arena bytes the Activation buffers cover: their peak, since
  /// transients share space (what recomputation lowers; docs/guide/recompute.md).
  uint64_t activation_bytes = 0;
  /// Tasks of each program's compute stream; comm_tasks: train_step's "comm"
  /// stream (DataParallel only).
  /// @{
  size_t train_tasks = 0, eval_tasks = 0, predict_tasks = 0, fused_kernels = 0, comm_tasks = 0;
  /// @}
  std::vector<PlannedBuffer> buffers;   ///< every buffer of the plan
  std::vector<GradientBucket> buckets;  ///< DataParallel: in the comm stream's order
  /// AutoParallel: the search that chose the strategies compiled.
  std::optional<AutoParallelPlan> auto_parallel;
  /// Pipeline stages: this rank's stage (-1: none), and the schedule's bubble
  /// as its simulation predicts it (the mean fraction of a step a stage
  /// waits for a neighbour).
  /// @{
  int pipeline_stage = -1;
  double predicted_bubble = 0;
  /// @}
  /// Optimizer parallel: one line per parameter, in parameter order, e.g.
  /// "fc1.weight [784,512]: sharded, rank 1 updates rows [392, 784)" or
  /// "fc3.bias [10]: replicated, 40 B < threshold 64 KB". Empty without it.
  std::vector<std::string> optimizer_shards;
};

/// Only ever made from a stream that passed VerifyTaskStream (Compile
/// verifies what it writes, ReadCompiledJob what it reads), so whoever holds
/// one reads the stream without verifying it again.
struct CompiledStream {
  VerifiedStream stream;    ///< the .tstream file: stream.bytes()
  CompileReport report;     ///< what Compile decided
  uint64_t graph_hash = 0;  ///< hash of the forward graph and the options, as the stream's header carries it
  /// Queue 0 ("train") takes these columns: the graph's Input tensors in
  /// creation order, then with grad_accumulation K the same for batches
  /// 1..K-1 ("mb1/image", ...). Queue 1 ("eval") takes the first batch's.
  std::vector<std::string> input_columns;
  /// Queue "predict" (2, or 1 without eval_step): the Inputs outputs()[0]
  /// depends on, in creation order. Empty without predict_program.
  std::vector<std::string> predict_columns;
};

/// `forward` must have a loss (SetLoss). It is copied, not modified. The
/// stream is verified as a device would before it is returned.
Result<CompiledStream> Compile(const Graph& forward, const CompileOptions& options);

/// FNV-1a over the graph's canonical serialisation: names, shapes, ops, attrs,
/// initialisers. Equal graphs hash equal on every platform.
/// Shard strategies are part of it (only where an op has one, so a graph
/// without any hashes as it did before they existed).
uint64_t GraphHash(const Graph& g);
/// GraphHash as if no op had a strategy: the network itself, which
/// checkpoints and strategy files are bound to (both hold under any
/// strategy).
uint64_t GraphHashWithoutStrategies(const Graph& g);
/// GraphHashWithoutStrategies without the batch: the leading dimension of
/// the tensors the batch flows through (and of Reshape sizes) is left out.
/// What a checkpoint binds to (CompiledJob::network_hash): it loads under
/// any strategy, any device count and any per-rank batch, so a job resumes
/// on another number of devices at the same global batch.
uint64_t NetworkHash(const Graph& g);
/// NetworkHash without the initialisers (kinds, constants, seeds, inline
/// values): the network's structure, which is all a checkpoint (format 1.1
/// on) must match, since it holds every parameter's value. A run resumes
/// under another seed, as MindSpore's load_checkpoint does.
uint64_t NetworkStructureHash(const Graph& g);

}  // namespace sinkrt::host
