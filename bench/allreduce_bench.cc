// AllReduce latency and bus bandwidth over shared memory and loopback TCP,
// ranks as threads of this process, plus memcpy of the same bytes.
//
//   busbw = algbw * 2(n-1)/n  (nccl-tests: comparable across rank counts;
//   the data each rank must move at the least)
//
// BM_AllReduce/<bytes>/<ranks>/<shm>/<algo>: algo 0 = as configured
// (recursive doubling below small_allreduce_bytes, ring above), 1 = always
// recursive doubling, 2 = always ring; the last two calibrate
// small_allreduce_bytes. Rank 0 runs in the benchmark's loop, the others
// on their own threads for the same number of iterations, so consecutive
// ops overlap the way they do in a training step.
#include <benchmark/benchmark.h>

#include <cstring>
#include <map>
#include <memory>
#include <thread>
#include <tuple>
#include <vector>

#include "sinkrt/device/communicator.h"
#include "sinkrt/device/listening_inbox.h"

namespace sinkrt::device {
namespace {

class Ranks {
 public:
  Ranks(int n, bool shm, int algo) {
    CommOptions o;
    o.use_shared_memory = shm;
    o.peer_timeout = std::chrono::seconds(60);
    if (algo == 1) o.small_allreduce_bytes = size_t{1} << 40;
    if (algo == 2) o.small_allreduce_bytes = 0;
    std::vector<PeerAddress> world;
    for (int r = 0; r < n; ++r) {
      inboxes_.push_back(std::move(ListeningInbox::Start()).value());
      world.push_back(PeerAddress{static_cast<uint32_t>(r), inboxes_.back()->address(), LocalHostId()});
    }
    comms_.resize(n);
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r)
      threads.emplace_back([&, r] {
        auto c = Communicator::Create(r, world, 1, *inboxes_[r], o);
        if (c.ok()) comms_[r] = std::move(c).value();
      });
    for (auto& t : threads) t.join();
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

  static Ranks& Get(int n, bool shm, int algo) {
    static std::map<std::tuple<int, bool, int>, std::unique_ptr<Ranks>> cache;
    auto& slot = cache[{n, shm, algo}];
    if (!slot) slot = std::make_unique<Ranks>(n, shm, algo);
    return *slot;
  }

 private:
  std::vector<std::unique_ptr<ListeningInbox>> inboxes_;
  std::vector<std::unique_ptr<Communicator>> comms_;
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
  std::vector<std::vector<float>> buffers(n, std::vector<float>(bytes / sizeof(float), 1.0f));
  auto span_of = [&](int r) { return std::span(reinterpret_cast<uint8_t*>(buffers[r].data()), bytes); };
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

void AllReduceSizes(benchmark::internal::Benchmark* b, int algo, int64_t min_bytes, int64_t max_bytes, int step) {
  for (int n : {2, 4})
    for (int shm : {1, 0})
      for (int64_t bytes = min_bytes; bytes <= max_bytes; bytes *= step) b->Args({bytes, n, shm, algo});
}

BENCHMARK(BM_AllReduce)
    ->Apply([](benchmark::internal::Benchmark* b) { AllReduceSizes(b, 0, 4 << 10, int64_t{256} << 20, 4); })
    ->ArgNames({"bytes", "ranks", "shm", "algo"})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// Calibration sweep around the switch-over, forced to each algorithm.
BENCHMARK(BM_AllReduce)
    ->Name("BM_AllReduceRD")
    ->Apply([](benchmark::internal::Benchmark* b) { AllReduceSizes(b, 1, 16 << 10, 4 << 20, 2); })
    ->ArgNames({"bytes", "ranks", "shm", "algo"})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_AllReduce)
    ->Name("BM_AllReduceRing")
    ->Apply([](benchmark::internal::Benchmark* b) { AllReduceSizes(b, 2, 16 << 10, 4 << 20, 2); })
    ->ArgNames({"bytes", "ranks", "shm", "algo"})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

BENCHMARK(BM_Memcpy)->RangeMultiplier(4)->Range(4 << 10, 256 << 20)->UseRealTime()->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace sinkrt::device

BENCHMARK_MAIN();
