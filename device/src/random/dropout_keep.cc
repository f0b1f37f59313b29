// Dropout's keep bits in bulk (dropout_keep.h).
//
// The vector paths hold one Philox counter per 64-bit lane: the round's
// 32x32 -> 64-bit multiplies are then one vpmuludq each (it reads the low
// 32 bits of every lane, so the high halves the round leaves there are
// never looked at), the high half one shift. A word is the low 32 bits of
// its lane; two words are packed into a lane and their bytes compared with
// the threshold's high byte all at once.
#include "device/src/random/dropout_keep.h"

#include <algorithm>

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

constexpr uint64_t kBlocksPerGroup = kDropoutGroupElements / kDropoutElementsPerBlock;  // 8

uint32_t KeyLow(const DropoutKey& key) { return static_cast<uint32_t>(key.seed); }
uint32_t KeyHigh(const DropoutKey& key) {
  return static_cast<uint32_t>(key.seed >> 32) ^ static_cast<uint32_t>(key.step >> 32);
}

// Words w[0], w[1] of a group whose first element is `base`: `gt` the
// elements whose byte is above the threshold's high byte, `eq` those equal
// to it, each as two 64-bit words in element order. The equal ones are
// refined (dropout_mask.h); with a low byte of 0 every one is kept.
inline void Settle(const DropoutKey& key, uint32_t t, uint64_t base, const uint64_t (&gt)[2], const uint64_t (&eq)[2],
                   uint64_t* w) {
  for (int h = 0; h < 2; ++h) {
    uint64_t keep = gt[h], rare = eq[h];
    if ((t & 0xFFu) == 0) {
      keep |= rare;
    } else {
      for (; rare != 0; rare &= rare - 1) {
        const int e = __builtin_ctzll(rare);
        if (DropoutRefineKeeps(key, t, base + 64 * static_cast<uint64_t>(h) + static_cast<uint64_t>(e)))
          keep |= uint64_t{1} << e;
      }
    }
    w[h] = keep;
  }
}

void KeepWordsScalar(const DropoutKey& key, uint32_t t, uint64_t first_group, int64_t groups, uint64_t* words) {
  const uint32_t hi = t >> 8;
  for (int64_t j = 0; j < groups; ++j) {
    const uint64_t base = (first_group + static_cast<uint64_t>(j)) * kDropoutGroupElements;
    uint64_t gt[2] = {0, 0}, eq[2] = {0, 0};
    for (uint64_t b = 0; b < kBlocksPerGroup; ++b) {
      const PhiloxCounter c = DropoutBlock(key, base / kDropoutElementsPerBlock + b);
      for (uint64_t e = 0; e < kDropoutElementsPerBlock; ++e) {
        const uint64_t at = b * kDropoutElementsPerBlock + e;  // in the group
        const uint32_t byte = DropoutByte(c, e);
        if (byte > hi) gt[at >> 6] |= uint64_t{1} << (at & 63);
        if (byte == hi) eq[at >> 6] |= uint64_t{1} << (at & 63);
      }
    }
    Settle(key, t, base, gt, eq, words + 2 * j);
  }
}

#ifdef SINKRT_DROPOUT_X86

// Byte i of `a` then byte i of `b`, for i in 0..7: two 64-bit masks over
// the bytes of blocks' words 0-1 and 2-3 (byte 8i + k: block i's element
// k, and 8 + k) as the 128 bits of the group's 16 elements per block.
inline void InterleaveBytes(uint64_t a, uint64_t b, uint64_t (&out)[2]) {
  const __m128i v =
      _mm_unpacklo_epi8(_mm_cvtsi64_si128(static_cast<int64_t>(a)), _mm_cvtsi64_si128(static_cast<int64_t>(b)));
  out[0] = static_cast<uint64_t>(_mm_cvtsi128_si64(v));
  out[1] = static_cast<uint64_t>(_mm_cvtsi128_si64(_mm_unpackhi_epi64(v, v)));
}

// GCC 12's AVX-512 shift and multiply intrinsics pass _mm512_undefined as
// the unused merge source, which -Wmaybe-uninitialized reports at -O2 (a
// known false positive: the mask is all ones, nothing is merged; when the
// input comes from memory it says "is used uninitialized").
#pragma GCC diagnostic push
#if !defined(__clang__)  // Clang has no -Wmaybe-uninitialized (and no such report)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"

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

// Lane i: word a of block i in its low 32 bits, word b in its high ones.
__attribute__((target("avx512f"), always_inline)) inline __m512i Pack512(__m512i a, __m512i b) {
  return _mm512_mask_blend_epi32(0xAAAA, a, _mm512_slli_epi64(b, 32));
}

// The words of groups g0 .. g0 + kGroups - 1, a set of 8 counters each,
// interleaved so that the multiplies' latency overlaps (one round's chain
// is about 7 cycles; 4 sets keep the multiplier busy): `words` the
// elements whose byte is above the threshold's high byte, `ties` those
// equal to it (refined by SettleTies512).
template <int kGroups>
__attribute__((target("avx512f,avx512bw"), always_inline)) inline void KeepGroups512(const DropoutKey& key, uint32_t t,
                                                                                     uint64_t g0, uint64_t* words,
                                                                                     uint64_t* ties) {
  const __m512i iota = _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0);
  const __m512i hi = _mm512_set1_epi8(static_cast<char>(t >> 8));
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
    const __m512i w01 = Pack512(c0[i], c1[i]), w23 = Pack512(c2[i], c3[i]);
    uint64_t gt[2], eq[2];
    InterleaveBytes(_mm512_cmpgt_epu8_mask(w01, hi), _mm512_cmpgt_epu8_mask(w23, hi), gt);
    InterleaveBytes(_mm512_cmpeq_epi8_mask(w01, hi), _mm512_cmpeq_epi8_mask(w23, hi), eq);
    for (int h = 0; h < 2; ++h) {
      words[2 * i + h] = gt[h];
      ties[2 * i + h] = eq[h];
    }
  }
}

// The refinement bytes of elements gs[0..n), n <= 8, against t's low byte:
// their twin blocks' 10 rounds in one register, kept[i] set for a keep.
__attribute__((target("avx512f"))) void RefineLanes512(const DropoutKey& key, uint32_t t, const uint64_t* gs, int n,
                                                       bool* kept) {
  alignas(64) uint64_t block[8] = {};
  for (int i = 0; i < n; ++i) block[i] = gs[i] >> 4;
  __m512i c0 = _mm512_load_si512(block);
  __m512i c1 = _mm512_or_si512(_mm512_srli_epi64(c0, 32), _mm512_set1_epi64(kDropoutRefineBit));
  __m512i c2 = _mm512_set1_epi64(key.op_id), c3 = _mm512_set1_epi64(static_cast<uint32_t>(key.step));
  uint32_t k0 = KeyLow(key), k1 = KeyHigh(key);
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      k0 += kW0;
      k1 += kW1;
    }
    Round512(c0, c1, c2, c3, _mm512_set1_epi64(k0), _mm512_set1_epi64(k1));
  }
  alignas(64) uint64_t w[4][8];
  _mm512_store_si512(w[0], c0);
  _mm512_store_si512(w[1], c1);
  _mm512_store_si512(w[2], c2);
  _mm512_store_si512(w[3], c3);
  for (int i = 0; i < n; ++i) {
    const uint64_t g = gs[i];
    kept[i] = ((w[(g >> 2) & 3][i] >> (8 * (g & 3))) & 0xFFu) >= (t & 0xFFu);
  }
}

// Adds the ties (`ties`, in word order as `words`) that their refinement
// bytes keep into `words`, 8 at a time; with a low byte of 0 all of them.
__attribute__((target("avx512f"))) void SettleTies512(const DropoutKey& key, uint32_t t, uint64_t first_element,
                                                      int64_t n_words, const uint64_t* ties, uint64_t* words) {
  if ((t & 0xFFu) == 0) {
    for (int64_t w = 0; w < n_words; ++w) words[w] |= ties[w];
    return;
  }
  uint64_t gs[8];
  bool kept[8];
  int n = 0;
  auto flush = [&] {
    RefineLanes512(key, t, gs, n, kept);
    for (int i = 0; i < n; ++i)
      if (kept[i]) words[(gs[i] - first_element) >> 6] |= uint64_t{1} << ((gs[i] - first_element) & 63);
    n = 0;
  };
  for (int64_t w = 0; w < n_words; ++w)
    for (uint64_t rare = ties[w]; rare != 0; rare &= rare - 1) {
      gs[n++] = first_element + 64 * static_cast<uint64_t>(w) + static_cast<uint64_t>(__builtin_ctzll(rare));
      if (n == 8) flush();
    }
  if (n > 0) flush();
}

__attribute__((target("avx512f,avx512bw"))) void KeepWordsAvx512(const DropoutKey& key, uint32_t t,
                                                                 uint64_t first_group, int64_t groups,
                                                                 uint64_t* words) {
  constexpr int64_t kBatch = 16;  // groups whose ties are refined together
  uint64_t ties[2 * kBatch];
  for (int64_t j0 = 0; j0 < groups; j0 += kBatch) {
    const int64_t end = std::min(groups, j0 + kBatch);
    int64_t j = j0;
    for (; j + 4 <= end; j += 4)
      KeepGroups512<4>(key, t, first_group + static_cast<uint64_t>(j), words + 2 * j, ties + 2 * (j - j0));
    for (; j < end; ++j)
      KeepGroups512<1>(key, t, first_group + static_cast<uint64_t>(j), words + 2 * j, ties + 2 * (j - j0));
    SettleTies512(key, t, (first_group + static_cast<uint64_t>(j0)) * kDropoutGroupElements, 2 * (end - j0), ties,
                  words + 2 * j0);
  }
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

// The 32-bit masks of a set of 4 blocks' words a, b (lane i: a's word in
// the low half, b's in the high): bytes above `hi` and equal to it. AVX2
// compares bytes signed, so both sides have their top bit flipped.
__attribute__((target("avx2"), always_inline)) inline void Bytes256(__m256i a, __m256i b, __m256i hi_flipped,
                                                                    __m256i hi, uint32_t* gt, uint32_t* eq) {
  const __m256i w = _mm256_blend_epi32(a, _mm256_slli_epi64(b, 32), 0xAA);
  const __m256i flipped = _mm256_xor_si256(w, _mm256_set1_epi8(static_cast<char>(0x80)));
  *gt = static_cast<uint32_t>(_mm256_movemask_epi8(_mm256_cmpgt_epi8(flipped, hi_flipped)));
  *eq = static_cast<uint32_t>(_mm256_movemask_epi8(_mm256_cmpeq_epi8(w, hi)));
}

__attribute__((target("avx2"))) void KeepWordsAvx2(const DropoutKey& key, uint32_t t, uint64_t first_group,
                                                   int64_t groups, uint64_t* words) {
  const __m256i iota = _mm256_set_epi64x(3, 2, 1, 0);
  const __m256i op = _mm256_set1_epi64x(key.op_id), step = _mm256_set1_epi64x(static_cast<uint32_t>(key.step));
  const __m256i hi = _mm256_set1_epi8(static_cast<char>(t >> 8));
  const __m256i hi_flipped = _mm256_xor_si256(hi, _mm256_set1_epi8(static_cast<char>(0x80)));
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
    uint32_t gt01a, eq01a, gt01b, eq01b, gt23a, eq23a, gt23b, eq23b;
    Bytes256(a[0], a[1], hi_flipped, hi, &gt01a, &eq01a);
    Bytes256(b[0], b[1], hi_flipped, hi, &gt01b, &eq01b);
    Bytes256(a[2], a[3], hi_flipped, hi, &gt23a, &eq23a);
    Bytes256(b[2], b[3], hi_flipped, hi, &gt23b, &eq23b);
    auto join = [](uint32_t lo, uint32_t high) { return uint64_t{lo} | uint64_t{high} << 32; };
    uint64_t gt[2], eq[2];
    InterleaveBytes(join(gt01a, gt01b), join(gt23a, gt23b), gt);
    InterleaveBytes(join(eq01a, eq01b), join(eq23a, eq23b), eq);
    Settle(key, t, (first_group + static_cast<uint64_t>(j)) * kDropoutGroupElements, gt, eq, words + 2 * j);
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
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
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
