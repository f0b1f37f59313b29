// Data-parallel training throughput on local sinkd daemons.
//
//   BM_DataParallel   Model.train of the 784-512-256-10 MLP (Momentum
//                     0.01/0.9) at batch 64 per rank, sink mode (sink_size
//                     -1: one RunSink per device per epoch), on N = 1, 2, 4
//                     real sinkd daemons in DATA_PARALLEL with gradients
//                     mean (the fused AllReduce runs on the devices, inside
//                     the sink); each daemon runs --threads max(1, cores/N),
//                     as `sinkrun train --devices N` starts them.
//   BM_StandAlone     the baseline: the same training on one daemon with
//                     every core, STAND_ALONE (no communication tasks);
//                     threads:1 with one kernel thread, the baseline of
//                     issue 21's "2 daemons x 1 thread >= 1.6x one device
//                     with one thread".
//
// One iteration is one epoch of kStepsPerRank steps on every rank (the
// global data is N x 64 x kStepsPerRank samples, in memory, so the host's
// pipeline costs little); one untimed epoch warms up first. Counters:
//   items_per_second   global samples/s (every rank's samples)
//   compute_ms, comm_ms, comm_wait_ms, queue_wait_ms, other_ms
//                      per step, from CallbackParams::device (the device's
//                      own clocks, averaged over the ranks)
//   hidden             max(0, 1 - comm_wait / comm): the share of the
//                      AllReduce time the compute stream did not wait for,
//                      i.e. hidden behind backward
//
// After the benchmarks, main prints the scaling against the stand-alone
// baseline. Daemons: one LocalCluster per N, started on first use on
// 127.0.0.1 with kernel-chosen ports and stopped at exit.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "local_daemons.h"
#include "recording_reporter.h"
#include "sinkrt/host/model.h"
#include "sinkrt/host/model_zoo.h"
#include "support/model_fixtures.h"
#include "support/test_models.h"

namespace sinkrt {
namespace {

using namespace std::chrono_literals;

constexpr int64_t kBatch = 64;          // per rank
constexpr int64_t kStepsPerRank = 128;  // per epoch
constexpr int kTimedEpochs = 6;
constexpr int64_t kFeatures = 784;
constexpr int kClasses = 10;

using bench::Connect;
using bench::StopDaemons;
using bench::ThreadsPerDaemon;
using bench::TimingCallback;

// `devices` ranks; `data_parallel` false: STAND_ALONE on one daemon.
// `threads` per daemon, 0: ThreadsPerDaemon(devices).
void RunTraining(benchmark::State& state, int devices, bool data_parallel, int threads = 0) {
  auto links = Connect(devices, threads);
  if (!links.ok()) return state.SkipWithError(links.status().ToString().c_str());
  std::vector<DeviceLink*> pointers;
  for (auto& l : *links) pointers.push_back(l.get());

  host::ModelOptions options;
  if (data_parallel) {
    options.context.mode = host::ParallelMode::DataParallel;
    options.context.device_num = devices;
    options.context.gradients_mean = true;
  }
  auto model = host::Model::Create(host::MakeMlpNetwork(kBatch, {kFeatures, 512, 256, kClasses}),
                                   host::LossSpec::SparseSoftmaxCrossEntropy(),
                                   host::OptimizerSpec::Momentum(0.01f, 0.9f), pointers, options);
  if (!model.ok()) return state.SkipWithError(model.status().ToString().c_str());

  // Every rank gets kStepsPerRank batches of kBatch per epoch.
  const int64_t samples = int64_t{devices} * kBatch * kStepsPerRank;
  const testing::SyntheticData data = testing::MakeSyntheticData(samples, kFeatures, kClasses, 1);
  const host::Dataset ds = testing::MakeDataset(data, kBatch);

  TimingCallback timing;
  // One untimed epoch: the arenas' first touch, the world's first
  // collectives and the kernels' first runs stay out of the figure.
  if (Status st = (*model)->train(1, ds, {&timing}, true, -1); !st.ok())
    return state.SkipWithError(st.ToString().c_str());
  timing.armed = true;
  for (auto _ : state) {
    if (Status st = (*model)->train(1, ds, {&timing}, true, -1); !st.ok())
      return state.SkipWithError(st.ToString().c_str());
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * samples);
  const double steps = static_cast<double>(std::max<int64_t>(1, timing.steps));
  const DeviceTiming& t = timing.sum;
  state.counters["compute_ms"] = t.compute_ms / steps;
  state.counters["comm_ms"] = t.comm_ms / steps;
  state.counters["comm_wait_ms"] = t.comm_wait_ms / steps;
  state.counters["queue_wait_ms"] = t.queue_wait_ms / steps;
  state.counters["other_ms"] = t.other_ms / steps;
  state.counters["hidden"] = t.comm_ms > 0 ? std::max(0.0, 1.0 - t.comm_wait_ms / t.comm_ms) : 0.0;
  state.counters["threads"] = threads > 0 ? threads : ThreadsPerDaemon(devices);
  state.counters["loss"] = timing.losses.empty() ? 0.0 : timing.losses.back();
}

void BM_DataParallel(benchmark::State& state) { RunTraining(state, static_cast<int>(state.range(0)), true); }
BENCHMARK(BM_DataParallel)
    ->ArgName("devices")
    ->Arg(1)
    ->Arg(2)
    ->Arg(4)
    ->Iterations(kTimedEpochs)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_StandAlone(benchmark::State& state) { RunTraining(state, 1, false, static_cast<int>(state.range(0))); }
BENCHMARK(BM_StandAlone)
    ->ArgName("threads")
    ->Arg(0)  // every core
    ->Arg(1)
    ->Iterations(kTimedEpochs)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// -- summary ------------------------------------------------------------------

void PrintSummary(const RecordingReporter& rep) {
  const double base = rep.Median("BM_StandAlone/threads:0", "items_per_second");
  const double one = rep.Median("BM_StandAlone/threads:1", "items_per_second");
  std::printf("\nMLP 784-512-256-10, batch 64 per rank, sink mode; %d cores\n", device::AvailableCores());
  if (base > 0) std::printf("stand-alone, 1 daemon, every core: %.0f samples/s\n", base);
  if (one > 0) std::printf("stand-alone, 1 daemon, 1 thread: %.0f samples/s\n", one);
  for (int n : {1, 2, 4}) {
    const std::string name = "BM_DataParallel/devices:" + std::to_string(n);
    const double s = rep.Median(name, "items_per_second");
    if (s < 0) continue;
    std::printf("data parallel, %d daemon%s: %.0f samples/s", n, n > 1 ? "s" : "", s);
    if (base > 0) std::printf(" (%.2fx stand-alone", s / base);
    if (one > 0) std::printf(", %.2fx one thread", s / one);
    if (base > 0) std::printf(")");
    const double comm = rep.Median(name, "comm_ms");
    std::printf("; per step compute %.2f ms, comm %.2f ms, comm wait %.2f ms, queue wait %.2f ms, other %.2f ms",
                rep.Median(name, "compute_ms"), comm, rep.Median(name, "comm_wait_ms"),
                rep.Median(name, "queue_wait_ms"), rep.Median(name, "other_ms"));
    // One rank has nothing to exchange: its AllReduce is a no-op.
    // Exposed: what the compute stream waited for the AllReduce, per step.
    if (comm >= 0.01)
      std::printf("; hidden %.0f%%, exposed %.3f ms per step", 100 * rep.Median(name, "hidden"),
                  rep.Median(name, "comm_wait_ms"));
    std::printf("\n");
  }
}

}  // namespace
}  // namespace sinkrt

int main(int argc, char** argv) { return sinkrt::RunRecorded(argc, argv, sinkrt::StopDaemons, sinkrt::PrintSummary); }
