// Dropout's keep bits in bulk (dropout_keep.h).
//
// The vector paths hold one Philox counter per 64-bit lane: the round's
// 32x32 -> 64-bit multiplies are then one vpmuludq each (it reads the low
// 32 bits of every lane, so the high halves the round leaves there are
// never looked at), the high half one shift. A word is the low 32 bits of
// its lane; each of its 16-bit halves is compared at the top of the lane.
#include "device/src/random/dropout_keep.h"

#include <array>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define SINKRT_DROPOUT_X86 1
#endif

namespace sinkrt::device {
namespace {

using philox_internal::kM0;
using philox_internal::kM1;
using philox_internal::kW0;
using philox_internal::kW1;

// Spread[m]: bit i of the 8-bit m moved to bit 8i. Half h of word j of
// blocks 0..7 of a group is element 8i + 2j + h: its 8-bit keep mask
// spread, then shifted by 2j + h.
constexpr std::array<uint64_t, 256> MakeSpread() {
  std::array<uint64_t, 256> s{};
  for (uint64_t m = 0; m < 256; ++m)
    for (int i = 0; i < 8; ++i)
      if (m & (uint64_t{1} << i)) s[m] |= uint64_t{1} << (8 * i);
  return s;
}
constexpr std::array<uint64_t, 256> kSpread = MakeSpread();

// The keep word of a group from its 8 per-(word, half) masks over blocks,
// m[2j + h] for half h of word j.
inline uint64_t Interleave(const unsigned (&m)[8]) {
  uint64_t w = 0;
  for (int k = 0; k < 8; ++k) w |= kSpread[m[k] & 0xFF] << k;
  return w;
}

uint32_t KeyLow(const DropoutKey& key) { return static_cast<uint32_t>(key.seed); }
uint32_t KeyHigh(const DropoutKey& key) {
  return static_cast<uint32_t>(key.seed >> 32) ^ static_cast<uint32_t>(key.step >> 32);
}

constexpr uint64_t kBlocksPerGroup = 64 / kDropoutElementsPerBlock;  // 8

void KeepWordsScalar(const DropoutKey& key, uint32_t t, uint64_t first_group, int64_t groups, uint64_t* words) {
  for (int64_t j = 0; j < groups; ++j) {
    uint64_t word = 0;
    const uint64_t first_block = (first_group + static_cast<uint64_t>(j)) * kBlocksPerGroup;
    for (uint64_t b = 0; b < kBlocksPerGroup; ++b) {
      const PhiloxCounter c = DropoutBlock(key, first_block + b);
      for (uint64_t w = 0; w < 4; ++w) {
        if ((c[w] & 0xFFFFu) >= t) word |= uint64_t{1} << (8 * b + 2 * w);
        if ((c[w] >> 16) >= t) word |= uint64_t{1} << (8 * b + 2 * w + 1);
      }
    }
    words[j] = word;
  }
}

#ifdef SINKRT_DROPOUT_X86

// GCC 12's AVX-512 shift and multiply intrinsics pass _mm512_undefined as
// the unused merge source, which -Wmaybe-uninitialized reports at -O2 (a
// known false positive: the mask is all ones, nothing is merged).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// One Philox round on 8 counters (lane i: counter words c0..c3, low halves).
__attribute__((target("avx512f"), always_inline)) inline void Round512(__m512i& c0, __m512i& c1, __m512i& c2,
                                                                       __m512i& c3, __m512i k0, __m512i k1) {
  const __m512i p0 = _mm512_mul_epu32(c0, _mm512_set1_epi64(kM0));
  const __m512i p1 = _mm512_mul_epu32(c2, _mm512_set1_epi64(kM1));
  c0 = _mm512_ternarylogic_epi64(_mm512_srli_epi64(p1, 32), c1, k0, 0x96);  // three-way xor
  c2 = _mm512_ternarylogic_epi64(_mm512_srli_epi64(p0, 32), c3, k1, 0x96);
  c1 = p1;
  c3 = p0;
}

// The 8-bit keep masks of both halves of word `c` of 8 blocks, against
// t48 = threshold << 48: the low half moved to the top, the high half's
// bits below it do not change a >= against t48's zeros.
__attribute__((target("avx512f"), always_inline)) inline void Keep512(__m512i c, __m512i t48, unsigned* lo,
                                                                      unsigned* hi) {
  *lo = _mm512_cmpge_epu64_mask(_mm512_slli_epi64(c, 48), t48);
  *hi = _mm512_cmpge_epu64_mask(_mm512_slli_epi64(c, 32), t48);
}

// The keep words of groups g0 .. g0 + kGroups - 1, a set of 8 counters
// each, interleaved so that the multiplies' latency overlaps (one round's
// chain is about 7 cycles; 4 sets keep the multiplier busy).
template <int kGroups>
__attribute__((target("avx512f"), always_inline)) inline void KeepGroups512(const DropoutKey& key, __m512i t48,
                                                                            uint64_t g0, uint64_t* words) {
  const __m512i iota = _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0);
  __m512i c0[kGroups], c1[kGroups], c2[kGroups], c3[kGroups];
  for (int i = 0; i < kGroups; ++i) {
    const uint64_t first_block = (g0 + static_cast<uint64_t>(i)) * kBlocksPerGroup;
    c0[i] = _mm512_add_epi64(_mm512_set1_epi64(static_cast<int64_t>(first_block)), iota);
    c1[i] = _mm512_srli_epi64(c0[i], 32);
    c2[i] = _mm512_set1_epi64(key.op_id);
    c3[i] = _mm512_set1_epi64(static_cast<uint32_t>(key.step));
  }
  uint32_t k0 = KeyLow(key), k1 = KeyHigh(key);
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      k0 += kW0;
      k1 += kW1;
    }
    const __m512i vk0 = _mm512_set1_epi64(k0), vk1 = _mm512_set1_epi64(k1);
    for (int i = 0; i < kGroups; ++i) Round512(c0[i], c1[i], c2[i], c3[i], vk0, vk1);
  }
  for (int i = 0; i < kGroups; ++i) {
    unsigned m[8];
    Keep512(c0[i], t48, &m[0], &m[1]);
    Keep512(c1[i], t48, &m[2], &m[3]);
    Keep512(c2[i], t48, &m[4], &m[5]);
    Keep512(c3[i], t48, &m[6], &m[7]);
    words[i] = Interleave(m);
  }
}

__attribute__((target("avx512f"))) void KeepWordsAvx512(const DropoutKey& key, uint32_t t, uint64_t first_group,
                                                        int64_t groups, uint64_t* words) {
  const __m512i t48 = _mm512_set1_epi64(static_cast<int64_t>(static_cast<uint64_t>(t) << 48));
  int64_t j = 0;
  for (; j + 4 <= groups; j += 4) KeepGroups512<4>(key, t48, first_group + static_cast<uint64_t>(j), words + j);
  for (; j < groups; ++j) KeepGroups512<1>(key, t48, first_group + static_cast<uint64_t>(j), words + j);
}

#pragma GCC diagnostic pop

__attribute__((target("avx2"), always_inline)) inline void Round256(__m256i& c0, __m256i& c1, __m256i& c2, __m256i& c3,
                                                                    __m256i k0, __m256i k1) {
  const __m256i p0 = _mm256_mul_epu32(c0, _mm256_set1_epi64x(kM0));
  const __m256i p1 = _mm256_mul_epu32(c2, _mm256_set1_epi64x(kM1));
  c0 = _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p1, 32), c1), k0);
  c2 = _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p0, 32), c3), k1);
  c1 = p1;
  c3 = p0;
}

// The 4-bit keep mask of one half of word `c` of 4 blocks (`shift` 48:
// the low half, 32: the high), against t48 = threshold << 48 with its sign
// bit flipped: AVX2 compares signed, so both sides are flipped and kept =
// not (t > half).
__attribute__((target("avx2"), always_inline)) inline unsigned Keep256(__m256i c, int shift, __m256i t48_flipped) {
  const __m256i w = _mm256_xor_si256(_mm256_sll_epi64(c, _mm_cvtsi32_si128(shift)), _mm256_set1_epi64x(INT64_MIN));
  return ~static_cast<unsigned>(_mm256_movemask_pd(_mm256_castsi256_pd(_mm256_cmpgt_epi64(t48_flipped, w)))) & 0xFu;
}

__attribute__((target("avx2"))) void KeepWordsAvx2(const DropoutKey& key, uint32_t t, uint64_t first_group,
                                                   int64_t groups, uint64_t* words) {
  const __m256i iota = _mm256_set_epi64x(3, 2, 1, 0);
  const __m256i op = _mm256_set1_epi64x(key.op_id), step = _mm256_set1_epi64x(static_cast<uint32_t>(key.step));
  const __m256i t48 = _mm256_xor_si256(_mm256_set1_epi64x(static_cast<int64_t>(static_cast<uint64_t>(t) << 48)),
                                       _mm256_set1_epi64x(INT64_MIN));
  for (int64_t j = 0; j < groups; ++j) {
    // Blocks 0..3 and 4..7 of the group, a set of 4 counters each.
    const uint64_t first_block = (first_group + static_cast<uint64_t>(j)) * kBlocksPerGroup;
    __m256i a[4], b[4];
    a[0] = _mm256_add_epi64(_mm256_set1_epi64x(static_cast<int64_t>(first_block)), iota);
    b[0] = _mm256_add_epi64(a[0], _mm256_set1_epi64x(4));
    a[1] = _mm256_srli_epi64(a[0], 32);
    b[1] = _mm256_srli_epi64(b[0], 32);
    a[2] = b[2] = op;
    a[3] = b[3] = step;
    uint32_t k0 = KeyLow(key), k1 = KeyHigh(key);
    for (int r = 0; r < 10; ++r) {
      if (r > 0) {
        k0 += kW0;
        k1 += kW1;
      }
      const __m256i vk0 = _mm256_set1_epi64x(k0), vk1 = _mm256_set1_epi64x(k1);
      Round256(a[0], a[1], a[2], a[3], vk0, vk1);
      Round256(b[0], b[1], b[2], b[3], vk0, vk1);
    }
    unsigned m[8];
    for (int w = 0; w < 4; ++w) {
      m[2 * w] = Keep256(a[w], 48, t48) | Keep256(b[w], 48, t48) << 4;
      m[2 * w + 1] = Keep256(a[w], 32, t48) | Keep256(b[w], 32, t48) << 4;
    }
    words[j] = Interleave(m);
  }
}

#endif  // SINKRT_DROPOUT_X86

}  // namespace

bool DropoutKeepIsaSupported(DropoutKeepIsa isa) {
#ifdef SINKRT_DROPOUT_X86
  switch (isa) {
    case DropoutKeepIsa::kScalar:
      return true;
    case DropoutKeepIsa::kAvx2:
      return __builtin_cpu_supports("avx2");
    case DropoutKeepIsa::kAvx512:
      return __builtin_cpu_supports("avx512f");
  }
  return false;
#else
  return isa == DropoutKeepIsa::kScalar;
#endif
}

DropoutKeepIsa DropoutKeepIsaBest() {
  if (DropoutKeepIsaSupported(DropoutKeepIsa::kAvx512)) return DropoutKeepIsa::kAvx512;
  if (DropoutKeepIsaSupported(DropoutKeepIsa::kAvx2)) return DropoutKeepIsa::kAvx2;
  return DropoutKeepIsa::kScalar;
}

void DropoutKeepWords(DropoutKeepIsa isa, const DropoutKey& key, uint32_t threshold, uint64_t first_group,
                      int64_t groups, uint64_t* words) {
#ifdef SINKRT_DROPOUT_X86
  if (isa == DropoutKeepIsa::kAvx512) return KeepWordsAvx512(key, threshold, first_group, groups, words);
  if (isa == DropoutKeepIsa::kAvx2) return KeepWordsAvx2(key, threshold, first_group, groups, words);
#endif
  (void)isa;
  KeepWordsScalar(key, threshold, first_group, groups, words);
}

}  // namespace sinkrt::device
