// sinkrun: trains a built-in network end to end on one device, and starts
// local sinkd daemons.
//
//   sinkrun train --model mlp|lenet | --graph FILE | --streams DIR
//                 --data fashion-mnist[:DIR]|synthetic[:N]
//                 [--epochs 5] [--batch 64] [--optimizer sgd|momentum|adam]
//                 [--lr 0.01] [--momentum 0.9] [--seed 1]
//                 [--sink-size -1 | --no-sink] [--threads N] [--report FILE]
//                 [--devices N [--sinkd PATH] | --rank-table FILE] [--token T]
//                 [--parallel stand_alone|data_parallel] [--gradients-mean true|false]
//                 [--parameter-broadcast] [--comm-fusion JSON] [--save-checkpoint FILE]
//   sinkrun launch -n N [--base-port P] [--rank-table-out FILE] [--token T]
//                  [--sinkd PATH] [--threads K] [--quiet]
//
// train runs on an in-process device by default; --devices N starts N sinkd
// daemons for the run and trains through them, --rank-table trains on
// daemons already running (anywhere); without either, MindSpore's
// RANK_TABLE_FILE names that table when it is set. The device code is the same either
// way, so are the numbers. More than one device needs --parallel
// data_parallel (MindSpore's rule); --batch is then per rank, as in
// MindSpore, and the global batch is N x batch. launch starts N daemons on
// this machine, writes their rank table and keeps them until SIGINT or
// SIGTERM (or one of them dies).
//
// The network is a built-in one (--model), a graph file (--graph: its
// loss, its optimizer unless --optimizer is given, its batch unless --batch
// is), or streams compiled beforehand by sinkc (--streams DIR: no graph and
// no compiler; the parallel plan, optimizer and batch are the streams', and
// a job that contradicts them — devices, batch, the data's columns — is
// refused before anything runs). The image pipeline follows the network's
// "image" input: [784] per sample for an MLP, [1, 28, 28] for a CNN.
//
// What MindSpore's
//   model.train(epochs, train_ds, [LossMonitor(), TimeMonitor()],
//               dataset_sink_mode=True, sink_size=-1)
//   model.eval(test_ds)
// does, with the same printed lines. The pipeline is MindSpore's LeNet/MLP
// recipe: Rescale(1/255), Reshape([784]) for the MLP or HWC2CHW for LeNet,
// labels to int32, Shuffle(seed) (a new permutation every pass),
// Batch(batch, drop_remainder=True); the test split is evaluated whole.
//
// Every flag, the data and the report file are checked before anything is
// compiled, so a mistake costs no training time: exit 2 for a bad command
// line, 1 for anything that fails after it (missing data included).
#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "cli_validators.h"
#include "parallel_flags.h"
#include "sinkrt/device/device_options.h"
#include "sinkrt/device/executor.h"
#include "sinkrt/device/in_process_device.h"
#include "sinkrt/device/openmp_policy.h"
#include "sinkrt/host/callbacks.h"
#include "sinkrt/host/compiled_job.h"
#include "sinkrt/host/graph_file.h"
#include "sinkrt/host/dataset.h"
#include "sinkrt/host/local_cluster.h"
#include "sinkrt/host/model.h"
#include "sinkrt/host/model_zoo.h"
#include "sinkrt/host/remote_device.h"
#include "sinkrt/host/report_callback.h"
#include "sinkrt/runtime/file_io.h"
#include "sinkrt/runtime/rank_table.h"

namespace {

using namespace sinkrt;
using host::Dataset;
using host::Transform;
using Clock = std::chrono::steady_clock;

constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";  // Debian's dataset-fashion-mnist
constexpr int64_t kSyntheticTrainSize = 60000;  // Fashion-MNIST's split sizes
constexpr int64_t kSyntheticTestRatio = 6;
constexpr int64_t kImageSide = 28;
constexpr int kClasses = 10;

struct Flags {
  std::string model = "mlp";
  std::string graph;    // --graph: a graph file instead of --model
  std::string streams;  // --streams: a sinkc directory instead of --model
  std::string save_checkpoint;
  std::string data;
  int epochs = 5;
  int64_t batch = 64;
  double lr = 0.01;
  double momentum = 0.9;
  std::string optimizer = "momentum";
  uint64_t seed = 1;
  int sink_size = -1;
  bool no_sink = false;
  int threads = 0;  // 0: every core the process may use
  std::string report;
  int devices = 1;  // given explicitly: on sinkd daemons started for the run
  std::string rank_table;
  std::string token;
  std::string sinkd;
  std::string parallel = "stand_alone";
  bool gradients_mean = host::ParallelContext{}.gradients_mean;  // MindSpore's default, as sinkc's
  bool parameter_broadcast = false;
  std::string comm_fusion;  // MindSpore's comm_fusion dict, as JSON
  // How the rank table was named, for messages: "--rank-table FILE", or
  // "RANK_TABLE_FILE=FILE" when MindSpore's variable named it.
  std::string rank_table_source;
};

struct LaunchFlags {
  int devices = 0;
  int base_port = 0;  // 0: the kernel picks each daemon's port
  std::string rank_table_out = "rank_table.json";
  std::string token;
  std::string sinkd;
  int threads = 0;
  bool quiet = false;
};

// --data, parsed.
struct DataChoice {
  bool synthetic = false;
  std::string dir = kFashionMnistDir;            // fashion-mnist
  int64_t synthetic_size = kSyntheticTrainSize;  // synthetic: training samples
  std::string describe() const {
    return synthetic ? "synthetic:" + std::to_string(synthetic_size) : "fashion-mnist:" + dir;
  }
};

int Usage(const std::string& message) {
  std::cerr << "sinkrun: " << message << '\n';
  return 2;
}

int Failure(const std::string& message) {
  std::cerr << "sinkrun: " << message << '\n';
  return 1;
}

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

uint64_t Mix(uint64_t z) {  // one SplitMix64 step from state z: a good 64-bit hash
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// A stand-in for Fashion-MNIST with its columns (image u8 [28, 28, 1],
// label i32 []): each class is a fixed random template and each sample its
// class's template blended 1:3 with per-pixel noise, so an MLP learns it
// within an epoch or two and a broken pipeline shows as chance accuracy. Sample i of a split
// depends only on (split, i), so it is the same on every run and from any
// worker thread; the data does not follow --seed, as a file's would not.
Dataset SyntheticImages(int64_t size, uint64_t split) {
  constexpr int64_t kPixels = kImageSide * kImageSide;
  auto templates = std::make_shared<std::vector<uint8_t>>(kClasses * kPixels);
  for (int64_t i = 0; i < kClasses * kPixels; ++i) (*templates)[i] = static_cast<uint8_t>(Mix(0x7E3A11 + i) >> 56);
  std::vector<host::ColumnSpec> columns = {{"image", DType::U8, {kImageSide, kImageSide, 1}},
                                           {"label", DType::I32, {}}};
  return Dataset::FromGenerator(columns, size, [templates, split](int64_t index, host::Row* row) {
    row->resize(2);
    const uint64_t key = Mix(split * 0x100000000ull + static_cast<uint64_t>(index));
    const int32_t label = static_cast<int32_t>(key % kClasses);
    host::Tensor& image = (*row)[0];
    image.dtype = DType::U8;
    image.shape = {kImageSide, kImageSide, 1};
    image.data.resize(kPixels);
    const uint8_t* t = templates->data() + label * kPixels;
    for (int64_t p = 0; p < kPixels; ++p) {
      const uint64_t noise = Mix(key ^ static_cast<uint64_t>(p) * 0xD1B54A32D192ED03ull) >> 56;
      image.data[p] = static_cast<uint8_t>((t[p] + noise * 3) / 4);
    }
    host::Tensor& y = (*row)[1];
    y.dtype = DType::I32;
    y.shape = {};
    y.data.resize(sizeof(int32_t));
    std::memcpy(y.data.data(), &label, sizeof label);
    return Status::Ok();
  });
}

// `usage`: "train" or "test".
Result<Dataset> RawSplit(const DataChoice& data, const std::string& usage) {
  const bool train = usage == "train";
  Dataset d = !data.synthetic ? Dataset::Mnist(data.dir, usage)
              : train         ? SyntheticImages(data.synthetic_size, 0)
                              : SyntheticImages(std::max<int64_t>(1, data.synthetic_size / kSyntheticTestRatio), 1);
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

Result<host::OptimizerSpec> Optimizer(const Flags& f) {
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

double SecondsSince(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The devices a run trains on, one per rank. Members are destroyed in
// reverse order: the connections close before the daemons they talk to are
// stopped.
struct TrainDevices {
  std::unique_ptr<host::LocalCluster> cluster;  // --devices: the daemons started for this run
  std::vector<std::unique_ptr<DeviceLink>> links;
  std::string kind;      // "in-process" or "sinkd"
  std::string describe;  // for the header line
  device::InProcessDevice* in_process = nullptr;  // links[0], when in-process
  int sinkd_threads = 0;                          // from rank 0's Hello

  // An in-process device knows its threads once a job is loaded.
  int threads() const { return in_process ? in_process->executor()->threads() : sinkd_threads; }
  std::vector<DeviceLink*> pointers() const {
    std::vector<DeviceLink*> out;
    for (const auto& l : links) out.push_back(l.get());
    return out;
  }
};

Result<std::string> SinkdPath(const std::string& flag, const char* argv0) {
  if (!flag.empty()) return flag;
  auto found = host::FindSinkd(argv0);
  if (!found.ok()) return found.status().WithContext("--sinkd PATH or SINKRT_SINKD");
  return found;
}

// Connects to every rank of `table`, rank r expecting to find rank r.
Status ConnectSinkd(const RankTable& table, const std::string& token, TrainDevices* d) {
  d->kind = "sinkd";
  for (size_t r = 0; r < table.ranks.size(); ++r) {
    host::RemoteOptions options = host::RemoteOptions::FromEnvironment();
    options.rank = static_cast<int>(r);
    options.token = token;
    const Address& address = table.ranks[r].address;
    SINKRT_ASSIGN_OR_RETURN(std::unique_ptr<host::RemoteDevice> remote, host::RemoteDevice::Connect(address, options));
    if (r == 0) {
      d->describe = "sinkd rank 0 at " + address.ToString() + " (pid " + std::to_string(remote->hello().pid) + ")";
      d->sinkd_threads = static_cast<int>(remote->hello().cores);
    }
    d->links.push_back(std::move(remote));
  }
  if (table.ranks.size() > 1)
    d->describe = std::to_string(table.ranks.size()) + " sinkd daemons, ranks 0-" +
                  std::to_string(table.ranks.size() - 1) + " (" + d->describe + ")";
  return Status::Ok();
}

// `table`: the loaded --rank-table, if any; `launch`: start `devices`
// local daemons.
Result<TrainDevices> OpenDevices(const Flags& f, bool launch, int devices, const std::optional<RankTable>& table,
                                 const char* argv0) {
  TrainDevices d;
  if (table) {
    SINKRT_RETURN_IF_ERROR(ConnectSinkd(*table, f.token, &d));
    if (f.rank_table_source.starts_with("RANK_TABLE_FILE")) d.describe += ", from " + f.rank_table_source;
    return d;
  }
  if (launch) {
    host::LocalClusterOptions options;
    options.devices = devices;
    SINKRT_ASSIGN_OR_RETURN(options.sinkd_path, SinkdPath(f.sinkd, argv0));
    options.token = f.token;
    // Failures come back over the connection; the job log would only
    // interleave with the training lines.
    options.sinkd_args = {"--quiet"};
    // Daemons on one machine share its cores: without --threads each gets
    // its share, so their thread teams do not oversubscribe the machine.
    const int threads = f.threads > 0 ? f.threads : std::max(1, device::AvailableCores() / devices);
    if (f.threads > 0 || devices > 1)
      options.sinkd_args.insert(options.sinkd_args.end(), {"--threads", std::to_string(threads)});
    SINKRT_ASSIGN_OR_RETURN(d.cluster, host::LocalCluster::Start(options));
    SINKRT_RETURN_IF_ERROR(ConnectSinkd(d.cluster->rank_table(), f.token, &d));
    return d;
  }
  device::DeviceOptions options = device::DeviceOptions::FromEnvironment();
  if (f.threads > 0) options.threads = f.threads;
  auto in_process = std::make_unique<device::InProcessDevice>(options);
  d.kind = "in-process";
  d.describe = "in-process";
  d.in_process = in_process.get();
  d.links.push_back(std::move(in_process));
  return d;
}

int Train(const Flags& f, const CLI::App& cmd, const char* argv0, Clock::time_point start) {
  // Flags whose meaning depends on others, checked together so that no
  // combination is silently ignored.
  const bool launch_sinkd = cmd.count("--devices") > 0;
  if (launch_sinkd && !f.rank_table.empty())
    return Usage("--devices and --rank-table contradict each other: the rank table names the devices");
  if (!f.token.empty() && !launch_sinkd && f.rank_table.empty() && f.streams.empty())
    return Usage("--token applies to sinkd (--devices or --rank-table), not to the in-process device");
  if (!f.sinkd.empty() && !launch_sinkd && f.streams.empty()) return Usage("--sinkd applies to --devices, which starts a sinkd");
  if (f.threads > 0 && !f.rank_table.empty())
    return Usage("--threads: the daemons of a rank table (" + f.rank_table_source +
                 ") run with the --threads they were started with");
  if (!(f.lr > 0) || !std::isfinite(f.lr)) return Usage("--lr must be a positive number, got " + Num(f.lr));
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
                              "--parameter-broadcast", "--comm-fusion"})
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
  int devices = table ? static_cast<int>(table->size()) : f.devices;
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
      return Usage(f.rank_table_source + " has " + std::to_string(devices) + " ranks, but the streams in " +
                   f.streams + " were compiled for " + std::to_string(n));
    if (launch && devices != n)
      return Usage("--devices " + std::to_string(devices) + ": the streams in " + f.streams + " were compiled for " +
                   std::to_string(n) + (n == 1 ? " rank" : " ranks"));
    // Several ranks need as many devices: local daemons unless a rank table names them.
    if (!table && n > 1) launch = true;
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
    if (!cmd.count("--optimizer") && graph_file->optimizer) *optimizer = *graph_file->optimizer;
  }
  bool flat = f.model == "mlp";
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
  } else {
    auto parsed = tools::ParseParallelFlags(
        {.parallel = f.parallel,
         .devices = devices,
         .devices_flag = table ? f.rank_table_source + " (" + std::to_string(devices) + " ranks)"
                               : "--devices " + std::to_string(devices),
         .gradients_mean = f.gradients_mean,
         .gradients_mean_given = cmd.count("--gradients-mean") > 0,
         .parameter_broadcast = f.parameter_broadcast,
         .comm_fusion = f.comm_fusion});
    if (!parsed.ok()) return Usage(parsed.status().message());
    context = *parsed;
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
    return Usage("--batch " + std::to_string(batch) + " is larger than the " + std::to_string(train_samples) +
                 " training samples");
  if (job || graph_file) {
    Status matches = CheckColumns(inputs, train_data->output_columns());
    if (!matches.ok()) return Failure(network + " does not match --data " + data->describe() + ": " + matches.message());
  }
  std::unique_ptr<host::ReportCallback> report;
  if (!f.report.empty()) {
    auto r = host::ReportCallback::Create(f.report);
    if (!r.ok()) return Failure("--report: " + r.status().message());
    report = std::move(r).value();
  }

  // Each rank takes every devices-th sample: a pass has this many steps.
  const int64_t rank_batches =
      devices > 1 ? train_data->ShardBelowBatch(devices, 0).get_dataset_size() : batches;
  if (devices > 1 && rank_batches < 1)
    return Usage("--batch " + std::to_string(batch) + " on " + std::to_string(devices) +
                 " devices needs more than the " + std::to_string(train_samples) + " training samples");

  // Last of the checks: starting or reaching a daemon is the costliest.
  auto opened = OpenDevices(f, launch, devices, table, argv0);
  if (!opened.ok()) return Failure(opened.status().message());
  TrainDevices& dev = *opened;

  const bool sink = !f.no_sink;
  const int64_t pass_steps = devices > 1 ? rank_batches : batches;
  const int64_t steps_per_epoch = sink && f.sink_size > 0 ? f.sink_size : pass_steps;
  const int64_t global_batch = batch * devices;
  std::cout << "sinkrun: " << network << " on " << data->describe() << ": " << train_samples << " training, "
            << test_raw->get_dataset_size() << " test samples; batch " << batch
            << (devices > 1 ? " per rank (global " + std::to_string(global_batch) + ")" : std::string()) << ", "
            << f.epochs << " epochs of " << steps_per_epoch << " steps, "
            << (sink ? "sink mode (sink_size " + std::to_string(f.sink_size) + ")" : std::string("non-sink mode"))
            << ", " << OptimizerText(*optimizer) << ", seed " << f.seed << "; "
            << tools::ParallelContextText(context.mode, context.gradients_mean) << "; device: " << dev.describe
            << std::endl;

  host::ModelOptions model_options;
  const std::vector<DeviceLink*> links = dev.pointers();
  Result<std::unique_ptr<host::Model>> model = Internal("no network");
  if (job) {
    // The streams carry their own plan: Create checks the devices against it.
    model = host::Model::Create(std::move(*job), links, model_options);
  } else if (graph_file) {
    model_options.context = context;
    model = host::Model::Create(std::move(graph_file->graph), host::LossSpec::None(), *optimizer, links,
                                model_options);
  } else {
    model_options.context = context;
    host::Graph net = f.model == "mlp" ? host::MakeMlpNetwork(batch, {784, 512, 256, 10}, f.seed)
                                       : host::MakeLeNetNetwork(batch, f.seed);
    model = host::Model::Create(std::move(net), host::LossSpec::SparseSoftmaxCrossEntropy(), *optimizer, links,
                                model_options);
  }
  if (!model.ok()) return Failure(model.status().message());
  const host::CompileReport& compiled = (*model)->compiled().report;
  std::cout << "compiled: " << compiled.train_tasks << " train tasks";
  if (!compiled.buckets.empty()) {
    uint64_t bytes = 0;
    for (const auto& b : compiled.buckets) bytes += b.bytes;
    std::cout << " + " << compiled.comm_tasks << " comm tasks (" << compiled.buckets.size() << " AllReduce bucket"
              << (compiled.buckets.size() == 1 ? "" : "s") << ", " << Fixed1(bytes / 1048576.0) << " MiB)";
  }
  std::cout << ", arena " << Fixed1(compiled.arena_bytes / 1048576.0) << " MiB; device threads " << dev.threads()
            << std::endl;

  // In sink mode LossMonitor prints once per sink; without sinking it would
  // print every step, so it prints at each epoch's last step instead.
  host::LossMonitor loss_monitor(sink ? 1 : static_cast<int>(pass_steps));
  host::TimeMonitor time_monitor;
  std::vector<host::Callback*> callbacks = {&loss_monitor, &time_monitor};
  if (report) callbacks.push_back(report.get());

  const uint64_t round_trips_before = (*model)->host_round_trips();
  const Clock::time_point train_start = Clock::now();
  Status trained = (*model)->train(f.epochs, *train_data, callbacks, sink, sink ? f.sink_size : -1);
  const double train_s = SecondsSince(train_start);
  if (!trained.ok()) return Failure("training failed: " + trained.message());
  const uint64_t train_round_trips = (*model)->host_round_trips() - round_trips_before;

  if (!f.save_checkpoint.empty()) {
    const int64_t consumed = int64_t{f.epochs} * steps_per_epoch;
    Status saved = host::SaveCheckpoint(
        f.save_checkpoint, **model,
        {.epoch = f.epochs, .step = steps_per_epoch, .batch_num = steps_per_epoch, .global_batch = consumed});
    if (!saved.ok()) return Failure("--save-checkpoint: " + saved.message());
  }

  auto eval = (*model)->eval(*test_data);
  if (!eval.ok()) return Failure("evaluation failed: " + eval.status().message());

  const int64_t steps = int64_t{f.epochs} * steps_per_epoch;
  const double samples_per_s = static_cast<double>(steps * global_batch) / train_s;
  const double wall_s = SecondsSince(start);
  std::printf("Eval result: accuracy %.4f, loss %.4f over %lld test samples\n", eval->accuracy, eval->loss,
              static_cast<long long>(eval->samples));
  std::printf("Trained %lld steps (%lld samples) in %.2f s: %.0f samples/s; %llu control round trips (%s); "
              "wall %.2f s\n",
              static_cast<long long>(steps), static_cast<long long>(steps * global_batch), train_s, samples_per_s,
              static_cast<unsigned long long>(train_round_trips),
              sink ? (devices > 1 ? "one per sink epoch per device" : "one per sink epoch")
                   : (devices > 1 ? "one per step per device" : "one per step"),
              wall_s);
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
    if (optimizer->kind == host::OptimizerKind::Momentum) end["momentum"] = optimizer->momentum;
    Status written = report->Write(end);
    if (!written.ok()) return Failure(written.message());
  }
  return 0;
}

sigset_t StopSignals() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&set, sig);
  return set;
}

// Waits for a stop signal or for a daemon to die: the signal's number, or 0
// with `died` set. A short timeout keeps a dead daemon from going unnoticed.
int WaitForStopOrDeath(const sigset_t& stop, host::LocalCluster& cluster, Status* died) {
  const timespec poll_interval{0, 200'000'000};
  for (;;) {
    const int sig = sigtimedwait(&stop, nullptr, &poll_interval);
    if (sig > 0) return sig;
    if (errno != EAGAIN && errno != EINTR) {
      *died = Internal(std::string("sigtimedwait: ") + std::strerror(errno));
      return 0;
    }
    *died = cluster.Poll();
    if (!died->ok()) return 0;
  }
}

int Launch(const LaunchFlags& f, const char* argv0) {
  if (f.base_port > 0 && f.base_port + f.devices - 1 > 65535)
    return Usage("--base-port " + std::to_string(f.base_port) + ": " + std::to_string(f.devices) +
                 " daemons need ports up to " + std::to_string(f.base_port + f.devices - 1) + ", beyond 65535");
  auto sinkd = SinkdPath(f.sinkd, argv0);
  if (!sinkd.ok()) return Failure(sinkd.status().message());
  // Blocked before any daemon starts, so a Ctrl-C while they start waits for
  // sigtimedwait instead of killing the launcher halfway; each daemon
  // unblocks them before exec.
  const sigset_t stop = StopSignals();
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);

  host::LocalClusterOptions options;
  options.devices = f.devices;
  options.base_port = f.base_port;
  options.sinkd_path = *sinkd;
  options.token = f.token;
  if (f.threads > 0) options.sinkd_args.insert(options.sinkd_args.end(), {"--threads", std::to_string(f.threads)});
  if (f.quiet) options.sinkd_args.push_back("--quiet");
  auto cluster = host::LocalCluster::Start(options);
  if (!cluster.ok()) return Failure("starting sinkd: " + cluster.status().message());

  const RankTable& table = (*cluster)->rank_table();
  std::string json = RankTableToJson(table);
  if (json.empty() || json.back() != '\n') json += '\n';
  Status written = WriteFileBytes(f.rank_table_out, {reinterpret_cast<const uint8_t*>(json.data()), json.size()});
  if (!written.ok()) return Failure("--rank-table-out: " + written.message());
  std::error_code ec;
  const std::filesystem::path table_path = std::filesystem::absolute(f.rank_table_out, ec);
  const std::vector<pid_t> pids = (*cluster)->pids();
  for (size_t i = 0; i < table.size(); ++i)
    std::printf("sinkrun: rank %u at %s (pid %d)\n", table.ranks[i].rank, table.ranks[i].address.ToString().c_str(),
                static_cast<int>(pids[i]));
  std::printf("sinkrun: rank table %s; Ctrl-C or SIGTERM stops the daemons\n",
              (ec ? f.rank_table_out : table_path.string()).c_str());
  std::fflush(stdout);

  Status died;
  const int sig = WaitForStopOrDeath(stop, **cluster, &died);
  if (sig > 0) std::fprintf(stderr, "sinkrun: SIG%s: stopping %zu daemons\n", sigabbrev_np(sig), table.size());
  else std::fprintf(stderr, "sinkrun: %s; stopping the others\n", died.message().c_str());
  (*cluster)->Stop();
  return sig > 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  sinkrt::device::EnsurePassiveOpenMp(argv);
  const Clock::time_point start = Clock::now();
  // A daemon that goes away must be an error from send(), not a silent death.
  signal(SIGPIPE, SIG_IGN);
  CLI::App app{"sinkrun: trains sinkrt's built-in networks end to end, on an in-process device or on sinkd"};
  app.require_subcommand(1);
  Flags f;
  CLI::App* train = app.add_subcommand("train", "train a network, then evaluate it on the test split");
  // The last of a repeated option wins, as with getopt, so that a wrapper
  // (scripts/demo) can pass defaults and its caller override them.
  train->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  train->add_option("--model", f.model, "network: mlp (784-512-256-10) or lenet")
      ->check(CLI::IsMember({"mlp", "lenet"}))
      ->capture_default_str();
  train->add_option("--graph", f.graph, "train a graph file (binary or JSON; its loss and optimizer) instead of --model");
  train->add_option("--streams", f.streams,
                    "run the task streams sinkc compiled into DIR: no graph, no compile; the plan, optimizer and "
                    "batch are the streams'");
  train->add_option("--save-checkpoint", f.save_checkpoint,
                    "after training, write the parameters and optimizer state to FILE");
  train->add_option("--data", f.data,
                    "fashion-mnist[:DIR] (IDX files, raw or .gz; default DIR " + std::string(kFashionMnistDir) +
                        ") or synthetic[:N] (a generated stand-in, N training samples, default 60000)")
      ->required();
  train->add_option("--epochs", f.epochs, "epochs (sinks in sink mode)")
      ->check(tools::PositiveInteger())
      ->capture_default_str();
  train->add_option("--batch", f.batch, "batch size")->check(tools::PositiveInteger())->capture_default_str();
  train->add_option("--optimizer", f.optimizer, "sgd, momentum or adam")
      ->check(CLI::IsMember({"sgd", "momentum", "adam"}))
      ->capture_default_str();
  train->add_option("--lr", f.lr, "learning rate, > 0")->capture_default_str();
  train->add_option("--momentum", f.momentum, "momentum of --optimizer momentum, in [0, 1)")->capture_default_str();
  train->add_option("--seed", f.seed, "parameter initialisation and shuffle seed")->capture_default_str();
  train->add_option("--sink-size", f.sink_size,
                    "steps per sink epoch; -1: a whole pass (MindSpore's sink_size)")
      ->capture_default_str();
  train->add_flag("--no-sink", f.no_sink, "run every step as its own request (dataset_sink_mode=False)");
  train->add_option("--threads", f.threads, "device kernel threads (default: every core this process may use)")
      ->check(tools::PositiveInteger());
  train->add_option("--report", f.report, "write one JSON object per epoch and an end record to FILE");
  train->add_option("--devices", f.devices,
                    "start this many sinkd daemons for the run and train on them (more than one needs "
                    "--parallel data_parallel); default: an in-process device")
      ->check(tools::PositiveInteger());
  train->add_option("--rank-table", f.rank_table,
                    "train on the running sinkd daemons this rank table names (default: RANK_TABLE_FILE, unless "
                    "--devices is given)");
  train->add_option("--parallel", f.parallel,
                    "stand_alone (one device) or data_parallel (one replica per device, gradients AllReduced "
                    "on the devices; --batch is per rank)")
      ->capture_default_str();
  train->add_option("--gradients-mean", f.gradients_mean,
                    "data_parallel: average the gradients over the ranks (true, as DDP) or sum them (false, "
                    "MindSpore's default)")
      ->capture_default_str();
  train->add_flag("--parameter-broadcast", f.parameter_broadcast,
                  "data_parallel: broadcast rank 0's initial parameters to every rank");
  train->add_option("--comm-fusion", f.comm_fusion,
                    "data_parallel: MindSpore's comm_fusion as JSON, e.g. "
                    "'{\"allreduce\": {\"mode\": \"size\", \"config\": 32}}'");
  train->add_option("--token", f.token, "the daemons' --token");
  train->add_option("--sinkd", f.sinkd, "the sinkd binary for --devices (default: SINKRT_SINKD, or beside sinkrun)");

  LaunchFlags l;
  CLI::App* launch = app.add_subcommand(
      "launch", "start N sinkd daemons on this machine, write their rank table, stop them on Ctrl-C or SIGTERM");
  launch->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  launch->add_option("-n,--devices", l.devices, "daemons to start, ranks 0..N-1")->required()->check(tools::PositiveInteger());
  launch->add_option("--base-port", l.base_port, "rank i listens on 127.0.0.1:(P + i); 0: any free port")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  launch->add_option("--rank-table-out", l.rank_table_out, "where to write the rank table")->capture_default_str();
  launch->add_option("--token", l.token, "a secret every host must send");
  launch->add_option("--sinkd", l.sinkd, "the sinkd binary (default: SINKRT_SINKD, or beside sinkrun)");
  launch->add_option("--threads", l.threads, "kernel threads per daemon (default: every core)")
      ->check(tools::PositiveInteger());
  launch->add_flag("--quiet", l.quiet, "no job log from the daemons");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (launch->parsed()) return Launch(l, argv[0]);
  // MindSpore's RANK_TABLE_FILE names the devices when the command line
  // does not: an explicit --rank-table or --devices wins over it.
  f.rank_table_source = "--rank-table " + f.rank_table;
  if (f.rank_table.empty() && !train->count("--devices"))
    if (const char* env = std::getenv("RANK_TABLE_FILE"); env && *env) {
      f.rank_table = env;
      f.rank_table_source = std::string("RANK_TABLE_FILE=") + env;
    }
  return Train(f, *train, argv[0], start);
}
