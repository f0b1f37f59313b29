// Training throughput of the 784-512-256-10 MLP (SGD momentum) on one
// in-process device: batch 64 and 256, 1 and 2 threads. DESIGN §7 aims:
// >= 64k samples/s at batch 64 and >= 100k at batch 256; PyTorch 1.13 on
// this machine kind does 32.8k / 21.2k as-is (bench/compare_pytorch.py).
#include <benchmark/benchmark.h>

#include <thread>

#include "load_mlp.h"
#include "sinkrt/device/in_process_device.h"
#include "support/test_models.h"

namespace sinkrt {
namespace {

void BM_MlpTrain(benchmark::State& state) {
  const int64_t batch = state.range(0);
  device::DeviceOptions opts = device::DeviceOptions::FromEnvironment();
  opts.threads = static_cast<int>(state.range(1));
  const uint32_t steps = 32;
  device::InProcessDevice dev(opts);
  if (Status st = LoadMlp(dev, batch); !st.ok()) {
    state.SkipWithError(st.ToString().c_str());
    return;
  }
  auto data = testing::MakeSyntheticData(batch * 8, 784, 10, 1);
  double compute = 0, wait = 0, other = 0;
  for (auto _ : state) {
    // The feeder runs beside the sink, as in training; queue waits are
    // reported separately so a slow feeder cannot hide in the figure.
    std::thread feeder([&] {
      for (uint32_t i = 0; i < steps; ++i) {
        int64_t b = i % 8;
        ConstBytes cols[2] = {
            ConstBytes(reinterpret_cast<const uint8_t*>(&data.images[b * batch * 784]), batch * 784 * 4),
            ConstBytes(reinterpret_cast<const uint8_t*>(&data.labels[b * batch]), batch * 4)};
        (void)dev.PushBatch(0, cols);
      }
    });
    auto r = dev.RunSink(ProgramKind::TrainStep, steps);
    feeder.join();
    if (!r.ok()) {
      state.SkipWithError(r.status().ToString().c_str());
      break;
    }
    compute += r->timing.compute_ms;
    wait += r->timing.queue_wait_ms;
    other += r->timing.other_ms;
  }
  const double n = static_cast<double>(state.iterations()) * steps;
  state.counters["step_ms"] = (compute + wait + other) / n;
  state.counters["queue_wait_ms"] = wait / n;
  state.SetItemsProcessed(static_cast<int64_t>(n) * batch);
}
BENCHMARK(BM_MlpTrain)
    ->ArgNames({"batch", "threads"})
    ->Args({64, 1})
    ->Args({64, 2})
    ->Args({256, 1})
    ->Args({256, 2})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(2.0);

}  // namespace
}  // namespace sinkrt

BENCHMARK_MAIN();
