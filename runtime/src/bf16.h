/// \file
/// bfloat16 <-> float, shared by the kernels (Cast) and the collectives'
/// reductions so that both round the same way.
///
/// bf16 is the top half of an IEEE binary32: widening is exact; narrowing
/// rounds to nearest, ties to even, and keeps a NaN a NaN (quietened, sign
/// and top payload bits kept) instead of letting the rounding carry turn it
/// into an infinity. Inline and branch-light so that loops over arrays
/// vectorise.
#pragma once

#include <bit>
#include <cstdint>

namespace sinkrt {

/// The float a bfloat16 holds (exact: its upper 16 bits).
inline float Bf16ToFloat(uint16_t v) { return std::bit_cast<float>(static_cast<uint32_t>(v) << 16); }

/// The nearest bfloat16, ties to even; a NaN stays a NaN.
inline uint16_t FloatToBf16(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const uint32_t rounded = bits + 0x7fffu + ((bits >> 16) & 1u);
  const bool nan = (bits & 0x7fffffffu) > 0x7f800000u;
  return static_cast<uint16_t>(nan ? (bits >> 16) | 0x0040u : rounded >> 16);
}

}  // namespace sinkrt
