// PlanJob: a JobSpec's checks (CheckJobSpec) and its batch arithmetic, the
// network built at the graph's batch, and the options Compile and Model take.
// The messages are sinkc's and sinkrun's, which call these.
#include "sinkrt/host/job_plan.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <utility>

#include "runtime/src/file_io.h"
#include "sinkrt/host/pipeline.h"
#include "sinkrt/host/shard_strategies.h"

namespace sinkrt::host {

int64_t SemiAutoGraphBatch(int64_t batch, int64_t data_parallel, bool full_batch) {
  return full_batch ? batch : batch * data_parallel;
}

int64_t AutoParallelGraphBatch(int64_t batch, int64_t devices, bool full_batch) {
  return full_batch ? batch : batch * devices;
}

int StrategyDevices(const ParallelContext& c) {
  return c.pipeline_stages > 1 ? c.device_num / c.pipeline_stages : c.device_num;
}

Status ApplyAutoParallelPlan(const AutoParallelPlan& plan, Graph& graph) {
  for (const OpPlanChoice& op : plan.ops) {
    if (op.strategy.empty()) continue;
    if (graph.FindOp(op.op) < 0)
      return NotFound("the searched op '" + op.op + "' is not in graph '" + graph.name() + "'");
    graph.Shard(op.op, op.strategy);
  }
  return graph.status();
}

Result<uint64_t> ParseByteSize(const std::string& text, const std::string& flag) {
  const std::string why = flag + " '" + text +
                          "': expected a positive number of bytes, optionally with a suffix KB, MB, GB (10^3, "
                          "10^6, 10^9) or KiB, MiB, GiB (2^10, 2^20, 2^30), e.g. 8GiB";
  size_t end = 0;
  while (end < text.size() && (std::isdigit(static_cast<unsigned char>(text[end])) || text[end] == '.')) ++end;
  const std::string number = text.substr(0, end);
  std::string suffix = text.substr(end);
  for (char& c : suffix) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (number.empty() || number == "." || number.find('.') != number.rfind('.')) return InvalidArgument(why);
  double scale = 0;
  if (suffix.empty() || suffix == "b")
    scale = 1;
  else if (suffix == "kb")
    scale = 1e3;
  else if (suffix == "mb")
    scale = 1e6;
  else if (suffix == "gb")
    scale = 1e9;
  else if (suffix == "kib")
    scale = 1024.0;
  else if (suffix == "mib")
    scale = 1024.0 * 1024;
  else if (suffix == "gib")
    scale = 1024.0 * 1024 * 1024;
  else
    return InvalidArgument(why);
  if (scale == 1 && number.find('.') != std::string::npos) return InvalidArgument(why);  // no fractional bytes
  const double bytes = std::floor(std::strtod(number.c_str(), nullptr) * scale);         // inf past double's range
  if (!(bytes >= 1) || bytes >= 18446744073709551616.0) return InvalidArgument(why);
  return static_cast<uint64_t>(bytes);
}

namespace {

bool Sharded(ParallelMode m) { return m == ParallelMode::SemiAutoParallel || m == ParallelMode::AutoParallel; }

std::string DevicesText(const JobSpec& s) {
  return s.devices_text.empty() ? "--devices " + std::to_string(s.devices) : s.devices_text;
}

std::string Joined(const std::vector<std::string>& items) {
  std::string s;
  for (const std::string& i : items) s += (s.empty() ? "" : ",") + i;
  return s;
}

// --stage-of's layers; none when it is empty (contiguous stages).
Result<std::vector<std::pair<std::string, int>>> StageOf(const JobSpec& s) {
  if (s.stage_of.empty()) return std::vector<std::pair<std::string, int>>{};
  return ParseStageOf(s.stage_of);
}

PipelineConfig PipelineOf(const JobSpec& s, std::vector<std::pair<std::string, int>> stage_of) {
  PipelineConfig p;
  p.stages = s.pipeline_stages;
  p.micro_size = s.micro_size.value_or(1);
  p.scheduler = s.pipeline_scheduler.value_or("1f1b");
  p.stage_of = std::move(stage_of);
  return p;
}

// Settings that belong to another mode: refused, so that none is silently
// ignored.
Status CheckModeSettings(const JobSpec& s) {
  const bool auto_parallel = s.mode == ParallelMode::AutoParallel;
  // The search sets every op's strategy; a preset or file would leave it
  // nothing to search (a graph file's own strategies are kept, as fixed).
  if (!s.strategy.empty() && auto_parallel)
    return InvalidArgument("--strategy " + s.strategy +
                           " does not apply to --parallel auto_parallel, which searches every op's strategy (ops "
                           "that carry one in a graph file keep it); give --parallel semi_auto_parallel to "
                           "compile a strategy as it is");
  if ((!s.strategy.empty() || !s.strategy_save.empty() || s.full_batch) && !Sharded(s.mode))
    return InvalidArgument(
        "--strategy, --strategy-save and --full-batch apply to --parallel semi_auto_parallel "
        "(--strategy-save and --full-batch to auto_parallel too)");
  const bool auto_only = s.search_mode || s.device_memory || !s.calibration.empty() || s.fully_use_devices;
  if (auto_only && !auto_parallel)
    return InvalidArgument(
        "--search-mode, --device-memory, --calibration and --fully-use-devices apply to --parallel auto_parallel");
  if (s.parallel_optimizer_config && !s.enable_parallel_optimizer)
    return InvalidArgument("--parallel-optimizer-config applies with --enable-parallel-optimizer");
  if (s.pipeline_stages == 1 && (s.micro_size || s.pipeline_scheduler || !s.stage_of.empty()))
    return InvalidArgument("--micro-size, --pipeline-scheduler and --stage-of apply with --pipeline-stages above 1");
  if (!s.stage_of.empty()) {
    SINKRT_RETURN_IF_ERROR(ParseStageOf(s.stage_of).status());
  }
  return Status::Ok();
}

// auto_parallel's own settings into `context`.
Status SetSearch(const JobSpec& s, ParallelContext& context) {
  const std::string mode = s.search_mode.value_or("dynamic_programming");
  if (mode != "dynamic_programming" && mode != "sharding_propagation")
    return InvalidArgument(
        "--search-mode " + mode + ": sinkrt searches with dynamic_programming or sharding_propagation" +
        (mode == "recursive_programming" ? " (MindSpore's recursive_programming is not implemented)" : ""));
  context.search_mode = mode;
  context.device_memory_capacity = s.device_memory;
  // The true reason: missing, or a directory or device in the way.
  if (Status st = s.calibration.empty() ? Status::Ok() : CheckRegularFile(s.calibration); !st.ok())
    return InvalidArgument("--calibration " + st.message() +
                           (st.code() == StatusCode::kNotFound ? " (write one with sinkrun calibrate)" : ""));
  context.calibration_file = s.calibration;
  context.fully_use_devices = s.fully_use_devices;
  return Status::Ok();
}

// A preset's name and device count need no graph: a mistake is the job's
// (a strategy file is read with the graph).
Status CheckStrategyName(const JobSpec& s, const ParallelContext& context) {
  if (IsStrategyPresetName(s.strategy)) {
    SINKRT_RETURN_IF_ERROR(PresetDataParallel(s.strategy, StrategyDevices(context)).status(),
                           "--strategy " + s.strategy);
    return Status::Ok();
  }
  if (Status st = s.strategy.empty() ? Status::Ok() : CheckRegularFile(s.strategy); !st.ok()) {
    // Something that is there but no file (a device, a directory) is named as what it is.
    if (st.code() != StatusCode::kNotFound) return InvalidArgument("--strategy " + st.message());
    return InvalidArgument("--strategy " + s.strategy +
                           ": neither a preset (data, model, or DPxMP such as 2x2) nor a strategy file");
  }
  return Status::Ok();
}

}  // namespace

Result<ParallelContext> CheckJobSpec(const JobSpec& s) {
  ParallelContext context;
  context.mode = s.mode;
  context.device_num = s.devices;
  context.gradients_mean = s.gradients_mean.value_or(kDefaultGradientsMean);
  context.parameter_broadcast = s.parameter_broadcast;
  if (s.comm_fusion) context.comm_fusion = *s.comm_fusion;
  SINKRT_RETURN_IF_ERROR(CheckModeSettings(s));
  context.full_batch = s.full_batch;
  context.pipeline_stages = s.pipeline_stages;
  context.pipeline_scheduler = s.pipeline_scheduler.value_or("1f1b");
  context.grad_accumulation_step = s.grad_accumulation;
  context.enable_parallel_optimizer = s.enable_parallel_optimizer;
  if (s.parallel_optimizer_config) context.parallel_optimizer_config = *s.parallel_optimizer_config;
  if (s.mode == ParallelMode::AutoParallel) SINKRT_RETURN_IF_ERROR(SetSearch(s, context));
  SINKRT_RETURN_IF_ERROR(context.Validate({ParallelMode::StandAlone, ParallelMode::DataParallel,
                                           ParallelMode::SemiAutoParallel, ParallelMode::AutoParallel}),
                         DevicesText(s) + ", --parallel " + ParallelModeName(s.mode));
  if (s.pipeline_stages > 1) {
    // MindSpore's pipeline rules that need no graph, so that a mistake is
    // the job's and is refused before a daemon starts; the compile checks
    // that the batch splits into the micro-batches.
    SINKRT_ASSIGN_OR_RETURN(auto stage_of, StageOf(s));
    SINKRT_RETURN_IF_ERROR(CheckPipelineConfig(PipelineOf(s, std::move(stage_of)), s.devices, 0),
                           "--pipeline-stages " + std::to_string(s.pipeline_stages) + ", --micro-size " +
                               std::to_string(s.micro_size.value_or(1)) +
                               (s.stage_of.empty() ? "" : ", --stage-of " + s.stage_of));
  }
  const bool dp_only = s.gradients_mean || s.parameter_broadcast || s.comm_fusion;
  if (dp_only && s.mode != ParallelMode::DataParallel)
    return InvalidArgument(
        "--gradients-mean, --parameter-broadcast and --comm-fusion apply to --parallel data_parallel");
  SINKRT_RETURN_IF_ERROR(CheckStrategyName(s, context));
  if (!s.recompute.empty() && (Sharded(s.mode) || s.pipeline_stages > 1))
    return InvalidArgument("--recompute runs under stand_alone and data_parallel without --pipeline-stages, not with " +
                           std::string(s.pipeline_stages > 1 ? "pipeline stages" : ParallelModeName(s.mode)));
  return context;
}

namespace {

Result<Graph> NetworkAt(const JobSpec& s, int64_t batch) {
  if (!s.network) return InvalidArgument("the job names no network (JobSpec::network)");
  SINKRT_ASSIGN_OR_RETURN(Graph g, s.network(batch));
  SINKRT_RETURN_IF_ERROR(g.status());
  return g;
}

// semi_auto_parallel: `batch` is one data-parallel replica's; the graph is
// the whole model at batch x the strategy's data-parallel degree (or at
// batch with full_batch, or with pipeline stages, where every rank reads the
// whole batch), its strategies set, loss included.
Status PlanSemiAuto(const JobSpec& s, JobPlan& plan) {
  SINKRT_ASSIGN_OR_RETURN(Graph replica, NetworkAt(s, s.batch));
  const bool whole_batch = s.full_batch || s.pipeline_stages > 1;
  SINKRT_ASSIGN_OR_RETURN(const int64_t dp, StrategyDataParallel(s.strategy, replica, plan.strategy_devices),
                          "--strategy " + s.strategy);
  plan.graph_batch = SemiAutoGraphBatch(s.batch, dp, whole_batch);
  // Model feeds the groups as DATA_PARALLEL feeds ranks (shard p of the
  // dataset's batches to group p); with full_batch every rank reads all.
  plan.data_groups = whole_batch ? 1 : dp;
  plan.device_batch = s.batch;
  if (plan.graph_batch == s.batch) {
    plan.network = std::move(replica);
  } else {
    SINKRT_ASSIGN_OR_RETURN(plan.network, NetworkAt(s, plan.graph_batch));
  }
  if (!s.strategy.empty()) {
    SINKRT_RETURN_IF_ERROR(ApplyShardStrategy(s.strategy, *plan.network, plan.strategy_devices),
                           "--strategy " + s.strategy);
  }
  return Status::Ok();
}

// auto_parallel: the whole network at batch x devices (data_parallel's
// global batch), searched once and every rank compiled from the search: the
// plan decides how many data-parallel groups share the batch.
Status PlanAutoParallel(const JobSpec& s, JobPlan& plan) {
  plan.graph_batch = AutoParallelGraphBatch(s.batch, s.devices, s.full_batch);
  SINKRT_ASSIGN_OR_RETURN(plan.network, NetworkAt(s, plan.graph_batch));
  plan.compile_options.predict_program = !plan.network->outputs().empty();
  SINKRT_ASSIGN_OR_RETURN(plan.searched, CompileJob(*plan.network, plan.compile_options, s.compile_cache));
  plan.data_groups = plan.searched->train_batch_shards();
  plan.device_batch = plan.graph_batch / plan.data_groups;  // one data-parallel group's
  return Status::Ok();
}

// What CompileJob and Model::Create are given.
Status FillOptions(const JobSpec& s, JobPlan& plan) {
  const ParallelContext& c = plan.context;
  CompileOptions& co = plan.compile_options;
  co.optimizer = s.optimizer;
  co.queue_capacity = s.queue_capacity;
  co.world_size = static_cast<uint32_t>(s.devices);
  co.grad_accumulation = c.grad_accumulation_step;
  co.amp_level = s.amp_level;
  co.loss_scale = s.loss_scale;
  co.eval_program = true;
  co.parallel_mode = c.mode;
  co.enable_parallel_optimizer = c.enable_parallel_optimizer;
  co.parallel_optimizer_config = c.parallel_optimizer_config;
  if (c.mode == ParallelMode::DataParallel) {
    co.gradients_mean = c.gradients_mean;
    co.parameter_broadcast = c.parameter_broadcast;
    co.comm_fusion = c.comm_fusion;
  }
  if (Sharded(c.mode)) co.full_batch = s.full_batch;
  if (c.mode == ParallelMode::AutoParallel) {
    co.search_mode = c.search_mode;
    co.fully_use_devices = c.fully_use_devices;
    co.device_memory = c.device_memory_capacity;
    co.calibration = c.calibration_file;
    co.search_transport = s.search_transport;
  }
  ModelOptions& mo = plan.model_options;
  mo.context = c;
  mo.queue_capacity = s.queue_capacity;
  mo.compile_cache = s.compile_cache;
  mo.amp_level = s.amp_level;
  mo.loss_scale_manager = s.loss_scale;
  if (c.pipeline_stages > 1) {
    SINKRT_ASSIGN_OR_RETURN(auto stage_of, StageOf(s));
    co.pipeline = PipelineOf(s, stage_of);
    mo.micro_size = co.pipeline.micro_size;
    mo.stage_of = std::move(stage_of);
  }
  return Status::Ok();
}

}  // namespace

Result<JobPlan> PlanJob(const JobSpec& s) {
  JobPlan plan;
  SINKRT_ASSIGN_OR_RETURN(plan.context, CheckJobSpec(s));
  if (Sharded(s.mode) && s.loss.kind != LossSpec::Kind::NetworkComputesLoss)
    return InvalidArgument(std::string(ParallelModeName(s.mode)) +
                           " shards the loss with the network: give a network that sets its loss (Graph::SetLoss) "
                           "and LossSpec::None()");
  if (Sharded(s.mode) && s.batch < 1)
    return InvalidArgument(std::string(ParallelModeName(s.mode)) + " needs a batched Input to split");
  plan.loss = s.loss;
  plan.strategy_devices = StrategyDevices(plan.context);
  SINKRT_RETURN_IF_ERROR(FillOptions(s, plan));
  // Data parallel: each rank reads its own batch; with pipeline stages the
  // ranks of a stage are the replicas.
  plan.graph_batch = s.batch;
  plan.device_batch = s.batch;
  plan.data_groups = s.devices / plan.context.pipeline_stages;
  if (s.mode == ParallelMode::SemiAutoParallel) {
    SINKRT_RETURN_IF_ERROR(PlanSemiAuto(s, plan));
  } else if (s.mode == ParallelMode::AutoParallel) {
    SINKRT_RETURN_IF_ERROR(PlanAutoParallel(s, plan));
  } else {
    SINKRT_ASSIGN_OR_RETURN(plan.network, NetworkAt(s, s.batch));
    for (const std::string& layer : s.recompute) plan.network->Recompute(layer);
    SINKRT_RETURN_IF_ERROR(plan.network->status(), "--recompute " + Joined(s.recompute));
  }
  if (s.sync_batch_norm && plan.network && plan.network->SetSyncBatchNorm(true) == 0)
    return InvalidArgument("--sync-bn: network '" + plan.network->name() + "' has no BatchNorm");
  // Pipelines do not build predict_step yet.
  plan.compile_options.predict_program = plan.context.pipeline_stages == 1 && !plan.network->outputs().empty();
  plan.global_batch = Sharded(s.mode) ? plan.graph_batch : plan.device_batch * plan.data_groups;
  plan.step_samples = plan.global_batch * plan.context.grad_accumulation_step;
  return plan;
}

Status SaveJobStrategies(const JobSpec& s, const JobPlan& plan) {
  if (s.strategy_save.empty() || !plan.network) return Status::Ok();
  const bool whole_batch = s.full_batch || plan.context.pipeline_stages > 1;
  Status saved;
  if (plan.searched && plan.searched->auto_parallel) {
    // The searched strategies, set on the graph as the compile set them.
    Graph planned = *plan.network;
    saved = ApplyAutoParallelPlan(*plan.searched->auto_parallel, planned);
    if (saved.ok()) saved = SaveShardStrategies(s.strategy_save, planned, plan.strategy_devices, whole_batch);
  } else {
    saved = SaveShardStrategies(s.strategy_save, *plan.network, plan.strategy_devices, whole_batch);
  }
  if (!saved.ok()) return InvalidArgument("--strategy-save: " + saved.message());
  return Status::Ok();
}

}  // namespace sinkrt::host
