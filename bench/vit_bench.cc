// Training throughput of issue 15's ViT (host::MakeVitNetwork, Adam 1e-3)
// on one in-process device: batch 64 and 256, 1 and 2 threads, a feeder
// thread pushing batches beside the sink (bench/fed_sink.h).
// Besides samples/s, each run reports where the step goes, in ms per step
// per op class, from the executor's per-task timing (Executor::TaskTimes).
//
//   vit_bench [--tasks] [benchmark flags]
//
// --tasks also prints every train task's ms per step (after each
// benchmark), longest first. BM_VitTrain's team:1 splits kernels across the
// device's worker team (the default), team:0 leaves them to oneDNN's OpenMP
// team as before issue 21 (SINKRT_WORKER_TEAM=0), so both run in one process.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <string_view>
#include <utility>
#include <vector>

#include "device/src/executor.h"
#include "fed_sink.h"
#include "sinkrt/device/in_process_device.h"
#include "sinkrt/host/compiler.h"
#include "sinkrt/host/model_zoo.h"
#include "support/test_models.h"
#include "task_breakdown.h"

namespace sinkrt {
namespace {

bool g_print_tasks = false;

// The zoo network with the loss Model would append (as test/support's
// MakeMlp does for the MLP).
host::Graph VitWithLoss(int64_t batch, float dropout = 0) {
  host::VitConfig config;
  config.dropout = dropout;
  host::Graph g = host::MakeVitNetwork(batch, 1, config);
  if (!g.status().ok() || g.outputs().empty()) return g;
  const host::TensorId logits = g.outputs().front();
  const host::TensorId label = g.Input("label", {batch}, DType::I32);
  g.SetLoss(g.SparseSoftmaxCrossEntropy(logits, label));
  return g;
}

// Compiles and loads the ViT; with `recompute`, every layer recomputed
// (Graph::Recompute("all"), docs/guide/recompute.md). Sets the arena's and the
// activations' MiB as counters.
Status LoadVit(device::InProcessDevice& dev, int64_t batch, benchmark::State& state, bool recompute = false,
               bool schedule = false, float dropout = 0, float clip = 0) {
  host::CompileOptions o;
  o.optimizer = host::OptimizerSpec::Adam(1e-3f);
  // Gradient clipping by global norm on the device (docs/guide/clipping.md).
  o.optimizer.clip_grad_norm = clip;
  // Warmup then cosine on the device (docs/guide/lr_schedules.md).
  if (schedule) o.optimizer.schedule = host::LrSchedule::WarmupCosine(1e-3, 1e-5, 500, 9500);
  host::Graph g = VitWithLoss(batch, dropout);
  if (recompute) g.Recompute("all");
  SINKRT_ASSIGN_OR_RETURN(host::CompiledStream cs, host::Compile(g, o));
  state.counters["arena_MiB"] = static_cast<double>(cs.report.arena_bytes) / (1 << 20);
  state.counters["activation_MiB"] = static_cast<double>(cs.report.activation_bytes) / (1 << 20);
  return dev.Load(cs.stream).status();
}

// Arguments: batch, threads; `worker_team` as DeviceOptions::worker_team.
void RunVitTrain(benchmark::State& state, bool recompute, bool worker_team, bool schedule = false, float dropout = 0,
                 float clip = 0) {
  const int64_t batch = state.range(0);
  device::DeviceOptions opts = device::DeviceOptions::FromEnvironment();
  opts.threads = static_cast<int>(state.range(1));
  opts.worker_team = worker_team;
  const uint32_t steps = 16;
  device::InProcessDevice dev(opts);
  if (Status st = LoadVit(dev, batch, state, recompute, schedule, dropout, clip); !st.ok()) {
    state.SkipWithError(st.ToString().c_str());
    return;
  }
  const auto data = testing::MakeSyntheticData(batch * 8, 784, 10, 1);
  const double n = RunTimedSinks(state, dev, data, batch, steps).steps;
  if (n == 0) return;
  const std::vector<device::TaskTime> times = dev.executor()->TaskTimes(ProgramKind::TrainStep);
  SetClassCounters(state, times, n);
  // What the schedule's two tasks take per step, from the executor's own
  // per-task timing (the step-time difference is within run-to-run noise).
  double schedule_ms = 0;
  for (const device::TaskTime& t : times)
    if (t.op == "LrSchedule" || t.op == "StepAdvance") schedule_ms += static_cast<double>(t.ns) / 1e6 / n;
  if (schedule) state.counters["schedule_ms"] = schedule_ms;
  // The clipping's two tasks (SumSquares, ClipByGlobalNorm) and their share
  // of the step's task time, both from this run's per-task timing.
  double clip_ms = 0, step_ms = 0;
  for (const device::TaskTime& t : times) {
    step_ms += static_cast<double>(t.ns) / 1e6 / n;
    if (t.op == "SumSquares" || t.op == "ClipByGlobalNorm") clip_ms += static_cast<double>(t.ns) / 1e6 / n;
  }
  if (clip > 0) {
    state.counters["clip_ms"] = clip_ms;
    state.counters["clip_pct_of_step"] = step_ms > 0 ? 100.0 * clip_ms / step_ms : 0.0;
  }
  if (g_print_tasks) PrintTasks("ViT", times, n, state);
}

// Arguments: batch, threads, team 0/1.
void BM_VitTrain(benchmark::State& state) { RunVitTrain(state, false, state.range(2) != 0); }
// Recomputation (issue 20): arguments batch, threads, recompute 0/1.
void BM_VitRecompute(benchmark::State& state) {
  RunVitTrain(state, state.range(2) != 0, device::DeviceOptions::FromEnvironment().worker_team);
}

// A learning-rate schedule (issue 41): the same ViT with Adam at a fixed
// rate and with warmup-cosine computed on the device; arguments batch,
// threads, schedule 0/1.
void BM_VitSchedule(benchmark::State& state) {
  RunVitTrain(state, false, device::DeviceOptions::FromEnvironment().worker_team, state.range(2) != 0);
}

// Gradient clipping by global norm (issue 41, docs/guide/clipping.md): the
// same ViT with Adam unclipped and clipped at 1.0; arguments batch, threads,
// clip 0/1. clip_pct_of_step is the clipping's share of the step's tasks.
void BM_VitClip(benchmark::State& state) {
  RunVitTrain(state, false, device::DeviceOptions::FromEnvironment().worker_team, false, 0,
              state.range(2) != 0 ? 1.0f : 0.0f);
}

// Dropout (docs/guide/dropout.md): arguments batch, threads, p in percent
// (0: the network without dropout, 10: nn.Dropout(0.1) at the ViT's five
// places).
void BM_VitDropout(benchmark::State& state) {
  RunVitTrain(state, false, device::DeviceOptions::FromEnvironment().worker_team, false,
              static_cast<float>(state.range(2)) / 100.0f);
}

BENCHMARK(BM_VitTrain)
    ->ArgNames({"batch", "threads", "team"})
    ->Args({64, 1, 1})
    ->Args({64, 2, 0})
    ->Args({64, 2, 1})
    ->Args({256, 1, 1})
    ->Args({256, 2, 0})
    ->Args({256, 2, 1})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(2.0);
BENCHMARK(BM_VitSchedule)
    ->ArgNames({"batch", "threads", "schedule"})
    ->ArgsProduct({{64}, {1}, {0, 1, 0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(2.0);
BENCHMARK(BM_VitClip)
    ->ArgNames({"batch", "threads", "clip"})
    ->ArgsProduct({{64}, {1}, {0, 1, 0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(2.0);
BENCHMARK(BM_VitDropout)
    ->ArgNames({"batch", "threads", "p_percent"})
    ->ArgsProduct({{64}, {1}, {0, 10}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(2.0);
// Recomputation (issue 20): memory saved against step time added, the
// same ViT with and without every layer recomputed.
BENCHMARK(BM_VitRecompute)
    ->ArgNames({"batch", "threads", "recompute"})
    ->ArgsProduct({{64, 256}, {1}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(2.0);

}  // namespace
}  // namespace sinkrt

int main(int argc, char** argv) {
  // Our flag first; the rest are Google Benchmark's.
  sinkrt::g_print_tasks = sinkrt::TakeTasksFlag(&argc, argv);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
