// AUTO_PARALLEL's strategy search (host/src/parallel/auto_parallel/strategy_search.h) on
// abstract cost tables: dynamic_programming equals brute force on random
// DAGs, the eliminations on chains, diamonds and stars, the tie-break
// toward data parallel, the memory limit, the errors, and
// sharding_propagation.
#include <gtest/gtest.h>

#include <limits>

#include <cmath>
#include <random>

#include "host/src/parallel/auto_parallel/strategy_search.h"

namespace sinkrt::host::parallel {
namespace {

// (Appending, not operator+: GCC 12 warns falsely about the latter here.)
std::string Name(const char* prefix, size_t i) {
  std::string s = prefix;
  s += std::to_string(i);
  return s;
}

SearchNode Node(std::string op, std::vector<double> times, std::vector<uint64_t> mem = {},
                std::vector<uint32_t> dp = {}) {
  SearchNode n{std::move(op), {}, {}};
  for (size_t i = 0; i < times.size(); ++i) {
    n.candidates.push_back({Name("s", i), times[i], mem.empty() ? 0 : mem[i], dp.empty() ? 0 : dp[i]});
  }
  return n;
}

// Redistribution 0 on the diagonal (same layout), `off` elsewhere.
SearchEdge Match(size_t a, size_t b, size_t k, double off) {
  SearchEdge e{a, b, std::vector<double>(k * k, off)};
  for (size_t i = 0; i < k; ++i) e.cost[i * k + i] = 0;
  return e;
}

SearchOptions Mode(SearchMode mode) {
  SearchOptions o;
  o.mode = mode;
  return o;
}

struct Brute {
  std::vector<size_t> best;
  double best_score = INFINITY;
  double second_score = INFINITY;  // the best among plans other than `best`
};

// Every plan, with memory ≤ limit.
Brute BruteForce(const SearchProblem& p, std::optional<uint64_t> limit) {
  Brute b;
  const double bonus = DataParallelBonus(p);
  std::vector<size_t> choice(p.nodes.size(), 0);
  while (true) {
    bool free = true;
    for (size_t v = 0; v < p.nodes.size(); ++v) free &= !p.nodes[v].fixed || *p.nodes[v].fixed == choice[v];
    const PlanCost c = EvaluatePlan(p, choice);
    if (free && (!limit || c.memory_bytes <= *limit) && std::isfinite(c.time_s)) {
      const double s = c.time_s - bonus * static_cast<double>(c.data_parallel);
      if (s < b.best_score) {
        b.second_score = b.best_score;
        b.best_score = s;
        b.best = choice;
      } else if (s < b.second_score) {
        b.second_score = s;
      }
    }
    size_t v = 0;
    for (; v < p.nodes.size(); ++v) {
      if (++choice[v] < p.nodes[v].candidates.size()) break;
      choice[v] = 0;
    }
    if (v == p.nodes.size()) return b;
  }
}

SearchProblem RandomDag(std::mt19937& rng) {
  std::uniform_int_distribution<size_t> nodes(2, 12), cands(2, 4);
  std::uniform_real_distribution<double> u(0, 1);
  SearchProblem p;
  const size_t n = nodes(rng);
  // Dense graphs are not series-parallel and take the general elimination.
  const double density = u(rng) < 0.3 ? 0.6 : 0.25;
  uint64_t plans = 1;
  for (size_t v = 0; v < n; ++v) {
    size_t k = cands(rng);
    while (k > 2 && plans * k > (uint64_t{1} << 15)) --k;
    plans *= k;
    SearchNode node{Name("op", v), {}, {}};
    for (size_t c = 0; c < k; ++c) {
      node.candidates.push_back(
          {Name("c", c), u(rng), static_cast<uint64_t>(u(rng) * 1000), static_cast<uint32_t>(u(rng) < 0.3)});
    }
    p.nodes.push_back(std::move(node));
  }
  for (size_t a = 0; a < n; ++a) {
    for (size_t b = a + 1; b < n; ++b) {
      const int copies = u(rng) < density ? (u(rng) < 0.1 ? 2 : 1) : 0;  // some parallel edges
      for (int i = 0; i < copies; ++i) {
        SearchEdge e{a, b, {}};
        for (size_t x = 0; x < p.nodes[a].candidates.size() * p.nodes[b].candidates.size(); ++x) {
          // Some redistributions repeat a row, so pruning has work.
          e.cost.push_back(u(rng) < 0.2 ? 0.0 : u(rng));
        }
        p.edges.push_back(std::move(e));
      }
    }
  }
  return p;
}

void ExpectMatchesBruteForce(const SearchProblem& p, const Brute& b, std::optional<uint64_t> limit, bool prune,
                             int graph) {
  SearchOptions opt;
  opt.memory_limit_bytes = limit;
  opt.prune = prune;
  auto r = SearchStrategies(p, opt);
  if (b.best.empty()) {
    EXPECT_FALSE(r.ok()) << "graph " << graph;
    return;
  }
  ASSERT_TRUE(r.ok()) << "graph " << graph << ": " << r.status().ToString();
  const double tol = 1e-9 * (1 + std::abs(b.best_score));
  EXPECT_NEAR(PlanScore(p, r->choice), b.best_score, tol) << "graph " << graph;
  if (limit) {
    EXPECT_LE(r->cost.memory_bytes, *limit) << "graph " << graph;
  }
  EXPECT_TRUE(r->exact) << "graph " << graph;
  if (b.second_score - b.best_score > tol) {
    EXPECT_EQ(r->choice, b.best) << "graph " << graph;
  }
}

TEST(StrategySearch, DynamicProgrammingEqualsBruteForceOnRandomDags) {
  std::mt19937 rng(17);
  size_t generalized = 0, pruned = 0;
  for (int g = 0; g < 200; ++g) {
    SearchProblem p = RandomDag(rng);
    const Brute b = BruteForce(p, std::nullopt);
    ExpectMatchesBruteForce(p, b, std::nullopt, true, g);
    ExpectMatchesBruteForce(p, b, std::nullopt, false, g);
    auto r = SearchStrategies(p, {});
    ASSERT_TRUE(r.ok());
    generalized += r->generalized_eliminations;
    pruned += r->pruned_candidates;
  }
  // Both paths were taken.
  EXPECT_GT(generalized, 0u);
  EXPECT_GT(pruned, 0u);
}

TEST(StrategySearch, DynamicProgrammingEqualsBruteForceUnderMemoryLimits) {
  std::mt19937 rng(29);
  for (int g = 0; g < 200; ++g) {
    SearchProblem p = RandomDag(rng);
    // A limit between the smallest and the largest footprint.
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
    const uint64_t limit = lo + (hi - lo) / 3;
    ExpectMatchesBruteForce(p, BruteForce(p, limit), limit, g % 2 == 0, g);
  }
}

TEST(StrategySearch, ChainFollowsTheCheapestPath) {
  // The middle op is cheap under s1 but both neighbours prefer s0, and
  // redistribution is dear: everyone takes s0.
  SearchProblem p;
  p.nodes = {Node("a", {1, 4}), Node("b", {5, 1}), Node("c", {1, 4})};
  p.edges = {Match(0, 1, 2, 10), Match(1, 2, 2, 10)};
  auto r = SearchStrategies(p, {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->choice, (std::vector<size_t>{0, 0, 0}));
  EXPECT_DOUBLE_EQ(r->cost.time_s, 7);
  // Cheap redistribution: b switches.
  p.edges = {Match(0, 1, 2, 0.5), Match(1, 2, 2, 0.5)};
  r = SearchStrategies(p, {});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->choice, (std::vector<size_t>{0, 1, 0}));
  EXPECT_DOUBLE_EQ(r->cost.time_s, 4);
}

TEST(StrategySearch, DiamondAndParallelEdges) {
  // a -> b -> d, a -> c -> d, and a second tensor a -> d.
  SearchProblem p;
  p.nodes = {Node("a", {1, 1, 1}), Node("b", {3, 1, 3}), Node("c", {3, 1.5, 1}), Node("d", {1, 1, 1})};
  p.edges = {Match(0, 1, 3, 4), Match(0, 2, 3, 4), Match(1, 3, 3, 4), Match(2, 3, 3, 4), Match(0, 3, 3, 4)};
  auto r = SearchStrategies(p, {});
  ASSERT_TRUE(r.ok());
  const Brute b = BruteForce(p, std::nullopt);
  EXPECT_EQ(r->choice, (std::vector<size_t>{1, 1, 1, 1}));
  EXPECT_EQ(r->choice, b.best);
  EXPECT_DOUBLE_EQ(r->cost.time_s, EvaluatePlan(p, b.best).time_s);
  EXPECT_EQ(r->generalized_eliminations, 0u);  // series-parallel
}

TEST(StrategySearch, FanOutAndFanIn) {
  // One producer feeding five consumers that feed one sink: the hub must
  // weigh all of them.
  SearchProblem p;
  p.nodes.push_back(Node("hub", {0, 0.5}));
  for (int i = 0; i < 5; ++i) p.nodes.push_back(Node(Name("leaf", i), {1, 0}));
  p.nodes.push_back(Node("sink", {0, 0}));
  for (size_t i = 1; i <= 5; ++i) {
    p.edges.push_back(Match(0, i, 2, 0.3));
    p.edges.push_back(Match(i, 6, 2, 0.3));
  }
  auto r = SearchStrategies(p, {});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->choice, (std::vector<size_t>{1, 1, 1, 1, 1, 1, 1}));
  EXPECT_EQ(r->choice, BruteForce(p, std::nullopt).best);
}

TEST(StrategySearch, TiesGoToDataParallel) {
  // Two candidates, same time, the data-parallel one listed second.
  SearchProblem p;
  p.nodes = {Node("matmul1", {1, 1}, {}, {0, 1}), Node("matmul2", {1, 1}, {}, {0, 1})};
  p.edges = {Match(0, 1, 2, 1)};
  for (SearchMode mode : {SearchMode::kDynamicProgramming, SearchMode::kShardingPropagation}) {
    auto r = SearchStrategies(p, Mode(mode));
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->choice, (std::vector<size_t>{1, 1})) << SearchModeName(mode);
    EXPECT_EQ(r->cost.data_parallel, 2u);
  }
  // Within the epsilon the tie still holds...
  const double scale = 2 + 1;
  p.nodes[0].candidates[0].time_s = 1 - 0.1 * kTieRelativeEpsilon * scale;
  auto r = SearchStrategies(p, {});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->choice, (std::vector<size_t>{1, 1}));
  // ...beyond it the faster plan wins.
  p.nodes[0].candidates[0].time_s = 1 - 10 * kTieRelativeEpsilon * scale;
  p.nodes[1].candidates[0].time_s = 1 - 10 * kTieRelativeEpsilon * scale;
  r = SearchStrategies(p, {});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->choice, (std::vector<size_t>{0, 0}));
}

TEST(StrategySearch, MemoryLimitForcesModelParallel) {
  // Data parallel (s0) is faster but keeps whole weights on every rank.
  SearchProblem p;
  p.nodes = {Node("fc1", {1, 2}, {400, 100}, {1, 0}), Node("fc2", {1, 1.9}, {400, 100}, {1, 0})};
  p.edges = {Match(0, 1, 2, 0.5)};
  auto r = SearchStrategies(p, {});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->choice, (std::vector<size_t>{0, 0}));
  r = SearchStrategies(p, {.memory_limit_bytes = 500});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->choice, (std::vector<size_t>{0, 1}));  // 1 + 1.9 + 0.5 beats 2 + 1 + 0.5
  EXPECT_EQ(r->cost.memory_bytes, 500u);
  r = SearchStrategies(p, {.memory_limit_bytes = 300});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->choice, (std::vector<size_t>{1, 1}));
}

TEST(StrategySearch, ErrorsNameTheSmallestFootprintAndTheOp) {
  SearchProblem p;
  p.nodes = {Node("fc1", {1, 2}, {400, 100}), Node("fc2", {1, 2}, {400, 150})};
  p.edges = {Match(0, 1, 2, 0.5)};
  auto r = SearchStrategies(p, {.memory_limit_bytes = 249});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(r.status().message().find("smallest footprint found is 250 bytes"), std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("249"), std::string::npos);

  p.nodes[1].candidates.clear();
  p.edges.clear();
  r = SearchStrategies(p, {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("op 'fc2' has no candidate strategy"), std::string::npos) << r.status().message();

  p.nodes[1] = Node("fc2", {1, 2});
  p.edges = {SearchEdge{0, 1, {0, 1, 2}}};
  r = SearchStrategies(p, {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("edge 'fc1' -> 'fc2' has 3 costs, expected 4"), std::string::npos)
      << r.status().message();

  p.edges = {SearchEdge{0, 1, {INFINITY, INFINITY, INFINITY, INFINITY}}};
  r = SearchStrategies(p, {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("no plan has a finite cost"), std::string::npos) << r.status().message();

  EXPECT_FALSE(ParseSearchMode("recursive_programming").ok());
  EXPECT_FALSE(ParseSearchMode("dp").ok());
  EXPECT_EQ(*ParseSearchMode("sharding_propagation"), SearchMode::kShardingPropagation);
}

TEST(StrategySearch, RefusesATableTooLargeToBuild) {
  // Ten ops all joined to each other with 8 distinct candidates each: the
  // first elimination needs a table over 9 neighbours (8^10 entries).
  SearchProblem p;
  for (int i = 0; i < 10; ++i) {
    p.nodes.push_back(Node(Name("op", i), {1, 2, 3, 4, 5, 6, 7, 8}));
  }
  for (size_t a = 0; a < 10; ++a) {
    for (size_t b = a + 1; b < 10; ++b) {
      SearchEdge e = Match(a, b, 8, 1);
      for (size_t i = 0; i < 8; ++i) e.cost[i * 8 + (7 - i)] = 0.5;  // every candidate has a use
      p.edges.push_back(std::move(e));
    }
  }
  auto r = SearchStrategies(p, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(r.status().message().find("too far from series-parallel: eliminating op 'op0'"), std::string::npos)
      << r.status().message();
}

TEST(StrategySearch, ParetoPruningKeepsWhatEdgesCanUse) {
  // b's s1 is slower than s0 with the same edges: dropped. s2 is slower
  // still but matches a's s1 for free: kept.
  SearchProblem p;
  p.nodes = {Node("a", {1, 1, 1}), Node("b", {1, 2, 3})};
  p.edges = {SearchEdge{0, 1, {0, 0, 5, 5, 5, 0, 5, 5, 5}}};
  const auto keep = ParetoCandidates(p);
  EXPECT_EQ(keep[1], (std::vector<size_t>{0, 2}));
  // a's s2 is equal to s1 except a worse edge row.
  EXPECT_EQ(keep[0], (std::vector<size_t>{0, 1}));
  p.nodes[1].fixed = 1;
  EXPECT_EQ(ParetoCandidates(p)[1], (std::vector<size_t>{1}));
}

TEST(StrategySearch, ShardingPropagationFollowsTheFixedOp) {
  // A chain a -> b -> c -> d; the user shards b as s2. Each op on its own
  // would rather take s0, but redistribution is dearer than the difference:
  // everyone follows b. dynamic_programming, unfixed, keeps s0.
  SearchProblem p;
  for (const char* op : {"a", "b", "c", "d"}) p.nodes.push_back(Node(op, {1, 1.5, 1.2}));
  for (size_t i = 0; i + 1 < 4; ++i) p.edges.push_back(Match(i, i + 1, 3, 1));
  auto dp = SearchStrategies(p, {});
  ASSERT_TRUE(dp.ok());
  EXPECT_EQ(dp->choice, (std::vector<size_t>{0, 0, 0, 0}));
  p.nodes[1].fixed = 2;
  auto r = SearchStrategies(p, Mode(SearchMode::kShardingPropagation));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->choice, (std::vector<size_t>{2, 2, 2, 2}));
  // With the fixed op inside dynamic_programming an end may break away
  // where that pays; here it does not (s0 saves 0.2, its redistribution
  // costs 1), and the fixed op stays.
  auto fixed_dp = SearchStrategies(p, {});
  ASSERT_TRUE(fixed_dp.ok());
  EXPECT_EQ(fixed_dp->choice[1], 2u);
  EXPECT_LE(fixed_dp->cost.time_s, r->cost.time_s);
}

TEST(StrategySearch, ShardingPropagationRecoversWhenGreedPaintsItselfIntoACorner) {
  // a (fixed s0) reads b and f; f mirrors b (a reshape: only matching
  // candidates). Greed gives f s1 (cheaper from a), after which b has no
  // finite choice (a forbids b = s1, f forbids b = s0). The search must
  // still find the one finite plan, b = f = s0.
  constexpr double kInf = std::numeric_limits<double>::infinity();
  SearchProblem p;
  for (const char* op : {"a", "b", "f"}) p.nodes.push_back(Node(op, {1, 1}));
  p.nodes[0].fixed = 0;
  p.edges.push_back({0, 2, {1, 0, 1, 0}});        // a - f: f = s1 is free, s0 costs 1
  p.edges.push_back(Match(1, 2, 2, kInf));        // b - f: mirrors
  p.edges.push_back({0, 1, {0, kInf, 0, kInf}});  // a - b: b = s1 forbidden
  auto r = SearchStrategies(p, Mode(SearchMode::kShardingPropagation));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->choice, (std::vector<size_t>{0, 0, 0}));
  EXPECT_DOUBLE_EQ(r->cost.time_s, 4);
}

}  // namespace
}  // namespace sinkrt::host::parallel
