// AllReduce latency and bus bandwidth over shared memory and loopback TCP,
// ranks as threads of this process, plus memcpy of the same bytes.
//
//   busbw = algbw * 2(n-1)/n  (nccl-tests: comparable across rank counts;
//   the data each rank must move at the least)
//
// BM_AllReduce/<bytes>/<ranks>/<shm>/<algo>: algo 0 = as configured
// through the rings (recursive doubling below small_allreduce_bytes, ring
// above; two ranks always double, CommOptions::pair_allreduce_bytes), 1 =
// always recursive doubling, 2 = always ring; the last two calibrate
// small_allreduce_bytes. 4 and 5 (BM_AllReduceTwoHosts): ranks split over
// two fake host ids, two-level and flat. 3 = direct: the buffers lie in memory the ranks
// shared (Communicator::ShareMemory), so from direct_allreduce_bytes up
// each rank reads its peers' buffers in place (BM_AllReduceDirect). Rank 0 runs in the benchmark's loop, the others
// on their own threads for the same number of iterations, so consecutive
// ops overlap the way they do in a training step.
//
// BM_AllReduceTls/<bytes>/2/0/<algo>: two ranks over loopback TCP, algo 0
// plain and algo 6 with TLS on every link (CommOptions::tls, each inbox a
// TLS server; the certificates of test/support/tls_certs.cc), interleaved
// per size: what TLS costs the data plane.
//
// BM_MlpGradients/<ranks>/<shm>/<fused>: the gradients of the MLP
// 784-512-256-10 (weights 784x512, 512x256, 256x10, biases 512, 256, 10;
// float32, 2.14 MB), fused = one AllReduce over all of them in one
// contiguous buffer, unfused = one AllReduce per tensor.
//
// `allreduce_bench --compare [--ranks N] [--transport shm|tcp] [--sizes ..]
// [--mlp]` (or `--compare --memcpy`) skips Google Benchmark and runs the ranks as processes, timed
// like gloo_allreduce and mpi_allreduce (allreduce_harness.h: same
// protocol, same JSON lines); bench/compare_allreduce puts them side by
// side. Extra flags there: --algos auto,rd,ring, --segment-bytes B,
// --window W, --small-bytes B, --pair-bytes B, --direct-bytes B (CommOptions,
// for tuning). Algorithm `direct` places every buffer in memory the ranks
// shared, the others keep them private (the rings, as before the direct
// path). `--compare
// --fusion [--parts 2,4,8]` instead times one AllReduce against the same
// bytes as P tensors at every size (bench/fusion_sweep.h); --sizes then
// defaults to 4 KiB .. 64 MiB.
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <new>
#include <numeric>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "allreduce_harness.h"
#include "device/src/comm/communicator.h"
#include "device/src/comm/rendezvous/listening_inbox.h"
#include "fusion_sweep.h"
#include "support/tls_certs.h"

namespace sinkrt::device {
namespace {

constexpr int kDirect = 3;
// Half the ranks claim one host id, half another (shared memory inside each
// "host", TCP between them): kTwoLevel with the two-level AllReduce,
// kFlatHosts with it off (CommOptions::hierarchical_allreduce), so the
// schedules compare on one machine. Loopback TCP is about as fast as shm
// here; a real gap needs the netns testbed's shaped links.
constexpr int kTwoLevel = 4;
constexpr int kFlatHosts = 5;
// Every link over TLS (loopback TCP, as configured otherwise).
constexpr int kTls = 6;
constexpr size_t kLargest = size_t{256} << 20;

// The TLS rows' contexts, from certificates written on first use into a
// folder removed at exit; null contexts if anything fails.
struct BenchTls {
  std::shared_ptr<const TlsContext> server, client;
};
const BenchTls& Tls() {
  static const BenchTls tls = [] {
    const auto dir = std::filesystem::temp_directory_path() / ("allreduce_bench_tls_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir);
    const testing::TlsTestFiles f = testing::WriteTlsTestFiles(dir.string());
    auto server = MakeTlsContext({f.server_cert, f.server_key, f.ca_cert}, TlsRole::kServer);
    auto client = MakeTlsContext({f.client_cert, f.client_key, f.ca_cert}, TlsRole::kClient);
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);  // the contexts hold what they loaded
    BenchTls t;
    if (server.ok() && client.ok()) t = {*server, *client};
    return t;
  }();
  return tls;
}

class Ranks {
 public:
  Ranks(int n, bool shm, int algo) {
    CommOptions o;
    if (algo == kTls) o.tls = Tls().client;
    o.use_shared_memory = shm;
    o.peer_timeout = std::chrono::seconds(60);
    if (algo == 1) o.small_allreduce_bytes = size_t{1} << 40;
    if (algo == 2) o.small_allreduce_bytes = 0;
    if (algo != kDirect) o.direct_allreduce_bytes = SIZE_MAX;
    o.hierarchical_allreduce = algo != kFlatHosts;
    const bool fake_hosts = algo == kTwoLevel || algo == kFlatHosts;
    std::vector<PeerAddress> world;
    for (int r = 0; r < n; ++r) {
      auto tls = algo == kTls ? Tls().server : nullptr;
      inboxes_.push_back(std::move(ListeningInbox::Start(std::chrono::seconds(10), "127.0.0.1", "", tls)).value());
      const std::string host = fake_hosts ? (r < n / 2 ? "bench-host-a" : "bench-host-b") : LocalHostId();
      world.push_back(PeerAddress{static_cast<uint32_t>(r), inboxes_.back()->address(), host});
    }
    comms_.resize(n);
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r)
      threads.emplace_back([&, r] {
        auto c = Communicator::Create(r, world, 1, *inboxes_[r], o);
        if (c.ok()) comms_[r] = std::move(c).value();
      });
    for (auto& t : threads) t.join();
    if (algo == kDirect && ok()) {
      for (auto& c : comms_) {
        auto b = c->ShareMemory(kLargest);
        if (b.ok()) blocks_.push_back(std::move(b).value());
      }
    }
  }
  ~Ranks() {
    std::vector<std::thread> threads;
    for (auto& c : comms_) threads.emplace_back([&c] { c.reset(); });
    for (auto& t : threads) t.join();
  }
  bool ok() const {
    for (auto& c : comms_)
      if (!c) return false;
    return true;
  }
  Communicator& operator[](int r) { return *comms_[r]; }
  // Rank r's shared memory (algo kDirect; empty otherwise).
  std::span<uint8_t> shared(int r) {
    return r < static_cast<int>(blocks_.size()) ? blocks_[r].data : std::span<uint8_t>();
  }

  static Ranks& Get(int n, bool shm, int algo) {
    static std::map<std::tuple<int, bool, int>, std::unique_ptr<Ranks>> cache;
    auto& slot = cache[{n, shm, algo}];
    if (!slot) slot = std::make_unique<Ranks>(n, shm, algo);
    return *slot;
  }

 private:
  std::vector<std::unique_ptr<ListeningInbox>> inboxes_;
  std::vector<std::unique_ptr<Communicator>> comms_;
  std::vector<SharedMemory> blocks_;
};

void BM_AllReduce(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  const int n = static_cast<int>(state.range(1));
  const bool shm = state.range(2) != 0;
  const int algo = static_cast<int>(state.range(3));
  Ranks& ranks = Ranks::Get(n, shm, algo);
  if (!ranks.ok()) {
    state.SkipWithError("rendezvous failed");
    return;
  }
  const Group world = Group::World(n);
  std::vector<std::vector<float>> buffers(n, std::vector<float>(algo == kDirect ? 0 : bytes / sizeof(float), 1.0f));
  if (algo == kDirect)
    for (int r = 0; r < n; ++r) {
      if (ranks.shared(r).size() < bytes) {
        state.SkipWithError("no shared memory");
        return;
      }
      std::fill_n(reinterpret_cast<float*>(ranks.shared(r).data()), bytes / sizeof(float), 1.0f);
    }
  auto span_of = [&](int r) {
    return algo == kDirect ? ranks.shared(r).first(bytes)
                           : std::span(reinterpret_cast<uint8_t*>(buffers[r].data()), bytes);
  };
  const int64_t iterations = static_cast<int64_t>(state.max_iterations);
  std::vector<std::thread> others;
  for (int r = 1; r < n; ++r)
    others.emplace_back([&, r] {
      for (int64_t i = 0; i < iterations; ++i)
        if (!ranks[r].AllReduce(span_of(r), DType::F32, ReduceOp::Sum, world).ok()) return;
    });
  for (auto _ : state) {
    Status st = ranks[0].AllReduce(span_of(0), DType::F32, ReduceOp::Sum, world);
    if (!st.ok()) {
      state.SkipWithError(st.ToString().c_str());
      break;
    }
  }
  for (auto& t : others) t.join();
  state.SetBytesProcessed(static_cast<int64_t>(bytes) * state.iterations());
  state.counters["busbw"] =
      benchmark::Counter(static_cast<double>(bytes) * 2 * (n - 1) / n, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_Memcpy(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  std::vector<uint8_t> src(bytes, 1), dst(bytes, 0);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(bytes) * state.iterations());
}

// BM_AllReduce over sizes min_bytes, ·step, .. max_bytes on 2 and 4 ranks,
// shared memory and TCP, with `algo` (0 the communicator's choice, 1
// recursive doubling, 2 ring).
void AllReduceSizes(benchmark::internal::Benchmark* b, int algo, int64_t min_bytes, int64_t max_bytes, int step) {
  for (int n : {2, 4})
    for (int shm : {1, 0})
      for (int64_t bytes = min_bytes; bytes <= max_bytes; bytes *= step) b->Args({bytes, n, shm, algo});
  b->ArgNames({"bytes", "ranks", "shm", "algo"})->UseRealTime()->Unit(benchmark::kMicrosecond);
}

BENCHMARK(BM_AllReduce)->Apply([](benchmark::internal::Benchmark* b) {
  AllReduceSizes(b, 0, 4 << 10, int64_t{256} << 20, 4);
});

// Calibration sweep around the switch-over, forced to each algorithm.
BENCHMARK(BM_AllReduce)->Name("BM_AllReduceRD")->Apply([](benchmark::internal::Benchmark* b) {
  AllReduceSizes(b, 1, 16 << 10, 4 << 20, 2);
});
BENCHMARK(BM_AllReduce)->Name("BM_AllReduceRing")->Apply([](benchmark::internal::Benchmark* b) {
  AllReduceSizes(b, 2, 16 << 10, 4 << 20, 2);
});

// The direct path beside BM_AllReduce's shm rows and BM_Memcpy (shared
// memory only: over TCP there is nothing to share).
BENCHMARK(BM_AllReduce)->Name("BM_AllReduceDirect")->Apply([](benchmark::internal::Benchmark* b) {
  for (int n : {2, 4})
    for (int64_t bytes = 4 << 10; bytes <= int64_t{256} << 20; bytes *= 4) b->Args({bytes, n, 1, kDirect});
  b->ArgNames({"bytes", "ranks", "shm", "algo"})->UseRealTime()->Unit(benchmark::kMicrosecond);
});

// Plain (algo 0) and TLS (algo 6) links between two ranks over TCP,
// interleaved per size.
BENCHMARK(BM_AllReduce)->Name("BM_AllReduceTls")->Apply([](benchmark::internal::Benchmark* b) {
  for (int64_t bytes = 4 << 10; bytes <= int64_t{64} << 20; bytes *= 4)
    for (int algo : {0, kTls}) b->Args({bytes, 2, 0, algo});
  b->ArgNames({"bytes", "ranks", "shm", "algo"})->UseRealTime()->Unit(benchmark::kMicrosecond);
});

// Two "hosts" of two ranks: the two-level AllReduce (algo 4) and the flat
// schedules on the same hosts (algo 5), interleaved per size.
BENCHMARK(BM_AllReduce)->Name("BM_AllReduceTwoHosts")->Apply([](benchmark::internal::Benchmark* b) {
  for (int64_t bytes = 16 << 10; bytes <= int64_t{64} << 20; bytes *= 4)
    for (int algo : {kTwoLevel, kFlatHosts}) b->Args({bytes, 4, 1, algo});
  b->ArgNames({"bytes", "ranks", "shm", "algo"})->UseRealTime()->Unit(benchmark::kMicrosecond);
});

// The MLP's gradients, fused (one contiguous buffer, one AllReduce) or not
// (one AllReduce per tensor, in backward's order: last layer first).
void BM_MlpGradients(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const bool shm = state.range(1) != 0;
  const bool fused = state.range(2) != 0;
  Ranks& ranks = Ranks::Get(n, shm, 0);
  if (!ranks.ok()) {
    state.SkipWithError("rendezvous failed");
    return;
  }
  const Group world = Group::World(n);
  const auto& sizes = allreduce_harness::kMlpGradients;
  const size_t total = std::accumulate(sizes.begin(), sizes.end(), size_t{0});
  // buffers[r][t]: rank r's tensor t (fused: one buffer of `total`).
  std::vector<std::vector<std::vector<float>>> buffers(n);
  for (auto& b : buffers) {
    if (fused)
      b.emplace_back(total, 1.0f);
    else
      for (auto it = sizes.rbegin(); it != sizes.rend(); ++it) b.emplace_back(*it, 1.0f);
  }
  auto step = [&](int r) -> Status {
    for (auto& t : buffers[r])
      SINKRT_RETURN_IF_ERROR(ranks[r].AllReduce(
          std::span(reinterpret_cast<uint8_t*>(t.data()), t.size() * sizeof(float)), DType::F32, ReduceOp::Sum, world));
    return Status::Ok();
  };
  const int64_t iterations = static_cast<int64_t>(state.max_iterations);
  std::vector<std::thread> others;
  for (int r = 1; r < n; ++r)
    others.emplace_back([&, r] {
      for (int64_t i = 0; i < iterations; ++i)
        if (!step(r).ok()) return;
    });
  for (auto _ : state) {
    Status st = step(0);
    if (!st.ok()) {
      state.SkipWithError(st.ToString().c_str());
      break;
    }
  }
  for (auto& t : others) t.join();
  const double bytes = static_cast<double>(total * sizeof(float));
  state.SetBytesProcessed(static_cast<int64_t>(bytes) * state.iterations());
  state.counters["busbw"] = benchmark::Counter(bytes * 2 * (n - 1) / n, benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK(BM_MlpGradients)
    ->ArgsProduct({{2, 4}, {1, 0}, {1, 0}})
    ->ArgNames({"ranks", "shm", "fused"})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

BENCHMARK(BM_Memcpy)->RangeMultiplier(4)->Range(4 << 10, 256 << 20)->UseRealTime()->Unit(benchmark::kMicrosecond);

// ---- --compare: ranks as processes, the harness's protocol ------------------

namespace ah = allreduce_harness;

// Hands out a rank's shared memory to the harness's buffers (std::vector
// with this allocator): bump allocation, all of it free again once the
// last buffer is (the harness holds at most a size's buffers at a time).
struct SharedPool {
  std::span<uint8_t> memory;
  size_t top = 0;
  int live = 0;
};

template <typename T>
struct SharedAllocator {
  using value_type = T;
  SharedPool* pool;
  explicit SharedAllocator(SharedPool* p) : pool(p) {}
  template <typename U>
  SharedAllocator(const SharedAllocator<U>& o) : pool(o.pool) {}
  T* allocate(size_t count) {
    const size_t at = (pool->top + 4095) / 4096 * 4096;  // page-aligned, like an arena's buffers
    if (at + count * sizeof(T) > pool->memory.size()) throw std::bad_alloc();
    pool->top = at + count * sizeof(T);
    ++pool->live;
    return reinterpret_cast<T*>(pool->memory.data() + at);
  }
  void deallocate(T*, size_t) {
    if (--pool->live == 0) pool->top = 0;
  }
  template <typename U>
  bool operator==(const SharedAllocator<U>& o) const {
    return pool == o.pool;
  }
};

struct CompareFlags {
  size_t segment_bytes = 0, small_bytes = SIZE_MAX, pair_bytes = SIZE_MAX, direct_bytes = SIZE_MAX;
  int window = 0;
  bool fusion = false;
  std::vector<int> parts = fusion_sweep::kParts;
};

// Rank r of the world: listens, publishes its port in dir/r, reads the
// others', joins and measures. Returns the exit code.
int CompareRank(int r, const std::string& dir, const ah::Args& args, const CompareFlags& flags) {
  const int n = args.ranks;
  auto inbox = ListeningInbox::Start();
  if (!inbox.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", r, inbox.status().ToString().c_str());
    return 1;
  }
  {
    const std::string tmp = dir + "/" + std::to_string(r) + ".tmp";
    std::ofstream(tmp) << (*inbox)->address().port << "\n";
    ::rename(tmp.c_str(), (dir + "/" + std::to_string(r)).c_str());
  }
  std::vector<PeerAddress> world;
  for (int q = 0; q < n; ++q) {
    int port = 0;
    for (int tries = 0; tries < 30000 && port == 0; ++tries) {
      std::ifstream in(dir + "/" + std::to_string(q));
      if (!(in >> port)) {
        port = 0;
        ::usleep(1000);
      }
    }
    if (port == 0) {
      std::fprintf(stderr, "rank %d: rank %d never published its port\n", r, q);
      return 1;
    }
    world.push_back(
        PeerAddress{static_cast<uint32_t>(q), Address{"127.0.0.1", static_cast<uint16_t>(port)}, LocalHostId()});
  }

  std::vector<std::pair<std::string, std::unique_ptr<Communicator>>> comms;  // one per algorithm
  const std::vector<std::string> algos = args.algos.empty() ? std::vector<std::string>{"auto"} : args.algos;
  for (const std::string& algo : algos) {
    CommOptions o;
    o.use_shared_memory = args.transport == "shm";
    o.peer_timeout = std::chrono::seconds(120);
    if (flags.segment_bytes) o.segment_bytes = flags.segment_bytes;
    if (flags.window) o.segments_in_flight = flags.window;
    if (flags.small_bytes != SIZE_MAX) o.small_allreduce_bytes = flags.small_bytes;
    if (flags.pair_bytes != SIZE_MAX) o.pair_allreduce_bytes = flags.pair_bytes;
    if (algo == "rd") o.small_allreduce_bytes = size_t{1} << 40;
    if (algo == "ring") o.small_allreduce_bytes = 0;
    // Only `direct` shares its buffers; the rest run the rings as before it.
    if (algo != "direct") o.direct_allreduce_bytes = SIZE_MAX;
    if (algo == "direct" && flags.direct_bytes != SIZE_MAX) o.direct_allreduce_bytes = flags.direct_bytes;
    // One inbox serves them all: each Create ends in a barrier, so the next one's connections come after.
    auto c = Communicator::Create(r, world, comms.size() + 1, **inbox, o);
    if (!c.ok()) {
      std::fprintf(stderr, "rank %d: %s\n", r, c.status().ToString().c_str());
      return 1;
    }
    comms.emplace_back(algo, std::move(c).value());
  }
  const Group group = Group::World(n);
  // The largest set of buffers alive at once: a fused buffer and its
  // pieces (--fusion), or the MLP's gradients both ways, page-aligned.
  const size_t largest =
      std::max(*std::max_element(args.sizes.begin(), args.sizes.end()),
               std::accumulate(ah::kMlpGradients.begin(), ah::kMlpGradients.end(), size_t{0}) * sizeof(float));
  int rc = 0;
  for (auto& [algo, comm] : comms) {
    SharedMemory shared;
    if (algo == "direct") {
      auto b = comm->ShareMemory(2 * largest + (1 << 20));
      if (!b.ok() || b->data.empty()) {
        std::fprintf(stderr, "rank %d: direct: %s\n", r,
                     b.ok() ? "this world shares no memory (over TCP?)" : b.status().ToString().c_str());
        return 1;
      }
      shared = std::move(b).value();
    }
    SharedPool pool{shared.data};
    auto barrier = [&] {
      Status st = comm->Barrier(group);
      if (!st.ok()) {
        std::fprintf(stderr, "rank %d: %s\n", r, st.ToString().c_str());
        std::exit(1);
      }
    };
    auto allreduce = [&](float* p, size_t count) {
      Status st = comm->AllReduce(std::span(reinterpret_cast<uint8_t*>(p), count * sizeof(float)), DType::F32,
                                  ReduceOp::Sum, group);
      if (!st.ok()) {
        std::fprintf(stderr, "rank %d: %s\n", r, st.ToString().c_str());
        std::exit(1);
      }
    };
    auto slowest = [&](double mine) {
      Status st =
          comm->AllReduce(std::span(reinterpret_cast<uint8_t*>(&mine), sizeof mine), DType::F64, ReduceOp::Max, group);
      if (!st.ok()) std::exit(1);
      return mine;
    };
    auto report = [&](ah::Line line, double my_us) {
      std::vector<double> all(n, 0.0);
      all[r] = my_us;
      Status st = comm->AllReduce(std::span(reinterpret_cast<uint8_t*>(all.data()), all.size() * sizeof(double)),
                                  DType::F64, ReduceOp::Sum, group);
      if (!st.ok()) std::exit(1);
      ah::Report(line, all, r);
    };
    if (flags.fusion) {
      // The mean over ranks of each rank's medians, as Report takes them.
      auto fusion_report = [&](const std::string& parts, size_t bytes) {
        return [&, parts, bytes](int iters, double fused_us, double unfused_us) {
          double both[2] = {fused_us / n, unfused_us / n};
          Status st = comm->AllReduce(std::span(reinterpret_cast<uint8_t*>(both), sizeof both), DType::F64,
                                      ReduceOp::Sum, group);
          if (!st.ok()) std::exit(1);
          if (r == 0) fusion_sweep::Print(args.transport, n, bytes, parts, iters, both[0], both[1]);
        };
      };
      auto time_case = [&](const std::vector<size_t>& pieces, const std::string& parts, size_t bytes) {
        auto report = fusion_report(parts, bytes);
        return algo == "direct" ? fusion_sweep::TimeCase(pieces, r, n, args.iters_scale, allreduce, barrier, report,
                                                         SharedAllocator<float>(&pool))
                                : fusion_sweep::TimeCase(pieces, r, n, args.iters_scale, allreduce, barrier, report);
      };
      for (size_t bytes : args.sizes)
        for (int parts : flags.parts)
          if (time_case(fusion_sweep::EqualParts(bytes / sizeof(float), parts), std::to_string(parts), bytes) != 0)
            rc = 1;
      if (args.mlp && time_case(ah::kMlpGradients, "mlp",
                                std::accumulate(ah::kMlpGradients.begin(), ah::kMlpGradients.end(), size_t{0}) *
                                    sizeof(float)) != 0)
        rc = 1;
      continue;
    }
    const int swept = algo == "direct" ? ah::Sweep(args, r, n, "sinkrt", algo, allreduce, barrier, slowest, report,
                                                   SharedAllocator<float>(&pool))
                                       : ah::Sweep(args, r, n, "sinkrt", algo, allreduce, barrier, slowest, report);
    if (swept != 0) rc = 1;
  }
  return rc;
}

int CompareMain(int argc, char** argv) {
  ah::Args args;
  std::vector<std::string> rest;
  CompareFlags flags;
  bool memcpy_only = false;
  bool ok = ah::ParseArgs(argc, argv, args, &rest);
  bool sizes_given = false;
  for (int i = 1; i < argc; ++i) sizes_given = sizes_given || std::strcmp(argv[i], "--sizes") == 0;
  for (size_t i = 0; ok && i < rest.size(); ++i) {
    auto next = [&]() -> std::string { return i + 1 < rest.size() ? rest[++i] : std::string(); };
    if (rest[i] == "--compare") continue;
    if (rest[i] == "--memcpy") {
      memcpy_only = true;
      continue;
    }
    if (rest[i] == "--fusion") {
      flags.fusion = true;
      if (!sizes_given) args.sizes = fusion_sweep::kSizes;
      continue;
    }
    if (rest[i] == "--parts") {
      flags.parts.clear();
      for (auto& p : ah::SplitList(next().c_str())) flags.parts.push_back(std::atoi(p.c_str()));
      continue;
    }
    if (rest[i] == "--segment-bytes")
      flags.segment_bytes = ah::ParseBytes(next());
    else if (rest[i] == "--window")
      flags.window = std::atoi(next().c_str());
    else if (rest[i] == "--small-bytes")
      flags.small_bytes = ah::ParseBytes(next());
    else if (rest[i] == "--pair-bytes")
      flags.pair_bytes = ah::ParseBytes(next());
    else if (rest[i] == "--direct-bytes")
      flags.direct_bytes = ah::ParseBytes(next());
    else
      ok = false;
  }
  for (auto& a : args.algos) ok = ok && (a == "auto" || a == "rd" || a == "ring" || a == "direct");
  if (!ok || (args.transport != "shm" && args.transport != "tcp")) {
    ah::Usage(argv[0],
              " --compare [--memcpy | --fusion [--parts 2,4,8]] [--segment-bytes B] [--window W] [--small-bytes B] "
              "[--pair-bytes B] [--direct-bytes B]; "
              "algos: auto, rd, ring (private buffers, the rings), direct (shared buffers)");
    return 2;
  }
  if (memcpy_only) {
    // The limit: one thread copying the same bytes between two pre-touched buffers.
    for (size_t bytes : args.sizes) {
      std::vector<uint8_t> src(bytes, 1), dst(bytes, 0);
      const ah::Plan plan = ah::PlanFor(bytes, args.iters_scale);
      double us = ah::TimeOp(
          plan,
          [&] {
            std::memcpy(dst.data(), src.data(), bytes);
            benchmark::DoNotOptimize(dst.data());
            benchmark::ClobberMemory();
          },
          [] {});
      ah::Line line{"memcpy", "-", "memcpy", "size", 1, bytes, plan.iters};
      line.latency_us = line.max_us = us;
      ah::Print(line);
    }
    return 0;
  }
  return ah::ForkRanks(args.ranks, "sinkrt-allreduce",
                       [&](int r, const char* dir) { return CompareRank(r, dir, args, flags); });
}

}  // namespace
}  // namespace sinkrt::device

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--compare") == 0) return sinkrt::device::CompareMain(argc, argv);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
