// Optimizer parallel (ZeRO-1; docs/parallel_optimizer.md) against plain
// data parallel on local sinkd daemons: per-rank memory and step time.
//
//   BM_Zero/net:N/devices:D/zero:Z   Model.train with Adam (1e-3) in sink
//        mode on D real sinkd daemons, DATA_PARALLEL with gradients mean,
//        Z = 1 with enable_parallel_optimizer (threshold 64 KB, comm_fusion
//        defaults: one fused ReduceScatter and one fused AllGather bucket).
//        Nets: 0 = the MLP 784-512-256-10 at batch 64 per rank, 1 = the
//        wide ViT {dim 256, heads 4, hidden 1024, blocks 4} at batch 16.
//        One iteration is one epoch of kSteps steps per rank after an
//        untimed one. Counters:
//          items_per_second   global samples/s
//          comm_ms, comm_wait_ms per step (the devices' clocks, averaged over
//                             the ranks): collective time, and the part the
//                             compute stream waited for
//          arena_MiB          rank 0's arena (from its compiled stream)
//          opt_state_MiB      rank 0's optimizer-state buffers
//          state_MiB          rank 0's parameters + gradients + optimizer state
//
// main prints, per net and device count, both runs side by side: the
// memory each rank saves and the step time the AllGather costs.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "local_daemons.h"
#include "recording_reporter.h"
#include "sinkrt/host/compiled_job.h"
#include "sinkrt/host/model.h"
#include "sinkrt/host/model_zoo.h"
#include "support/model_fixtures.h"

namespace sinkrt {
namespace {

constexpr int64_t kSteps = 48;  // per rank per epoch
constexpr int kTimedEpochs = 4;

using bench::Connect;
using bench::StopDaemons;
using bench::TimingCallback;

int64_t BatchOf(int net) { return net == 0 ? 64 : 16; }

host::Graph NetworkOf(int net) {
  if (net == 0) return host::MakeMlpNetwork(BatchOf(net));
  return host::MakeVitNetwork(BatchOf(net), 1, {.dim = 256, .heads = 4, .hidden = 1024, .blocks = 4});
}

host::ModelOptions OptionsOf(int devices, bool zero) {
  host::ModelOptions o;
  o.context.mode = host::ParallelMode::DataParallel;
  o.context.device_num = devices;
  o.context.gradients_mean = true;
  o.context.enable_parallel_optimizer = zero;
  return o;
}

// Rank 0's memory as its stream plans it.
void MemoryCounters(benchmark::State& state, const host::CompiledJob& job) {
  const host::CompileReport& r = job.ranks[0].report;
  uint64_t opt = 0, all = 0;
  for (const host::PlannedBuffer& b : r.buffers) {
    if (b.role == fb::BufferRole::OptState) opt += b.bytes;
    if (b.role == fb::BufferRole::OptState || b.role == fb::BufferRole::Param || b.role == fb::BufferRole::Grad)
      all += b.bytes;
  }
  constexpr double kMiB = 1024.0 * 1024.0;
  state.counters["arena_MiB"] = static_cast<double>(r.arena_bytes) / kMiB;
  state.counters["opt_state_MiB"] = static_cast<double>(opt) / kMiB;
  state.counters["state_MiB"] = static_cast<double>(all) / kMiB;
}

void BM_Zero(benchmark::State& state) {
  const int net = static_cast<int>(state.range(0));
  const int devices = static_cast<int>(state.range(1));
  const bool zero = state.range(2) != 0;
  auto links = Connect(devices);
  if (!links.ok()) return state.SkipWithError(links.status().ToString().c_str());
  std::vector<DeviceLink*> pointers;
  for (auto& l : *links) pointers.push_back(l.get());

  const host::ModelOptions options = OptionsOf(devices, zero);
  host::Graph network = NetworkOf(net);
  auto model = host::Model::Create(network, host::LossSpec::SparseSoftmaxCrossEntropy(),
                                   host::OptimizerSpec::Adam(1e-3f), pointers, options);
  if (!model.ok()) return state.SkipWithError(model.status().ToString().c_str());
  {
    // The same job compiled here, for its per-rank report.
    host::CompileOptions co;
    co.optimizer = host::OptimizerSpec::Adam(1e-3f);
    co.parallel_mode = host::ParallelMode::DataParallel;
    co.world_size = static_cast<uint32_t>(devices);
    co.gradients_mean = true;
    co.enable_parallel_optimizer = zero;
    co.predict_program = true;  // as Model compiles a network with an output
    const host::TensorId label = network.Input("label", {BatchOf(net)}, DType::I32);
    network.SetLoss(network.SparseSoftmaxCrossEntropy(network.outputs().front(), label));
    auto job = host::CompileJob(network, co);
    if (!job.ok()) return state.SkipWithError(job.status().ToString().c_str());
    MemoryCounters(state, *job);
  }

  const int64_t batch = BatchOf(net);
  const int64_t samples = int64_t{devices} * batch * kSteps;
  const testing::SyntheticData data = testing::MakeSyntheticData(samples, 784, 10, 1);
  const host::Dataset ds = testing::MakeDataset(data, batch);
  TimingCallback timing;
  if (Status st = (*model)->train(1, ds, {&timing}, true, -1); !st.ok())
    return state.SkipWithError(st.ToString().c_str());
  timing.armed = true;
  for (auto _ : state)
    if (Status st = (*model)->train(1, ds, {&timing}, true, -1); !st.ok())
      return state.SkipWithError(st.ToString().c_str());
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * samples);
  const double steps = static_cast<double>(std::max<int64_t>(1, timing.steps));
  state.counters["comm_ms"] = timing.sum.comm_ms / steps;
  state.counters["comm_wait_ms"] = timing.sum.comm_wait_ms / steps;
}

// Interleaved: each (net, devices) pair runs plain then ZeRO back to back,
// so the machine's drift hits both alike.
BENCHMARK(BM_Zero)
    ->ArgNames({"net", "devices", "zero"})
    ->ArgsProduct({{0, 1}, {2, 4}, {0, 1}})
    ->Iterations(kTimedEpochs)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void PrintSummary(const RecordingReporter& rep) {
  std::printf("\nAdam, data parallel on local sinkd daemons, sink mode; %d cores; rank 0's memory\n",
              device::AvailableCores());
  std::printf("%-32s %3s  %14s %14s %14s  %12s %12s  %s\n", "net", "N", "opt state MiB", "state MiB", "arena MiB",
              "samples/s", "comm wait ms", "ZeRO vs DP");
  for (int net : {0, 1})
    for (int n : {2, 4}) {
      const std::string stem = "BM_Zero/net:" + std::to_string(net) + "/devices:" + std::to_string(n) + "/zero:";
      const std::string dp = stem + "0", z = stem + "1";
      if (rep.Median(dp, "items_per_second") < 0 || rep.Median(z, "items_per_second") < 0) continue;
      auto pair = [&](const char* counter) {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%.2f -> %.2f", rep.Median(dp, counter), rep.Median(z, counter));
        return std::string(buf);
      };
      const char* name = net == 0 ? "MLP 784-512-256-10, batch 64" : "wide ViT 256/4/1024/4, batch 16";
      std::printf("%-32s %3d  %14s %14s %14s  %12s %12s  %.2fx samples/s, opt state %.2fx\n", name, n,
                  pair("opt_state_MiB").c_str(), pair("state_MiB").c_str(), pair("arena_MiB").c_str(),
                  (std::to_string(static_cast<int>(rep.Median(dp, "items_per_second"))) + " -> " +
                   std::to_string(static_cast<int>(rep.Median(z, "items_per_second"))))
                      .c_str(),
                  pair("comm_wait_ms").c_str(), rep.Median(z, "items_per_second") / rep.Median(dp, "items_per_second"),
                  rep.Median(z, "opt_state_MiB") / rep.Median(dp, "opt_state_MiB"));
    }
}

}  // namespace
}  // namespace sinkrt

int main(int argc, char** argv) {
  return sinkrt::RunRecorded(argc, argv, sinkrt::StopDaemons, sinkrt::PrintSummary);
}
