// sinkrt's counter-based generator for random initialisers (docs/reference/
// ops.md "Initialisers"): element i of a stream seeded s depends only on
// (s, i). The device's init program fills buffers with it; the host draws
// the same values where a graph must hold them inline (nn.Embedding's
// padding_idx, MindSpore's init_data() then a zeroed row).
#pragma once

#include <cstdint>

namespace sinkrt {

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

// Box–Muller on the uniforms of pair k: (r cos θ, r sin θ), in double so
// that the f32 results are correctly rounded on any libm accurate to a few
// double ulps.
void NormalPair(uint64_t seed, uint64_t k, double* even, double* odd);

// Element i of the standard normal stream of `seed`: the pair (2k, 2k+1)
// that holds i, the cosine branch for the even element and the sine branch
// for the odd one. 1 − u keeps the logarithm's argument in (0, 1].
float NormalAt(uint64_t seed, uint64_t i);

}  // namespace sinkrt
