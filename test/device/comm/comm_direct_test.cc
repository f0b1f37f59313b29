// The direct AllReduce (comm/algorithms/allreduce_direct.cc): ranks whose
// buffers lie in memory they shared (Communicator::ShareMemory) reduce
// straight out of each other's buffers. Ranks are threads with their own
// Communicator over real loopback TCP and POSIX shared memory, and in one
// case a real child process that is killed.
#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "device/src/comm/algorithms/reduce.h"
#include "device/src/comm/communicator.h"
#include "device/src/comm/rendezvous/listening_inbox.h"
#include "device/src/executor.h"
#include "sinkrt/host/compiler.h"
#include "support/comm_cluster.h"
#include "support/test_models.h"
#include "support/test_util.h"

namespace sinkrt::device {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using testing::Cluster;
using testing::OnEachRank;

// Shared memory between every pair; `direct_bytes` is the direct path's
// threshold (0: every size it can take; SIZE_MAX: never, the reference).
CommOptions Options(size_t direct_bytes, bool shm = true, milliseconds timeout = milliseconds(20000)) {
  CommOptions o;
  o.peer_timeout = timeout;
  o.segment_bytes = 4096;  // the reference's ring and doubling run many segments
  o.use_shared_memory = shm;
  o.direct_allreduce_bytes = direct_bytes;
  return o;
}

// The reference for a group of n: what the direct path promises to match
// bitwise, recursive doubling for two members (their default at every
// size), the ring for more.
CommOptions Reference(uint32_t n) {
  CommOptions o = Options(SIZE_MAX);
  if (n > 2) o.small_allreduce_bytes = 0;
  return o;
}

// Values spanning many magnitudes: float sums depend on the order.
std::vector<uint8_t> Input(DType dt, size_t count, uint32_t rank, uint64_t seed) {
  std::mt19937_64 rng(seed * 7919 + rank);
  std::uniform_real_distribution<double> mant(-1, 1);
  std::uniform_int_distribution<int> expo(-20, 20);
  std::vector<uint8_t> out(count * DTypeSize(dt));
  for (size_t i = 0; i < count; ++i) {
    uint8_t* p = out.data() + i * DTypeSize(dt);
    const double v = std::ldexp(mant(rng), expo(rng));
    if (dt == DType::F32) {
      const float f = static_cast<float>(v);
      std::memcpy(p, &f, 4);
    } else if (dt == DType::F64) {
      std::memcpy(p, &v, 8);
    } else if (dt == DType::BF16) {
      const uint16_t b = FloatToBf16(static_cast<float>(v));
      std::memcpy(p, &b, 2);
    } else {
      const int32_t k = static_cast<int32_t>(rng() % 2001) - 1000;
      std::memcpy(p, &k, 4);
    }
  }
  return out;
}

struct Case {
  DType dt;
  ReduceOp op;
};
constexpr Case kCases[] = {{DType::F32, ReduceOp::Sum},  {DType::F32, ReduceOp::Mean}, {DType::F64, ReduceOp::Sum},
                           {DType::BF16, ReduceOp::Sum}, {DType::I32, ReduceOp::Max},  {DType::F32, ReduceOp::Min}};

// Every rank's shared block, `bytes` each.
std::vector<SharedMemory> ShareAll(Cluster& c, size_t bytes) {
  std::vector<SharedMemory> blocks(c.size());
  for (uint32_t r = 0; r < c.size(); ++r) {
    auto b = c[r].ShareMemory(bytes);
    EXPECT_TRUE(b.ok()) << b.status().ToString();
    if (b.ok()) blocks[r] = std::move(b).value();
    EXPECT_EQ(blocks[r].data.size(), bytes);
  }
  return blocks;
}

class DirectAllReduce : public ::testing::TestWithParam<uint32_t> {};

TEST_P(DirectAllReduce, EqualsTheDefaultScheduleBitwiseOnEveryRank) {
  const uint32_t n = GetParam();
  Cluster direct(n, Options(0));
  Cluster reference(n, Reference(n));
  ASSERT_TRUE(direct.ok() && reference.ok());
  // Counts: one element per member (the least the direct path takes), not
  // divisible by the members, one that spans the 16 KiB blocks of a
  // larger group's accumulation several times with a remainder, and (f32
  // only) one whose chunks go in several segments of about 1 MiB.
  constexpr size_t kSegmented = 1200007;
  const std::vector<size_t> counts = {n, 1001, 65536 + 5, kSegmented};
  std::vector<SharedMemory> blocks = ShareAll(direct, kSegmented * 4);
  const Group world = Group::World(n);
  uint64_t expected_direct = 0;
  for (size_t count : counts) {
    for (const Case& k : kCases) {
      if (count == kSegmented && k.dt != DType::F32) continue;
      SCOPED_TRACE(std::to_string(count) + " x " + DTypeName(k.dt) + " op " + std::to_string(int(k.op)));
      const size_t bytes = count * DTypeSize(k.dt);
      std::vector<std::vector<uint8_t>> want(n);
      std::vector<Status> st(n), ref_st(n);
      for (uint32_t r = 0; r < n; ++r) {
        want[r] = Input(k.dt, count, r, count);
        std::memcpy(blocks[r].data.data(), want[r].data(), bytes);
      }
      OnEachRank(n, [&](uint32_t r) {
        st[r] = direct[r].AllReduce(blocks[r].data.first(bytes), k.dt, k.op, world);
        ref_st[r] = reference[r].AllReduce(want[r], k.dt, k.op, world);
      });
      ++expected_direct;
      for (uint32_t r = 0; r < n; ++r) {
        ASSERT_TRUE(st[r].ok()) << st[r].ToString();
        ASSERT_TRUE(ref_st[r].ok()) << ref_st[r].ToString();
        EXPECT_EQ(direct[r].direct_allreduces(), expected_direct) << "rank " << r << " did not read directly";
        EXPECT_EQ(0, std::memcmp(blocks[r].data.data(), want[0].data(), bytes))
            << "rank " << r << " differs from the reference";
      }
    }
  }
}

TEST_P(DirectAllReduce, BuffersAtDifferentOffsetsFindEachOther) {
  const uint32_t n = GetParam();
  Cluster c(n, Options(0));
  ASSERT_TRUE(c.ok());
  constexpr size_t kCount = 3000;
  std::vector<SharedMemory> blocks = ShareAll(c, 64 << 10);
  std::vector<std::span<uint8_t>> bufs(n);
  // As sharded streams place one buffer differently on each rank.
  for (uint32_t r = 0; r < n; ++r) {
    bufs[r] = blocks[r].data.subspan(4 + r * 4100, kCount * 4);
    for (size_t i = 0; i < kCount; ++i) {
      const float v = static_cast<float>(r + 1) * static_cast<float>(i);
      std::memcpy(bufs[r].data() + i * 4, &v, 4);
    }
  }
  std::vector<Status> st(n);
  OnEachRank(n, [&](uint32_t r) { st[r] = c[r].AllReduce(bufs[r], DType::F32, ReduceOp::Sum, Group::World(n)); });
  const float sum_ranks = static_cast<float>(n * (n + 1) / 2);
  for (uint32_t r = 0; r < n; ++r) {
    ASSERT_TRUE(st[r].ok()) << st[r].ToString();
    EXPECT_EQ(c[r].direct_allreduces(), 1u);
    for (size_t i = 0; i < kCount; i += 97) {
      float got;
      std::memcpy(&got, bufs[r].data() + i * 4, 4);
      EXPECT_EQ(got, sum_ranks * static_cast<float>(i)) << "rank " << r << " element " << i;
    }
  }
}

TEST_P(DirectAllReduce, ABufferOutsideSharedMemoryFallsBackOnEveryRank) {
  const uint32_t n = GetParam();
  Cluster c(n, Options(0));
  ASSERT_TRUE(c.ok());
  constexpr size_t kCount = 5003;
  std::vector<SharedMemory> blocks = ShareAll(c, kCount * 4);
  std::vector<float> own(kCount);  // the last rank's buffer: its own heap
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE(round == 0 ? "last rank's buffer private" : "every buffer shared");
    std::vector<std::span<uint8_t>> bufs(n);
    for (uint32_t r = 0; r < n; ++r) {
      bufs[r] =
          round == 0 && r == n - 1 ? std::span(reinterpret_cast<uint8_t*>(own.data()), kCount * 4) : blocks[r].data;
      for (size_t i = 0; i < kCount; ++i) {
        const float v = static_cast<float>(r + 1);
        std::memcpy(bufs[r].data() + i * 4, &v, 4);
      }
    }
    std::vector<Status> st(n);
    OnEachRank(n, [&](uint32_t r) { st[r] = c[r].AllReduce(bufs[r], DType::F32, ReduceOp::Sum, Group::World(n)); });
    for (uint32_t r = 0; r < n; ++r) {
      ASSERT_TRUE(st[r].ok()) << st[r].ToString();
      // The fallback leaves the pairs' counters in step: the next op reads directly.
      EXPECT_EQ(c[r].direct_allreduces(), round == 0 ? 0u : 1u) << "rank " << r;
      for (size_t i = 0; i < kCount; i += 101) {
        float got;
        std::memcpy(&got, bufs[r].data() + i * 4, 4);
        EXPECT_EQ(got, static_cast<float>(n * (n + 1) / 2)) << "rank " << r << " element " << i;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, DirectAllReduce, ::testing::Values(2u, 4u),
                         [](const auto& info) { return std::to_string(info.param) + "ranks"; });

TEST(DirectAllReduceSetup, AWorldOverTcpSharesNothing) {
  Cluster c(2, Options(0, /*shm=*/false));
  ASSERT_TRUE(c.ok());
  for (uint32_t r = 0; r < 2; ++r) {
    auto b = c[r].ShareMemory(4096);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    EXPECT_TRUE(b->data.empty());
  }
}

TEST(DirectAllReduceSetup, TinyBuffersAndTheThresholdKeepTheRings) {
  CommOptions o = Options(16 << 10);
  Cluster c(2, o);
  ASSERT_TRUE(c.ok());
  std::vector<SharedMemory> blocks = ShareAll(c, 64 << 10);
  // One element (fewer than one per member), a buffer below the
  // threshold, one at it.
  const std::vector<std::pair<size_t, uint64_t>> sizes_and_direct = {{4, 0}, {(16 << 10) - 4, 0}, {16 << 10, 1}};
  for (auto [bytes, direct] : sizes_and_direct) {
    SCOPED_TRACE(std::to_string(bytes) + " bytes");
    std::vector<Status> st(2);
    for (uint32_t r = 0; r < 2; ++r) std::fill_n(reinterpret_cast<float*>(blocks[r].data.data()), bytes / 4, 1.5f);
    OnEachRank(2, [&](uint32_t r) {
      st[r] = c[r].AllReduce(blocks[r].data.first(bytes), DType::F32, ReduceOp::Sum, Group::World(2));
    });
    for (uint32_t r = 0; r < 2; ++r) {
      ASSERT_TRUE(st[r].ok()) << st[r].ToString();
      EXPECT_EQ(c[r].direct_allreduces(), direct);
      EXPECT_EQ(reinterpret_cast<float*>(blocks[r].data.data())[bytes / 4 - 1], 3.0f);
    }
  }
}

TEST(DirectAllReduceSetup, LeavesNothingInDevShmOnceMapped) {
  auto ours = [] {
    int count = 0;
    char pid[32];
    std::snprintf(pid, sizeof pid, "-%d-", static_cast<int>(::getpid()));
    if (DIR* d = ::opendir("/dev/shm")) {
      while (dirent* e = ::readdir(d)) {
        std::string name = e->d_name;
        if (name.rfind("sinkrt-blk-", 0) == 0 && name.find(pid) != std::string::npos) ++count;
      }
      ::closedir(d);
    }
    return count;
  };
  {
    Cluster c(3, Options(0));
    ASSERT_TRUE(c.ok());
    std::vector<SharedMemory> blocks = ShareAll(c, 8192);
    EXPECT_EQ(ours(), 3);  // named until the peers map them
    std::vector<Status> st(3);
    OnEachRank(3,
               [&](uint32_t r) { st[r] = c[r].AllReduce(blocks[r].data, DType::F32, ReduceOp::Sum, Group::World(3)); });
    for (uint32_t r = 0; r < 3; ++r) ASSERT_TRUE(st[r].ok()) << st[r].ToString();
    EXPECT_EQ(ours(), 0);  // each removed by the last of its two peers to map it
    // A block no peer ever maps goes with the communicator.
    blocks = ShareAll(c, 8192);
    EXPECT_EQ(ours(), 3);
  }
  EXPECT_EQ(ours(), 0);
}

TEST(DirectAllReduceFailures, DifferentSizesFailAtOnceNamingBoth) {
  Cluster c(2, Options(0, true, milliseconds(60000)));
  ASSERT_TRUE(c.ok());
  std::vector<SharedMemory> blocks = ShareAll(c, 64 << 10);
  std::vector<Status> st(2);
  const auto start = Clock::now();
  OnEachRank(2, [&](uint32_t r) {
    st[r] = c[r].AllReduce(blocks[r].data.first(r == 0 ? 8192 : 4096), DType::F32, ReduceOp::Sum, Group::World(2));
  });
  EXPECT_LT(Clock::now() - start, milliseconds(30000));  // not the 60 s peer timeout
  for (uint32_t r = 0; r < 2; ++r) {
    EXPECT_EQ(st[r].code(), StatusCode::kFailedPrecondition) << st[r].ToString();
    EXPECT_NE(st[r].message().find("AllReduce #1"), std::string::npos) << st[r].ToString();
  }
}

TEST(DirectAllReduceFailures, DestroyedPeerFailsTheOthersNamingIt) {
  Cluster c(3, Options(0, true, milliseconds(60000)));
  ASSERT_TRUE(c.ok());
  std::vector<SharedMemory> blocks = ShareAll(c, 64 << 10);
  std::vector<Status> st(3);
  const auto start = Clock::now();
  // Rank 2 goes instead of calling; whether before or after the others
  // wait for it, they learn it from its connection, not from a timeout.
  OnEachRank(3, [&](uint32_t r) {
    if (r == 2) {
      c.Destroy(2);
      return;
    }
    st[r] = c[r].AllReduce(blocks[r].data, DType::F32, ReduceOp::Sum, Group::World(3));
  });
  EXPECT_LT(Clock::now() - start, milliseconds(30000));
  for (uint32_t r = 0; r < 2; ++r) {
    EXPECT_FALSE(st[r].ok());
    EXPECT_TRUE(st[r].message().find("rank 2 closed its connection during AllReduce #1") != std::string::npos ||
                st[r].message().find("rank 2 failed") != std::string::npos ||
                st[r].message().find("closed its connection") != std::string::npos)
        << st[r].ToString();
  }
}

// A real process dies: rank 1 is forked, joins, reads rank 0's memory in
// one AllReduce and is killed (SIGKILL: no goodbye) while rank 0 is in
// the next one. Rank 0 must fail naming it, long before its peer timeout,
// and its mapping of the dead rank's block stays readable.
TEST(DirectAllReduceFailures, KilledPeerProcessFailsTheSurvivorInsteadOfHangingIt) {
  int port_pipe[2], go_pipe[2];
  ASSERT_EQ(::pipe(port_pipe), 0);
  ASSERT_EQ(::pipe(go_pipe), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Rank 1: no gtest assertions here, only an exit code.
    auto inbox = ListeningInbox::Start();
    if (!inbox.ok()) ::_exit(2);
    const uint16_t port = (*inbox)->address().port;
    if (::write(port_pipe[1], &port, sizeof port) != sizeof port) ::_exit(3);
    uint16_t port0 = 0;
    if (::read(go_pipe[0], &port0, sizeof port0) != sizeof port0) ::_exit(4);
    std::vector<PeerAddress> world = {{0, Address{"127.0.0.1", port0}, LocalHostId()},
                                      {1, (*inbox)->address(), LocalHostId()}};
    auto comm = Communicator::Create(1, world, 77, **inbox, Options(0, true, milliseconds(60000)));
    if (!comm.ok()) ::_exit(5);
    auto block = (*comm)->ShareMemory(1 << 20);
    if (!block.ok() || block->data.empty()) ::_exit(6);
    std::fill_n(reinterpret_cast<float*>(block->data.data()), (1 << 20) / 4, 2.0f);
    if (!(*comm)->AllReduce(block->data, DType::F32, ReduceOp::Sum, Group::World(2)).ok()) ::_exit(7);
    if ((*comm)->direct_allreduces() != 1) ::_exit(8);
    for (;;) ::pause();  // until killed
  }
  ::close(port_pipe[1]);
  ::close(go_pipe[0]);
  uint16_t port1 = 0;
  ASSERT_EQ(::read(port_pipe[0], &port1, sizeof port1), static_cast<ssize_t>(sizeof port1));
  auto inbox = ListeningInbox::Start();
  ASSERT_TRUE(inbox.ok());
  const uint16_t port0 = (*inbox)->address().port;
  ASSERT_EQ(::write(go_pipe[1], &port0, sizeof port0), static_cast<ssize_t>(sizeof port0));
  std::vector<PeerAddress> world = {{0, (*inbox)->address(), LocalHostId()},
                                    {1, Address{"127.0.0.1", port1}, LocalHostId()}};
  auto comm = Communicator::Create(0, world, 77, **inbox, Options(0, true, milliseconds(60000)));
  ASSERT_TRUE(comm.ok()) << comm.status().ToString();
  auto block = (*comm)->ShareMemory(1 << 20);
  ASSERT_TRUE(block.ok() && !block->data.empty());
  std::fill_n(reinterpret_cast<float*>(block->data.data()), (1 << 20) / 4, 1.0f);
  SINKRT_ASSERT_OK((*comm)->AllReduce(block->data, DType::F32, ReduceOp::Sum, Group::World(2)));
  EXPECT_EQ((*comm)->direct_allreduces(), 1u);
  EXPECT_EQ(reinterpret_cast<float*>(block->data.data())[12345], 3.0f);

  const auto start = Clock::now();
  std::thread killer([&] { ::kill(child, SIGKILL); });
  Status st = (*comm)->AllReduce(block->data, DType::F32, ReduceOp::Sum, Group::World(2));
  killer.join();
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_TRUE(WIFSIGNALED(status)) << "the child exited " << WEXITSTATUS(status) << " before it was killed";
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();
  EXPECT_NE(st.message().find("rank 1 closed its connection during AllReduce #2"), std::string::npos) << st.ToString();
  EXPECT_LT(Clock::now() - start, milliseconds(30000));  // the peer timeout is 60 s
}

// Data-parallel training on two executors: with the arenas shared, the
// gradient AllReduces read each other's arenas (a 2.1 MB bucket, over the
// 1 MiB default threshold) and the parameters after the steps are bitwise
// those of the same run through the rings, and equal on both ranks.
TEST(DirectAllReduceExecutor, SharedArenasTrainBitwiseAsPrivateOnes) {
  constexpr uint32_t kRanks = 2;
  constexpr int64_t kBatch = 16;
  constexpr uint32_t kSteps = 4;
  host::CompileOptions o;
  o.optimizer = host::OptimizerSpec::Momentum(0.01f, 0.9f);
  o.parallel_mode = host::ParallelMode::DataParallel;
  o.world_size = kRanks;
  o.gradients_mean = true;
  std::vector<host::CompiledStream> streams;
  for (uint32_t r = 0; r < kRanks; ++r) {
    o.rank = r;
    auto cs = host::Compile(sinkrt::testing::MakeMlp(kBatch), o);
    SINKRT_ASSERT_OK(cs);
    streams.push_back(std::move(cs).value());
  }
  const auto data = sinkrt::testing::MakeSyntheticData(kBatch * kRanks * kSteps, 784, 10, 3);
  // Every Param buffer's bytes after the steps, per rank.
  auto train = [&](bool shared, uint64_t* direct_ops) {
    CommOptions co;
    co.peer_timeout = milliseconds(60000);
    Cluster c(kRanks, co);
    EXPECT_TRUE(c.ok());
    std::vector<std::vector<uint8_t>> params(kRanks);
    if (!c.ok()) return params;
    std::vector<std::unique_ptr<Executor>> ex(kRanks);
    DeviceOptions d;
    d.threads = 1;
    d.shared_arena = shared;
    // One after the other: sharing at load waits for no peer.
    for (uint32_t r = 0; r < kRanks; ++r) {
      auto loaded = Executor::Load(streams[r].stream, d, &c[r]);
      EXPECT_TRUE(loaded.ok()) << loaded.status().ToString();
      if (!loaded.ok()) return params;
      ex[r] = std::move(loaded).value();
    }
    std::vector<Status> st(kRanks);
    OnEachRank(kRanks, [&](uint32_t r) {
      for (uint32_t i = 0; i < kSteps; ++i) {
        const size_t batch = i * kRanks + r;
        std::vector<ConstBytes> cols;
        for (const std::string& col : streams[r].input_columns) {
          if (col == "image")
            cols.emplace_back(reinterpret_cast<const uint8_t*>(data.images.data() + batch * kBatch * 784),
                              size_t{kBatch} * 784 * 4);
          if (col == "label")
            cols.emplace_back(reinterpret_cast<const uint8_t*>(data.labels.data() + batch * kBatch),
                              size_t{kBatch} * 4);
        }
        st[r] = ex[r]->PushBatch(0, cols);
        if (!st[r].ok()) return;
      }
      RunStats stats;
      st[r] = ex[r]->Run(ProgramKind::TrainStep, kSteps, &stats);
    });
    for (uint32_t r = 0; r < kRanks; ++r) {
      EXPECT_TRUE(st[r].ok()) << st[r].ToString();
      const auto* buffers = streams[r].stream.root()->buffers();
      for (uint32_t i = 0; i < buffers->size(); ++i) {
        if (buffers->Get(i)->role() != fb::BufferRole::Param) continue;
        auto bytes = ex[r]->Buffer(i);
        EXPECT_TRUE(bytes.ok());
        if (bytes.ok()) params[r].insert(params[r].end(), bytes->begin(), bytes->end());
      }
    }
    *direct_ops = c[0].direct_allreduces();
    ex.clear();
    return params;
  };
  uint64_t direct_shared = 0, direct_private = 0;
  const auto shared = train(true, &direct_shared);
  const auto rings = train(false, &direct_private);
  EXPECT_GE(direct_shared, kSteps) << "the gradient bucket did not read the peer's arena";
  EXPECT_EQ(direct_private, 0u);
  ASSERT_FALSE(shared[0].empty());
  EXPECT_EQ(shared[0], shared[1]) << "replicas differ";
  EXPECT_EQ(shared[0], rings[0]) << "shared arenas trained other bits than private ones";
  EXPECT_EQ(rings[0], rings[1]);
}

}  // namespace
}  // namespace sinkrt::device
