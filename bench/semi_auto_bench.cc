// SEMI_AUTO_PARALLEL training of the ViT and a wide ViT on local sinkd
// daemons: data vs model (Megatron) vs 2x2 layouts against one device, at
// the same global batch.
//
//   BM_Sharded/net/layout/devices   Model.train, sink mode, Adam 1e-3,
//       global batch 64 (one data-parallel group's batch 64 / DP), on N
//       daemons in SEMI_AUTO_PARALLEL with the strategy preset (layout 0:
//       one device STAND_ALONE; 1 data; 2 model; 3 2x2), gradients mean.
//       net 0: the zoo ViT (dim 64, 4 heads, MLP 256, 2 blocks, 105k
//       parameters); net 1: a wide ViT (dim 256, 4 heads, MLP 1024, 4
//       blocks, 3.2M parameters). Each daemon runs --threads
//       max(1, cores/N), as `sinkrun train --devices N` starts them.
//
// One iteration is one epoch of kSteps steps; one untimed epoch warms up
// first. Counters, per step (device clocks, averaged over the ranks):
//   step_ms       the host's epoch time / steps
//   compute_ms, comm_ms, comm_wait_ms
//   hidden        max(0, 1 - comm_wait / comm): the share of communication
//                 the compute stream did not wait for
//   arena_mb      rank 0's whole arena; state_mb: its parameters, gradients
//                 and optimizer state (the slices it holds)
//   allreduce_fwd the forward activation AllReduces per step in rank 0's
//                 stream (Megatron's count)
// main prints the table bench/history/parallel.md shows.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <string>
#include <vector>

#include "local_daemons.h"
#include "recording_reporter.h"
#include "sinkrt/fb/task_stream_generated.h"
#include "sinkrt/host/model.h"
#include "sinkrt/host/model_zoo.h"
#include "sinkrt/host/shard_strategies.h"
#include "support/model_fixtures.h"
#include "support/test_models.h"

namespace sinkrt {
namespace {

constexpr int64_t kGlobalBatch = 64;
constexpr int64_t kSteps = 8;  // per epoch
constexpr int kTimedEpochs = 3;
const char* const kLayouts[] = {"one", "data", "model", "2x2"};
const char* const kNets[] = {"vit", "wide_vit"};

host::VitConfig NetConfig(int net) {
  if (net == 0) return {};
  return {.dim = 256, .heads = 4, .hidden = 1024, .blocks = 4};
}

// The network with the loss Model would append, so a preset covers it.
host::Graph Network(int net) {
  host::Graph g = host::MakeVitNetwork(kGlobalBatch, 1, NetConfig(net));
  const host::TensorId label = g.Input("label", {kGlobalBatch}, DType::I32);
  g.SetLoss(g.SparseSoftmaxCrossEntropy(g.outputs().front(), label));
  return g;
}

void RunSharded(benchmark::State& state) {
  const int net = static_cast<int>(state.range(0));
  const int layout = static_cast<int>(state.range(1));
  const int devices = static_cast<int>(state.range(2));
  host::Graph g = Network(net);
  int64_t dp = 1;
  host::ModelOptions options;
  options.compile_cache = "";
  if (layout > 0) {
    auto d = host::PresetDataParallel(kLayouts[layout], devices);
    if (!d.ok()) return state.SkipWithError(d.status().ToString().c_str());
    dp = *d;
    if (Status st = host::ApplyShardStrategy(kLayouts[layout], g, devices); !st.ok())
      return state.SkipWithError(st.ToString().c_str());
    options.context.mode = host::ParallelMode::SemiAutoParallel;
    options.context.device_num = devices;
    options.context.gradients_mean = true;
  }
  auto links = bench::Connect(devices);
  if (!links.ok()) return state.SkipWithError(links.status().ToString().c_str());
  std::vector<DeviceLink*> pointers;
  for (auto& l : *links) pointers.push_back(l.get());
  auto model =
      host::Model::Create(std::move(g), host::LossSpec::None(), host::OptimizerSpec::Adam(1e-3f), pointers, options);
  if (!model.ok()) return state.SkipWithError(model.status().ToString().c_str());

  const testing::SyntheticData data = testing::MakeSyntheticData(kGlobalBatch * kSteps, 784, 10, 1);
  const host::Dataset ds = testing::MakeDataset(data, kGlobalBatch / dp);
  bench::TimingCallback timing;
  if (Status st = (*model)->train(1, ds, {&timing}, true, -1); !st.ok())
    return state.SkipWithError(st.ToString().c_str());
  timing.armed = true;
  for (auto _ : state) {
    if (Status st = (*model)->train(1, ds, {&timing}, true, -1); !st.ok())
      return state.SkipWithError(st.ToString().c_str());
  }
  const double steps = static_cast<double>(std::max<int64_t>(1, timing.steps));
  const DeviceTiming& t = timing.sum;
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * kGlobalBatch * kSteps);
  state.counters["step_ms"] = timing.epoch_ms / steps;
  state.counters["compute_ms"] = t.compute_ms / steps;
  state.counters["comm_ms"] = t.comm_ms / steps;
  state.counters["comm_wait_ms"] = t.comm_wait_ms / steps;
  state.counters["hidden"] = t.comm_ms > 0 ? std::max(0.0, 1.0 - t.comm_wait_ms / t.comm_ms) : 0.0;
  const host::CompileReport& report = (*model)->compiled().report;
  double state_bytes = 0;
  for (const host::PlannedBuffer& b : report.buffers)
    if (b.role == BufferRole::Param || b.role == BufferRole::Grad || b.role == BufferRole::OptState)
      state_bytes += static_cast<double>(b.bytes);
  state.counters["arena_mb"] = static_cast<double>(report.arena_bytes) / (1 << 20);
  state.counters["state_mb"] = state_bytes / (1 << 20);
  int forward_allreduces = 0;
  if (const fb::Program* p = (*model)->compiled().stream.FindProgram(ProgramKind::PredictStep))
    for (const fb::Stream* s : *p->streams())
      for (const fb::Task* task : *s->tasks()) forward_allreduces += task->body_type() == fb::TaskBody::AllReduceTask;
  state.counters["allreduce_fwd"] = forward_allreduces;
  state.counters["threads"] = bench::ThreadsPerDaemon(devices);
}

BENCHMARK(RunSharded)
    ->Name("BM_Sharded")
    ->ArgNames({"net", "layout", "devices"})
    ->Args({0, 0, 1})
    ->Args({0, 1, 2})
    ->Args({0, 2, 2})
    ->Args({0, 1, 4})
    ->Args({0, 2, 4})
    ->Args({0, 3, 4})
    ->Args({1, 0, 1})
    ->Args({1, 1, 2})
    ->Args({1, 2, 2})
    ->Args({1, 1, 4})
    ->Args({1, 2, 4})
    ->Args({1, 3, 4})
    ->Iterations(kTimedEpochs)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void PrintSummary(const RecordingReporter& rep) {
  std::printf("\nSEMI_AUTO_PARALLEL, global batch %lld, sink mode, Adam; %d cores\n",
              static_cast<long long>(kGlobalBatch), device::AvailableCores());
  std::printf("%-9s %-6s %2s %9s %8s %8s %9s %7s %9s %9s %4s\n", "net", "layout", "N", "step_ms", "speedup", "comm_ms",
              "wait_ms", "hidden", "arena_MB", "state_MB", "fwdAR");
  for (int net : {0, 1}) {
    const std::string one = "BM_Sharded/net:" + std::to_string(net) + "/layout:0/devices:1";
    const double base = rep.Median(one, "step_ms");
    for (auto [layout, n] : {std::pair{0, 1}, {1, 2}, {2, 2}, {1, 4}, {2, 4}, {3, 4}}) {
      const std::string name = "BM_Sharded/net:" + std::to_string(net) + "/layout:" + std::to_string(layout) +
                               "/devices:" + std::to_string(n);
      const double step = rep.Median(name, "step_ms");
      if (step < 0) continue;
      std::printf("%-9s %-6s %2d %9.2f %7.2fx %8.2f %9.2f %6.0f%% %9.2f %9.2f %4.0f\n", kNets[net], kLayouts[layout], n,
                  step, base > 0 ? base / step : 0.0, rep.Median(name, "comm_ms"), rep.Median(name, "comm_wait_ms"),
                  100 * rep.Median(name, "hidden"), rep.Median(name, "arena_mb"), rep.Median(name, "state_mb"),
                  rep.Median(name, "allreduce_fwd"));
    }
  }
}

}  // namespace
}  // namespace sinkrt

int main(int argc, char** argv) {
  return sinkrt::RunRecorded(argc, argv, sinkrt::bench::StopDaemons, sinkrt::PrintSummary);
}
