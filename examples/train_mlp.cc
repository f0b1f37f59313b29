// A first sinkrt program: build a 784-512-256-10 MLP, compile it to a task
// stream, load it into an in-process device and train it in sinks of
// --sink-size steps on a synthetic 10-class problem. The host pushes batches
// from a feeder thread; the device answers once per sink.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <thread>

#include <sinkrt/sinkrt.h>

using namespace sinkrt;

int main(int argc, char** argv) {
  device::EnsurePassiveOpenMp(argv);
  CLI::App app{"Train an MLP on one in-process sinkrt device"};
  int64_t batch = 64;
  int sinks = 10;
  uint32_t sink_size = 50;
  float lr = 0.01f;
  std::string optimizer = "momentum";
  uint64_t seed = 1;
  app.add_option("--batch", batch, "batch size")->check(CLI::PositiveNumber);
  app.add_option("--sinks", sinks, "number of sinks")->check(CLI::PositiveNumber);
  app.add_option("--sink-size", sink_size, "steps per sink")->check(CLI::PositiveNumber);
  app.add_option("--lr", lr, "learning rate");
  app.add_option("--optimizer", optimizer, "sgd | momentum | adam");
  app.add_option("--seed", seed, "initialisation and data seed");
  CLI11_PARSE(app, argc, argv);

  auto kind = host::ParseOptimizerKind(optimizer);
  if (!kind.ok()) {
    std::fprintf(stderr, "%s\n", kind.status().message().c_str());
    return 2;
  }
  host::Graph g("mlp");
  const int64_t widths[] = {784, 512, 256, 10};
  host::TensorId x = g.Input("image", {batch, 784});
  host::TensorId label = g.Input("label", {batch}, DType::I32);
  host::TensorId h = x;
  for (int i = 0; i < 3; ++i) {
    std::string n = "fc" + std::to_string(i + 1);
    auto w = g.Param(n + ".weight", {widths[i], widths[i + 1]}, host::InitSpec::HeUniform(seed + i));
    auto b = g.Param(n + ".bias", {widths[i + 1]}, host::InitSpec::Zeros());
    h = g.BiasAdd(g.MatMul(h, w), b);
    if (i < 2) h = g.Relu(h);
  }
  g.AddOutput(h);
  g.SetLoss(g.SparseSoftmaxCrossEntropy(h, label));

  host::CompileOptions opts;
  opts.optimizer.kind = *kind;
  opts.optimizer.learning_rate = lr;
  auto compiled = host::Compile(g, opts);
  if (!compiled.ok()) {
    std::fprintf(stderr, "compile failed: %s\n", compiled.status().ToString().c_str());
    return 1;
  }
  std::printf("compiled: %zu bytes, arena %.2f MiB (liveness lower bound %.2f MiB), %zu train tasks\n",
              compiled->stream.bytes().size(), compiled->report.arena_bytes / 1048576.0,
              compiled->report.liveness_lower_bound / 1048576.0, compiled->report.train_tasks);

  device::InProcessDevice dev;
  auto loaded = dev.Load(compiled->stream);
  if (!loaded.ok()) {
    std::fprintf(stderr, "load failed: %s\n", loaded.status().ToString().c_str());
    return 1;
  }
  std::printf("loaded in %.1f ms\n", loaded->load_ms);

  // Synthetic data: 10 Gaussian clusters in 784 dimensions.
  const int64_t n_batches = 64;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> centers(10 * 784);
  for (float& c : centers) c = normal(rng);
  std::vector<float> images(n_batches * batch * 784);
  std::vector<int32_t> labels(n_batches * batch);
  for (int64_t i = 0; i < n_batches * batch; ++i) {
    labels[i] = static_cast<int32_t>(rng() % 10);
    for (int f = 0; f < 784; ++f) images[i * 784 + f] = centers[labels[i] * 784 + f] + 6.0f * normal(rng);
  }

  int64_t next = 0;
  for (int s = 0; s < sinks; ++s) {
    Status feed_status;
    std::thread feeder([&] {
      for (uint32_t i = 0; i < sink_size && feed_status.ok(); ++i) {
        int64_t b = (next + i) % n_batches;
        ConstBytes cols[2] = {ConstBytes(reinterpret_cast<const uint8_t*>(&images[b * batch * 784]), batch * 784 * 4),
                              ConstBytes(reinterpret_cast<const uint8_t*>(&labels[b * batch]), batch * 4)};
        feed_status = dev.PushBatch(0, cols);
      }
    });
    auto t0 = std::chrono::steady_clock::now();
    auto r = dev.RunSink(ProgramKind::TrainStep, sink_size);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    feeder.join();
    if (!r.ok()) {
      std::fprintf(stderr, "sink %d failed: %s\n", s + 1, r.status().ToString().c_str());
      return 1;
    }
    next += sink_size;
    std::printf(
        "sink %2d: steps %u, loss %.4f, %.0f samples/s (device ms: compute %.1f, queue wait %.1f, other %.1f)\n", s + 1,
        r->steps_run, r->reports[0].scalar(), sink_size * batch / (ms / 1e3), r->timing.compute_ms,
        r->timing.queue_wait_ms, r->timing.other_ms);
  }
  std::printf("control round trips: %llu for %d sinks\n", static_cast<unsigned long long>(dev.control_round_trips()),
              sinks);
  return 0;
}
