// vector_math.h's exp and tanh against double precision over a dense sweep
// of floats, and the kernels built on them (Gelu, GeluGrad, Tanh, Sigmoid,
// Softmax) against float64 references. The kernels' loops run whichever
// ISA clone this CPU selects; the scalar functions in this file are built
// for plain x86-64, so equal bits show the clones agree with it (and Gelu's
// loops are also built here per ISA and compared directly).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "device/src/kernels/vector_math.h"
#include "support/kernel_runner.h"

namespace sinkrt::device {
namespace {

using namespace ::sinkrt::testing;
using fb::OpCode;
using Tensor = KernelTensor;

// Units in the last place of the float nearest `want`.
double UlpError(float got, double want) {
  const float w = static_cast<float>(std::fabs(want));
  const double ulp = std::nextafter(w, std::numeric_limits<float>::infinity()) - w;
  return std::fabs(got - want) / ulp;
}

// Every 211th float bit pattern in [lo, hi] (about 10 million of them for
// [-100, 100], every binade of both signs).
template <typename F>
void ForFloats(float lo, float hi, F f) {
  for (uint64_t b = 0; b <= 0xffffffffu; b += 211) {
    const float x = std::bit_cast<float>(static_cast<uint32_t>(b));
    if (x >= lo && x <= hi) f(x);
  }
}

TEST(VectorMath, ExpWithinTwoUlp) {
  double worst = 0;
  float at = 0;
  ForFloats(kExpMin, kExpMax, [&](float x) {
    const double e = UlpError(FastExp(x), std::exp(static_cast<double>(x)));
    if (e > worst) worst = e, at = x;
  });
  EXPECT_LE(worst, 2.0) << "at x = " << at;
  EXPECT_EQ(FastExp(0.0f), 1.0f);
  EXPECT_EQ(FastExp(-100.0f), 0.0f);
  EXPECT_EQ(FastExp(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(FastExp(100.0f), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(FastExp(std::numeric_limits<float>::quiet_NaN())));
}

// Erf and exact GELU run on FastErf: against erf in double over every
// 211th float of [-6, 6] (its branches at |x| = 0.75 and the clamp at 4).
TEST(VectorMath, ErfWithinThreeUlp) {
  double worst = 0;
  float at = 0;
  ForFloats(-6.0f, 6.0f, [&](float x) {
    const double e = UlpError(FastErf(x), std::erf(static_cast<double>(x)));
    if (e > worst) worst = e, at = x;
  });
  EXPECT_LE(worst, 3.0) << "at x = " << at;
  EXPECT_EQ(FastErf(0.0f), 0.0f);
  EXPECT_TRUE(std::signbit(FastErf(-0.0f)));
  EXPECT_EQ(FastErf(std::numeric_limits<float>::infinity()), 1.0f);
  EXPECT_EQ(FastErf(-std::numeric_limits<float>::infinity()), -1.0f);
  EXPECT_EQ(FastErf(4.0f), 1.0f);
  EXPECT_EQ(FastErf(-1e30f), -1.0f);
  EXPECT_TRUE(std::isnan(FastErf(std::numeric_limits<float>::quiet_NaN())));
}

TEST(VectorMath, TanhWithinThreeUlp) {
  double worst = 0, worst_abs = 0;
  float at = 0;
  ForFloats(-100.0f, 100.0f, [&](float x) {
    const double want = std::tanh(static_cast<double>(x));
    const float got = FastTanh(x);
    const double e = UlpError(got, want);
    if (e > worst) worst = e, at = x;
    worst_abs = std::max(worst_abs, std::fabs(got - want));
  });
  EXPECT_LE(worst, 3.0) << "at x = " << at;
  EXPECT_LE(worst_abs, 1.2e-7);
  EXPECT_EQ(FastTanh(0.0f), 0.0f);
  EXPECT_EQ(FastTanh(1e-20f), 1e-20f);
  EXPECT_EQ(FastTanh(50.0f), 1.0f);
  EXPECT_EQ(FastTanh(-std::numeric_limits<float>::infinity()), -1.0f);
  EXPECT_TRUE(std::isnan(FastTanh(std::numeric_limits<float>::quiet_NaN())));
}

double GeluRef(double x) { return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }
double GeluGradRef(double x) {
  const double c = 0.7978845608028654, a = 0.044715;
  const double t = std::tanh(c * (x + a * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3.0 * a * x * x);
}

// 100,003 points over [-20, 20] (an odd count: the loops' vector tails run),
// then a NaN.
std::vector<float> GeluInputs() {
  std::vector<float> x;
  const int n = 100003;
  for (int i = 0; i < n; ++i) x.push_back(-20.0f + 40.0f * static_cast<float>(i) / (n - 1));
  x.push_back(std::numeric_limits<float>::quiet_NaN());
  return x;
}

// dy for GeluGrad: varied magnitudes and signs, not all 1.
std::vector<float> GeluUpstream(size_t n) {
  std::vector<float> dy(n);
  for (size_t i = 0; i < n; ++i) dy[i] = 0.25f * static_cast<float>(static_cast<int>(i % 13) - 6);
  return dy;
}

TEST(VectorMath, GeluAndGradAgainstFloat64) {
  const std::vector<float> xs = GeluInputs();
  const int64_t n = static_cast<int64_t>(xs.size());
  Tensor x({n}), y({n}), dy({n}), dx({n});
  x.set(xs);
  dy.set(std::vector<float>(xs.size(), 1.0f));
  KernelRunner(OpCode::Gelu).In(x).Out(y).PrepareAndRun();
  KernelRunner(OpCode::GeluGrad).In(dy).In(x).Out(dx).PrepareAndRun();
  double worst_y = 0, worst_dx = 0;
  for (int64_t i = 0; i < n - 1; ++i) {
    const double ry = GeluRef(xs[i]);
    worst_y = std::max(worst_y, std::fabs(y[i] - ry) / std::max(1.0, std::fabs(ry)));
    worst_dx = std::max(worst_dx, std::fabs(dx[i] - GeluGradRef(xs[i])));
  }
  // libm's tanhf in the same formulas: 4.3e-7 and 5.6e-7.
  EXPECT_LE(worst_y, 2.5e-7);
  EXPECT_LE(worst_dx, 3e-7);
  EXPECT_TRUE(std::isnan(y[n - 1]));
  EXPECT_TRUE(std::isnan(dx[n - 1]));
}

TEST(VectorMath, KernelsGiveTheScalarFunctionsBits) {
  const std::vector<float> xs = GeluInputs();
  const int64_t n = static_cast<int64_t>(xs.size());
  Tensor x({n}), y({n});
  x.set(xs);
  KernelRunner(OpCode::Tanh).In(x).Out(y).PrepareAndRun();
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(std::bit_cast<uint32_t>(y[i]), std::bit_cast<uint32_t>(FastTanh(xs[i]))) << "Tanh at x = " << xs[i];
  KernelRunner(OpCode::Sigmoid).In(x).Out(y).PrepareAndRun();
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(std::bit_cast<uint32_t>(y[i]), std::bit_cast<uint32_t>(FastSigmoid(xs[i]))) << "Sigmoid at x = " << xs[i];
  KernelRunner(OpCode::Gelu).In(x).Out(y).PrepareAndRun();
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(std::bit_cast<uint32_t>(y[i]), std::bit_cast<uint32_t>(GeluOf(xs[i], kExp2Bound)))
        << "Gelu at x = " << xs[i];
  const std::vector<float> dys = GeluUpstream(xs.size());
  Tensor dy({n}), dx({n});
  dy.set(dys);
  KernelRunner(OpCode::GeluGrad).In(dy).In(x).Out(dx).PrepareAndRun();
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(std::bit_cast<uint32_t>(dx[i]), std::bit_cast<uint32_t>(GeluGradOf(dys[i], xs[i], kExp2Bound)))
        << "GeluGrad at x = " << xs[i];
}

#if defined(__x86_64__) && defined(__GNUC__)
// Gelu's loops built here for each ISA the library's clones target
// (SINKRT_VECTOR_CLONES); this file is compiled with -ffp-contract=off as
// the library is. Every one this CPU can run gives the plain x86-64 build's
// bits: a training run's numbers do not depend on the machine's ISA.
void GeluLoops(const float* x, const float* dy, float* y, float* dx, int64_t n, float bound) {
  for (int64_t i = 0; i < n; ++i) y[i] = GeluOf(x[i], bound), dx[i] = GeluGradOf(dy[i], x[i], bound);
}
__attribute__((target("arch=x86-64-v3"))) void GeluLoopsV3(const float* x, const float* dy, float* y, float* dx,
                                                           int64_t n, float bound) {
  for (int64_t i = 0; i < n; ++i) y[i] = GeluOf(x[i], bound), dx[i] = GeluGradOf(dy[i], x[i], bound);
}
__attribute__((target("arch=x86-64-v4"))) void GeluLoopsV4(const float* x, const float* dy, float* y, float* dx,
                                                           int64_t n, float bound) {
  for (int64_t i = 0; i < n; ++i) y[i] = GeluOf(x[i], bound), dx[i] = GeluGradOf(dy[i], x[i], bound);
}

TEST(VectorMath, GeluGivesTheSameBitsOnEveryIsa) {
  std::vector<float> xs = GeluInputs();
  for (float v : {1e10f, -1e10f, 1e-40f, -0.0f, std::numeric_limits<float>::infinity()}) xs.push_back(v);
  const int64_t n = static_cast<int64_t>(xs.size());
  const std::vector<float> dys = GeluUpstream(xs.size());
  std::vector<float> y0(n), dx0(n), y(n), dx(n);
  GeluLoops(xs.data(), dys.data(), y0.data(), dx0.data(), n, kExp2Bound);
  auto expect_same = [&](const char* isa) {
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(std::bit_cast<uint32_t>(y[i]), std::bit_cast<uint32_t>(y0[i])) << isa << " Gelu at x = " << xs[i];
      ASSERT_EQ(std::bit_cast<uint32_t>(dx[i]), std::bit_cast<uint32_t>(dx0[i])) << isa << " GeluGrad at x = " << xs[i];
    }
  };
  __builtin_cpu_init();
  int ran = 0;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi2")) {
    GeluLoopsV3(xs.data(), dys.data(), y.data(), dx.data(), n, kExp2Bound);
    expect_same("x86-64-v3");
    ++ran;
  }
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl")) {
    GeluLoopsV4(xs.data(), dys.data(), y.data(), dx.data(), n, kExp2Bound);
    expect_same("x86-64-v4");
    ++ran;
  }
  if (ran == 0) GTEST_SKIP() << "this CPU has neither x86-64-v3 nor v4";
}
#endif

TEST(VectorMath, SoftmaxRowsAgainstFloat64) {
  // Rows of 16 (the ViT's attention), 10 and 37 (vector tails).
  for (int64_t len : {16, 10, 37}) {
    const int64_t rows = 33;
    Tensor x = RandomTensor({rows, len}, 11, -30.0f, 30.0f), y({rows, len}), ly({rows, len});
    KernelRunner(OpCode::Softmax).In(x).Out(y).Axis(1).PrepareAndRun();
    KernelRunner(OpCode::LogSoftmax).In(x).Out(ly).Axis(1).PrepareAndRun();
    for (int64_t r = 0; r < rows; ++r) {
      double m = -1e300, s = 0;
      for (int64_t i = 0; i < len; ++i) m = std::max(m, double(x[r * len + i]));
      for (int64_t i = 0; i < len; ++i) s += std::exp(double(x[r * len + i]) - m);
      for (int64_t i = 0; i < len; ++i) {
        const double want = std::exp(double(x[r * len + i]) - m) / s;
        EXPECT_NEAR(y[r * len + i], want, 1e-7 + 4e-7 * want) << "Softmax row " << r << " of " << len;
        EXPECT_NEAR(ly[r * len + i], std::log(want), 2e-6 * (1 + std::fabs(std::log(want))))
            << "LogSoftmax row " << r << " of " << len;
      }
    }
  }
}

}  // namespace
}  // namespace sinkrt::device
