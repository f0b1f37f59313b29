// Model::Create (loss, parallel context, compile, load) and the model's
// state (parameters and optimizer state, for checkpoints).
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
#include "host/src/model/model_impl.h"
#include "host/src/model/validate.h"
#include "sinkrt/host/communication.h"
#include "sinkrt/runtime/env.h"
#include "sinkrt/runtime/version.h"

namespace sinkrt::host {
namespace {

std::string ModelContext(const Graph& g) { return "Model: network '" + g.name() + "'"; }

// What a Model runs (auto_parallel as semi_auto_parallel, once searched).
const std::vector<ParallelMode> kModelModes = {ParallelMode::StandAlone, ParallelMode::DataParallel,
                                               ParallelMode::SemiAutoParallel, ParallelMode::AutoParallel};

// Appends MindSpore's SoftmaxCrossEntropyWithLogits(sparse=True,
// reduction='mean') on outputs()[0] against a new i32 [N] label input.
Status AppendLoss(Graph& g, const LossSpec& loss) {
  switch (loss.kind) {
    case LossSpec::Kind::NetworkComputesLoss:
      if (!g.valid(g.loss()))
        return InvalidArgument(ModelContext(g) +
                               " has no loss: LossSpec::None() trains a network that called SetLoss");
      return Status::Ok();
    case LossSpec::Kind::SparseSoftmaxCrossEntropy:
      break;
  }
  if (g.valid(g.loss()))
    return InvalidArgument(ModelContext(g) +
                           " already has a loss: pass LossSpec::None() to train it as it is");
  if (g.outputs().empty())
    return InvalidArgument(ModelContext(g) +
                           " has no output: the loss reads the logits, outputs()[0] (call AddOutput)");
  const TensorInfo& logits = g.tensor(g.outputs().front());
  if (logits.shape.size() != 2)
    return InvalidArgument(ModelContext(g) + ": SparseSoftmaxCrossEntropy needs [N, C] logits, outputs()[0] '" +
                           logits.name + "' is " + ShapeToString(logits.shape));
  if (loss.label_column.empty()) return InvalidArgument(ModelContext(g) + ": the label column has no name");
  const TensorId label = g.Input(loss.label_column, {logits.shape[0]}, DType::I32);
  const TensorId value = g.SparseSoftmaxCrossEntropy(g.outputs().front(), label);
  if (!loss.strategy.empty()) g.Shard(value, loss.strategy);
  g.SetLoss(value);
  SINKRT_RETURN_IF_ERROR(g.status(), ModelContext(g) + ": loss");
  return Status::Ok();
}

QueueInfo FindQueue(const VerifiedStream& view, const std::string& name) {
  QueueInfo q;
  if (!view.root()->queues()) return q;
  for (uint32_t i = 0; i < view.root()->queues()->size(); ++i) {
    const fb::QueueSpec* spec = view.root()->queues()->Get(i);
    if (spec->name() && spec->name()->str() == name) q.index = i;
  }
  if (q.index >= 0) q.columns = job::QueueColumns(view, name);
  return q;
}

std::vector<uint32_t> Reports(const VerifiedStream& view, fb::ProgramKind kind) {
  const fb::Program* p = view.FindProgram(kind);
  if (!p || !p->reports()) return {};
  return {p->reports()->begin(), p->reports()->end()};
}

// Positions of the loss and of the accuracy count among eval_step's reports.
// The loss is train_step's report; the count is what the ArgMaxAccuracy task
// writes (buffer names may be the tensors' own when "loss"/"accuracy" are
// taken).
void FindEvalReports(const VerifiedStream& view, int* loss_report, int* accuracy_report) {
  const std::vector<uint32_t> train = Reports(view, fb::ProgramKind::TrainStep);
  const std::vector<uint32_t> eval = Reports(view, fb::ProgramKind::EvalStep);
  int64_t accuracy_buffer = -1;
  if (const fb::Program* p = view.FindProgram(fb::ProgramKind::EvalStep))
    for (const fb::Stream* s : *p->streams())
      for (const fb::Task* t : *s->tasks())
        if (t->body_type() == fb::TaskBody::KernelTask &&
            t->body_as_KernelTask()->op() == fb::OpCode::ArgMaxAccuracy)
          accuracy_buffer = t->body_as_KernelTask()->outputs()->Get(0);
  for (size_t i = 0; i < eval.size(); ++i) {
    if (!train.empty() && eval[i] == train[0]) *loss_report = static_cast<int>(i);
    if (eval[i] == accuracy_buffer) *accuracy_report = static_cast<int>(i);
  }
  // With gradient accumulation train_step reports the mean of its
  // micro-steps' losses, another buffer; eval_step reports the loss first.
  if (*loss_report < 0 && !eval.empty() && eval[0] != accuracy_buffer) *loss_report = 0;
}

// Position among eval_step's reports of the MetricSum task's sums (the
// compiler's sunk-eval accumulator, compiler/metric_sums.h), or -1.
int FindMetricSumsReport(const VerifiedStream& view) {
  const fb::Program* p = view.FindProgram(fb::ProgramKind::EvalStep);
  if (!p || !p->reports() || !p->streams()) return -1;
  for (const fb::Stream* s : *p->streams())
    for (const fb::Task* t : *s->tasks())
      if (t->body_type() == fb::TaskBody::KernelTask && t->body_as_KernelTask()->op() == fb::OpCode::MetricSum) {
        const uint32_t sums = t->body_as_KernelTask()->outputs()->Get(0);
        for (uint32_t i = 0; i < p->reports()->size(); ++i)
          if (p->reports()->Get(i) == sums) return static_cast<int>(i);
      }
  return -1;
}

// eval_step's ArgMaxAccuracy input: the rows of the logits it counts, local
// and global (equal when the logits are not split by rows).
void AccuracyRows(const VerifiedStream& view, int64_t* local, int64_t* global) {
  *local = *global = 0;
  const fb::Program* p = view.FindProgram(fb::ProgramKind::EvalStep);
  if (!p) return;
  for (const fb::Stream* s : *p->streams())
    for (const fb::Task* t : *s->tasks())
      if (t->body_type() == fb::TaskBody::KernelTask &&
          t->body_as_KernelTask()->op() == fb::OpCode::ArgMaxAccuracy) {
        const fb::Buffer* b = view.root()->buffers()->Get(t->body_as_KernelTask()->inputs()->Get(0));
        *local = *global = b->shape() && b->shape()->size() > 0 ? b->shape()->Get(0) : 1;
        if (b->slice() && b->slice()->global_shape() && b->slice()->global_shape()->size() > 0)
          *global = b->slice()->global_shape()->Get(0);
      }
}

// How the host drives rank r of a sharded job (model_impl.h).
Result<RankPlan> PlanRank(const VerifiedStream& view, uint32_t r) {
  const std::string where = "rank " + std::to_string(r);
  RankPlan plan;
  SINKRT_ASSIGN_OR_RETURN(plan.train,
                          PlanRankFeed(job::QueueColumns(view, "train"), job::QueueSlices(view, "train"),
                                       where + "'s train queue"));
  SINKRT_ASSIGN_OR_RETURN(plan.eval,
                          PlanRankFeed(job::QueueColumns(view, "eval"), job::QueueSlices(view, "eval"),
                                       where + "'s eval queue"));
  SINKRT_ASSIGN_OR_RETURN(plan.predict,
                          PlanRankFeed(job::QueueColumns(view, "predict"), job::QueueSlices(view, "predict"),
                                       where + "'s predict queue"));
  plan.state = StateBuffers(view);
  AccuracyRows(view, &plan.accuracy_rows, &plan.accuracy_global_rows);
  const std::vector<uint32_t> predict = Reports(view, fb::ProgramKind::PredictStep);
  if (!predict.empty()) plan.predict_output = job::ReadSlice(view.root()->buffers()->Get(predict[0])->slice());
  return plan;
}

}  // namespace

std::vector<StateBuffer> StateBuffers(const VerifiedStream& view) {
  std::vector<StateBuffer> out;
  for (uint32_t i = 0; i < view.root()->buffers()->size(); ++i) {
    const fb::Buffer* b = view.root()->buffers()->Get(i);
    if (b->role() != fb::BufferRole::Param && b->role() != fb::BufferRole::OptState) continue;
    StateBuffer s;
    s.index = i;
    s.name = b->name() ? b->name()->str() : "";
    s.dtype = b->dtype();
    if (b->shape()) s.shape.assign(b->shape()->begin(), b->shape()->end());
    s.bytes = b->bytes();
    s.role = b->role();
    s.slice = job::ReadSlice(b->slice());
    out.push_back(std::move(s));
  }
  return out;
}

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

Result<std::unique_ptr<Model>> Model::Create(Graph network, LossSpec loss, OptimizerSpec optimizer,
                                             DeviceLink& device, ModelOptions options) {
  DeviceLink* one[] = {&device};
  return Create(std::move(network), std::move(loss), std::move(optimizer), one, std::move(options));
}

namespace {

// The devices' world: every member's endpoint, then JoinWorld on all at
// once, each told the groups its stream (`streams[r]`, loaded next) runs
// collectives on, so that the rendezvous connects only what they need.
Status JoinWorld(const std::vector<DeviceLink*>& devices, const std::vector<const VerifiedStream*>& streams,
                 const std::string& context) {
  const uint32_t n = static_cast<uint32_t>(devices.size());
  WorldSpec world;
  // A fresh id per world, so a straggler of an earlier world can never join this one.
  std::random_device entropy;
  world.job = (uint64_t{entropy()} << 32 | entropy()) | 1;
  for (uint32_t r = 0; r < n; ++r) {
    SINKRT_ASSIGN_OR_RETURN(PeerEndpoint endpoint, devices[r]->Endpoint(),
                            context + ": rank " + std::to_string(r) + " has no peer endpoint");
    world.members.push_back(std::move(endpoint));
  }
  return CombineRankStatuses(OnEveryRank(n,
                                         [&](uint32_t r) {
                                           WorldSpec mine = world;
                                           mine.rank = r;
                                           mine.groups = CollectiveUses(*streams[r], r);
                                           return devices[r]->JoinWorld(mine);
                                         }),
                             context + ": joining the devices' world");
}

// The process group when this Model is one rank of a world of host
// processes (communication.h): one device, device_num > 1, and init()
// formed a world of that size. Null when it drives every rank itself.
Result<ProcessGroup*> PerRankGroup(const ParallelContext& pc, uint32_t devices, const std::string& context) {
  ProcessGroup* pg = process_group();
  if (devices != 1 || pc.device_num <= 1 || !pg || pg->world_size() == 1) {
    SINKRT_RETURN_IF_ERROR(CheckModelGlobalRank(pc));
    return nullptr;
  }
  const std::string why = context + ": one process per rank (init() formed rank " + std::to_string(pg->rank()) +
                          " of " + std::to_string(pg->world_size()) + ")";
  if (static_cast<uint32_t>(pc.device_num) != pg->world_size())
    return InvalidArgument(why + ", but device_num is " + std::to_string(pc.device_num));
  if (pc.global_rank != 0 && static_cast<uint32_t>(pc.global_rank) != pg->rank())
    return InvalidArgument(why + ", but the context's global_rank is " + std::to_string(pc.global_rank));
  if (pc.mode != ParallelMode::DataParallel)
    return Unimplemented(why + ": runs data_parallel, not " + std::string(ParallelModeName(pc.mode)) +
                         " (its ranks' slices are planned, read and merged together: drive every rank from one "
                         "process)");
  if (pc.pipeline_stages > 1 || pc.enable_parallel_optimizer)
    return Unimplemented(why + ": runs data_parallel without " +
                         std::string(pc.pipeline_stages > 1 ? "pipeline stages" : "the parallel optimizer") +
                         " for now: drive every rank from one process");
  return pg;
}

std::string Hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// What every rank's process must hold equal for their devices to run one
// job: refused at the round, by field, instead of hanging in the first
// collective whose sizes differ.
std::vector<JoinField> JobFields(const Model::Impl& m, const CompileOptions& co) {
  const CompileReport& report = m.compiled.report;
  std::string columns, buckets;
  for (const ColumnSpec& c : m.train_queue.columns)
    columns += (columns.empty() ? "" : ", ") + c.name + " " + DTypeName(c.dtype) + " " + ShapeToString(c.shape);
  for (const auto& b : report.buckets) buckets += (buckets.empty() ? "" : ", ") + std::to_string(b.bytes);
  const int64_t batch =
      m.train_queue.columns.empty() || m.train_queue.columns[0].shape.empty() ? 0 : m.train_queue.columns[0].shape[0];
  std::string optimizer = std::string(OptimizerKindName(co.optimizer.kind)) + " lr " +
                          std::to_string(co.optimizer.learning_rate);
  if (co.optimizer.kind == OptimizerKind::Momentum) optimizer += " momentum " + std::to_string(co.optimizer.momentum);
  return {
      // One release for every rank: the bootstrap has no Hello of its own,
      // and another release may compile the same graph differently.
      {"sinkrt", SINKRT_VERSION_STRING},
      {"world_size", std::to_string(co.world_size)},
      {"parallel_mode", ParallelModeName(co.parallel_mode)},
      {"network", m.network_name},
      {"graph_hash", Hex(m.network_hash)},
      {"batch", std::to_string(batch)},
      {"train_columns", columns},
      {"optimizer", optimizer},
      {"gradients_mean", co.gradients_mean ? "true" : "false"},
      {"parameter_broadcast", co.parameter_broadcast ? "true" : "false"},
      {"fusion_buckets", buckets},
      {"grad_accumulation", std::to_string(co.grad_accumulation)},
      {"amp_level", AmpLevelName(co.amp_level)},
      {"loss_scale", LossScaleManagerText(co.loss_scale)},
      {"queue_capacity", std::to_string(co.queue_capacity)},
      {"arena_bytes", std::to_string(report.arena_bytes)},
  };
}

// This rank's device joins the world the other processes' devices form:
// the endpoints travel through the master, with the job's fields.
Status JoinWorldOfProcesses(Model::Impl& m, const CompileOptions& co, const std::string& context) {
  ProcessGroup& pg = *m.group;
  SINKRT_ASSIGN_OR_RETURN(PeerEndpoint endpoint, m.device->Endpoint(),
                          context + ": rank " + std::to_string(pg.rank()) + " has no peer endpoint");
  SINKRT_ASSIGN_OR_RETURN(FormedWorld formed, pg.Round("Model.Create", JobFields(m, co), endpoint));
  WorldSpec world;
  world.job = formed.job;
  world.rank = pg.rank();
  world.members = std::move(formed.members);
  // Only the links this rank's collectives need (connection_plan.h).
  world.groups = CollectiveUses(m.compiled.stream, pg.rank());
  return m.device->JoinWorld(world).WithContext(context + ": joining the devices' world as rank " +
                                                 std::to_string(pg.rank()));
}

// A pipeline's ranks (model_impl.h): each one's train queue, which of them
// report the loss, and where each piece of the state lives.
Status PlanPipeline(Model::Impl& m, const std::string& context) {
  const uint32_t n = static_cast<uint32_t>(m.devices.size());
  const uint32_t per_stage = n / static_cast<uint32_t>(m.pipeline_stages);
  std::map<std::string, uint32_t> owner;
  for (uint32_t r = 0; r < n; ++r) {
    const VerifiedStream& view = m.streams[r];
    m.rank_train_queues.push_back(FindQueue(view, "train"));
    m.rank_eval_queues.push_back(FindQueue(view, "eval"));
    m.reports_loss.push_back(!Reports(view, fb::ProgramKind::TrainStep).empty());
    // Replicas hold what their stage's first rank holds; slices are each
    // their own rank's.
    if (!m.stage_sharded && r % per_stage != 0) continue;
    const uint32_t stage = r / per_stage;
    for (StateBuffer& s : StateBuffers(view)) {
      auto [it, fresh] = owner.emplace(s.name, stage);
      // A parameter lives in one stage. Optimizer state that is not any
      // parameter's (Adam's step powers) is on every stage, equal on all:
      // a checkpoint holds it once and loads it everywhere.
      if (!fresh && it->second != stage) {
        const auto first = std::find_if(m.stage_state.begin(), m.stage_state.end(),
                                        [&](const auto& e) { return e.second.name == s.name; });
        if (s.role != fb::BufferRole::OptState || s.slice || first == m.stage_state.end() ||
            first->second.shape != s.shape || first->second.dtype != s.dtype)
          return Internal(context + ": stages " + std::to_string(it->second) + " and " + std::to_string(stage) +
                          " both hold '" + s.name + "'");
      }
      m.stage_state.emplace_back(r, std::move(s));
    }
  }
  if (!m.reports_loss.back()) return Internal(context + ": the last stage does not report the loss");
  // The last stage's eval_step reports [loss, correct count, logits], or
  // [loss] when the loss is not a sparse cross-entropy, then the metric
  // sums of sunk eval.
  m.metric_sums_report = FindMetricSumsReport(m.streams.back());
  const size_t eval_reports =
      Reports(m.streams.back(), fb::ProgramKind::EvalStep).size() - (m.metric_sums_report >= 0 ? 1 : 0);
  m.loss_report = eval_reports > 0 ? 0 : -1;
  m.accuracy_report = eval_reports == 3 ? 1 : -1;
  return Status::Ok();
}

}  // namespace

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
    return InvalidArgument(ModelContext(network) + ": " + ParallelModeName(pc.mode) +
                           " runs on one device, but got " + std::to_string(n) +
                           " (set parallel_mode data_parallel with device_num " + std::to_string(n) + ")");
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
  // One process per rank (communication.h): this Model drives rank
  // `first` of `world` alone; the job holds that rank's stream (or every
  // rank's, of which it takes its own).
  ProcessGroup* per_rank = nullptr;
  uint32_t first = 0, world = n;
  if (ProcessGroup* pg = process_group(); pg && pg->world_size() > 1 && n == 1 &&
                                          job.options.world_size == pg->world_size()) {
    ParallelContext asked = options.context;
    asked.mode = job.options.parallel_mode;
    asked.device_num = static_cast<int>(job.options.world_size);
    asked.pipeline_stages = job.options.pipeline.stages;
    asked.enable_parallel_optimizer = job.options.enable_parallel_optimizer;
    SINKRT_ASSIGN_OR_RETURN(per_rank, PerRankGroup(asked, n, context));
    first = per_rank->rank();
    world = per_rank->world_size();
    if (job.ranks.size() == world) {
      CompiledStream mine = std::move(job.ranks[first]);
      job.ranks.clear();
      job.ranks.push_back(std::move(mine));
    } else if (job.ranks.size() != 1) {
      return InvalidArgument(context + " holds " + std::to_string(job.ranks.size()) + " streams: one process per rank "
                             "takes its own, or every rank's of " + std::to_string(world));
    }
    options.context.global_rank = 0;  // checked above; the Model's own checks count local ranks
  } else if (n != job.world_size()) {
    return InvalidArgument(context + " was compiled for " + std::to_string(job.world_size()) +
                           (job.world_size() == 1 ? " rank" : " ranks") + ", but got " + std::to_string(n) +
                           (n == 1 ? " device" : " devices"));
  }
  for (uint32_t r = 0; r < n; ++r)
    if (!devices[r]) return InvalidArgument(context + ": device " + std::to_string(r) + " is null");
  // A job put together by hand may hold streams of different compiles: each
  // must be the rank it stands for, in a world of this size.
  for (uint32_t r = 0; r < n; ++r) {
    const fb::Header& h = *job.ranks[r].stream.root()->header();
    if (h.rank() != first + r || h.world_size() != world)
      return InvalidArgument(context + ": the stream for rank " + std::to_string(first + r) + " is rank " +
                             std::to_string(h.rank()) + " of " + std::to_string(h.world_size()) + ", not of " +
                             std::to_string(world));
  }
  const CompileOptions& co = job.options;
  const bool sharded = co.parallel_mode == ParallelMode::SemiAutoParallel;
  const bool collective = co.parallel_mode == ParallelMode::DataParallel || sharded;
  // The compiled plan is the job's context; a context that says otherwise
  // is a mistake worth naming, not something to override silently.
  const ParallelContext& asked = options.context;
  SINKRT_RETURN_IF_ERROR(asked.Validate(kModelModes));
  SINKRT_RETURN_IF_ERROR(CheckModelGlobalRank(asked));
  // A job searched under auto_parallel holds semi-auto streams and its plan.
  const bool planned = job.auto_parallel.has_value();
  const ParallelMode compiled_mode = planned ? ParallelMode::AutoParallel : co.parallel_mode;
  if (asked.mode != ParallelMode::StandAlone || asked.device_num != 1) {
    if (asked.mode == ParallelMode::AutoParallel && co.parallel_mode == ParallelMode::SemiAutoParallel && !planned)
      return InvalidArgument(context + " holds semi_auto_parallel streams without the search that chose them (" +
                             "streams read from disk keep no plan): ask for semi_auto_parallel on " +
                             std::to_string(co.world_size) + " devices");
    // A searched job is also what semi_auto_parallel runs: its streams are.
    const bool same_mode = asked.mode == compiled_mode || (planned && asked.mode == co.parallel_mode);
    if (asked.pipeline_stages != co.pipeline.stages)
      return InvalidArgument(context + " was compiled for pipeline_stages " + std::to_string(co.pipeline.stages) +
                             ", but the context asks for " + std::to_string(asked.pipeline_stages));
    if (!same_mode || asked.device_num != static_cast<int>(co.world_size))
      return InvalidArgument(context + " was compiled for " + ParallelModeName(compiled_mode) + " on " +
                             std::to_string(co.world_size) + " devices, but the context asks for " +
                             ParallelModeName(asked.mode) + " on " + std::to_string(asked.device_num));
  }
  // A job's streams fix its accumulation; a context that names another
  // one is a mistake (1, the default, takes the job's).
  if (asked.grad_accumulation_step != 1 && asked.grad_accumulation_step != co.grad_accumulation)
    return InvalidArgument(context + " was compiled for grad_accumulation_step " +
                           std::to_string(co.grad_accumulation) + ", but the context asks for " +
                           std::to_string(asked.grad_accumulation_step));
  if (asked.enable_parallel_optimizer && asked.mode != ParallelMode::StandAlone &&
      (!co.enable_parallel_optimizer || asked.parallel_optimizer_config != co.parallel_optimizer_config))
    return InvalidArgument(context + " was compiled " +
                           (co.enable_parallel_optimizer ? "with another parallel_optimizer_config"
                                                         : std::string("without enable_parallel_optimizer")) +
                           ", but the context asks for it");
  if (options.loss_scale_manager.enabled() && options.loss_scale_manager != co.loss_scale)
    return InvalidArgument(context + " was compiled with " + LossScaleManagerText(co.loss_scale) +
                           ", but the options ask for " + LossScaleManagerText(options.loss_scale_manager));
  if (options.amp_level != AmpLevel::O0 && options.amp_level != co.amp_level)
    return InvalidArgument(context + " was compiled for amp_level " + AmpLevelName(co.amp_level) +
                           ", but the options ask for " + AmpLevelName(options.amp_level));
  ParallelContext pc;
  pc.mode = compiled_mode;
  pc.device_num = static_cast<int>(co.world_size);
  pc.gradients_mean = co.gradients_mean;
  pc.parameter_broadcast = co.parameter_broadcast;
  pc.comm_fusion = co.comm_fusion;
  pc.full_batch = co.full_batch;
  pc.dataset_strategy = co.dataset_strategy;
  pc.pipeline_stages = co.pipeline.stages;
  pc.pipeline_scheduler = co.pipeline.scheduler;
  pc.grad_accumulation_step = co.grad_accumulation;
  pc.enable_parallel_optimizer = co.enable_parallel_optimizer;
  pc.parallel_optimizer_config = co.parallel_optimizer_config;
  if (planned) {
    pc.search_mode = job.auto_parallel->search_mode;
    pc.device_memory_capacity = co.device_memory;
    pc.calibration_file = co.calibration;
  }

  auto impl = std::make_unique<Impl>(std::move(job.ranks[0]));
  impl->group = per_rank;
  impl->first_rank = first;
  impl->world_size = world;
  impl->devices.assign(devices.begin(), devices.end());
  impl->device = devices[0];
  impl->context = pc;
  impl->network_name = job.network_name;
  impl->network_hash = job.network_hash;
  impl->network_structure_hash = job.network_structure_hash;
  impl->label_column = job.label_column;
  const VerifiedStream& stream = impl->compiled.stream;
  for (uint32_t r = 0; r < n; ++r) impl->streams.push_back(r == 0 ? stream : job.ranks[r].stream);
  impl->train_queue = FindQueue(stream, "train");
  impl->eval_queue = FindQueue(stream, "eval");
  impl->predict_queue = FindQueue(stream, "predict");
  if (impl->train_queue.index < 0) return InvalidArgument(context + " has no Input: Model trains on dataset columns");
  impl->accumulation = co.grad_accumulation;
  impl->loss_scaled = co.loss_scale.enabled();
  if (impl->accumulation > 1 &&
      impl->train_queue.columns.size() % static_cast<size_t>(impl->accumulation) != 0)
    return Internal(context + ": train_step's queue has " + std::to_string(impl->train_queue.columns.size()) +
                    " columns, not a multiple of grad_accumulation_step " + std::to_string(impl->accumulation));
  impl->pipeline_stages = co.pipeline.stages;
  impl->stage_sharded = sharded && co.pipeline.stages > 1;
  if (impl->pipeline_stages > 1) {
    SINKRT_RETURN_IF_ERROR(PlanPipeline(*impl, context));
  } else {
    FindEvalReports(stream, &impl->loss_report, &impl->accuracy_report);
    if (impl->loss_report < 0) return Internal(context + ": eval_step does not report the loss");
    impl->metric_sums_report = FindMetricSumsReport(stream);
  }
  impl->state = StateBuffers(stream);
  // Pipeline stages keep their own per-rank plan (PlanPipeline): their
  // ranks read whole batches.
  impl->sharded = sharded && !impl->stage_sharded;
  impl->auto_parallel = std::move(job.auto_parallel);
  if (impl->sharded) {
    for (uint32_t r = 0; r < n; ++r) {
      const VerifiedStream& view = r == 0 ? stream : job.ranks[r].stream;
      SINKRT_ASSIGN_OR_RETURN(RankPlan plan, PlanRank(view, r), context);
      impl->ranks.push_back(std::move(plan));
    }
  }

  // Optimizer parallel: each rank holds its own blocks of the sharded
  // optimizer state.
  if (!impl->sharded && impl->pipeline_stages == 1 && n > 1) {
    for (uint32_t r = 0; r < n; ++r) impl->rank_state.push_back(StateBuffers(r == 0 ? stream : job.ranks[r].stream));
    impl->state_sliced = std::any_of(impl->state.begin(), impl->state.end(),
                                     [](const StateBuffer& s) { return s.slice.has_value(); });
    if (!impl->state_sliced) impl->rank_state.clear();
  }

  if (per_rank) {
    SINKRT_RETURN_IF_ERROR(JoinWorldOfProcesses(*impl, co, context));
  } else if (collective) {
    std::vector<const VerifiedStream*> streams;
    for (uint32_t r = 0; r < n; ++r) streams.push_back(r == 0 ? &impl->compiled.stream : &job.ranks[r].stream);
    SINKRT_RETURN_IF_ERROR(JoinWorld(impl->devices, streams, context));
  }
  // Together: init may end by broadcasting rank 0's parameters.
  SINKRT_RETURN_IF_ERROR(CombineRankStatuses(
      OnEveryRank(n,
                  [&](uint32_t r) {
                    const CompiledStream& cs = r == 0 ? impl->compiled : job.ranks[r];
                    auto info = devices[r]->Load(cs.stream);
                    if (info.ok() && r == 0) impl->load_info = std::move(info).value();
                    return info.status();
                  }),
      context + ": load"));
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

namespace {

// A state buffer's whole tensor: its slice's global shape, else its own.
const Shape& WholeShape(const StateBuffer& s) { return s.slice ? s.slice->global_shape : s.shape; }

// A sharded model's state as whole tensors: each slice is read from the
// first rank that holds it (replicas hold equal bytes) and put in place.
Result<std::vector<std::pair<std::string, Tensor>>> MergedState(Model::Impl& m) {
  std::vector<std::pair<std::string, Tensor>> out;
  for (size_t i = 0; i < m.state.size(); ++i) {
    const StateBuffer& s0 = m.state[i];
    Tensor whole{s0.dtype, WholeShape(s0), {}};
    whole.data.assign(static_cast<size_t>(NumElements(whole.shape)) * DTypeSize(s0.dtype), 0);
    std::vector<std::vector<int64_t>> placed;
    for (uint32_t r = 0; r < m.devices.size(); ++r) {
      const std::vector<StateBuffer>& state = m.RankState(r);
      const StateBuffer* s = i < state.size() && state[i].name == s0.name ? &state[i] : nullptr;
      if (!s || WholeShape(*s) != whole.shape || s->dtype != s0.dtype)
        return Internal("Model.ReadState: rank " + std::to_string(r) + " holds tensor '" + s0.name +
                        "' differently from rank 0");
      const std::vector<int64_t> offset = s->slice ? s->slice->offset : std::vector<int64_t>(s->shape.size(), 0);
      if (std::find(placed.begin(), placed.end(), offset) != placed.end()) continue;
      SINKRT_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, m.devices[r]->ReadTensor(s->index),
                              "Model.ReadState: tensor '" + s->name + "' on rank " + std::to_string(r));
      if (bytes.size() != s->bytes)
        return Internal("Model.ReadState: tensor '" + s->name + "' came back with " + std::to_string(bytes.size()) +
                        " bytes, expected " + std::to_string(s->bytes));
      if (!s->slice) {
        whole.data = std::move(bytes);
        break;
      }
      PlaceBlock(whole.data.data(), bytes.data(), BlockOf(*s->slice, s->shape, DTypeSize(s->dtype)));
      placed.push_back(offset);
    }
    out.emplace_back(s0.name, std::move(whole));
  }
  return out;
}

// A pipeline's state as whole tensors, in stage order: each from the first
// rank that holds it, or put together from its stage's slices. A tensor
// several stages hold (Adam's powers) is equal on all: read once.
Result<std::vector<std::pair<std::string, Tensor>>> PipelineState(Model::Impl& m) {
  std::vector<std::pair<std::string, Tensor>> out;
  std::map<std::string, size_t> index;  // name -> its entry in `out`
  std::map<std::string, std::vector<std::vector<int64_t>>> placed;
  std::map<std::string, uint32_t> from;  // name -> the rank it was first read from
  const uint32_t per_stage = static_cast<uint32_t>(m.devices.size()) / static_cast<uint32_t>(m.pipeline_stages);
  for (const auto& [rank, s] : m.stage_state) {
    auto [it, fresh] = index.emplace(s.name, out.size());
    if (fresh) {
      from[s.name] = rank;
      Tensor whole{s.dtype, WholeShape(s), {}};
      if (s.slice) whole.data.assign(static_cast<size_t>(NumElements(whole.shape)) * DTypeSize(s.dtype), 0);
      out.emplace_back(s.name, std::move(whole));
    } else if (!s.slice || rank / per_stage != from[s.name] / per_stage) {
      continue;  // a replica's copy, or another stage's equal one
    }
    const std::vector<int64_t> offset = s.slice ? s.slice->offset : std::vector<int64_t>{};
    std::vector<std::vector<int64_t>>& done = placed[s.name];
    if (s.slice && std::find(done.begin(), done.end(), offset) != done.end()) continue;
    SINKRT_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, m.devices[rank]->ReadTensor(s.index),
                            "Model.ReadState: tensor '" + s.name + "' on rank " + std::to_string(rank));
    if (bytes.size() != s.bytes)
      return Internal("Model.ReadState: tensor '" + s.name + "' came back with " + std::to_string(bytes.size()) +
                      " bytes, expected " + std::to_string(s.bytes));
    Tensor& whole = out[it->second].second;
    if (!s.slice) {
      whole.data = std::move(bytes);
      continue;
    }
    PlaceBlock(whole.data.data(), bytes.data(), BlockOf(*s.slice, s.shape, DTypeSize(s.dtype)));
    done.push_back(offset);
  }
  return out;
}

}  // namespace

std::vector<Model::StateTensorSpec> Model::StateSpecs() const {
  std::vector<StateTensorSpec> out;
  auto add = [&](const StateBuffer& s) {
    out.push_back({.name = s.name,
                   .dtype = s.dtype,
                   .shape = WholeShape(s),
                   .optimizer_state = s.role == fb::BufferRole::OptState});
  };
  // Pipeline stages: rank 0 holds only the first stage's tensors; the
  // model's state is every stage's (a tensor several stages hold, once).
  if (impl_->pipeline_stages > 1) {
    std::set<std::string> seen;
    for (const auto& [rank, s] : impl_->stage_state)
      if (seen.insert(s.name).second) add(s);
  } else {
    for (const StateBuffer& s : impl_->state) add(s);
  }
  return out;
}

Result<std::vector<std::pair<std::string, Tensor>>> Model::ReadState() {
  if (impl_->sharded || impl_->state_sliced) return MergedState(*impl_);
  if (impl_->pipeline_stages > 1) return PipelineState(*impl_);
  return ReadState(0);
}

Result<std::vector<std::pair<std::string, Tensor>>> Model::ReadState(uint32_t rank) {
  if (rank >= impl_->devices.size())
    return OutOfRange("Model.ReadState: rank " + std::to_string(rank) + " is outside the model's " +
                      std::to_string(impl_->devices.size()) + " devices");
  std::vector<std::pair<std::string, Tensor>> out;
  // A sharded rank's own slices; ReadState() merges them.
  // A pipeline rank holds its stage's tensors.
  const std::vector<StateBuffer> stage_state =
      impl_->pipeline_stages > 1 ? StateBuffers(impl_->streams[rank]) : std::vector<StateBuffer>{};
  const std::vector<StateBuffer>& state =
      impl_->sharded || impl_->state_sliced ? impl_->RankState(rank)
      : impl_->pipeline_stages > 1          ? stage_state
                                            : impl_->state;
  out.reserve(state.size());
  for (const StateBuffer& s : state) {
    SINKRT_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, impl_->devices[rank]->ReadTensor(s.index),
                            "Model.ReadState: tensor '" + s.name + "'");
    if (bytes.size() != s.bytes)
      return Internal("Model.ReadState: tensor '" + s.name + "' came back with " +
                      std::to_string(bytes.size()) + " bytes, expected " + std::to_string(s.bytes));
    out.emplace_back(s.name, Tensor{s.dtype, s.shape, std::move(bytes)});
  }
  return out;
}

namespace {

// The overflow count a written loss_scale/counters holds (Impl::
// overflow_steps_seen), if `state` writes one.
std::optional<int64_t> WrittenOverflowCount(const std::vector<std::pair<std::string, Tensor>>& state) {
  for (const auto& [name, t] : state)
    if (name == "loss_scale/counters" && t.dtype == DType::I32 && t.data.size() == 3 * sizeof(int32_t)) {
      int32_t c[3];
      std::memcpy(c, t.data.data(), sizeof c);
      return c[2];
    }
  return std::nullopt;
}

}  // namespace

Status Model::WriteState(const std::vector<std::pair<std::string, Tensor>>& state) {
  SINKRT_RETURN_IF_ERROR(impl_->pipeline_stages > 1 ? WritePipelineState(state) : WriteRankState(state));
  if (const std::optional<int64_t> seen = WrittenOverflowCount(state)) impl_->overflow_steps_seen = *seen;
  return Status::Ok();
}

Status Model::WriteRankState(const std::vector<std::pair<std::string, Tensor>>& state) {
  std::map<std::string, const StateBuffer*> by_name;
  for (const StateBuffer& s : impl_->state) by_name[s.name] = &s;
  // Check everything before writing anything, so a bad entry leaves the
  // model as it was.
  std::vector<std::pair<const StateBuffer*, const Tensor*>> writes;
  for (const auto& [name, t] : state) {
    auto it = by_name.find(name);
    if (it == by_name.end())
      return NotFound("Model.WriteState: the model has no parameter or optimizer state '" + name + "'");
    const StateBuffer& s = *it->second;
    // Whole tensors, whatever the ranks hold: a checkpoint does not depend
    // on the strategy.
    const Shape& shape = WholeShape(s);
    if (t.dtype != s.dtype || t.shape != shape)
      return InvalidArgument("Model.WriteState: tensor '" + name + "' is " + DTypeName(t.dtype) + " " +
                             ShapeToString(t.shape) + ", the model's is " + DTypeName(s.dtype) + " " +
                             ShapeToString(shape));
    const uint64_t bytes = static_cast<uint64_t>(NumElements(shape)) * DTypeSize(s.dtype);
    if (t.data.size() != bytes)
      return InvalidArgument("Model.WriteState: tensor '" + name + "' holds " + std::to_string(t.data.size()) +
                             " bytes, its shape needs " + std::to_string(bytes));
    writes.emplace_back(&s, &t);
  }
  for (size_t r = 0; r < impl_->devices.size(); ++r)
    for (const auto& [s0, t] : writes) {
      const StateBuffer* s = s0;
      std::vector<uint8_t> part;
      ConstBytes bytes = t->bytes();
      if (impl_->sharded || impl_->state_sliced) {
        // Rank r's buffer of that name (same table order on every rank).
        const std::vector<StateBuffer>& state = impl_->RankState(static_cast<uint32_t>(r));
        const size_t i = static_cast<size_t>(s0 - impl_->state.data());
        if (i >= state.size() || state[i].name != s0->name)
          return Internal("Model.WriteState: rank " + std::to_string(r) + " has no tensor '" + s0->name + "'");
        s = &state[i];
        if (s->slice) {
          part = ExtractBlock(t->data.data(), BlockOf(*s->slice, s->shape, DTypeSize(s->dtype)));
          bytes = part;
        }
      }
      SINKRT_RETURN_IF_ERROR(impl_->devices[r]->WriteTensor(s->index, bytes),
                             "Model.WriteState: tensor '" + s->name + "'" +
                                 (impl_->devices.size() > 1 ? " on rank " + std::to_string(r) : ""));
    }
  return Status::Ok();
}

// A pipeline's state: each tensor to every replica of the stage that holds
// it, all checked before anything is written.
Status Model::WritePipelineState(const std::vector<std::pair<std::string, Tensor>>& state) {
  Impl& m = *impl_;
  std::multimap<std::string, const std::pair<uint32_t, StateBuffer>*> by_name;
  for (const auto& entry : m.stage_state) by_name.emplace(entry.second.name, &entry);
  std::vector<std::pair<const std::pair<uint32_t, StateBuffer>*, const Tensor*>> writes;
  for (const auto& [name, t] : state) {
    auto [it, end] = by_name.equal_range(name);
    if (it == end)
      return NotFound("Model.WriteState: the model has no parameter or optimizer state '" + name + "'");
    for (auto holder = it; holder != end; ++holder) writes.emplace_back(holder->second, &t);
    const StateBuffer& s = it->second->second;
    // Whole tensors, whatever the ranks hold: a checkpoint does not depend
    // on the strategy.
    const Shape& shape = WholeShape(s);
    if (t.dtype != s.dtype || t.shape != shape)
      return InvalidArgument("Model.WriteState: tensor '" + name + "' is " + DTypeName(t.dtype) + " " +
                             ShapeToString(t.shape) + ", the model's is " + DTypeName(s.dtype) + " " +
                             ShapeToString(shape));
    const uint64_t bytes = static_cast<uint64_t>(NumElements(shape)) * DTypeSize(s.dtype);
    if (t.data.size() != bytes)
      return InvalidArgument("Model.WriteState: tensor '" + name + "' holds " + std::to_string(t.data.size()) +
                             " bytes, its shape needs " + std::to_string(bytes));
  }
  // Data parallel: an entry stands for its stage's replicas too.
  const uint32_t per_stage = static_cast<uint32_t>(m.devices.size()) / static_cast<uint32_t>(m.pipeline_stages);
  const uint32_t copies = m.stage_sharded ? 1 : per_stage;
  for (const auto& [entry, t] : writes) {
    const StateBuffer& s = entry->second;
    std::vector<uint8_t> part;
    ConstBytes bytes = t->bytes();
    if (s.slice) {
      part = ExtractBlock(t->data.data(), BlockOf(*s.slice, s.shape, DTypeSize(s.dtype)));
      bytes = part;
    }
    for (uint32_t r = entry->first; r < entry->first + copies; ++r)
      SINKRT_RETURN_IF_ERROR(m.devices[r]->WriteTensor(s.index, bytes),
                             "Model.WriteState: tensor '" + s.name + "' on rank " + std::to_string(r));
  }
  return Status::Ok();
}

}  // namespace sinkrt::host
