#include "host/src/parallel/ops_info/strategy_enumeration.h"

#include <algorithm>
#include <functional>

#include "host/src/parallel/ops_info/op_loops.h"

namespace sinkrt::host::parallel {
namespace {

bool PowerOfTwo(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

// The split factors a loop may take: divisors of the stage (powers of two
// on a power-of-two stage, as ShardOp requires) that divide its extent.
std::vector<int64_t> Factors(int64_t extent, int64_t device_num) {
  std::vector<int64_t> out;
  for (int64_t f = 1; f <= device_num; ++f) {
    if (device_num % f != 0 || extent % f != 0) continue;
    if (PowerOfTwo(device_num) && !PowerOfTwo(f)) continue;
    out.push_back(f);
  }
  return out;
}

}  // namespace

Result<std::vector<Strategy>> EnumerateStrategies(const Graph& g, const OpNode& op, int64_t device_num,
                                                  bool fully_use_devices) {
  SINKRT_ASSIGN_OR_RETURN(OpLoops loops, LoopsOf(g, op), "auto_parallel: op " + op.name);
  const size_t n = loops.extents.size();
  // A loop can be split only when some input indexes it (a strategy names
  // input dims) and the rule allows it.
  std::vector<std::vector<int64_t>> factors(n, std::vector<int64_t>{1});
  for (size_t i = 0; i < loops.inputs.size(); ++i)
    for (int loop : loops.inputs[i])
      if (loop >= 0 && loops.fixed[loop].empty() && factors[loop].size() == 1)
        factors[loop] = Factors(loops.extents[loop], device_num);

  std::vector<std::pair<int64_t, std::vector<int64_t>>> splits;  // (ranks used, per-loop split)
  std::vector<int64_t> split(n, 1);
  std::function<void(size_t, int64_t, int)> walk = [&](size_t loop, int64_t product, int split_loops) {
    if (loop == n) {
      splits.emplace_back(product, split);
      return;
    }
    for (int64_t f : factors[loop]) {
      if (device_num % (product * f) != 0) continue;
      if (f > 1 && split_loops == kMaxSplitLoops) continue;
      split[loop] = f;
      walk(loop + 1, product * f, split_loops + (f > 1 ? 1 : 0));
    }
    split[loop] = 1;
  };
  walk(0, 1, 0);
  std::stable_sort(splits.begin(), splits.end(), [](const auto& a, const auto& b) { return a.first < b.first; });

  const bool gemm = op.op == OpCode::MatMul || op.op == OpCode::BatchMatMul || op.op == OpCode::Conv2D;
  std::vector<Strategy> out, full;
  for (const auto& [ranks, s] : splits) {
    Strategy strategy;
    for (size_t i = 0; i < op.inputs.size(); ++i) {
      std::vector<int64_t>& dims = strategy.emplace_back();
      for (int loop : loops.inputs[i]) dims.push_back(loop < 0 ? 1 : s[loop]);
    }
    // ShardOp is the judge: a rule may refuse what the loops allow.
    if (!ShardOp(g, op, strategy, device_num).ok()) continue;
    if (ranks == device_num) full.push_back(strategy);
    out.push_back(std::move(strategy));
  }
  if (fully_use_devices && gemm && !full.empty()) return full;
  if (out.empty())
    return InvalidArgument("auto_parallel: op " + op.name + " has no shard strategy on " + std::to_string(device_num) +
                           " devices, not even the replicated one");
  return out;
}

int64_t BatchSplit(const Graph& g, const OpNode& op, const Strategy& strategy) {
  for (size_t i = 0; i < op.inputs.size() && i < strategy.size(); ++i) {
    const TensorInfo& t = g.tensor(op.inputs[i]);
    if (t.kind == TensorKind::Param || t.kind == TensorKind::Const || t.kind == TensorKind::State || t.shape.empty())
      continue;
    return strategy[i].empty() ? 1 : strategy[i][0];
  }
  return 1;
}

}  // namespace sinkrt::host::parallel
