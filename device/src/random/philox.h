// Philox4x32-10, the counter-based generator of Salmon, Moraes, Dror and
// Shaw, "Parallel random numbers: as easy as 1, 2, 3" (SC'11), written from
// the paper's definition: a 128-bit counter and a 64-bit key go through 10
// rounds of two 32x32 -> 64-bit multiplications (M0, M1), the halves
// permuted and xor-ed with the key, the key bumped by the Weyl constants
// (W0, W1) between rounds. Output block n depends only on (key, counter n),
// so any element of a stream is computed without the ones before it: what
// dropout needs to draw the mask of one shard, one micro-batch or one rank
// exactly as one device would (docs/guide/dropout.md). The paper's
// known-answer vectors are checked in test/device/random/philox_test.cc.
#pragma once

#include <array>
#include <cstdint>

namespace sinkrt::device {

using PhiloxCounter = std::array<uint32_t, 4>;
using PhiloxKey = std::array<uint32_t, 2>;

namespace philox_internal {

inline constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;  // round multipliers
inline constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;  // key bumps (golden ratio, sqrt(3) - 1)

inline constexpr PhiloxCounter Round(const PhiloxCounter& c, const PhiloxKey& k) {
  const uint64_t p0 = static_cast<uint64_t>(kM0) * c[0];
  const uint64_t p1 = static_cast<uint64_t>(kM1) * c[2];
  const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
  const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
  return {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
}

}  // namespace philox_internal

// The 4 x 32 random bits of counter `c` under key `k` (10 rounds).
inline constexpr PhiloxCounter Philox4x32(PhiloxCounter c, PhiloxKey k) {
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      k[0] += philox_internal::kW0;
      k[1] += philox_internal::kW1;
    }
    c = philox_internal::Round(c, k);
  }
  return c;
}

}  // namespace sinkrt::device
