// Optimizer parallel (ZeRO-1; docs/guide/parallel_optimizer.md) against plain
// data parallel on local sinkd daemons: per-rank memory and step time.
//
//   BM_Zero/zero:Z/net:N/devices:D   Model.train with Adam (1e-3) in sink
//        mode on D real sinkd daemons, DATA_PARALLEL with gradients mean,
//        Z = 1 with enable_parallel_optimizer (threshold 64 KB, comm_fusion
//        defaults: one fused ReduceScatter and one fused AllGather bucket),
//        Z = 2 the same with comm_fusion's reducescatter and allgather at
//        size 1 (262144 B buckets: more, smaller collectives that overlap
//        backward and the updates).
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

host::ModelOptions OptionsOf(int devices, int zero) {
  host::ModelOptions o;
  o.context.mode = host::ParallelMode::DataParallel;
  o.context.device_num = devices;
  o.context.gradients_mean = true;
  o.context.enable_parallel_optimizer = zero > 0;
  if (zero == 2) {
    o.context.comm_fusion.reducescatter = {.mode = "size", .size_mb = 1};
    o.context.comm_fusion.allgather = {.mode = "size", .size_mb = 1};
  }
  return o;
}

// Rank 0's memory as its stream plans it.
void MemoryCounters(benchmark::State& state, const host::CompiledJob& job) {
  const host::CompileReport& r = job.ranks[0].report;
  uint64_t opt = 0, all = 0;
  for (const host::PlannedBuffer& b : r.buffers) {
    if (b.role == BufferRole::OptState) opt += b.bytes;
    if (b.role == BufferRole::OptState || b.role == BufferRole::Param || b.role == BufferRole::Grad) all += b.bytes;
  }
  constexpr double kMiB = 1024.0 * 1024.0;
  state.counters["arena_MiB"] = static_cast<double>(r.arena_bytes) / kMiB;
  state.counters["opt_state_MiB"] = static_cast<double>(opt) / kMiB;
  state.counters["state_MiB"] = static_cast<double>(all) / kMiB;
}

void BM_Zero(benchmark::State& state) {
  const int zero = static_cast<int>(state.range(0));
  const int net = static_cast<int>(state.range(1));
  const int devices = static_cast<int>(state.range(2));
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
    co.enable_parallel_optimizer = zero > 0;
    co.comm_fusion = options.context.comm_fusion;
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

// Interleaved: each (net, devices) pair runs plain then ZeRO back to back
// (the first argument varies fastest), so the machine's drift hits both
// alike.
BENCHMARK(BM_Zero)
    ->ArgNames({"zero", "net", "devices"})
    ->ArgsProduct({{0, 1, 2}, {0, 1}, {2, 4}})
    ->Iterations(kTimedEpochs)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void PrintSummary(const RecordingReporter& rep) {
  std::printf("\nAdam, data parallel on local sinkd daemons, sink mode; %d cores; rank 0's memory\n",
              device::AvailableCores());
  std::printf("%-32s %3s %-22s %9s %9s %9s %10s %9s %8s %9s\n", "net", "N", "run", "opt MiB", "state MiB", "arena MiB",
              "samples/s", "comm ms", "wait ms", "vs DP");
  for (int net : {0, 1})
    for (int n : {2, 4}) {
      const std::string tail = "/net:" + std::to_string(net) + "/devices:" + std::to_string(n);
      const double base = rep.Median("BM_Zero/zero:0" + tail, "items_per_second");
      for (int zero : {0, 1, 2}) {
        const std::string name = "BM_Zero/zero:" + std::to_string(zero) + tail;
        const double rate = rep.Median(name, "items_per_second");
        if (rate < 0) continue;
        const char* run = zero == 0 ? "data parallel" : zero == 1 ? "ZeRO, default fusion" : "ZeRO, 256 KiB buckets";
        std::printf("%-32s %3d %-22s %9.2f %9.2f %9.2f %10.0f %9.2f %8.2f %8.2fx\n",
                    net == 0 ? "MLP 784-512-256-10, batch 64" : "wide ViT 256/4/1024/4, batch 16", n, run,
                    rep.Median(name, "opt_state_MiB"), rep.Median(name, "state_MiB"), rep.Median(name, "arena_MiB"),
                    rate, rep.Median(name, "comm_ms"), rep.Median(name, "comm_wait_ms"), base > 0 ? rate / base : 0.0);
      }
    }
}

}  // namespace
}  // namespace sinkrt

int main(int argc, char** argv) { return sinkrt::RunRecorded(argc, argv, sinkrt::StopDaemons, sinkrt::PrintSummary); }
