// How long the host processes of a job take to meet at the master
// (ProcessGroup::Join, init()'s barrier) and to run one round (what
// Model::Create and Model::train each cost: every rank's job fields and
// device endpoint to rank 0, the formed world back), for 2-32 ranks.
// Ranks are threads of this process on their own connections, as in
// test/host/link/process_group_test.cc; on the 2-core VMs 32 ranks oversubscribe the
// cores 16 times over, which is what the figures then include.
// Arguments: ranks, then tls:1 for every connection to the master over TLS
// (mutual: rank 0 asks each rank for its certificate).
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>
#include <vector>

#include "sinkrt/host/communication.h"
#include "support/tls_certs.h"

namespace {

using namespace sinkrt;
using namespace sinkrt::host;

uint16_t FreePort() {
  auto port = FreeLoopbackPort();
  return port.ok() ? *port : 0;
}

// The job fields Model::Create sends (15 of them, as long as real ones).
std::vector<JoinField> Fields() {
  std::vector<JoinField> f;
  for (int i = 0; i < 15; ++i)
    f.push_back({"field_" + std::to_string(i), "value of a typical length " + std::to_string(i)});
  return f;
}

// The master's and the ranks' certificates, written on first use.
const testing::TlsTestFiles& TlsFiles() {
  static const testing::TlsTestFiles files = [] {
    const auto dir = std::filesystem::temp_directory_path() / ("process_group_bench_tls_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir);
    return testing::WriteTlsTestFiles(dir.string());
  }();
  return files;
}

TlsConfig RankTls(uint32_t rank) {
  const testing::TlsTestFiles& f = TlsFiles();
  if (rank == 0) return {f.server_cert, f.server_key, f.ca_cert};
  return {f.client_cert, f.client_key, f.ca_cert};
}

void BM_JoinAndRound(benchmark::State& state) {
  const uint32_t n = static_cast<uint32_t>(state.range(0));
  const bool tls = state.range(1) != 0;
  if (tls) TlsFiles();  // outside the timed joins
  double join_s = 0, round_s = 0;
  for (auto _ : state) {
    const uint16_t port = FreePort();
    std::vector<double> join(n), round(n);
    std::vector<std::thread> ranks;
    bool failed = false;
    for (uint32_t r = 0; r < n; ++r)
      ranks.emplace_back([&, r] {
        ProcessGroup::Options o;
        o.rank = r;
        o.world_size = n;
        o.master = Address{"127.0.0.1", port};
        o.timeout = std::chrono::seconds(60);
        if (tls) o.tls = RankTls(r);
        const auto t0 = std::chrono::steady_clock::now();
        auto pg = ProcessGroup::Join(o);
        const auto t1 = std::chrono::steady_clock::now();
        if (!pg.ok()) {
          failed = true;
          return;
        }
        const PeerEndpoint me{"127.0.0.1:" + std::to_string(20000 + r), "host"};
        if (!(*pg)->Round("bench", Fields(), me).ok()) failed = true;
        const auto t2 = std::chrono::steady_clock::now();
        join[r] = std::chrono::duration<double>(t1 - t0).count();
        round[r] = std::chrono::duration<double>(t2 - t1).count();
      });
    for (auto& t : ranks) t.join();
    if (failed) {
      state.SkipWithError("a rank failed to join");
      return;
    }
    // The world has formed when its last rank has: the slowest rank's time.
    double j = 0, rd = 0;
    for (uint32_t r = 0; r < n; ++r) {
      j = std::max(j, join[r]);
      rd = std::max(rd, round[r]);
    }
    join_s += j;
    round_s += rd;
  }
  state.counters["join_ms"] = benchmark::Counter(join_s * 1e3 / static_cast<double>(state.iterations()));
  state.counters["round_ms"] = benchmark::Counter(round_s * 1e3 / static_cast<double>(state.iterations()));
  // At the master: one connection per other rank; at every other rank: one.
  state.counters["master_connections"] = n - 1;
}
BENCHMARK(BM_JoinAndRound)
    ->ArgNames({"ranks", "tls"})
    ->ArgsProduct({{2, 4, 8, 16, 32}, {0, 1}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
