// The planned rendezvous (issue 22): a rank connects only to the peers its
// collectives' schedules talk to. The plan's symmetry and counts as pure
// functions, then worlds of ranks as threads (real loopback TCP, real
// POSIX shared memory between ranks of one "host") that run every
// collective on those sparse links, and fail together when one rank goes.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <set>

#include "device/src/comm/algorithms/partners.h"
#include "device/src/comm/communicator.h"
#include "device/src/comm/rendezvous/connection_plan.h"
#include "device/src/executor.h"
#include "sinkrt/device/device_options.h"
#include "sinkrt/runtime/stream_format.h"
#include "sinkrt/runtime/task_stream_verifier.h"
#include "support/alltoall_stream.h"
#include "support/comm_cluster.h"
#include "support/str_cat.h"

namespace sinkrt::device {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using testing::Cat;
using testing::Cluster;
using testing::OnEachRank;

constexpr uint32_t kEveryUse = kUsesAllReduce | kUsesAllGather | kUsesReduceScatter | kUsesBroadcast | kUsesAllToAll |
                               kUsesSendRecv | kUsesBarrier;

std::vector<uint32_t> Range(uint32_t first, uint32_t end, uint32_t step = 1) {
  std::vector<uint32_t> out;
  for (uint32_t r = first; r < end; r += step) out.push_back(r);
  return out;
}

// `hosts` hosts of n / hosts ranks each, in rank order (ranks 0..k-1 on h0).
std::vector<std::string> Hosts(uint32_t n, uint32_t per_host) {
  std::vector<std::string> ids(n);
  for (uint32_t r = 0; r < n; ++r) ids[r] = Cat("h", std::to_string(r / per_host));
  return ids;
}

// The groups of `all` that hold `rank`: what its stream would list.
std::vector<GroupUse> Mine(const std::vector<GroupUse>& all, uint32_t rank) {
  std::vector<GroupUse> out;
  for (const GroupUse& g : all)
    if (std::binary_search(g.ranks.begin(), g.ranks.end(), rank)) out.push_back(g);
  return out;
}

// ---- the plan, as a pure function --------------------------------------------

TEST(ConnectionPlan, IsSymmetricForEveryWorldUpTo64AndRandomGroups) {
  std::mt19937 rng(2201);
  for (uint32_t n = 1; n <= 64; ++n) {
    for (int trial = 0; trial < 6; ++trial) {
      SCOPED_TRACE("n " + std::to_string(n) + " trial " + std::to_string(trial));
      // Random hosts: consecutive runs of 1..8 ranks, sometimes one host
      // for all, sometimes an unknown (empty) host id.
      std::vector<std::string> hosts(n);
      for (uint32_t r = 0, h = 0; r < n; ++h)
        for (uint32_t k = 1 + rng() % 8; k > 0 && r < n; --k)
          hosts[r++] = trial == 1 ? "one" : Cat("h", std::to_string(h));
      if (trial == 2 && n > 1) hosts[rng() % n].clear();
      std::vector<GroupUse> groups;
      for (int g = 0, count = static_cast<int>(rng() % 6); g < count; ++g) {
        GroupUse use;
        for (uint32_t r = 0; r < n; ++r)
          if (rng() % 3 == 0) use.ranks.push_back(r);
        use.uses = (rng() % kEveryUse + 1) & ~kUsesSendRecv;
        if (!use.ranks.empty()) groups.push_back(use);
      }
      if (n > 1) {
        const uint32_t a = rng() % n, b = (a + 1 + rng() % (n - 1)) % n;
        groups.push_back(GroupUse{{std::min(a, b), std::max(a, b)}, kUsesSendRecv});
      }
      std::vector<std::set<uint32_t>> plan(n);
      for (uint32_t r = 0; r < n; ++r) {
        const std::vector<uint32_t> peers = PlanConnections(r, hosts, Mine(groups, r));
        ASSERT_TRUE(std::is_sorted(peers.begin(), peers.end()));
        plan[r].insert(peers.begin(), peers.end());
        ASSERT_EQ(plan[r].size(), peers.size()) << "duplicates for rank " << r;
        ASSERT_EQ(plan[r].count(r), 0u) << "rank " << r << " plans a link to itself";
      }
      for (uint32_t a = 0; a < n; ++a)
        for (uint32_t b : plan[a]) ASSERT_EQ(plan[b].count(a), 1u) << "rank " << a << " needs " << b << ", not back";
      // Every group's calls are covered: each member reaches the partners
      // the schedules name, and the world's Barrier #0 partners too.
      for (const GroupUse& g : groups) {
        for (uint32_t pos = 0; pos < g.ranks.size(); ++pos) {
          const uint32_t r = g.ranks[pos];
          for (uint32_t peer : CallPartners(GroupView{g.ranks, pos, hosts}, g.uses))
            ASSERT_EQ(plan[r].count(peer), 1u) << "rank " << r << " lacks " << peer;
        }
      }
    }
  }
}

TEST(ConnectionPlan, AWorldOf16OnSeparateHostsNeedsItsRingDoublingAndBarrierPartnersOnly) {
  const std::vector<std::string> hosts = Hosts(16, 1);
  const std::vector<GroupUse> none;
  // Rank 0: ring 1 and 15; doubling 1, 2, 4, 8; barrier +-1, +-2, +-4, +-8.
  EXPECT_EQ(PlanConnections(0, hosts, none), (std::vector<uint32_t>{1, 2, 4, 8, 12, 14, 15}));
  for (uint32_t r = 0; r < 16; ++r) EXPECT_EQ(PlanConnections(r, hosts, none).size(), 7u) << "rank " << r;
  // Data parallel on the world (AllReduce, Broadcast of the parameters)
  // adds nothing: the ring's and the chain's neighbours are there already.
  const std::vector<GroupUse> dp{{Range(0, 16), kUsesAllReduce | kUsesBroadcast}};
  for (uint32_t r = 0; r < 16; ++r) EXPECT_EQ(PlanConnections(r, hosts, dp).size(), 7u) << "rank " << r;
  // Unset: the full mesh; AllToAll on the world needs it too.
  EXPECT_EQ(PlanConnections(3, hosts, std::nullopt).size(), 15u);
  EXPECT_EQ(PlanConnections(3, hosts, std::vector<GroupUse>{{Range(0, 16), kUsesAllToAll}}).size(), 15u);
}

TEST(ConnectionPlan, GroupsOnOneHostConnectEveryPairForTheDirectAllReduce) {
  // A world on one host may reduce straight out of its peers' memory:
  // every pair, as before.
  EXPECT_EQ(PlanConnections(2, Hosts(6, 6), std::vector<GroupUse>{}).size(), 5u);
  // 32 ranks, 4 per host; AllReduce within each host and among the ranks
  // with one local index: the host's 3 others, plus the world's and the
  // cross-host group's partners.
  const std::vector<std::string> hosts = Hosts(32, 4);
  std::vector<GroupUse> groups;
  for (uint32_t h = 0; h < 8; ++h) groups.push_back({Range(h * 4, h * 4 + 4), kUsesAllReduce});
  for (uint32_t i = 0; i < 4; ++i) groups.push_back({Range(i, 32, 4), kUsesAllReduce});
  const std::vector<uint32_t> peers = PlanConnections(5, hosts, Mine(groups, 5));
  for (uint32_t local : {4u, 6u, 7u}) EXPECT_TRUE(std::count(peers.begin(), peers.end(), local)) << local;
  EXPECT_LT(peers.size(), 16u);
  // A group that spans hosts never reads memory directly: one member per
  // host adds no pair beyond the world's own partners here.
  EXPECT_EQ(PlanConnections(0, hosts, std::vector<GroupUse>{{Range(0, 32, 4), kUsesAllReduce}}),
            PlanConnections(0, hosts, std::vector<GroupUse>{}));
}

TEST(ConnectionPlan, MalformedGroupsAreRefused) {
  EXPECT_TRUE(CheckGroupUses({{{0, 3}, kUsesAllReduce}}, 4).ok());
  EXPECT_FALSE(CheckGroupUses({{{0, 4}, kUsesAllReduce}}, 4).ok());
  EXPECT_FALSE(CheckGroupUses({{{2, 1}, kUsesAllReduce}}, 4).ok());
  EXPECT_FALSE(CheckGroupUses({{{1, 1}, kUsesAllReduce}}, 4).ok());
}

// ---- what a stream says it needs, and the load's check -------------------------

CommOptions SparseOptions(std::vector<GroupUse> groups, milliseconds timeout = milliseconds(20000)) {
  CommOptions o;
  o.peer_timeout = timeout;
  o.segment_bytes = 4096;  // many segments per op
  o.segments_in_flight = 4;
  o.small_allreduce_bytes = 16 << 10;  // doubling below, ring above
  o.pair_allreduce_bytes = 0;
  o.groups = std::move(groups);
  return o;
}

TEST(CommSparse, AStreamNeedingALinkTheWorldLacksIsRefusedAtLoadNamingThePair) {
  // Rank r's stream of a world of 8: an AllToAll on the world. Its
  // CollectiveUses name exactly that; a world joined with them loads it,
  // one joined without (the world's own partners only) refuses it.
  const uint32_t n = 8;
  const std::vector<testing::BufferSpec> buffers = {{"in", DType::F32, {n * 2}}, {"out", DType::F32, {n * 2}}};
  auto stream = [&](uint32_t r) {
    return VerifyTaskStream(testing::AllToAllStream(r, n, buffers, {{0, 0, 1}}),
                            kSupportedFeatures | kFeatureCollectives);
  };
  auto first = stream(0);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(CollectiveUses(*first, 0), (std::vector<GroupUse>{{Range(0, n), kUsesAllToAll}}));
  DeviceOptions d;
  d.threads = 1;
  for (bool listed : {true, false}) {
    SCOPED_TRACE(listed ? "listed" : "not listed");
    Cluster c(
        n,
        [&](uint32_t r) {
          auto v = stream(r);
          return SparseOptions(listed ? CollectiveUses(*v, r) : std::vector<GroupUse>{}, milliseconds(20000));
        },
        [](uint32_t) { return uint64_t{3}; }, [](uint32_t r) { return Cat("h", std::to_string(r)); });
    ASSERT_TRUE(c.ok()) << c.create_status(0).ToString();
    EXPECT_EQ(c[0].connections(), listed ? n - 1 : 5u);
    std::vector<Status> st(n);
    OnEachRank(n, [&](uint32_t r) {
      auto v = stream(r);
      st[r] = v.ok() ? Executor::Load(std::move(v).value(), d, &c[r]).status() : v.status();
    });
    for (uint32_t r = 0; r < n; ++r) {
      if (listed) {
        EXPECT_TRUE(st[r].ok()) << st[r].ToString();
        continue;
      }
      EXPECT_EQ(st[r].code(), StatusCode::kFailedPrecondition) << st[r].ToString();
      EXPECT_NE(st[r].message().find("rank " + std::to_string(r) + " has no connection to rank "), std::string::npos)
          << st[r].ToString();
      EXPECT_NE(st[r].message().find("exchange0"), std::string::npos) << st[r].ToString();
    }
  }
}

TEST(CommSparse, RanksThatJoinWithDifferentGroupsFailTheRendezvousNamingThePair) {
  // Rank 0 says its stream runs AllToAll on the world, the others that
  // theirs runs nothing: rank 0 dials ranks 3 and 5, which plan no link to
  // it and refuse, naming both. Nobody waits past the rendezvous timeout.
  const uint32_t n = 8;
  const auto start = Clock::now();
  Cluster c(
      n,
      [](uint32_t r) {
        CommOptions o =
            SparseOptions(r == 0 ? std::vector<GroupUse>{{Range(0, n), kUsesAllToAll}} : std::vector<GroupUse>{},
                          milliseconds(20000));
        o.rendezvous_timeout = milliseconds(3000);
        return o;
      },
      [](uint32_t) { return uint64_t{5}; }, [](uint32_t r) { return Cat("h", std::to_string(r)); });
  EXPECT_LT(Clock::now() - start, milliseconds(15000));
  for (uint32_t r = 0; r < n; ++r) EXPECT_FALSE(c.create_status(r).ok()) << "rank " << r;
  // Rank 3 (or 5) refuses rank 0's dial only if the dial arrives while it
  // still accepts its own planned lower peers; once those have come, it
  // reads no more dials, and rank 0 then fails waiting for its Hello (a gap
  // of the sparse rendezvous: the inbox does not refuse unplanned peers by
  // itself). Which happens first depends on scheduling (a CPU hog shows
  // both), so the test accepts either, each with rank 0 naming the peer.
  auto refused = [&](uint32_t r) {
    return c.create_status(r).message().find("rank 0 dialed rank " + std::to_string(r) + ", but rank " +
                                             std::to_string(r) + "'s collectives need no link to it") !=
           std::string::npos;
  };
  std::string all;
  for (uint32_t r = 0; r < n; ++r) all += "\nrank " + std::to_string(r) + ": " + c.create_status(r).ToString();
  const std::string at_0 = c.create_status(0).message();
  const bool unanswered = at_0.find("rendezvous (handshake): no Hello from rank 3") != std::string::npos ||
                          at_0.find("rendezvous (handshake): no Hello from rank 5") != std::string::npos;
  EXPECT_TRUE(refused(3) || refused(5) || unanswered) << all;
  EXPECT_TRUE(at_0.find("rank 3") != std::string::npos || at_0.find("rank 5") != std::string::npos) << at_0;
}

// ---- a world of 16 on sparse links --------------------------------------------

// 16 ranks on 4 "hosts" of 4 (shm within, TCP between), groups as a
// two-level job would have them: data parallel on the world, each host's
// members, one member per host with the same local index, an odd-sized
// group (doubling folds its extra member in), and a Send/Recv pair.
struct SparseWorld {
  static constexpr uint32_t kRanks = 16;
  std::vector<std::string> hosts = Hosts(kRanks, 4);
  std::vector<GroupUse> groups;
  SparseWorld() {
    const uint32_t every = kUsesAllReduce | kUsesAllGather | kUsesReduceScatter | kUsesBroadcast | kUsesBarrier;
    groups.push_back({Range(0, kRanks), every});
    for (uint32_t h = 0; h < 4; ++h) groups.push_back({Range(h * 4, h * 4 + 4), every});
    for (uint32_t i = 0; i < 4; ++i) groups.push_back({Range(i, kRanks, 4), every});
    groups.push_back({{0, 3, 6, 9, 12}, every});
    groups.push_back({{2, 11}, kUsesSendRecv});
  }
  std::unique_ptr<Cluster> Start(milliseconds timeout = milliseconds(20000)) const {
    return std::make_unique<Cluster>(
        kRanks, [&](uint32_t r) { return SparseOptions(Mine(groups, r), timeout); },
        [](uint32_t) { return uint64_t{42}; }, [&](uint32_t r) { return hosts[r]; });
  }
};

// Rank r's input: element i = r * 1000003 + i (exact in I64 sums).
std::vector<int64_t> Input(uint32_t rank, size_t count) {
  std::vector<int64_t> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = int64_t{rank} * 1000003 + static_cast<int64_t>(i);
  return v;
}

std::span<uint8_t> Bytes(std::vector<int64_t>& v) { return {reinterpret_cast<uint8_t*>(v.data()), v.size() * 8}; }

constexpr uint32_t kRanksMax = 16;  // results by world rank

// Every collective on `group`, checked against its definition on every member.
void RunEveryCollective(Cluster& c, const std::vector<uint32_t>& ranks) {
  const Group group{ranks};
  const size_t m = ranks.size();
  SCOPED_TRACE("group of " + std::to_string(m) + " from rank " + std::to_string(ranks[0]));
  // AllReduce: 100 elements take recursive doubling, 5000 (40 KiB) the ring.
  for (size_t count : {size_t{100}, size_t{5000}}) {
    std::vector<std::vector<int64_t>> data(kRanksMax);
    std::vector<Status> st(kRanksMax);
    for (uint32_t r : ranks) data[r] = Input(r, count);
    OnEachRank(static_cast<uint32_t>(m), [&](uint32_t i) {
      const uint32_t r = ranks[i];
      st[r] = c[r].AllReduce(Bytes(data[r]), DType::I64, ReduceOp::Sum, group);
    });
    std::vector<int64_t> want(count, 0);
    for (uint32_t r : ranks) {
      const std::vector<int64_t> in = Input(r, count);
      for (size_t i = 0; i < count; ++i) want[i] += in[i];
    }
    for (uint32_t r : ranks) {
      ASSERT_TRUE(st[r].ok()) << "AllReduce of " << count << ": " << st[r].ToString();
      EXPECT_EQ(data[r], want) << "AllReduce of " << count << " on rank " << r;
    }
  }
  // AllGather and ReduceScatter of 300 elements per member.
  {
    const size_t count = 300;
    std::vector<std::vector<int64_t>> in(kRanksMax), gathered(kRanksMax), scattered(kRanksMax);
    std::vector<Status> gs(kRanksMax), rs(kRanksMax);
    for (uint32_t r : ranks) {
      in[r] = Input(r, count * m);
      gathered[r].assign(count * m * m, -1);
      scattered[r].assign(count, -1);
    }
    OnEachRank(static_cast<uint32_t>(m), [&](uint32_t i) {
      const uint32_t r = ranks[i];
      gs[r] = c[r].AllGather(Bytes(in[r]), Bytes(gathered[r]), group);
      if (gs[r].ok()) rs[r] = c[r].ReduceScatter(Bytes(in[r]), Bytes(scattered[r]), DType::I64, ReduceOp::Sum, group);
    });
    std::vector<int64_t> all;
    for (uint32_t r : ranks) all.insert(all.end(), in[r].begin(), in[r].end());
    for (size_t i = 0; i < m; ++i) {
      const uint32_t r = ranks[i];
      ASSERT_TRUE(gs[r].ok()) << gs[r].ToString();
      ASSERT_TRUE(rs[r].ok()) << rs[r].ToString();
      EXPECT_EQ(gathered[r], all) << "AllGather on rank " << r;
      for (size_t e = 0; e < count; ++e) {
        int64_t sum = 0;
        for (uint32_t q : ranks) sum += in[q][i * count + e];
        ASSERT_EQ(scattered[r][e], sum) << "ReduceScatter on rank " << r << " element " << e;
      }
    }
  }
  // Broadcast from the last member (the chain wraps around), then a barrier.
  {
    const uint32_t root = ranks.back();
    std::vector<std::vector<int64_t>> data(kRanksMax);
    std::vector<Status> st(kRanksMax);
    for (uint32_t r : ranks) data[r] = r == root ? Input(root, 3000) : std::vector<int64_t>(3000, 0);
    OnEachRank(static_cast<uint32_t>(m), [&](uint32_t i) {
      const uint32_t r = ranks[i];
      st[r] = c[r].Broadcast(Bytes(data[r]), root, group);
      if (st[r].ok()) st[r] = c[r].Barrier(group);
    });
    for (uint32_t r : ranks) {
      ASSERT_TRUE(st[r].ok()) << st[r].ToString();
      EXPECT_EQ(data[r], Input(root, 3000)) << "Broadcast on rank " << r;
    }
  }
}

TEST(CommSparse, EveryCollectiveRunsOnTheWorldAndSubgroupsWithThePlannedLinksOnly) {
  const SparseWorld w;
  auto c = w.Start();
  ASSERT_TRUE(c->ok()) << c->create_status(0).ToString();
  for (uint32_t r = 0; r < SparseWorld::kRanks; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const std::vector<uint32_t> plan = PlanConnections(r, w.hosts, Mine(w.groups, r));
    EXPECT_EQ((*c)[r].connections(), plan.size());
    EXPECT_LT((*c)[r].connections(), SparseWorld::kRanks - 1);  // not the full mesh
    // The host's three others share memory (the host group's direct AllReduce).
    EXPECT_EQ((*c)[r].shm_connections(), 3u);
    for (uint32_t p = 0; p < SparseWorld::kRanks; ++p) {
      const bool planned = std::count(plan.begin(), plan.end(), p) > 0;
      const std::string want = p == r ? "self" : !planned ? "none" : w.hosts[p] == w.hosts[r] ? "shm" : "tcp";
      EXPECT_EQ((*c)[r].TransportName(p), want) << "peer " << p;
    }
  }
  RunEveryCollective(*c, Range(0, SparseWorld::kRanks));
  for (uint32_t h = 0; h < 4; ++h) RunEveryCollective(*c, Range(h * 4, h * 4 + 4));
  RunEveryCollective(*c, Range(1, SparseWorld::kRanks, 4));
  RunEveryCollective(*c, {0, 3, 6, 9, 12});
  // Send/Recv on the planned pair.
  std::vector<int64_t> sent = Input(2, 2000), got(2000, 0);
  Status send_st, recv_st;
  OnEachRank(2, [&](uint32_t i) {
    if (i == 0)
      send_st = (*c)[2].Send(Bytes(sent), 11);
    else
      recv_st = (*c)[11].Recv(Bytes(got), 2);
  });
  ASSERT_TRUE(send_st.ok()) << send_st.ToString();
  ASSERT_TRUE(recv_st.ok()) << recv_st.ToString();
  EXPECT_EQ(got, sent);
}

TEST(CommSparse, ACollectiveTheRendezvousDidNotPlanIsRefusedNamingThePair) {
  // The world's own partners only (no groups): every schedule of the world
  // but AllToAll, whose pairwise exchange meets every member.
  const uint32_t n = 8;
  // Outlive the communicators: the failed op may leave sends in flight.
  std::vector<std::vector<int64_t>> in(n, std::vector<int64_t>(n * 4)), out(n, std::vector<int64_t>(n * 4, 0));
  Cluster c(
      n, [](uint32_t) { return SparseOptions({}, milliseconds(20000)); }, [](uint32_t) { return uint64_t{7}; },
      [](uint32_t r) { return Cat("h", std::to_string(r)); });
  ASSERT_TRUE(c.ok()) << c.create_status(0).ToString();
  const Group world = Group::World(n);
  EXPECT_TRUE(c[0].CheckLinks(world, kUsesAllReduce | kUsesBarrier).ok());
  const Status refused = c[0].CheckLinks(world, kUsesAllToAll);
  EXPECT_EQ(refused.code(), StatusCode::kFailedPrecondition) << refused.ToString();
  EXPECT_NE(refused.message().find("rank 0 has no connection to rank 3"), std::string::npos) << refused.ToString();
  // Run anyway: every rank fails, none hangs or crashes, each error names a rank.
  std::vector<Status> st(n);
  const auto start = Clock::now();
  OnEachRank(n, [&](uint32_t r) {
    std::fill(in[r].begin(), in[r].end(), r);
    st[r] = c[r].AllToAll(Bytes(in[r]), Bytes(out[r]), world);
  });
  EXPECT_LT(Clock::now() - start, milliseconds(10000));  // well before the 20 s peer timeout
  // Which rank meets its missing link first, and so whose words the others
  // relay, is a race; every error carries one such pair.
  for (uint32_t r = 0; r < n; ++r) {
    EXPECT_FALSE(st[r].ok()) << "rank " << r;
    EXPECT_NE(st[r].message().find(" has no connection to rank "), std::string::npos) << st[r].ToString();
  }
}

TEST(CommSparse, ADestroyedRankFailsEveryRankThroughThePlannedLinks) {
  // Rank 5 goes away (as a process that dies) while the others run a ring
  // AllReduce on the world: only ranks 4, 6 and its other partners see its
  // connection close; the rest learn it from their partners' failure
  // notices, hop by hop, long before the peer timeout.
  const SparseWorld w;
  const milliseconds timeout(30000);
  const uint32_t n = SparseWorld::kRanks;
  // Outlives the communicators: a failed op may leave sends in flight
  // from it until the I/O thread stops.
  std::vector<std::vector<int64_t>> data(n);
  auto c = w.Start(timeout);
  ASSERT_TRUE(c->ok()) << c->create_status(0).ToString();
  std::vector<Status> st(n);
  std::vector<Clock::duration> took(n);
  OnEachRank(n, [&](uint32_t r) {
    if (r == 5) {
      c->Destroy(5);
      return;
    }
    data[r] = Input(r, 20000);
    const auto start = Clock::now();
    st[r] = (*c)[r].AllReduce(Bytes(data[r]), DType::I64, ReduceOp::Sum, Group::World(n));
    took[r] = Clock::now() - start;
  });
  for (uint32_t r = 0; r < n; ++r) {
    if (r == 5) continue;
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_FALSE(st[r].ok());
    // Directly or in the notices relayed to it (each carries its cause).
    EXPECT_NE(st[r].message().find("rank 5"), std::string::npos) << st[r].ToString();
    EXPECT_LT(took[r], timeout / 2) << st[r].ToString();
  }
}

TEST(CommSparse, StallReportAsksTheConnectedMembersAndNamesTheOthers) {
  // Rank 9 never calls; the others time out in the world's barrier and
  // report. Whoever reports first asks only its partners; the members it
  // has no link to are named as not asked.
  const uint32_t n = 16;
  Cluster c(
      n, [](uint32_t) { return SparseOptions({}, milliseconds(1500)); }, [](uint32_t) { return uint64_t{9}; },
      [](uint32_t r) { return Cat("h", std::to_string(r)); });
  ASSERT_TRUE(c.ok()) << c.create_status(0).ToString();
  std::vector<Status> st(n);
  OnEachRank(n, [&](uint32_t r) {
    if (r != 9) st[r] = c[r].Barrier(Group::World(n));
  });
  size_t reports = 0;
  for (uint32_t r = 0; r < n; ++r) {
    if (r == 9) continue;
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_FALSE(st[r].ok());
    const std::string& m = st[r].message();
    if (m.find("have arrived") == std::string::npos) continue;
    ++reports;
    EXPECT_NE(m.find("not asked (no connection from rank "), std::string::npos) << m;
  }
  EXPECT_GT(reports, 0u);
}

}  // namespace
}  // namespace sinkrt::device
