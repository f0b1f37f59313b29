// Dropout's bulk keep bits (device/src/random/dropout_keep.h): every path
// this CPU runs (scalar, AVX2, AVX-512) against the mask's definition
// (dropout_mask.h's DropoutKeeps), bit for bit, over counters whose high
// halves are set (blocks past 2^32, steps past 2^32) and every threshold
// edge. A path the CPU lacks is reported skipped, not passed.
#include "device/src/random/dropout_keep.h"

#include <gtest/gtest.h>

#include <vector>

namespace sinkrt::device {
namespace {

// words[j] bit e from the definition, element by element.
std::vector<uint64_t> Definition(const DropoutKey& key, uint32_t t, uint64_t first_group, int64_t groups) {
  std::vector<uint64_t> words(static_cast<size_t>(2 * groups), 0);
  for (int64_t j = 0; j < 2 * groups; ++j)
    for (uint64_t e = 0; e < 64; ++e)
      if (DropoutKeeps(key, t, first_group * kDropoutGroupElements + static_cast<uint64_t>(j) * 64 + e))
        words[static_cast<size_t>(j)] |= uint64_t{1} << e;
  return words;
}

class DropoutKeepPaths : public ::testing::TestWithParam<DropoutKeepIsa> {};

TEST_P(DropoutKeepPaths, EqualTheDefinitionBitForBit) {
  const DropoutKeepIsa isa = GetParam();
  if (!DropoutKeepIsaSupported(isa)) GTEST_SKIP() << "this CPU lacks the path";
  const DropoutKey keys[] = {{.seed = 42, .step = 3, .op_id = 0x1234},
                             {.seed = 0xFFFFFFFF00000001ull, .step = (uint64_t{1} << 32) + 5, .op_id = 0xFFFFFFFFu}};
  // Group counts 1..9 exercise the paths' runs of 4 and their remainders;
  // the last start crosses block 2^32 (the counter's second word).
  const uint64_t starts[] = {0, 7, ((uint64_t{1} << 32) * kDropoutElementsPerBlock / kDropoutGroupElements) - 2};
  for (const DropoutKey& key : keys)
    for (float p : {0.0f, 0.1f, 0.5f, 0.9f, 0.99998f, 1.0f / 256})
      for (uint64_t first : starts)
        for (int64_t groups = 1; groups <= 9; ++groups) {
          const uint32_t t = DropoutThreshold(p);
          std::vector<uint64_t> got(static_cast<size_t>(2 * groups), ~uint64_t{0});
          DropoutKeepWords(isa, key, t, first, groups, got.data());
          EXPECT_EQ(got, Definition(key, t, first, groups))
              << "p " << p << " first group " << first << " groups " << groups;
        }
}

// Many ties (one element in 256 has its byte equal to the threshold's high
// byte): 40 groups hold about 20, refined several at a time across the
// paths' batches of groups.
TEST_P(DropoutKeepPaths, ManyTiesAreRefinedAsTheDefinitionSays) {
  const DropoutKeepIsa isa = GetParam();
  if (!DropoutKeepIsaSupported(isa)) GTEST_SKIP() << "this CPU lacks the path";
  const DropoutKey key{.seed = 77, .step = 6, .op_id = 0xABCD};
  for (float p : {0.1f, 0.3f}) {
    const uint32_t t = DropoutThreshold(p);
    std::vector<uint64_t> got(80);
    DropoutKeepWords(isa, key, t, 3, 40, got.data());
    EXPECT_EQ(got, Definition(key, t, 3, 40)) << "p " << p;
  }
}

TEST_P(DropoutKeepPaths, ThresholdEdgesKeepAllOrNearlyNone) {
  const DropoutKeepIsa isa = GetParam();
  if (!DropoutKeepIsaSupported(isa)) GTEST_SKIP() << "this CPU lacks the path";
  const DropoutKey key{.seed = 9, .step = 1, .op_id = 2};
  std::vector<uint64_t> words(64);
  DropoutKeepWords(isa, key, 0, 0, 32, words.data());
  for (uint64_t w : words) EXPECT_EQ(w, ~uint64_t{0});  // threshold 0 keeps every element
  const uint32_t top = DropoutThreshold(0.9999f);
  DropoutKeepWords(isa, key, top, 0, 32, words.data());
  EXPECT_EQ(words, Definition(key, top, 0, 32));
}

INSTANTIATE_TEST_SUITE_P(Isa, DropoutKeepPaths,
                         ::testing::Values(DropoutKeepIsa::kScalar, DropoutKeepIsa::kAvx2, DropoutKeepIsa::kAvx512),
                         [](const ::testing::TestParamInfo<DropoutKeepIsa>& i) {
                           return i.param == DropoutKeepIsa::kScalar ? std::string("Scalar")
                                  : i.param == DropoutKeepIsa::kAvx2 ? std::string("Avx2")
                                                                     : std::string("Avx512");
                         });

TEST(DropoutKeepIsa, BestIsSupported) { EXPECT_TRUE(DropoutKeepIsaSupported(DropoutKeepIsaBest())); }

}  // namespace
}  // namespace sinkrt::device
