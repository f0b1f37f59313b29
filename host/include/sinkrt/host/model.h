/// \file
/// Model: MindSpore's mindspore.train.Model for sinkrt.
///
/// ~~~
///   Model::Create(network, LossSpec::SparseSoftmaxCrossEntropy(),
///                 OptimizerSpec::Momentum(0.01, 0.9), device)
///   model->train(epoch, dataset, callbacks, dataset_sink_mode, sink_size, initial_epoch)
/// ~~~
///
/// train() follows MindSpore's sink semantics exactly (reference/
/// mindspore-semantics.md §1–§2): sink_size = -1 sinks a full dataset pass per
/// epoch; sink_size = N runs N steps per epoch and continues through the data
/// across epochs and pass boundaries; the host sends exactly
/// (epoch - initial_epoch) x steps batches; callbacks run once per sink with
/// cur_step_num advanced by the sink's steps. Non-sink mode runs the same
/// compiled program one step per request, with per-step callbacks, so the
/// two modes give bitwise identical parameters.
///
/// Data position (our rule for resuming): an epoch is steps_per_epoch
/// batches (sink_size, or the dataset size with -1 or in non-sink mode), and
/// train(..., initial_epoch = E) starts its data at global batch
/// E x steps_per_epoch, then continues through passes without a break. So a
/// run of 4 epochs and a run of 2 epochs + checkpoint + a new Model +
/// LoadCheckpoint + train(4, ..., initial_epoch = 2) feed the same batches
/// and end with bitwise identical state (callbacks.h).
///
/// Stopping early (request_stop, a callback's or the device's error) stops
/// the feeder thread, clears the device queue and joins the thread before
/// train() returns: no thread outlives the call and no batch fed for a step
/// that never ran reaches a later train() or eval().
///
/// One Model per device, or per world of devices: Create loads the task
/// stream, replacing any job the devices held.
///
/// DATA_PARALLEL (context.mode, device_num N): the Model drives N devices,
/// devices[r] being rank r. Create compiles one stream per rank, has the
/// devices join one world (shared memory between devices on one host, TCP
/// between hosts) and loads them together; replicas start identical (same
/// seeds, or rank 0's parameters broadcast with parameter_broadcast).
/// train() feeds rank r the dataset's shard r (Dataset::ShardBelowBatch: the
/// batch size is per rank, as in MindSpore, and the ranks' batch k together
/// are the unsharded batch k of N x b) and runs every sink on all ranks at
/// once; the gradients are AllReduced on the devices inside the sink, so
/// there is still one control round trip per sink per device. A step's loss
/// is the mean of the ranks' losses (the global batch's loss, the ranks'
/// batches being equal); CallbackParams::rank_losses has each. eval(),
/// predict() and ReadState() use rank 0, whose parameters equal every
/// rank's; WriteState() writes every rank.
///
/// SEMI_AUTO_PARALLEL (context.mode, device_num N; docs/design/sharding.md): the
/// network is the whole model with global shapes and shard strategies on
/// some ops (Graph::Shard; LossSpec::strategy for the loss Model appends).
/// Create compiles rank r's slice of it for devices[r]. train() feeds each
/// rank the part of the batch its inputs' layout names: the batch is split
/// across the data-parallel groups as in DATA_PARALLEL (the dataset's batch
/// is one group's, Dataset::ShardBelowBatch), and with context.full_batch
/// every rank reads the whole batch (the dataset's batch is the global one)
/// and the graph slices it. A step's loss is the mean of the ranks'. eval()
/// and predict() run on every rank (a sharded model may not fit one): one
/// eval step takes one dataset batch per data-parallel group, and
/// predict's logits come back whole. ReadState() returns whole tensors,
/// merged from the ranks' slices, and WriteState() takes whole tensors and
/// writes each rank its slice, so a checkpoint loads under any strategy or
/// device count; ReadState(r) is rank r's own slices.
///
/// Pipeline stages (context.pipeline_stages S > 1 under DATA_PARALLEL,
/// ModelOptions::micro_size M; docs/design/pipeline.md): rank r runs stage
/// r / (N / S) of the network, every micro-batch of each step in the
/// schedule's order (1F1B or GPipe), sending activations forward and
/// gradients back to the ranks at its place in the neighbouring stages; the
/// N / S ranks of a stage are data-parallel replicas (the batch size is per
/// replica, and replica j is shard j of the dataset). The first stage's
/// ranks are fed the inputs, the last stage's the labels; a step's loss is
/// the mean of the last stage's ranks'. ReadState() gathers each parameter
/// from its stage; WriteState() writes it to its stage's ranks, so a
/// checkpoint is the same as one device's. eval() and predict() are not
/// built for pipelines yet and say so.
///
/// AUTO_PARALLEL (context.mode, device_num N; docs/design/auto_parallel.md): the
/// network is a single-device one (no strategies needed; ops that have one
/// keep it). Create appends the loss, searches every op's strategy once
/// (PlanAutoParallel with context.search_mode, device_memory_capacity,
/// calibration_file, full_batch, dataset_strategy and the optimizer) and
/// then runs exactly as SEMI_AUTO_PARALLEL with the searched strategies;
/// auto_parallel_plan() is the search. The dataset's batch is one
/// data-parallel group's of the plan, as under SEMI_AUTO_PARALLEL: the
/// graph's batch divided by how many ways the plan splits it
/// (compiled()'s train queue, or CompiledJob::train_batch_shards).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "sinkrt/host/callback.h"
#include "sinkrt/host/compiled_job.h"
#include "sinkrt/host/compiler.h"
#include "sinkrt/host/dataset.h"
#include "sinkrt/host/graph.h"
#include "sinkrt/host/optimizer.h"
#include "sinkrt/host/parallel_context.h"
#include "sinkrt/host/tensor.h"
#include "sinkrt/runtime/device_link.h"

namespace sinkrt::host {

/// The loss Model appends to the network, or none when the network computes its own.
struct LossSpec {
  /// Who computes the loss.
  enum class Kind {
    NetworkComputesLoss,
    SparseSoftmaxCrossEntropy,
    SoftmaxCrossEntropy,  ///< dense labels (sparse=False)
    MSE,
    L1,
  };
  Kind kind = Kind::SparseSoftmaxCrossEntropy;  ///< which loss
  std::string label_column = "label";           ///< the i32 input the loss reads
  /// SEMI_AUTO_PARALLEL: the shard strategy of the loss op Model appends
  /// (logits, labels), e.g. {{dp, 1}, {dp}}. Empty: MindSpore's default,
  /// the batch split over every device, which also splits every dataset
  /// input that way (a model-parallel layout then gathers them again).
  std::vector<std::vector<int64_t>> strategy = {};

  /// Mean cross entropy of outputs()[0] against the i32 input `label_column`.
  static LossSpec SparseSoftmaxCrossEntropy(std::string label_column = "label") {
    return {Kind::SparseSoftmaxCrossEntropy, std::move(label_column)};
  }
  /// nn.SoftmaxCrossEntropyWithLogits(sparse=False, reduction='mean') of
  /// outputs()[0] [N, C] against the f32 input `label_column` [N, C]
  /// (one-hot or soft labels; sinkrt/host/nn.h).
  static LossSpec SoftmaxCrossEntropy(std::string label_column = "label") {
    return {Kind::SoftmaxCrossEntropy, std::move(label_column)};
  }
  /// nn.MSELoss() (reduction 'mean') of outputs()[0] against the f32 input
  /// `label_column` of its shape.
  static LossSpec MSE(std::string label_column = "label") { return {Kind::MSE, std::move(label_column)}; }
  /// nn.L1Loss() (reduction 'mean'), as MSE.
  static LossSpec L1(std::string label_column = "label") { return {Kind::L1, std::move(label_column)}; }
  /// The network already called SetLoss().
  static LossSpec None() { return {Kind::NetworkComputesLoss, ""}; }
};

/// How a Model compiles and runs its job, beyond the network, loss and optimizer.
struct ModelOptions {
  ParallelContext context;       ///< the parallel plan (MindSpore's auto-parallel context)
  uint32_t queue_capacity = 16;  ///< MS_DATASET_SINK_QUEUE overrides (1..128)
  /// Where compiled streams are kept and reused (compiled_job.h); empty: no
  /// cache. Defaults to SINKRT_COMPILE_CACHE, or MindSpore's
  /// MS_COMPILER_CACHE_PATH (CompileCacheDirFromEnvironment).
  std::string compile_cache = CompileCacheDirFromEnvironment();
  /// Pipeline stages (context.pipeline_stages > 1; docs/design/pipeline.md):
  /// MindSpore's PipelineCell(network, micro_size), the micro-batches each
  /// batch is cut into (at least pipeline_stages, dividing the batch), and
  /// cell.pipeline_stage as layer name -> stage ({"fc1", 0}: the ops in name
  /// scope fc1). Without stage_of the ops are split into contiguous stages of
  /// about equal estimated cost.
  /// @{
  int micro_size = 1;
  std::vector<std::pair<std::string, int>> stage_of;
  /// @}
  /// MindSpore's Model(..., amp_level=...) (docs/guide/amp.md): which ops compute
  /// in bf16. A compiled job keeps the level it was compiled with; O0 here
  /// takes it, another level must match it.
  AmpLevel amp_level = AmpLevel::O0;
  /// MindSpore's Model(..., loss_scale_manager=...) (docs/guide/loss_scale.md):
  /// FixedLossScaleManager or DynamicLossScaleManager, run inside the sink.
  /// A compiled job keeps its own; None here takes it.
  LossScaleManager loss_scale_manager;
};

/// The device queue capacity Model::Create compiles with: `configured`,
/// unless MS_DATASET_SINK_QUEUE is set (1..128, MindSpore's documented
/// range). For callers that compile a job themselves (CompileJob) and want
/// what Model would have compiled.
Result<uint32_t> SinkQueueCapacity(uint32_t configured);

/// What Model::eval measured.
struct EvalResult {
  double accuracy = 0;       ///< correct / samples; NaN when the graph has no accuracy metric
  double loss = 0;           ///< mean over samples
  int64_t samples = 0;       ///< samples evaluated
  uint64_t round_trips = 0;  ///< control round trips to rank 0: one per batch, or per sunk pass (+1 partial batch)
};

/// MindSpore's Model: compiles a network with its loss and optimizer, loads it on its devices,
/// trains, evaluates and predicts.
class Model {
 public:
  /// `network`: a forward graph whose Input tensors are named after dataset
  /// columns and whose outputs()[0] are the logits. The device must outlive
  /// the Model. Compiles and loads the task stream.
  ///
  /// Every Create fails with InvalidArgument naming the variable when a
  /// numeric SINKRT_* or HCCL_* environment variable is not a non-negative
  /// integer (CheckEnvironment): the devices' options were read from it,
  /// and such a value would silently have been the default.
  static Result<std::unique_ptr<Model>> Create(Graph network, LossSpec loss, OptimizerSpec optimizer,
                                               DeviceLink& device, ModelOptions options);
  /// The same with default ModelOptions. Each Create has such an overload
  /// instead of a default argument: a ModelOptions temporary built inline in
  /// the caller makes GCC 12 at -O3 warn (-Wmaybe-uninitialized, a false
  /// positive) in applications that build with -Werror.
  static Result<std::unique_ptr<Model>> Create(Graph network, LossSpec loss, OptimizerSpec optimizer,
                                               DeviceLink& device);
  /// One device per rank (options.context.device_num of them for
  /// DATA_PARALLEL, one for STAND_ALONE); every device must outlive the Model.
  static Result<std::unique_ptr<Model>> Create(Graph network, LossSpec loss, OptimizerSpec optimizer,
                                               std::span<DeviceLink* const> devices, ModelOptions options);
  /// The same with default ModelOptions (STAND_ALONE: one device).
  static Result<std::unique_ptr<Model>> Create(Graph network, LossSpec loss, OptimizerSpec optimizer,
                                               std::span<DeviceLink* const> devices);
  /// A job compiled beforehand (sinkc, ReadCompiledJob, CompileJob): no
  /// graph needed. devices[r] runs job.ranks[r]; the job's parallel plan is
  /// the context (options.context, if set, must agree with it).
  static Result<std::unique_ptr<Model>> Create(CompiledJob job, std::span<DeviceLink* const> devices,
                                               ModelOptions options);
  /// The same with default ModelOptions: the job's own plan.
  static Result<std::unique_ptr<Model>> Create(CompiledJob job, std::span<DeviceLink* const> devices);
  ~Model();

  /// MindSpore 2.x defaults: dataset_sink_mode = false, sink_size = -1.
  Status train(int epoch, const Dataset& train_dataset, const std::vector<Callback*>& callbacks = {},
               bool dataset_sink_mode = false, int sink_size = -1, int initial_epoch = 0);
  /// Loss and accuracy over every sample of `dataset`. Full batches run
  /// eval_step: without dataset_sink_mode one RunSink(EvalStep, 1) each, as
  /// MindSpore's eval launches one step at a time; with it all of them in
  /// one RunSink(EvalStep, N), the device summing loss x rows and the
  /// correct count (docs/guide/training.md "Eval, sunk"; beyond MindSpore), to the same
  /// figures bit for bit. A partial last batch runs predict_step
  /// zero-padded and its loss and accuracy are computed on the host over
  /// the real rows only, in double (this needs the loss to be
  /// SparseSoftmaxCrossEntropy of outputs()[0]). SEMI_AUTO_PARALLEL eval
  /// runs per batch in either mode.
  Result<EvalResult> eval(const Dataset& dataset, bool dataset_sink_mode = false);
  /// Logits (outputs()[0]) for one batch of network inputs: the Inputs that
  /// outputs()[0] depends on, in creation order (compiled().predict_columns;
  /// not the label). The batch may be short: it is zero-padded on the way in
  /// and only the real rows come back.
  Result<Tensor> predict(const Row& inputs);

  /// One tensor of the model's state as ReadState() returns it and
  /// WriteState() takes it: whole, whatever the ranks hold of it.
  struct StateTensorSpec {
    std::string name;              ///< as in checkpoints ("fc1.weight", "fc1.weight/momentum")
    DType dtype = DType::Invalid;  ///< its element type
    Shape shape;                   ///< the whole tensor's (not a rank's slice)
    bool optimizer_state = false;  ///< optimizer or loss-scale state, not a parameter
    bool device_state = false;     ///< state the step updates, never trained (BatchNorm's moving statistics)
  };
  /// Every parameter and optimizer state of the network across all ranks
  /// and pipeline stages, once each: what a checkpoint must hold for a
  /// resume to set the whole model (LoadCheckpoint loads exactly these).
  std::vector<StateTensorSpec> StateSpecs() const;

  /// Parameters and optimizer state, by buffer name (checkpoints), of rank 0
  /// or of any rank (data-parallel replicas hold bitwise equal state).
  /// @{
  Result<std::vector<std::pair<std::string, Tensor>>> ReadState();
  Result<std::vector<std::pair<std::string, Tensor>>> ReadState(uint32_t rank);
  /// @}
  /// Writes every rank.
  Status WriteState(const std::vector<std::pair<std::string, Tensor>>& state);

  /// Control round trips so far, per device (DeviceLink::control_round_trips
  /// of rank 0; training asks every rank equally often).
  uint64_t host_round_trips() const;
  /// The devices this Model drives, one per rank.
  uint32_t device_num() const;
  /// Rank 0's stream; every rank's differs only in its rank.
  const CompiledStream& compiled() const;
  const ParallelContext& context() const;  ///< the parallel plan the job runs under
  /// The search a Model created under auto_parallel ran (or that the job it
  /// was given holds); null otherwise.
  const AutoParallelPlan* auto_parallel_plan() const;
  /// NetworkHash of the network with its loss: what a checkpoint is bound
  /// to (not the stream hash, so the queue capacity, the learning rate, the
  /// shard strategies, the device count and the per-rank batch may change
  /// between a run and its resume).
  uint64_t network_hash() const;
  /// NetworkStructureHash of the same network: network_hash without the
  /// initial values (seeds). Checkpoints of format 1.1 on bind to this one,
  /// since they hold every parameter. 0 for a job read from a manifest
  /// written before it existed.
  uint64_t network_structure_hash() const;
  /// What this model's first device (rank 0 when one process drives every
  /// rank) said when it loaded the stream: arena and queue bytes, and
  /// train_step's AllReduces with the schedule each runs.
  const LoadInfo& load_info() const;
  const std::string& network_name() const;  ///< the network's Graph name

  struct Impl;

 private:
  Status WritePipelineState(const std::vector<std::pair<std::string, Tensor>>& state);
  Status WriteRankState(const std::vector<std::pair<std::string, Tensor>>& state);
  explicit Model(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sinkrt::host
