// Training throughput of the 784-512-256-10 MLP (SGD momentum) on one
// in-process device: batch 64 and 256, 1 and 2 threads. DESIGN §7 aims:
// >= 64k samples/s at batch 64 and >= 100k at batch 256; PyTorch 1.13 on
// this machine kind does 32.8k / 21.2k as-is (bench/compare_pytorch.py).
// Counters give ms per step per op class (bench/task_breakdown.h);
//
//   train_step_bench [--tasks] [benchmark flags]
//
// --tasks also prints every task's ms per step, longest first. team:1 runs
// the kernels split across the device's worker team (the default), team:0
// leaves the splitting to oneDNN's OpenMP team, as before the team existed;
// team:2 is the team with its threads pinned (DeviceOptions::pin_threads).
#include <benchmark/benchmark.h>

#include "fed_sink.h"
#include "load_mlp.h"
#include "roofline.h"
#include "sinkrt/device/in_process_device.h"
#include "support/test_models.h"
#include "task_breakdown.h"

namespace sinkrt {
namespace {

bool g_print_tasks = false;

void BM_MlpTrain(benchmark::State& state) {
  const int64_t batch = state.range(0);
  device::DeviceOptions opts = device::DeviceOptions::FromEnvironment();
  opts.threads = static_cast<int>(state.range(1));
  opts.worker_team = state.range(2) != 0;
  opts.pin_threads = state.range(2) == 2;
  const uint32_t steps = 32;
  device::InProcessDevice dev(opts);
  if (Status st = LoadMlp(dev, batch); !st.ok()) {
    state.SkipWithError(st.ToString().c_str());
    return;
  }
  const auto data = testing::MakeSyntheticData(batch * 8, 784, 10, 1);
  const double n = RunTimedSinks(state, dev, data, batch, steps).steps;
  if (n == 0) return;
  const std::vector<device::TaskTime> times = dev.executor()->TaskTimes(ProgramKind::TrainStep);
  SetClassCounters(state, times, n);
  if (g_print_tasks) PrintTasks("MLP", times, n, state);
}
// The machine's limit beside the figures: one core's peak f32 GEMM rate
// and, from it, the MLP's roofline in samples/s for 1 and 2 cores
// (bench/roofline.h). A training figure's fraction of the roofline is its
// samples/s over roofline_2c_per_s (2 threads) or roofline_1c_per_s.
void BM_Roofline(benchmark::State& state) {
  double gflops = 0;
  for (auto _ : state) gflops = std::max(gflops, PeakGflopsOneCore());
  state.counters["gflops_1core"] = gflops;
  state.counters["roofline_1c_per_s"] = gflops * 1e9 / kMlpFlopsPerSample;
  state.counters["roofline_2c_per_s"] = 2 * gflops * 1e9 / kMlpFlopsPerSample;
}
BENCHMARK(BM_Roofline)->Iterations(3)->Unit(benchmark::kMillisecond)->UseRealTime();

BENCHMARK(BM_MlpTrain)
    ->ArgNames({"batch", "threads", "team"})
    ->Args({64, 1, 0})
    ->Args({64, 2, 0})
    ->Args({64, 2, 1})
    ->Args({64, 2, 2})
    ->Args({256, 1, 0})
    ->Args({256, 2, 0})
    ->Args({256, 2, 1})
    ->Args({256, 2, 2})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(2.0);

}  // namespace
}  // namespace sinkrt

int main(int argc, char** argv) {
  sinkrt::g_print_tasks = sinkrt::TakeTasksFlag(&argc, argv);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
