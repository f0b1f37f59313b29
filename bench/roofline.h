// The machine's own f32 limit, measured beside the figures it bounds
// (DESIGN §7: a speed claim is a ratio measured in one run).
//
// One core's peak f32 GEMM rate is that of a large oneDNN matmul on one
// thread (1024³: the same brgemm kernels the training step runs, at a size
// where blocking overheads vanish); the roofline of n cores is n times it.
// For the MLP 784-512-256-10, one training sample costs kMlpFlopsPerSample.
#pragma once

#include <omp.h>
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace sinkrt {

// Forward 2·(784·512 + 512·256 + 256·10); backward each layer's dW (as
// much again) and dX but the first layer's (which the step does not
// compute): 2,407,424 FLOP.
inline constexpr double kMlpFlopsPerSample = 3 * 2.0 * (784 * 512 + 512 * 256 + 256 * 10) - 2.0 * 784 * 512;

// GFLOP/s of an f32 [n,n]·[n,n] oneDNN matmul on one thread: the best of
// `rounds` timed calls after a warm-up call.
inline double PeakGflopsOneCore(int64_t n = 1024, int rounds = 8) {
  using dnnl::memory;
  const int team = omp_get_max_threads();
  omp_set_num_threads(1);
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream strm(eng);
  const memory::desc md({n, n}, memory::data_type::f32, memory::format_tag::ab);
  dnnl::matmul mm(dnnl::matmul::primitive_desc(dnnl::matmul::desc(md, md, md), eng));
  std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n);
  memory am(md, eng, a.data()), bm(md, eng, b.data()), cm(md, eng, c.data());
  const std::unordered_map<int, memory> args{{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}};
  double best = 1e30;
  for (int r = 0; r <= rounds; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    mm.execute(strm, args);
    strm.wait();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0) best = std::min(best, s);  // r == 0 warms up
  }
  omp_set_num_threads(team);
  return 2.0 * n * n * n / best / 1e9;
}

}  // namespace sinkrt
