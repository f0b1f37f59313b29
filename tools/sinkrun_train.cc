// sinkrun train: checks the job, builds the data pipeline and the model,
// trains, evaluates, and prints MindSpore's monitor lines (sinkrun_main.cc
// has the command line).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "parallel_flags.h"
#include "sinkrun.h"
#include "sinkrt/device/device_options.h"
#include "sinkrt/host/callbacks.h"
#include "sinkrt/host/communication.h"
#include "sinkrt/host/compiled_job.h"
#include "sinkrt/host/dataset.h"
#include "sinkrt/host/graph_file.h"
#include "sinkrt/host/model.h"
#include "sinkrt/host/model_zoo.h"
#include "sinkrt/host/report_callback.h"
#include "sinkrt/host/shard_strategies.h"
#include "runtime/src/env.h"
#include "runtime/src/file_io.h"

namespace sinkrt::tools {
namespace {

using host::Dataset;
using host::Transform;

constexpr int64_t kSyntheticTrainSize = 60000;  // Fashion-MNIST's split sizes
constexpr int64_t kSyntheticTestRatio = 6;
constexpr int64_t kImageSide = 28;

// --data, parsed.
struct DataChoice {
  bool synthetic = false;
  std::string dir = kFashionMnistDir;            // fashion-mnist
  int64_t synthetic_size = kSyntheticTrainSize;  // synthetic: training samples
  std::string describe() const {
    return synthetic ? "synthetic:" + std::to_string(synthetic_size) : "fashion-mnist:" + dir;
  }
};

std::optional<DataChoice> ParseData(const std::string& spec) {
  const size_t colon = spec.find(':');
  const std::string kind = spec.substr(0, colon);
  const std::optional<std::string> arg =
      colon == std::string::npos ? std::nullopt : std::optional<std::string>(spec.substr(colon + 1));
  DataChoice d;
  if (kind == "fashion-mnist") {
    if (arg) {
      if (arg->empty()) return std::nullopt;
      d.dir = *arg;
    }
    return d;
  }
  if (kind == "synthetic") {
    d.synthetic = true;
    if (arg) {
      size_t used = 0;
      try {
        d.synthetic_size = std::stoll(*arg, &used);
      } catch (const std::exception&) {
        return std::nullopt;
      }
      if (used != arg->size() || d.synthetic_size < 1) return std::nullopt;
    }
    return d;
  }
  return std::nullopt;
}

// `usage`: "train" or "test".
Result<Dataset> RawSplit(const DataChoice& data, const std::string& usage) {
  const bool train = usage == "train";
  Dataset d = !data.synthetic ? Dataset::Mnist(data.dir, usage)
              : train ? Dataset::SyntheticImages(data.synthetic_size, 0)
                      : Dataset::SyntheticImages(std::max<int64_t>(1, data.synthetic_size / kSyntheticTestRatio), 1);
  if (!d.status().ok()) return d.status();
  return d;
}

// The network's input pipeline on one split. `shuffle_seed` empty: in file
// order (evaluation).
// `flat`: images as [784] (an MLP), else [1, 28, 28] (NCHW, a CNN).
Result<Dataset> Pipeline(const Dataset& raw, bool flat, int64_t batch, std::optional<uint64_t> shuffle_seed,
                         bool drop_remainder) {
  Dataset d = raw.Map("image", {Transform::Rescale(1.0 / 255.0), flat ? Transform::Reshape({kImageSide * kImageSide})
                                                                      : Transform::HWC2CHW()});
  for (const host::ColumnSpec& c : raw.output_columns())
    if (c.name == "label" && c.dtype != DType::I32) d = d.Map("label", {Transform::TypeCast(DType::I32)});
  if (shuffle_seed) d = d.Shuffle(*shuffle_seed);
  d = d.Batch(batch, drop_remainder);
  if (!d.status().ok()) return d.status();
  return d;
}

Result<host::OptimizerSpec> Optimizer(const TrainFlags& f) {
  return host::MakeOptimizer(f.optimizer, static_cast<float>(f.lr), static_cast<float>(f.momentum));
}

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

std::string Fixed1(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

std::string OptimizerText(const host::OptimizerSpec& o) {
  std::string s = std::string(host::OptimizerKindName(o.kind)) + " (lr " + Num(o.learning_rate);
  if (o.kind == host::OptimizerKind::Momentum) s += ", momentum " + Num(o.momentum);
  return s + ")";
}

// What the network reads per batch: a graph's Inputs in creation order.
std::vector<host::ColumnSpec> GraphInputs(const host::Graph& g) {
  std::vector<host::ColumnSpec> out;
  for (const host::TensorInfo& t : g.tensors())
    if (t.kind == host::TensorKind::Input) out.push_back({t.name, t.dtype, t.shape});
  return out;
}

std::string ColumnsText(const std::vector<host::ColumnSpec>& cols) {
  std::string s;
  for (const auto& c : cols) s += (s.empty() ? "" : ", ") + c.name + " " + DTypeName(c.dtype) + " " + ShapeToString(c.shape);
  return s;
}

// How sinkrun's image pipeline must shape the network's "image" input (per
// batch, batch first): flat [B, 784] or NCHW [B, 1, 28, 28]; empty when the
// network reads something this pipeline cannot produce.
std::optional<bool> FlatImages(const std::vector<host::ColumnSpec>& cols) {
  for (const auto& c : cols) {
    if (c.name != "image" || c.dtype != DType::F32) continue;
    if (c.shape.size() == 2 && c.shape[1] == kImageSide * kImageSide) return true;
    if (c.shape == Shape{c.shape.empty() ? 0 : c.shape[0], 1, kImageSide, kImageSide}) return false;
  }
  return std::nullopt;
}

// The streams' queue must be what the pipeline feeds: every column the
// streams read, by name, with the pipeline's dtype and batch shape.
Status CheckColumns(const std::vector<host::ColumnSpec>& want, const std::vector<host::ColumnSpec>& have) {
  for (const auto& w : want) {
    auto it = std::find_if(have.begin(), have.end(), [&](const host::ColumnSpec& h) { return h.name == w.name; });
    if (it == have.end())
      return InvalidArgument("the network reads column '" + w.name + "', which the data does not have (it has " +
                             ColumnsText(have) + ")");
    if (it->dtype != w.dtype || it->shape != w.shape)
      return InvalidArgument("the network reads '" + w.name + "' as " + DTypeName(w.dtype) + " " +
                             ShapeToString(w.shape) + ", the data gives " + DTypeName(it->dtype) + " " +
                             ShapeToString(it->shape));
  }
  return Status::Ok();
}

// Whether two paths name one file, whether or not it exists yet.
bool SameFile(const std::string& a, const std::string& b) {
  namespace fs = std::filesystem;
  std::error_code ea, eb;
  const fs::path pa = fs::weakly_canonical(fs::absolute(a, ea), ea), pb = fs::weakly_canonical(fs::absolute(b, eb), eb);
  if (ea || eb) return a == b;
  return pa == pb;
}

// --save-checkpoint writes after training: whatever would stop it there
// (no such directory, no permission, a read-only filesystem, a directory in
// the way) is found now, by creating and removing a file where the
// checkpoint's temporary will go.
Status CheckCheckpointPath(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  std::error_code ec;
  if (fs::is_directory(target, ec)) return InvalidArgument("'" + path + "' is a directory");
  const fs::path dir = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  if (!fs::is_directory(dir, ec))
    return NotFound("'" + path + "': the directory '" + dir.string() + "' does not exist");
  const fs::path probe = dir / ("." + target.filename().string() + ".probe." + std::to_string(::getpid()));
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0)
    return PermissionDenied("'" + path + "': cannot create a file in '" + dir.string() + "': " + std::strerror(errno));
  ::close(fd);
  ::unlink(probe.c_str());
  return Status::Ok();
}

double SecondsSince(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

host::Graph ZooNetwork(const std::string& model, int64_t batch, uint64_t seed) {
  return model == "mlp"   ? host::MakeMlpNetwork(batch, {784, 512, 256, 10}, seed)
         : model == "vit" ? host::MakeVitNetwork(batch, seed)
                          : host::MakeLeNetNetwork(batch, seed);
}

// The network of a semi_auto_parallel run at graph batch `batch`, with its
// loss: a shard strategy covers the loss too (its split of the labels is
// each rank's share of the batch), so a zoo network gets here the loss
// Model::Create would append, MindSpore's SoftmaxCrossEntropyWithLogits
// (sparse=True) against "label", built by the same calls.
Result<host::Graph> NetworkWithLoss(const TrainFlags& f, int64_t batch) {
  if (!f.graph.empty()) {
    host::GraphLoadOptions load;
    load.batch = batch;
    SINKRT_ASSIGN_OR_RETURN(host::GraphFile file, host::LoadGraph(f.graph, load), "--graph");
    return std::move(file.graph);
  }
  host::Graph g = ZooNetwork(f.model, batch, f.seed);
  if (g.status().ok() && !g.outputs().empty())
    g.SetLoss(g.SparseSoftmaxCrossEntropy(g.outputs().front(), g.Input("label", {batch}, DType::I32)));
  SINKRT_RETURN_IF_ERROR(g.status(), "--model " + f.model);
  return g;
}

// The measured step time: per epoch its wall time over its steps, and of
// those the median, leaving out the first epoch when there are more (it
// pays for the devices' first touches of their arenas).
class StepTimer : public host::Callback {
 public:
  static constexpr const char* kMeasure = "median epoch wall time per step, the first epoch left out when there are more";
  Status on_train_epoch_end(host::RunContext& run) override {
    const host::CallbackParams& p = run.original_args();
    if (p.batch_num > 0) ms_.push_back(p.epoch_ms / static_cast<double>(p.batch_num));
    return Status::Ok();
  }
  double step_ms() const {
    std::vector<double> v(ms_.size() > 1 ? ms_.begin() + 1 : ms_.begin(), ms_.end());
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
  }

 private:
  std::vector<double> ms_;
};

// "AllReduce: bucket 0 (1.9 MiB) two-level (...); bucket 1 (64.0 KiB) ring":
// the schedule rank 0's device runs each of train_step's AllReduces with.
std::string AllReduceLine(const std::vector<AllReduceBucket>& buckets) {
  std::string line = "AllReduce:";
  for (size_t i = 0; i < buckets.size(); ++i) {
    const double bytes = static_cast<double>(buckets[i].bytes);
    line += (i ? "; bucket " : " bucket ") + std::to_string(i) + " (" +
            (bytes < 1048576 ? Fixed1(bytes / 1024) + " KiB) " : Fixed1(bytes / 1048576) + " MiB) ") +
            buckets[i].algorithm;
  }
  return line;
}

}  // namespace

int Train(const TrainFlags& flags, const CLI::App& cmd, const char* argv0, Clock::time_point start) {
  TrainFlags f = flags;
  // A timeout such as SINKRT_GETNEXT_TIMEOUT_MS=-5 would otherwise be
  // skipped silently by the readers, which have no error path.
  if (Status env = CheckEnvironment(); !env.ok()) return Usage(env.message());
  // Started by a launcher as one rank of several (mpirun, srun, sinkrun
  // launch -- ..., RANK_ID/RANK_SIZE): this process drives its own rank's
  // device and feeds its own shard; the others run the same command line.
  auto launched = LaunchRankFromEnvironment();
  if (!launched.ok()) return Usage(launched.status().message());
  // A rank without a world size would train as a single process, silently.
  if (launched->rank && !launched->world_size)
    return Usage(launched->source + "=\"" + std::to_string(*launched->rank) + "\" is set but " +
                 launched->size_source + " is not: set " + launched->size_source + " to the number of ranks, or unset " +
                 launched->source);
  if (launched->world_size.value_or(1) > 1) {
    f.per_rank = *launched;
    RankPrefix() = "rank " + std::to_string(launched->rank.value_or(0)) + ": ";
  }
  // The one process of a job, or rank 0 of one process per rank: it prints
  // the training lines and writes the report and the checkpoint (replicas
  // hold equal parameters); the other ranks print only their errors.
  const bool writer = !f.per_rank || f.per_rank->rank.value_or(0) == 0;
  // Flags whose meaning depends on others, checked together so that no
  // combination is silently ignored.
  const bool launch_sinkd = cmd.count("--devices") > 0;
  if (f.per_rank && launch_sinkd)
    return Usage("--devices starts daemons for one process that drives every rank, but this process is rank " +
                 std::to_string(*f.per_rank->rank) + " of " + std::to_string(*f.per_rank->world_size) + " (" +
                 f.per_rank->source + "): each rank's process drives its own device");
  if (launch_sinkd && !f.rank_table.empty())
    return Usage("--devices and --rank-table contradict each other: the rank table names the devices");
  if (!f.token.empty() && !launch_sinkd && f.rank_table.empty() && f.streams.empty() && !f.per_rank)
    return Usage("--token applies to sinkd (--devices or --rank-table) and to one process per rank, not to the "
                 "in-process device of a single process");
  if (f.tls.enabled() && !launch_sinkd && f.rank_table.empty() && !f.per_rank)
    return Usage("--tls-* apply to sinkd (--devices or --rank-table) and to one process per rank's master, not to "
                 "an in-process device");
  const bool rank_tls = f.per_rank && (f.tls.enabled() || TlsConfig::FromEnvironment().enabled());
  if (f.tls_plain_peers && !(launch_sinkd && f.tls.enabled()) && !rank_tls)
    return Usage("--tls-plain-peers applies to TLS (--tls-cert, --tls-key, --tls-ca): to the daemons --devices starts, "
                 "or to the in-process devices of one process per rank");
  if (launch_sinkd && f.tls.enabled() && (f.tls.cert_file.empty() || f.tls.ca_file.empty()))
    return Usage("--devices with TLS starts daemons that need a certificate and a CA: give --tls-cert, --tls-key "
                 "and --tls-ca");
  if (!f.sinkd.empty() && !launch_sinkd && f.streams.empty()) return Usage("--sinkd applies to --devices, which starts a sinkd");
  if (f.threads > 0 && !f.rank_table.empty())
    return Usage("--threads: the daemons of a rank table (" + f.rank_table_source +
                 ") run with the --threads they were started with");
  for (const auto& [flag, value] : {std::pair<const char*, const std::string&>{"--report", f.report},
                                    {"--save-checkpoint", f.save_checkpoint}})
    if (cmd.count(flag) && value.empty()) return Usage(std::string(flag) + " needs a file name, got ''");
  if (cmd.count("--profile") && f.profile.empty()) return Usage("--profile needs a directory, got ''");
  for (const auto& [flag, value] : {std::pair<const char*, const std::string&>{"--resume", f.resume},
                                    {"--checkpoint-dir", f.checkpoint_dir}})
    if (cmd.count(flag) && value.empty()) return Usage(std::string(flag) + " needs a path, got ''");
  if (cmd.count("--checkpoint-epochs") && f.checkpoint_dir.empty())
    return Usage("--checkpoint-epochs applies to --checkpoint-dir DIR");
  for (const char* flag : {"--profile-steps", "--profile-every", "--profile-keep"})
    if (cmd.count(flag) && f.profile.empty()) return Usage(std::string(flag) + " applies to --profile DIR");
  host::ProfilerOptions profile_options;
  if (!f.profile_steps.empty())
    if (Status st = ParseProfileSteps(f.profile_steps, &profile_options); !st.ok()) return Usage(st.message());
  if (!f.report.empty() && !f.save_checkpoint.empty() && SameFile(f.report, f.save_checkpoint))
    return Usage("--report and --save-checkpoint name the same file (" + f.save_checkpoint +
                 "): one would overwrite the other");
  // The devices compute in f32: a value that underflows to 0 or overflows
  // to inf there would train with lr 0 or fail only at compile.
  if (const float lr = static_cast<float>(f.lr); !(lr > 0) || !std::isfinite(lr))
    return Usage("--lr must be a positive number within f32's range [" + Num(std::numeric_limits<float>::denorm_min()) +
                 ", " + Num(std::numeric_limits<float>::max()) + "], got " + Num(f.lr));
  if (const int cores = device::AvailableCores(); f.threads > cores)
    return Usage("--threads " + std::to_string(f.threads) + ": this machine has " + std::to_string(cores) +
                 (cores == 1 ? " core" : " cores") + " this process may use");
  if (!(f.momentum >= 0 && f.momentum < 1))
    return Usage("--momentum must be in [0, 1), got " + Num(f.momentum));
  if (f.sink_size == 0 || f.sink_size < -1)
    return Usage("--sink-size must be -1 (a whole pass per epoch) or positive, got " + std::to_string(f.sink_size));
  if (f.no_sink && cmd.count("--sink-size"))
    return Usage("--sink-size and --no-sink contradict each other: without sinking every step is its own request");
  if (cmd.count("--momentum") && f.optimizer != "momentum")
    return Usage("--momentum applies to --optimizer momentum, not " + f.optimizer);
  std::optional<DataChoice> data = ParseData(f.data);
  if (!data)
    return Usage("--data '" + f.data + "': expected fashion-mnist, fashion-mnist:DIR, synthetic or synthetic:N");
  if (cmd.count("--model") + !f.graph.empty() + !f.streams.empty() > 1)
    return Usage("--model, --graph and --streams each name the network: give one");
  const bool precompiled = !f.streams.empty();
  if (precompiled) {
    for (const char* baked : {"--optimizer", "--lr", "--momentum", "--parallel", "--gradients-mean",
                              "--parameter-broadcast", "--comm-fusion", "--strategy", "--strategy-save",
                              "--full-batch", "--search-mode", "--device-memory", "--calibration",
                              "--fully-use-devices", "--pipeline-stages", "--micro-size", "--pipeline-scheduler",
                              "--stage-of", "--enable-parallel-optimizer", "--parallel-optimizer-config"})
      if (cmd.count(baked))
        return Usage(std::string(baked) + " is compiled into the streams of --streams " + f.streams +
                     " (see its manifest.json): recompile with sinkc to change it");
  }
  std::optional<RankTable> table;
  if (!f.rank_table.empty()) {
    auto loaded = LoadRankTable(f.rank_table);
    if (!loaded.ok()) return Failure(f.rank_table_source + ": " + loaded.status().message());
    table = std::move(loaded).value();
  }
  if (f.per_rank && table && table->size() != *f.per_rank->world_size)
    return Usage(f.rank_table_source + " has " + Counted(static_cast<int64_t>(table->size()), "rank") + ", but " +
                 f.per_rank->source + " puts this process in a world of " + std::to_string(*f.per_rank->world_size));
  int devices = f.per_rank ? static_cast<int>(*f.per_rank->world_size)
                : table   ? static_cast<int>(table->size())
                          : f.devices;
  bool launch = launch_sinkd;

  // The network: its inputs (per batch), its batch and its optimizer.
  std::optional<host::CompiledJob> job;
  std::optional<host::GraphFile> graph_file;
  std::string network = f.model;
  std::vector<host::ColumnSpec> inputs;
  int64_t batch = f.batch;
  auto optimizer = Optimizer(f);
  if (!optimizer.ok()) return Usage("--optimizer: " + optimizer.status().message());
  if (precompiled) {
    auto read = host::ReadCompiledJob(f.streams);
    if (!read.ok()) return Failure("--streams: " + read.status().message());
    job = std::move(read).value();
    const int n = static_cast<int>(job->world_size());
    if (table && devices != n)
      return Usage(f.rank_table_source + " has " + Counted(devices, "rank") + ", but the streams in " +
                   f.streams + " were compiled for " + std::to_string(n));
    if (launch && devices != n)
      return Usage("--devices " + std::to_string(devices) + ": the streams in " + f.streams + " were compiled for " +
                   std::to_string(n) + (n == 1 ? " rank" : " ranks"));
    // Several ranks need as many devices: local daemons unless a rank table names them.
    if (!table && !f.per_rank && n > 1) launch = true;
    devices = n;
    inputs = job->train_columns();
    network = "'" + job->network_name + "' (streams " + f.streams + ")";
    *optimizer = job->options.optimizer;
  } else if (!f.graph.empty()) {
    host::GraphLoadOptions load;
    if (cmd.count("--batch")) load.batch = f.batch;
    auto loaded = host::LoadGraph(f.graph, load);
    if (!loaded.ok()) return Failure("--graph: " + loaded.status().message());
    graph_file = std::move(loaded).value();
    inputs = GraphInputs(graph_file->graph);
    network = "'" + graph_file->graph.name() + "' (" + f.graph + ")";
    if (!cmd.count("--optimizer") && graph_file->optimizer) {
      // The graph's optimizer, whole: its own lr and momentum, not the flags'.
      for (const char* tuning : {"--lr", "--momentum"})
        if (cmd.count(tuning))
          return Usage(std::string(tuning) + " does not apply to the optimizer of --graph " + f.graph + " (" +
                       OptimizerText(*graph_file->optimizer) + "): give --optimizer to replace it");
      *optimizer = *graph_file->optimizer;
    }
  }
  if (launch) {
    // Before any daemon is forked. Streams from sinkc know their arena;
    // a network compiled here is compiled on the devices' behalf after
    // they start, so only the daemons' own memory is counted for it.
    uint64_t arena_bytes = 0;
    if (job)
      for (const host::CompiledStream& s : job->ranks) arena_bytes = std::max(arena_bytes, s.report.arena_bytes);
    if (Status fits = CheckLocalDevices(devices, arena_bytes); !fits.ok())
      return Usage((job && !launch_sinkd ? "--streams " + f.streams : std::string("--devices")) + ": " +
                   fits.message());
  }
  bool flat = f.model != "lenet";  // the MLP and the ViT read [B, 784]
  if (job || graph_file) {
    if (inputs.empty() || inputs[0].shape.empty())
      return Failure(network + " reads no batched input (its inputs: " + ColumnsText(inputs) + ")");
    const int64_t compiled_batch = inputs[0].shape[0];
    if (job && cmd.count("--batch") && f.batch != compiled_batch)
      return Usage("--batch " + std::to_string(f.batch) + ": the streams in " + f.streams + " were compiled for batch " +
                   std::to_string(compiled_batch) + " per rank");
    batch = compiled_batch;
    const std::optional<bool> layout = FlatImages(inputs);
    if (!layout)
      return Failure(network + " reads " + ColumnsText(inputs) +
                     "; sinkrun's image data gives 'image' f32 [B, 784] or [B, 1, 28, 28] and 'label' i32 [B]");
    flat = *layout;
  }

  // MindSpore's parallel context and its checks: more than one device
  // needs data_parallel.
  host::ParallelContext context;
  if (job) {
    context.mode = job->options.parallel_mode;
    context.device_num = devices;
    context.gradients_mean = job->options.gradients_mean;
    context.parameter_broadcast = job->options.parameter_broadcast;
    context.comm_fusion = job->options.comm_fusion;
    context.pipeline_stages = job->options.pipeline.stages;
    context.pipeline_scheduler = job->options.pipeline.scheduler;
    context.grad_accumulation_step = job->options.grad_accumulation;
    context.enable_parallel_optimizer = job->options.enable_parallel_optimizer;
    context.parallel_optimizer_config = job->options.parallel_optimizer_config;
  } else {
    auto parsed = tools::ParseParallelFlags(
        {.parallel = f.parallel,
         .devices = devices,
         .devices_flag = f.per_rank ? f.per_rank->source + " (a world of " + Counted(devices, "rank") + ")"
                         : table      ? f.rank_table_source + " (" + Counted(devices, "rank") + ")"
                                      : "--devices " + std::to_string(devices),
         .gradients_mean = f.gradients_mean,
         .gradients_mean_given = cmd.count("--gradients-mean") > 0,
         .parameter_broadcast = f.parameter_broadcast,
         .comm_fusion = f.comm_fusion,
         .strategy = f.strategy,
         .strategy_save = f.strategy_save,
         .full_batch = f.full_batch,
         .search_mode = f.search_mode,
         .search_mode_given = cmd.count("--search-mode") > 0,
         .device_memory = f.device_memory,
         .calibration = f.calibration,
         .fully_use_devices = f.fully_use_devices,
         .pipeline_stages = f.pipeline_stages,
         .micro_size = f.micro_size,
         .micro_size_given = cmd.count("--micro-size") > 0,
         .pipeline_scheduler = f.pipeline_scheduler,
         .pipeline_scheduler_given = cmd.count("--pipeline-scheduler") > 0,
         .stage_of = f.stage_of,
         .grad_accumulation = f.grad_accumulation,
         .enable_parallel_optimizer = f.enable_parallel_optimizer,
         .parallel_optimizer_config = f.parallel_optimizer_config});
    if (!parsed.ok()) return Usage(parsed.status().message());
    context = *parsed;
    if (!f.recompute.empty() && (context.mode == host::ParallelMode::SemiAutoParallel ||
                                 context.mode == host::ParallelMode::AutoParallel || context.pipeline_stages > 1))
      return Usage("--recompute runs under stand_alone and data_parallel without --pipeline-stages, not with " +
                   std::string(context.pipeline_stages > 1 ? "pipeline stages" : host::ParallelModeName(context.mode)));
    // The compile would refuse it too, but only once the daemons run.
    if (context.pipeline_stages > 1 && batch % f.micro_size != 0)
      return Usage("batch " + std::to_string(batch) + " (one replica's) does not split into --micro-size " +
                   std::to_string(f.micro_size) + " equal micro-batches");
  }

  // SEMI_AUTO_PARALLEL: `batch` is one data-parallel replica's; the graph
  // is the whole model at batch x the strategy's data-parallel degree (or
  // at batch with --full-batch), its strategies set here, loss included.
  const bool semi_auto = !job && context.mode == host::ParallelMode::SemiAutoParallel;
  // Streams compiled under semi_auto_parallel: their queues say how many
  // data-parallel groups share the batch (rank 0's rows of the global batch).
  const bool semi_auto_streams = job && context.mode == host::ParallelMode::SemiAutoParallel;
  int64_t graph_batch = batch;
  int64_t data_groups = devices;  // how many ways the dataset's batches are sharded over the ranks
  // Pipeline stages: the ranks of a stage are the replicas; a pipeline of
  // one rank per stage reads every batch.
  if (context.pipeline_stages > 1) data_groups = devices / context.pipeline_stages;
  if (semi_auto_streams) {
    data_groups = job->train_batch_shards();
    graph_batch = batch * data_groups;
  }
  std::optional<host::Graph> sharded;
  if (semi_auto) {
    auto replica = NetworkWithLoss(f, batch);
    if (!replica.ok()) return Failure(replica.status().message());
    inputs = GraphInputs(*replica);  // what one replica's batch holds: what the pipeline makes
    // Pipeline stages: the strategy spans one stage's ranks, and every rank
    // reads the whole batch (docs/guide/pipeline.md), which is --batch.
    const int strategy_devices = StrategyDevices(context);
    const bool whole_batch = f.full_batch || context.pipeline_stages > 1;
    auto dp = host::StrategyDataParallel(f.strategy, *replica, strategy_devices);
    if (!dp.ok()) return Failure("--strategy " + f.strategy + ": " + dp.status().message());
    graph_batch = SemiAutoGraphBatch(batch, *dp, whole_batch);
    // Model feeds the groups as DATA_PARALLEL feeds ranks (shard p of the
    // dataset's batches to group p); with full_batch every rank reads all.
    data_groups = whole_batch ? 1 : *dp;
    auto whole = NetworkWithLoss(f, graph_batch);
    if (!whole.ok()) return Failure(whole.status().message());
    if (!f.strategy.empty()) {
      Status applied = host::ApplyShardStrategy(f.strategy, *whole, strategy_devices);
      if (!applied.ok()) return Failure("--strategy " + f.strategy + ": " + applied.message());
    }
    if (!f.strategy_save.empty()) {
      Status saved = host::SaveShardStrategies(f.strategy_save, *whole, strategy_devices, whole_batch);
      if (!saved.ok()) return Failure("--strategy-save: " + saved.message());
    }
    sharded = std::move(whole).value();
  }

  // AUTO_PARALLEL: the whole network at --batch x devices (data_parallel's
  // global batch), searched once and compiled for every rank here, before
  // any device starts: the plan decides how many data-parallel groups share
  // the batch, and so the batch the pipeline makes.
  host::AmpLevel amp_level = host::AmpLevel::O0;
  if (!f.amp_level.empty()) {
    auto amp = host::ParseAmpLevel(f.amp_level);
    if (!amp.ok()) return Usage("--amp-level: " + amp.status().message());
    amp_level = *amp;
  } else if (job) {
    amp_level = job->options.amp_level;  // sinkc's streams carry theirs
  }
  auto loss_scale = host::ParseLossScaleManager(f.loss_scale);
  if (!loss_scale.ok()) return Usage("--loss-scale-manager: " + loss_scale.status().message());
  if (job && !loss_scale->enabled()) *loss_scale = job->options.loss_scale;
  const bool auto_parallel = !job && context.mode == host::ParallelMode::AutoParallel;
  std::optional<host::CompiledJob> searched;
  const int64_t device_batch = batch;  // --batch, or a --graph file's own
  if (auto_parallel) {
    graph_batch = AutoParallelGraphBatch(batch, devices, f.full_batch);
    auto whole = NetworkWithLoss(f, graph_batch);
    if (!whole.ok()) return Failure(whole.status().message());
    // What Model::Create would compile with (MS_DATASET_SINK_QUEUE included).
    auto capacity = host::SinkQueueCapacity(host::ModelOptions{}.queue_capacity);
    if (!capacity.ok()) return Usage(capacity.status().message());
    host::CompileOptions co;
    co.optimizer = *optimizer;
    co.queue_capacity = *capacity;
    co.world_size = static_cast<uint32_t>(devices);
    co.eval_program = true;
    co.predict_program = !whole->outputs().empty();
    co.parallel_mode = host::ParallelMode::AutoParallel;
    co.full_batch = f.full_batch;
    co.search_mode = context.search_mode;
    co.fully_use_devices = context.fully_use_devices;
    co.device_memory = context.device_memory_capacity;
    co.calibration = context.calibration_file;
    co.amp_level = amp_level;
    co.loss_scale = *loss_scale;
    co.enable_parallel_optimizer = context.enable_parallel_optimizer;
    co.parallel_optimizer_config = context.parallel_optimizer_config;
    // The daemons of one host talk over shared memory; a rank table that
    // spans hosts puts TCP links in every ring.
    if (table) {
      for (const RankEntry& e : table->ranks)
        if (e.address.host != table->ranks.front().address.host) co.search_transport = "tcp";
    }
    auto compiled = host::CompileJob(*whole, co, host::CompileCacheDirFromEnvironment());
    if (!compiled.ok()) return Failure(network + ": " + compiled.status().message());
    data_groups = compiled->train_batch_shards();
    batch = graph_batch / data_groups;  // one data-parallel group's
    inputs = GraphInputs(*whole);       // what the pipeline makes: the group's batch
    for (host::ColumnSpec& c : inputs)
      if (!c.shape.empty()) c.shape[0] = batch;
    if (!f.strategy_save.empty()) {
      host::Graph planned = *whole;
      Status saved = ApplyAutoParallelPlan(*compiled->auto_parallel, planned);
      if (saved.ok()) saved = host::SaveShardStrategies(f.strategy_save, planned, devices, f.full_batch);
      if (!saved.ok()) return Failure("--strategy-save: " + saved.message());
    }
    searched = std::move(compiled).value();
  }

  // Data first: a missing directory or a corrupt file ends the run here,
  // naming the file, before any compilation.
  auto train_raw = RawSplit(*data, "train");
  if (!train_raw.ok()) return Failure("--data " + data->describe() + ": " + train_raw.status().message());
  auto test_raw = RawSplit(*data, "test");
  if (!test_raw.ok()) return Failure("--data " + data->describe() + ": " + test_raw.status().message());
  auto train_data = Pipeline(*train_raw, flat, batch, f.seed, /*drop_remainder=*/true);
  if (!train_data.ok()) return Failure("training pipeline: " + train_data.status().message());
  auto test_data = Pipeline(*test_raw, flat, batch, std::nullopt, /*drop_remainder=*/false);
  if (!test_data.ok()) return Failure("test pipeline: " + test_data.status().message());
  const int64_t train_samples = train_raw->get_dataset_size();
  const int64_t batches = train_data->get_dataset_size();
  if (batches < 1)
    return Usage("--batch " + std::to_string(batch) + " is larger than the " +
                 Counted(train_samples, "training sample"));
  if (job || graph_file || semi_auto || auto_parallel) {
    Status matches = CheckColumns(inputs, train_data->output_columns());
    if (!matches.ok()) return Failure(network + " does not match --data " + data->describe() + ": " + matches.message());
  }
  if (!f.save_checkpoint.empty() && writer) {
    Status writable = CheckCheckpointPath(f.save_checkpoint);
    if (!writable.ok()) return Failure("--save-checkpoint " + writable.message());
  }
  // The directories the run writes into, checked as --save-checkpoint is:
  // a bad one must not cost the trained model (issue 39).
  if (!f.profile.empty())
    if (Status st = CheckDirectoryWritable(f.profile); !st.ok()) return Failure("--profile: " + st.message());
  if (!f.checkpoint_dir.empty() && writer)
    if (Status st = CheckDirectoryWritable(f.checkpoint_dir); !st.ok())
      return Failure("--checkpoint-dir: " + st.message());

  // Each rank (each data-parallel group under semi_auto_parallel) takes
  // every data_groups-th sample: a pass has this many steps.
  const int64_t rank_batches =
      data_groups > 1 ? train_data->ShardBelowBatch(data_groups, 0).get_dataset_size() : batches;
  if (data_groups > 1 && rank_batches < 1)
    return Usage("--batch " + std::to_string(batch) + " on " + std::to_string(data_groups) +
                 (semi_auto || auto_parallel ? " data-parallel groups" : " devices") + " needs more than the " +
                 Counted(train_samples, "training sample"));

  // Gradient accumulation: a step takes K batches (of each rank's).
  const int64_t per_step = context.grad_accumulation_step;
  const int64_t pass_steps = (data_groups > 1 ? rank_batches : batches) / per_step;
  if (pass_steps < 1)
    return Usage("--grad-accumulation " + std::to_string(per_step) + " needs that many batches of --batch " +
                 std::to_string(batch) + " per pass, but a pass has " +
                 std::to_string(data_groups > 1 ? rank_batches : batches) + " batches" +
                 (data_groups > 1 ? " per rank" : ""));
  // The report file is created last, so that a refused run leaves none.
  std::unique_ptr<host::ReportCallback> report;
  if (!f.report.empty() && writer) {
    auto r = host::ReportCallback::Create(f.report);
    if (!r.ok()) return Failure("--report: " + r.status().message());
    report = std::move(r).value();
  }

  // One process per rank: every rank meets at the master before any
  // device opens, so that a rank that never starts is named now.
  if (f.per_rank) {
    host::InitOptions init;
    init.token = f.token;
    init.tls = f.tls;
    if (Status joined = host::init(init); !joined.ok()) return Failure(joined.message());
    // The launcher's terminal is shared: only rank 0 prints the training.
    if (!writer && !std::freopen("/dev/null", "w", stdout)) return Failure("cannot silence stdout");
  }
  // Last of the checks: starting or reaching a daemon is the costliest.
  auto opened = OpenDevices(f, launch, devices, table, argv0);
  if (!opened.ok()) return Failure(opened.status().message());
  TrainDevices& dev = *opened;

  const bool sink = !f.no_sink;
  const int64_t steps_per_epoch = sink && f.sink_size > 0 ? f.sink_size : pass_steps;
  const int64_t global_batch =
      per_step * (semi_auto || semi_auto_streams || auto_parallel ? graph_batch
                                                                   : batch * (devices / context.pipeline_stages));
  std::string batch_text;
  if (auto_parallel)
    batch_text = (f.full_batch ? std::string(" on every rank (full batch")
                               : " per data-parallel group (global " + std::to_string(global_batch) + " = batch " +
                                     std::to_string(device_batch) + " x " + Counted(devices, "device") + ", " +
                                     Counted(data_groups, "group")) +
                 " as searched)";
  else if (semi_auto_streams)
    batch_text = " per data-parallel replica (global " + std::to_string(global_batch) + "; strategy as compiled)";
  else if (semi_auto && context.pipeline_stages > 1)
    batch_text = " on every rank (" + std::to_string(context.pipeline_stages) + " stages x " +
                 Counted(devices / context.pipeline_stages, "rank") + ", strategy " + StrategyText(f.strategy) +
                 " in each, " + std::to_string(f.micro_size) + " micro-batches, " + context.pipeline_scheduler + ")";
  else if (semi_auto)
    batch_text = (f.full_batch ? std::string(" on every rank (full batch")
                               : " per data-parallel replica (global " + std::to_string(global_batch)) +
                 "; strategy " + StrategyText(f.strategy) + ")";
  else if (context.pipeline_stages > 1)
    batch_text = " per replica (global " + std::to_string(global_batch) + "; " +
                 std::to_string(context.pipeline_stages) + " stages x " + Counted(devices / context.pipeline_stages,
                                                                                  "replica") +
                 ", " + std::to_string(job ? job->options.pipeline.micro_size : f.micro_size) + " micro-batches, " +
                 context.pipeline_scheduler + ")";
  else if (devices > 1)
    batch_text = " per rank (global " + std::to_string(global_batch) + ")";
  if (per_step > 1)
    batch_text += ", " + std::to_string(per_step) + " batches per optimizer step (gradient accumulation" +
                  (devices > 1 ? "" : "; " + std::to_string(global_batch) + " samples") + ")";
  // Optimizer parallel acts with several ranks (stand_alone has one).
  const bool zero = context.enable_parallel_optimizer && context.mode != host::ParallelMode::StandAlone;
  std::cout << "sinkrun: " << network << " on " << data->describe() << ": " << train_samples << " training, "
            << Counted(test_raw->get_dataset_size(), "test sample") << "; batch " << batch << batch_text << ", "
            << Counted(f.epochs, "epoch") << " of " << Counted(steps_per_epoch, "step") << ", "
            << (sink ? "sink mode (sink_size " + std::to_string(f.sink_size) + ")" : std::string("non-sink mode"))
            << (amp_level == host::AmpLevel::O0 ? std::string() : std::string(", amp_level ") + host::AmpLevelName(amp_level))
            << (loss_scale->enabled() ? ", " + host::LossScaleManagerText(*loss_scale) : std::string())
            << (zero ? ", parallel optimizer (threshold " +
                           std::to_string(context.parallel_optimizer_config.threshold_kb) + " KB)"
                     : std::string())
            << ", " << OptimizerText(*optimizer) << ", seed " << f.seed << "; "
            << tools::ParallelContextText(context.mode, context.gradients_mean) << "; device: " << dev.describe
            << std::endl;
  if (searched) std::cout << AutoParallelText(*searched->auto_parallel) << std::endl;

  host::ModelOptions model_options;
  model_options.amp_level = amp_level;
  model_options.loss_scale_manager = *loss_scale;
  if (context.pipeline_stages > 1 && !job) {
    model_options.micro_size = f.micro_size;
    if (!f.stage_of.empty()) {
      auto layers = host::ParseStageOf(f.stage_of);
      if (!layers.ok()) return Usage(layers.status().message());
      model_options.stage_of = *layers;
    }
  }
  const std::vector<DeviceLink*> links = dev.pointers();
  Result<std::unique_ptr<host::Model>> model = Internal("no network");
  if (job) {
    // The streams carry their own plan: Create checks the devices against it.
    model = host::Model::Create(std::move(*job), links, model_options);
  } else if (searched) {
    // Searched and compiled above; the job holds its plan, which Create
    // accepts under auto_parallel.
    model_options.context = context;
    model = host::Model::Create(std::move(*searched), links, model_options);
  } else if (semi_auto) {
    // The whole model with its loss and strategies: each rank compiles
    // its slice of it.
    model_options.context = context;
    model = host::Model::Create(std::move(*sharded), host::LossSpec::None(), *optimizer, links, model_options);
  } else if (graph_file) {
    model_options.context = context;
    for (const std::string& layer : tools::SplitList(f.recompute)) graph_file->graph.Recompute(layer);
    model = host::Model::Create(std::move(graph_file->graph), host::LossSpec::None(), *optimizer, links,
                                model_options);
  } else {
    model_options.context = context;
    host::Graph net = ZooNetwork(f.model, batch, f.seed);
    for (const std::string& layer : tools::SplitList(f.recompute)) net.Recompute(layer);
    model = host::Model::Create(std::move(net), host::LossSpec::SparseSoftmaxCrossEntropy(), *optimizer, links,
                                model_options);
  }
  if (!model.ok()) return Failure(model.status().message());
  if (const std::string joined = dev.RendezvousText(); !joined.empty()) std::cout << joined << std::endl;
  // Streams from sinkc were compiled beforehand: this run compiled nothing.
  if (!precompiled) {
    const host::CompileReport& compiled = (*model)->compiled().report;
    std::cout << "compiled: " << compiled.train_tasks << " train tasks";
    if (!compiled.buckets.empty()) {
      uint64_t bytes = 0;
      for (const auto& b : compiled.buckets) bytes += b.bytes;
      std::cout << " + " << compiled.comm_tasks << " comm tasks (" << compiled.buckets.size() << " AllReduce bucket"
                << (compiled.buckets.size() == 1 ? "" : "s") << ", " << Fixed1(bytes / 1048576.0) << " MiB)";
    } else if (compiled.comm_tasks > 0) {
      std::cout << " + " << compiled.comm_tasks << " comm tasks";  // a pipeline stage's transfers
    }
    std::cout << ", arena " << Fixed1(compiled.arena_bytes / 1048576.0) << " MiB; device threads " << dev.threads()
              << std::endl;
    if (!(*model)->load_info().allreduce_buckets.empty())
      std::cout << AllReduceLine((*model)->load_info().allreduce_buckets) << std::endl;
    if (compiled.pipeline_stage >= 0)
      std::cout << "pipeline: stage 0 of " << context.pipeline_stages << " shown above; the schedule's predicted bubble "
                << Fixed1(100 * compiled.predicted_bubble) << "% of a step" << std::endl;
  }

  // --resume: the state and where training stood. Every rank loads it
  // (one process per rank: each its own device); the data then starts at
  // the batch the saved run had reached, as MindSpore's initial_epoch.
  int initial_epoch = 0;
  if (!f.resume.empty()) {
    host::CheckpointInfo info;
    Status loaded = host::LoadCheckpoint(f.resume, **model, &info);
    if (!loaded.ok()) return Failure("--resume: " + loaded.message());
    if (info.batch_num > 0 && info.batch_num != steps_per_epoch)
      return Failure("--resume " + f.resume + ": it was saved with " + Counted(info.batch_num, "step") +
                     " per epoch, this run has " + std::to_string(steps_per_epoch) +
                     ": keep the global batch (--batch x devices) and --sink-size of the saved run");
    initial_epoch = info.initial_epoch;
    if (initial_epoch >= f.epochs)
      return Usage("--resume " + f.resume + " stands at epoch " + std::to_string(initial_epoch) + ": --epochs " +
                   std::to_string(f.epochs) + " leaves nothing to train (--epochs is the total)");
    std::cout << "resumed from " << f.resume << ": epoch " << initial_epoch << " of " << f.epochs << " done, "
              << Counted(info.global_batch, "step") << " taken" << std::endl;
  }
  std::unique_ptr<host::ModelCheckpoint> checkpoints;
  if (!f.checkpoint_dir.empty() && writer) {
    auto created = host::ModelCheckpoint::Create(
        "CKP", f.checkpoint_dir,
        {.save_checkpoint_steps = 0, .save_checkpoint_epochs = f.checkpoint_epochs, .keep_checkpoint_max = 5});
    if (!created.ok()) return Failure("--checkpoint-dir: " + created.status().message());
    checkpoints = std::move(created).value();
  }

  // In sink mode LossMonitor prints once per sink; without sinking it would
  // print every step, so it prints at each epoch's last step instead.
  host::LossMonitor loss_monitor(sink ? 1 : static_cast<int>(pass_steps));
  host::TimeMonitor time_monitor;
  host::LossScaleMonitor loss_scale_monitor;  // says when overflowed steps were skipped
  StepTimer step_timer;
  std::vector<host::Callback*> callbacks = {&loss_monitor, &time_monitor, &loss_scale_monitor, &step_timer};
  if (report) callbacks.push_back(report.get());
  if (checkpoints) callbacks.push_back(checkpoints.get());

  std::unique_ptr<host::Profiler> profiler;
  if (!f.profile.empty()) {
    host::ProfilerOptions po = profile_options;
    po.output_path = f.profile;
    po.every = f.profile_every;
    po.keep_steps = f.profile_keep;
    profiler = std::make_unique<host::Profiler>(po);
    if (!profiler->status().ok()) return Failure(profiler->status().message());
  }
  const uint64_t round_trips_before = (*model)->host_round_trips();
  const Clock::time_point train_start = Clock::now();
  Status trained = (*model)->train(f.epochs, *train_data, callbacks, sink, sink ? f.sink_size : -1, initial_epoch);
  const double train_s = SecondsSince(train_start);
  if (!trained.ok()) return Failure("training failed: " + trained.message());
  if (profiler) {
    auto summary = profiler->analyse();
    if (!summary.ok()) return Failure("--profile: " + summary.status().message());
    std::cout << host::SummaryText(*summary) << "Profile written to " << f.profile
              << " (trace.json opens in chrome://tracing or ui.perfetto.dev; sinkrun profile " << f.profile
              << " prints this again)" << std::endl;
  }
  const uint64_t train_round_trips = (*model)->host_round_trips() - round_trips_before;

  if (!f.save_checkpoint.empty() && writer) {
    const int64_t consumed = int64_t{f.epochs} * steps_per_epoch;
    Status saved = host::SaveCheckpoint(
        f.save_checkpoint, **model,
        {.epoch = f.epochs, .step = steps_per_epoch, .batch_num = steps_per_epoch, .global_batch = consumed});
    if (!saved.ok()) return Failure("--save-checkpoint: " + saved.message());
  }

  auto eval = (*model)->eval(*test_data);
  if (!eval.ok()) return Failure("evaluation failed: " + eval.status().message());

  const int64_t steps = int64_t{f.epochs - initial_epoch} * steps_per_epoch;  // this run's
  const double samples_per_s = static_cast<double>(steps * global_batch) / train_s;
  const double wall_s = SecondsSince(start);
  std::printf("Eval result: accuracy %.4f, loss %.4f over %s\n", eval->accuracy, eval->loss,
              Counted(eval->samples, "test sample").c_str());
  std::printf("Trained %s (%s) in %.2f s: %.0f samples/s; %s (%s); wall %.2f s\n", Counted(steps, "step").c_str(),
              Counted(steps * global_batch, "sample").c_str(), train_s, samples_per_s,
              Counted(static_cast<int64_t>(train_round_trips), "control round trip").c_str(),
              sink ? (devices > 1 ? "one per sink epoch per device" : "one per sink epoch")
                   : (devices > 1 ? "one per step per device" : "one per step"),
              wall_s);
  // The search's estimate next to what the run measured (issue 17).
  const host::AutoParallelPlan* plan = (*model)->auto_parallel_plan();
  const double measured_step_ms = step_timer.step_ms();
  if (plan)
    std::printf("Step time: predicted %.3f ms (auto_parallel %s), measured %.3f ms (%s)\n", plan->step_s * 1e3,
                plan->search_mode.c_str(), measured_step_ms, StepTimer::kMeasure);
  if (report) {
    nlohmann::ordered_json end = {
        {"event", "end"},
        {"model", network},
        {"data", data->describe()},
        {"epochs", f.epochs},
        {"batch_size", batch},
        {"devices", devices},
        {"parallel_mode", host::ParallelModeName(context.mode)},
        {"gradients_mean", context.gradients_mean},
        {"global_batch_size", global_batch},
        {"optimizer", host::OptimizerKindName(optimizer->kind)},
        {"learning_rate", optimizer->learning_rate},
        {"seed", f.seed},
        {"sink_mode", sink},
        {"sink_size", sink ? f.sink_size : -1},
        {"device", dev.kind},
        {"device_threads", dev.threads()},
        {"train_steps", steps},
        {"train_samples", steps * global_batch},
        {"train_s", train_s},
        {"train_samples_per_s", samples_per_s},
        {"host_round_trips", train_round_trips},
        {"eval_round_trips", eval->round_trips},
        {"test_accuracy", eval->accuracy},
        {"test_loss", eval->loss},
        {"test_samples", eval->samples},
        {"wall_s", wall_s},
    };
    if (const auto& allreduces = (*model)->load_info().allreduce_buckets; !allreduces.empty()) {
      nlohmann::ordered_json algos = nlohmann::ordered_json::array();
      for (const AllReduceBucket& b : allreduces) algos.push_back({{"bytes", b.bytes}, {"algorithm", b.algorithm}});
      end["allreduce_algorithms"] = algos;
    }
    if (optimizer->kind == host::OptimizerKind::Momentum) end["momentum"] = optimizer->momentum;
    end["amp_level"] = host::AmpLevelName(amp_level);
    if (loss_scale->enabled()) end["loss_scale_manager"] = host::LossScaleManagerText(*loss_scale);
    if (zero) {
      end["enable_parallel_optimizer"] = true;
      end["parallel_optimizer_threshold"] = context.parallel_optimizer_config.threshold_kb;
    }
    if (semi_auto) {
      end["strategy"] = f.strategy.empty() ? "graph" : f.strategy;
      end["full_batch"] = f.full_batch;
    }
    if (plan) {
      end["strategy"] = "searched";
      end["full_batch"] = f.full_batch;
      end["search_mode"] = plan->search_mode;
      end["calibration"] = plan->calibration;
      end["predicted_step_ms"] = plan->step_s * 1e3;
      end["measured_step_ms"] = measured_step_ms;
      end["predicted_memory_bytes"] = plan->memory_bytes;
      end["search_ms"] = plan->search_s * 1e3;
    }
    Status written = report->Write(end);
    if (!written.ok()) return Failure(written.message());
  }
  return 0;
}

}  // namespace sinkrt::tools
