// Graph::Shard: attaching SEMI_AUTO_PARALLEL shard strategies to ops. Only
// the strategy's structure is checked here (the graph knows the inputs and
// their ranks); what needs the device count is checked by ShardOp
// (parallel/ops_info/op_sharding.h) when the graph is compiled. The messages are
// MindSpore's, in the words ShardOp uses, so an error reads the same
// whichever check finds it. StrategyToString lives here rather than in
// parallel/ so that the graph (and the graph-file fuzzer, which builds it
// alone) does not depend on the sharding rules.
#include <utility>

#include "sinkrt/host/graph.h"

namespace sinkrt::host {

std::string StrategyToString(const std::vector<std::vector<int64_t>>& strategy) {
  std::string r = "(";
  for (size_t i = 0; i < strategy.size(); ++i) {
    if (i) r += ", ";
    r += '(';
    for (size_t d = 0; d < strategy[i].size(); ++d) {
      if (d) r += ", ";
      r += std::to_string(strategy[i][d]);
    }
    if (strategy[i].size() == 1) r += ',';
    r += ')';
  }
  if (strategy.size() == 1) r += ',';
  return r + ")";
}

Status CheckStrategyShape(const Graph& g, const OpNode& op, const std::vector<std::vector<int64_t>>& strategy) {
  const std::string prefix = op.name + ": The strategy is " + StrategyToString(strategy) + ", ";
  if (strategy.size() != op.inputs.size())
    return InvalidArgument(prefix + "strategy size: " + std::to_string(strategy.size()) +
                           " is not equal to inputs size: " + std::to_string(op.inputs.size()));
  for (size_t i = 0; i < strategy.size(); ++i) {
    const size_t rank = g.tensor(op.inputs[i]).shape.size();
    if (strategy[i].size() != rank)
      return InvalidArgument(prefix + "strategy len: " + std::to_string(strategy[i].size()) +
                             " is not equal to inputs len: " + std::to_string(rank) + ", index: " + std::to_string(i));
  }
  for (const std::vector<int64_t>& entry : strategy)
    for (int64_t v : entry)
      if (v < 1)
        return InvalidArgument(prefix + "the value of strategy must be larger than 0, but get " + std::to_string(v));
  return Status::Ok();
}

namespace {

// An empty strategy takes the op's away: nothing to check.
Status CheckShape(const Graph& g, const OpNode& op, const std::vector<std::vector<int64_t>>& strategy) {
  return strategy.empty() ? Status::Ok() : CheckStrategyShape(g, op, strategy);
}

}  // namespace

TensorId Graph::Shard(TensorId output, std::vector<std::vector<int64_t>> strategy) {
  if (!status_.ok()) return kInvalidTensor;
  if (!valid(output)) {
    Fail(InvalidArgument("Shard: tensor id " + std::to_string(output) + " is not a tensor of this graph"));
    return kInvalidTensor;
  }
  const int64_t op = producer_[output];
  if (op < 0) {
    // A leaf has no op to shard: its layout follows from the ops that read it.
    Fail(InvalidArgument("Shard: tensor '" + tensors_[output].name +
                         "' is not the output of an op (Inputs, Params and Consts are leaves); shard the op that "
                         "reads it"));
    return kInvalidTensor;
  }
  if (Status s = CheckShape(*this, ops_[op], strategy); !s.ok()) {
    Fail(std::move(s));
    return kInvalidTensor;
  }
  ops_[op].strategy = std::move(strategy);
  return output;
}

void Graph::Shard(const std::string& op_name, std::vector<std::vector<int64_t>> strategy) {
  if (!status_.ok()) return;
  const int64_t op = FindOp(op_name);
  if (op < 0) return Fail(InvalidArgument("Shard: the graph '" + name_ + "' has no op '" + op_name + "'"));
  if (Status s = CheckShape(*this, ops_[op], strategy); !s.ok()) return Fail(std::move(s));
  ops_[op].strategy = std::move(strategy);
}

void Graph::Recompute(const std::string& layer) {
  if (!status_.ok()) return;
  if (layer.empty()) return Fail(InvalidArgument("Recompute: the layer name is empty"));
  const bool all = layer == "all";
  bool any = false;
  for (OpNode& op : ops_) {
    const size_t dot = op.name.find('.');
    if (all) {
      if (dot == std::string::npos) continue;  // not inside a layer
      op.recompute = op.name.substr(0, dot);
    } else if (op.name.size() > layer.size() && op.name.compare(0, layer.size(), layer) == 0 &&
               op.name[layer.size()] == '.') {
      op.recompute = layer;
    } else {
      continue;
    }
    any = true;
  }
  if (!any)
    Fail(InvalidArgument(all ? "Recompute: graph '" + name_ + "' has no op inside a layer (a name scope)"
                             : "Recompute: graph '" + name_ + "' has no op in layer '" + layer + "'"));
}

void Graph::SetOpRecompute(size_t op, std::string segment) {
  if (!status_.ok()) return;
  if (op >= ops_.size())
    return Fail(Internal("SetOpRecompute: op index " + std::to_string(op) + " is outside graph '" + name_ + "'"));
  ops_[op].recompute = std::move(segment);
}

}  // namespace sinkrt::host
