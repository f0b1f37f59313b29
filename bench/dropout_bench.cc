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

#include "device/src/random/dropout_keep.h"
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

// The keep bits alone (device/src/random/dropout_keep.h) of 64 Ki elements
// by each path this CPU runs: argument 0 scalar, 1 AVX2, 2 AVX-512;
// items_per_second counts elements.
void BM_DropoutKeepBits(benchmark::State& state) {
  const auto isa = static_cast<device::DropoutKeepIsa>(state.range(0));
  if (!device::DropoutKeepIsaSupported(isa)) {
    state.SkipWithError("this CPU lacks the path");
    return;
  }
  constexpr int64_t kGroups = 512;  // 64 Ki elements
  std::vector<uint64_t> words(2 * kGroups);
  const device::DropoutKey key{.seed = 1, .step = 3, .op_id = 2};
  for (auto _ : state) {
    device::DropoutKeepWords(isa, key, device::DropoutThreshold(0.1f), 0, kGroups, words.data());
    benchmark::DoNotOptimize(words.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * kGroups * 128);
}
BENCHMARK(BM_DropoutKeepBits)->Arg(0)->Arg(1)->Arg(2);

// 64 Ki floats (in cache), 1 Mi (the ViT's attention probabilities at batch
// 64 are 64·4·16·16 = 65,536) and 16 Mi (memory).
BENCHMARK(BM_Dropout)->Arg(1 << 16)->Arg(1 << 20)->Arg(1 << 24)->UseRealTime();
BENCHMARK(BM_Memcpy)->Arg(1 << 16)->Arg(1 << 20)->Arg(1 << 24)->UseRealTime();

}  // namespace
}  // namespace sinkrt

BENCHMARK_MAIN();
