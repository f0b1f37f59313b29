// AllReduce's choice between recursive doubling and the ring
// (comm/algorithms/allreduce_choice.h): the rule itself, sizes on both
// sides of each switch over shm and TCP, and what must hold whichever
// schedule runs: identical bytes on every rank, the ring's (ReduceScatter's)
// order when small_allreduce_bytes is 0, and at two ranks a fused buffer
// equal bit for bit to its pieces reduced one by one.
//
// Which schedule ran is read from the result, not from timing: Max of +0
// (rank 0) and -0 (rank 1) returns its second operand, and doubling
// combines lower position first everywhere (-0), while the ring at two
// ranks combines chunk 0 as (rank 0, rank 1) and chunk 1 as (rank 1,
// rank 0) (+0).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include "device/src/comm/algorithms/allreduce_choice.h"
#include "device/src/comm/communicator.h"
#include "support/comm_cluster.h"

namespace sinkrt::device {
namespace {

using testing::Cluster;
using testing::OnEachRank;

constexpr AllReduceSchedule kDoubling = AllReduceSchedule::kDoubling;
constexpr AllReduceSchedule kRing = AllReduceSchedule::kRing;

// Small segments and thresholds so that both schedules and many segments
// run within a test's time; the switches sit where the defaults' do
// relative to each other (a pair switches later than a larger group).
CommOptions Options(bool shm) {
  CommOptions o;
  o.peer_timeout = std::chrono::milliseconds(10000);
  o.segment_bytes = 4096;
  o.segments_in_flight = 4;
  o.small_allreduce_bytes = 16 << 10;
  o.pair_allreduce_bytes = 64 << 10;
  o.use_shared_memory = shm;
  return o;
}

std::span<uint8_t> Bytes(std::vector<float>& v) {
  return std::span(reinterpret_cast<uint8_t*>(v.data()), v.size() * sizeof(float));
}

// Values over many magnitudes: a different summation order shows in the bits.
std::vector<float> OrderSensitive(size_t count, uint32_t rank, uint32_t seed) {
  std::mt19937 rng(seed * 7919u + rank);
  std::uniform_real_distribution<float> mant(-1, 1);
  std::uniform_int_distribution<int> expo(-20, 20);
  std::vector<float> v(count);
  for (auto& x : v) x = std::ldexp(mant(rng), expo(rng));
  return v;
}

// ---- the rule -----------------------------------------------------------------

TEST(AllReduceChoice, ByDefaultAPairAlwaysDoublesAndLargerGroupsSwitch) {
  const CommOptions o;
  for (uint32_t n : {3u, 4u, 8u}) {
    EXPECT_EQ(ChooseAllReduce(o, n, o.small_allreduce_bytes - 4, o.small_allreduce_bytes / 4 - 1), kDoubling);
    EXPECT_EQ(ChooseAllReduce(o, n, o.small_allreduce_bytes, o.small_allreduce_bytes / 4), kRing);
  }
  for (size_t bytes : {o.small_allreduce_bytes, size_t{4} << 20, size_t{256} << 20, size_t{1} << 40})
    EXPECT_EQ(ChooseAllReduce(o, 2, bytes, bytes / 4), kDoubling) << bytes;
}

TEST(AllReduceChoice, APairSwitchesAtItsOwnThreshold) {
  CommOptions o;
  o.pair_allreduce_bytes = 4 << 20;
  EXPECT_EQ(ChooseAllReduce(o, 2, o.small_allreduce_bytes, o.small_allreduce_bytes / 4), kDoubling);
  EXPECT_EQ(ChooseAllReduce(o, 2, (4 << 20) - 4, (1 << 20) - 1), kDoubling);
  EXPECT_EQ(ChooseAllReduce(o, 2, 4 << 20, 1 << 20), kRing);
  EXPECT_EQ(ChooseAllReduce(o, 3, 4 << 20, 1 << 20), kRing);
}

TEST(AllReduceChoice, ZeroForcesTheRingForEveryGroupAndTinyBuffersDouble) {
  CommOptions o;
  o.small_allreduce_bytes = 0;
  for (uint32_t n : {2u, 3u, 4u}) {
    EXPECT_EQ(ChooseAllReduce(o, n, 4 * n, n), kRing) << n;
    EXPECT_EQ(ChooseAllReduce(o, n, size_t{1} << 30, size_t{1} << 28), kRing) << n;
    // The ring needs an element per member.
    EXPECT_EQ(ChooseAllReduce(o, n, 4 * (n - 1), n - 1), kDoubling) << n;
  }
}

TEST(AllReduceChoice, APairTakesTheLargerThreshold) {
  CommOptions o;
  o.small_allreduce_bytes = 1 << 20;
  o.pair_allreduce_bytes = 64 << 10;  // below small: small governs
  EXPECT_EQ(ChooseAllReduce(o, 2, (1 << 20) - 4, (1 << 18) - 1), kDoubling);
  EXPECT_EQ(ChooseAllReduce(o, 2, 1 << 20, 1 << 18), kRing);
  o.small_allreduce_bytes = size_t{1} << 40;  // "always doubling" stays so
  EXPECT_EQ(ChooseAllReduce(o, 2, size_t{1} << 30, size_t{1} << 28), kDoubling);
  EXPECT_EQ(ChooseAllReduce(o, 4, size_t{1} << 30, size_t{1} << 28), kDoubling);
}

// ---- over the transports -----------------------------------------------------

class AllReduceChoiceOver : public ::testing::TestWithParam<bool> {};

// Max(+0 on rank 0, -0 on rank 1) over `count` floats at two ranks: true
// when every element is -0 (doubling), false when chunk 1 is +0 (the ring).
bool RanAsDoubling(Cluster& c, size_t count) {
  std::vector<std::vector<float>> data{std::vector<float>(count, +0.0f), std::vector<float>(count, -0.0f)};
  std::vector<Status> st(2);
  OnEachRank(2,
             [&](uint32_t r) { st[r] = c[r].AllReduce(Bytes(data[r]), DType::F32, ReduceOp::Max, Group::World(2)); });
  EXPECT_TRUE(st[0].ok() && st[1].ok()) << st[0].ToString() << " / " << st[1].ToString();
  EXPECT_EQ(0, std::memcmp(data[0].data(), data[1].data(), count * sizeof(float)));
  return std::signbit(data[0].back());
}

TEST_P(AllReduceChoiceOver, APairDoublesUpToItsThresholdAndRingsFromIt) {
  const CommOptions o = Options(GetParam());
  Cluster c(2, o);
  ASSERT_TRUE(c.ok()) << c.create_status(0).ToString();
  const size_t pair = o.pair_allreduce_bytes / sizeof(float);
  const size_t small = o.small_allreduce_bytes / sizeof(float);
  EXPECT_TRUE(RanAsDoubling(c, small));  // at the larger groups' switch: still doubling
  EXPECT_TRUE(RanAsDoubling(c, pair - 1));
  EXPECT_FALSE(RanAsDoubling(c, pair));
  EXPECT_FALSE(RanAsDoubling(c, pair + 1));
}

TEST_P(AllReduceChoiceOver, ZeroKeepsThePairOnTheRing) {
  CommOptions o = Options(GetParam());
  o.small_allreduce_bytes = 0;
  Cluster c(2, o);
  ASSERT_TRUE(c.ok()) << c.create_status(0).ToString();
  EXPECT_FALSE(RanAsDoubling(c, 2));
  EXPECT_FALSE(RanAsDoubling(c, 1001));
}

// Odd sizes on both sides of both switches, 2, 3 and 4 ranks: the same
// bytes on every rank, and the float sum within rounding of the exact one.
TEST_P(AllReduceChoiceOver, SizesAroundTheSwitchesAreIdenticalOnEveryRank) {
  const CommOptions o = Options(GetParam());
  for (uint32_t n : {2u, 3u, 4u}) {
    Cluster c(n, o);
    ASSERT_TRUE(c.ok()) << c.create_status(0).ToString();
    for (size_t bytes : {o.small_allreduce_bytes, o.pair_allreduce_bytes}) {
      for (size_t count : {bytes / 4 - 1, bytes / 4, bytes / 4 + 1, bytes / 4 + 1001}) {
        SCOPED_TRACE(std::to_string(n) + " ranks, " + std::to_string(count) + " floats");
        std::vector<std::vector<float>> data(n);
        for (uint32_t r = 0; r < n; ++r) data[r] = OrderSensitive(count, r, static_cast<uint32_t>(count));
        // Each of the n-1 float additions rounds by at most 2^-24 of the
        // magnitudes added so far, at most the sum of |x|.
        std::vector<double> exact(count, 0.0), magnitude(count, 0.0);
        for (uint32_t r = 0; r < n; ++r)
          for (size_t i = 0; i < count; ++i) {
            exact[i] += data[r][i];
            magnitude[i] += std::fabs(data[r][i]);
          }
        std::vector<Status> st(n);
        OnEachRank(
            n, [&](uint32_t r) { st[r] = c[r].AllReduce(Bytes(data[r]), DType::F32, ReduceOp::Sum, Group::World(n)); });
        for (uint32_t r = 0; r < n; ++r) ASSERT_TRUE(st[r].ok()) << st[r].ToString();
        for (uint32_t r = 1; r < n; ++r)
          ASSERT_EQ(0, std::memcmp(data[0].data(), data[r].data(), count * sizeof(float))) << "rank " << r;
        for (size_t i = 0; i < count; ++i)
          ASSERT_NEAR(data[0][i], exact[i], n * 0x1p-24 * magnitude[i]) << "element " << i;
      }
    }
  }
}

// At two ranks a float sum has one rounding whichever member comes first,
// so a fused buffer reduces to the bytes of its pieces reduced one by one,
// across both switches (pieces below, whole above).
TEST_P(AllReduceChoiceOver, AtTwoRanksFusedEqualsUnfusedBitwise) {
  const CommOptions o = Options(GetParam());
  Cluster c(2, o);
  ASSERT_TRUE(c.ok()) << c.create_status(0).ToString();
  // Pieces of a layer stack, the whole over pair_allreduce_bytes.
  const std::vector<size_t> pieces{10007, 13, 4099, 1, 7001};
  size_t total = 0;
  for (size_t p : pieces) total += p;
  ASSERT_GE(total * sizeof(float), o.pair_allreduce_bytes);
  std::vector<std::vector<float>> fused(2), unfused(2);
  for (uint32_t r = 0; r < 2; ++r) fused[r] = unfused[r] = OrderSensitive(total, r, 99);
  std::vector<Status> st(2);
  OnEachRank(2, [&](uint32_t r) {
    st[r] = c[r].AllReduce(Bytes(fused[r]), DType::F32, ReduceOp::Sum, Group::World(2));
    size_t at = 0;
    for (size_t p : pieces) {
      if (st[r].ok())
        st[r] = c[r].AllReduce(Bytes(unfused[r]).subspan(at * sizeof(float), p * sizeof(float)), DType::F32,
                               ReduceOp::Sum, Group::World(2));
      at += p;
    }
  });
  for (uint32_t r = 0; r < 2; ++r) ASSERT_TRUE(st[r].ok()) << st[r].ToString();
  for (uint32_t r = 0; r < 2; ++r) {
    EXPECT_EQ(0, std::memcmp(fused[r].data(), unfused[r].data(), total * sizeof(float))) << "rank " << r;
    EXPECT_EQ(0, std::memcmp(fused[r].data(), fused[0].data(), total * sizeof(float))) << "rank " << r;
  }
}

// With small_allreduce_bytes = 0 an AllReduce is the ring at every group
// size, so its chunk r equals rank r's ReduceScatter of the same input bit
// for bit, pairs included (the order the parallel optimizer's tests pin).
TEST_P(AllReduceChoiceOver, ZeroMatchesReduceScatterBitwise) {
  CommOptions o = Options(GetParam());
  o.small_allreduce_bytes = 0;
  for (uint32_t n : {2u, 3u}) {
    Cluster c(n, o);
    ASSERT_TRUE(c.ok()) << c.create_status(0).ToString();
    const size_t block = 3001;
    std::vector<std::vector<float>> in(n), all(n), out(n, std::vector<float>(block));
    for (uint32_t r = 0; r < n; ++r) all[r] = in[r] = OrderSensitive(block * n, r, 5);
    std::vector<Status> st(n);
    OnEachRank(n, [&](uint32_t r) {
      st[r] = c[r].AllReduce(Bytes(all[r]), DType::F32, ReduceOp::Sum, Group::World(n));
      if (st[r].ok())
        st[r] = c[r].ReduceScatter(Bytes(in[r]), Bytes(out[r]), DType::F32, ReduceOp::Sum, Group::World(n));
    });
    for (uint32_t r = 0; r < n; ++r) ASSERT_TRUE(st[r].ok()) << st[r].ToString();
    for (uint32_t r = 0; r < n; ++r)
      EXPECT_EQ(0, std::memcmp(out[r].data(), all[0].data() + r * block, block * sizeof(float)))
          << n << " ranks, block " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, AllReduceChoiceOver, ::testing::Values(true, false),
                         [](const auto& info) { return std::string(info.param ? "Shm" : "Tcp"); });

}  // namespace
}  // namespace sinkrt::device
