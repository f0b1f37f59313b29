// BatchMatMul for the ViT's attention shapes: the sinkrt kernel (run by the
// executor from a one-kernel task stream; small products take the hand
// kernel of device/src/kernels/small_gemm.h) against one oneDNN matmul
// primitive over every batch (what the kernel ran before the hand kernel)
// and against the first hand-written loop over the same [16,16] products,
// compiled with this project's flags.
//
// The ViT (issue 15) has 4 heads of 16 on 16 tokens: per sample and head,
// QKᵀ is [16,16]·[16,16]ᵀ and the weighting of V is [16,16]·[16,16]; the
// backward pass adds the transposed variants. Batch 64 and 256 give 256 and
// 1024 products per call.
//
// BM_Crossover{Hand,OneDnn} time square S×S×S products (as many as give
// ~4 MFLOP per call) on one thread, hand kernel against oneDNN, rates from
// CPU time (this VM is shared): where they cross is batch_matmul.cc's
// kSmallProductWork.
#include <benchmark/benchmark.h>

#include <omp.h>
#include <oneapi/dnnl/dnnl.hpp>

#include <cmath>
#include <cstring>
#include <random>
#include <unordered_map>
#include <vector>

#include "device/src/executor.h"
#include "device/src/kernels/small_gemm.h"
#include "support/stream_builder.h"

namespace sinkrt {
namespace {

constexpr int64_t kHeads = 4, kTokens = 16, kHeadDim = 16;

struct Variant {
  const char* name;
  bool ta, tb;
};
// Forward QKᵀ (tb), forward weights·V, and the backward's ta products.
const Variant kVariants[] = {
    {"QK^T", false, true}, {"AV", false, false}, {"A^T dY", true, false}, {"A^T B^T", true, true}};

void SetRate(benchmark::State& state, int64_t batch) {
  const double flops = 2.0 * batch * kHeads * kTokens * kTokens * kHeadDim;
  state.counters["GFLOP/s"] = benchmark::Counter(flops * state.iterations() / 1e9, benchmark::Counter::kIsRate);
  state.SetLabel(std::string(kVariants[state.range(1)].name) + " batch " + std::to_string(batch));
}

void BM_BatchMatMulSinkrt(benchmark::State& state) {
  const int64_t batch = state.range(0);
  const Variant& v = kVariants[state.range(1)];
  const Shape s = {batch, kHeads, kTokens, kHeadDim};  // square: every variant has the same shapes
  testing::HandStream hs;
  const uint32_t a = hs.AddBuffer("a", s), b = hs.AddBuffer("b", s), y = hs.AddBuffer("y", s);
  hs.InitUniform(a, 1);
  hs.InitUniform(b, 2);
  const bool ta = v.ta, tb = v.tb;
  hs.AddKernel(fb::OpCode::BatchMatMul, {a, b}, {y}, fb::OpOptions::MatMulOptions,
               [ta, tb](flatbuffers::FlatBufferBuilder& fbb) { return fb::CreateMatMulOptions(fbb, ta, tb).Union(); });
  auto stream = VerifyTaskStream(hs.Finish());
  if (!stream.ok()) {
    state.SkipWithError(stream.status().ToString().c_str());
    return;
  }
  device::DeviceOptions opts;
  opts.threads = static_cast<int>(state.range(2));
  auto ex = device::Executor::Load(std::move(stream).value(), opts);
  if (!ex.ok()) {
    state.SkipWithError(ex.status().ToString().c_str());
    return;
  }
  device::RunStats stats;
  for (int i = 0; i < 10; ++i) (void)(*ex)->Run(ProgramKind::TrainStep, 1, &stats);  // warm-up
  for (auto _ : state) (void)(*ex)->Run(ProgramKind::TrainStep, 1, &stats);
  SetRate(state, batch);
}

// y = op(a)·op(b) for `count` [16,16] matrices, rows of y accumulated in
// registers with the trip counts known at compile time; a transposed b is
// first packed so that the inner loop reads it contiguously. Inlined into
// each wrapper below, so that each compiles it for its own ISA.
inline __attribute__((always_inline)) void HandBody(const float* __restrict a, const float* __restrict b,
                                                    float* __restrict y, int64_t count, bool ta, bool tb) {
  constexpr int64_t n = 16, mat = n * n;
  for (int64_t m = 0; m < count; ++m) {
    const float* am = a + m * mat;
    const float* bm = b + m * mat;
    float packed[mat];
    if (tb) {
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < n; ++j) packed[j * n + i] = bm[i * n + j];
      bm = packed;
    }
    float* ym = y + m * mat;
    for (int64_t i = 0; i < n; ++i) {
      float acc[n] = {};
      for (int64_t p = 0; p < n; ++p) {
        const float aip = ta ? am[p * n + i] : am[i * n + p];
        const float* brow = bm + p * n;
        for (int64_t j = 0; j < n; ++j) acc[j] += aip * brow[j];
      }
      std::memcpy(ym + i * n, acc, sizeof(acc));
    }
  }
}

// As the project builds its kernels (baseline x86-64: SSE2) and, for
// comparison, with AVX2 and FMA (the dev machines' best ISA), which no
// kernel of ours is compiled for.
void HandBatchMatMul(const float* a, const float* b, float* y, int64_t count, bool ta, bool tb) {
  HandBody(a, b, y, count, ta, tb);
}
__attribute__((target("avx2,fma"))) void HandBatchMatMulAvx2(const float* a, const float* b, float* y, int64_t count,
                                                             bool ta, bool tb) {
  HandBody(a, b, y, count, ta, tb);
}

using HandFn = void (*)(const float*, const float*, float*, int64_t, bool, bool);

void RunHandLoop(benchmark::State& state, HandFn hand) {
  const int64_t batch = state.range(0), count = batch * kHeads;
  const Variant& v = kVariants[state.range(1)];
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> a(count * 256), b(count * 256), y(count * 256);
  for (float& x : a) x = dist(rng);
  for (float& x : b) x = dist(rng);
  // Verify once against the plain definition before timing.
  hand(a.data(), b.data(), y.data(), count, v.ta, v.tb);
  for (int64_t m = 0; m < count; m += 37)
    for (int i = 0; i < 16; ++i)
      for (int j = 0; j < 16; ++j) {
        double want = 0;
        for (int p = 0; p < 16; ++p)
          want += double(v.ta ? a[m * 256 + p * 16 + i] : a[m * 256 + i * 16 + p]) *
                  (v.tb ? b[m * 256 + j * 16 + p] : b[m * 256 + p * 16 + j]);
        if (std::abs(y[m * 256 + i * 16 + j] - want) > 1e-4) {
          state.SkipWithError("hand loop gives a wrong product");
          return;
        }
      }
  for (auto _ : state) {
    hand(a.data(), b.data(), y.data(), count, v.ta, v.tb);
    benchmark::DoNotOptimize(y.data());
  }
  SetRate(state, batch);
}

void BM_BatchMatMulHandLoop(benchmark::State& state) { RunHandLoop(state, HandBatchMatMul); }
void BM_BatchMatMulHandLoopAvx2(benchmark::State& state) { RunHandLoop(state, HandBatchMatMulAvx2); }

std::vector<float> RandomFloats(int64_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(count);
  for (float& x : v) x = dist(rng);
  return v;
}

// One oneDNN matmul primitive over `count` [m,k]·[k,n] products (op(a),
// op(b) as transposed strides), run with `threads` OpenMP threads, as the
// sinkrt kernel built it before the hand kernel. execute() builds a
// std::unordered_map per call (~1 µs; the kernel uses the C API instead).
struct OneDnnBatch {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  dnnl::matmul prim;
  std::unordered_map<int, dnnl::memory> args;

  OneDnnBatch(int64_t count, int64_t m, int64_t n, int64_t k, bool ta, bool tb, float* a, float* b, float* y) {
    using dnnl::memory;
    auto desc = [](int64_t c, int64_t r, int64_t cols, bool t) {
      // [c, r, cols] row-major in memory, described as its transpose when t.
      return t ? memory::desc({c, cols, r}, memory::data_type::f32, {r * cols, 1, cols})
               : memory::desc({c, r, cols}, memory::data_type::f32, {r * cols, cols, 1});
    };
    const memory::desc a_md = ta ? desc(count, k, m, true) : desc(count, m, k, false);
    const memory::desc b_md = tb ? desc(count, n, k, true) : desc(count, k, n, false);
    const memory::desc y_md({count, m, n}, memory::data_type::f32, {m * n, n, 1});
    prim = dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md, b_md, y_md), engine));
    args = {{DNNL_ARG_SRC, memory(a_md, engine, a)},
            {DNNL_ARG_WEIGHTS, memory(b_md, engine, b)},
            {DNNL_ARG_DST, memory(y_md, engine, y)}};
  }
  void Run() {
    prim.execute(stream, args);
    stream.wait();
  }
};

void BM_BatchMatMulOneDnn(benchmark::State& state) {
  const int64_t batch = state.range(0), count = batch * kHeads;
  const Variant& v = kVariants[state.range(1)];
  omp_set_num_threads(static_cast<int>(state.range(2)));
  std::vector<float> a = RandomFloats(count * 256, 1), b = RandomFloats(count * 256, 2), y(count * 256);
  OneDnnBatch p(count, kTokens, kHeadDim, kTokens, v.ta, v.tb, a.data(), b.data(), y.data());
  for (int i = 0; i < 10; ++i) p.Run();
  for (auto _ : state) p.Run();
  SetRate(state, batch);
}

// Square products of side S = range(0), variant range(1), one thread.
int64_t CrossoverCount(int64_t s) { return std::max<int64_t>(1, (int64_t{2} << 20) / (s * s * s)); }

void SetCrossoverRate(benchmark::State& state, int64_t count) {
  const int64_t s = state.range(0);
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * count * s * s * s * state.iterations() / 1e9, benchmark::Counter::kIsRate);
  state.SetLabel(std::string(kVariants[state.range(1)].name) + " " + std::to_string(count) + " x " + std::to_string(s) +
                 "^3");
}

void BM_CrossoverHand(benchmark::State& state) {
  const int64_t s = state.range(0), count = CrossoverCount(s), mat = s * s;
  const Variant& v = kVariants[state.range(1)];
  if (s > device::kSmallGemmMaxK) {
    state.SkipWithError("K above kSmallGemmMaxK");
    return;
  }
  std::vector<float> a = RandomFloats(count * mat, 1), b = RandomFloats(count * mat, 2), y(count * mat);
  const device::SmallGemmDims d{s, s, s, v.ta, v.tb};
  for (auto _ : state) {
    for (int64_t e = 0; e < count; ++e)
      device::SmallGemm(d, a.data() + e * mat, b.data() + e * mat, y.data() + e * mat);
    benchmark::DoNotOptimize(y.data());
  }
  SetCrossoverRate(state, count);
}

void BM_CrossoverOneDnn(benchmark::State& state) {
  const int64_t s = state.range(0), count = CrossoverCount(s), mat = s * s;
  const Variant& v = kVariants[state.range(1)];
  omp_set_num_threads(1);
  std::vector<float> a = RandomFloats(count * mat, 1), b = RandomFloats(count * mat, 2), y(count * mat);
  OneDnnBatch p(count, s, s, s, v.ta, v.tb, a.data(), b.data(), y.data());
  for (int i = 0; i < 3; ++i) p.Run();
  for (auto _ : state) p.Run();
  SetCrossoverRate(state, count);
}

void CrossoverArgs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"side", "variant"});
  for (int s : {8, 16, 24, 32, 40, 48, 64, 96, 128})
    for (int v : {0, 1, 2}) b->Args({s, v});
}

void Args(benchmark::internal::Benchmark* b, std::initializer_list<int> threads) {
  b->ArgNames({"batch", "variant", "threads"});
  for (int t : threads)
    for (int batch : {64, 256})
      for (int v = 0; v < 4; ++v) b->Args({batch, v, t});
}
BENCHMARK(BM_BatchMatMulSinkrt)->Apply([](auto* b) {
                                 Args(b, {1, 2});
                               }) -> Unit(benchmark::kMicrosecond) -> UseRealTime();
BENCHMARK(BM_BatchMatMulOneDnn)->Apply([](auto* b) {
                                 Args(b, {1, 2});
                               }) -> Unit(benchmark::kMicrosecond) -> UseRealTime();
BENCHMARK(BM_CrossoverHand)->Apply(CrossoverArgs)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_CrossoverOneDnn)->Apply(CrossoverArgs)->Unit(benchmark::kMicrosecond);
// The first hand loops, on one thread.
BENCHMARK(BM_BatchMatMulHandLoop)
    ->Apply([](auto* b) { Args(b, {1}); }) -> Unit(benchmark::kMicrosecond) -> UseRealTime();
BENCHMARK(BM_BatchMatMulHandLoopAvx2)
    ->Apply([](auto* b) { Args(b, {1}); }) -> Unit(benchmark::kMicrosecond) -> UseRealTime();

}  // namespace
}  // namespace sinkrt

BENCHMARK_MAIN();
