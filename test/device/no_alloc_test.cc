// The device allocates nothing while steps run (DESIGN §5).
//
// This binary replaces malloc and operator new with counting versions. While
// the counter is armed, every allocation on any thread counts against
// sinkrt, except those made inside a oneDNN primitive execution: we interpose
// dnnl_primitive_execute to mark that scope, because oneDNN 2.6 builds a
// std::unordered_map of arguments on every call (primitive.cpp,
// exec_ctx_t) — a cost we cannot remove from outside the library, so the
// test measures it separately and checks it stays constant per step. Some
// primitives (LeNet's) also allocate on their OpenMP worker threads; those
// count as oneDNN's too, since nothing of ours runs while a primitive does.
//
// NOALLOC_TRACE=1 prints a backtrace of every allocation counted as ours
// (addr2line -f -C -e test/no_alloc_test ADDR... names the frames).
#include <dlfcn.h>
#include <execinfo.h>
#include <gtest/gtest.h>
#include <malloc.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "device/src/comm/communicator.h"
#include "device/src/comm/rendezvous/listening_inbox.h"
#include "device/src/executor.h"
#include "sinkrt/device/in_process_device.h"
#include "sinkrt/fb/task_stream_generated.h"
#include "sinkrt/host/compiler.h"
#include "support/comm_cluster.h"
#include "support/feeder.h"
#include "support/test_models.h"
#include "support/test_util.h"

namespace {
std::atomic<bool> g_armed{false};
std::atomic<int64_t> g_ours{0};
std::atomic<int64_t> g_dnnl{0};
std::atomic<int64_t> g_dnnl_calls{0};
std::atomic<int> g_dnnl_in_flight{0};
thread_local bool t_in_dnnl = false;
// Data-parallel runs have several threads of ours at once (a compute and a
// comm stream per rank, the TCP I/O thread); with one kernel thread per
// device oneDNN runs on its caller only, so attribution is per thread.
std::atomic<bool> g_per_thread{false};

void Count() {
  if (!g_armed.load(std::memory_order_relaxed)) return;
  if (g_per_thread.load(std::memory_order_relaxed)) {
    (t_in_dnnl ? g_dnnl : g_ours).fetch_add(1, std::memory_order_relaxed);
    static thread_local bool tracing = false;
    if (!t_in_dnnl && !tracing && getenv("NOALLOC_TRACE")) {
      tracing = true;
      void* frames[24];
      int n = backtrace(frames, 24);
      backtrace_symbols_fd(frames, n, 2);
      write(2, "----\n", 5);
      tracing = false;
    }
    return;
  }
  // While a primitive executes, oneDNN's OpenMP workers run only oneDNN
  // code (some 2.6 primitives allocate per-thread buffers there), and no
  // thread of ours runs in this test but the one that called it.
  if (g_dnnl_in_flight.load(std::memory_order_relaxed) > 0)
    g_dnnl.fetch_add(1, std::memory_order_relaxed);
  else
    g_ours.fetch_add(1, std::memory_order_relaxed);
}
}  // namespace

extern "C" {
void* __libc_malloc(size_t);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void* __libc_memalign(size_t, size_t);
void __libc_free(void*);

void* malloc(size_t n) {
  Count();
  return __libc_malloc(n);
}
void* calloc(size_t a, size_t b) {
  Count();
  return __libc_calloc(a, b);
}
void* realloc(void* p, size_t n) {
  Count();
  return __libc_realloc(p, n);
}
int posix_memalign(void** out, size_t align, size_t n) {
  Count();
  void* p = __libc_memalign(align, n);
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}
void* aligned_alloc(size_t align, size_t n) {
  Count();
  return __libc_memalign(align, n);
}

// Interposes oneDNN's entry point to attribute allocations made inside it.
dnnl_status_t dnnl_primitive_execute(const_dnnl_primitive_t p, dnnl_stream_t s, int nargs,
                                     const dnnl_exec_arg_t* args) {
  using Fn = dnnl_status_t (*)(const_dnnl_primitive_t, dnnl_stream_t, int, const dnnl_exec_arg_t*);
  static Fn real = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "dnnl_primitive_execute"));
  if (g_armed.load(std::memory_order_relaxed)) g_dnnl_calls.fetch_add(1, std::memory_order_relaxed);
  g_dnnl_in_flight.fetch_add(1);
  t_in_dnnl = true;
  dnnl_status_t st = real(p, s, nargs, args);
  t_in_dnnl = false;
  g_dnnl_in_flight.fetch_sub(1);
  return st;
}
}  // extern "C"

void* operator new(size_t n) {
  Count();
  void* p = __libc_malloc(n ? n : 1);
  if (!p) throw std::bad_alloc();
  return p;
}
void* operator new[](size_t n) { return operator new(n); }
// The deletes release with the allocator operator new took the memory from
// (__libc_malloc): free() on it is what GCC 12 flags -Wmismatched-new-delete.
void operator delete(void* p) noexcept { __libc_free(p); }
void operator delete[](void* p) noexcept { __libc_free(p); }
void operator delete(void* p, size_t) noexcept { __libc_free(p); }
void operator delete[](void* p, size_t) noexcept { __libc_free(p); }

namespace sinkrt {
namespace {

struct Counts {
  int64_t ours, dnnl, dnnl_calls;
};

// Runs `steps` train steps through the Executor with the counter armed. The
// batches are pushed before arming, so only the device's own work counts.
// `group`: batches per queue entry (gradient accumulation's K; the same
// batch K times is enough here).
Counts CountRun(device::Executor& ex, const testing::SyntheticData& data, int64_t batch, uint32_t steps,
                int group = 1) {
  for (uint32_t i = 0; i < steps; ++i) {
    const size_t ib = static_cast<size_t>(batch * data.features) * 4;
    std::vector<ConstBytes> cols;
    for (int k = 0; k < group; ++k) {
      cols.emplace_back(reinterpret_cast<const uint8_t*>(data.images.data() + i * batch * data.features), ib);
      cols.emplace_back(reinterpret_cast<const uint8_t*>(data.labels.data() + i * batch), batch * 4);
    }
    EXPECT_TRUE(ex.PushBatch(0, cols).ok());
  }
  device::RunStats stats;
  g_ours = g_dnnl = g_dnnl_calls = 0;
  g_armed = true;
  Status st = ex.Run(ProgramKind::TrainStep, steps, &stats);
  g_armed = false;
  EXPECT_TRUE(st.ok()) << st.ToString();
  return {g_ours.load(), g_dnnl.load(), g_dnnl_calls.load()};
}

// With profiling on, every step is recorded into rings sized by
// SetProfiling: `keep` steps, fewer than the 12-step run, so they wrap too.
constexpr uint32_t kKeepSteps = 8;

void ExpectNoAllocations(const host::Graph& g, int64_t batch, int64_t features, bool profiling = false,
                         int accumulate = 1, host::AmpLevel amp = host::AmpLevel::O0,
                         const host::LossScaleManager& loss_scale = {}) {
  host::CompileOptions o;
  o.optimizer = host::OptimizerSpec::Adam(0.001f);
  o.grad_accumulation = accumulate;
  o.amp_level = amp;
  o.loss_scale = loss_scale;
  auto cs = host::Compile(g, o);
  SINKRT_ASSERT_OK(cs);
  auto ex = device::Executor::Load(cs->stream, device::DeviceOptions{});
  SINKRT_ASSERT_OK(ex);
  if (profiling) SINKRT_ASSERT_OK((*ex)->SetProfiling({.enabled = true, .keep_steps = kKeepSteps}));
  auto data = testing::MakeSyntheticData(batch * 12, features, 10, 1);
  CountRun(**ex, data, batch, 2, accumulate);  // warm-up: lazily created OpenMP state
  Counts four = CountRun(**ex, data, batch, 4, accumulate);
  Counts twelve = CountRun(**ex, data, batch, 12, accumulate);
  EXPECT_EQ(four.ours, 0) << "sinkrt allocated during a 4-step run";
  EXPECT_EQ(twelve.ours, 0) << "sinkrt allocated during a 12-step run";
  if (profiling) {
    // The last kKeepSteps steps of the 12, every task of each.
    const fb::Program* train = cs->stream.FindProgram(ProgramKind::TrainStep);
    size_t tasks = 0;
    for (const fb::Stream* st : *train->streams()) tasks += st->tasks()->size();
    EXPECT_EQ((*ex)->LastProfile().records(), tasks * kKeepSteps);
    EXPECT_EQ((*ex)->LastProfile().sink.task, 12u);  // steps recorded, before the ring kept the last ones
  }
  // oneDNN's own per-execute allocations are a fixed number per call.
  ASSERT_GT(twelve.dnnl_calls, 0);
  EXPECT_EQ(twelve.dnnl * four.dnnl_calls, four.dnnl * twelve.dnnl_calls);
  std::printf("[ info ] %s: sinkrt allocations per step: 0; oneDNN-internal allocations per execute: %.2f\n",
              g.name().c_str(), twelve.dnnl_calls ? double(twelve.dnnl) / twelve.dnnl_calls : 0.0);
}

std::atomic<bool> done_[2];

// Two ranks of a data-parallel MLP, each an Executor with its own
// Communicator, run their steps at once: after a warm-up, neither the
// compute and comm streams nor the transport allocate.
// With `pipeline`, the two ranks are two pipeline stages (4 micro-batches,
// 1F1B): their Send/Recv transfers on the comm stream allocate nothing either.
// With `amp`, the ranks run amp O2 with a dynamic loss scale: the bf16
// kernels, the overflow check on the reduced gradients, the scaled updates.
// With `zero` (optimizer parallel): the sharded updates, a fused blocked
// ReduceScatter of both large gradients and their AllGathers.
void ExpectDataParallelNoAllocations(bool shared_memory, bool profiling = false, bool pipeline = false,
                                     bool amp = false, bool zero = false) {
  constexpr uint32_t kRanks = 2;
  constexpr int64_t kBatch = 32;
  std::vector<std::unique_ptr<device::ListeningInbox>> inboxes;
  std::vector<device::PeerAddress> world;
  for (uint32_t r = 0; r < kRanks; ++r) {
    auto inbox = device::ListeningInbox::Start();
    SINKRT_ASSERT_OK(inbox);
    world.push_back({r, (*inbox)->address(), device::LocalHostId()});
    inboxes.push_back(std::move(inbox).value());
  }
  std::vector<std::unique_ptr<device::Communicator>> comms(kRanks);
  std::vector<Status> joined(kRanks);
  {
    std::vector<std::thread> threads;
    for (uint32_t r = 0; r < kRanks; ++r)
      threads.emplace_back([&, r] {
        device::CommOptions o;
        o.use_shared_memory = shared_memory;
        auto c = device::Communicator::Create(r, world, 77, *inboxes[r], o);
        joined[r] = c.status();
        if (c.ok()) comms[r] = std::move(c).value();
      });
    for (auto& t : threads) t.join();
  }
  for (uint32_t r = 0; r < kRanks; ++r) SINKRT_ASSERT_OK(joined[r]);

  host::CompileOptions o;
  o.optimizer = host::OptimizerSpec::Momentum(0.01f, 0.9f);
  o.parallel_mode = host::ParallelMode::DataParallel;
  o.world_size = kRanks;
  o.gradients_mean = true;
  o.comm_fusion.size_mb = 1;  // several buckets, so several AllReduces per step
  o.comm_fusion.mode = "size";
  if (pipeline) o.pipeline = {.stages = 2, .micro_size = 4, .scheduler = "1f1b", .stage_of = {}};
  if (zero) {
    o.optimizer = host::OptimizerSpec::Adam(1e-3f);
    o.enable_parallel_optimizer = true;
    o.comm_fusion.reducescatter = {.mode = "size", .size_mb = 8};  // both large gradients: one blocked ReduceScatter
    o.comm_fusion.allgather = {.mode = "size", .size_mb = 1};      // each parameter's own AllGather
  }
  if (amp) {
    o.amp_level = host::AmpLevel::O2;
    o.loss_scale = host::LossScaleManager::Dynamic(1024.0f, 2.0f, 3);
  }
  std::vector<host::CompiledStream> streams;
  std::vector<std::unique_ptr<device::Executor>> executors;
  device::DeviceOptions d;
  d.threads = 1;
  for (uint32_t r = 0; r < kRanks; ++r) {
    o.rank = r;
    auto cs = host::Compile(testing::MakeMlp(kBatch), o);
    SINKRT_ASSERT_OK(cs);
    streams.push_back(std::move(cs).value());
  }
  for (uint32_t r = 0; r < kRanks; ++r) {
    auto ex = device::Executor::Load(streams[r].stream, d, comms[r].get());
    SINKRT_ASSERT_OK(ex);
    if (profiling) SINKRT_ASSERT_OK((*ex)->SetProfiling({.enabled = true, .keep_steps = kKeepSteps}));
    executors.push_back(std::move(ex).value());
  }
  auto data = testing::MakeSyntheticData(kBatch * 12, 784, 10, 1);
  auto run = [&](uint32_t steps) {
    for (uint32_t r = 0; r < kRanks; ++r)
      for (uint32_t i = 0; i < steps; ++i) {
        const size_t ib = static_cast<size_t>(kBatch * 784) * 4;
        // A pipeline's first stage takes the images, its last the labels.
        std::vector<ConstBytes> cols;
        for (const std::string& c : streams[r].input_columns) {
          if (c == "image")
            cols.emplace_back(reinterpret_cast<const uint8_t*>(data.images.data() + i * kBatch * 784), ib);
          if (c == "label")
            cols.emplace_back(reinterpret_cast<const uint8_t*>(data.labels.data() + i * kBatch), kBatch * 4);
        }
        EXPECT_TRUE(executors[r]->PushBatch(0, cols).ok());
      }
    done_[1] = false;
    std::vector<Status> st(kRanks);
    std::vector<device::RunStats> stats(kRanks);
    // Creating a thread allocates: rank 1's starts before the counter is
    // armed and waits at a gate.
    std::atomic<bool> go{false}, ready{false};
    std::thread other([&] {
      // libgomp sets up a new thread's state on its first OpenMP call; a
      // daemon's sink thread lives for the whole job, this one per run.
      omp_set_num_threads(1);
      ready = true;
      while (!go.load()) std::this_thread::yield();
      st[1] = executors[1]->Run(ProgramKind::TrainStep, steps, &stats[1]);
      done_[1] = true;
    });
    while (!ready.load()) std::this_thread::yield();
    g_ours = g_dnnl = g_dnnl_calls = 0;
    g_per_thread = true;
    g_armed = true;
    go = true;
    st[0] = executors[0]->Run(ProgramKind::TrainStep, steps, &stats[0]);
    while (!done_[1].load()) std::this_thread::yield();
    g_armed = false;
    other.join();
    g_per_thread = false;
    for (uint32_t r = 0; r < kRanks; ++r) EXPECT_TRUE(st[r].ok()) << st[r].ToString();
    EXPECT_GT(stats[0].comm_ns, 0);
    return Counts{g_ours.load(), g_dnnl.load(), g_dnnl_calls.load()};
  };
  run(2);  // warm-up: first-use state of the streams and the transport
  Counts four = run(4);
  Counts twelve = run(12);
  EXPECT_EQ(four.ours, 0) << "sinkrt allocated during a 4-step data-parallel run";
  EXPECT_EQ(twelve.ours, 0) << "sinkrt allocated during a 12-step data-parallel run";
  if (profiling) {
    for (auto& ex : executors) EXPECT_GT(ex->LastProfile().runs[2].size() + ex->LastProfile().runs[3].size(), 0u);
  }
  ASSERT_GT(twelve.dnnl_calls, 0);
  EXPECT_EQ(twelve.dnnl * four.dnnl_calls, four.dnnl * twelve.dnnl_calls);
  executors.clear();
  comms.clear();
}

TEST(NoAlloc, DataParallelStepsOverSharedMemoryAllocateNothing) { ExpectDataParallelNoAllocations(true); }
TEST(NoAlloc, DataParallelStepsOverTcpAllocateNothing) { ExpectDataParallelNoAllocations(false); }
TEST(NoAlloc, ProfiledDataParallelStepsAllocateNothing) { ExpectDataParallelNoAllocations(true, true); }
TEST(NoAlloc, PipelineStagesOverSharedMemoryAllocateNothing) { ExpectDataParallelNoAllocations(true, false, true); }
TEST(NoAlloc, PipelineStagesOverTcpAllocateNothing) { ExpectDataParallelNoAllocations(false, false, true); }
TEST(NoAlloc, OptimizerParallelStepsOverSharedMemoryAllocateNothing) {
  ExpectDataParallelNoAllocations(true, false, false, false, true);
}
TEST(NoAlloc, OptimizerParallelStepsOverTcpAllocateNothing) {
  ExpectDataParallelNoAllocations(false, false, false, false, true);
}
TEST(NoAlloc, AmpLossScaledDataParallelStepsAllocateNothing) {
  ExpectDataParallelNoAllocations(true, false, false, true);
}

// The small segments the collective no-allocation tests use, over shared
// memory or TCP.
device::CommOptions SmallSegmentComm(bool shared_memory) {
  device::CommOptions o;
  o.use_shared_memory = shared_memory;
  o.segment_bytes = 4096;
  return o;
}

// Runs fn(rank) on one thread per rank with the allocation counter armed
// (per thread) from when every thread waits at the gate until all are done:
// starting the threads, which allocates, stays out of the count.
void CountOnEachRank(uint32_t ranks, const std::function<void(uint32_t)>& fn) {
  std::atomic<uint32_t> ready{0}, done{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      ++ready;
      while (!go.load()) std::this_thread::yield();
      fn(r);
      ++done;
    });
  while (ready.load() < ranks) std::this_thread::yield();
  g_ours = g_dnnl = g_dnnl_calls = 0;
  g_per_thread = true;
  g_armed = true;
  go = true;
  while (done.load() < ranks) std::this_thread::yield();
  g_armed = false;
  g_per_thread = false;
  for (auto& t : threads) t.join();
}

// AllToAll straight on three communicators, on the world and on the
// subgroup {1,2}, in blocks of several segments: after a warm-up (each
// group's first call numbers it), neither the ranks' threads nor the
// transports' allocate.
void ExpectAllToAllNoAllocations(bool shared_memory) {
  constexpr uint32_t kRanks = 3;
  constexpr size_t kBlock = 3 * 4096 + 5;
  const device::CommOptions options = SmallSegmentComm(shared_memory);
  testing::Cluster comms(
      kRanks, [&](uint32_t) { return options; }, [](uint32_t) { return uint64_t{78}; });
  ASSERT_TRUE(comms.ok()) << comms.create_status(0).ToString();
  std::vector<Status> st(kRanks);
  auto on_each_rank = [&](const std::function<void(uint32_t)>& fn) { testing::OnEachRank(kRanks, fn); };
  const device::Group all = device::Group::World(kRanks), tail{{1, 2}};
  std::vector<std::vector<uint8_t>> in(kRanks), out(kRanks), tail_in(kRanks), tail_out(kRanks);
  for (uint32_t r = 0; r < kRanks; ++r) {
    in[r].assign(kBlock * kRanks, static_cast<uint8_t>(r));
    out[r].resize(kBlock * kRanks);
    tail_in[r].assign(kBlock * 2, static_cast<uint8_t>(r + 10));
    tail_out[r].resize(kBlock * 2);
  }
  auto exchange = [&](uint32_t r, int times) {
    Status s;
    for (int i = 0; i < times && s.ok(); ++i) {
      s = comms[r].AllToAll(in[r], out[r], all);
      if (s.ok() && r > 0) s = comms[r].AllToAll(tail_in[r], tail_out[r], tail);
    }
    return s;
  };
  on_each_rank([&](uint32_t r) { st[r] = exchange(r, 2); });  // warm-up
  for (uint32_t r = 0; r < kRanks; ++r) SINKRT_ASSERT_OK(st[r]);

  CountOnEachRank(kRanks, [&](uint32_t r) { st[r] = exchange(r, 8); });
  for (uint32_t r = 0; r < kRanks; ++r) SINKRT_ASSERT_OK(st[r]);
  EXPECT_EQ(g_ours.load(), 0) << "sinkrt allocated during 8 rounds of AllToAll";
  EXPECT_EQ(out[0][kBlock * 2], 2);
  EXPECT_EQ(tail_out[2][0], 11);
}

TEST(NoAlloc, AllToAllOverSharedMemoryAllocatesNothing) { ExpectAllToAllNoAllocations(true); }
TEST(NoAlloc, AllToAllOverTcpAllocatesNothing) { ExpectAllToAllNoAllocations(false); }

// The two-level AllReduce on four communicators that claim two hosts
// (shm inside each, TCP between), large enough for many segments in both
// ring halves: after a warm-up (each sub-group's first call numbers it, the
// world's topology was made at rendezvous), nothing allocates.
TEST(NoAlloc, TwoLevelAllReduceAllocatesNothing) {
  constexpr uint32_t kRanks = 4;
  constexpr size_t kCount = 5 * 4096 + 3;
  device::CommOptions options = SmallSegmentComm(true);
  options.hierarchical_allreduce = true;
  testing::Cluster comms(
      kRanks, [&](uint32_t) { return options; }, [](uint32_t) { return uint64_t{79}; },
      [](uint32_t r) { return std::string(r < 2 ? "host-a" : "host-b"); });
  ASSERT_TRUE(comms.ok()) << comms.create_status(0).ToString();
  const device::Group all = device::Group::World(kRanks);
  ASSERT_EQ(comms[0].AllReduceAlgorithm(kCount * 4, DType::F32, all, false).rfind("two-level", 0), 0u);
  std::vector<std::vector<float>> data(kRanks, std::vector<float>(kCount, 1.0f));
  std::vector<Status> st(kRanks);
  auto reduce = [&](uint32_t r, int times) {
    Status s;
    std::span<uint8_t> bytes(reinterpret_cast<uint8_t*>(data[r].data()), kCount * 4);
    for (int i = 0; i < times && s.ok(); ++i) s = comms[r].AllReduce(bytes, DType::F32, device::ReduceOp::Mean, all);
    return s;
  };
  testing::OnEachRank(kRanks, [&](uint32_t r) { st[r] = reduce(r, 2); });  // warm-up
  for (uint32_t r = 0; r < kRanks; ++r) SINKRT_ASSERT_OK(st[r]);
  CountOnEachRank(kRanks, [&](uint32_t r) { st[r] = reduce(r, 8); });
  for (uint32_t r = 0; r < kRanks; ++r) SINKRT_ASSERT_OK(st[r]);
  EXPECT_EQ(g_ours.load(), 0) << "sinkrt allocated during 8 two-level AllReduces";
  EXPECT_EQ(data[3][kCount - 1], 1.0f);
}

// Blocked ReduceScatter and AllGather on three communicators whose working
// copy was reserved up front (as PrepareProgram reserves it at load): the
// warm-up runs only unfused AllGathers of the same total size (numbering
// the group, priming the transports) and never the blocked calls, so a
// working copy grown on first use would count.
void ExpectBlockedNoAllocations(bool shared_memory) {
  constexpr uint32_t kRanks = 3;
  const size_t kBlocks[] = {4 * 5, 4 * 3001, 4 * 77};  // bytes per member: f32
  const size_t kChunk = kBlocks[0] + kBlocks[1] + kBlocks[2];
  const device::CommOptions options = SmallSegmentComm(shared_memory);
  testing::Cluster comms(
      kRanks, [&](uint32_t) { return options; }, [](uint32_t) { return uint64_t{79}; });
  ASSERT_TRUE(comms.ok()) << comms.create_status(0).ToString();
  std::vector<Status> st(kRanks);
  auto on_each_rank = [&](const std::function<void(uint32_t)>& fn) { testing::OnEachRank(kRanks, fn); };
  const device::Group all = device::Group::World(kRanks);
  // Per rank: whole buffers (gradients, then parameters) and their shards,
  // each shard this rank's block of its gradient (in place).
  std::vector<std::vector<std::vector<uint8_t>>> whole(kRanks);
  std::vector<std::vector<std::span<const uint8_t>>> ins(kRanks);
  std::vector<std::vector<std::span<uint8_t>>> outs(kRanks);
  std::vector<std::vector<uint8_t>> warm_in(kRanks), warm_out(kRanks);
  for (uint32_t r = 0; r < kRanks; ++r) {
    for (size_t b : kBlocks) whole[r].emplace_back(b * kRanks, static_cast<uint8_t>(0));
    for (size_t i = 0; i < 3; ++i) {
      std::span<uint8_t> mine = std::span<uint8_t>(whole[r][i]).subspan(r * kBlocks[i], kBlocks[i]);
      ins[r].push_back(whole[r][i]);
      outs[r].push_back(mine);
    }
    warm_in[r].resize(kChunk);
    warm_out[r].resize(kChunk * kRanks);
    comms[r].ReserveScratch(kChunk * kRanks);
  }
  auto gather_back = [&](uint32_t r) {
    std::vector<std::span<const uint8_t>> shard_in(outs[r].begin(), outs[r].end());
    std::vector<std::span<uint8_t>> whole_out(whole[r].begin(), whole[r].end());
    return std::make_pair(std::move(shard_in), std::move(whole_out));
  };
  std::vector<std::pair<std::vector<std::span<const uint8_t>>, std::vector<std::span<uint8_t>>>> gathers;
  for (uint32_t r = 0; r < kRanks; ++r) gathers.push_back(gather_back(r));
  on_each_rank([&](uint32_t r) {
    for (int i = 0; i < 2 && st[r].ok(); ++i) st[r] = comms[r].AllGather(warm_in[r], warm_out[r], all);
  });
  for (uint32_t r = 0; r < kRanks; ++r) SINKRT_ASSERT_OK(st[r]);

  CountOnEachRank(kRanks, [&](uint32_t r) {
    Status s;
    for (int i = 0; i < 8 && s.ok(); ++i) {
      s = comms[r].ReduceScatterBlocked(ins[r], outs[r], DType::F32, device::ReduceOp::Mean, all);
      if (s.ok()) s = comms[r].AllGatherBlocked(gathers[r].first, gathers[r].second, all);
    }
    st[r] = s;
  });
  for (uint32_t r = 0; r < kRanks; ++r) SINKRT_ASSERT_OK(st[r]);
  EXPECT_EQ(g_ours.load(), 0) << "sinkrt allocated during 8 rounds of blocked ReduceScatter and AllGather";
}

TEST(NoAlloc, BlockedCollectivesOverSharedMemoryAllocateNothing) { ExpectBlockedNoAllocations(true); }
TEST(NoAlloc, BlockedCollectivesOverTcpAllocateNothing) { ExpectBlockedNoAllocations(false); }

// Sunk eval: RunSink(EvalStep, N) zeroes the metric sums once and adds into
// them every step (MetricSum), allocating nothing; the sums it reports are
// those of the sink's own steps.
TEST(NoAlloc, SunkEvalStepsAllocateNothing) {
  constexpr int64_t kBatch = 64;
  host::CompileOptions o;
  o.optimizer = host::OptimizerSpec::Adam(0.001f);
  auto cs = host::Compile(testing::MakeMlp(kBatch), o);
  SINKRT_ASSERT_OK(cs);
  auto ex = device::Executor::Load(cs->stream, device::DeviceOptions{});
  SINKRT_ASSERT_OK(ex);
  const fb::Program* eval = cs->stream.FindProgram(ProgramKind::EvalStep);
  ASSERT_TRUE(eval && eval->accumulators() && eval->accumulators()->size() == 1);
  const uint32_t sums_buffer = eval->accumulators()->Get(0);
  auto data = testing::MakeSyntheticData(kBatch * 12, 784, 10, 1);
  auto run = [&](uint32_t steps) {
    for (uint32_t i = 0; i < steps; ++i) {
      std::vector<ConstBytes> cols;
      cols.emplace_back(reinterpret_cast<const uint8_t*>(data.images.data() + i * kBatch * 784), kBatch * 784 * 4);
      cols.emplace_back(reinterpret_cast<const uint8_t*>(data.labels.data() + i * kBatch), kBatch * 4);
      EXPECT_TRUE((*ex)->PushBatch(1, cols).ok());  // queue 1: eval's
    }
    device::RunStats stats;
    g_ours = g_dnnl = g_dnnl_calls = 0;
    g_armed = true;
    Status st = (*ex)->Run(ProgramKind::EvalStep, steps, &stats);
    g_armed = false;
    EXPECT_TRUE(st.ok()) << st.ToString();
    auto sums = (*ex)->Buffer(sums_buffer);
    EXPECT_TRUE(sums.ok());
    double correct = -1;
    if (sums.ok()) std::memcpy(&correct, sums->data() + sizeof(double), sizeof correct);
    return std::make_pair(Counts{g_ours.load(), g_dnnl.load(), g_dnnl_calls.load()}, correct);
  };
  run(2);  // warm-up: lazily created OpenMP state
  auto [four, four_correct] = run(4);
  auto [twelve, twelve_correct] = run(12);
  EXPECT_EQ(four.ours, 0) << "sinkrt allocated during a 4-step eval sink";
  EXPECT_EQ(twelve.ours, 0) << "sinkrt allocated during a 12-step eval sink";
  // The batches of the 12-step sink start with the 4-step sink's: had the
  // sums not been zeroed, the 4 steps' count would be in them twice.
  auto [again, again_correct] = run(4);
  EXPECT_EQ(again.ours, 0);
  EXPECT_EQ(again_correct, four_correct);
  EXPECT_GE(twelve_correct, four_correct);
  EXPECT_LE(twelve_correct, 12.0 * kBatch);
}

TEST(NoAlloc, MlpStepsAllocateNothing) { ExpectNoAllocations(testing::MakeMlp(64), 64, 784); }
TEST(NoAlloc, ProfiledMlpStepsAllocateNothing) { ExpectNoAllocations(testing::MakeMlp(64), 64, 784, true); }
TEST(NoAlloc, ProfiledVitStepsAllocateNothing) { ExpectNoAllocations(testing::MakeVit(16), 16, 784, true); }
TEST(NoAlloc, LeNetStepsAllocateNothing) { ExpectNoAllocations(testing::MakeLeNet(16), 16, 784); }
TEST(NoAlloc, VitStepsAllocateNothing) { ExpectNoAllocations(testing::MakeVit(16), 16, 784); }
// Issue 20's switches: gradient accumulation (4 batches per step) and
// recomputation (every layer) allocate nothing per step either.
TEST(NoAlloc, GradientAccumulationStepsAllocateNothing) {
  ExpectNoAllocations(testing::MakeMlp(32), 32, 784, false, 4);
}
// Mixed precision (bf16 kernels and their casts) and loss scaling (the
// overflow check, the scaled updates, the scale's schedule).
TEST(NoAlloc, AmpO2WithDynamicLossScaleStepsAllocateNothing) {
  ExpectNoAllocations(testing::MakeMlp(32), 32, 784, false, 1, host::AmpLevel::O2,
                      host::LossScaleManager::Dynamic(1024.0f, 2.0f, 3));
  ExpectNoAllocations(testing::MakeVit(16), 16, 784, false, 1, host::AmpLevel::O3,
                      host::LossScaleManager::Fixed(64.0f));
}
TEST(NoAlloc, RecomputedVitStepsAllocateNothing) {
  host::Graph g = testing::MakeVit(16);
  g.Recompute("all");
  ExpectNoAllocations(g, 16, 784);
}
// At batch 256 the attention BatchMatMuls share their products among the
// OpenMP team (batch_matmul.cc), in a parallel region of our own.
TEST(NoAlloc, VitBatch256StepsAllocateNothing) { ExpectNoAllocations(testing::MakeVit(256), 256, 784); }

}  // namespace
}  // namespace sinkrt
