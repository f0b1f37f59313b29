// Rendezvous cost (issue 22): Communicator::Create for n ranks as threads
// of one process, each with its own ListeningInbox, over loopback TCP, with
// the planned (sparse) connections against the full mesh; and the plan
// alone for the 1,024-rank model in docs/design/scale.md.
//
// Every rank gets a host id of its own unless per_host > 1, so the world
// spans "hosts" and the plan is the cross-host one (shm only between ranks
// that share an id). On the 2-core VM 2-32 ranks oversubscribe the cores
// (each rank is its thread plus, after Create, an I/O thread): the time
// measures the handshakes, the options exchange, shm setup, Barrier #0 and
// the agreement AllReduce, all contending for two cores.
//
//   rendezvous_bench --benchmark_filter=Create
//   rendezvous_bench --benchmark_filter=Plan
#include <benchmark/benchmark.h>

#include <chrono>
#include <optional>
#include <thread>
#include <vector>

#include "device/src/comm/communicator.h"
#include "device/src/comm/rendezvous/connection_plan.h"
#include "device/src/comm/rendezvous/listening_inbox.h"
#include "support/str_cat.h"

namespace sinkrt::device {
namespace {

using testing::Cat;

std::vector<uint32_t> Range(uint32_t first, uint32_t end, uint32_t step = 1) {
  std::vector<uint32_t> out;
  for (uint32_t r = first; r < end; r += step) out.push_back(r);
  return out;
}

// Data parallel on the world: AllReduce of the gradients, Broadcast of the
// initial parameters.
std::vector<GroupUse> DataParallel(uint32_t n) { return {{Range(0, n), kUsesAllReduce | kUsesBroadcast}}; }

// Args: full mesh (1) or planned (0), ranks, ranks per host. The two
// kinds alternate for each size, so load drift hits both alike.
void BM_Create(benchmark::State& state) {
  const bool full = state.range(0) != 0;
  const auto n = static_cast<uint32_t>(state.range(1));
  const auto per_host = static_cast<uint32_t>(state.range(2));
  double connections = 0, shm = 0, max_connections = 0;
  for (auto _ : state) {
    state.PauseTiming();
    std::vector<std::unique_ptr<ListeningInbox>> inboxes;
    std::vector<PeerAddress> world;
    for (uint32_t r = 0; r < n; ++r) {
      auto inbox = ListeningInbox::Start();
      if (!inbox.ok()) {
        state.SkipWithError(inbox.status().ToString().c_str());
        return;
      }
      inboxes.push_back(std::move(inbox).value());
      world.push_back(PeerAddress{r, inboxes.back()->address(), Cat("h", std::to_string(r / per_host))});
    }
    CommOptions o;
    o.peer_timeout = std::chrono::seconds(60);
    if (!full) o.groups = DataParallel(n);
    std::vector<std::unique_ptr<Communicator>> comms(n);
    std::vector<Status> status(n);
    state.ResumeTiming();
    const auto start = std::chrono::steady_clock::now();
    {
      std::vector<std::thread> threads;
      for (uint32_t r = 0; r < n; ++r)
        threads.emplace_back([&, r] {
          auto c = Communicator::Create(r, world, 42, *inboxes[r], o);
          if (c.ok())
            comms[r] = std::move(c).value();
          else
            status[r] = c.status();
        });
      for (auto& t : threads) t.join();
    }
    state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    state.PauseTiming();
    for (uint32_t r = 0; r < n; ++r) {
      if (!status[r].ok()) {
        state.SkipWithError(status[r].ToString().c_str());
        return;
      }
    }
    connections = shm = max_connections = 0;
    for (auto& c : comms) {
      connections += c->connections();
      shm += c->shm_connections();
      max_connections = std::max<double>(max_connections, c->connections());
    }
    {
      std::vector<std::thread> threads;
      for (auto& c : comms) threads.emplace_back([&c] { c.reset(); });
      for (auto& t : threads) t.join();
    }
    state.ResumeTiming();
  }
  state.counters["conn_per_rank"] = connections / n;
  state.counters["conn_max"] = max_connections;
  state.counters["shm_per_rank"] = shm / n;
  state.SetLabel(full ? "full mesh" : "planned");
}

// The plan alone for every rank of a world of n ranks, `per_host` to a
// host: flat data parallel (0), or with the two-level AllReduce's groups
// (1): each host's ranks, and one rank per host with the same local index.
void BM_Plan(benchmark::State& state) {
  const auto n = static_cast<uint32_t>(state.range(0));
  const auto per_host = static_cast<uint32_t>(state.range(1));
  const bool two_level = state.range(2) != 0;
  std::vector<std::string> hosts(n);
  for (uint32_t r = 0; r < n; ++r) hosts[r] = Cat("h", std::to_string(r / per_host));
  std::vector<GroupUse> all = DataParallel(n);
  if (two_level) {
    for (uint32_t h = 0; h < n / per_host; ++h)
      all.push_back({Range(h * per_host, (h + 1) * per_host), kUsesAllReduce});
    for (uint32_t i = 0; i < per_host; ++i) all.push_back({Range(i, n, per_host), kUsesAllReduce});
  }
  double total = 0, same_host = 0, most = 0;
  for (auto _ : state) {
    total = same_host = most = 0;
    for (uint32_t r = 0; r < n; ++r) {
      std::vector<GroupUse> mine;
      for (const GroupUse& g : all)
        if (std::binary_search(g.ranks.begin(), g.ranks.end(), r)) mine.push_back(g);
      const std::vector<uint32_t> peers = PlanConnections(r, hosts, mine);
      total += peers.size();
      most = std::max<double>(most, peers.size());
      for (uint32_t p : peers) same_host += hosts[p] == hosts[r];
    }
  }
  state.counters["conn_per_rank"] = total / n;
  state.counters["conn_max"] = most;
  state.counters["shm_per_rank"] = same_host / n;
  state.counters["full_mesh"] = n - 1;
  state.SetLabel(two_level ? "two-level groups" : "data parallel");
}

}  // namespace

BENCHMARK(BM_Create)
    ->ArgNames({"full", "ranks", "per_host"})
    ->ArgsProduct({{0, 1}, {2, 4, 8, 16, 32}, {1}})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(5);
BENCHMARK(BM_Create)
    ->ArgNames({"full", "ranks", "per_host"})
    ->ArgsProduct({{0, 1}, {16, 32}, {8}})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(5);
BENCHMARK(BM_Plan)
    ->ArgNames({"ranks", "per_host", "two_level"})
    ->ArgsProduct({{32, 1024}, {8}, {0, 1}})
    ->Unit(benchmark::kMillisecond);

}  // namespace sinkrt::device

BENCHMARK_MAIN();
