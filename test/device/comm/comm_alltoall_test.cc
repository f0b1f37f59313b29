// AllToAll: ranks as threads in one process (support/comm_cluster.h), over
// real loopback TCP and real POSIX shared memory, on the world and on
// subgroups. Every byte is checked: the byte at k of the block that rank s
// sends rank d is a hash of (s, d, k), so a block sent to the wrong place,
// out of order or cut at the wrong segment boundary shows.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <ostream>
#include <string>
#include <vector>

#include "device/src/comm/communicator.h"
#include "support/comm_cluster.h"

namespace sinkrt::device {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using testing::Cluster;
using testing::OnEachRank;

CommOptions TestOptions(bool shm, milliseconds timeout = milliseconds(10000)) {
  CommOptions o;
  o.peer_timeout = timeout;
  o.segment_bytes = 4096;  // many segments per block: exercises the window
  o.segments_in_flight = 4;
  o.use_shared_memory = shm;
  return o;
}

uint8_t Pattern(uint32_t src, uint32_t dst, size_t k) {
  uint64_t h = (uint64_t{src} + 1) * 0x9E3779B97F4A7C15ull ^ (uint64_t{dst} + 1) * 0xC2B2AE3D27D4EB4Full ^
               (k + 1) * 0x165667B19E3779F9ull;
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 32;
  return static_cast<uint8_t>(h);
}

// This rank's input for `group`: block j is what it sends the member at j.
std::vector<uint8_t> InputFor(uint32_t rank, const Group& group, size_t block) {
  std::vector<uint8_t> in(block * group.ranks.size());
  for (size_t j = 0; j < group.ranks.size(); ++j)
    for (size_t k = 0; k < block; ++k) in[j * block + k] = Pattern(rank, group.ranks[j], k);
  return in;
}

// Block i must be what the member at i sent this rank; names the first wrong byte.
void ExpectReceived(uint32_t rank, const Group& group, size_t block, const std::vector<uint8_t>& out) {
  ASSERT_EQ(out.size(), block * group.ranks.size());
  for (size_t i = 0; i < group.ranks.size(); ++i)
    for (size_t k = 0; k < block; ++k)
      if (out[i * block + k] != Pattern(group.ranks[i], rank, k)) {
        ADD_FAILURE() << "rank " << rank << ": byte " << k << " of block " << i << " (from rank " << group.ranks[i]
                      << ", blocks of " << block << ") is wrong";
        return;
      }
}

// 0 (nothing moves), 1 byte, odd sizes within one segment, and blocks of
// 10 segments (more than the window of 4) with a short last one.
constexpr size_t kBlocks[] = {0, 1, 7, 4095, 4096 * 9 + 3};

struct Setup {
  bool shm;
  uint32_t n;
};

class CommAllToAll : public ::testing::TestWithParam<Setup> {};

void PrintTo(const Setup& s, std::ostream* os) { *os << (s.shm ? "shm" : "tcp") << ", " << s.n << " ranks"; }

TEST_P(CommAllToAll, WorldExchangesEveryBlock) {
  const auto [shm, n] = GetParam();
  Cluster c(n, TestOptions(shm));
  ASSERT_TRUE(c.ok()) << c.create_status(0).ToString();
  const Group world = Group::World(n);
  for (size_t block : kBlocks) {
    SCOPED_TRACE("blocks of " + std::to_string(block));
    std::vector<std::vector<uint8_t>> out(n, std::vector<uint8_t>(block * n, 0xEE));
    std::vector<Status> st(n);
    OnEachRank(n, [&](uint32_t r) {
      const std::vector<uint8_t> in = InputFor(r, world, block);
      st[r] = c[r].AllToAll(in, out[r], world);
    });
    for (uint32_t r = 0; r < n; ++r) {
      ASSERT_TRUE(st[r].ok()) << st[r].ToString();
      ExpectReceived(r, world, block, out[r]);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, CommAllToAll,
                         ::testing::Values(Setup{true, 1}, Setup{true, 2}, Setup{true, 3}, Setup{true, 4},
                                           Setup{false, 2}, Setup{false, 3}, Setup{false, 4}),
                         [](const auto& info) {
                           return std::string(info.param.shm ? "Shm" : "Tcp") + std::to_string(info.param.n);
                         });

// {0,2} and {1,3} at once, then {1,2,3} while rank 0 sits out, then the
// world: each group keeps its own sequence and positions (not world ranks)
// choose the blocks.
TEST(CommAllToAllGroups, SubgroupsRunConcurrently) {
  for (bool shm : {true, false}) {
    SCOPED_TRACE(shm ? "shm" : "tcp");
    Cluster c(4, TestOptions(shm));
    ASSERT_TRUE(c.ok()) << c.create_status(0).ToString();
    const Group pairs[2] = {Group{{0, 2}}, Group{{1, 3}}};
    const Group three{{1, 2, 3}};
    const Group world = Group::World(4);
    for (size_t block : {size_t{1}, size_t{4099}, size_t{4096 * 9 + 3}}) {
      SCOPED_TRACE("blocks of " + std::to_string(block));
      std::vector<std::vector<uint8_t>> pair_out(4), three_out(4), world_out(4);
      std::vector<Status> st(4);
      OnEachRank(4, [&](uint32_t r) {
        const Group& pair = pairs[r % 2];
        pair_out[r].resize(block * 2);
        st[r] = c[r].AllToAll(InputFor(r, pair, block), pair_out[r], pair);
        if (st[r].ok() && r != 0) {
          three_out[r].resize(block * 3);
          st[r] = c[r].AllToAll(InputFor(r, three, block), three_out[r], three);
        }
        world_out[r].resize(block * 4);
        if (st[r].ok()) st[r] = c[r].AllToAll(InputFor(r, world, block), world_out[r], world);
      });
      for (uint32_t r = 0; r < 4; ++r) {
        SCOPED_TRACE("rank " + std::to_string(r));
        ASSERT_TRUE(st[r].ok()) << st[r].ToString();
        ExpectReceived(r, pairs[r % 2], block, pair_out[r]);
        if (r != 0) ExpectReceived(r, three, block, three_out[r]);
        ExpectReceived(r, world, block, world_out[r]);
      }
    }
  }
}

// Refused before anything moves, so the communicator stays usable.
TEST(CommAllToAllGroups, BadArgumentsAreRefusedNamingTheSizes) {
  Cluster c(3, TestOptions(true));
  ASSERT_TRUE(c.ok()) << c.create_status(0).ToString();
  const Group world = Group::World(3);
  std::vector<uint8_t> a(12), b(12), odd(10), odd_out(10), small(9);
  auto refused = [](const Status& st, const std::string& fragment) {
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
    EXPECT_NE(st.message().find(fragment), std::string::npos) << st.message();
  };
  refused(c[0].AllToAll(odd, odd_out, world),
          "AllToAll: 10 input and 10 output bytes must be equal and divide into 3 blocks");
  refused(c[0].AllToAll(a, small, world), "AllToAll: 12 input and 9 output bytes must be equal");
  refused(c[0].AllToAll(a, a, world), "AllToAll: the input and output buffers overlap");
  std::vector<uint8_t> both(18);
  refused(c[0].AllToAll(std::span(both).first(12), std::span(both).last(12), world),
          "AllToAll: the input and output buffers overlap");
  refused(c[0].AllToAll(a, b, Group{{1, 2}}), "rank 0 is not in the group");

  std::vector<std::vector<uint8_t>> out(3, std::vector<uint8_t>(3 * 5));
  std::vector<Status> st(3);
  OnEachRank(3, [&](uint32_t r) { st[r] = c[r].AllToAll(InputFor(r, world, 5), out[r], world); });
  for (uint32_t r = 0; r < 3; ++r) {
    ASSERT_TRUE(st[r].ok()) << st[r].ToString();
    ExpectReceived(r, world, 5, out[r]);
  }
}

TEST(CommAllToAllGroups, MissingPeerTimesOutNamingIt) {
  for (bool shm : {false, true}) {
    SCOPED_TRACE(shm ? "shm" : "tcp");
    const milliseconds timeout(1500);
    Cluster c(3, TestOptions(shm, timeout));
    ASSERT_TRUE(c.ok()) << c.create_status(0).ToString();
    std::vector<Status> st(3);
    std::vector<Clock::duration> took(3);
    OnEachRank(2, [&](uint32_t r) {  // rank 2 never calls
      std::vector<uint8_t> in(3 * 20000), out(3 * 20000);
      auto start = Clock::now();
      st[r] = c[r].AllToAll(in, out, Group::World(3));
      took[r] = Clock::now() - start;
    });
    // Which of ranks 0 and 1 times out first (and so whose words the other
    // relays) is a race; both name the op and rank 2, and neither waits
    // much past its own timeout.
    for (uint32_t r = 0; r < 2; ++r) {
      SCOPED_TRACE("rank " + std::to_string(r));
      const std::string& m = st[r].message();
      EXPECT_FALSE(st[r].ok());
      EXPECT_NE(m.find("AllToAll #1 (pairwise exchange)"), std::string::npos) << m;
      EXPECT_NE(m.find("within 1500 ms"), std::string::npos) << m;
      EXPECT_TRUE(m.find("rank 2 has not arrived (its last collective was Barrier #0)") != std::string::npos ||
                  m.find("rank 2 does not answer") != std::string::npos)
          << m;
      EXPECT_LT(took[r], timeout + milliseconds(6000)) << m;
    }
  }
}

}  // namespace
}  // namespace sinkrt::device
