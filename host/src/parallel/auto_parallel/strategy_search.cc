// dynamic_programming is variable elimination over the op graph, in
// MindSpore's and OptCNN's order: an op with one neighbour folds into it
// (leaf / contract elimination), an op with two neighbours becomes an edge
// between them holding the argmin (node elimination), and tables over the
// same ops are added (edge elimination). Only when every op left has three
// or more neighbours is the op with the fewest eliminated into a table
// over all of them (MindSpore's last-resort Star elimination, in general
// form); that is exact too, and bounded by kMaxEliminationCells.
//
// Each table entry holds labels (score, memory, record). Without a memory
// limit one label per entry, the best; with one, the Pareto set in (score,
// memory), so the constrained optimum is exact. Records form a tree whose
// leaves are (op, candidate): the best final label's tree is the plan.
#include "host/src/parallel/auto_parallel/strategy_search.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <set>
#include <utility>

namespace sinkrt::host::parallel {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Label {
  double score;
  uint64_t mem;
  int32_t rec;  // -1: nothing to record (an edge's own cost)
};

struct Record {
  int32_t node;  // >= 0: a leaf, op `node` takes candidate `cand`
  uint32_t cand;
  uint32_t child_begin;
  uint32_t child_count;
};

struct Factor {
  std::vector<int> scope;       // ascending op ids
  std::vector<uint32_t> radix;  // candidates per scope op
  std::vector<uint32_t> begin;  // entry e's labels: labels[begin[e], begin[e + 1])
  std::vector<Label> labels;
  bool alive = true;

  std::span<const Label> Cell(size_t e) const { return {labels.data() + begin[e], labels.data() + begin[e + 1]}; }
};

// A sum of one label from each of several entries, before pruning.
struct Sum {
  double score;
  uint64_t mem;
  uint32_t tag;    // which group of entries (the eliminated op's candidate)
  uint64_t combo;  // mixed-radix index of the label chosen in each entry
};

class Eliminator {
 public:
  Eliminator(const SearchProblem& p, const std::vector<std::vector<size_t>>& keep, std::optional<uint64_t> limit,
             size_t max_labels, double bonus)
      : p_(p), keep_(keep), limit_(limit), max_labels_(std::max<size_t>(max_labels, 2)), node_factors_(p.nodes.size()) {
    for (size_t v = 0; v < p.nodes.size(); ++v) {
      Factor f;
      f.scope = {static_cast<int>(v)};
      f.radix = {static_cast<uint32_t>(keep[v].size())};
      f.begin.push_back(0);
      for (size_t c : keep[v]) {
        const StrategyCandidate& s = p.nodes[v].candidates[c];
        if (Fits(s.memory_bytes)) {
          records_.push_back({static_cast<int32_t>(v), static_cast<uint32_t>(c), 0, 0});
          f.labels.push_back(
              {s.time_s - bonus * s.data_parallel, s.memory_bytes, static_cast<int32_t>(records_.size() - 1)});
        }
        f.begin.push_back(static_cast<uint32_t>(f.labels.size()));
      }
      AddFactor(std::move(f));
    }
    for (const SearchEdge& e : p.edges) {
      const int a = static_cast<int>(std::min(e.producer, e.consumer));
      const int b = static_cast<int>(std::max(e.producer, e.consumer));
      const bool flip = e.producer > e.consumer;
      const size_t nc = p.nodes[e.consumer].candidates.size();
      Factor f;
      f.scope = {a, b};
      f.radix = {static_cast<uint32_t>(keep[a].size()), static_cast<uint32_t>(keep[b].size())};
      f.begin.push_back(0);
      for (size_t ia : keep[a]) {
        for (size_t ib : keep[b]) {
          const double c = flip ? e.cost[ib * nc + ia] : e.cost[ia * nc + ib];
          if (c < kInf) f.labels.push_back({c, 0, -1});
          f.begin.push_back(static_cast<uint32_t>(f.labels.size()));
        }
      }
      AddFactor(std::move(f));
    }
  }

  Result<SearchResult> Run() {
    std::set<std::pair<size_t, int>> order;
    std::vector<size_t> degree(p_.nodes.size());
    for (size_t v = 0; v < p_.nodes.size(); ++v) {
      degree[v] = Neighbours(static_cast<int>(v)).size();
      order.insert({degree[v], static_cast<int>(v)});
    }
    SearchResult result;
    while (!order.empty()) {
      const int v = order.begin()->second;
      order.erase(order.begin());
      if (degree[v] >= 3) ++result.generalized_eliminations;
      std::vector<int> touched;
      SINKRT_RETURN_IF_ERROR(Eliminate(v, &touched));
      for (int s : touched) {
        order.erase({degree[s], s});
        degree[s] = Neighbours(s).size();
        order.insert({degree[s], s});
      }
    }
    if (final_ < 0 || factors_[final_].labels.empty()) {
      return InvalidArgument(
          "dynamic_programming: no plan has a finite cost" +
          std::string(limit_ ? " within the memory limit of " + std::to_string(*limit_) + " bytes per rank" : "") +
          " (every plan meets a forbidden, infinite-cost redistribution)");
    }
    result.exact = !thinned_;
    // Labels of an entry are sorted by (score, memory): the first is the best.
    const Label best = factors_[final_].labels.front();
    result.choice.assign(p_.nodes.size(), SIZE_MAX);
    std::vector<int32_t> stack = {best.rec};
    while (!stack.empty()) {
      const int32_t r = stack.back();
      stack.pop_back();
      if (r < 0) continue;
      const Record& rec = records_[r];
      if (rec.node >= 0) {
        if (result.choice[rec.node] != SIZE_MAX) {
          return Internal("dynamic_programming chose op '" + p_.nodes[rec.node].op + "' twice");
        }
        result.choice[rec.node] = rec.cand;
      }
      for (uint32_t i = 0; i < rec.child_count; ++i) stack.push_back(children_[rec.child_begin + i]);
    }
    for (size_t v = 0; v < p_.nodes.size(); ++v) {
      if (result.choice[v] == SIZE_MAX) {
        return Internal("dynamic_programming left op '" + p_.nodes[v].op + "' without a strategy");
      }
    }
    return result;
  }

 private:
  bool Fits(uint64_t mem) const { return !limit_ || mem <= *limit_; }

  std::vector<int>& LiveFactors(int v) {
    auto& fs = node_factors_[v];
    std::erase_if(fs, [&](int f) { return !factors_[f].alive; });
    return fs;
  }

  std::vector<int> Neighbours(int v) {
    std::vector<int> out;
    for (int f : LiveFactors(v)) {
      for (int u : factors_[f].scope) {
        if (u != v) out.push_back(u);
      }
    }
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
  }

  // Without a memory limit: keeps the best sum (least score, then least
  // memory, then the lowest tag and combo) as a label whose record joins the
  // records of the labels it adds (an eliminated op's own leaf comes in
  // through its unary table, one of the groups).
  void Prune(std::vector<Sum>& sums, const std::vector<std::span<const Label>>& groups, size_t per_tag,
             std::vector<Label>& out) {
    if (sums.empty()) return;
    sums[0] = *std::min_element(sums.begin(), sums.end(), [](const Sum& x, const Sum& y) {
      if (x.score != y.score) return x.score < y.score;
      if (x.mem != y.mem) return x.mem < y.mem;
      if (x.tag != y.tag) return x.tag < y.tag;
      return x.combo < y.combo;
    });
    const size_t kept = 1;
    for (size_t k = 0; k < kept; ++k) {
      const Sum& s = sums[k];
      // Decode the combo into the records it joins.
      uint64_t combo = s.combo;
      const size_t first = static_cast<size_t>(s.tag) * per_tag;
      const uint32_t child_begin = static_cast<uint32_t>(children_.size());
      for (size_t i = per_tag; i-- > 0;) {
        const auto& g = groups[first + i];
        const int32_t r = g[combo % g.size()].rec;
        combo /= g.size();
        if (r >= 0) children_.push_back(r);
      }
      out.push_back({s.score, s.mem, JoinChildren(child_begin)});
    }
  }

  // Appends every feasible sum of one label from each of `groups[tag *
  // per_tag ...]` to `sums`.
  void Sums(const std::vector<std::span<const Label>>& groups, size_t per_tag, uint32_t tag,
            std::vector<Sum>& sums) const {
    const size_t first = static_cast<size_t>(tag) * per_tag;
    uint64_t total = 1;
    for (size_t i = 0; i < per_tag; ++i) {
      if (groups[first + i].empty()) return;
      total *= groups[first + i].size();
    }
    for (uint64_t combo = 0; combo < total; ++combo) {
      uint64_t rest = combo;
      double score = 0;
      uint64_t mem = 0;
      for (size_t i = per_tag; i-- > 0;) {
        const auto& g = groups[first + i];
        const Label& l = g[rest % g.size()];
        rest /= g.size();
        score += l.score;
        mem += l.mem;
      }
      if (score < kInf && Fits(mem)) sums.push_back({score, mem, tag, combo});
    }
  }

  // The Pareto front of `labels` in (score, memory), best score first; past
  // max_labels_ it is thinned to evenly spaced points (the ends kept)
  // and the search reports itself inexact.
  template <typename T>
  void Front(std::vector<T>& labels) {
    std::stable_sort(labels.begin(), labels.end(),
                     [](const T& x, const T& y) { return x.score != y.score ? x.score < y.score : x.mem < y.mem; });
    uint64_t min_mem = UINT64_MAX;
    size_t kept = 0;
    for (const T& l : labels) {
      if (l.mem < min_mem) {
        min_mem = l.mem;
        labels[kept++] = l;
      }
    }
    labels.resize(kept);
    if (kept > max_labels_) {
      thinned_ = true;
      std::vector<T> thin;
      for (size_t i = 0; i < max_labels_; ++i) thin.push_back(labels[i * (kept - 1) / (max_labels_ - 1)]);
      labels = std::move(thin);
    }
  }

  // A sum under construction: its score, memory and the records of the
  // labels it adds, pool_[at, at + groups folded so far).
  struct Partial {
    double score;
    uint64_t mem;
    uint32_t at;
  };
  struct Pair {
    double score;
    uint64_t mem;
    uint32_t at;  // the Partial's records
    int32_t rec;  // the added label's record
  };

  // Under a memory limit: the front of the sums of one label from each of
  // groups[tag * per_tag ...], folded one group at a time so the front, not
  // the cross product, bounds the work; records are made only for what
  // survives (Emit). Appends to `acc`.
  void FoldTag(const std::vector<std::span<const Label>>& groups, size_t per_tag, uint32_t tag,
               std::vector<Partial>& acc) {
    const size_t first = static_cast<size_t>(tag) * per_tag;
    cur_.clear();
    for (const Label& l : groups[first]) {
      cur_.push_back({l.score, l.mem, static_cast<uint32_t>(pool_.size())});
      pool_.push_back(l.rec);
    }
    for (size_t i = 1; i < per_tag && !cur_.empty(); ++i) {
      pairs_.clear();
      for (const Partial& x : cur_) {
        for (const Label& y : groups[first + i]) {
          const double score = x.score + y.score;
          const uint64_t mem = x.mem + y.mem;
          if (score < kInf && Fits(mem)) pairs_.push_back({score, mem, x.at, y.rec});
        }
      }
      Front(pairs_);
      cur_.clear();
      for (const Pair& q : pairs_) {
        const uint32_t at = static_cast<uint32_t>(pool_.size());
        for (size_t k = 0; k < i; ++k) pool_.push_back(pool_[q.at + k]);
        pool_.push_back(q.rec);
        cur_.push_back({q.score, q.mem, at});
      }
    }
    for (const Partial& p : cur_) {
      if (p.score < kInf && Fits(p.mem)) acc.push_back(p);
    }
  }

  // The front of `acc` (sums of `per_tag` labels each) as labels in `out`.
  void Emit(std::vector<Partial>& acc, size_t per_tag, std::vector<Label>& out) {
    Front(acc);
    for (const Partial& p : acc) {
      const uint32_t child_begin = static_cast<uint32_t>(children_.size());
      for (size_t k = 0; k < per_tag; ++k) {
        if (pool_[p.at + k] >= 0) children_.push_back(pool_[p.at + k]);
      }
      out.push_back({p.score, p.mem, JoinChildren(child_begin)});
    }
    acc.clear();
    pool_.clear();
  }

  // Registers `f`, adding it into a live table over the same ops (edge
  // elimination: parallel edges merge by adding their matrices).
  void AddFactor(Factor f) {
    int same = -1;
    if (f.scope.empty()) {
      same = final_;
    } else {
      for (int g : LiveFactors(f.scope[0])) {
        if (factors_[g].scope == f.scope) {
          same = g;
          break;
        }
      }
    }
    if (same >= 0) {
      Factor& g = factors_[same];
      Factor merged;
      merged.scope = f.scope;
      merged.radix = f.radix;
      merged.begin.push_back(0);
      std::vector<std::span<const Label>> groups(2);
      for (size_t e = 0; e + 1 < f.begin.size(); ++e) {
        groups[0] = g.Cell(e);
        groups[1] = f.Cell(e);
        if (limit_) {
          FoldTag(groups, 2, 0, front_);
          Emit(front_, 2, merged.labels);
        } else {
          scratch_.clear();
          Sums(groups, 2, 0, scratch_);
          Prune(scratch_, groups, 2, merged.labels);
        }
        merged.begin.push_back(static_cast<uint32_t>(merged.labels.size()));
      }
      g.labels = std::move(merged.labels);
      g.begin = std::move(merged.begin);
      return;
    }
    factors_.push_back(std::move(f));
    const int id = static_cast<int>(factors_.size() - 1);
    if (factors_[id].scope.empty()) final_ = id;
    for (int v : factors_[id].scope) node_factors_[v].push_back(id);
  }

  Status Eliminate(int v, std::vector<int>* touched) {
    const std::vector<int> fs = LiveFactors(v);
    std::vector<int> scope = Neighbours(v);
    *touched = scope;
    Factor out;
    out.scope = scope;
    uint64_t cells = 1;
    for (int s : scope) {
      out.radix.push_back(static_cast<uint32_t>(keep_[s].size()));
      cells *= keep_[s].size();
    }
    const uint32_t kv = static_cast<uint32_t>(keep_[v].size());
    if (cells * kv > kMaxEliminationCells) {
      return ResourceExhausted("dynamic_programming: the graph is too far from series-parallel: eliminating op '" +
                               p_.nodes[v].op + "' needs a table over its " + std::to_string(scope.size()) +
                               " neighbours with " + std::to_string(cells * kv) + " entries (limit " +
                               std::to_string(kMaxEliminationCells) + ")");
    }
    // Where each factor's ops sit in the joint assignment (scope..., v).
    const size_t m = fs.size();
    std::vector<std::vector<std::pair<size_t, uint64_t>>> where(m);
    for (size_t i = 0; i < m; ++i) {
      const Factor& f = factors_[fs[i]];
      uint64_t stride = 1;
      for (size_t k = f.scope.size(); k-- > 0;) {
        const int u = f.scope[k];
        const size_t pos = u == v
                               ? scope.size()
                               : static_cast<size_t>(std::lower_bound(scope.begin(), scope.end(), u) - scope.begin());
        where[i].push_back({pos, stride});
        stride *= f.radix[k];
      }
    }
    std::vector<uint32_t> joint(scope.size() + 1, 0);
    std::vector<std::span<const Label>> groups(m * kv);
    out.begin.push_back(0);
    for (uint64_t cell = 0; cell < cells; ++cell) {
      scratch_.clear();
      for (uint32_t cv = 0; cv < kv; ++cv) {
        joint[scope.size()] = cv;
        for (size_t i = 0; i < m; ++i) {
          uint64_t idx = 0;
          for (auto [pos, stride] : where[i]) idx += joint[pos] * stride;
          groups[cv * m + i] = factors_[fs[i]].Cell(idx);
        }
        if (limit_) {
          FoldTag(groups, m, cv, front_);
        } else {
          Sums(groups, m, cv, scratch_);
        }
      }
      if (limit_) {
        Emit(front_, m, out.labels);
      } else {
        Prune(scratch_, groups, m, out.labels);
      }
      out.begin.push_back(static_cast<uint32_t>(out.labels.size()));
      // Next assignment of the scope, last op fastest.
      for (size_t k = scope.size(); k-- > 0;) {
        if (++joint[k] < out.radix[k]) break;
        joint[k] = 0;
      }
    }
    for (int f : fs) factors_[f].alive = false;
    AddFactor(std::move(out));
    return Status::Ok();
  }

  const SearchProblem& p_;
  const std::vector<std::vector<size_t>>& keep_;
  std::optional<uint64_t> limit_;
  size_t max_labels_;
  std::vector<Factor> factors_;
  std::vector<std::vector<int>> node_factors_;
  std::vector<Record> records_;
  // The record that stands for children_[child_begin, end): none, the one
  // child itself, or a new record joining them.
  int32_t JoinChildren(uint32_t child_begin) {
    const uint32_t count = static_cast<uint32_t>(children_.size()) - child_begin;
    if (count == 0) return -1;
    if (count == 1) {
      const int32_t rec = children_.back();
      children_.pop_back();
      return rec;
    }
    records_.push_back({-1, 0, child_begin, count});
    return static_cast<int32_t>(records_.size() - 1);
  }

  std::vector<int32_t> children_;
  std::vector<Sum> scratch_;
  std::vector<Partial> cur_, front_;
  std::vector<Pair> pairs_;
  std::vector<int32_t> pool_;
  bool thinned_ = false;
  int final_ = -1;
};

uint64_t SmallestFootprint(const SearchProblem& p) {
  uint64_t total = 0;
  for (const SearchNode& n : p.nodes) {
    uint64_t best = UINT64_MAX;
    if (n.fixed) {
      best = n.candidates[*n.fixed].memory_bytes;
    } else {
      for (const StrategyCandidate& c : n.candidates) best = std::min(best, c.memory_bytes);
    }
    total += best;
  }
  return total;
}

Result<SearchResult> DynamicProgramming(const SearchProblem& p, const SearchOptions& options) {
  if (options.memory_limit_bytes) {
    // The fastest plan whatever its memory: when it fits, it is the
    // optimum under the limit too, found without Pareto fronts. Searched
    // under the limit first, a generous one thinned fronts for nothing and
    // the result called itself inexact.
    SearchOptions unlimited = options;
    unlimited.memory_limit_bytes.reset();
    Result<SearchResult> fastest = DynamicProgramming(p, unlimited);
    if (fastest.ok() && fastest->cost.memory_bytes <= *options.memory_limit_bytes) return fastest;
  }
  std::vector<std::vector<size_t>> keep;
  size_t pruned = 0;
  if (options.prune) {
    keep = ParetoCandidates(p);
  } else {
    for (const SearchNode& n : p.nodes) {
      std::vector<size_t> all;
      if (n.fixed) {
        all.push_back(*n.fixed);
      } else {
        for (size_t c = 0; c < n.candidates.size(); ++c) all.push_back(c);
      }
      keep.push_back(std::move(all));
    }
  }
  for (size_t v = 0; v < p.nodes.size(); ++v) pruned += p.nodes[v].candidates.size() - keep[v].size();
  Eliminator elim(p, keep, options.memory_limit_bytes, options.max_pareto_labels, DataParallelBonus(p));
  SINKRT_ASSIGN_OR_RETURN(SearchResult r, elim.Run());
  r.pruned_candidates = pruned;
  r.cost = EvaluatePlan(p, r.choice);
  return r;
}

// MindSpore's sharding_propagation (graph_costmodel.cc BFS): from the
// user-fixed ops, breadth first, each reached op takes the candidate with
// the least redistribution time to its already decided neighbours (ties:
// the better node score, then the lower index). Ops no fixed op reaches
// are left to dynamic_programming with the decided ones fixed. Greed can
// paint itself into a corner (a reshape, which must mirror its producer,
// decided from its reader's side first): an op whose every candidate meets
// a forbidden pair is left undecided, and when the propagated choices
// still admit no finite plan, dynamic_programming decides everything but
// the user's ops, so a plan is found whenever one exists.
Result<SearchResult> ShardingPropagation(const SearchProblem& p, const SearchOptions& options) {
  const size_t n = p.nodes.size();
  std::vector<std::vector<size_t>> incident(n);
  for (size_t e = 0; e < p.edges.size(); ++e) {
    incident[p.edges[e].producer].push_back(e);
    incident[p.edges[e].consumer].push_back(e);
  }
  const double bonus = DataParallelBonus(p);
  std::vector<std::optional<size_t>> decided(n);
  std::deque<size_t> queue;
  for (size_t v = 0; v < n; ++v) {
    if (p.nodes[v].fixed) {
      decided[v] = p.nodes[v].fixed;
      queue.push_back(v);
    }
  }
  while (!queue.empty()) {
    const size_t u = queue.front();
    queue.pop_front();
    for (size_t e : incident[u]) {
      const size_t w = p.edges[e].producer == u ? p.edges[e].consumer : p.edges[e].producer;
      if (decided[w]) continue;
      const auto& cands = p.nodes[w].candidates;
      size_t best = 0;
      double best_redist = kInf, best_score = kInf;
      for (size_t c = 0; c < cands.size(); ++c) {
        double redist = 0;
        for (size_t f : incident[w]) {
          const SearchEdge& edge = p.edges[f];
          const size_t nc = p.nodes[edge.consumer].candidates.size();
          if (edge.producer == w && decided[edge.consumer]) redist += edge.cost[c * nc + *decided[edge.consumer]];
          if (edge.consumer == w && decided[edge.producer]) redist += edge.cost[*decided[edge.producer] * nc + c];
        }
        const double score = cands[c].time_s - bonus * cands[c].data_parallel;
        if (redist < best_redist || (redist == best_redist && score < best_score)) {
          best = c;
          best_redist = redist;
          best_score = score;
        }
      }
      if (best_redist == kInf) continue;  // left to dynamic_programming
      decided[w] = best;
      queue.push_back(w);
    }
  }
  SearchProblem rest = p;
  for (size_t v = 0; v < n; ++v) rest.nodes[v].fixed = decided[v];
  SearchOptions dp = options;
  dp.memory_limit_bytes.reset();
  Result<SearchResult> propagated = DynamicProgramming(rest, dp);
  if (!propagated.ok()) propagated = DynamicProgramming(p, dp);
  SINKRT_ASSIGN_OR_RETURN(SearchResult r, std::move(propagated));
  r.pruned_candidates = 0;
  if (options.memory_limit_bytes && r.cost.memory_bytes > *options.memory_limit_bytes) {
    return ResourceExhausted("sharding_propagation: the propagated plan needs " + std::to_string(r.cost.memory_bytes) +
                             " bytes per rank, above the memory limit of " +
                             std::to_string(*options.memory_limit_bytes) +
                             " (propagation follows the fixed ops and cannot trade time for memory; "
                             "dynamic_programming can)");
  }
  return r;
}

}  // namespace

Result<SearchMode> ParseSearchMode(std::string_view name) {
  if (name == "dynamic_programming") return SearchMode::kDynamicProgramming;
  if (name == "sharding_propagation") return SearchMode::kShardingPropagation;
  if (name == "recursive_programming") {
    return Unimplemented(
        "search_mode 'recursive_programming' is not supported: use dynamic_programming or "
        "sharding_propagation");
  }
  return InvalidArgument("unknown search_mode '" + std::string(name) +
                         "': expected dynamic_programming or sharding_propagation");
}

const char* SearchModeName(SearchMode mode) {
  return mode == SearchMode::kDynamicProgramming ? "dynamic_programming" : "sharding_propagation";
}

Status ValidateProblem(const SearchProblem& problem) {
  for (const SearchNode& n : problem.nodes) {
    if (n.candidates.empty()) return InvalidArgument("op '" + n.op + "' has no candidate strategy");
    if (n.fixed && *n.fixed >= n.candidates.size()) {
      return OutOfRange("op '" + n.op + "' is fixed to candidate " + std::to_string(*n.fixed) + " of " +
                        std::to_string(n.candidates.size()));
    }
    for (const StrategyCandidate& c : n.candidates) {
      if (!std::isfinite(c.time_s) || c.time_s < 0) {
        return InvalidArgument("op '" + n.op + "' candidate '" + c.name + "' has time " + std::to_string(c.time_s) +
                               " s: must be finite and not negative");
      }
    }
  }
  for (const SearchEdge& e : problem.edges) {
    if (e.producer >= problem.nodes.size() || e.consumer >= problem.nodes.size()) {
      return OutOfRange("edge " + std::to_string(e.producer) + " -> " + std::to_string(e.consumer) +
                        " names an op past " + std::to_string(problem.nodes.size()));
    }
    const std::string name = "edge '" + problem.nodes[e.producer].op + "' -> '" + problem.nodes[e.consumer].op + "'";
    if (e.producer == e.consumer) return InvalidArgument(name + " joins an op to itself");
    const size_t want = problem.nodes[e.producer].candidates.size() * problem.nodes[e.consumer].candidates.size();
    if (e.cost.size() != want) {
      return InvalidArgument(name + " has " + std::to_string(e.cost.size()) + " costs, expected " +
                             std::to_string(want) + " (producer candidates x consumer candidates)");
    }
    for (double c : e.cost) {
      if (std::isnan(c) || c < 0) return InvalidArgument(name + " has a NaN or negative cost");
    }
  }
  return Status::Ok();
}

PlanCost EvaluatePlan(const SearchProblem& problem, std::span<const size_t> choice) {
  PlanCost cost;
  for (size_t v = 0; v < problem.nodes.size(); ++v) {
    const StrategyCandidate& c = problem.nodes[v].candidates[choice[v]];
    cost.time_s += c.time_s;
    cost.memory_bytes += c.memory_bytes;
    cost.data_parallel += c.data_parallel;
  }
  for (const SearchEdge& e : problem.edges) {
    cost.time_s += e.cost[choice[e.producer] * problem.nodes[e.consumer].candidates.size() + choice[e.consumer]];
  }
  return cost;
}

double DataParallelBonus(const SearchProblem& problem) {
  double scale = 0;
  double keys = 1;
  for (const SearchNode& n : problem.nodes) {
    double t = 0;
    uint32_t k = 0;
    for (const StrategyCandidate& c : n.candidates) {
      t = std::max(t, c.time_s);
      k = std::max(k, c.data_parallel);
    }
    scale += t;
    keys += k;
  }
  for (const SearchEdge& e : problem.edges) {
    double t = 0;
    for (double c : e.cost) {
      if (c < kInf) t = std::max(t, c);
    }
    scale += t;
  }
  if (scale <= 0) scale = 1;
  return kTieRelativeEpsilon * scale / keys;
}

double PlanScore(const SearchProblem& problem, std::span<const size_t> choice) {
  const PlanCost c = EvaluatePlan(problem, choice);
  return c.time_s - DataParallelBonus(problem) * static_cast<double>(c.data_parallel);
}

std::vector<std::vector<size_t>> ParetoCandidates(const SearchProblem& problem) {
  const size_t n = problem.nodes.size();
  std::vector<std::vector<size_t>> incident(n);
  for (size_t e = 0; e < problem.edges.size(); ++e) {
    incident[problem.edges[e].producer].push_back(e);
    incident[problem.edges[e].consumer].push_back(e);
  }
  std::vector<std::vector<size_t>> keep(n);
  for (size_t v = 0; v < n; ++v) {
    const SearchNode& node = problem.nodes[v];
    if (node.fixed) {
      keep[v] = {*node.fixed};
      continue;
    }
    const size_t k = node.candidates.size();
    // -1: i beats j somewhere and is never worse; 0: equal everywhere; 1: no.
    auto compare = [&](size_t i, size_t j) {
      const StrategyCandidate& a = node.candidates[i];
      const StrategyCandidate& b = node.candidates[j];
      if (a.time_s > b.time_s || a.memory_bytes > b.memory_bytes || a.data_parallel < b.data_parallel) return 1;
      bool strict = a.time_s < b.time_s || a.memory_bytes < b.memory_bytes || a.data_parallel > b.data_parallel;
      for (size_t e : incident[v]) {
        const SearchEdge& edge = problem.edges[e];
        const size_t nc = problem.nodes[edge.consumer].candidates.size();
        if (edge.producer == v) {
          for (size_t c = 0; c < nc; ++c) {
            const double x = edge.cost[i * nc + c], y = edge.cost[j * nc + c];
            if (x > y) return 1;
            strict |= x < y;
          }
        } else {
          const size_t np = problem.nodes[edge.producer].candidates.size();
          for (size_t c = 0; c < np; ++c) {
            const double x = edge.cost[c * nc + i], y = edge.cost[c * nc + j];
            if (x > y) return 1;
            strict |= x < y;
          }
        }
      }
      return strict ? -1 : 0;
    };
    for (size_t j = 0; j < k; ++j) {
      bool dominated = false;
      for (size_t i = 0; i < k && !dominated; ++i) {
        if (i == j) continue;
        const int c = compare(i, j);
        dominated = c < 0 || (c == 0 && i < j);
      }
      if (!dominated) keep[v].push_back(j);
    }
  }
  return keep;
}

Result<SearchResult> SearchStrategies(const SearchProblem& problem, const SearchOptions& options) {
  SINKRT_RETURN_IF_ERROR(ValidateProblem(problem), std::string(SearchModeName(options.mode)));
  if (options.memory_limit_bytes) {
    const uint64_t smallest = SmallestFootprint(problem);
    if (smallest > *options.memory_limit_bytes) {
      return ResourceExhausted(std::string(SearchModeName(options.mode)) + ": the memory limit of " +
                               std::to_string(*options.memory_limit_bytes) +
                               " bytes per rank is below every plan: the smallest footprint found is " +
                               std::to_string(smallest) + " bytes per rank");
    }
  }
  if (options.mode == SearchMode::kShardingPropagation) return ShardingPropagation(problem, options);
  return DynamicProgramming(problem, options);
}

}  // namespace sinkrt::host::parallel
