#include "host/src/parallel/ops_info/op_sharding.h"

#include <algorithm>

#include "host/src/parallel/ops_info/op_loops.h"

namespace sinkrt::host::parallel {
namespace {

bool PowerOfTwo(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

// MindSpore's message prefix: "{op}: The strategy is {S}, ".
std::string Prefix(const OpNode& op, const Strategy& s) {
  return op.name + ": The strategy is " + StrategyToString(s) + ", ";
}

}  // namespace

Result<OpSharding> ShardOp(const Graph& g, const OpNode& op, const Strategy& strategy, int64_t device_num) {
  SINKRT_ASSIGN_OR_RETURN(OpLoops loops, LoopsOf(g, op));
  const std::string prefix = Prefix(op, strategy);
  if (strategy.size() != op.inputs.size()) {
    return InvalidArgument(prefix + "strategy size: " + std::to_string(strategy.size()) +
                           " is not equal to inputs size: " + std::to_string(op.inputs.size()));
  }
  const size_t num_loops = loops.extents.size();
  std::vector<int64_t> split(num_loops, 0);                 // 0: not yet seen
  std::vector<std::pair<size_t, size_t>> first(num_loops);  // where each loop's split was read
  for (size_t i = 0; i < strategy.size(); ++i) {
    const Shape& shape = g.tensor(op.inputs[i]).shape;
    if (strategy[i].size() != shape.size()) {
      return InvalidArgument(prefix + "strategy len: " + std::to_string(strategy[i].size()) +
                             " is not equal to inputs len: " + std::to_string(shape.size()) +
                             ", index: " + std::to_string(i));
    }
    for (size_t d = 0; d < shape.size(); ++d) {
      const int64_t v = strategy[i][d];
      if (v < 1)
        return InvalidArgument(prefix + "the value of strategy must be larger than 0, but get " + std::to_string(v));
      if (PowerOfTwo(device_num) && !PowerOfTwo(v))
        return InvalidArgument(prefix + "the value of strategy must be the power of 2, but get " + std::to_string(v));
      if (shape[d] % v != 0) {
        return InvalidArgument(prefix + "shape " + ShapeToString(shape) + " cannot be divisible by strategy value " +
                               std::to_string(v));
      }
      const int loop = loops.inputs[i][d];
      if (loop < 0) {
        if (v != 1) {
          return InvalidArgument(prefix + "input " + std::to_string(i) + " dim " + std::to_string(d) +
                                 " is broadcast and cannot be split, but get " + std::to_string(v));
        }
        continue;
      }
      if (v > 1 && !loops.fixed[loop].empty()) {
        return InvalidArgument(prefix + "dim " + std::to_string(d) + " of input " + std::to_string(i) +
                               " cannot be split (" + loops.fixed[loop] + "), but get " + std::to_string(v));
      }
      if (split[loop] == 0) {
        split[loop] = v;
        first[loop] = {i, d};
        continue;
      }
      if (split[loop] == v) continue;
      const auto [fi, fd] = first[loop];
      if (op.op == OpCode::MatMul && loops.reduction[loop]) {
        const bool tb = op.attrs.transpose_b;
        return InvalidArgument(op.name + ": Can not do this operator in the strategy: " + StrategyToString(strategy) +
                               ", the transpose_b is " + (tb ? "true" : "false") +
                               ", the shard num of first input's column is " + std::to_string(split[loop]) +
                               ", but the shard num of second input's " + (tb ? "column" : "row") + " is " +
                               std::to_string(v));
      }
      return InvalidArgument(prefix + "strategies of relevant dimensions are not equal: input " + std::to_string(fi) +
                             " dim " + std::to_string(fd) + " is split " + std::to_string(split[loop]) +
                             " ways, input " + std::to_string(i) + " dim " + std::to_string(d) + " " +
                             std::to_string(v) + " ways");
    }
  }
  int64_t product = 1;
  for (int64_t& s : split) {
    if (s == 0) s = 1;  // a loop no input indexes (none today) stays whole
    product *= s;
  }
  if (product > device_num || device_num % product != 0) {
    return InvalidArgument(prefix + "it requires " + std::to_string(product) +
                           " devices, but the device number of this stage is " + std::to_string(device_num) +
                           ", it can not be divisible by " + std::to_string(product));
  }

  OpSharding out;
  out.strategy = strategy;
  out.device_matrix = split;
  const int64_t repeated = device_num / product;
  if (repeated > 1) out.device_matrix.push_back(repeated);  // MindSpore's default: repeats on the right
  const int shift = repeated > 1 ? 1 : 0;
  if (repeated > 1) out.repeated_axis = 0;
  auto axis_of = [&](int loop) { return loop < 0 ? -1 : static_cast<int>(num_loops) - 1 - loop + shift; };
  for (size_t loop = num_loops; loop-- > 0;)
    if (split[loop] > 1) out.split_axes.push_back(axis_of(static_cast<int>(loop)));
  auto layout = [&](const std::vector<int>& dims, TensorId t) {
    TensorLayout l;
    l.device_matrix = out.device_matrix;
    l.shape = g.tensor(t).shape;
    for (int loop : dims) l.tensor_map.push_back(axis_of(loop));
    return l;
  };
  for (size_t i = 0; i < op.inputs.size(); ++i) out.inputs.push_back(layout(loops.inputs[i], op.inputs[i]));
  std::vector<int> partial;
  for (size_t loop = num_loops; loop-- > 0;)
    if (loops.reduction[loop] && split[loop] > 1) partial.push_back(axis_of(static_cast<int>(loop)));
  for (size_t o = 0; o < op.outputs.size(); ++o) {
    TensorLayout l = layout(loops.outputs[o], op.outputs[o]);
    l.partial = partial;
    l.partial_mean = loops.mean && !partial.empty();
    out.outputs.push_back(std::move(l));
  }
  for (const TensorLayout& l : out.inputs) SINKRT_RETURN_IF_ERROR(CheckLayout(l));
  for (const TensorLayout& l : out.outputs) SINKRT_RETURN_IF_ERROR(CheckLayout(l));
  return out;
}

std::vector<int> GradPartialAxes(const OpSharding& s, const TensorLayout& layout) {
  std::vector<int> axes;
  for (int a : s.split_axes)
    if (std::find(layout.tensor_map.begin(), layout.tensor_map.end(), a) == layout.tensor_map.end()) axes.push_back(a);
  return axes;
}

Strategy DefaultStrategy(const Graph& g, const OpNode& op, int64_t device_num) {
  Strategy s;
  for (TensorId t : op.inputs) s.emplace_back(g.tensor(t).shape.size(), 1);
  Result<OpLoops> loops = LoopsOf(g, op);
  if (!loops.ok()) return s;
  for (size_t i = 0; i < op.inputs.size(); ++i) {
    const TensorInfo& t = g.tensor(op.inputs[i]);
    if (t.kind == TensorKind::Param || t.kind == TensorKind::Const || t.kind == TensorKind::State || t.shape.empty())
      continue;
    const int batch = loops->inputs[i][0];
    if (batch < 0 || !loops->fixed[batch].empty() || loops->extents[batch] % device_num != 0) return s;
    for (size_t j = 0; j < op.inputs.size(); ++j)
      for (size_t d = 0; d < s[j].size(); ++d)
        if (loops->inputs[j][d] == batch) s[j][d] = device_num;
    return s;
  }
  return s;
}

}  // namespace sinkrt::host::parallel
