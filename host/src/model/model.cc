// Model::Create: the loss, the parallel context, compiling, then the job's
// checks, reading its streams, joining the world and loading (the state
// is state.cc's).
#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <utility>

#include "host/src/job/stream_report.h"
#include "host/src/model/fan_out.h"
#include "host/src/model/job_checks.h"
#include "host/src/model/join_world.h"
#include "host/src/model/model_impl.h"
#include "host/src/model/stream_reading.h"
#include "host/src/model/validate.h"
#include "runtime/src/env.h"
#include "sinkrt/host/communication.h"
#include "sinkrt/host/nn.h"
#include "sinkrt/runtime/version.h"

namespace sinkrt::host {
namespace {

std::string ModelContext(const Graph& g) { return "Model: network '" + g.name() + "'"; }

// The loss `kind` of `logits` against a new input `label`: sparse cross
// entropy reads i32 [N] classes, the others f32 labels of the logits' shape.
Result<TensorId> LossOf(Graph& g, const LossSpec& loss, TensorId logits) {
  const TensorInfo& info = g.tensor(logits);
  const bool sparse = loss.kind == LossSpec::Kind::SparseSoftmaxCrossEntropy;
  const bool rows = sparse || loss.kind == LossSpec::Kind::SoftmaxCrossEntropy;
  if (rows && info.shape.size() != 2)
    return InvalidArgument(ModelContext(g) + ": " + (sparse ? "SparseSoftmaxCrossEntropy" : "SoftmaxCrossEntropy") +
                           " needs [N, C] logits, outputs()[0] '" + info.name + "' is " + ShapeToString(info.shape));
  const TensorId label = sparse ? g.Input(loss.label_column, {info.shape[0]}, DType::I32)
                                : g.Input(loss.label_column, info.shape, DType::F32);
  switch (loss.kind) {
    case LossSpec::Kind::SoftmaxCrossEntropy:
      return SoftmaxCrossEntropyWithLogits(g, logits, label, Reduction::kMean);
    case LossSpec::Kind::MSE:
      return MSELoss(g, logits, label);
    case LossSpec::Kind::L1:
      return L1Loss(g, logits, label);
    default:
      return g.SparseSoftmaxCrossEntropy(logits, label);
  }
}

// Appends the loss `loss` names (MindSpore's SoftmaxCrossEntropyWithLogits,
// sparse or dense, MSELoss or L1Loss, reduction 'mean') on outputs()[0]
// against a new label input.
Status AppendLoss(Graph& g, const LossSpec& loss) {
  if (loss.kind == LossSpec::Kind::NetworkComputesLoss) {
    if (!g.valid(g.loss()))
      return InvalidArgument(ModelContext(g) + " has no loss: LossSpec::None() trains a network that called SetLoss");
    return Status::Ok();
  }
  if (g.valid(g.loss()))
    return InvalidArgument(ModelContext(g) + " already has a loss: pass LossSpec::None() to train it as it is");
  if (g.outputs().empty())
    return InvalidArgument(ModelContext(g) +
                           " has no output: the loss reads the logits, outputs()[0] (call AddOutput)");
  if (loss.label_column.empty()) return InvalidArgument(ModelContext(g) + ": the label column has no name");
  SINKRT_ASSIGN_OR_RETURN(const TensorId value, LossOf(g, loss, g.outputs().front()));
  if (!loss.strategy.empty()) g.Shard(value, loss.strategy);
  g.SetLoss(value);
  SINKRT_RETURN_IF_ERROR(g.status(), ModelContext(g) + ": loss");
  return Status::Ok();
}

// The queues, reports and state the host reads from the job's streams
// (`m` holds rank 0's, `job` the others').
Status ReadStreams(Model::Impl& m, const CompiledJob& job, const std::string& context) {
  const CompileOptions& co = job.options;
  const bool sharded = co.parallel_mode == ParallelMode::SemiAutoParallel;
  const uint32_t n = static_cast<uint32_t>(m.devices.size());
  const VerifiedStream& stream = m.compiled.stream;
  for (uint32_t r = 0; r < n; ++r) m.streams.push_back(r == 0 ? stream : job.ranks[r].stream);
  m.train_queue = FindQueue(stream, "train");
  m.eval_queue = FindQueue(stream, "eval");
  m.predict_queue = FindQueue(stream, "predict");
  if (m.train_queue.index < 0) return InvalidArgument(context + " has no Input: Model trains on dataset columns");
  m.accumulation = co.grad_accumulation;
  m.loss_scaled = co.loss_scale.enabled();
  m.lr_scheduled = co.optimizer.schedule.enabled();
  if (m.accumulation > 1 && m.train_queue.columns.size() % static_cast<size_t>(m.accumulation) != 0)
    return Internal(context + ": train_step's queue has " + std::to_string(m.train_queue.columns.size()) +
                    " columns, not a multiple of grad_accumulation_step " + std::to_string(m.accumulation));
  m.pipeline_stages = co.pipeline.stages;
  m.stage_sharded = sharded && co.pipeline.stages > 1;
  if (m.pipeline_stages > 1) {
    SINKRT_RETURN_IF_ERROR(PlanPipeline(m, context));
  } else {
    FindEvalReports(stream, &m.loss_report, &m.accuracy_report);
    if (m.loss_report < 0) return Internal(context + ": eval_step does not report the loss");
    m.metric_sums_report = FindMetricSumsReport(stream);
  }
  m.state = StateBuffers(stream);
  // Pipeline stages keep their own per-rank plan (PlanPipeline): their
  // ranks read whole batches.
  m.sharded = sharded && !m.stage_sharded;
  if (m.sharded) {
    for (uint32_t r = 0; r < n; ++r) {
      const VerifiedStream& view = r == 0 ? stream : job.ranks[r].stream;
      SINKRT_ASSIGN_OR_RETURN(RankPlan plan, PlanRank(view, r), context);
      m.ranks.push_back(std::move(plan));
    }
  }

  // Optimizer parallel: each rank holds its own blocks of the sharded
  // optimizer state.
  if (!m.sharded && m.pipeline_stages == 1 && n > 1) {
    for (uint32_t r = 0; r < n; ++r) m.rank_state.push_back(StateBuffers(r == 0 ? stream : job.ranks[r].stream));
    m.state_sliced =
        std::any_of(m.state.begin(), m.state.end(), [](const StateBuffer& s) { return s.slice.has_value(); });
    if (!m.state_sliced) m.rank_state.clear();
  }
  return Status::Ok();
}

// The devices join their world (collective jobs), then load their streams.
Status JoinAndLoad(Model::Impl& m, const CompiledJob& job, const std::string& context) {
  const CompileOptions& co = job.options;
  const bool collective =
      co.parallel_mode == ParallelMode::DataParallel || co.parallel_mode == ParallelMode::SemiAutoParallel;
  const uint32_t n = static_cast<uint32_t>(m.devices.size());
  if (m.group) {
    SINKRT_RETURN_IF_ERROR(JoinWorldOfProcesses(m, co, context));
  } else if (collective) {
    std::vector<const VerifiedStream*> streams;
    for (uint32_t r = 0; r < n; ++r) streams.push_back(r == 0 ? &m.compiled.stream : &job.ranks[r].stream);
    SINKRT_RETURN_IF_ERROR(JoinWorld(m.devices, streams, context));
  }
  // Together: init may end by broadcasting rank 0's parameters.
  SINKRT_RETURN_IF_ERROR(CombineRankStatuses(OnEveryRank(n,
                                                         [&](uint32_t r) {
                                                           const CompiledStream& cs =
                                                               r == 0 ? m.compiled : job.ranks[r];
                                                           auto info = m.devices[r]->Load(cs.stream);
                                                           if (info.ok() && r == 0)
                                                             m.load_info = std::move(info).value();
                                                           return info.status();
                                                         }),
                                             context + ": load"));
  return Status::Ok();
}

}  // namespace

Model::Model(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Model::~Model() = default;

// The overloads without options (model.h says why they are not default
// arguments).
Result<std::unique_ptr<Model>> Model::Create(Graph network, LossSpec loss, OptimizerSpec optimizer,
                                             DeviceLink& device) {
  return Create(std::move(network), std::move(loss), std::move(optimizer), device, ModelOptions{});
}

Result<std::unique_ptr<Model>> Model::Create(Graph network, LossSpec loss, OptimizerSpec optimizer,
                                             std::span<DeviceLink* const> devices) {
  return Create(std::move(network), std::move(loss), std::move(optimizer), devices, ModelOptions{});
}

Result<std::unique_ptr<Model>> Model::Create(CompiledJob job, std::span<DeviceLink* const> devices) {
  return Create(std::move(job), devices, ModelOptions{});
}

Result<std::unique_ptr<Model>> Model::Create(Graph network, LossSpec loss, OptimizerSpec optimizer, DeviceLink& device,
                                             ModelOptions options) {
  DeviceLink* one[] = {&device};
  return Create(std::move(network), std::move(loss), std::move(optimizer), one, std::move(options));
}

Result<std::unique_ptr<Model>> Model::Create(Graph network, LossSpec loss, OptimizerSpec optimizer,
                                             std::span<DeviceLink* const> devices, ModelOptions options) {
  // Before compiling; the job overload below checks again for callers that
  // bring their own job.
  SINKRT_RETURN_IF_ERROR(CheckEnvironment(), "Model");
  SINKRT_RETURN_IF_ERROR(options.context.Validate(kModelModes));
  SINKRT_ASSIGN_OR_RETURN(ProcessGroup* const per_rank,
                          PerRankGroup(options.context, static_cast<uint32_t>(devices.size()), ModelContext(network)));
  SINKRT_ASSIGN_OR_RETURN(const uint32_t capacity, SinkQueueCapacity(options.queue_capacity));
  SINKRT_RETURN_IF_ERROR(network.status(), ModelContext(network));
  const ParallelContext& pc = options.context;
  // auto_parallel runs as semi_auto_parallel once CompileJob has searched.
  const bool sharded = pc.mode == ParallelMode::SemiAutoParallel || pc.mode == ParallelMode::AutoParallel;
  const bool data_parallel = pc.mode == ParallelMode::DataParallel;
  const uint32_t n = static_cast<uint32_t>(devices.size());
  if ((data_parallel || sharded) && !per_rank && n != static_cast<uint32_t>(pc.device_num))
    return InvalidArgument(ModelContext(network) + ": " + ParallelModeName(pc.mode) + " with device_num " +
                           std::to_string(pc.device_num) + " needs " + std::to_string(pc.device_num) +
                           " devices, one per rank, but got " + std::to_string(n) +
                           (n == 1 && data_parallel ? " (or one per process: init() in each rank's process)" : ""));
  if (!data_parallel && !sharded && n != 1)
    return InvalidArgument(ModelContext(network) + ": " + ParallelModeName(pc.mode) + " runs on one device, but got " +
                           std::to_string(n) + " (set parallel_mode data_parallel with device_num " +
                           std::to_string(n) + ")");
  for (uint32_t r = 0; r < n; ++r)
    if (!devices[r]) return InvalidArgument(ModelContext(network) + ": device " + std::to_string(r) + " is null");
  SINKRT_RETURN_IF_ERROR(AppendLoss(network, loss));

  CompileOptions co;
  co.optimizer = optimizer;
  co.queue_capacity = capacity;
  co.rank = 0;
  co.world_size = static_cast<uint32_t>(pc.device_num);
  co.eval_program = true;
  co.predict_program = !network.outputs().empty();
  if (data_parallel || sharded) {
    co.parallel_mode = pc.mode;
    co.gradients_mean = pc.gradients_mean;
    co.parameter_broadcast = pc.parameter_broadcast;
    co.comm_fusion = pc.comm_fusion;
    co.full_batch = pc.full_batch;
    co.dataset_strategy = pc.dataset_strategy;
    co.search_mode = pc.search_mode;
    co.fully_use_devices = pc.fully_use_devices;
    co.device_memory = pc.device_memory_capacity;
    co.calibration = pc.calibration_file;
    co.enable_parallel_optimizer = pc.enable_parallel_optimizer;
    co.parallel_optimizer_config = pc.parallel_optimizer_config;
  }
  co.grad_accumulation = pc.grad_accumulation_step;
  co.amp_level = options.amp_level;
  co.loss_scale = options.loss_scale_manager;
  if (pc.pipeline_stages > 1) {
    co.pipeline = {.stages = pc.pipeline_stages,
                   .micro_size = options.micro_size,
                   .scheduler = pc.pipeline_scheduler,
                   .stage_of = options.stage_of};
    co.predict_program = false;  // not built for pipelines yet
  }
  // One process per rank compiles its own rank's stream only.
  SINKRT_ASSIGN_OR_RETURN(CompiledJob job, per_rank ? CompileJobForRank(network, co, per_rank->rank())
                                                    : CompileJob(network, co, options.compile_cache));
  return Create(std::move(job), devices, std::move(options));
}

Result<std::unique_ptr<Model>> Model::Create(CompiledJob job, std::span<DeviceLink* const> devices,
                                             ModelOptions options) {
  const std::string context = "Model: network '" + job.network_name + "'";
  // Every application path meets here (a graph compiled by the overload
  // above or a job from sinkc; in-process devices or remote ones), and
  // nothing has been loaded yet. The readers of the numeric SINKRT_* and
  // HCCL_* variables (DeviceOptions::FromEnvironment, RemoteOptions::
  // FromEnvironment, the queue and peer timeouts) have no error path and
  // skip a nonsense value, so SINKRT_GETNEXT_TIMEOUT_MS=-5 would silently
  // be the default; the tools refuse it at start, a library user meets the
  // same error here. RemoteDevice::Connect checks too, as it runs first.
  SINKRT_RETURN_IF_ERROR(CheckEnvironment(), "Model");
  const uint32_t n = static_cast<uint32_t>(devices.size());
  if (job.ranks.empty()) return InvalidArgument(context + " has no ranks");
  SINKRT_ASSIGN_OR_RETURN(const JobRanks ranks, SelectJobRanks(job, n, options, context));
  SINKRT_RETURN_IF_ERROR(CheckJobStreams(job, devices, ranks, context));
  SINKRT_RETURN_IF_ERROR(CheckJobMatchesOptions(job, options, context));
  const ParallelContext pc = JobContext(job);

  auto impl = std::make_unique<Impl>(std::move(job.ranks[0]));
  impl->group = ranks.per_rank;
  impl->first_rank = ranks.first;
  impl->world_size = ranks.world;
  impl->devices.assign(devices.begin(), devices.end());
  impl->device = devices[0];
  impl->context = pc;
  impl->network_name = job.network_name;
  impl->network_hash = job.network_hash;
  impl->network_structure_hash = job.network_structure_hash;
  impl->label_column = job.label_column;
  SINKRT_RETURN_IF_ERROR(ReadStreams(*impl, job, context));
  impl->auto_parallel = std::move(job.auto_parallel);
  SINKRT_RETURN_IF_ERROR(JoinAndLoad(*impl, job, context));
  return std::unique_ptr<Model>(new Model(std::move(impl)));
}

uint64_t Model::host_round_trips() const { return impl_->device->control_round_trips(); }
uint32_t Model::device_num() const { return static_cast<uint32_t>(impl_->devices.size()); }
const CompiledStream& Model::compiled() const { return impl_->compiled; }
const ParallelContext& Model::context() const { return impl_->context; }
const AutoParallelPlan* Model::auto_parallel_plan() const {
  return impl_->auto_parallel ? &*impl_->auto_parallel : nullptr;
}
uint64_t Model::network_hash() const { return impl_->network_hash; }
uint64_t Model::network_structure_hash() const { return impl_->network_structure_hash; }
const LoadInfo& Model::load_info() const { return impl_->load_info; }
const std::string& Model::network_name() const { return impl_->network_name; }

}  // namespace sinkrt::host
