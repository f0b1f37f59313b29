// Initial contents of a buffer from its fb::Init (the init program's
// InitTask), as docs/reference/ops.md "Initialisers" specifies.
//
// Random kinds use a counter-based generator: element i of a buffer seeded s
// depends only on (s, i), never on how many values were drawn before, so
// every rank of a data-parallel job and every platform computes the same
// parameters without talking to each other.
#pragma once

#include <cstdint>
#include <span>

#include "device/src/kernels/kernel.h"

namespace sinkrt::device {

// SplitMix64's output function applied to one state value: advance by the
// golden gamma, then mix (Steele, Lea, Flood 2014).
inline uint64_t SplitMix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Element i of the uniform [0, 1) stream of `seed`: the top 24 bits of
// SplitMix64(seed ^ (i · 0x9E3779B97F4A7C15)) times 2⁻²⁴ (exact in f32).
inline float UniformAt(uint64_t seed, uint64_t i) {
  const uint64_t h = SplitMix64(seed ^ (i * 0x9E3779B97F4A7C15ull));
  return static_cast<float>(h >> 40) * 0x1.0p-24f;
}

// Element i of the standard normal stream of `seed`: Box–Muller on the
// uniforms of the pair (2k, 2k+1) that holds i, the cosine branch for the
// even element and the sine branch for the odd one. 1 − u keeps the
// logarithm's argument in (0, 1].
float NormalAt(uint64_t seed, uint64_t i);

// Writes `out` as `def` says. `blobs` is the stream's blob section (Inline).
// Fails with InvalidArgument, naming the kind and the problem, on a dtype the
// kind does not produce, bad parameters (fan_in ≤ 0, stddev < 0, high < low,
// a non-integral constant for i32), or an inline range outside `blobs` or of
// the wrong size.
Status FillInitializer(const fb::Init& def, const TensorRef& out, std::span<const uint8_t> blobs);

}  // namespace sinkrt::device
