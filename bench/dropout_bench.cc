// The Dropout kernel's throughput beside a memcpy of the same bytes
// (docs/guide/dropout.md): Philox4x32-10 costs integer multiplies per
// element, so dropout runs at a fraction of the memory bandwidth a plain
// copy reaches; bytes_per_second counts what each reads and writes.
//
//   dropout_bench [benchmark flags]
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "support/kernel_runner.h"

namespace sinkrt {
namespace {

using testing::KernelRunner;
using testing::KernelTensor;

// Dropout(p = 0.1) over n f32 elements, one thread.
void BM_Dropout(benchmark::State& state) {
  const int64_t n = state.range(0);
  const KernelTensor x = testing::RandomTensor({n}, 1);
  KernelTensor y({n});
  KernelTensor step({}, DType::I64);
  std::memset(step.bytes(), 0, sizeof(int64_t));
  KernelRunner run(fb::OpCode::Dropout);
  run.In(x).In(step).Out(y).DropoutOpts(0.1f, 1, 2);
  if (!run.Prepare().ok()) {
    state.SkipWithError("prepare failed");
    return;
  }
  for (auto _ : state) {
    benchmark::DoNotOptimize(run.Run());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * n * 2 * static_cast<int64_t>(sizeof(float)));
}

// memcpy of the same n floats: read n, write n.
void BM_Memcpy(benchmark::State& state) {
  const int64_t n = state.range(0);
  std::vector<float> x(n, 1.0f), y(n);
  for (auto _ : state) {
    std::memcpy(y.data(), x.data(), n * sizeof(float));
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * n * 2 * static_cast<int64_t>(sizeof(float)));
}

// 64 Ki floats (in cache), 1 Mi (the ViT's attention probabilities at batch
// 64 are 64·4·16·16 = 65,536) and 16 Mi (memory).
BENCHMARK(BM_Dropout)->Arg(1 << 16)->Arg(1 << 20)->Arg(1 << 24)->UseRealTime();
BENCHMARK(BM_Memcpy)->Arg(1 << 16)->Arg(1 << 20)->Arg(1 << 24)->UseRealTime();

}  // namespace
}  // namespace sinkrt

BENCHMARK_MAIN();
