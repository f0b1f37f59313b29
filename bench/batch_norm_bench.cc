// BatchNorm2d in training, forward + backward, as the executor runs it: one
// task stream of BatchNorm (batch statistics, the moving statistics updated
// in place) then BatchNormGrad (dx, dgamma, dbeta), on ResNet-like NCHW
// shapes. bench/compare_batch_norm.py runs it interleaved with PyTorch's
// nn.BatchNorm2d forward + backward on the same shapes and prints the ratio.
//
//   build/bench/batch_norm_bench --benchmark_filter='BM_BatchNorm2d/64/64/28/28/1'
#include <benchmark/benchmark.h>

#include <vector>

#include "device/src/executor.h"
#include "support/stream_builder.h"

namespace sinkrt {
namespace {

void BM_BatchNorm2d(benchmark::State& state) {
  const int64_t n = state.range(0), c = state.range(1), h = state.range(2), w = state.range(3);
  const Shape x = {n, c, h, w}, ch = {c};
  testing::HandStream hs;
  const uint32_t in = hs.AddBuffer("x", x), dy = hs.AddBuffer("dy", x);
  const uint32_t gamma = hs.AddBuffer("gamma", ch), beta = hs.AddBuffer("beta", ch);
  const uint32_t mm = hs.AddBuffer("moving_mean", ch), mv = hs.AddBuffer("moving_variance", ch);
  const uint32_t y = hs.AddBuffer("y", x), mean = hs.AddBuffer("mean", ch), rstd = hs.AddBuffer("rstd", ch);
  const uint32_t dx = hs.AddBuffer("dx", x), dgamma = hs.AddBuffer("dgamma", ch), dbeta = hs.AddBuffer("dbeta", ch);
  for (uint32_t b : {in, dy, gamma, beta, mm, mv}) hs.InitUniform(b, b + 1);
  auto options = [](flatbuffers::FlatBufferBuilder& fbb) { return fb::CreateBatchNormOptions(fbb).Union(); };
  hs.AddKernel(fb::OpCode::BatchNorm, {in, gamma, beta, mm, mv}, {y, mean, rstd}, fb::OpOptions::BatchNormOptions,
               options);
  hs.AddKernel(fb::OpCode::BatchNormGrad, {dy, in, gamma, mean, rstd}, {dx, dgamma, dbeta},
               fb::OpOptions::BatchNormOptions, options);
  auto stream = VerifyTaskStream(hs.Finish());
  if (!stream.ok()) {
    state.SkipWithError(stream.status().ToString().c_str());
    return;
  }
  device::DeviceOptions opts;
  opts.threads = static_cast<int>(state.range(4));
  auto ex = device::Executor::Load(std::move(stream).value(), opts);
  if (!ex.ok()) {
    state.SkipWithError(ex.status().ToString().c_str());
    return;
  }
  device::RunStats stats;
  for (int i = 0; i < 5; ++i) (void)(*ex)->Run(ProgramKind::TrainStep, 1, &stats);  // warm-up
  for (auto _ : state) (void)(*ex)->Run(ProgramKind::TrainStep, 1, &stats);
  // Bytes the pair must move at least: x and y, then dy, x and dx.
  const double bytes = 5.0 * static_cast<double>(n * c * h * w) * sizeof(float);
  state.counters["GB/s"] = benchmark::Counter(bytes * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}
// N, C, H, W, threads: ResNet-50's stage shapes at batch 32 and a [N, C] BatchNorm1d.
BENCHMARK(BM_BatchNorm2d)
    ->Args({32, 64, 56, 56, 1})
    ->Args({32, 256, 14, 14, 1})
    ->Args({32, 512, 7, 7, 1})
    ->Args({256, 512, 1, 1, 1})
    ->Args({32, 64, 56, 56, 2})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace sinkrt

BENCHMARK_MAIN();
