// MatMul GFLOP/s for the MLP's shapes: through sinkrt (a one-kernel task
// stream run by the executor) against the same oneDNN primitive called
// directly. The ratio should be ~1.0: our layer adds dispatch, not work.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>

#include "device/src/executor.h"
#include "support/stream_builder.h"

namespace sinkrt {
namespace {

// (M, K, N, transpose_a, transpose_b): the forward and backward MatMuls of
// the 784-512-256-10 MLP at batch 64.
struct Shape3 {
  int64_t m, k, n;
  bool ta, tb;
};
const Shape3 kShapes[] = {
    {64, 784, 512, false, false},  // fc1 forward
    {64, 512, 256, false, false},  // fc2 forward
    {64, 256, 10, false, false},   // fc3 forward
    {784, 64, 512, true, false},   // fc1 dW = x^T dy
    {64, 256, 512, false, true},   // fc2 dx = dy W^T
    {512, 64, 256, true, false},   // fc2 dW
};

void SetFlops(benchmark::State& state, const Shape3& s) {
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * s.m * s.n * s.k * state.iterations() / 1e9, benchmark::Counter::kIsRate);
  state.SetLabel(std::to_string(s.m) + "x" + std::to_string(s.k) + "x" + std::to_string(s.n) + (s.ta ? " ta" : "") +
                 (s.tb ? " tb" : ""));
}

void BM_MatMulSinkrt(benchmark::State& state) {
  const Shape3& s = kShapes[state.range(0)];
  testing::HandStream hs;
  uint32_t a = hs.AddBuffer("a", s.ta ? Shape{s.k, s.m} : Shape{s.m, s.k});
  uint32_t b = hs.AddBuffer("b", s.tb ? Shape{s.n, s.k} : Shape{s.k, s.n});
  uint32_t y = hs.AddBuffer("y", {s.m, s.n});
  hs.InitUniform(a, 1);
  hs.InitUniform(b, 2);
  bool ta = s.ta, tb = s.tb;
  hs.AddKernel(fb::OpCode::MatMul, {a, b}, {y}, fb::OpOptions::MatMulOptions,
               [ta, tb](flatbuffers::FlatBufferBuilder& fbb) { return fb::CreateMatMulOptions(fbb, ta, tb).Union(); });
  auto stream = VerifyTaskStream(hs.Finish());
  if (!stream.ok()) {
    state.SkipWithError(stream.status().ToString().c_str());
    return;
  }
  device::DeviceOptions opts;
  opts.threads = static_cast<int>(state.range(1));
  auto ex = device::Executor::Load(std::move(stream).value(), opts);
  if (!ex.ok()) {
    state.SkipWithError(ex.status().ToString().c_str());
    return;
  }
  device::RunStats stats;
  for (auto _ : state) (void)(*ex)->Run(ProgramKind::TrainStep, 1, &stats);
  SetFlops(state, s);
}

void BM_MatMulOneDnnDirect(benchmark::State& state) {
  const Shape3& s = kShapes[state.range(0)];
  using dnnl::memory;
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream strm(eng);
  memory::desc a_md({s.m, s.k}, memory::data_type::f32, s.ta ? memory::dims{1, s.m} : memory::dims{s.k, 1});
  memory::desc b_md({s.k, s.n}, memory::data_type::f32, s.tb ? memory::dims{1, s.k} : memory::dims{s.n, 1});
  memory::desc c_md({s.m, s.n}, memory::data_type::f32, memory::format_tag::ab);
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), eng);
  dnnl::matmul mm(pd);
  std::vector<float> A(s.m * s.k, 0.5f), B(s.k * s.n, 0.25f), C(s.m * s.n);
  memory am(a_md, eng, A.data()), bm(b_md, eng, B.data()), cm(c_md, eng, C.data());
  omp_set_num_threads(static_cast<int>(state.range(1)));
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}};
  for (auto _ : state) {
    mm.execute(strm, args);
    strm.wait();
  }
  SetFlops(state, s);
}

void Args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"shape", "threads"});
  for (int t : {1, 2})
    for (int i = 0; i < 6; ++i) b->Args({i, t});
}
BENCHMARK(BM_MatMulSinkrt)->Apply(Args)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_MatMulOneDnnDirect)->Apply(Args)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace
}  // namespace sinkrt

BENCHMARK_MAIN();
