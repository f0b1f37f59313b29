// Philox4x32-10 against the known-answer vectors of Salmon et al. (SC'11;
// Random123's kat_vectors), and the dropout mask drawn from it
// (device/src/random/dropout_mask.h): its keep fraction for a fixed seed.
#include "device/src/random/philox.h"

#include <gtest/gtest.h>

#include <cmath>

#include "device/src/random/dropout_mask.h"

namespace sinkrt::device {
namespace {

struct Kat {
  PhiloxCounter ctr;
  PhiloxKey key;
  PhiloxCounter want;
};

// "philox4x32 10 CTR[4] KEY[2] EXPECTED[4]".
constexpr Kat kKats[] = {
    {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
    {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
     {0xffffffff, 0xffffffff},
     {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
    {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
     {0xa4093822, 0x299f31d0},
     {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
};

TEST(Philox, KnownAnswerVectors) {
  for (const Kat& k : kKats) EXPECT_EQ(Philox4x32(k.ctr, k.key), k.want);
}

// Computed at compile time too: the generator is a pure function.
static_assert(Philox4x32({0, 0, 0, 0}, {0, 0})[0] == 0x6627e8d5u);

TEST(DropoutMask, KeepFractionWithinBoundForAFixedSeed) {
  // 2^20 elements at p = 0.1: the kept count is Binomial(n, 0.9), standard
  // deviation sqrt(n·0.1·0.9) ≈ 307; the bound is 5 of them. Deterministic:
  // the seed, step and op are fixed, so this count never changes.
  constexpr uint64_t n = uint64_t{1} << 20;
  for (float p : {0.1f, 0.5f, 0.9f}) {
    const DropoutKey key{.seed = 42, .step = 3, .op_id = 0x1234};
    const uint32_t t = DropoutThreshold(p);
    uint64_t kept = 0;
    for (uint64_t g = 0; g < n; ++g) kept += DropoutKeeps(key, t, g);
    const double mean = static_cast<double>(n) * (1.0 - p);
    const double sd = std::sqrt(static_cast<double>(n) * p * (1.0 - p));
    EXPECT_LT(std::abs(static_cast<double>(kept) - mean), 5 * sd) << "p " << p << ": kept " << kept;
  }
}

TEST(DropoutMask, ThresholdIsPTimesTwoToThe16) {
  EXPECT_EQ(DropoutThreshold(0.0f), 0u);  // p = 0 keeps every element: every byte is at least 0
  EXPECT_EQ(DropoutThreshold(0.5f), 0x8000u);
  EXPECT_EQ(DropoutThreshold(0.25f), 0x4000u);
  EXPECT_EQ(DropoutThreshold(0.1f), 6553u);  // p quantised down to 6553 / 65536 = 0.099991
  EXPECT_EQ(DropoutThreshold(0.99999f), 65535u);
}

// Element g reads byte g mod 4 of word (g / 4) mod 4 of block g / 16,
// pinned on block 0's known words: a high byte just below that byte keeps
// it, just above drops it, and equal to it hands the element to its
// refinement byte (the same byte of the block with bit 31 of the counter's
// second word set) against the low byte.
TEST(DropoutMask, ElementsReadBytesInOrderAndTiesAreRefined) {
  const DropoutKey key{.seed = 5, .step = 2, .op_id = 3};
  const PhiloxCounter c = DropoutBlock(key, 0);
  const PhiloxCounter twin = Philox4x32({0, 0x80000000u, 3, 2}, {5, 0});
  EXPECT_EQ(DropoutBlock(key, 0, /*refine=*/true), twin);
  for (uint64_t g = 0; g < 16; ++g) {
    const uint32_t byte = (c[g / 4] >> (8 * (g % 4))) & 0xFF, refine = (twin[g / 4] >> (8 * (g % 4))) & 0xFF;
    if (byte > 0) {
      EXPECT_TRUE(DropoutKeeps(key, (byte - 1) << 8 | 0xFF, g)) << g;
    }
    if (byte < 0xFF) {
      EXPECT_FALSE(DropoutKeeps(key, (byte + 1) << 8, g)) << g;
    }
    EXPECT_TRUE(DropoutKeeps(key, byte << 8 | refine, g)) << g;  // a tie, the refinement byte at the low byte
    if (refine < 0xFF) {
      EXPECT_FALSE(DropoutKeeps(key, byte << 8 | (refine + 1), g)) << g;
    }
  }
  EXPECT_EQ(DropoutBlock(key, 1), Philox4x32({1, 0, 3, 2}, {5, 0}));  // elements 16..31: block 1
}

// P(drop) is t / 65536 exactly, ties included: over 2^22 elements at a p
// whose low byte is not 0, the ties (one in 256) are kept at (256 − t_lo)
// / 256, and the whole at 1 − t / 65536, each within 5 standard deviations.
TEST(DropoutMask, TiesAreKeptAtTheLowBytesRate) {
  const DropoutKey key{.seed = 11, .step = 4, .op_id = 9};
  const uint32_t t = DropoutThreshold(0.1f);  // 6553 = 0x1999: high 0x19, low 0x99
  constexpr uint64_t n = uint64_t{1} << 22;
  uint64_t ties = 0, ties_kept = 0, kept = 0;
  for (uint64_t g = 0; g < n; ++g) {
    const bool keep = DropoutKeeps(key, t, g);
    kept += keep;
    if (DropoutByte(DropoutBlock(key, g >> 4), g) == (t >> 8)) {
      ++ties;
      ties_kept += keep;
    }
  }
  auto within = [](double count, double trials, double p) {
    return std::abs(count - trials * p) < 5 * std::sqrt(trials * p * (1 - p));
  };
  EXPECT_TRUE(within(static_cast<double>(ties), n, 1.0 / 256)) << ties;
  EXPECT_TRUE(within(static_cast<double>(ties_kept), static_cast<double>(ties), (256.0 - 0x99) / 256)) << ties_kept;
  EXPECT_TRUE(within(static_cast<double>(kept), n, 1.0 - t / 65536.0)) << kept;
}

TEST(DropoutMask, StepSeedAndOpEachChangeTheMask) {
  const uint32_t t = DropoutThreshold(0.5f);
  auto mask = [&](DropoutKey k) {
    std::vector<bool> m;
    for (uint64_t g = 0; g < 256; ++g) m.push_back(DropoutKeeps(k, t, g));
    return m;
  };
  const DropoutKey base{.seed = 1, .step = 0, .op_id = 7};
  EXPECT_EQ(mask(base), mask(base));
  EXPECT_NE(mask(base), mask({.seed = 2, .step = 0, .op_id = 7}));
  EXPECT_NE(mask(base), mask({.seed = 1, .step = 1, .op_id = 7}));
  EXPECT_NE(mask(base), mask({.seed = 1, .step = uint64_t{1} << 32, .op_id = 7}));  // the step's high half
  EXPECT_NE(mask(base), mask({.seed = 1, .step = 0, .op_id = 8}));
}

}  // namespace
}  // namespace sinkrt::device
