// sinkrun: trains a built-in network end to end on one in-process device.
//
//   sinkrun train --model mlp|lenet --data fashion-mnist[:DIR]|synthetic[:N]
//                 [--epochs 5] [--batch 64] [--optimizer sgd|momentum|adam]
//                 [--lr 0.01] [--momentum 0.9] [--seed 1]
//                 [--sink-size -1 | --no-sink] [--threads N] [--report FILE]
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
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "sinkrt/device/device_options.h"
#include "sinkrt/device/executor.h"
#include "sinkrt/device/in_process_device.h"
#include "sinkrt/device/openmp_policy.h"
#include "sinkrt/host/callbacks.h"
#include "sinkrt/host/dataset.h"
#include "sinkrt/host/model.h"
#include "sinkrt/host/model_zoo.h"
#include "sinkrt/host/report_callback.h"

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
  int devices = 1;
  std::string rank_table;
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
Result<Dataset> Pipeline(const Dataset& raw, const std::string& model, int64_t batch,
                         std::optional<uint64_t> shuffle_seed, bool drop_remainder) {
  Dataset d = raw.Map("image", {Transform::Rescale(1.0 / 255.0), model == "mlp"
                                                                     ? Transform::Reshape({kImageSide * kImageSide})
                                                                     : Transform::HWC2CHW()});
  for (const host::ColumnSpec& c : raw.output_columns())
    if (c.name == "label" && c.dtype != DType::I32) d = d.Map("label", {Transform::TypeCast(DType::I32)});
  if (shuffle_seed) d = d.Shuffle(*shuffle_seed);
  d = d.Batch(batch, drop_remainder);
  if (!d.status().ok()) return d.status();
  return d;
}

Result<host::OptimizerSpec> Optimizer(const Flags& f) {
  SINKRT_ASSIGN_OR_RETURN(const host::OptimizerKind kind, host::ParseOptimizerKind(f.optimizer));
  const float lr = static_cast<float>(f.lr);
  switch (kind) {
    case host::OptimizerKind::SGD:
      return host::OptimizerSpec::Sgd(lr);
    case host::OptimizerKind::Momentum:
      return host::OptimizerSpec::Momentum(lr, static_cast<float>(f.momentum));
    case host::OptimizerKind::Adam:
      return host::OptimizerSpec::Adam(lr);
  }
  return InvalidArgument("unknown optimizer '" + f.optimizer + "'");
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

std::string OptimizerText(const Flags& f) {
  std::string s = f.optimizer + " (lr " + Num(f.lr);
  if (f.optimizer == "momentum") s += ", momentum " + Num(f.momentum);
  return s + ")";
}

// CLI::PositiveNumber's message prints the range up to DBL_MAX in full.
CLI::Validator PositiveInteger() {
  return CLI::Validator(
      [](std::string& input) -> std::string {
        long long v = 0;
        if (!CLI::detail::lexical_cast(input, v) || v < 1) return "must be a positive integer, got '" + input + "'";
        return {};
      },
      "POSITIVE");
}

double SecondsSince(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

int Train(const Flags& f, const CLI::App& cmd, Clock::time_point start) {
  // Flags whose meaning depends on others, checked together so that no
  // combination is silently ignored.
  if (f.devices != 1 || !f.rank_table.empty())
    return Usage(std::string(f.devices != 1 ? "--devices" : "--rank-table") +
                 ": data-parallel training across devices is not supported yet; sinkrun trains on one "
                 "in-process device");
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

  // Data first: a missing directory or a corrupt file ends the run here,
  // naming the file, before any compilation.
  auto train_raw = RawSplit(*data, "train");
  if (!train_raw.ok()) return Failure("--data " + data->describe() + ": " + train_raw.status().message());
  auto test_raw = RawSplit(*data, "test");
  if (!test_raw.ok()) return Failure("--data " + data->describe() + ": " + test_raw.status().message());
  auto train_data = Pipeline(*train_raw, f.model, f.batch, f.seed, /*drop_remainder=*/true);
  if (!train_data.ok()) return Failure("training pipeline: " + train_data.status().message());
  auto test_data = Pipeline(*test_raw, f.model, f.batch, std::nullopt, /*drop_remainder=*/false);
  if (!test_data.ok()) return Failure("test pipeline: " + test_data.status().message());
  const int64_t train_samples = train_raw->get_dataset_size();
  const int64_t batches = train_data->get_dataset_size();
  if (batches < 1)
    return Usage("--batch " + std::to_string(f.batch) + " is larger than the " + std::to_string(train_samples) +
                 " training samples");

  auto optimizer = Optimizer(f);
  if (!optimizer.ok()) return Usage("--optimizer: " + optimizer.status().message());
  std::unique_ptr<host::ReportCallback> report;
  if (!f.report.empty()) {
    auto r = host::ReportCallback::Create(f.report);
    if (!r.ok()) return Failure("--report: " + r.status().message());
    report = std::move(r).value();
  }

  const bool sink = !f.no_sink;
  const int64_t steps_per_epoch = sink && f.sink_size > 0 ? f.sink_size : batches;
  std::cout << "sinkrun: " << f.model << " on " << data->describe() << ": " << train_samples << " training, "
            << test_raw->get_dataset_size() << " test samples; batch " << f.batch << ", " << f.epochs
            << " epochs of " << steps_per_epoch << " steps, "
            << (sink ? "sink mode (sink_size " + std::to_string(f.sink_size) + ")" : std::string("non-sink mode"))
            << ", " << OptimizerText(f) << ", seed " << f.seed << std::endl;

  device::DeviceOptions options = device::DeviceOptions::FromEnvironment();
  if (f.threads > 0) options.threads = f.threads;
  device::InProcessDevice dev(options);
  host::Graph net = f.model == "mlp" ? host::MakeMlpNetwork(f.batch, {784, 512, 256, 10}, f.seed)
                                     : host::MakeLeNetNetwork(f.batch, f.seed);
  auto model = host::Model::Create(std::move(net), host::LossSpec::SparseSoftmaxCrossEntropy(), *optimizer, dev);
  if (!model.ok()) return Failure(model.status().message());
  const host::CompileReport& compiled = (*model)->compiled().report;
  std::cout << "compiled: " << compiled.train_tasks << " train tasks, arena "
            << Fixed1(compiled.arena_bytes / 1048576.0) << " MiB; device threads "
            << dev.executor()->threads() << std::endl;

  // In sink mode LossMonitor prints once per sink; without sinking it would
  // print every step, so it prints at each epoch's last step instead.
  host::LossMonitor loss_monitor(sink ? 1 : static_cast<int>(batches));
  host::TimeMonitor time_monitor;
  std::vector<host::Callback*> callbacks = {&loss_monitor, &time_monitor};
  if (report) callbacks.push_back(report.get());

  const uint64_t round_trips_before = (*model)->host_round_trips();
  const Clock::time_point train_start = Clock::now();
  Status trained = (*model)->train(f.epochs, *train_data, callbacks, sink, sink ? f.sink_size : -1);
  const double train_s = SecondsSince(train_start);
  if (!trained.ok()) return Failure("training failed: " + trained.message());
  const uint64_t train_round_trips = (*model)->host_round_trips() - round_trips_before;

  auto eval = (*model)->eval(*test_data);
  if (!eval.ok()) return Failure("evaluation failed: " + eval.status().message());

  const int64_t steps = int64_t{f.epochs} * steps_per_epoch;
  const double samples_per_s = static_cast<double>(steps * f.batch) / train_s;
  const double wall_s = SecondsSince(start);
  std::printf("Eval result: accuracy %.4f, loss %.4f over %lld test samples\n", eval->accuracy, eval->loss,
              static_cast<long long>(eval->samples));
  std::printf("Trained %lld steps (%lld samples) in %.2f s: %.0f samples/s; %llu control round trips (%s); "
              "wall %.2f s\n",
              static_cast<long long>(steps), static_cast<long long>(steps * f.batch), train_s, samples_per_s,
              static_cast<unsigned long long>(train_round_trips), sink ? "one per sink epoch" : "one per step",
              wall_s);
  if (report) {
    nlohmann::ordered_json end = {
        {"event", "end"},
        {"model", f.model},
        {"data", data->describe()},
        {"epochs", f.epochs},
        {"batch_size", f.batch},
        {"optimizer", f.optimizer},
        {"learning_rate", f.lr},
        {"seed", f.seed},
        {"sink_mode", sink},
        {"sink_size", sink ? f.sink_size : -1},
        {"device_threads", dev.executor()->threads()},
        {"train_steps", steps},
        {"train_samples", steps * f.batch},
        {"train_s", train_s},
        {"train_samples_per_s", samples_per_s},
        {"host_round_trips", train_round_trips},
        {"eval_round_trips", eval->round_trips},
        {"test_accuracy", eval->accuracy},
        {"test_loss", eval->loss},
        {"test_samples", eval->samples},
        {"wall_s", wall_s},
    };
    if (f.optimizer == "momentum") end["momentum"] = f.momentum;
    Status written = report->Write(end);
    if (!written.ok()) return Failure(written.message());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  sinkrt::device::EnsurePassiveOpenMp(argv);
  const Clock::time_point start = Clock::now();
  CLI::App app{"sinkrun: trains sinkrt's built-in networks end to end on an in-process device"};
  app.require_subcommand(1);
  Flags f;
  CLI::App* train = app.add_subcommand("train", "train a network, then evaluate it on the test split");
  // The last of a repeated option wins, as with getopt, so that a wrapper
  // (scripts/demo) can pass defaults and its caller override them.
  train->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  train->add_option("--model", f.model, "network: mlp (784-512-256-10) or lenet")
      ->check(CLI::IsMember({"mlp", "lenet"}))
      ->capture_default_str();
  train->add_option("--data", f.data,
                    "fashion-mnist[:DIR] (IDX files, raw or .gz; default DIR " + std::string(kFashionMnistDir) +
                        ") or synthetic[:N] (a generated stand-in, N training samples, default 60000)")
      ->required();
  train->add_option("--epochs", f.epochs, "epochs (sinks in sink mode)")
      ->check(PositiveInteger())
      ->capture_default_str();
  train->add_option("--batch", f.batch, "batch size")->check(PositiveInteger())->capture_default_str();
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
      ->check(PositiveInteger());
  train->add_option("--report", f.report, "write one JSON object per epoch and an end record to FILE");
  train->add_option("--devices", f.devices, "devices to train on (only 1 so far)")->check(PositiveInteger());
  train->add_option("--rank-table", f.rank_table, "MindSpore rank table for multi-device jobs (not supported yet)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  return Train(f, *train, start);
}
