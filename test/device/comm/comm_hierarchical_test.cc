// The two-level AllReduce (comm/algorithms/allreduce_hierarchical.cc) on
// worlds of one process whose ranks claim different host ids, so that
// ranks of one "host" talk shared memory and the rest TCP, as on a cluster.
//
// That it ran is read from the bits: with each host's share summed in its
// ring order and the two hosts' partial sums added (a group of two
// doubles), every element has one exact expected value, which the flat
// ring (a different order over values of many magnitudes) does not give.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "device/src/comm/communicator.h"
#include "device/src/comm/topology.h"
#include "runtime/src/bf16.h"
#include "sinkrt/device/in_process_device.h"
#include "sinkrt/fb/task_stream_generated.h"
#include "sinkrt/host/model.h"
#include "sinkrt/host/model_zoo.h"
#include "support/comm_cluster.h"
#include "support/in_process_world.h"
#include "support/model_fixtures.h"
#include "support/test_models.h"
#include "support/test_util.h"

namespace sinkrt::device {
namespace {

using testing::Cluster;
using testing::OnEachRank;

// Small segments so that 1 MiB runs many of them; a switch to the ring at
// 16 KiB (so the flat schedule of a large buffer is the ring).
CommOptions Options(bool hierarchical) {
  CommOptions o;
  o.peer_timeout = std::chrono::milliseconds(20000);
  o.segment_bytes = 4096;
  o.segments_in_flight = 4;
  o.small_allreduce_bytes = 16 << 10;
  o.hierarchical_allreduce = hierarchical;
  return o;
}

std::vector<std::string> Hosts(const char* letters) {
  std::vector<std::string> h;
  for (const char* c = letters; *c; ++c) h.push_back(std::string("host-") + *c);
  return h;
}

struct World {
  std::vector<std::string> hosts;
  Cluster cluster;
  World(const char* letters, bool hierarchical, uint64_t job = 42)
      : hosts(Hosts(letters)),
        cluster(
            static_cast<uint32_t>(hosts.size()), [=](uint32_t) { return Options(hierarchical); },
            [=](uint32_t) { return job; }, [this](uint32_t r) { return hosts[r]; }) {}
  uint32_t size() const { return cluster.size(); }
};

// Values over many magnitudes: a different summation order shows in the bits.
std::vector<float> Values(size_t count, uint32_t rank) {
  std::mt19937 rng(9173u + rank);
  std::uniform_real_distribution<float> mant(-1, 1);
  std::uniform_int_distribution<int> expo(-20, 20);
  std::vector<float> v(count);
  for (auto& x : v) x = std::ldexp(mant(rng), expo(rng));
  return v;
}

// One element's value as the dtype holds it, and the sum of two as it rounds.
struct F32 {
  static constexpr DType kType = DType::F32;
  using Raw = float;
  static Raw From(float f) { return f; }
  static float To(Raw r) { return r; }
  static Raw Add(Raw a, Raw b) { return a + b; }
  static Raw Div(Raw a, uint32_t n) { return a / static_cast<float>(n); }
};
struct Bf16 {
  static constexpr DType kType = DType::BF16;
  using Raw = uint16_t;
  static Raw From(float f) { return FloatToBf16(f); }
  static float To(Raw r) { return Bf16ToFloat(r); }
  static Raw Add(Raw a, Raw b) { return FloatToBf16(Bf16ToFloat(a) + Bf16ToFloat(b)); }
  static Raw Div(Raw a, uint32_t n) { return FloatToBf16(Bf16ToFloat(a) / static_cast<float>(n)); }
};

template <typename T>
std::vector<typename T::Raw> Inputs(size_t count, uint32_t rank) {
  std::vector<typename T::Raw> v;
  for (float f : Values(count, rank)) v.push_back(T::From(f));
  return v;
}

// Runs AllReduce over `group` (the world when empty) on every member, each
// with Inputs(count, rank); returns the results by world rank.
template <typename T>
std::vector<std::vector<typename T::Raw>> Reduce(World& w, size_t count, ReduceOp op,
                                                 std::vector<uint32_t> group = {}) {
  if (group.empty()) group = Group::World(w.size()).ranks;
  std::vector<std::vector<typename T::Raw>> out(w.size());
  for (uint32_t r : group) out[r] = Inputs<T>(count, r);
  OnEachRank(w.size(), [&](uint32_t r) {
    if (std::find(group.begin(), group.end(), r) == group.end()) return;
    std::span<uint8_t> bytes(reinterpret_cast<uint8_t*>(out[r].data()), out[r].size() * sizeof(typename T::Raw));
    Status st = w.cluster[r].AllReduce(bytes, T::kType, op, Group{group});
    EXPECT_TRUE(st.ok()) << "rank " << r << ": " << st.ToString();
  });
  return out;
}

// The two-level order for two hosts: each host's members (local positions
// 0..L-1) sum chunk c in ring order from position c+1, ending at c; the
// two hosts' sums are added. `members[h]` are host h's world ranks.
template <typename T>
std::vector<typename T::Raw> TwoLevelExpected(size_t count, const std::vector<std::vector<uint32_t>>& members,
                                              ReduceOp op) {
  const size_t L = members[0].size();
  std::vector<std::vector<std::vector<typename T::Raw>>> in(members.size());
  uint32_t n = 0;
  for (size_t h = 0; h < members.size(); ++h)
    for (uint32_t r : members[h]) in[h].push_back(Inputs<T>(count, r)), ++n;
  std::vector<typename T::Raw> out(count);
  for (size_t i = 0; i < count; ++i) {
    // The ring's partition: chunk sizes differ by at most one.
    size_t c = 0;
    while ((c + 1) * (count / L) + std::min(c + 1, count % L) <= i) ++c;
    typename T::Raw total{};
    for (size_t h = 0; h < members.size(); ++h) {
      typename T::Raw s = in[h][(c + 1) % L][i];
      for (size_t k = 2; k <= L; ++k) s = T::Add(s, in[h][(c + k) % L][i]);
      total = h == 0 ? s : T::Add(total, s);
    }
    out[i] = op == ReduceOp::Mean ? T::Div(total, n) : total;
  }
  return out;
}

template <typename T>
void ExpectEveryRankEqual(const std::vector<std::vector<typename T::Raw>>& got, const std::vector<uint32_t>& ranks) {
  for (uint32_t r : ranks)
    ASSERT_EQ(std::memcmp(got[r].data(), got[ranks[0]].data(), got[r].size() * sizeof(typename T::Raw)), 0)
        << "rank " << r << " differs from rank " << ranks[0];
}

// Within rounding of the exact sum (float64 over the dtype's inputs).
template <typename T>
void ExpectNearExact(const std::vector<typename T::Raw>& got, size_t count, const std::vector<uint32_t>& ranks,
                     ReduceOp op, double rel) {
  std::vector<double> sum(count, 0), mag(count, 0);
  for (uint32_t r : ranks) {
    auto in = Inputs<T>(count, r);
    for (size_t i = 0; i < count; ++i) sum[i] += T::To(in[i]), mag[i] += std::abs(T::To(in[i]));
  }
  const double div = op == ReduceOp::Mean ? static_cast<double>(ranks.size()) : 1.0;
  for (size_t i = 0; i < count; ++i)
    ASSERT_NEAR(T::To(got[i]), sum[i] / div, rel * mag[i] / div + 1e-30) << "element " << i;
}

std::vector<uint32_t> All(uint32_t n) { return Group::World(n).ranks; }

// ---- topology ---------------------------------------------------------------

TEST(CommTopology, HostsInOrderOfTheirLowestRankAndEmptyIdsAlone) {
  const std::vector<std::string> ids = {"b", "a", "b", "", "a", ""};
  const WorldTopology t = TopologyOf(ids);
  EXPECT_EQ(t.hosts, 4u);
  EXPECT_EQ(t.host, (std::vector<uint32_t>{0, 1, 0, 2, 1, 3}));
  EXPECT_EQ(t.local, (std::vector<uint32_t>{0, 0, 1, 0, 1, 0}));
}

TEST(CommTopology, AGroupSplitsIntoHostMatesAndEqualLocalIndices) {
  const WorldTopology t = TopologyOf(std::vector<std::string>{"A", "B", "A", "B", "A", "B"});
  const std::vector<uint32_t> world = {0, 1, 2, 3, 4, 5};
  const GroupTopology g = GroupTopologyOf(t, world, 3);
  EXPECT_EQ(g.hosts, 2u);
  EXPECT_EQ(g.per_host, 3u);
  EXPECT_TRUE(g.Layered());
  EXPECT_EQ(g.local, (std::vector<uint32_t>{1, 3, 5}));
  EXPECT_EQ(g.local_pos, 1u);
  EXPECT_EQ(g.cross, (std::vector<uint32_t>{2, 3}));
  EXPECT_EQ(g.cross_pos, 1u);
  // A subgroup counts its own members: 1 and 4 are each other's "index 0".
  const std::vector<uint32_t> sub = {1, 2, 3, 4};
  const GroupTopology s = GroupTopologyOf(t, sub, 4);
  EXPECT_EQ(s.local, (std::vector<uint32_t>{2, 4}));
  EXPECT_EQ(s.cross, (std::vector<uint32_t>{3, 4}));
  // Unequal shares, one host, one member per host: not layered.
  EXPECT_FALSE(GroupTopologyOf(t, std::vector<uint32_t>{0, 1, 2}, 0).Layered());
  EXPECT_FALSE(GroupTopologyOf(t, std::vector<uint32_t>{0, 2, 4}, 0).Layered());
  EXPECT_FALSE(GroupTopologyOf(t, std::vector<uint32_t>{0, 1}, 0).Layered());
}

// ---- results -------------------------------------------------------------------

template <typename T>
void CheckTwoLevel(const char* letters, const std::vector<std::vector<uint32_t>>& members) {
  World hier(letters, true, 42);
  World flat(letters, false, 43);
  ASSERT_TRUE(hier.cluster.ok() && flat.cluster.ok());
  const uint32_t n = hier.size();
  const double rel = T::kType == DType::BF16 ? 3e-2 : 1e-5;
  for (size_t count : {size_t{1}, size_t{7}, size_t{1001}, (size_t{1} << 20) / sizeof(typename T::Raw)}) {
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Mean}) {
      SCOPED_TRACE(::testing::Message() << letters << " count " << count << " op " << fb::EnumNameReduceOp(op));
      auto two = Reduce<T>(hier, count, op);
      auto one = Reduce<T>(flat, count, op);
      ExpectEveryRankEqual<T>(two, All(n));
      ExpectEveryRankEqual<T>(one, All(n));
      ExpectNearExact<T>(two[0], count, All(n), op, rel);
      ExpectNearExact<T>(one[0], count, All(n), op, rel);
      if (count >= members[0].size()) {
        auto expected = TwoLevelExpected<T>(count, members, op);
        EXPECT_EQ(std::memcmp(two[0].data(), expected.data(), count * sizeof(typename T::Raw)), 0)
            << "not the two-level order";
      } else {
        // Fewer elements than members per host: the flat schedule.
        EXPECT_EQ(std::memcmp(two[0].data(), one[0].data(), count * sizeof(typename T::Raw)), 0);
      }
    }
  }
  // The flat ring's order is another: the knob really switched.
  const size_t big = (size_t{1} << 20) / sizeof(typename T::Raw);
  auto one = Reduce<T>(flat, big, ReduceOp::Sum);
  auto expected = TwoLevelExpected<T>(big, members, ReduceOp::Sum);
  EXPECT_NE(std::memcmp(one[0].data(), expected.data(), big * sizeof(typename T::Raw)), 0);
}

TEST(CommHierarchical, FourRanksOnTwoHostsF32) { CheckTwoLevel<F32>("AABB", {{0, 1}, {2, 3}}); }
TEST(CommHierarchical, SixRanksOnTwoHostsF32) { CheckTwoLevel<F32>("AAABBB", {{0, 1, 2}, {3, 4, 5}}); }
TEST(CommHierarchical, FourRanksOnTwoHostsBf16) { CheckTwoLevel<Bf16>("AABB", {{0, 1}, {2, 3}}); }
TEST(CommHierarchical, SixRanksInterleavedOnTwoHostsBf16) {
  // Hosts need not hold consecutive ranks: A = {0, 2, 4}, B = {1, 3, 5}.
  CheckTwoLevel<Bf16>("ABABAB", {{0, 2, 4}, {1, 3, 5}});
}

TEST(CommHierarchical, UnevenHostsTakeTheFlatSchedule) {
  World hier("AAB", true, 42);
  World flat("AAB", false, 43);
  ASSERT_TRUE(hier.cluster.ok() && flat.cluster.ok());
  const size_t count = (1 << 20) / 4;
  EXPECT_EQ(hier.cluster[0].AllReduceAlgorithm(count * 4, DType::F32, Group::World(3), false), "ring");
  auto a = Reduce<F32>(hier, count, ReduceOp::Sum);
  auto b = Reduce<F32>(flat, count, ReduceOp::Sum);
  ExpectEveryRankEqual<F32>(a, All(3));
  EXPECT_EQ(std::memcmp(a[0].data(), b[0].data(), count * 4), 0);
}

TEST(CommHierarchical, SubgroupsAndTheWorldInterleave) {
  // Groups that share sub-groups ({0,1} is a host pair of both) and plain
  // collectives on those sub-groups, in turn: every message's number and
  // group keep them apart.
  World w("AAABBB", true);
  ASSERT_TRUE(w.cluster.ok());
  const std::vector<uint32_t> sub = {0, 1, 3, 4};
  const size_t count = 4099;
  for (int round = 0; round < 3; ++round) {
    auto world = Reduce<F32>(w, count, ReduceOp::Sum);
    ExpectEveryRankEqual<F32>(world, All(6));
    auto expected = TwoLevelExpected<F32>(count, {{0, 1, 2}, {3, 4, 5}}, ReduceOp::Sum);
    EXPECT_EQ(std::memcmp(world[0].data(), expected.data(), count * 4), 0);
    auto part = Reduce<F32>(w, count, ReduceOp::Sum, sub);
    ExpectEveryRankEqual<F32>(part, sub);
    auto part_expected = TwoLevelExpected<F32>(count, {{0, 1}, {3, 4}}, ReduceOp::Sum);
    EXPECT_EQ(std::memcmp(part[0].data(), part_expected.data(), count * 4), 0);
    auto pair = Reduce<F32>(w, count, ReduceOp::Sum, {0, 1});
    ExpectEveryRankEqual<F32>(pair, {0, 1});
  }
}

TEST(CommHierarchical, NamesTheScheduleEachAllReduceRuns) {
  World w("AABBCC", true);
  ASSERT_TRUE(w.cluster.ok());
  Communicator& c = w.cluster[0];
  const Group world = Group::World(6);
  // Each rank's share of 1 MiB is 512 KiB, above the 16 KiB switch: a
  // group of three hosts takes the ring, of two doubles.
  EXPECT_EQ(c.AllReduceAlgorithm(1 << 20, DType::F32, world, false),
            "two-level (shm reduce-scatter, tcp ring across 3 hosts, shm all-gather)");
  EXPECT_EQ(c.AllReduceAlgorithm(1 << 20, DType::F32, Group{{0, 1, 2, 3}}, false),
            "two-level (shm reduce-scatter, tcp doubling across 2 hosts, shm all-gather)");
  // Small shares double across the hosts too.
  EXPECT_EQ(c.AllReduceAlgorithm(4096, DType::F32, world, false),
            "two-level (shm reduce-scatter, tcp doubling across 3 hosts, shm all-gather)");
  // One element per rank of a host is not enough for two levels.
  EXPECT_EQ(c.AllReduceAlgorithm(4, DType::F32, world, false), "doubling");
  EXPECT_EQ(c.AllReduceAlgorithm(1 << 20, DType::F32, Group{{0, 1}}, false), "doubling");
  EXPECT_EQ(c.AllReduceAlgorithm(1 << 20, DType::F32, Group{{0, 2, 4}}, false), "ring");
  EXPECT_EQ(c.AllReduceAlgorithm(1 << 20, DType::F32, Group{{0}}, false), "none");
  EXPECT_EQ(c.AllReduceAlgorithm(0, DType::F32, world, false), "none");
  // Not its group, or a dtype that does not reduce.
  EXPECT_EQ(c.AllReduceAlgorithm(1 << 20, DType::F32, Group{{1, 2}}, false), "none");
  // No pair of this world shares memory with every other: never direct.
  EXPECT_EQ(c.AllReduceAlgorithm(1 << 20, DType::F32, Group{{0, 1}}, true), "doubling");

  // And it is what runs: the result has the two-level order.
  auto got = Reduce<F32>(w, (1 << 20) / 4, ReduceOp::Sum, {0, 1, 2, 3});
  auto expected = TwoLevelExpected<F32>((1 << 20) / 4, {{0, 1}, {2, 3}}, ReduceOp::Sum);
  EXPECT_EQ(std::memcmp(got[0].data(), expected.data(), 1 << 20), 0);
}

TEST(CommHierarchical, TheKnobOffNamesTheFlatScheduleAndOverTcpTheTransportShows) {
  World off("AABB", false);
  ASSERT_TRUE(off.cluster.ok());
  EXPECT_EQ(off.cluster[0].AllReduceAlgorithm(1 << 20, DType::F32, Group::World(4), false), "ring");
  EXPECT_EQ(off.cluster[0].AllReduceAlgorithm(1024, DType::F32, Group::World(4), false), "doubling");

  const std::vector<std::string> hosts = Hosts("AABB");
  CommOptions tcp = Options(true);
  tcp.use_shared_memory = false;
  Cluster c(
      4, [&](uint32_t) { return tcp; }, [](uint32_t) { return uint64_t{42}; }, [&](uint32_t r) { return hosts[r]; });
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c[2].AllReduceAlgorithm(1 << 20, DType::F32, Group::World(4), false),
            "two-level (tcp reduce-scatter, tcp doubling across 2 hosts, tcp all-gather)");
}

TEST(CommHierarchical, RanksThatDisagreeOnTheKnobAreRefusedNamingIt) {
  Cluster c(2, [](uint32_t r) {
    CommOptions o = Options(r == 0);
    o.peer_timeout = std::chrono::milliseconds(3000);
    return o;
  });
  EXPECT_FALSE(c.create_status(0).ok());
  EXPECT_NE(c.create_status(0).message().find("hierarchical_allreduce"), std::string::npos)
      << c.create_status(0).ToString();
}

// ---- a model ---------------------------------------------------------------------

struct FakeHostsRun {
  std::vector<std::unique_ptr<InProcessDevice>> devices;
  std::unique_ptr<host::Model> model;
  testing::LossRecorder losses;
};

// Four in-process devices that claim two hosts (DeviceOptions::host_id)
// train the MLP data parallel for two passes.
void TrainOnFakeHosts(FakeHostsRun& run, bool hierarchical) {
  std::vector<DeviceLink*> links;
  for (int r = 0; r < 4; ++r) {
    DeviceOptions o = testing::OneThreadOptions();
    o.host_id = r < 2 ? "fake-host-a" : "fake-host-b";
    o.hierarchical_allreduce = hierarchical;
    run.devices.push_back(std::make_unique<InProcessDevice>(o));
    links.push_back(run.devices.back().get());
  }
  host::ModelOptions mo;
  mo.context.mode = host::ParallelMode::DataParallel;
  mo.context.device_num = 4;
  mo.context.gradients_mean = true;
  auto m = host::Model::Create(host::MakeMlpNetwork(8), host::LossSpec::SparseSoftmaxCrossEntropy(),
                               host::OptimizerSpec::Momentum(0.02f, 0.9f), links, mo);
  SINKRT_ASSERT_OK(m);
  run.model = std::move(m).value();
  testing::SyntheticData d = testing::MakeSyntheticData(8 * 4 * 10, 784, 10, 7);
  // Noisy labels keep the loss near 1, where the comparison sees the
  // gradients' rounding rather than the loss's own.
  testing::RandomizeQuarterOfLabels(d);
  SINKRT_ASSERT_OK(run.model->train(2, testing::MakeDataset(d, 8), {&run.losses}));
}

// The gradient buckets run in two levels, the device says so at load, every
// rank keeps bitwise the same parameters, and the losses track the flat
// schedules' within rounding.
TEST(CommHierarchical, DataParallelModelOnTwoFakeHostsReportsAndAgrees) {
  FakeHostsRun two, flat;
  TrainOnFakeHosts(two, true);
  TrainOnFakeHosts(flat, false);
  ASSERT_TRUE(two.model && flat.model);
  const std::vector<AllReduceBucket>& buckets = two.model->load_info().allreduce_buckets;
  ASSERT_FALSE(buckets.empty());
  for (const AllReduceBucket& b : buckets) {
    EXPECT_GT(b.bytes, 0u);
    EXPECT_EQ(b.algorithm.rfind("two-level (shm reduce-scatter, tcp ", 0), 0u) << b.algorithm;
  }
  for (const AllReduceBucket& b : flat.model->load_info().allreduce_buckets)
    EXPECT_EQ(b.algorithm.find("two-level"), std::string::npos) << b.algorithm;

  auto ref = two.model->ReadState(0);
  SINKRT_ASSERT_OK(ref);
  for (uint32_t r = 1; r < 4; ++r) {
    auto state = two.model->ReadState(r);
    SINKRT_ASSERT_OK(state);
    ASSERT_EQ(state->size(), ref->size());
    for (size_t i = 0; i < ref->size(); ++i)
      EXPECT_TRUE((*state)[i].second.data == (*ref)[i].second.data) << "rank " << r << ", " << (*ref)[i].first;
  }
  ASSERT_EQ(two.losses.losses.size(), flat.losses.losses.size());
  ASSERT_FALSE(two.losses.losses.empty());
  for (size_t i = 0; i < two.losses.losses.size(); ++i)
    EXPECT_NEAR(two.losses.losses[i], flat.losses.losses[i], 1e-5 * std::abs(flat.losses.losses[i])) << "step " << i;
}

}  // namespace
}  // namespace sinkrt::device
