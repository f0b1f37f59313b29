// What handing work to a second thread costs: oneDNN's passive OpenMP team
// against the device's WorkerTeam (device/src/team/worker_team.h), per
// parallel region of empty parts, back to back and after a stretch of
// serial work on the caller (what a step has between two split kernels).
// Only the region is timed (manual time): from the hand-off to the last
// part's end.
//
//   team_bench [benchmark flags]      (run with OMP_WAIT_POLICY=passive)
#include <benchmark/benchmark.h>
#include <omp.h>

#include <atomic>
#include <chrono>

#include "device/src/team/worker_team.h"

namespace sinkrt {
namespace {

// Busy work on the caller for `us` µs: the serial kernels between two split
// ones, during which a polling worker may give up and sleep.
void SerialWork(int64_t us) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(us);
  while (std::chrono::steady_clock::now() < until) {
  }
}

std::atomic<int> g_sink{0};

// Arguments: serial µs between regions.
void BM_OpenMpRegion(benchmark::State& state) {
  omp_set_num_threads(2);
#pragma omp parallel
  { g_sink.fetch_add(omp_get_thread_num(), std::memory_order_relaxed); }
  for (auto _ : state) {
    SerialWork(state.range(0));
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel
    { g_sink.fetch_add(omp_get_thread_num(), std::memory_order_relaxed); }
    state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
}

// Arguments: serial µs between regions, the workers' poll in µs.
void BM_WorkerTeamRun(benchmark::State& state) {
  device::WorkerTeam team(2, state.range(1) * 1000);
  team.Run(2, [](int p) { g_sink.fetch_add(p, std::memory_order_relaxed); });
  for (auto _ : state) {
    SerialWork(state.range(0));
    const auto t0 = std::chrono::steady_clock::now();
    team.Run(2, [](int p) { g_sink.fetch_add(p, std::memory_order_relaxed); });
    state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
}

BENCHMARK(BM_OpenMpRegion)->ArgNames({"gap_us"})->Arg(0)->Arg(100)->Unit(benchmark::kMicrosecond)->UseManualTime();
BENCHMARK(BM_WorkerTeamRun)
    ->ArgNames({"gap_us", "poll_us"})
    ->Args({0, 50})
    ->Args({100, 50})
    ->Args({0, 0})
    ->Args({100, 0})
    ->Unit(benchmark::kMicrosecond)
    ->UseManualTime();

}  // namespace
}  // namespace sinkrt

BENCHMARK_MAIN();
