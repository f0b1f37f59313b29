#include "host/src/parallel/auto_parallel/auto_plan_explain.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace sinkrt::host {
namespace parallel {
namespace {

// Below this the search calls two times equal (strategy_search.h).
double TieSeconds(const SearchProblem& p) { return 2 * DataParallelBonus(p) + 1e-12; }

struct Parts {
  double compute = 0, communication = 0, redistribution = 0;
};

// Op `i` and the reshapes that mirror it, transitively: they change
// candidate together (a reshape's candidate k is "follow candidate k").
std::vector<size_t> SwapGroup(const SearchGraph& sg, const std::vector<std::vector<size_t>>& followers, size_t i) {
  std::vector<size_t> group = {i};
  for (size_t k = 0; k < group.size(); ++k)
    for (size_t f : followers[group[k]]) group.push_back(f);
  return group;
}

// The op's own terms under candidate `c`, and the redistribution of
// everything the swap touches (the group's own and every edge at it, the
// other ends as chosen).
Parts PartsOf(const SearchGraph& sg, const std::vector<std::vector<size_t>>& incident,
              const std::vector<size_t>& choice, const std::vector<size_t>& group, size_t c) {
  const size_t i = group[0];
  const OpCandidate& oc = sg.ops[i][c];
  Parts p;
  p.compute = oc.cost.compute_fwd_s + oc.cost.compute_bwd_s + oc.cost.update_s;
  p.communication = oc.CommunicationSeconds();
  auto in_group = [&](size_t v) { return std::find(group.begin(), group.end(), v) != group.end(); };
  auto pick = [&](size_t v) { return in_group(v) ? c : choice[v]; };
  std::vector<size_t> seen;
  for (size_t v : group) {
    p.redistribution += sg.ops[v][c].own_redistribution_s;
    for (size_t k : incident[v]) {
      if (std::find(seen.begin(), seen.end(), k) != seen.end()) continue;
      seen.push_back(k);
      const SearchEdge& e = sg.problem.edges[k];
      const size_t nc = sg.problem.nodes[e.consumer].candidates.size();
      p.redistribution += e.cost[pick(e.producer) * nc + pick(e.consumer)];
    }
  }
  return p;
}

std::string Ms(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.3f ms", s * 1e3);
  return buf;
}

}  // namespace

std::vector<OpPlanChoice> ExplainChoices(const Graph& g, const SearchGraph& sg, const SearchResult& result,
                                         std::optional<uint64_t> memory_limit) {
  const std::vector<size_t>& choice = result.choice;
  const double tie = TieSeconds(sg.problem);
  std::vector<std::vector<size_t>> incident(sg.problem.nodes.size());
  for (size_t k = 0; k < sg.problem.edges.size(); ++k) {
    incident[sg.problem.edges[k].producer].push_back(k);
    incident[sg.problem.edges[k].consumer].push_back(k);
  }
  std::vector<std::vector<size_t>> followers(sg.problem.nodes.size());
  for (size_t v = 0; v < sg.follows.size(); ++v)
    if (sg.follows[v] >= 0) followers[static_cast<size_t>(sg.follows[v])].push_back(v);
  std::vector<OpPlanChoice> out;
  for (size_t i = 0; i < g.ops().size(); ++i) {
    const OpNode& op = g.ops()[i];
    const size_t c = choice[i];
    const OpCandidate& oc = sg.ops[i][c];
    const SearchNode& node = sg.problem.nodes[i];
    OpPlanChoice pc;
    pc.op = op.name;
    pc.strategy = oc.strategy;
    pc.fixed = node.fixed.has_value();
    pc.memory_bytes = node.candidates[c].memory_bytes;
    // Edges into the op: what it pays to read its inputs (edges out of it
    // are its consumers').
    pc.compute_s = oc.cost.compute_fwd_s + oc.cost.compute_bwd_s + oc.cost.update_s;
    pc.communication_s = oc.CommunicationSeconds();
    pc.redistribution_s = oc.own_redistribution_s;
    for (size_t k : incident[i]) {
      const SearchEdge& e = sg.problem.edges[k];
      if (e.consumer == i) pc.redistribution_s += e.cost[choice[e.producer] * node.candidates.size() + c];
    }
    if (!oc.strategy.empty() && !pc.fixed) {
      const std::vector<size_t> group = SwapGroup(sg, followers, i);
      const Parts chosen = PartsOf(sg, incident, choice, group, c);
      const double chosen_total = chosen.compute + chosen.communication + chosen.redistribution;
      std::optional<size_t> best, best_over;
      double best_extra = std::numeric_limits<double>::infinity(), over_extra = best_extra;
      for (size_t a = 0; a < node.candidates.size(); ++a) {
        if (a == c) continue;
        const Parts p = PartsOf(sg, incident, choice, group, a);
        const double extra = p.compute + p.communication + p.redistribution - chosen_total;
        if (!std::isfinite(extra)) continue;
        const bool over = memory_limit &&
                          result.cost.memory_bytes - node.candidates[c].memory_bytes + node.candidates[a].memory_bytes >
                              *memory_limit;
        if (over) {
          if (extra < over_extra) over_extra = extra, best_over = a;
        } else if (extra < best_extra) {
          best_extra = extra, best = a;
        }
      }
      const bool by_memory = !best || (best_over && over_extra < best_extra);
      const std::optional<size_t> alt = by_memory ? best_over : best;
      if (alt) {
        const Parts p = PartsOf(sg, incident, choice, group, *alt);
        const double extra = by_memory ? over_extra : best_extra;
        pc.rejected = sg.ops[i][*alt].strategy;
        pc.rejected_extra_s = extra;
        if (by_memory) {
          pc.reason = "over the memory limit (" +
                      std::to_string(result.cost.memory_bytes - node.candidates[c].memory_bytes +
                                     node.candidates[*alt].memory_bytes) +
                      " bytes per rank)";
        } else if (std::abs(extra) <= tie) {
          pc.reason = node.candidates[*alt].data_parallel < node.candidates[c].data_parallel
                          ? "a tie: the more data-parallel strategy wins"
                          : "a tie: the first strategy found wins";
        } else {
          std::string r;
          auto part = [&](const char* what, double d) {
            if (std::abs(d) < 5e-7) return;
            r += (r.empty() ? "" : ", ") + std::string(what) + " " + Ms(d);
          };
          part("compute", p.compute - chosen.compute);
          part("communication", p.communication - chosen.communication);
          part("redistribution", p.redistribution - chosen.redistribution);
          pc.reason = r.empty() ? "slower by less than a microsecond" : r;
        }
      }
    }
    out.push_back(std::move(pc));
  }
  return out;
}

}  // namespace parallel

namespace {

std::string Msec(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f ms", s * 1e3);
  return buf;
}

std::string Bytes(uint64_t b) {
  char buf[32];
  if (b >= (uint64_t{1} << 20))
    std::snprintf(buf, sizeof buf, "%.1f MiB", double(b) / (1 << 20));
  else if (b >= 1024)
    std::snprintf(buf, sizeof buf, "%.1f KiB", double(b) / 1024);
  else
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(b));
  return buf;
}

std::string Pad(std::string s, size_t width) {
  if (s.size() < width) s.append(width - s.size(), ' ');
  return s;
}

}  // namespace

std::string ExplainPlan(const AutoParallelPlan& plan) {
  size_t name_w = 2, strat_w = 8;
  for (const OpPlanChoice& c : plan.ops) {
    name_w = std::max(name_w, c.op.size());
    strat_w = std::max(strat_w, c.strategy.empty() ? size_t{7} : StrategyToString(c.strategy).size());
  }
  std::string out = "auto_parallel on " + std::to_string(plan.device_num) + " devices: " + plan.search_mode +
                    ", calibration " + plan.calibration + " (" + plan.transport + ")\n";
  out += Pad("op", name_w) + "  " + Pad("strategy", strat_w) +
         "  compute      comm         redist       memory      best rejected\n";
  for (const OpPlanChoice& c : plan.ops) {
    out += Pad(c.op, name_w) + "  ";
    out += Pad(c.strategy.empty() ? "follows" : StrategyToString(c.strategy) + (c.fixed ? "*" : ""), strat_w) + "  ";
    out += Pad(Msec(c.compute_s), 11) + "  " + Pad(Msec(c.communication_s), 11) + "  " +
           Pad(Msec(c.redistribution_s), 11) + "  " + Pad(Bytes(c.memory_bytes), 10) + "  ";
    if (c.fixed)
      out += "(strategy given: kept)";
    else if (c.strategy.empty())
      out += "(reshape: carries its input's layout)";
    else if (c.rejected.empty())
      out += "(no other strategy)";
    else
      out += StrategyToString(c.rejected) + " " + (c.rejected_extra_s >= 0 ? "+" : "") + Msec(c.rejected_extra_s) +
             ": " + c.reason;
    out += '\n';
  }
  out += "predicted step " + Msec(plan.step_s) + ", memory " + Bytes(plan.memory_bytes) + " per rank";
  out += plan.memory_limit_bytes ? " (limit " + Bytes(*plan.memory_limit_bytes) + ")" : " (no limit)";
  out += "; " + std::to_string(plan.candidates) + " strategies, " + std::to_string(plan.pruned) +
         " pruned, searched in " + Msec(plan.search_s) + (plan.exact ? "" : " (not exact: Pareto fronts thinned)") +
         "\n";
  return out;
}

}  // namespace sinkrt::host
