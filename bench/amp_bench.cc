// Mixed precision (issue 20, docs/guide/amp.md): training samples/s of the MLP
// (784-512-256-10, Momentum) and the ViT (Adam) at amp_level O0 (f32) and
// O2 (bf16; the ViT also O3), batch 64 and 256, 1 and 2 threads, on one
// in-process device.
// Each f32 run is followed at once by its O2 twin, so the ratio of two
// neighbouring rows is measured on the same machine state (the VM drifts).
//
//   amp_bench [benchmark flags]
#include <benchmark/benchmark.h>

#include <string>

#include "fed_sink.h"
#include "sinkrt/device/in_process_device.h"
#include "sinkrt/host/compiler.h"
#include "support/test_models.h"

namespace sinkrt {
namespace {

// Arguments: model (0 MLP, 1 ViT), batch, threads, amp level (0..3).
void BM_AmpTrain(benchmark::State& state) {
  const bool vit = state.range(0) != 0;
  const int64_t batch = state.range(1);
  device::DeviceOptions opts = device::DeviceOptions::FromEnvironment();
  opts.threads = static_cast<int>(state.range(2));
  const auto level = static_cast<host::AmpLevel>(state.range(3));
  host::CompileOptions o;
  o.optimizer = vit ? host::OptimizerSpec::Adam(1e-3f) : host::OptimizerSpec::Momentum(0.01f, 0.9f);
  o.amp_level = level;
  auto cs = host::Compile(vit ? testing::MakeVit(batch) : testing::MakeMlp(batch), o);
  if (!cs.ok()) {
    state.SkipWithError(cs.status().ToString().c_str());
    return;
  }
  state.counters["arena_MiB"] = static_cast<double>(cs->report.arena_bytes) / (1 << 20);
  state.counters["activation_MiB"] = static_cast<double>(cs->report.activation_bytes) / (1 << 20);
  device::InProcessDevice dev(opts);
  if (Status st = dev.Load(cs->stream).status(); !st.ok()) {
    state.SkipWithError(st.ToString().c_str());
    return;
  }
  const uint32_t steps = vit ? 16 : 32;
  const auto data = testing::MakeSyntheticData(batch * 8, 784, 10, 1);
  RunTimedSinks(state, dev, data, batch, steps);
}
// f32, then O2 (and for the ViT O3, whose LayerNorm and Softmax run in
// bf16 too) for each configuration, adjacent.
void AmpPairs(benchmark::internal::Benchmark* b) {
  for (int64_t vit : {0, 1})
    for (int64_t batch : {64, 256})
      for (int64_t threads : {1, 2})
        for (int64_t amp : {0, 2, 3})
          if (amp != 3 || vit) b->Args({vit, batch, threads, amp});
}
BENCHMARK(BM_AmpTrain)
    ->ArgNames({"vit", "batch", "threads", "amp"})
    ->Apply(AmpPairs)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(2.0);

}  // namespace
}  // namespace sinkrt

BENCHMARK_MAIN();
