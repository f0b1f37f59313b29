#include "host/src/parallel/auto_parallel/search_graph.h"

#include <algorithm>
#include <limits>
#include <map>
#include <unordered_map>

#include "host/src/parallel/ops_info/strategy_enumeration.h"

namespace sinkrt::host::parallel {
namespace {

constexpr double kForbidden = std::numeric_limits<double>::infinity();

bool IsFollower(const OpNode& op) { return op.op == OpCode::Reshape || op.op == OpCode::Flatten; }

size_t OutputIndex(const OpNode& op, TensorId t) {
  return static_cast<size_t>(std::find(op.outputs.begin(), op.outputs.end(), t) - op.outputs.begin());
}

class Builder {
 public:
  Builder(const Graph& g, const CostContext& ctx, const SearchGraphOptions& o) : g_(g), ctx_(ctx), o_(o) {}

  Result<SearchGraph> Run() {
    const size_t n = g_.ops().size();
    sg_.problem.nodes.resize(n);
    sg_.ops.resize(n);
    sg_.follows.assign(n, -1);
    shardings_.resize(n);
    if (g_.loss() != kInvalidTensor) {
      const int64_t p = g_.producer(g_.loss());
      if (p >= 0 && g_.ops()[p].op == OpCode::SparseSoftmaxCrossEntropy) loss_op_ = p;
    }
    follow_loss_ = o_.fixed_inputs.empty() && loss_op_ >= 0;
    read_.assign(g_.tensors().size(), false);
    for (const OpNode& op : g_.ops())
      for (TensorId t : op.inputs) read_[t] = true;
    for (size_t i = 0; i < n; ++i)
      if (!IsFollower(g_.ops()[i])) SINKRT_RETURN_IF_ERROR(RuledCandidates(i));
    for (size_t i = 0; i < n; ++i)
      if (IsFollower(g_.ops()[i])) SINKRT_RETURN_IF_ERROR(FollowerCandidates(i));
    for (size_t i = 0; i < n; ++i)
      if (!IsFollower(g_.ops()[i])) ReadEdges(i);
    SharedParameterEdges();
    for (size_t i = 0; i < n; ++i) {
      for (size_t c = 0; c < sg_.ops[i].size(); ++c) {
        const OpCandidate& oc = sg_.ops[i][c];
        StrategyCandidate& sc = sg_.problem.nodes[i].candidates[c];
        sc.time_s = oc.TimeSeconds();
        sc.memory_bytes = static_cast<uint64_t>(std::max<int64_t>(0, oc.cost.MemoryBytes()));
      }
    }
    return std::move(sg_);
  }

 private:
  // Layouts are interned so that an edge's price matrix costs a hash
  // lookup per pair, not two layout strings.
  uint32_t Intern(const TensorLayout& l) {
    auto [it, added] = layout_ids_.try_emplace(LayoutToString(l), static_cast<uint32_t>(layouts_.size()));
    if (added) layouts_.push_back(l);
    return it->second;
  }

  // Seconds to bring tensor `t` from `from` to `to`, and its gradient
  // back when it has one; a pair the planner cannot join is forbidden.
  double Redist(uint32_t from, uint32_t to, TensorId t) {
    if (from == to) return 0;
    const DType dtype = g_.tensor(t).dtype;
    const bool backward = ctx_.needs_grad[t];
    const uint64_t key = (uint64_t{from} << 36) | (uint64_t{to} << 9) | (uint64_t{static_cast<uint8_t>(dtype)} << 1) |
                         (backward ? 1 : 0);
    auto it = memo_.find(key);
    if (it != memo_.end()) return it->second;
    Result<double> s =
        RedistributionSeconds(layouts_[from], layouts_[to], dtype, *ctx_.calibration, ctx_.options.transport, backward);
    const double v = s.ok() ? *s : kForbidden;
    memo_.emplace(key, v);
    return v;
  }
  double Redist(const TensorLayout& from, const TensorLayout& to, TensorId t) {
    return Redist(Intern(from), Intern(to), t);
  }

  // A dataset input's layout when it does not follow the loss.
  TensorLayout FixedInput(TensorId t) const {
    if (!o_.fixed_inputs.empty()) return o_.fixed_inputs[t];
    return BatchInputLayout(ReplicatedLayout({o_.device_num}, {}), g_.tensor(t).shape);
  }

  // Under loss candidate `c`, the layout input `t` arrives in.
  TensorLayout LossInput(size_t c, TensorId t) const {
    return BatchInputLayout(shardings_[loss_op_][c].inputs[1], g_.tensor(t).shape);
  }

  Status RuledCandidates(size_t i) {
    const OpNode& op = g_.ops()[i];
    SearchNode& node = sg_.problem.nodes[i];
    node.op = op.name;
    std::vector<Strategy> strategies;
    if (!op.strategy.empty()) {
      strategies.push_back(op.strategy);
      node.fixed = 0;
    } else {
      SINKRT_ASSIGN_OR_RETURN(strategies, EnumerateStrategies(g_, op, o_.device_num, o_.fully_use_devices));
    }
    sg_.enumerated += strategies.size();
    for (Strategy& s : strategies) {
      SINKRT_ASSIGN_OR_RETURN(OpSharding sh, ShardOp(g_, op, s, o_.device_num));
      SINKRT_ASSIGN_OR_RETURN(OpCost cost, CostOfOp(ctx_, op, sh));
      OpCandidate oc;
      oc.strategy = s;
      oc.cost = cost;
      oc.outputs = sh.outputs;
      for (size_t o = 0; o < op.outputs.size(); ++o) {
        const TensorLayout& l = sh.outputs[o];
        if (l.partial.empty() || !read_[op.outputs[o]]) continue;
        oc.readers_resolve_s += Redist(l, ResolvedLayout(l), op.outputs[o]);
      }
      node.candidates.push_back(
          {.name = StrategyToString(s), .data_parallel = static_cast<uint32_t>(BatchSplit(g_, op, s))});
      sg_.ops[i].push_back(std::move(oc));
      shardings_[i].push_back(std::move(sh));
    }
    return Status::Ok();
  }

  Status FollowerCandidates(size_t i) {
    const OpNode& op = g_.ops()[i];
    SearchNode& node = sg_.problem.nodes[i];
    node.op = op.name;
    const TensorId in = op.inputs[0];
    const TensorInfo& info = g_.tensor(in);
    std::vector<TensorLayout> sources;
    int64_t source_node = -1;
    if (const int64_t j = g_.producer(in); j >= 0) {
      const size_t o = OutputIndex(g_.ops()[j], in);
      for (const OpCandidate& c : sg_.ops[j]) sources.push_back(c.outputs[o]);
      source_node = j;
    } else if (info.kind == TensorKind::Input && follow_loss_) {
      for (size_t c = 0; c < shardings_[loss_op_].size(); ++c) sources.push_back(LossInput(c, in));
      source_node = loss_op_;
    } else if (info.kind == TensorKind::Input) {
      sources.push_back(FixedInput(in));
    } else {
      return InvalidArgument("auto_parallel: " + op.name + " reshapes " + info.name +
                             ", a parameter or constant: reshape it when it is created");
    }
    const Shape& out_shape = g_.tensor(op.outputs[0]).shape;
    for (const TensorLayout& src : sources) {
      TensorLayout need, out;
      ReshapeLayouts(src, out_shape, &need, &out);
      OpCandidate oc;
      oc.own_redistribution_s = Redist(src, need, in);
      oc.outputs = {out};
      node.candidates.push_back({.name = "follows " + LayoutToString(src)});
      sg_.ops[i].push_back(std::move(oc));
    }
    sg_.follows[i] = source_node;
    if (source_node >= 0) {
      const size_t k = sources.size();
      SearchEdge e{static_cast<size_t>(source_node), i, std::vector<double>(k * k, kForbidden)};
      for (size_t c = 0; c < k; ++c) e.cost[c * k + c] = 0;
      AddEdge(std::move(e), {.input = 0});
    }
    return Status::Ok();
  }

  // The interned layout input `k` of op `i` is read in, per candidate.
  std::vector<uint32_t> NeedIds(size_t i, size_t k) {
    std::vector<uint32_t> ids;
    for (const OpSharding& sh : shardings_[i]) ids.push_back(Intern(sh.inputs[k]));
    return ids;
  }

  void ReadEdges(size_t i) {
    const OpNode& op = g_.ops()[i];
    const size_t nc = sg_.ops[i].size();
    for (size_t k = 0; k < op.inputs.size(); ++k) {
      const TensorId t = op.inputs[k];
      const TensorInfo& info = g_.tensor(t);
      auto need = [&](size_t c) -> const TensorLayout& { return shardings_[i][c].inputs[k]; };
      if (info.kind == TensorKind::Param) {
        params_[t].push_back({i, k});
      } else if (info.kind == TensorKind::Const || info.kind == TensorKind::State) {
        // Stored as each reader needs it.
      } else if (info.kind == TensorKind::Input && follow_loss_ && static_cast<int64_t>(i) == loss_op_) {
        for (size_t c = 0; c < nc; ++c) sg_.ops[i][c].own_redistribution_s += Redist(LossInput(c, t), need(c), t);
      } else if (info.kind == TensorKind::Input && follow_loss_) {
        const size_t nl = sg_.ops[loss_op_].size();
        const std::vector<uint32_t> needs = NeedIds(i, k);
        SearchEdge e{static_cast<size_t>(loss_op_), i, std::vector<double>(nl * nc)};
        for (size_t a = 0; a < nl; ++a) {
          const uint32_t from = Intern(LossInput(a, t));
          for (size_t c = 0; c < nc; ++c) e.cost[a * nc + c] = Redist(from, needs[c], t);
        }
        AddEdge(std::move(e), {.input = k});
      } else if (info.kind == TensorKind::Input) {
        const TensorLayout from = FixedInput(t);
        for (size_t c = 0; c < nc; ++c) sg_.ops[i][c].own_redistribution_s += Redist(from, need(c), t);
      } else {
        const int64_t j = g_.producer(t);
        const size_t o = OutputIndex(g_.ops()[j], t);
        const size_t np = sg_.ops[j].size();
        const std::vector<uint32_t> needs = NeedIds(i, k);
        SearchEdge e{static_cast<size_t>(j), i, std::vector<double>(np * nc)};
        for (size_t a = 0; a < np; ++a) {
          const uint32_t from = Intern(sg_.ops[j][a].outputs[o]);
          for (size_t c = 0; c < nc; ++c) e.cost[a * nc + c] = Redist(from, needs[c], t);
        }
        AddEdge(std::move(e), {.input = k});
      }
    }
  }

  // The partitioner stores a parameter once, as its first reader needs
  // it; a later reader must need the same slices (and, when its gradient
  // is summed, on the same device matrix).
  void SharedParameterEdges() {
    for (const auto& [t, readers] : params_) {
      const auto [i0, k0] = readers[0];
      for (size_t r = 1; r < readers.size(); ++r) {
        const auto [i, k] = readers[r];
        if (i == i0) continue;  // one op reading it twice: its rule's business
        const size_t na = sg_.ops[i0].size(), nb = sg_.ops[i].size();
        SearchEdge e{i0, i, std::vector<double>(na * nb)};
        for (size_t a = 0; a < na; ++a) {
          const TensorLayout& have = shardings_[i0][a].inputs[k0];
          for (size_t b = 0; b < nb; ++b) {
            const OpSharding& s = shardings_[i][b];
            const TensorLayout& need = s.inputs[k];
            const bool agree = SameSlices(have, need) &&
                               (GradPartialAxes(s, need).empty() || have.device_matrix == need.device_matrix);
            e.cost[a * nb + b] = agree ? 0 : kForbidden;
          }
        }
        AddEdge(std::move(e), {.input = k, .constraint = true});
      }
    }
  }

  void AddEdge(SearchEdge e, EdgeTensor t) {
    sg_.problem.edges.push_back(std::move(e));
    sg_.edge_tensors.push_back(t);
  }

  const Graph& g_;
  const CostContext& ctx_;
  const SearchGraphOptions& o_;
  SearchGraph sg_;
  std::vector<std::vector<OpSharding>> shardings_;                     // per op, per candidate (ruled ops)
  std::map<TensorId, std::vector<std::pair<size_t, size_t>>> params_;  // readers (op, input)
  std::unordered_map<std::string, uint32_t> layout_ids_;
  std::vector<TensorLayout> layouts_;  // by id
  std::unordered_map<uint64_t, double> memo_;
  std::vector<bool> read_;  // per tensor: some op reads it
  int64_t loss_op_ = -1;
  bool follow_loss_ = false;
};

}  // namespace

Result<SearchGraph> BuildSearchGraph(const Graph& g, const CostContext& ctx, const SearchGraphOptions& options) {
  if (ctx.graph != &g) return InvalidArgument("auto_parallel: the cost context is for another graph");
  return Builder(g, ctx, options).Run();
}

}  // namespace sinkrt::host::parallel
