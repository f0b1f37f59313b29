// exp, tanh and erf for the kernels' hot loops, written so that GCC and Clang
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
// run once; test/device/kernels/kernels_vector_math_test.cc checks a sample of them):
// FastExp within 1.22 ulp on [kExpMin, kExpMax]; FastTanh within 2.47 ulp
// and 9.1e-8 absolute everywhere (glibc's tanhf: 2.19 ulp, 1.0e-7);
// FastErf within 2.6 ulp (glibc's erff: 0.9).
#pragma once

#include <bit>
#include <cmath>
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

// erf x, branch-free (libm's erff is a scalar call: Erf and exact GELU ran
// at 3 % of memory bandwidth on it). Odd, so on a = |x| with x's sign:
//   a < 0.75:       a·P(a²), P a Chebyshev fit of erf(√t)/√t on [0, 0.5625];
//   0.75 <= a:      1 − e^(−a²)·Q(s), Q a fit of erfc(a)·e^(a²) on [0.75, 4]
//                   in s = (a − 2.375)/1.625; a clamped at 4, where the
//                   result rounds to exactly 1 (erfc(4) = 1.5e-8).
// Coefficients from mpmath.chebyfit (8 and 15 terms; fit errors 3e-10
// relative). Both are computed and one selected. Within 2.6 ulp of erf in
// double (erff: 0.9); NaN stays NaN, erf(±inf) = ±1, erf(−0) = −0.
// Always inlined: GCC's early inliner finds it too large for the functor
// loops (activation.cc), and the call left in the loop keeps it scalar.
[[gnu::always_inline]] inline float FastErf(float x) {
  const float a = std::fabs(x);
  const float t = a * a;
  float p = -1.167069584e-05f;
  p = p * t + 1.177066615e-04f;
  p = p * t + -8.535066666e-04f;
  p = p * t + 5.223632235e-03f;
  p = p * t + -2.686612156e-02f;
  p = p * t + 1.128379133e-01f;
  p = p * t + -3.761263889e-01f;
  p = p * t + 1.128379167e+00f;
  const float small = a * p;
  const float c = a < 4.0f ? a : 4.0f;
  const float s = (c - 2.375f) * (1.0f / 1.625f);
  float q = 9.280424989e-06f;
  q = q * s + -2.422011754e-05f;
  q = q * s + 2.723206290e-05f;
  q = q * s + -6.497653034e-05f;
  q = q * s + 2.029610267e-04f;
  q = q * s + -4.754066946e-04f;
  q = q * s + 1.046200306e-03f;
  q = q * s + -2.312280975e-03f;
  q = q * s + 4.976803636e-03f;
  q = q * s + -1.034708278e-02f;
  q = q * s + 2.077433957e-02f;
  q = q * s + -4.015729097e-02f;
  q = q * s + 7.442604464e-02f;
  q = q * s + -1.315878380e-01f;
  q = q * s + 2.205056922e-01f;
  const float large = 1.0f - FastExp(-(c * c)) * q;
  const float r = a < 0.75f ? small : large;
  return x != x ? x : std::copysign(r, x);
}

// FastExp2's domain: 2^n stays a normal float for |n| ≤ 125, and so does
// the result (the polynomial's factor is in [0.7, 1.42]).
inline constexpr float kExp2Bound = 125.0f;

// 2^w for |w| ≤ kExp2Bound; the caller clamps (see GeluExponent). Cheaper
// and shorter in latency than FastExp for callers that can fold log2(e) into
// their own coefficients: no Cody–Waite split, no range selects, and 2^f
// (|f| ≤ 1/2) by a degree-6 polynomial evaluated in Estrin's scheme (depth 4
// instead of Horner's 6). The hot loops are latency-bound: the out-of-order
// window holds only a few iterations of this chain. Within 1.73e-7 relative
// (2.9·2^−24) of 2^w. Coefficients: a Chebyshev fit of (2^f − 1)/f on
// [−1/2, 1/2] (mpmath.chebyfit), so 2^0 is exactly 1.
inline float FastExp2(float w) {
  constexpr float kRound = 12582912.0f;  // 1.5·2^23: adding it rounds to an integer in the low bits
  constexpr float a1 = 6.931471880e-01f, a2 = 2.402265076e-01f, a3 = 5.550357114e-02f;
  constexpr float a4 = 9.618082557e-03f, a5 = 1.339086336e-03f, a6 = 1.545316295e-04f;
  const float t = w + kRound;
  const float n = t - kRound;
  const float f = w - n;  // exact: w and n are within 1/2 of each other
  const float f2 = f * f;
  const float f4 = f2 * f2;
  const float p = ((1.0f + a1 * f) + f2 * (a2 + a3 * f)) + f4 * ((a4 + a5 * f) + a6 * f2);
  // t's low mantissa bits hold n (offset by kRound's own bits); 127 is the
  // exponent bias.
  const uint32_t biased = std::bit_cast<uint32_t>(t) - (std::bit_cast<uint32_t>(kRound) - 127u);
  return p * std::bit_cast<float>(biased << 23);
}

// Gelu's tanh approximation 0.5x(1 + tanh u), u = c(x + a x³), and its
// derivative, from one exponential e = e^{−2u} = 2^w with
// w = x·(kW1 + kW2·x²) (−2c·log2 e and −2ca·log2 e folded into the
// coefficients): 0.5(1 + tanh u) = s = 1/(1 + e), so
//   Gelu(x)  = x / (1 + e)                 (no cancellation where tanh u ≈ −1)
//   Gelu'(x) = s + 2x·s(1 − s)·c(1 + 3a x²) = s + e·s·(g·s), g = x·(2c + 6ca x²),
// with s(1 − s) written e·s², no cancellation where s ≈ 1. GeluGrad
// recomputes e from x exactly as Gelu does.
//
// w is clamped to ±kExp2Bound, where s is 1 or ≈ 2^−125 (Gelu(x) = x, or
// ≈ x·2^−125 for x below −10.5). The clamp bound is an argument, not the
// literal: the loops pass kExp2Bound in from outside. With a literal GCC 12
// threads the clamped paths, folds their results to constants and blends
// three results per vector (14 compares and blends, 1.3–1.7× the time); with a
// value it cannot see, each clamp is one vmaxps/vminps. A NaN x gives NaN
// (through x itself; the clamp may drop it from w).
//
// Against float64 over every 17th float in [−20, 20]: Gelu within 1.34e−7
// absolute (relative where |Gelu| > 1), Gelu' within 2.03e−7; the previous
// FastSigmoid-based forms gave 1.68e−7 and 2.06e−7. The tests allow 2.5e−7
// and 3e−7.
namespace gelu {
inline constexpr float kW1 = static_cast<float>(-2.0 * 0.7978845608028654 * 1.4426950408889634);
inline constexpr float kW2 = static_cast<float>(-2.0 * 0.7978845608028654 * 0.044715 * 1.4426950408889634);
inline constexpr float kG1 = static_cast<float>(2.0 * 0.7978845608028654);
inline constexpr float kG2 = static_cast<float>(6.0 * 0.7978845608028654 * 0.044715);
}  // namespace gelu

// e^{−2u} of Gelu's u, given x and x².
inline float GeluExponent(float x, float x2, float bound) {
  float w = x * (gelu::kW1 + gelu::kW2 * x2);
  w = w < -bound ? -bound : w;
  w = w > bound ? bound : w;
  return FastExp2(w);
}

inline float GeluOf(float x, float bound) { return x / (1.0f + GeluExponent(x, x * x, bound)); }

inline float GeluGradOf(float dy, float x, float bound) {
  const float x2 = x * x;
  const float e = GeluExponent(x, x2, bound);
  const float s = 1.0f / (1.0f + e);
  const float g = x * (gelu::kG1 + gelu::kG2 * x2);
  return dy * (s + (e * s) * (g * s));
}

}  // namespace sinkrt::device
