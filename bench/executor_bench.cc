// Executor overheads: dispatch per task, and the MLP step's time outside
// kernels (target: < 2 % of a step at batch 64, DESIGN §7).
#include <benchmark/benchmark.h>

#include "device/src/executor.h"
#include "load_mlp.h"
#include "sinkrt/device/in_process_device.h"
#include "support/stream_builder.h"
#include "support/test_models.h"

namespace sinkrt {
namespace {

// A train_step of N Fill kernels on one float: the kernel body is a single
// store, so the time per task is the executor's dispatch plus its timers.
// items_per_second inverted is the cost of one task. The second argument
// records every task (the profiler, issue 18): the difference between /0
// and /1 is what recording one task costs.
void BM_DispatchPerTask(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const bool profiled = state.range(1) != 0;
  testing::HandStream hs;
  uint32_t b = hs.AddBuffer("x", {1});
  for (int i = 0; i < n; ++i)
    hs.AddKernel(fb::OpCode::Fill, {}, {b}, fb::OpOptions::FillOptions,
                 [](flatbuffers::FlatBufferBuilder& fbb) { return fb::CreateFillOptions(fbb, 1.0f).Union(); });
  auto stream = VerifyTaskStream(hs.Finish());
  if (!stream.ok()) {
    state.SkipWithError(stream.status().ToString().c_str());
    return;
  }
  auto ex = device::Executor::Load(std::move(stream).value(), device::DeviceOptions{});
  if (!ex.ok()) {
    state.SkipWithError(ex.status().ToString().c_str());
    return;
  }
  if (profiled)
    if (Status st = (*ex)->SetProfiling({.enabled = true, .keep_steps = 4}); !st.ok()) {
      state.SkipWithError(st.ToString().c_str());
      return;
    }
  device::RunStats stats;
  for (auto _ : state) {
    Status st = (*ex)->Run(ProgramKind::TrainStep, 1, &stats);
    if (!st.ok()) state.SkipWithError(st.ToString().c_str());
  }
  state.SetItemsProcessed(state.iterations() * n);
  state.SetLabel(profiled ? "profiling on" : "profiling off");
}
BENCHMARK(BM_DispatchPerTask)->Args({1000, 0})->Args({1000, 1})->Unit(benchmark::kMicrosecond);

// Sinks of 16 MLP steps with the queue filled beforehand: reports how much
// of the device's time went outside kernels (dispatch, GetNext copies).
void BM_MlpStepOverhead(benchmark::State& state) {
  const int64_t batch = state.range(0);
  const uint32_t steps = 16;
  device::InProcessDevice dev;
  if (Status st = LoadMlp(dev, batch); !st.ok()) {
    state.SkipWithError(st.ToString().c_str());
    return;
  }
  auto data = testing::MakeSyntheticData(batch * steps, 784, 10, 1);
  double wall = 0, compute = 0, other = 0;
  for (auto _ : state) {
    state.PauseTiming();
    for (uint32_t i = 0; i < steps; ++i) {
      ConstBytes cols[2] = {
          ConstBytes(reinterpret_cast<const uint8_t*>(&data.images[i * batch * 784]), batch * 784 * 4),
          ConstBytes(reinterpret_cast<const uint8_t*>(&data.labels[i * batch]), batch * 4)};
      (void)dev.PushBatch(0, cols);
    }
    state.ResumeTiming();
    auto r = dev.RunSink(ProgramKind::TrainStep, steps);
    if (!r.ok()) {
      state.SkipWithError(r.status().ToString().c_str());
      break;
    }
    compute += r->timing.compute_ms;
    other += r->timing.other_ms;
    wall += r->timing.compute_ms + r->timing.other_ms + r->timing.queue_wait_ms;
  }
  const double n = static_cast<double>(state.iterations()) * steps;
  state.counters["step_us"] = wall * 1e3 / n;
  state.counters["outside_kernels_us"] = other * 1e3 / n;
  state.counters["outside_kernels_pct"] = 100.0 * other / wall;
  state.SetItemsProcessed(static_cast<int64_t>(n) * batch);  // samples/s
}
BENCHMARK(BM_MlpStepOverhead)->Arg(64)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace sinkrt

BENCHMARK_MAIN();
