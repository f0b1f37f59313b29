// What the profiler costs: the same sinks on two devices loaded with the
// same stream, one recording every task and one not, alternated in one run
// in ABBA order, so that the machine's drift and the warmer second sink of
// a pair hit both alike (the aim: < 3 % on, issue 18).
// (The recording's cost per task: executor_bench's BM_DispatchPerTask/1000/1
// against /1000/0.)
#include <benchmark/benchmark.h>

#include <string>

#include "device/src/executor.h"
#include "runtime/src/clock.h"
#include "sinkrt/device/in_process_device.h"
#include "sinkrt/host/compiler.h"
#include "support/test_models.h"

namespace sinkrt {
namespace {

struct Net {
  host::Graph graph;
  int64_t batch;
};

Net MakeNet(int which) {
  if (which == 0) return {testing::MakeMlp(64), 64};
  return {testing::MakeVit(32), 32};
}

Status PushSteps(device::InProcessDevice& dev, const testing::SyntheticData& data, int64_t batch, uint32_t steps) {
  for (uint32_t i = 0; i < steps; ++i) {
    ConstBytes cols[2] = {ConstBytes(reinterpret_cast<const uint8_t*>(&data.images[i * batch * 784]), batch * 784 * 4),
                          ConstBytes(reinterpret_cast<const uint8_t*>(&data.labels[i * batch]), batch * 4)};
    SINKRT_RETURN_IF_ERROR(dev.PushBatch(0, cols));
  }
  return Status::Ok();
}

// Arg 0: the MLP at batch 64; 1: the ViT at batch 32. Sinks of 16 steps,
// profiled keeping all 16.
void BM_ProfilingOverhead(benchmark::State& state) {
  const uint32_t steps = 16;
  Net net = MakeNet(static_cast<int>(state.range(0)));
  host::CompileOptions o;
  o.optimizer = host::OptimizerSpec::Adam(0.001f);
  auto cs = host::Compile(net.graph, o);
  if (!cs.ok()) {
    state.SkipWithError(cs.status().ToString().c_str());
    return;
  }
  device::InProcessDevice off, on;
  for (device::InProcessDevice* d : {&off, &on})
    if (auto loaded = d->Load(cs->stream); !loaded.ok()) {
      state.SkipWithError(loaded.status().ToString().c_str());
      return;
    }
  if (Status st = on.SetProfiling({.enabled = true, .keep_steps = steps}); !st.ok()) {
    state.SkipWithError(st.ToString().c_str());
    return;
  }
  auto data = testing::MakeSyntheticData(net.batch * steps, 784, 10, 1);
  int64_t ns[2] = {0, 0};
  size_t records = 0;
  int64_t iteration = 0;
  for (auto _ : state) {
    // ABBA: whichever runs second in a pair finds the caches warmer.
    for (int k = 0; k < 2; ++k) {
      const int which = (iteration & 1) ? 1 - k : k;
      device::InProcessDevice& dev = which == 0 ? off : on;
      state.PauseTiming();
      if (Status st = PushSteps(dev, data, net.batch, steps); !st.ok()) state.SkipWithError(st.ToString().c_str());
      state.ResumeTiming();
      const int64_t t0 = NowNs();
      auto r = dev.RunSink(ProgramKind::TrainStep, steps);
      ns[which] += NowNs() - t0;
      if (!r.ok()) {
        state.SkipWithError(r.status().ToString().c_str());
        return;
      }
      if (which == 1) records = r->profile.size();
    }
    ++iteration;
  }
  const double n = static_cast<double>(state.iterations()) * steps;
  state.counters["off_step_ms"] = ns[0] / n / 1e6;
  state.counters["on_step_ms"] = ns[1] / n / 1e6;
  state.counters["overhead_pct"] = 100.0 * (static_cast<double>(ns[1]) / static_cast<double>(ns[0]) - 1.0);
  state.counters["records_per_sink"] = static_cast<double>(records);
  state.SetLabel(state.range(0) == 0 ? "mlp batch 64" : "vit batch 32");
}
BENCHMARK(BM_ProfilingOverhead)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace sinkrt

BENCHMARK_MAIN();
