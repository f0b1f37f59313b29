#include "host/src/parallel/strategy/strategy_presets.h"

#include <map>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "host/src/parallel/ops_info/op_loops.h"
#include "host/src/parallel/ops_info/op_sharding.h"

namespace sinkrt::host::parallel {
namespace {

std::string Describe(const StrategyPreset& p) {
  return "strategy preset '" + p.name + "' (data parallel " + std::to_string(p.data_parallel) + " x model parallel " +
         std::to_string(p.model_parallel) + ")";
}

// A Megatron pair, by its layers' names: the weight of `column` [in, out]
// is split on out, the weight of `row` on in.
struct Pair {
  std::string column, row;
};

bool HasParam(const Graph& g, const std::string& name) {
  const TensorId t = g.FindTensor(name);
  return t != kInvalidTensor && g.tensor(t).kind == TensorKind::Param;
}

// The pairs of the networks the preset knows, found by parameter name.
Result<std::vector<Pair>> MegatronPairs(const Graph& g, const StrategyPreset& p) {
  std::vector<Pair> pairs;
  if (g.name() == "mlp") {
    // fc1 .. fcK; the last is the classifier head and stays whole, the
    // hidden layers before it pair up (784-512-256-10: fc1 and fc2).
    int layers = 0;
    while (HasParam(g, "fc" + std::to_string(layers + 1) + ".weight")) ++layers;
    for (int k = 1; k + 1 < layers; k += 2) pairs.push_back({"fc" + std::to_string(k), "fc" + std::to_string(k + 1)});
    if (pairs.empty())
      return InvalidArgument(Describe(p) + ": graph 'mlp' has " + std::to_string(layers) +
                             " fully connected layers (fc1.weight ...); the model layout needs two hidden ones before "
                             "the head to split as a pair");
  } else if (g.name() == "vit") {
    for (int i = 0; HasParam(g, "block" + std::to_string(i) + ".attn.qkv.weight"); ++i) {
      const std::string b = "block" + std::to_string(i);
      pairs.push_back({b + ".attn.qkv", b + ".attn.proj"});
      pairs.push_back({b + ".mlp.fc1", b + ".mlp.fc2"});
    }
    if (pairs.empty())
      return InvalidArgument(Describe(p) +
                             ": graph 'vit' has no parameter block0.attn.qkv.weight: it is not the zoo ViT");
  } else {
    return InvalidArgument(Describe(p) +
                           " knows the Megatron pairs of the networks mlp and vit (the model zoo's, "
                           "examples/mlp.json and examples/vit.json); graph '" +
                           g.name() + "' is neither: give a strategy file, or the data preset");
  }
  for (const Pair& pair : pairs)
    for (const std::string& layer : {pair.column, pair.row})
      if (!HasParam(g, layer + ".weight"))
        return InvalidArgument(Describe(p) + ": graph '" + g.name() + "' has no parameter " + layer + ".weight");
  return pairs;
}

int64_t Product(const Shape& s, size_t end) {
  int64_t p = 1;
  for (size_t i = 0; i < end; ++i) p *= s[i];
  return p;
}

// Per tensor, the dim that carries the batch split and the one that carries
// the model split (-1: none).
struct Tracked {
  int batch = -1;
  int model = -1;
};

enum class Role { Column, Row };

class Walker {
 public:
  Walker(const Graph& g, const StrategyPreset& p, std::map<TensorId, Role> weights)
      : g_(g), p_(p), weights_(std::move(weights)), tracked_(g.tensors().size()), strategies_(g.ops().size()) {}

  Result<std::vector<Strategy>> Run() {
    for (TensorId t = 0; t < g_.tensors().size(); ++t)
      if (g_.tensor(t).kind == TensorKind::Input && !g_.tensor(t).shape.empty()) tracked_[t].batch = 0;
    for (size_t i = 0; i < g_.ops().size(); ++i) SINKRT_RETURN_IF_ERROR(Visit(g_.ops()[i], i));
    for (const auto& [weight, role] : weights_)
      if (!reached_.count(weight))
        return InvalidArgument(
            Describe(p_) + ": " +
            std::string(role == Role::Column ? "no MatMul reads " : "the column split does not reach the MatMul of ") +
            g_.tensor(weight).name + " as the pair's " +
            (role == Role::Column ? "first (column) layer" : "second (row) layer"));
    return std::move(strategies_);
  }

 private:
  Status Error(const OpNode& op, const std::string& message) const {
    return InvalidArgument(Describe(p_) + ": op " + op.name + ": " + message);
  }

  // As the partitioner carries a split through a Reshape (partition_plan.cc,
  // ReshapeLayouts): to the output dim with as many elements before it,
  // when the split divides it.
  Status Reshape(const OpNode& op) {
    const Shape& in = g_.tensor(op.inputs[0]).shape;
    const Shape& out = g_.tensor(op.outputs[0]).shape;
    const Tracked t = tracked_[op.inputs[0]];
    Tracked r;
    std::vector<bool> taken(out.size(), false);
    for (size_t d = 0; d < in.size(); ++d) {
      const bool batch = t.batch == static_cast<int>(d), model = t.model == static_cast<int>(d);
      if (!batch && !model) continue;
      const int64_t ways = batch ? p_.data_parallel : p_.model_parallel;
      int to = -1;
      for (size_t j = 0; j < out.size() && to < 0; ++j)
        if (!taken[j] && Product(out, j) == Product(in, d) && out[j] % ways == 0) to = static_cast<int>(j);
      if (to < 0)
        return Error(op, std::string("the ") + (batch ? "batch" : "model") + " split " + std::to_string(ways) +
                             " ways of dim " + std::to_string(d) + " of " + ShapeToString(in) +
                             " has no dim of the output " + ShapeToString(out) +
                             " to go to: " + "that dim is not divisible by " + std::to_string(ways));
      taken[to] = true;
      (batch ? r.batch : r.model) = to;
    }
    tracked_[op.outputs[0]] = r;
    return Status::Ok();
  }

  Status Visit(const OpNode& op, size_t index) {
    if (op.op == OpCode::Reshape || op.op == OpCode::Flatten) return Reshape(op);
    Result<OpLoops> loops = LoopsOf(g_, op);
    if (!loops.ok()) {
      for (TensorId in : op.inputs)
        if ((tracked_[in].batch >= 0 && p_.data_parallel > 1) || (tracked_[in].model >= 0 && p_.model_parallel > 1))
          return Error(op, "has no sharding rule to split it with: " + loops.status().message());
      return Status::Ok();
    }
    int batch_loop = -1, model_loop = -1;
    auto take = [&](int* loop, int l, const char* what) -> Status {
      if (l < 0 || *loop == l) return Status::Ok();
      if (*loop >= 0) return Error(op, std::string("its inputs carry the ") + what + " split in different dims");
      *loop = l;
      return Status::Ok();
    };
    for (size_t i = 0; i < op.inputs.size(); ++i) {
      const Tracked t = tracked_[op.inputs[i]];
      if (t.batch >= 0) SINKRT_RETURN_IF_ERROR(take(&batch_loop, loops->inputs[i][t.batch], "batch"));
      if (t.model >= 0) SINKRT_RETURN_IF_ERROR(take(&model_loop, loops->inputs[i][t.model], "model"));
    }
    if (op.op == OpCode::MatMul && op.inputs.size() == 2) {
      const TensorId w = op.inputs[1];
      if (auto it = weights_.find(w); it != weights_.end()) {
        // The weight as [in, out] (a transposed one is [out, in]).
        const int in_dim = op.attrs.transpose_b ? 1 : 0, out_dim = 1 - in_dim;
        if (it->second == Role::Column) {
          if (model_loop >= 0)
            return Error(
                op, "its input is already split by the model layout; " + g_.tensor(w).name + " cannot start a pair");
          model_loop = loops->inputs[1][out_dim];
        } else if (model_loop < 0 || model_loop != loops->inputs[1][in_dim]) {
          return Error(op, "the column split of the pair does not reach the rows of " + g_.tensor(w).name);
        }
        reached_.insert(w);
      }
    }
    if (batch_loop >= 0 && batch_loop == model_loop) return Error(op, "the batch and the model split meet in one dim");
    std::vector<int64_t> split(loops->extents.size(), 1);
    for (auto [loop, ways, what] :
         {std::tuple{batch_loop, p_.data_parallel, "batch"}, std::tuple{model_loop, p_.model_parallel, "model"}}) {
      if (loop < 0 || ways == 1) continue;
      if (!loops->fixed[loop].empty())
        return Error(op, std::string("cannot split the ") + what + " dim " + std::to_string(ways) +
                             " ways: " + loops->fixed[loop]);
      if (loops->extents[loop] % ways != 0)
        return Error(op, std::string("the ") + what + " dim has " + std::to_string(loops->extents[loop]) +
                             " entries, not divisible by " + std::to_string(ways) + " (" +
                             (what == std::string("batch") ? "the data-parallel degree" : "the model-parallel ranks") +
                             ")");
      split[loop] = ways;
    }
    Strategy& s = strategies_[index];
    s.resize(op.inputs.size());
    for (size_t i = 0; i < op.inputs.size(); ++i)
      for (int l : loops->inputs[i]) s[i].push_back(l >= 0 ? split[l] : 1);
    // Outputs without loops (MaxPool2D's argmax indices) carry no split.
    for (size_t o = 0; o < op.outputs.size() && o < loops->outputs.size(); ++o) {
      Tracked& t = tracked_[op.outputs[o]];
      for (size_t d = 0; d < loops->outputs[o].size(); ++d) {
        if (batch_loop >= 0 && loops->outputs[o][d] == batch_loop) t.batch = static_cast<int>(d);
        if (model_loop >= 0 && loops->outputs[o][d] == model_loop) t.model = static_cast<int>(d);
      }
    }
    return Status::Ok();
  }

  const Graph& g_;
  const StrategyPreset& p_;
  const std::map<TensorId, Role> weights_;
  std::vector<Tracked> tracked_;
  std::vector<Strategy> strategies_;  // per op; empty: no rule, none set
  std::set<TensorId> reached_;        // pair weights whose MatMul took its split
};

bool AllDigits(const std::string& s) {
  if (s.empty() || s.size() > 9) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

}  // namespace

bool IsStrategyPresetName(const std::string& name) {
  if (name == "data" || name == "model") return true;
  const size_t x = name.find('x');
  return x != std::string::npos && AllDigits(name.substr(0, x)) && AllDigits(name.substr(x + 1));
}

Result<StrategyPreset> ParseStrategyPreset(const std::string& name, int64_t device_num) {
  if (device_num < 1) return InvalidArgument("strategy preset '" + name + "': device_num must be at least 1");
  if (name == "data") return StrategyPreset{name, device_num, 1};
  if (name == "model") return StrategyPreset{name, 1, device_num};
  if (!IsStrategyPresetName(name))
    return InvalidArgument("unknown strategy preset '" + name + "': expected data, model or DPxMP (e.g. 2x2)");
  const size_t x = name.find('x');
  const int64_t dp = std::stoll(name.substr(0, x)), mp = std::stoll(name.substr(x + 1));
  if (dp < 1 || mp < 1) return InvalidArgument("strategy preset '" + name + "': DP and MP must be at least 1");
  if (dp * mp != device_num)
    return InvalidArgument("strategy preset '" + name + "' needs DP x MP = " + std::to_string(dp * mp) +
                           " devices, the job has " + std::to_string(device_num));
  return StrategyPreset{name, dp, mp};
}

Status ApplyStrategyPreset(Graph& g, const StrategyPreset& p) {
  SINKRT_RETURN_IF_ERROR(g.status(), Describe(p) + ": graph '" + g.name() + "'");
  if (!g.valid(g.loss()))
    return InvalidArgument(
        Describe(p) + ": graph '" + g.name() +
        "' has no loss yet: add it first (the loss's strategy decides each rank's slice of the batch)");
  std::map<TensorId, Role> weights;
  if (p.model_parallel > 1) {
    SINKRT_ASSIGN_OR_RETURN(const std::vector<Pair> pairs, MegatronPairs(g, p));
    for (const Pair& pair : pairs) {
      weights[g.FindTensor(pair.column + ".weight")] = Role::Column;
      weights[g.FindTensor(pair.row + ".weight")] = Role::Row;
    }
  }
  SINKRT_ASSIGN_OR_RETURN(const std::vector<Strategy> strategies, Walker(g, p, std::move(weights)).Run());
  // By output rather than by name: a graph file may repeat an op's name.
  for (size_t i = 0; i < strategies.size(); ++i) g.Shard(g.ops()[i].outputs.at(0), strategies[i]);
  return g.status();
}

}  // namespace sinkrt::host::parallel
