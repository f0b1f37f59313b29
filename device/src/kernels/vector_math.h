// exp and tanh for the kernels' hot loops, written so that GCC and Clang
// vectorise a loop that calls them: no branches, no libm calls, the 2^n
// scaling done on the bits. libm's expf/tanhf are scalar calls and cost
// 6–27 ns each here, most of the ViT's step before these existed.
//
// Loops over them are compiled with SINKRT_VECTOR_CLONES, which builds the
// function for plain x86-64 (SSE2), x86-64-v3 (AVX2) and x86-64-v4
// (AVX-512) and picks one at load for the CPU it runs on, so the binary
// stays portable. The device library is built with -ffp-contract=off, so
// no clone fuses a*b+c into an FMA: every clone computes the same operations
// in the same order and returns the same bits, whatever the CPU.
//
// Accuracy, against double-precision exp/tanh over every float (a sweep
// run once; test/kernels_vector_math_test.cc checks a sample of them):
// FastExp within 1.22 ulp on [kExpMin, kExpMax]; FastTanh within 2.47 ulp
// and 9.1e-8 absolute everywhere (glibc's tanhf: 2.19 ulp, 1.0e-7).
#pragma once

#include <bit>
#include <cstdint>
#include <limits>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define SINKRT_VECTOR_CLONES __attribute__((target_clones("default", "arch=x86-64-v3", "arch=x86-64-v4")))
#else
#define SINKRT_VECTOR_CLONES
#endif

namespace sinkrt::device {

// Below this e^x is subnormal and FastExp returns 0; above kExpMax it
// returns +inf (2^n must stay a normal float for the scaling below).
inline constexpr float kExpMin = -87.33f;
inline constexpr float kExpMax = 88.3f;

// e^x: x = n·ln2 + r with |r| ≤ ln2/2 (Cody–Waite: ln2 split so that n·ln2_hi
// is exact), e^r by its Taylor series to r^7 (truncation < 1e-8 relative
// there), times 2^n built in the exponent bits. NaN stays NaN.
inline float FastExp(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;  // 9 significant bits
  constexpr float kLn2Lo = -2.12194440e-4f;
  constexpr float kRound = 12582912.0f;  // 1.5·2^23: adding it rounds to an integer in the low bits
  // max/min in this order keep a NaN x.
  float xc = x < kExpMin ? kExpMin : x;
  xc = xc > kExpMax ? kExpMax : xc;
  const float t = xc * kLog2e + kRound;
  const float n = t - kRound;
  const float r = (xc - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  // t's low mantissa bits hold n (offset by kRound's own bits).
  const uint32_t ni = std::bit_cast<uint32_t>(t) - std::bit_cast<uint32_t>(kRound);
  const float scale = std::bit_cast<float>((ni + 127u) << 23);
  float y = p * scale;
  y = x < kExpMin ? 0.0f : y;
  y = x > kExpMax ? std::numeric_limits<float>::infinity() : y;
  return y;
}

// tanh x: near zero its odd Taylor series to x^11 (|x| < 0.3, where the
// next term is below 2e-9 relative); elsewhere sign(x)·(1 − 2/(e^{2|x|} + 1)),
// which saturates to ±1 without overflow. Both are computed and one is
// selected, so the loop stays branch-free.
inline float FastTanh(float x) {
  const float ax = x < 0.0f ? -x : x;
  const float x2 = x * x;
  float p = -1382.0f / 155925.0f;
  p = p * x2 + 62.0f / 2835.0f;
  p = p * x2 - 17.0f / 315.0f;
  p = p * x2 + 2.0f / 15.0f;
  p = p * x2 - 1.0f / 3.0f;
  const float small = x + x * x2 * p;
  const float e = FastExp(2.0f * ax);
  float big = 1.0f - 2.0f / (e + 1.0f);
  big = x < 0.0f ? -big : big;
  return ax < 0.3f ? small : big;
}

// 1 / (1 + e^−x): e^−x overflowing to +inf gives exactly 0.
inline float FastSigmoid(float x) { return 1.0f / (1.0f + FastExp(-x)); }

}  // namespace sinkrt::device
