// Collectives: ranks as threads in one process, each with its own
// Communicator over real loopback TCP and real POSIX shared memory.
#include <dirent.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>
#include <random>
#include <thread>

#include "device/src/comm/algorithms/reduce.h"
#include "device/src/comm/communicator.h"
#include "device/src/comm/rendezvous/listening_inbox.h"
#include "device/src/daemon/daemon.h"
#include "device/src/task_positions.h"
#include "runtime/src/env.h"
#include "runtime/src/hello.h"
#include "runtime/src/wire.h"
#include "sinkrt/device/device_options.h"
#include "sinkrt/host/remote_device.h"
#include "support/comm_cluster.h"
#include "support/scoped_env.h"

namespace sinkrt::device {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

CommOptions TestOptions(bool shm, milliseconds timeout = milliseconds(10000)) {
  CommOptions o;
  o.peer_timeout = timeout;
  o.segment_bytes = 4096;  // many segments per op: exercises the pipeline
  o.segments_in_flight = 4;
  o.small_allreduce_bytes = 16 << 10;
  o.pair_allreduce_bytes = 0;  // pairs switch where larger groups do: their ring runs too
  o.use_shared_memory = shm;
  return o;
}

using testing::Cluster;
using testing::OnEachRank;

// ---- data and references --------------------------------------------------

constexpr DType kAllTypes[] = {DType::F32, DType::F64, DType::I32, DType::I64, DType::U8, DType::BF16};
constexpr ReduceOp kAllOps[] = {ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min};

std::vector<uint8_t> MakeInput(DType dt, size_t count, uint32_t rank, uint64_t seed) {
  std::mt19937_64 rng(seed * 1000003u + rank * 7919u + static_cast<uint64_t>(dt));
  std::uniform_real_distribution<double> real(-1.0, 1.0);
  std::vector<uint8_t> out(count * DTypeSize(dt));
  for (size_t i = 0; i < count; ++i) {
    uint8_t* p = out.data() + i * DTypeSize(dt);
    switch (dt) {
      case DType::F32: {
        float v = static_cast<float>(real(rng));
        std::memcpy(p, &v, 4);
        break;
      }
      case DType::F64: {
        double v = real(rng);
        std::memcpy(p, &v, 8);
        break;
      }
      case DType::BF16: {
        uint16_t v = FloatToBf16(static_cast<float>(real(rng)));
        std::memcpy(p, &v, 2);
        break;
      }
      case DType::I32: {
        int32_t v = static_cast<int32_t>(rng() % 2001) - 1000;
        std::memcpy(p, &v, 4);
        break;
      }
      case DType::I64: {
        int64_t v = static_cast<int64_t>(rng() % 2000000000001ull) - 1000000000000ll;
        std::memcpy(p, &v, 8);
        break;
      }
      default:
        p[0] = static_cast<uint8_t>(rng());
        break;
    }
  }
  return out;
}

double AsDouble(const uint8_t* p, DType dt) {
  switch (dt) {
    case DType::F32: {
      float v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case DType::F64: {
      double v;
      std::memcpy(&v, p, 8);
      return v;
    }
    case DType::BF16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return Bf16ToFloat(v);
    }
    case DType::I32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case DType::I64: {
      int64_t v;
      std::memcpy(&v, p, 8);
      return static_cast<double>(v);
    }
    default:
      return p[0];
  }
}

int64_t AsInt(const uint8_t* p, DType dt) {
  switch (dt) {
    case DType::I32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case DType::I64: {
      int64_t v;
      std::memcpy(&v, p, 8);
      return v;
    }
    default:
      return p[0];
  }
}

bool IsFloat(DType dt) { return dt == DType::F32 || dt == DType::F64 || dt == DType::BF16; }

// Checks element `i` of `got` against the reduction of the members'
// inputs: float sums against a float64 sum in rank order (within a
// tolerance), integer ops and max/min exactly.
void ExpectReduced(const std::vector<std::vector<uint8_t>>& inputs, const std::vector<uint32_t>& members,
                   size_t in_offset, const uint8_t* got, size_t count, DType dt, ReduceOp op) {
  const size_t es = DTypeSize(dt);
  const double n = static_cast<double>(members.size());
  int failures = 0;
  for (size_t i = 0; i < count && failures < 5; ++i) {
    const size_t at = (in_offset + i) * es;
    const uint8_t* g = got + i * es;
    if (IsFloat(dt)) {
      double acc = 0, mx = -INFINITY, mn = INFINITY;
      for (uint32_t m : members) {
        double v = AsDouble(inputs[m].data() + at, dt);
        acc += v;
        mx = std::max(mx, v);
        mn = std::min(mn, v);
      }
      double want = op == ReduceOp::Sum ? acc : op == ReduceOp::Mean ? acc / n : op == ReduceOp::Max ? mx : mn;
      double tol = (op == ReduceOp::Max || op == ReduceOp::Min) ? 0
                   : dt == DType::F64                           ? 1e-12 * n
                   : dt == DType::F32                           ? 2e-6 * n
                                                                : 0.02 * n;
      if (std::fabs(AsDouble(g, dt) - want) > tol) {
        ++failures;
        ADD_FAILURE() << "element " << i << ": got " << AsDouble(g, dt) << ", want " << want;
      }
    } else {
      // Integer sums wrap in the element type; mean divides the wrapped sum.
      uint64_t acc = 0;
      int64_t mx = INT64_MIN, mn = INT64_MAX;
      for (uint32_t m : members) {
        int64_t v = AsInt(inputs[m].data() + at, dt);
        acc += static_cast<uint64_t>(v);
        mx = std::max(mx, v);
        mn = std::min(mn, v);
      }
      int64_t sum = dt == DType::I32  ? static_cast<int32_t>(static_cast<uint32_t>(acc))
                    : dt == DType::U8 ? static_cast<int64_t>(acc & 0xff)
                                      : static_cast<int64_t>(acc);
      int64_t want = op == ReduceOp::Sum    ? sum
                     : op == ReduceOp::Mean ? sum / static_cast<int64_t>(members.size())
                     : op == ReduceOp::Max  ? mx
                                            : mn;
      if (AsInt(g, dt) != want) {
        ++failures;
        ADD_FAILURE() << "element " << i << ": got " << AsInt(g, dt) << ", want " << want;
      }
    }
  }
}

// ---- ReduceInto -------------------------------------------------------------

TEST(CommReduce, Bf16RoundsToNearestEven) {
  EXPECT_EQ(FloatToBf16(1.0f), 0x3f80);
  // 1 + 2^-8 is halfway between bf16 neighbours 1 and 1 + 2^-7: ties go to even (1).
  EXPECT_EQ(FloatToBf16(1.0f + 1.0f / 256), 0x3f80);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6: goes up.
  EXPECT_EQ(FloatToBf16(1.0f + 3.0f / 256), 0x3f82);
  EXPECT_EQ(FloatToBf16(1.0f + 1.0f / 256 + 1.0f / 65536), 0x3f81);
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(NAN))));

  uint16_t a[2] = {FloatToBf16(1.0f), FloatToBf16(-2.0f)};
  uint16_t b[2] = {FloatToBf16(1.0f / 256), FloatToBf16(0.5f)};
  ASSERT_TRUE(ReduceInto(std::span(reinterpret_cast<uint8_t*>(a), 4), std::span(reinterpret_cast<const uint8_t*>(b), 4),
                         DType::BF16, ReduceOp::Sum)
                  .ok());
  EXPECT_EQ(Bf16ToFloat(a[0]), 1.0f);
  EXPECT_EQ(Bf16ToFloat(a[1]), -1.5f);
}

TEST(CommReduce, IntegersWrapAndMaxMinPropagateNan) {
  int32_t a[2] = {INT32_MAX, -5};
  int32_t b[2] = {1, 3};
  ASSERT_TRUE(ReduceInto(std::span(reinterpret_cast<uint8_t*>(a), 8), std::span(reinterpret_cast<const uint8_t*>(b), 8),
                         DType::I32, ReduceOp::Sum)
                  .ok());
  EXPECT_EQ(a[0], INT32_MIN);
  EXPECT_EQ(a[1], -2);
  float x[3] = {1.0f, NAN, 2.0f};
  float y[3] = {NAN, 1.0f, 3.0f};
  ASSERT_TRUE(ReduceInto(std::span(reinterpret_cast<uint8_t*>(x), 12),
                         std::span(reinterpret_cast<const uint8_t*>(y), 12), DType::F32, ReduceOp::Max)
                  .ok());
  EXPECT_TRUE(std::isnan(x[0]));
  EXPECT_TRUE(std::isnan(x[1]));
  EXPECT_EQ(x[2], 3.0f);
  uint8_t u[1] = {200}, v[1] = {100};
  ASSERT_TRUE(ReduceInto(std::span(u), std::span<const uint8_t>(v), DType::U8, ReduceOp::Sum).ok());
  EXPECT_EQ(u[0], 44);
  EXPECT_FALSE(ReduceInto(std::span(u), std::span<const uint8_t>(v, 0), DType::U8, ReduceOp::Sum).ok());
}

// ---- correctness over both transports and group sizes ------------------------

struct Setup {
  bool shm;
  uint32_t n;
};

class CommCollectives : public ::testing::TestWithParam<Setup> {};

void PrintTo(const Setup& s, std::ostream* os) { *os << (s.shm ? "shm" : "tcp") << ", " << s.n << " ranks"; }

TEST_P(CommCollectives, AllReduceEveryTypeAndOpMatchesReferenceAndIsIdenticalOnAllRanks) {
  const auto [shm, n] = GetParam();
  Cluster c(n, TestOptions(shm));
  ASSERT_TRUE(c.ok()) << c.create_status(0).ToString();
  for (uint32_t r = 1; r < n; ++r) EXPECT_EQ(c[0].TransportName(r), shm ? "shm" : "tcp");
  const Group world = Group::World(n);
  std::vector<uint32_t> members(n);
  for (uint32_t r = 0; r < n; ++r) members[r] = r;
  // 1 element, a prime, a size not divisible by 3 or 4, one spanning many
  // 4 KiB segments (ring); the small ones take recursive doubling.
  for (size_t count : {size_t{1}, size_t{1001}, size_t{7919}, size_t{50021}}) {
    for (DType dt : kAllTypes) {
      for (ReduceOp op : kAllOps) {
        SCOPED_TRACE(std::to_string(count) + " x " + DTypeName(dt) + " op " + std::to_string(int(op)));
        std::vector<std::vector<uint8_t>> inputs(n), outputs(n);
        std::vector<Status> st(n);
        for (uint32_t r = 0; r < n; ++r) outputs[r] = inputs[r] = MakeInput(dt, count, r, count);
        OnEachRank(n, [&](uint32_t r) { st[r] = c[r].AllReduce(outputs[r], dt, op, world); });
        for (uint32_t r = 0; r < n; ++r) ASSERT_TRUE(st[r].ok()) << st[r].ToString();
        for (uint32_t r = 1; r < n; ++r) ASSERT_EQ(outputs[r], outputs[0]) << "rank " << r << " differs from rank 0";
        ExpectReduced(inputs, members, 0, outputs[0].data(), count, dt, op);
      }
    }
  }
}

TEST_P(CommCollectives, AllGatherReduceScatterBroadcast) {
  const auto [shm, n] = GetParam();
  Cluster c(n, TestOptions(shm));
  ASSERT_TRUE(c.ok());
  const Group world = Group::World(n);
  std::vector<uint32_t> members(n);
  for (uint32_t r = 0; r < n; ++r) members[r] = r;
  for (size_t count : {size_t{1}, size_t{7919}, size_t{30011}}) {
    SCOPED_TRACE(count);
    // AllGather: bytes, any size per member.
    {
      std::vector<std::vector<uint8_t>> in(n), out(n, std::vector<uint8_t>(count * n));
      std::vector<Status> st(n);
      for (uint32_t r = 0; r < n; ++r) in[r] = MakeInput(DType::U8, count, r, 11);
      OnEachRank(n, [&](uint32_t r) { st[r] = c[r].AllGather(in[r], out[r], world); });
      std::vector<uint8_t> want;
      for (uint32_t r = 0; r < n; ++r) want.insert(want.end(), in[r].begin(), in[r].end());
      for (uint32_t r = 0; r < n; ++r) {
        ASSERT_TRUE(st[r].ok()) << st[r].ToString();
        EXPECT_EQ(out[r], want) << "AllGather on rank " << r;
      }
    }
    // ReduceScatter: `count` elements per member.
    for (DType dt : {DType::F32, DType::BF16, DType::I64, DType::U8}) {
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Min}) {
        SCOPED_TRACE(std::string("ReduceScatter ") + DTypeName(dt));
        std::vector<std::vector<uint8_t>> in(n), out(n, std::vector<uint8_t>(count * DTypeSize(dt)));
        std::vector<Status> st(n);
        for (uint32_t r = 0; r < n; ++r) in[r] = MakeInput(dt, count * n, r, 5);
        OnEachRank(n, [&](uint32_t r) { st[r] = c[r].ReduceScatter(in[r], out[r], dt, op, world); });
        for (uint32_t r = 0; r < n; ++r) {
          ASSERT_TRUE(st[r].ok()) << st[r].ToString();
          ExpectReduced(in, members, r * count, out[r].data(), count, dt, op);
        }
      }
    }
    // Broadcast from every root.
    for (uint32_t root = 0; root < n; ++root) {
      std::vector<std::vector<uint8_t>> data(n, std::vector<uint8_t>(count, 0));
      data[root] = MakeInput(DType::U8, count, root, 3);
      std::vector<Status> st(n);
      OnEachRank(n, [&](uint32_t r) { st[r] = c[r].Broadcast(data[r], root, world); });
      for (uint32_t r = 0; r < n; ++r) {
        ASSERT_TRUE(st[r].ok()) << st[r].ToString();
        EXPECT_EQ(data[r], data[root]) << "Broadcast from " << root << " on rank " << r;
      }
    }
  }
}

TEST_P(CommCollectives, SendRecvAndBarrier) {
  const auto [shm, n] = GetParam();
  Cluster c(n, TestOptions(shm));
  ASSERT_TRUE(c.ok());
  if (n == 1) {
    // No peer to pass to: refused, and nothing breaks.
    std::vector<uint8_t> buf(8);
    EXPECT_EQ(c[0].Send(buf, 0).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(c[0].Recv(buf, 0).code(), StatusCode::kInvalidArgument);
  }
  for (size_t bytes : {size_t{1}, size_t{100003}}) {
    if (n == 1) break;
    // Each rank passes a buffer to the next; even ranks send first, odd ones
    // receive first (Send returns once its data has left, as in MPI).
    std::vector<std::vector<uint8_t>> in(n), out(n, std::vector<uint8_t>(bytes));
    std::vector<Status> st(n);
    for (uint32_t r = 0; r < n; ++r) in[r] = MakeInput(DType::U8, bytes, r, 9);
    OnEachRank(n, [&](uint32_t r) {
      const uint32_t next = (r + 1) % n, prev = (r + n - 1) % n;
      Status a, b;
      if (r % 2 == 0) {
        a = c[r].Send(in[r], next);
        b = c[r].Recv(out[r], prev);
      } else {
        b = c[r].Recv(out[r], prev);
        a = c[r].Send(in[r], next);
      }
      st[r] = a.ok() ? b : a;
    });
    for (uint32_t r = 0; r < n; ++r) {
      ASSERT_TRUE(st[r].ok()) << st[r].ToString();
      EXPECT_EQ(out[r], in[(r + n - 1) % n]);
    }
  }
  std::vector<Status> st(n);
  OnEachRank(n, [&](uint32_t r) {
    for (int i = 0; i < 20 && st[r].ok(); ++i) st[r] = c[r].Barrier(Group::World(n));
  });
  for (uint32_t r = 0; r < n; ++r) EXPECT_TRUE(st[r].ok()) << st[r].ToString();
}

// 1: a world with no peers (no socket, no shm, no wait); 5: odd and not a
// power of two (recursive doubling folds a member in, the ring's chunks are
// uneven).
INSTANTIATE_TEST_SUITE_P(Transports, CommCollectives,
                         ::testing::Values(Setup{true, 1}, Setup{true, 2}, Setup{true, 3}, Setup{true, 4},
                                           Setup{true, 5}, Setup{false, 1}, Setup{false, 2}, Setup{false, 3},
                                           Setup{false, 4}, Setup{false, 5}),
                         [](const auto& info) {
                           return std::string(info.param.shm ? "Shm" : "Tcp") + std::to_string(info.param.n);
                         });

TEST(CommCollectives, SubgroupsRunConcurrentlyAndKeepTheirOwnSequence) {
  for (bool shm : {true, false}) {
    SCOPED_TRACE(shm ? "shm" : "tcp");
    Cluster c(4, TestOptions(shm));
    ASSERT_TRUE(c.ok());
    std::vector<std::vector<float>> data(4);
    std::vector<Status> st(4);
    OnEachRank(4, [&](uint32_t r) {
      // {0,2} and {1,3} run different numbers of collectives, then the world.
      const Group pair{{r % 2, r % 2 + 2}};
      data[r].assign(20011, static_cast<float>(r + 1));
      for (int i = 0; i < (r % 2 ? 3 : 1) && st[r].ok(); ++i)
        st[r] = c[r].AllReduce(std::span(reinterpret_cast<uint8_t*>(data[r].data()), data[r].size() * 4), DType::F32,
                               ReduceOp::Sum, pair);
      std::vector<uint8_t> gathered(8);
      uint32_t v = r;
      if (st[r].ok()) st[r] = c[r].AllGather(std::span(reinterpret_cast<const uint8_t*>(&v), 4), gathered, pair);
      if (st[r].ok()) {
        uint32_t got[2];
        std::memcpy(got, gathered.data(), 8);
        EXPECT_EQ(got[0], r % 2);
        EXPECT_EQ(got[1], r % 2 + 2);
      }
      if (st[r].ok()) st[r] = c[r].Barrier(Group::World(4));
    });
    for (uint32_t r = 0; r < 4; ++r) ASSERT_TRUE(st[r].ok()) << st[r].ToString();
    // {0,2}: 1 + 3 once. {1,3}: (2 + 4) * 2^2 after three sums.
    EXPECT_EQ(data[0][0], 4.0f);
    EXPECT_EQ(data[2][20010], 4.0f);
    EXPECT_EQ(data[1][0], 24.0f);
    EXPECT_EQ(data[3][7], 24.0f);
  }
}

// AllGather and ReduceScatter on subgroups: the pairs {0,2} and {1,3} at
// once, then {1,2,3} while rank 0 sits out; blocks of several segments, so
// positions (not world ranks) must choose every chunk.
TEST(CommCollectives, AllGatherAndReduceScatterOnSubgroups) {
  for (bool shm : {true, false}) {
    SCOPED_TRACE(shm ? "shm" : "tcp");
    Cluster c(4, TestOptions(shm));
    ASSERT_TRUE(c.ok());
    const size_t count = 5003;  // F32: ~5 segments of 4 KiB per member
    const std::vector<Group> groups = {Group{{0, 2}}, Group{{1, 3}}, Group{{1, 2, 3}}};
    for (const Group& g : {groups[0], groups[2]}) {
      SCOPED_TRACE(g.ranks.size() == 2 ? "pairs" : "{1,2,3}");
      std::vector<std::vector<uint8_t>> gin(4), gout(4), rin(4), rout(4);
      std::vector<Status> st(4);
      for (uint32_t r = 0; r < 4; ++r) {
        gin[r] = MakeInput(DType::U8, count, r, 21);
        rin[r] = MakeInput(DType::F32, count * g.ranks.size(), r, 22);
      }
      auto group_of = [&](uint32_t r) -> const Group* {
        if (g.ranks.size() == 2) return &groups[r % 2];
        return r == 0 ? nullptr : &g;
      };
      OnEachRank(4, [&](uint32_t r) {
        const Group* mine = group_of(r);
        if (!mine) return;
        gout[r].resize(count * mine->ranks.size());
        rout[r].resize(count * 4);
        st[r] = c[r].AllGather(gin[r], gout[r], *mine);
        if (st[r].ok()) st[r] = c[r].ReduceScatter(rin[r], rout[r], DType::F32, ReduceOp::Sum, *mine);
      });
      for (uint32_t r = 0; r < 4; ++r) {
        const Group* mine = group_of(r);
        if (!mine) continue;
        SCOPED_TRACE("rank " + std::to_string(r));
        ASSERT_TRUE(st[r].ok()) << st[r].ToString();
        std::vector<uint8_t> want;
        for (uint32_t m : mine->ranks) want.insert(want.end(), gin[m].begin(), gin[m].end());
        EXPECT_EQ(gout[r], want);
        const uint32_t pos =
            static_cast<uint32_t>(std::find(mine->ranks.begin(), mine->ranks.end(), r) - mine->ranks.begin());
        ExpectReduced(rin, mine->ranks, pos * count, rout[r].data(), count, DType::F32, ReduceOp::Sum);
      }
    }
  }
}

TEST(CommCollectives, MixedShmAndTcpPeers) {
  // Two "hosts" of two ranks: pairs within a host share memory, the rest use TCP.
  Cluster c(
      4, [](uint32_t) { return TestOptions(true); }, [](uint32_t) { return uint64_t{42}; },
      [](uint32_t r) { return r < 2 ? std::string("host-a") : std::string("host-b"); });
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c[0].TransportName(1), "shm");
  EXPECT_EQ(c[0].TransportName(2), "tcp");
  EXPECT_EQ(c[3].TransportName(2), "shm");
  EXPECT_EQ(c[3].TransportName(1), "tcp");
  std::vector<uint32_t> members{0, 1, 2, 3};
  for (size_t count : {size_t{3}, size_t{70001}}) {
    std::vector<std::vector<uint8_t>> inputs(4), outputs(4);
    std::vector<Status> st(4);
    for (uint32_t r = 0; r < 4; ++r) outputs[r] = inputs[r] = MakeInput(DType::F64, count, r, 1);
    OnEachRank(4, [&](uint32_t r) { st[r] = c[r].AllReduce(outputs[r], DType::F64, ReduceOp::Sum, Group::World(4)); });
    for (uint32_t r = 0; r < 4; ++r) ASSERT_TRUE(st[r].ok()) << st[r].ToString();
    for (uint32_t r = 1; r < 4; ++r) EXPECT_EQ(outputs[r], outputs[0]);
    ExpectReduced(inputs, members, 0, outputs[0].data(), count, DType::F64, ReduceOp::Sum);
  }
}

TEST(CommCollectives, TeardownRightAfterTheLastOpLosesNothing) {
  for (bool shm : {false, true}) {
    Cluster c(3, TestOptions(shm));
    ASSERT_TRUE(c.ok());
    std::vector<Status> st(3);
    std::vector<std::vector<uint8_t>> data(3, std::vector<uint8_t>(200000, 1));
    OnEachRank(3, [&](uint32_t r) {
      // The fastest rank leaves while the others still read its last segments.
      st[r] = c[r].AllReduce(data[r], DType::U8, ReduceOp::Sum, Group::World(3));
      c.Destroy(r);
    });
    for (uint32_t r = 0; r < 3; ++r) {
      ASSERT_TRUE(st[r].ok()) << st[r].ToString();
      EXPECT_EQ(data[r][199999], 3);
    }
  }
}

TEST(CommCollectives, FloatSumsAreBitwiseIdenticalWhereOrderMatters) {
  Cluster c(3, TestOptions(true));
  ASSERT_TRUE(c.ok());
  // Values spanning many magnitudes make float addition order-sensitive.
  for (size_t count : {size_t{2000}, size_t{300007}}) {
    std::vector<std::vector<float>> data(3, std::vector<float>(count));
    for (uint32_t r = 0; r < 3; ++r) {
      std::mt19937 rng(r);
      std::uniform_real_distribution<float> mant(-1, 1);
      std::uniform_int_distribution<int> expo(-20, 20);
      for (auto& x : data[r]) x = std::ldexp(mant(rng), expo(rng));
    }
    std::vector<Status> st(3);
    OnEachRank(3, [&](uint32_t r) {
      st[r] = c[r].AllReduce(std::span(reinterpret_cast<uint8_t*>(data[r].data()), count * 4), DType::F32,
                             ReduceOp::Sum, Group::World(3));
    });
    for (uint32_t r = 0; r < 3; ++r) ASSERT_TRUE(st[r].ok()) << st[r].ToString();
    EXPECT_EQ(0, std::memcmp(data[0].data(), data[1].data(), count * 4));
    EXPECT_EQ(0, std::memcmp(data[0].data(), data[2].data(), count * 4));
  }
}

// ---- failures -------------------------------------------------------------

TEST(CommFailures, TagMismatchFailsBothSidesAtOnceNamingBothOps) {
  for (bool shm : {true, false}) {
    // "At once": long before the peer timeout, with room for a loaded machine.
    Cluster c(2, TestOptions(shm, milliseconds(20000)));
    ASSERT_TRUE(c.ok());
    std::vector<uint8_t> a(64), b(64), gathered(128);
    Status s0, s1;
    auto start = Clock::now();
    OnEachRank(2, [&](uint32_t r) {
      if (r == 0)
        s0 = c[0].AllReduce(a, DType::F32, ReduceOp::Sum, Group::World(2));
      else
        s1 = c[1].AllGather(b, gathered, Group::World(2));
    });
    EXPECT_LT(Clock::now() - start, milliseconds(10000));
    // Either rank may see the other's message first (or only hear of it by
    // the other's failure notice): each side names the mismatch, worded by
    // whichever rank saw it.
    for (const Status* s : {&s0, &s1}) {
      EXPECT_EQ(s->code(), StatusCode::kFailedPrecondition) << s->ToString();
      EXPECT_NE(s->message().find("AllReduce #1"), std::string::npos) << s->message();
      EXPECT_NE(s->message().find("AllGather #1"), std::string::npos) << s->message();
      auto has = [&](const char* text) { return s->message().find(text) != std::string::npos; };
      const bool seen_by_1 = has("rank 1 expected AllGather #1 segment 0 from rank 0, got AllReduce #1 segment");
      const bool seen_by_0 =
          has("rank 0 expected AllReduce #1 segment") && has("from rank 1, got AllGather #1 segment");
      EXPECT_TRUE(seen_by_0 || seen_by_1) << s->message();
    }
    // The communicator is broken from now on.
    EXPECT_FALSE(c[0].Barrier(Group::World(2)).ok());
  }
}

TEST(CommFailures, MissingPeerTimesOutNamingIt) {
  for (bool shm : {false, true}) {
    SCOPED_TRACE(shm ? "shm" : "tcp");
    const milliseconds timeout(1500);
    Cluster c(4, TestOptions(shm, timeout));
    ASSERT_TRUE(c.ok());
    std::vector<Status> st(4);
    std::vector<Clock::duration> took(4);
    OnEachRank(3, [&](uint32_t r) {  // rank 3 never calls
      std::vector<uint8_t> data(80000);
      auto start = Clock::now();
      st[r] = c[r].AllReduce(data, DType::F32, ReduceOp::Sum, Group::World(4));
      took[r] = Clock::now() - start;
    });
    // Which rank times out first, and so whose words the others relay in
    // its failure notice, is a race (rank 0 waits for data from rank 3,
    // rank 2's sends to rank 3 fill its window, either may wake first on a
    // loaded machine). Every rank names rank 3 as the one that has not
    // arrived (it never called: its last collective is the rendezvous
    // barrier), or as the one that does not answer when even its progress
    // query went unanswered; none waits much past its own timeout (the
    // bound leaves room for the stall report and a loaded machine).
    for (uint32_t r = 0; r < 3; ++r) {
      SCOPED_TRACE("rank " + std::to_string(r));
      const std::string& m = st[r].message();
      EXPECT_FALSE(st[r].ok());
      EXPECT_NE(m.find("within 1500 ms"), std::string::npos) << m;
      EXPECT_TRUE(m.find("rank 3 has not arrived (its last collective was Barrier #0)") != std::string::npos ||
                  m.find("rank 3 does not answer") != std::string::npos)
          << m;
      EXPECT_LT(took[r], timeout + milliseconds(6000)) << m;
    }
  }
}

// Where an executor would be: rank 1 stuck in GetNext at step 5.
class FixedPositions : public TaskPositions {
 public:
  void Describe(TaskPositionReport* out) const override {
    *out = TaskPositionReport{};
    StreamPosition& c = out->streams[0];
    c.state = StreamState::kGetNext;
    c.program = static_cast<uint8_t>(ProgramKind::TrainStep);
    c.streams = 2;
    c.step = 5;
    c.task = 3;
    c.last_done = 2;
    c.for_ms = 2500;
    std::strcpy(c.what, "GetNextTask");
    std::strcpy(c.task_name, "data");
    std::strcpy(c.last_name, "x");
    // The comm stream only waits for the compute stream: not worth a word.
    out->streams[1] = c;
    out->streams[1].state = StreamState::kEventWait;
  }
};

TEST(CommFailures, StallReportSaysWhoArrivedAndWhereTheMissingRankIs) {
  for (bool shm : {false, true}) {
    SCOPED_TRACE(shm ? "shm" : "tcp");
    Cluster c(3, TestOptions(shm, milliseconds(1500)));
    ASSERT_TRUE(c.ok());
    FixedPositions positions;
    c[1].SetTaskPositions(&positions);
    std::vector<Status> st(3);
    OnEachRank(3, [&](uint32_t r) {
      if (r == 1) return;  // rank 1 never calls
      std::vector<uint8_t> data(4000);
      st[r] = c[r].AllReduce(data, DType::F32, ReduceOp::Sum, Group::World(3));
    });
    c[1].ClearTaskPositions(&positions);
    // Whichever of ranks 0 and 2 times out first reports, the other relays
    // its words: both carry the whole report.
    for (uint32_t r : {0u, 2u}) {
      SCOPED_TRACE("rank " + std::to_string(r));
      const std::string& m = st[r].message();
      EXPECT_FALSE(st[r].ok());
      EXPECT_NE(m.find("AllReduce #1"), std::string::npos) << m;
      EXPECT_NE(m.find("ranks 0 and 2 have arrived, rank 1 has not"), std::string::npos) << m;
      EXPECT_NE(m.find("rank 1 has not arrived (its last collective was Barrier #0): it is in train_step compute "
                       "stream task 3 'data' (GetNextTask) at step 5, waiting for a batch for 2."),
                std::string::npos)
          << m;
      EXPECT_NE(m.find(" s, last completed task 2 'x'"), std::string::npos) << m;
      EXPECT_EQ(m.find("comm stream"), std::string::npos) << m;
    }
  }
}

TEST(CommFailures, DestroyedPeerIsReportedAtOnce) {
  for (bool shm : {false, true}) {
    SCOPED_TRACE(shm ? "shm" : "tcp");
    Cluster c(3, TestOptions(shm, milliseconds(20000)));
    ASSERT_TRUE(c.ok());
    std::vector<Status> st(3);
    auto start = Clock::now();
    OnEachRank(3, [&](uint32_t r) {
      if (r == 2) {
        std::this_thread::sleep_for(milliseconds(200));
        c.Destroy(2);
        return;
      }
      std::vector<uint8_t> data(80000);
      st[r] = c[r].AllReduce(data, DType::F32, ReduceOp::Sum, Group::World(3));
    });
    EXPECT_LT(Clock::now() - start, milliseconds(10000));  // well before the 20 s peer timeout
    for (uint32_t r = 0; r < 2; ++r) {
      EXPECT_FALSE(st[r].ok());
      EXPECT_NE(st[r].message().find("rank 2 closed its connection during AllReduce #1"), std::string::npos)
          << st[r].ToString();
    }
  }
}

TEST(CommFailures, AbortWakesTheWaitAndFailsThePeers) {
  for (bool shm : {false, true}) {
    SCOPED_TRACE(shm ? "shm" : "tcp");
    Cluster c(3, TestOptions(shm, milliseconds(20000)));
    ASSERT_TRUE(c.ok());
    std::vector<Status> st(3);
    std::vector<Clock::duration> took(3);
    OnEachRank(3, [&](uint32_t r) {
      // Every rank's thread runs before the clock starts, so rank 2 is in
      // its AllReduce well before the Abort even on a loaded machine.
      if (!c[r].Barrier(Group::World(3)).ok()) return;
      if (r == 1) {  // late: rank 2 blocks waiting for it
        std::this_thread::sleep_for(milliseconds(300));
        c[2].Abort();
        std::this_thread::sleep_for(milliseconds(100));
      }
      std::vector<uint8_t> data(80000);
      auto start = Clock::now();
      st[r] = c[r].AllReduce(data, DType::F32, ReduceOp::Sum, Group::World(3));
      took[r] = Clock::now() - start;
    });
    // "At once" means well before the 20 s peer timeout, whatever the load.
    EXPECT_EQ(st[2].code(), StatusCode::kAborted) << st[2].ToString();
    EXPECT_LT(took[2], milliseconds(8000));
    EXPECT_FALSE(st[0].ok());
    EXPECT_NE(st[0].message().find("rank 2 failed"), std::string::npos) << st[0].ToString();
    EXPECT_LT(took[0], milliseconds(10000));
    EXPECT_FALSE(st[1].ok());
  }
}

// ---- timeouts from the environment (MindSpore's HCCL_* as users set them) ----

using testing::ScopedEnv;

TEST(CommTimeouts, EnvironmentResolution) {
  using std::chrono::seconds;
  auto resolve = [](const char* sinkrt_ms, const char* exec_s, const char* connect_s) {
    ScopedEnv env{
        {"SINKRT_PEER_TIMEOUT_MS", sinkrt_ms}, {"HCCL_EXEC_TIMEOUT", exec_s}, {"HCCL_CONNECT_TIMEOUT", connect_s}};
    return DeviceOptions::FromEnvironment();
  };
  DeviceOptions o = resolve(nullptr, nullptr, nullptr);
  EXPECT_EQ(o.peer_timeout, seconds(300));
  EXPECT_EQ(o.effective_rendezvous_timeout(), seconds(300));
  // HCCL_EXEC_TIMEOUT: how long a collective waits for its peers, only.
  o = resolve(nullptr, "7", nullptr);
  EXPECT_EQ(o.peer_timeout, seconds(7));
  EXPECT_EQ(o.effective_rendezvous_timeout(), seconds(300));
  // HCCL_CONNECT_TIMEOUT: joining a world, only.
  o = resolve(nullptr, nullptr, "5");
  EXPECT_EQ(o.peer_timeout, seconds(300));
  EXPECT_EQ(o.effective_rendezvous_timeout(), seconds(5));
  o = resolve(nullptr, "7", "5");
  EXPECT_EQ(o.peer_timeout, seconds(7));
  EXPECT_EQ(o.effective_rendezvous_timeout(), seconds(5));
  // SINKRT_PEER_TIMEOUT_MS wins over both, for both waits.
  o = resolve("1234", "7", "5");
  EXPECT_EQ(o.peer_timeout, milliseconds(1234));
  EXPECT_EQ(o.effective_rendezvous_timeout(), milliseconds(1234));
  // Zero or not a number is ignored, never "fail at once".
  o = resolve("x", "0", "soon");
  EXPECT_EQ(o.peer_timeout, seconds(300));
  EXPECT_EQ(o.effective_rendezvous_timeout(), seconds(300));
  // An explicit option (a flag) wins over the environment: the daemon's
  // options carry the resolved values and Daemon::Start hands them on.
  {
    ScopedEnv env{{"SINKRT_PEER_TIMEOUT_MS", nullptr}, {"HCCL_EXEC_TIMEOUT", "7"}, {"HCCL_CONNECT_TIMEOUT", "5"}};
    DaemonOptions d = DaemonOptions::FromEnvironment();
    EXPECT_EQ(d.peer_timeout, seconds(7));
    EXPECT_EQ(d.rendezvous_timeout, seconds(5));
  }
}

// A host reads the same variables the same way, and its JoinWorld outwaits
// the daemons' rendezvous so their verdict (which member never came) is
// what the host reports, even when HCCL_CONNECT_TIMEOUT exceeds the peer wait.
TEST(CommTimeouts, HostJoinWaitFollowsTheDaemonsRendezvous) {
  using std::chrono::seconds;
  struct Case {
    const char* sinkrt_ms;
    const char* exec_s;
    const char* connect_s;
    milliseconds rendezvous;
  };
  for (const Case& c : {Case{nullptr, nullptr, nullptr, seconds(300)}, Case{nullptr, "7", nullptr, seconds(300)},
                        Case{nullptr, nullptr, "900", seconds(900)}, Case{nullptr, "7", "5", seconds(5)},
                        Case{"1234", "7", "900", milliseconds(1234)}}) {
    ScopedEnv env{{"SINKRT_PEER_TIMEOUT_MS", c.sinkrt_ms},
                  {"HCCL_EXEC_TIMEOUT", c.exec_s},
                  {"HCCL_CONNECT_TIMEOUT", c.connect_s},
                  {"SINKRT_REPLY_TIMEOUT_MS", "1000"}};
    const DeviceOptions device = DeviceOptions::FromEnvironment();
    const host::RemoteOptions remote = host::RemoteOptions::FromEnvironment();
    const PeerTimeouts resolved = PeerTimeoutsFromEnvironment({});
    EXPECT_EQ(device.effective_rendezvous_timeout(), c.rendezvous);
    EXPECT_EQ(resolved.effective_rendezvous(), c.rendezvous);
    EXPECT_EQ(remote.peer_timeout, device.peer_timeout);
    EXPECT_EQ(remote.rendezvous_timeout, device.rendezvous_timeout);
    EXPECT_EQ(remote.join_timeout(), c.rendezvous + seconds(10));
  }
  // Never less than the bound on any other reply.
  host::RemoteOptions o;
  o.peer_timeout = seconds(1);
  o.reply_timeout = seconds(60);
  EXPECT_EQ(o.join_timeout(), seconds(60));
}

// CommOptions as a device builds them from its DeviceOptions.
CommOptions FromDevice(const DeviceOptions& d, bool shm) {
  CommOptions o = TestOptions(shm, d.peer_timeout);
  o.rendezvous_timeout = d.rendezvous_timeout;
  return o;
}

TEST(CommTimeouts, HcclExecTimeoutBoundsACollectiveNamingTheMissingRank) {
  ScopedEnv env{{"SINKRT_PEER_TIMEOUT_MS", nullptr}, {"HCCL_EXEC_TIMEOUT", "1"}, {"HCCL_CONNECT_TIMEOUT", nullptr}};
  const CommOptions o = FromDevice(DeviceOptions::FromEnvironment(), false);
  Cluster c(2, o);  // joining is not bounded by it: a loaded machine still forms the world
  ASSERT_TRUE(c.ok()) << c.create_status(0).ToString();
  std::vector<uint8_t> data(64);
  const auto start = Clock::now();
  Status st = c[0].AllReduce(data, DType::F32, ReduceOp::Sum, Group::World(2));  // rank 1 never calls
  const auto took = Clock::now() - start;
  EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded) << st.ToString();
  EXPECT_NE(st.message().find("within 1000 ms"), std::string::npos) << st.ToString();
  EXPECT_TRUE(st.message().find("rank 0 has arrived, rank 1 has not; rank 1 has not arrived") != std::string::npos ||
              st.message().find("rank 1 does not answer") != std::string::npos)
      << st.ToString();
  EXPECT_GE(took, milliseconds(1000));
  EXPECT_LT(took, milliseconds(8000));
}

TEST(CommTimeouts, HcclConnectTimeoutBoundsTheRendezvousNamingTheMissingRank) {
  ScopedEnv env{{"SINKRT_PEER_TIMEOUT_MS", nullptr}, {"HCCL_EXEC_TIMEOUT", nullptr}, {"HCCL_CONNECT_TIMEOUT", "1"}};
  const CommOptions o = FromDevice(DeviceOptions::FromEnvironment(), false);
  EXPECT_EQ(o.peer_timeout, std::chrono::seconds(300));
  // Rank 1's inbox takes rank 0's dial, but rank 1 never joins.
  auto inbox0 = std::move(ListeningInbox::Start()).value();
  auto inbox1 = std::move(ListeningInbox::Start()).value();
  std::vector<PeerAddress> world{{0, inbox0->address(), "h"}, {1, inbox1->address(), "h"}};
  const auto start = Clock::now();
  auto created = Communicator::Create(0, world, 42, *inbox0, o);
  const auto took = Clock::now() - start;
  ASSERT_FALSE(created.ok());
  EXPECT_EQ(created.status().code(), StatusCode::kDeadlineExceeded) << created.status().ToString();
  EXPECT_NE(created.status().message().find("rank 1 "), std::string::npos) << created.status().ToString();
  EXPECT_NE(created.status().message().find("within 1000 ms"), std::string::npos) << created.status().ToString();
  EXPECT_GE(took, milliseconds(1000));
  EXPECT_LT(took, milliseconds(8000));
}

TEST(CommRendezvous, WrongJobIsRefusedNamingBothJobs) {
  Cluster c(
      2, [](uint32_t) { return TestOptions(true, milliseconds(3000)); },
      [](uint32_t r) { return r == 0 ? uint64_t{7} : uint64_t{8}; });
  for (uint32_t r = 0; r < 2; ++r) {
    const Status& st = c.create_status(r);
    EXPECT_FALSE(st.ok()) << "rank " << r;
    EXPECT_NE(st.message().find("job mismatch: rank 0 is in job 7, rank 1 is in job 8"), std::string::npos)
        << st.ToString();
  }
}

// Dials `to` as a device of rank `rank` and completes the handshake.
std::unique_ptr<FrameSocket> FakePeer(const Address& to, int rank, uint64_t job) {
  auto s = FrameSocket::Connect(to, milliseconds(2000));
  EXPECT_TRUE(s.ok());
  HelloFields hello;
  hello.role = fb::PeerRole::Device;
  hello.rank = rank;
  hello.job = job;
  flatbuffers::FlatBufferBuilder fbb;
  BuildHello(fbb, hello);
  EXPECT_TRUE((*s)->Send(fbb).ok());
  return std::move(s).value();
}

TEST(CommRendezvous, TwoConnectionsClaimingOneRankAreRefused) {
  auto inbox = std::move(ListeningInbox::Start()).value();
  std::vector<PeerAddress> world;
  for (uint32_t r = 0; r < 3; ++r) world.push_back(PeerAddress{r, inbox->address(), "h"});
  Status created;
  std::thread rank2([&] {
    auto c = Communicator::Create(2, world, 5, *inbox, TestOptions(false, milliseconds(3000)));
    created = c.status();
  });
  auto first = FakePeer(inbox->address(), 0, 5);
  InFrame frame;
  ASSERT_TRUE(first->Receive(&frame, DeadlineIn(milliseconds(3000))).ok());  // rank 2's Hello
  flatbuffers::FlatBufferBuilder ack;
  fb::AckBuilder ab(ack);
  FinishMessage(ack, fb::MessageBody::Ack, ab.Finish().Union());
  ASSERT_TRUE(first->Send(ack).ok());
  auto second = FakePeer(inbox->address(), 0, 5);
  rank2.join();
  EXPECT_EQ(created.code(), StatusCode::kFailedPrecondition) << created.ToString();
  EXPECT_NE(created.message().find("two connections claim rank 0"), std::string::npos) << created.ToString();
}

TEST(CommRendezvous, DifferentOptionsAreRefused) {
  Cluster c(2, [](uint32_t r) {
    CommOptions o = TestOptions(false, milliseconds(3000));
    if (r == 1) o.segment_bytes = 8192;
    return o;
  });
  EXPECT_FALSE(c.create_status(0).ok());
  EXPECT_NE(c.create_status(0).message().find("segment_bytes"), std::string::npos) << c.create_status(0).ToString();
}

TEST(CommRendezvous, LeavesNothingInDevShm) {
  auto ours = [] {
    int count = 0;
    const std::string prefix = "sinkrt-";
    char pid[32];
    std::snprintf(pid, sizeof pid, "-%d-", static_cast<int>(::getpid()));
    if (DIR* d = ::opendir("/dev/shm")) {
      while (dirent* e = ::readdir(d)) {
        std::string name = e->d_name;
        if (name.rfind(prefix, 0) == 0 && name.find(pid) != std::string::npos) ++count;
      }
      ::closedir(d);
    }
    return count;
  };
  Cluster c(3, TestOptions(true));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c[1].TransportName(0), "shm");
  EXPECT_EQ(ours(), 0);
}

}  // namespace
}  // namespace sinkrt::device
