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
#include "plan_text.h"
#include "runtime/src/env.h"
#include "runtime/src/file_io.h"
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
#include "sinkrun.h"

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
              : train         ? Dataset::SyntheticImages(data.synthetic_size, 0)
                      : Dataset::SyntheticImages(std::max<int64_t>(1, data.synthetic_size / kSyntheticTestRatio), 1);
  if (!d.status().ok()) return d.status();
  return d;
}

// The network's input pipeline on one split. `shuffle_seed` empty: in file
// order (evaluation).
// `flat`: images as [784] (an MLP), else [1, 28, 28] (NCHW, a CNN).
Result<Dataset> Pipeline(const Dataset& raw, bool flat, int64_t batch, std::optional<uint64_t> shuffle_seed,
                         bool drop_remainder) {
  Dataset d = raw.Map("image", {Transform::Rescale(1.0 / 255.0),
                                flat ? Transform::Reshape({kImageSide * kImageSide}) : Transform::HWC2CHW()});
  for (const host::ColumnSpec& c : raw.output_columns())
    if (c.name == "label" && c.dtype != DType::I32) d = d.Map("label", {Transform::TypeCast(DType::I32)});
  if (shuffle_seed) d = d.Shuffle(*shuffle_seed);
  d = d.Batch(batch, drop_remainder);
  if (!d.status().ok()) return d.status();
  return d;
}

// The names of a comma-separated list ("bias,beta" -> {"bias", "beta"}).
std::vector<std::string> SplitNames(const std::string& list) {
  std::vector<std::string> out;
  size_t begin = 0;
  while (begin <= list.size()) {
    const size_t end = std::min(list.find(',', begin), list.size());
    out.push_back(list.substr(begin, end - begin));
    begin = end + 1;
  }
  return out;
}

// --optimizer with --lr, --momentum, --weight-decay and --no-decay (one
// group without decay, MindSpore's group parameters).
Result<host::OptimizerSpec> Optimizer(const TrainFlags& f) {
  SINKRT_ASSIGN_OR_RETURN(host::OptimizerSpec spec,
                          host::MakeOptimizer(f.optimizer, static_cast<float>(f.lr), static_cast<float>(f.momentum)));
  spec.weight_decay = static_cast<float>(f.weight_decay);
  spec.clip_grad_norm = static_cast<float>(f.clip_grad_norm);
  if (!f.no_decay.empty()) host::SetNoDecay(spec, SplitNames(f.no_decay));
  SINKRT_RETURN_IF_ERROR(host::ValidateOptimizer(spec));
  return spec;
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

// "adamw (lr 0.001, weight decay 0.01, none for bias|beta)": the run
// header's optimizer.
std::string OptimizerText(const host::OptimizerSpec& o) {
  std::string s = std::string(host::OptimizerKindName(o.kind)) + " (lr " +
                  (o.schedule.enabled() ? host::DescribeLrSchedule(o.schedule) : Num(o.learning_rate));
  if (o.kind == host::OptimizerKind::Momentum) s += ", momentum " + Num(o.momentum);
  if (o.weight_decay != 0) s += ", weight decay " + Num(o.weight_decay);
  for (const host::ParamGroup& g : o.groups) {
    std::string names;
    for (const std::string& n : g.names) names += (names.empty() ? "" : "|") + n;
    s += g.weight_decay == 0 ? ", none for " + names : ", " + Num(g.weight_decay) + " for " + names;
    if (g.learning_rate > 0) s += " at lr " + Num(g.learning_rate);
  }
  if (o.clip_grad_norm != 0) s += ", clip by global norm " + Num(o.clip_grad_norm);
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
  for (const auto& c : cols)
    s += (s.empty() ? "" : ", ") + c.name + " " + DTypeName(c.dtype) + " " + ShapeToString(c.shape);
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

host::Graph ZooNetwork(const std::string& model, int64_t batch, uint64_t seed, double dropout) {
  host::VitConfig vit;
  vit.dropout = static_cast<float>(dropout);
  return model == "mlp"   ? host::MakeMlpNetwork(batch, {784, 512, 256, 10}, seed)
         : model == "vit" ? host::MakeVitNetwork(batch, seed, vit)
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
  host::Graph g = ZooNetwork(f.model, batch, f.seed, f.dropout);
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
  static constexpr const char* kMeasure =
      "median epoch wall time per step, the first epoch left out when there are more";
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

// One run of `sinkrun train`, filled in phase by phase. A phase returns 0
// to go on, or the exit code once it has printed why the run ends (Usage:
// the command line's mistake, 2; Failure: anything after it, 1).
struct TrainRun {
  TrainRun(const TrainFlags& flags, const CLI::App& command, const char* argv0_, Clock::time_point start_)
      : f(flags), cmd(command), argv0(argv0_), start(start_) {}
  TrainFlags f;
  const CLI::App& cmd;
  const char* argv0;
  Clock::time_point start;
  // The one process of a job, or rank 0 of one process per rank: it prints
  // the training lines and writes the report and the checkpoint (replicas
  // hold equal parameters); the other ranks print only their errors.
  bool writer = true;
  bool launch_sinkd = false;  // --devices: daemons started for this run
  bool launch = false;        // local daemons, asked for or needed by the streams
  bool precompiled = false;   // --streams
  host::ProfilerOptions profile_options;
  DataChoice data;
  std::optional<RankTable> table;
  int devices = 1;

  // The network: its inputs (per batch), its batch and its optimizer.
  std::optional<host::CompiledJob> job;  // --streams
  std::optional<host::GraphFile> graph_file;
  std::string network;
  std::vector<host::ColumnSpec> inputs;
  int64_t batch = 0;         // the batch each rank's pipeline makes
  int64_t device_batch = 0;  // --batch, or a --graph file's own
  bool flat = true;          // images as [B, 784], else [B, 1, 28, 28]
  host::OptimizerSpec optimizer;
  host::AmpLevel amp_level = host::AmpLevel::O0;
  host::LossScaleManager loss_scale;

  host::ParallelContext context;
  std::optional<host::JobPlan> plan;  // a network compiled by this run
  bool semi_auto = false, semi_auto_streams = false, auto_parallel = false;
  int64_t graph_batch = 0;
  int64_t data_groups = 1;   // how many ways the dataset's batches are sharded over the ranks
  int64_t global_batch = 0;  // samples per optimizer step over every rank

  Dataset train_raw, test_raw, train_data, test_data;
  int64_t pass_steps = 0;
  int64_t steps_per_epoch = 0;
  std::unique_ptr<host::ReportCallback> report;
  std::optional<TrainDevices> dev;
  std::unique_ptr<host::Model> model;
  int initial_epoch = 0;

  int64_t per_step() const { return context.grad_accumulation_step; }
  bool sink() const { return !f.no_sink; }
};

// --lr-schedule with --lr as its rate; `total` optimizer steps (the run's,
// all epochs) are the default decay span, 0 where the run's length is not
// known yet (the schedule must then give decay=N).
int ApplyLrSchedule(TrainRun& r, int64_t total, host::OptimizerSpec* into) {
  if (r.f.lr_schedule.empty()) return 0;
  auto schedule = host::ParseLrSchedule(r.f.lr_schedule, r.f.lr, total);
  if (!schedule.ok()) return Usage("--lr-schedule " + r.f.lr_schedule + ": " + schedule.status().message());
  into->schedule = *schedule;
  return 0;
}

// Started by a launcher as one rank of several (mpirun, srun, sinkrun
// launch -- ..., RANK_ID/RANK_SIZE): this process drives its own rank's
// device and feeds its own shard; the others run the same command line.
int JoinLaunch(TrainRun& r) {
  // A timeout such as SINKRT_GETNEXT_TIMEOUT_MS=-5 would otherwise be
  // skipped silently by the readers, which have no error path.
  if (Status env = CheckEnvironment(); !env.ok()) return Usage(env.message());
  auto launched = LaunchRankFromEnvironment();
  if (!launched.ok()) return Usage(launched.status().message());
  // A rank without a world size would train as a single process, silently.
  if (launched->rank && !launched->world_size)
    return Usage(launched->source + "=\"" + std::to_string(*launched->rank) + "\" is set but " + launched->size_source +
                 " is not: set " + launched->size_source + " to the number of ranks, or unset " + launched->source);
  if (launched->world_size.value_or(1) > 1) {
    r.f.per_rank = *launched;
    RankPrefix() = "rank " + std::to_string(launched->rank.value_or(0)) + ": ";
  }
  r.writer = !r.f.per_rank || r.f.per_rank->rank.value_or(0) == 0;
  return 0;
}

// The flags that name the devices and how to reach them.
int CheckDeviceFlags(TrainRun& r) {
  const TrainFlags& f = r.f;
  const bool launch_sinkd = r.launch_sinkd = r.cmd.count("--devices") > 0;
  if (f.per_rank && launch_sinkd)
    return Usage("--devices starts daemons for one process that drives every rank, but this process is rank " +
                 std::to_string(*f.per_rank->rank) + " of " + std::to_string(*f.per_rank->world_size) + " (" +
                 f.per_rank->source + "): each rank's process drives its own device");
  if (launch_sinkd && !f.rank_table.empty())
    return Usage("--devices and --rank-table contradict each other: the rank table names the devices");
  if (!f.token.empty() && !launch_sinkd && f.rank_table.empty() && f.streams.empty() && !f.per_rank)
    return Usage(
        "--token applies to sinkd (--devices or --rank-table) and to one process per rank, not to the "
        "in-process device of a single process");
  if (f.tls.enabled() && !launch_sinkd && f.rank_table.empty() && !f.per_rank)
    return Usage(
        "--tls-* apply to sinkd (--devices or --rank-table) and to one process per rank's master, not to "
        "an in-process device");
  const bool rank_tls = f.per_rank && (f.tls.enabled() || TlsConfig::FromEnvironment().enabled());
  if (f.tls_plain_peers && !(launch_sinkd && f.tls.enabled()) && !rank_tls)
    return Usage(
        "--tls-plain-peers applies to TLS (--tls-cert, --tls-key, --tls-ca): to the daemons --devices starts, "
        "or to the in-process devices of one process per rank");
  if (launch_sinkd && f.tls.enabled() && (f.tls.cert_file.empty() || f.tls.ca_file.empty()))
    return Usage(
        "--devices with TLS starts daemons that need a certificate and a CA: give --tls-cert, --tls-key "
        "and --tls-ca");
  if (!f.sinkd.empty() && !launch_sinkd && f.streams.empty())
    return Usage("--sinkd applies to --devices, which starts a sinkd");
  if (f.threads > 0 && !f.rank_table.empty())
    return Usage("--threads: the daemons of a rank table (" + f.rank_table_source +
                 ") run with the --threads they were started with");
  if (const int cores = device::AvailableCores(); f.threads > cores)
    return Usage("--threads " + std::to_string(f.threads) + ": this machine has " + std::to_string(cores) +
                 (cores == 1 ? " core" : " cores") + " this process may use");
  return 0;
}

// The files and directories the run writes.
int CheckOutputFlags(TrainRun& r) {
  const TrainFlags& f = r.f;
  for (const auto& [flag, value] :
       {std::pair<const char*, const std::string&>{"--report", f.report}, {"--save-checkpoint", f.save_checkpoint}})
    if (r.cmd.count(flag) && value.empty()) return Usage(std::string(flag) + " needs a file name, got ''");
  if (r.cmd.count("--profile") && f.profile.empty()) return Usage("--profile needs a directory, got ''");
  for (const auto& [flag, value] :
       {std::pair<const char*, const std::string&>{"--resume", f.resume}, {"--checkpoint-dir", f.checkpoint_dir}})
    if (r.cmd.count(flag) && value.empty()) return Usage(std::string(flag) + " needs a path, got ''");
  if (r.cmd.count("--checkpoint-epochs") && f.checkpoint_dir.empty())
    return Usage("--checkpoint-epochs applies to --checkpoint-dir DIR");
  for (const char* flag : {"--profile-steps", "--profile-every", "--profile-keep"})
    if (r.cmd.count(flag) && f.profile.empty()) return Usage(std::string(flag) + " applies to --profile DIR");
  if (!f.profile_steps.empty())
    if (Status st = ParseProfileSteps(f.profile_steps, &r.profile_options); !st.ok()) return Usage(st.message());
  if (!f.report.empty() && !f.save_checkpoint.empty() && SameFile(f.report, f.save_checkpoint))
    return Usage("--report and --save-checkpoint name the same file (" + f.save_checkpoint +
                 "): one would overwrite the other");
  return 0;
}

// The optimizer, the sink, the data and the network's source.
int CheckTrainingFlags(TrainRun& r) {
  const TrainFlags& f = r.f;
  // The devices compute in f32: a value that underflows to 0 or overflows
  // to inf there would train with lr 0 or fail only at compile.
  if (const float lr = static_cast<float>(f.lr); !(lr > 0) || !std::isfinite(lr))
    return Usage("--lr must be a positive number within f32's range [" + Num(std::numeric_limits<float>::denorm_min()) +
                 ", " + Num(std::numeric_limits<float>::max()) + "], got " + Num(f.lr));
  if (!(f.momentum >= 0 && f.momentum < 1)) return Usage("--momentum must be in [0, 1), got " + Num(f.momentum));
  if (f.sink_size == 0 || f.sink_size < -1)
    return Usage("--sink-size must be -1 (a whole pass per epoch) or positive, got " + std::to_string(f.sink_size));
  if (f.no_sink && r.cmd.count("--sink-size"))
    return Usage("--sink-size and --no-sink contradict each other: without sinking every step is its own request");
  if (!(f.dropout >= 0 && f.dropout < 1))
    return Usage("--dropout: For 'Dropout', the 'p' must be in range of [0.0, 1.0), but got " + Num(f.dropout));
  if (f.dropout > 0 && (f.model != "vit" || !f.graph.empty()))
    return Usage("--dropout applies to --model vit (a graph file has its own Dropout ops)");
  if (r.cmd.count("--momentum") && f.optimizer != "momentum")
    return Usage("--momentum applies to --optimizer momentum, not " + f.optimizer);
  if (!(f.weight_decay >= 0) || !std::isfinite(f.weight_decay))
    return Usage("--weight-decay must be >= 0, got " + Num(f.weight_decay));
  if (f.clip_grad_norm != 0 && !(f.clip_grad_norm > 0 && std::isfinite(f.clip_grad_norm)))
    return Usage("--clip-grad-norm: For 'clip_by_global_norm', the 'clip_norm' must be greater than 0.0, but got " +
                 Num(f.clip_grad_norm) + " (0: no clipping)");
  if (r.cmd.count("--no-decay"))
    for (const std::string& name : SplitNames(f.no_decay))
      if (name.empty()) return Usage("--no-decay '" + f.no_decay + "': an empty name (every parameter contains it)");
  std::optional<DataChoice> data = ParseData(f.data);
  if (!data)
    return Usage("--data '" + f.data + "': expected fashion-mnist, fashion-mnist:DIR, synthetic or synthetic:N");
  r.data = *data;
  if (r.cmd.count("--model") + !f.graph.empty() + !f.streams.empty() > 1)
    return Usage("--model, --graph and --streams each name the network: give one");
  r.precompiled = !f.streams.empty();
  if (r.precompiled) {
    for (const char* baked : {"--optimizer",
                              "--lr",
                              "--lr-schedule",
                              "--momentum",
                              "--weight-decay",
                              "--no-decay",
                              "--clip-grad-norm",
                              "--parallel",
                              "--gradients-mean",
                              "--parameter-broadcast",
                              "--comm-fusion",
                              "--strategy",
                              "--strategy-save",
                              "--full-batch",
                              "--search-mode",
                              "--device-memory",
                              "--calibration",
                              "--fully-use-devices",
                              "--pipeline-stages",
                              "--micro-size",
                              "--pipeline-scheduler",
                              "--stage-of",
                              "--enable-parallel-optimizer",
                              "--parallel-optimizer-config"})
      if (r.cmd.count(baked))
        return Usage(std::string(baked) + " is compiled into the streams of --streams " + f.streams +
                     " (see its manifest.json): recompile with sinkc to change it");
  }
  return 0;
}

// The rank table, and so the device count.
int CountDevices(TrainRun& r) {
  const TrainFlags& f = r.f;
  if (!f.rank_table.empty()) {
    auto loaded = LoadRankTable(f.rank_table);
    if (!loaded.ok()) return Failure(f.rank_table_source + ": " + loaded.status().message());
    r.table = std::move(loaded).value();
  }
  if (f.per_rank && r.table && r.table->size() != *f.per_rank->world_size)
    return Usage(f.rank_table_source + " has " + Counted(static_cast<int64_t>(r.table->size()), "rank") + ", but " +
                 f.per_rank->source + " puts this process in a world of " + std::to_string(*f.per_rank->world_size));
  r.devices = f.per_rank ? static_cast<int>(*f.per_rank->world_size)
              : r.table  ? static_cast<int>(r.table->size())
                         : f.devices;
  r.launch = r.launch_sinkd;
  return 0;
}

// --streams: the compiled job, its devices, inputs and optimizer.
int ReadStreams(TrainRun& r) {
  const TrainFlags& f = r.f;
  auto read = host::ReadCompiledJob(f.streams);
  if (!read.ok()) return Failure("--streams: " + read.status().message());
  r.job = std::move(read).value();
  const int n = static_cast<int>(r.job->world_size());
  if (r.table && r.devices != n)
    return Usage(f.rank_table_source + " has " + Counted(r.devices, "rank") + ", but the streams in " + f.streams +
                 " were compiled for " + std::to_string(n));
  if (r.launch && r.devices != n)
    return Usage("--devices " + std::to_string(r.devices) + ": the streams in " + f.streams + " were compiled for " +
                 std::to_string(n) + (n == 1 ? " rank" : " ranks"));
  // Several ranks need as many devices: local daemons unless a rank table names them.
  if (!r.table && !f.per_rank && n > 1) r.launch = true;
  r.devices = n;
  r.inputs = r.job->train_columns();
  r.network = "'" + r.job->network_name + "' (streams " + f.streams + ")";
  r.optimizer = r.job->options.optimizer;
  return 0;
}

// --graph: the file, its inputs and (unless --optimizer) its optimizer.
int ReadGraphFile(TrainRun& r) {
  const TrainFlags& f = r.f;
  host::GraphLoadOptions load;
  if (r.cmd.count("--batch")) load.batch = f.batch;
  auto loaded = host::LoadGraph(f.graph, load);
  if (!loaded.ok()) return Failure("--graph: " + loaded.status().message());
  r.graph_file = std::move(loaded).value();
  r.inputs = GraphInputs(r.graph_file->graph);
  r.network = "'" + r.graph_file->graph.name() + "' (" + f.graph + ")";
  if (!r.cmd.count("--optimizer") && r.graph_file->optimizer) {
    // The graph's optimizer, whole: its own lr and momentum, not the flags'.
    for (const char* tuning : {"--lr", "--momentum", "--lr-schedule", "--weight-decay", "--no-decay"})
      if (r.cmd.count(tuning))
        return Usage(std::string(tuning) + " does not apply to the optimizer of --graph " + f.graph + " (" +
                     OptimizerText(*r.graph_file->optimizer) + "): give --optimizer to replace it");
    r.optimizer = *r.graph_file->optimizer;
    // Clipping composes with any optimizer: the flag sets the file's too.
    if (r.cmd.count("--clip-grad-norm")) r.optimizer.clip_grad_norm = static_cast<float>(f.clip_grad_norm);
  }
  return 0;
}

// The network's source, whether this machine can host the daemons it
// needs, and the batch and image layout its inputs fix.
int ReadNetwork(TrainRun& r) {
  const TrainFlags& f = r.f;
  r.network = f.model;
  r.batch = f.batch;
  auto optimizer = Optimizer(f);
  if (!optimizer.ok()) return Usage("--optimizer: " + optimizer.status().message());
  r.optimizer = *optimizer;
  if (int rc = r.precompiled ? ReadStreams(r) : !f.graph.empty() ? ReadGraphFile(r) : 0) return rc;
  if (r.launch) {
    // Before any daemon is forked. Streams from sinkc know their arena;
    // a network compiled here is compiled on the devices' behalf after
    // they start, so only the daemons' own memory is counted for it.
    uint64_t arena_bytes = 0;
    if (r.job)
      for (const host::CompiledStream& s : r.job->ranks) arena_bytes = std::max(arena_bytes, s.report.arena_bytes);
    if (Status fits = CheckLocalDevices(r.devices, arena_bytes); !fits.ok())
      return Usage((r.job && !r.launch_sinkd ? "--streams " + f.streams : std::string("--devices")) + ": " +
                   fits.message());
  }
  r.flat = f.model != "lenet";  // the MLP and the ViT read [B, 784]
  if (r.job || r.graph_file) {
    if (r.inputs.empty() || r.inputs[0].shape.empty())
      return Failure(r.network + " reads no batched input (its inputs: " + ColumnsText(r.inputs) + ")");
    const int64_t compiled_batch = r.inputs[0].shape[0];
    if (r.job && r.cmd.count("--batch") && f.batch != compiled_batch)
      return Usage("--batch " + std::to_string(f.batch) + ": the streams in " + f.streams +
                   " were compiled for batch " + std::to_string(compiled_batch) + " per rank");
    r.batch = compiled_batch;
    const std::optional<bool> layout = FlatImages(r.inputs);
    if (!layout)
      return Failure(r.network + " reads " + ColumnsText(r.inputs) +
                     "; sinkrun's image data gives 'image' f32 [B, 784] or [B, 1, 28, 28] and 'label' i32 [B]");
    r.flat = *layout;
  }
  r.device_batch = r.batch;
  return 0;
}

// --amp-level and --loss-scale-manager; sinkc's streams carry theirs.
int ParsePrecision(TrainRun& r) {
  if (!r.f.amp_level.empty()) {
    auto amp = host::ParseAmpLevel(r.f.amp_level);
    if (!amp.ok()) return Usage("--amp-level: " + amp.status().message());
    r.amp_level = *amp;
  } else if (r.job) {
    r.amp_level = r.job->options.amp_level;
  }
  auto loss_scale = host::ParseLossScaleManager(r.f.loss_scale);
  if (!loss_scale.ok()) return Usage("--loss-scale-manager: " + loss_scale.status().message());
  r.loss_scale = *loss_scale;
  if (r.job && !r.loss_scale.enabled()) r.loss_scale = r.job->options.loss_scale;
  return 0;
}

// Streams compiled by sinkc: the context and batches they were compiled for.
void StreamsContext(TrainRun& r) {
  const host::CompileOptions& o = r.job->options;
  host::ParallelContext& c = r.context = host::ParallelContextFor(o);
  c.device_num = r.devices;
  c.pipeline_stages = o.pipeline.stages;
  c.pipeline_scheduler = o.pipeline.scheduler;
  c.grad_accumulation_step = o.grad_accumulation;
  // Under semi_auto_parallel their queues say how many data-parallel groups
  // share the batch (rank 0's rows of the global batch).
  r.semi_auto_streams = c.mode == host::ParallelMode::SemiAutoParallel;
  r.graph_batch = r.batch;
  r.data_groups = r.semi_auto_streams ? r.job->train_batch_shards() : r.devices / c.pipeline_stages;
  if (r.semi_auto_streams) r.graph_batch = r.batch * r.data_groups;
  r.global_batch = r.per_step() * (r.semi_auto_streams ? r.graph_batch : r.batch * r.data_groups);
}

// The job this run compiles, as host::PlanJob takes it.
Result<host::JobSpec> SpecOf(const TrainRun& r) {
  const TrainFlags& f = r.f;
  host::JobSpec spec;
  ParallelFlags par = f.par;
  par.devices = r.devices;
  par.devices_flag = f.per_rank ? f.per_rank->source + " (a world of " + Counted(r.devices, "rank") + ")"
                     : r.table  ? f.rank_table_source + " (" + Counted(r.devices, "rank") + ")"
                                : "--devices " + std::to_string(r.devices);
  SINKRT_RETURN_IF_ERROR(ParallelSpecFromFlags(par, r.cmd, spec));
  spec.batch = r.batch;
  spec.optimizer = r.optimizer;
  spec.recompute = SplitList(f.recompute);
  spec.sync_batch_norm = f.sync_bn;
  spec.amp_level = r.amp_level;
  spec.loss_scale = r.loss_scale;
  spec.compile_cache = host::CompileCacheDirFromEnvironment();
  // The daemons of one host talk over shared memory; a rank table that
  // spans hosts puts TCP links in every ring.
  if (r.table)
    for (const RankEntry& e : r.table->ranks)
      if (e.address.host != r.table->ranks.front().address.host) spec.search_transport = "tcp";
  // A shard strategy covers the loss too (its split of the labels is each
  // rank's share of the batch): a zoo network gets it here.
  const bool sharded =
      spec.mode == host::ParallelMode::SemiAutoParallel || spec.mode == host::ParallelMode::AutoParallel;
  if (!r.graph_file && !sharded) spec.loss = host::LossSpec::SparseSoftmaxCrossEntropy();
  const host::GraphFile* file = r.graph_file ? &*r.graph_file : nullptr;
  spec.network = [&f, file, sharded, batch = r.batch](int64_t at) -> Result<host::Graph> {
    if (file && at == batch) return file->graph;
    if (file || sharded) return NetworkWithLoss(f, at);
    return ZooNetwork(f.model, at, f.seed, f.dropout);
  };
  return spec;
}

// MindSpore's parallel context and its checks, then the plan: the network
// at the graph's batch, sharded or searched and compiled, before any device
// starts (the plan decides the batch the pipeline makes).
int PlanNetwork(TrainRun& r) {
  if (r.job) {
    StreamsContext(r);
    return 0;
  }
  auto spec = SpecOf(r);
  if (!spec.ok()) return Usage(spec.status().message());
  auto context = host::CheckJobSpec(*spec);
  if (!context.ok()) return Usage(context.status().message());
  // auto_parallel compiles while it plans, before the data fixes the run's
  // length: its schedule must name its span.
  if (context->mode == host::ParallelMode::AutoParallel) {
    if (int rc = ApplyLrSchedule(r, 0, &r.optimizer)) return rc;
    spec->optimizer = r.optimizer;
  }
  // The compile would refuse it too, but only once the daemons run.
  if (context->pipeline_stages > 1 && r.batch % r.f.par.micro_size != 0)
    return Usage("batch " + std::to_string(r.batch) + " (one replica's) does not split into --micro-size " +
                 std::to_string(r.f.par.micro_size) + " equal micro-batches");
  r.semi_auto = context->mode == host::ParallelMode::SemiAutoParallel;
  r.auto_parallel = context->mode == host::ParallelMode::AutoParallel;
  if (r.auto_parallel) {
    // What Model::Create would compile with (MS_DATASET_SINK_QUEUE included).
    auto capacity = host::SinkQueueCapacity(host::ModelOptions{}.queue_capacity);
    if (!capacity.ok()) return Usage(capacity.status().message());
    spec->queue_capacity = *capacity;
  }
  auto plan = host::PlanJob(*spec);
  if (!plan.ok()) return Failure((r.auto_parallel ? r.network + ": " : std::string()) + plan.status().message());
  if (Status saved = host::SaveJobStrategies(*spec, *plan); !saved.ok()) return Failure(saved.message());
  r.context = plan->context;
  r.graph_batch = plan->graph_batch;
  r.batch = plan->device_batch;
  r.data_groups = plan->data_groups;
  r.global_batch = plan->step_samples;
  if (r.semi_auto || r.auto_parallel) {
    // What the pipeline makes: one data-parallel group's batch.
    r.inputs = GraphInputs(*plan->network);
    for (host::ColumnSpec& c : r.inputs)
      if (!c.shape.empty()) c.shape[0] = r.batch;
  }
  r.plan = std::move(plan).value();
  return 0;
}

// Data first: a missing directory or a corrupt file ends the run here,
// naming the file, before any device starts.
int MakeData(TrainRun& r) {
  const std::string data = r.data.describe();
  auto train_raw = RawSplit(r.data, "train");
  if (!train_raw.ok()) return Failure("--data " + data + ": " + train_raw.status().message());
  auto test_raw = RawSplit(r.data, "test");
  if (!test_raw.ok()) return Failure("--data " + data + ": " + test_raw.status().message());
  auto train_data = Pipeline(*train_raw, r.flat, r.batch, r.f.seed, /*drop_remainder=*/true);
  if (!train_data.ok()) return Failure("training pipeline: " + train_data.status().message());
  auto test_data = Pipeline(*test_raw, r.flat, r.batch, std::nullopt, /*drop_remainder=*/false);
  if (!test_data.ok()) return Failure("test pipeline: " + test_data.status().message());
  r.train_raw = *train_raw;
  r.test_raw = *test_raw;
  r.train_data = *train_data;
  r.test_data = *test_data;
  const int64_t train_samples = r.train_raw.get_dataset_size();
  const int64_t batches = r.train_data.get_dataset_size();
  if (batches < 1)
    return Usage("--batch " + std::to_string(r.batch) + " is larger than the " +
                 Counted(train_samples, "training sample"));
  if (r.job || r.graph_file || r.semi_auto || r.auto_parallel) {
    Status matches = CheckColumns(r.inputs, r.train_data.output_columns());
    if (!matches.ok()) return Failure(r.network + " does not match --data " + data + ": " + matches.message());
  }
  // Each rank (each data-parallel group under semi_auto_parallel) takes
  // every data_groups-th sample: a pass has this many steps.
  const int64_t groups = r.data_groups;
  const int64_t rank_batches =
      groups > 1 ? r.train_data.ShardBelowBatch(static_cast<int>(groups), 0).get_dataset_size() : batches;
  if (groups > 1 && rank_batches < 1)
    return Usage("--batch " + std::to_string(r.batch) + " on " + std::to_string(groups) +
                 (r.semi_auto || r.auto_parallel ? " data-parallel groups" : " devices") + " needs more than the " +
                 Counted(train_samples, "training sample"));
  // Gradient accumulation: a step takes K batches (of each rank's).
  r.pass_steps = rank_batches / r.per_step();
  if (r.pass_steps < 1)
    return Usage("--grad-accumulation " + std::to_string(r.per_step()) + " needs that many batches of --batch " +
                 std::to_string(r.batch) + " per pass, but a pass has " + std::to_string(rank_batches) + " batches" +
                 (groups > 1 ? " per rank" : ""));
  r.steps_per_epoch = r.sink() && r.f.sink_size > 0 ? r.f.sink_size : r.pass_steps;
  // The schedule spans the whole run (--epochs is the total, resumed or not).
  if (!r.auto_parallel) return ApplyLrSchedule(r, int64_t{r.f.epochs} * r.steps_per_epoch, &r.optimizer);
  return 0;
}

// What the run will write, checked before it trains: a bad path must not
// cost the trained model. The report file is created last, so that a
// refused run leaves none.
int PrepareOutputs(TrainRun& r) {
  const TrainFlags& f = r.f;
  if (!f.save_checkpoint.empty() && r.writer) {
    Status writable = CheckCheckpointPath(f.save_checkpoint);
    if (!writable.ok()) return Failure("--save-checkpoint " + writable.message());
  }
  if (!f.profile.empty())
    if (Status st = CheckDirectoryWritable(f.profile); !st.ok()) return Failure("--profile: " + st.message());
  if (!f.checkpoint_dir.empty() && r.writer)
    if (Status st = CheckDirectoryWritable(f.checkpoint_dir); !st.ok())
      return Failure("--checkpoint-dir: " + st.message());
  if (!f.report.empty() && r.writer) {
    auto report = host::ReportCallback::Create(f.report);
    if (!report.ok()) return Failure("--report: " + report.status().message());
    r.report = std::move(report).value();
  }
  return 0;
}

// Last of the checks: starting or reaching a daemon is the costliest. One
// process per rank: every rank meets at the master before any device
// opens, so that a rank that never starts is named now.
int OpenRunDevices(TrainRun& r) {
  if (r.f.per_rank) {
    host::InitOptions init;
    init.token = r.f.token;
    init.tls = r.f.tls;
    if (Status joined = host::init(init); !joined.ok()) return Failure(joined.message());
    // The launcher's terminal is shared: only rank 0 prints the training.
    if (!r.writer && !std::freopen("/dev/null", "w", stdout)) return Failure("cannot silence stdout");
  }
  auto opened = OpenDevices(r.f, r.launch, r.devices, r.table, r.argv0);
  if (!opened.ok()) return Failure(opened.status().message());
  r.dev = std::move(opened).value();
  return 0;
}

// The header's "batch 64 ..." tail: how the batch is shared out.
std::string BatchText(const TrainRun& r) {
  const TrainFlags& f = r.f;
  const int stages = r.context.pipeline_stages;
  const std::string global = std::to_string(r.global_batch);
  std::string s;
  if (r.auto_parallel)
    s = (f.par.full_batch
             ? std::string(" on every rank (full batch")
             : " per data-parallel group (global " + global + " = batch " + std::to_string(r.device_batch) + " x " +
                   Counted(r.devices, "device") + ", " + Counted(r.data_groups, "group")) +
        " as searched)";
  else if (r.semi_auto_streams)
    s = " per data-parallel replica (global " + global + "; strategy as compiled)";
  else if (r.semi_auto && stages > 1)
    s = " on every rank (" + std::to_string(stages) + " stages x " + Counted(r.devices / stages, "rank") +
        ", strategy " + StrategyText(f.par.strategy) + " in each, " + std::to_string(f.par.micro_size) +
        " micro-batches, " + r.context.pipeline_scheduler + ")";
  else if (r.semi_auto)
    s = (f.par.full_batch ? std::string(" on every rank (full batch")
                          : " per data-parallel replica (global " + global) +
        "; strategy " + StrategyText(f.par.strategy) + ")";
  else if (stages > 1)
    s = " per replica (global " + global + "; " + std::to_string(stages) + " stages x " +
        Counted(r.devices / stages, "replica") + ", " +
        std::to_string(r.job ? r.job->options.pipeline.micro_size : f.par.micro_size) + " micro-batches, " +
        r.context.pipeline_scheduler + ")";
  else if (r.devices > 1)
    s = " per rank (global " + global + ")";
  if (r.per_step() > 1)
    s += ", " + std::to_string(r.per_step()) + " batches per optimizer step (gradient accumulation" +
         (r.devices > 1 ? "" : "; " + global + " samples") + ")";
  return s;
}

// Optimizer parallel acts with several ranks (stand_alone has one).
bool ZeroOn(const host::ParallelContext& c) {
  return c.enable_parallel_optimizer && c.mode != host::ParallelMode::StandAlone;
}

void PrintHeader(const TrainRun& r) {
  const TrainFlags& f = r.f;
  std::cout << "sinkrun: " << r.network << " on " << r.data.describe() << ": " << r.train_raw.get_dataset_size()
            << " training, " << Counted(r.test_raw.get_dataset_size(), "test sample") << "; batch " << r.batch
            << BatchText(r) << ", " << Counted(f.epochs, "epoch") << " of " << Counted(r.steps_per_epoch, "step")
            << ", "
            << (r.sink() ? "sink mode (sink_size " + std::to_string(f.sink_size) + ")" : std::string("non-sink mode"))
            << (r.amp_level == host::AmpLevel::O0 ? std::string()
                                                  : std::string(", amp_level ") + host::AmpLevelName(r.amp_level))
            << (r.loss_scale.enabled() ? ", " + host::LossScaleManagerText(r.loss_scale) : std::string())
            << (f.sync_bn ? ", SyncBatchNorm" : "")
            << (ZeroOn(r.context) ? ", parallel optimizer (threshold " +
                                        std::to_string(r.context.parallel_optimizer_config.threshold_kb) + " KB)"
                                  : std::string())
            << ", " << OptimizerText(r.optimizer) << ", seed " << f.seed
            << (f.dropout > 0 ? ", dropout " + Num(f.dropout) : std::string()) << "; "
            << tools::ParallelContextText(r.context.mode, r.context.gradients_mean) << "; device: " << r.dev->describe
            << std::endl;
  if (r.plan && r.plan->searched) std::cout << AutoParallelText(*r.plan->searched->auto_parallel) << std::endl;
}

// The model on the devices: streams as compiled, or the plan's network.
int CreateModel(TrainRun& r) {
  const std::vector<DeviceLink*> links = r.dev->pointers();
  Result<std::unique_ptr<host::Model>> model = Internal("no network");
  if (r.job) {
    // The streams carry their own plan: Create checks the devices against it.
    host::ModelOptions options;
    options.amp_level = r.amp_level;
    options.loss_scale_manager = r.loss_scale;
    model = host::Model::Create(std::move(*r.job), links, options);
  } else if (r.plan->searched) {
    // Searched and compiled by the plan; the job holds its plan, which
    // Create accepts under auto_parallel.
    model = host::Model::Create(std::move(*r.plan->searched), links, r.plan->model_options);
  } else {
    model = host::Model::Create(std::move(*r.plan->network), r.plan->loss, r.optimizer, links, r.plan->model_options);
  }
  if (!model.ok()) return Failure(model.status().message());
  r.model = std::move(model).value();
  return 0;
}

// What this run compiled; streams from sinkc were compiled beforehand.
void PrintCompiled(const TrainRun& r) {
  if (const std::string joined = r.dev->RendezvousText(); !joined.empty()) std::cout << joined << std::endl;
  if (r.precompiled) return;
  const host::CompileReport& compiled = r.model->compiled().report;
  std::cout << "compiled: " << compiled.train_tasks << " train tasks";
  if (!compiled.buckets.empty()) {
    uint64_t bytes = 0;
    for (const auto& b : compiled.buckets) bytes += b.bytes;
    std::cout << " + " << compiled.comm_tasks << " comm tasks (" << compiled.buckets.size() << " AllReduce bucket"
              << (compiled.buckets.size() == 1 ? "" : "s") << ", " << Fixed1(bytes / 1048576.0) << " MiB)";
  } else if (compiled.comm_tasks > 0) {
    std::cout << " + " << compiled.comm_tasks << " comm tasks";  // a pipeline stage's transfers
  }
  std::cout << ", arena " << Fixed1(compiled.arena_bytes / 1048576.0) << " MiB; device threads " << r.dev->threads()
            << std::endl;
  if (!r.model->load_info().allreduce_buckets.empty())
    std::cout << AllReduceLine(r.model->load_info().allreduce_buckets) << std::endl;
  if (compiled.pipeline_stage >= 0)
    std::cout << "pipeline: stage 0 of " << r.context.pipeline_stages
              << " shown above; the schedule's predicted bubble " << Fixed1(100 * compiled.predicted_bubble)
              << "% of a step" << std::endl;
}

// --resume: the state and where training stood. Every rank loads it (one
// process per rank: each its own device); the data then starts at the
// batch the saved run had reached, as MindSpore's initial_epoch.
int Resume(TrainRun& r) {
  const TrainFlags& f = r.f;
  if (f.resume.empty()) return 0;
  host::CheckpointInfo info;
  Status loaded = host::LoadCheckpoint(f.resume, *r.model, &info);
  if (!loaded.ok()) return Failure("--resume: " + loaded.message());
  if (info.batch_num > 0 && info.batch_num != r.steps_per_epoch)
    return Failure("--resume " + f.resume + ": it was saved with " + Counted(info.batch_num, "step") +
                   " per epoch, this run has " + std::to_string(r.steps_per_epoch) +
                   ": keep the global batch (--batch x devices) and --sink-size of the saved run");
  r.initial_epoch = info.initial_epoch;
  if (r.initial_epoch >= f.epochs)
    return Usage("--resume " + f.resume + " stands at epoch " + std::to_string(r.initial_epoch) + ": --epochs " +
                 std::to_string(f.epochs) + " leaves nothing to train (--epochs is the total)");
  std::cout << "resumed from " << f.resume << ": epoch " << r.initial_epoch << " of " << f.epochs << " done, "
            << Counted(info.global_batch, "step") << " taken" << std::endl;
  return 0;
}

// What the epochs measured, for the closing lines and the report.
struct TrainResult {
  double train_s = 0;
  uint64_t round_trips = 0;
  double step_ms = 0;  // StepTimer's
  host::EvalResult eval;
};

// The epochs with their callbacks, the profile, the checkpoint, and the
// evaluation.
int TrainAndEvaluate(TrainRun& r, TrainResult& out) {
  const TrainFlags& f = r.f;
  std::unique_ptr<host::ModelCheckpoint> checkpoints;
  if (!f.checkpoint_dir.empty() && r.writer) {
    auto created = host::ModelCheckpoint::Create(
        "CKP", f.checkpoint_dir,
        {.save_checkpoint_steps = 0, .save_checkpoint_epochs = f.checkpoint_epochs, .keep_checkpoint_max = 5});
    if (!created.ok()) return Failure("--checkpoint-dir: " + created.status().message());
    checkpoints = std::move(created).value();
  }
  // In sink mode LossMonitor prints once per sink; without sinking it would
  // print every step, so it prints at each epoch's last step instead.
  host::LossMonitor loss_monitor(r.sink() ? 1 : static_cast<int>(r.pass_steps));
  host::TimeMonitor time_monitor;
  host::LossScaleMonitor loss_scale_monitor;  // says when overflowed steps were skipped
  StepTimer step_timer;
  std::vector<host::Callback*> callbacks = {&loss_monitor, &time_monitor, &loss_scale_monitor, &step_timer};
  if (r.report) callbacks.push_back(r.report.get());
  if (checkpoints) callbacks.push_back(checkpoints.get());
  std::unique_ptr<host::Profiler> profiler;
  if (!f.profile.empty()) {
    host::ProfilerOptions po = r.profile_options;
    po.output_path = f.profile;
    po.every = f.profile_every;
    po.keep_steps = f.profile_keep;
    profiler = std::make_unique<host::Profiler>(po);
    if (!profiler->status().ok()) return Failure(profiler->status().message());
  }
  const uint64_t round_trips_before = r.model->host_round_trips();
  const Clock::time_point train_start = Clock::now();
  Status trained =
      r.model->train(f.epochs, r.train_data, callbacks, r.sink(), r.sink() ? f.sink_size : -1, r.initial_epoch);
  out.train_s = SecondsSince(train_start);
  if (!trained.ok()) return Failure("training failed: " + trained.message());
  if (profiler) {
    auto summary = profiler->analyse();
    if (!summary.ok()) return Failure("--profile: " + summary.status().message());
    std::cout << host::SummaryText(*summary) << "Profile written to " << f.profile
              << " (trace.json opens in chrome://tracing or ui.perfetto.dev; sinkrun profile " << f.profile
              << " prints this again)" << std::endl;
  }
  out.round_trips = r.model->host_round_trips() - round_trips_before;
  out.step_ms = step_timer.step_ms();
  if (!f.save_checkpoint.empty() && r.writer) {
    const int64_t consumed = int64_t{f.epochs} * r.steps_per_epoch;
    Status saved = host::SaveCheckpoint(
        f.save_checkpoint, *r.model,
        {.epoch = f.epochs, .step = r.steps_per_epoch, .batch_num = r.steps_per_epoch, .global_batch = consumed});
    if (!saved.ok()) return Failure("--save-checkpoint: " + saved.message());
  }
  auto eval = r.model->eval(r.test_data);
  if (!eval.ok()) return Failure("evaluation failed: " + eval.status().message());
  out.eval = *eval;
  return 0;
}

// The report's closing "end" event.
nlohmann::ordered_json EndEvent(const TrainRun& r, const TrainResult& t, int64_t steps, double wall_s) {
  const TrainFlags& f = r.f;
  nlohmann::ordered_json end = {
      {"event", "end"},
      {"model", r.network},
      {"data", r.data.describe()},
      {"epochs", f.epochs},
      {"batch_size", r.batch},
      {"devices", r.devices},
      {"parallel_mode", host::ParallelModeName(r.context.mode)},
      {"gradients_mean", r.context.gradients_mean},
      {"global_batch_size", r.global_batch},
      {"optimizer", host::OptimizerKindName(r.optimizer.kind)},
      {"learning_rate", r.optimizer.learning_rate},
      {"lr_schedule", r.optimizer.schedule.enabled() ? host::DescribeLrSchedule(r.optimizer.schedule) : "constant"},
      {"seed", f.seed},
      {"dropout", f.dropout},
      {"sink_mode", r.sink()},
      {"sink_size", r.sink() ? f.sink_size : -1},
      {"device", r.dev->kind},
      {"device_threads", r.dev->threads()},
      {"train_steps", steps},
      {"train_samples", steps * r.global_batch},
      {"train_s", t.train_s},
      {"train_samples_per_s", static_cast<double>(steps * r.global_batch) / t.train_s},
      {"host_round_trips", t.round_trips},
      {"eval_round_trips", t.eval.round_trips},
      {"test_accuracy", t.eval.accuracy},
      {"test_loss", t.eval.loss},
      {"test_samples", t.eval.samples},
      {"wall_s", wall_s},
  };
  if (const auto& allreduces = r.model->load_info().allreduce_buckets; !allreduces.empty()) {
    nlohmann::ordered_json algos = nlohmann::ordered_json::array();
    for (const AllReduceBucket& b : allreduces) algos.push_back({{"bytes", b.bytes}, {"algorithm", b.algorithm}});
    end["allreduce_algorithms"] = algos;
  }
  if (r.optimizer.kind == host::OptimizerKind::Momentum) end["momentum"] = r.optimizer.momentum;
  end["weight_decay"] = r.optimizer.weight_decay;
  if (r.optimizer.clip_grad_norm != 0) end["clip_grad_norm"] = r.optimizer.clip_grad_norm;
  if (!r.optimizer.groups.empty()) {
    nlohmann::ordered_json groups = nlohmann::ordered_json::array();
    for (const host::ParamGroup& g : r.optimizer.groups)
      groups.push_back({{"names", g.names}, {"weight_decay", g.weight_decay}, {"learning_rate", g.learning_rate}});
    end["optimizer_groups"] = groups;
  }
  end["amp_level"] = host::AmpLevelName(r.amp_level);
  if (r.f.sync_bn) end["sync_bn"] = true;
  if (r.loss_scale.enabled()) end["loss_scale_manager"] = host::LossScaleManagerText(r.loss_scale);
  if (ZeroOn(r.context)) {
    end["enable_parallel_optimizer"] = true;
    end["parallel_optimizer_threshold"] = r.context.parallel_optimizer_config.threshold_kb;
  }
  if (r.semi_auto) {
    end["strategy"] = f.par.strategy.empty() ? "graph" : f.par.strategy;
    end["full_batch"] = f.par.full_batch;
  }
  if (const host::AutoParallelPlan* plan = r.model->auto_parallel_plan()) {
    end["strategy"] = "searched";
    end["full_batch"] = f.par.full_batch;
    end["search_mode"] = plan->search_mode;
    end["calibration"] = plan->calibration;
    end["predicted_step_ms"] = plan->step_s * 1e3;
    end["measured_step_ms"] = t.step_ms;
    end["predicted_memory_bytes"] = plan->memory_bytes;
    end["search_ms"] = plan->search_s * 1e3;
  }
  return end;
}

// The closing lines, and the report's end.
int Report(const TrainRun& r, const TrainResult& t) {
  const int64_t steps = int64_t{r.f.epochs - r.initial_epoch} * r.steps_per_epoch;  // this run's
  const double wall_s = SecondsSince(r.start);
  std::printf("Eval result: accuracy %.4f, loss %.4f over %s\n", t.eval.accuracy, t.eval.loss,
              Counted(t.eval.samples, "test sample").c_str());
  std::printf("Trained %s (%s) in %.2f s: %.0f samples/s; %s (%s); wall %.2f s\n", Counted(steps, "step").c_str(),
              Counted(steps * r.global_batch, "sample").c_str(), t.train_s,
              static_cast<double>(steps * r.global_batch) / t.train_s,
              Counted(static_cast<int64_t>(t.round_trips), "control round trip").c_str(),
              r.sink() ? (r.devices > 1 ? "one per sink epoch per device" : "one per sink epoch")
                       : (r.devices > 1 ? "one per step per device" : "one per step"),
              wall_s);
  // The search's estimate next to what the run measured.
  if (const host::AutoParallelPlan* plan = r.model->auto_parallel_plan())
    std::printf("Step time: predicted %.3f ms (auto_parallel %s), measured %.3f ms (%s)\n", plan->step_s * 1e3,
                plan->search_mode.c_str(), t.step_ms, StepTimer::kMeasure);
  if (!r.report) return 0;
  Status written = r.report->Write(EndEvent(r, t, steps, wall_s));
  return written.ok() ? 0 : Failure(written.message());
}

}  // namespace

int Train(const TrainFlags& flags, const CLI::App& cmd, const char* argv0, Clock::time_point start) {
  TrainRun r(flags, cmd, argv0, start);
  // The checks: flags whose meaning depends on others are checked together,
  // so that no combination is silently ignored; then the network and its
  // plan, the data and the outputs, each refused before any device starts.
  for (int (*phase)(TrainRun&) : {JoinLaunch, CheckDeviceFlags, CheckOutputFlags, CheckTrainingFlags, CountDevices,
                                  ReadNetwork, ParsePrecision, PlanNetwork, MakeData, PrepareOutputs, OpenRunDevices})
    if (int rc = phase(r)) return rc;
  PrintHeader(r);
  if (int rc = CreateModel(r)) return rc;
  PrintCompiled(r);
  if (int rc = Resume(r)) return rc;
  TrainResult result;
  if (int rc = TrainAndEvaluate(r, result)) return rc;
  return Report(r, result);
}

}  // namespace sinkrt::tools
