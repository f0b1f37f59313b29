// Training throughput of the 784-512-256-10 MLP (SGD momentum) on one
// in-process device: batch 64 and 256, 1 and 2 threads. DESIGN §7 aims:
// >= 64k samples/s at batch 64 and >= 100k at batch 256; PyTorch 1.13 on
// this machine kind does 32.8k / 21.2k as-is (bench/compare_pytorch.py).
#include <benchmark/benchmark.h>

#include "fed_sink.h"
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
  const auto data = testing::MakeSyntheticData(batch * 8, 784, 10, 1);
  RunTimedSinks(state, dev, data, batch, steps, /*warm_up=*/false);
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
