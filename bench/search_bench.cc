// AUTO_PARALLEL strategy search time (host/src/parallel/auto_parallel/strategy_search.h)
// on synthetic cost tables with 4-8 candidates per op (issue 17's target:
// 1,000 ops in under 1 s, roughly linear growth).
//
//   BM_SearchTransformer/N  dynamic_programming on a chain of transformer
//                           blocks (LayerNorm, q/k/v fan-out and fan-in into
//                           attention, projection, residual Add, LayerNorm,
//                           FFN up, GeLU, FFN down, residual Add: 12 ops a
//                           block, series-parallel) of N ops
//   BM_SearchLayered/N      dynamic_programming on a random layered DAG of
//                           N ops, 4 a layer, each reading 1-2 ops of the
//                           layer before (not series-parallel: takes the
//                           general elimination)
//   BM_SearchTransformerLimit/N, BM_SearchLayeredLimit/N
//                           the same under a memory limit halfway between
//                           the smallest and the largest footprint (Pareto
//                           labels, up to 64 an entry)
//   BM_Propagation/N        sharding_propagation on the transformer chain
//                           with its first op fixed
//   BM_PlanVit/blocks/ranks the whole planner (PlanAutoParallel: candidates
//                           from each op's rule, the cost model, memoised
//                           redistribution prices, the search, the
//                           partitioner's check) on a ViT (dim 256, 4
//                           heads, MLP 1024) of `blocks` blocks with its
//                           loss, built-in calibration; counter ops
//
// Counters: candidates (before pruning), pruned, generalized (ops eliminated
// with 3+ neighbours). Complexity fits report the slope in N.
#include <benchmark/benchmark.h>

#include <random>
#include <string>
#include <vector>

#include "host/src/parallel/auto_parallel/strategy_search.h"
#include "sinkrt/host/auto_parallel.h"
#include "sinkrt/host/model_zoo.h"

namespace sinkrt::host::parallel {
namespace {

// (Appending, not operator+: GCC 12 warns falsely about the latter here.)
std::string Name(const char* prefix, size_t i) {
  std::string s = prefix;
  s += std::to_string(i);
  return s;
}

SearchNode RandomNode(std::mt19937& rng, size_t id) {
  std::uniform_int_distribution<size_t> k(4, 8);
  std::uniform_real_distribution<double> u(0, 1);
  SearchNode n{Name("op", id), {}, {}};
  const size_t count = k(rng);
  for (size_t c = 0; c < count; ++c) {
    n.candidates.push_back(
        {Name("s", c), 1e-3 * u(rng), static_cast<uint64_t>(1e6 * u(rng)), static_cast<uint32_t>(c == 0)});
  }
  return n;
}

void Connect(SearchProblem& p, std::mt19937& rng, size_t a, size_t b) {
  std::uniform_real_distribution<double> u(0, 1);
  const size_t ka = p.nodes[a].candidates.size(), kb = p.nodes[b].candidates.size();
  SearchEdge e{a, b, std::vector<double>(ka * kb)};
  for (size_t i = 0; i < ka; ++i) {
    for (size_t j = 0; j < kb; ++j) e.cost[i * kb + j] = i == j ? 0 : 1e-3 * u(rng);
  }
  p.edges.push_back(std::move(e));
}

SearchProblem Transformer(size_t ops) {
  std::mt19937 rng(7);
  SearchProblem p;
  auto add = [&] {
    p.nodes.push_back(RandomNode(rng, p.nodes.size()));
    return p.nodes.size() - 1;
  };
  size_t in = add();
  while (p.nodes.size() + 12 <= ops) {
    const size_t ln1 = add(), q = add(), k = add(), v = add(), attn = add(), proj = add(), add1 = add();
    const size_t ln2 = add(), up = add(), gelu = add(), down = add(), add2 = add();
    Connect(p, rng, in, ln1);
    for (size_t x : {q, k, v}) {
      Connect(p, rng, ln1, x);
      Connect(p, rng, x, attn);
    }
    Connect(p, rng, attn, proj);
    Connect(p, rng, proj, add1);
    Connect(p, rng, in, add1);
    Connect(p, rng, add1, ln2);
    Connect(p, rng, ln2, up);
    Connect(p, rng, up, gelu);
    Connect(p, rng, gelu, down);
    Connect(p, rng, down, add2);
    Connect(p, rng, add1, add2);
    in = add2;
  }
  while (p.nodes.size() < ops) {
    const size_t next = add();
    Connect(p, rng, in, next);
    in = next;
  }
  return p;
}

SearchProblem Layered(size_t ops) {
  constexpr size_t kWidth = 4;
  std::mt19937 rng(11);
  std::uniform_int_distribution<size_t> pick(0, kWidth - 1), fan(1, 2);
  SearchProblem p;
  for (size_t v = 0; v < ops; ++v) {
    p.nodes.push_back(RandomNode(rng, v));
    if (v < kWidth) continue;
    const size_t layer = v / kWidth * kWidth;
    const size_t first = pick(rng);
    Connect(p, rng, layer - kWidth + first, v);
    if (fan(rng) == 2) {
      const size_t second = (first + 1 + pick(rng) % (kWidth - 1)) % kWidth;
      Connect(p, rng, layer - kWidth + second, v);
    }
  }
  return p;
}

void Run(benchmark::State& state, const SearchProblem& p, const SearchOptions& options) {
  size_t candidates = 0;
  for (const SearchNode& n : p.nodes) candidates += n.candidates.size();
  SearchResult last;
  for (auto _ : state) {
    auto r = SearchStrategies(p, options);
    if (!r.ok()) {
      state.SkipWithError(r.status().ToString().c_str());
      return;
    }
    last = std::move(r).value();
    benchmark::DoNotOptimize(last.choice.data());
  }
  state.SetComplexityN(static_cast<int64_t>(p.nodes.size()));
  state.counters["candidates"] = static_cast<double>(candidates);
  state.counters["pruned"] = static_cast<double>(last.pruned_candidates);
  state.counters["generalized"] = static_cast<double>(last.generalized_eliminations);
  state.counters["exact"] = last.exact ? 1 : 0;
}

void BM_SearchTransformer(benchmark::State& state) { Run(state, Transformer(static_cast<size_t>(state.range(0))), {}); }

void BM_SearchLayered(benchmark::State& state) { Run(state, Layered(static_cast<size_t>(state.range(0))), {}); }

void RunLimited(benchmark::State& state, const SearchProblem& p) {
  // Halfway between the smallest and the largest footprint.
  uint64_t lo = 0, hi = 0;
  for (const SearchNode& n : p.nodes) {
    uint64_t a = UINT64_MAX, b = 0;
    for (const StrategyCandidate& c : n.candidates) {
      a = std::min(a, c.memory_bytes);
      b = std::max(b, c.memory_bytes);
    }
    lo += a;
    hi += b;
  }
  SearchOptions o;
  o.memory_limit_bytes = lo + (hi - lo) / 2;
  Run(state, p, o);
}

void BM_SearchTransformerLimit(benchmark::State& state) {
  RunLimited(state, Transformer(static_cast<size_t>(state.range(0))));
}

void BM_SearchLayeredLimit(benchmark::State& state) { RunLimited(state, Layered(static_cast<size_t>(state.range(0)))); }

void BM_Propagation(benchmark::State& state) {
  SearchProblem p = Transformer(static_cast<size_t>(state.range(0)));
  p.nodes[0].fixed = 0;
  SearchOptions o;
  o.mode = SearchMode::kShardingPropagation;
  Run(state, p, o);
}

void BM_PlanVit(benchmark::State& state) {
  const VitConfig config{.dim = 256, .heads = 4, .hidden = 1024, .blocks = static_cast<int>(state.range(0))};
  Graph g = MakeVitNetwork(64, 1, config);
  const TensorId label = g.Input("label", {64}, DType::I32);
  g.SetLoss(g.SparseSoftmaxCrossEntropy(g.outputs().front(), label));
  AutoParallelOptions o;
  o.device_num = state.range(1);
  o.optimizer = OptimizerSpec::Adam(1e-3f);
  size_t candidates = 0;
  double search_s = 0;
  for (auto _ : state) {
    Graph copy = g;
    Result<AutoParallelPlan> plan = PlanAutoParallel(copy, o);
    if (!plan.ok()) return state.SkipWithError(plan.status().ToString().c_str());
    candidates = plan->candidates;
    search_s = plan->search_s;
  }
  state.counters["ops"] = static_cast<double>(g.ops().size());
  state.counters["candidates"] = static_cast<double>(candidates);
  state.counters["search_ms"] = search_s * 1e3;
}

BENCHMARK(BM_PlanVit)
    ->ArgNames({"blocks", "ranks"})
    ->Args({4, 4})
    ->Args({48, 2})
    ->Args({48, 4})
    ->Args({48, 8})
    ->Unit(benchmark::kMillisecond);

BENCHMARK(BM_SearchTransformer)->Arg(100)->Arg(1000)->Arg(10000)->Unit(benchmark::kMillisecond)->Complexity();
BENCHMARK(BM_SearchLayered)->Arg(100)->Arg(1000)->Arg(10000)->Unit(benchmark::kMillisecond)->Complexity();
BENCHMARK(BM_SearchTransformerLimit)->Arg(100)->Arg(1000)->Arg(10000)->Unit(benchmark::kMillisecond)->Complexity();
BENCHMARK(BM_SearchLayeredLimit)->Arg(100)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Propagation)->Arg(100)->Arg(1000)->Arg(10000)->Unit(benchmark::kMillisecond)->Complexity();

}  // namespace
}  // namespace sinkrt::host::parallel

BENCHMARK_MAIN();
