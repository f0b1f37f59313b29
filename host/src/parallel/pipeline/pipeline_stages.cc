// Which op runs in which pipeline stage (sinkrt/host/pipeline.h).
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <limits>
#include <map>
#include <set>
#include <string>

#include "host/src/parallel/auto_parallel/cost_model.h"
#include "host/src/parallel/ops_info/op_sharding.h"
#include "sinkrt/host/pipeline.h"

namespace sinkrt::host {
namespace {

std::string Quoted(const std::string& s) { return "'" + s + "'"; }

// The op's stage by the longest layer that is a name-scope prefix of its
// name, or -1.
int NamedStage(const std::string& op_name, const std::vector<std::pair<std::string, int>>& layers,
               std::vector<bool>* used) {
  int best = -1;
  size_t best_len = 0;
  for (size_t l = 0; l < layers.size(); ++l) {
    const std::string& layer = layers[l].first;
    const bool match =
        op_name == layer ||
        (op_name.size() > layer.size() && op_name.compare(0, layer.size(), layer) == 0 && op_name[layer.size()] == '.');
    if (match && (best < 0 || layer.size() > best_len)) {
      best = static_cast<int>(l);
      best_len = layer.size();
    }
  }
  if (best < 0) return -1;
  (*used)[static_cast<size_t>(best)] = true;
  return layers[static_cast<size_t>(best)].second;
}

// Per op, its estimated forward + backward + update seconds on one device.
Result<std::vector<double>> OpSeconds(const Graph& g, const Calibration& calibration) {
  SINKRT_ASSIGN_OR_RETURN(parallel::CostContext ctx, parallel::MakeCostContext(g, calibration));
  std::vector<double> out;
  out.reserve(g.ops().size());
  for (const OpNode& op : g.ops()) {
    // An op with no sharding rule is a view (Reshape, Flatten): no work.
    auto s = parallel::ShardOp(g, op, parallel::DefaultStrategy(g, op, 1), 1);
    if (!s.ok()) {
      out.push_back(0);
      continue;
    }
    SINKRT_ASSIGN_OR_RETURN(parallel::OpCost c, parallel::CostOfOp(ctx, op, *s));
    out.push_back(c.compute_fwd_s + c.compute_bwd_s + c.update_s);
  }
  return out;
}

// Contiguous parts of ops 0..n-1 minimising the largest part's cost, each
// part starting at an allowed cut (cut[i]: a part may start at op i).
// Returns the first op of each part, or an empty vector when `stages` parts
// do not fit.
std::vector<size_t> BalancedCuts(const std::vector<double>& cost, const std::vector<bool>& cut, int stages) {
  const size_t n = cost.size();
  std::vector<double> prefix(n + 1, 0);
  for (size_t i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + cost[i];
  constexpr double kInf = std::numeric_limits<double>::infinity();
  // best[s][i]: the smallest largest part covering ops [0, i) with s parts.
  std::vector<std::vector<double>> best(static_cast<size_t>(stages) + 1, std::vector<double>(n + 1, kInf));
  std::vector<std::vector<size_t>> from(static_cast<size_t>(stages) + 1, std::vector<size_t>(n + 1, 0));
  best[0][0] = 0;
  for (size_t s = 1; s <= static_cast<size_t>(stages); ++s)
    for (size_t i = 1; i <= n; ++i)
      for (size_t j = s - 1; j < i; ++j) {  // the part [j, i)
        if (best[s - 1][j] == kInf || (j > 0 && !cut[j])) continue;
        const double v = std::max(best[s - 1][j], prefix[i] - prefix[j]);
        if (v < best[s][i]) {
          best[s][i] = v;
          from[s][i] = j;
        }
      }
  if (best[static_cast<size_t>(stages)][n] == kInf) return {};
  std::vector<size_t> starts(static_cast<size_t>(stages));
  size_t i = n;
  for (size_t s = static_cast<size_t>(stages); s >= 1; --s) {
    starts[s - 1] = from[s][i];
    i = from[s][i];
  }
  return starts;
}

}  // namespace

Result<std::vector<std::pair<std::string, int>>> ParseStageOf(const std::string& text) {
  std::vector<std::pair<std::string, int>> out;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t comma = std::min(text.find(',', at), text.size());
    const std::string entry = text.substr(at, comma - at);
    const size_t eq = entry.rfind('=');
    const std::string name = eq == std::string::npos ? "" : entry.substr(0, eq);
    const std::string number = eq == std::string::npos ? "" : entry.substr(eq + 1);
    char* end = nullptr;
    errno = 0;
    const long k = number.empty() ? -1 : std::strtol(number.c_str(), &end, 10);
    if (name.empty() || number.empty() || *end != '\0' || errno != 0 || k < 0 || k > 1 << 20)
      return InvalidArgument("--stage-of entry " + Quoted(entry) +
                             ": expected LAYER=STAGE (a name scope and a stage number from 0), as in "
                             "'block0=0,block1=1'");
    out.emplace_back(name, static_cast<int>(k));
    at = comma + 1;
  }
  return out;
}

namespace {

// What stage assignment needs of the config: stages >= 1, each layer once,
// in a stage that exists.
Status CheckStages(const PipelineConfig& config) {
  if (config.stages < 1)
    return InvalidArgument("pipeline_stages must be at least 1, but got " + std::to_string(config.stages));
  std::map<std::string, int> seen;
  for (const auto& [layer, stage] : config.stage_of) {
    if (stage < 0 || stage >= config.stages)
      return InvalidArgument("layer " + Quoted(layer) + " is given stage " + std::to_string(stage) +
                             ", outside the pipeline's stages 0.." + std::to_string(config.stages - 1));
    auto [it, fresh] = seen.emplace(layer, stage);
    if (!fresh)
      return InvalidArgument("layer " + Quoted(layer) + " is given twice (stages " + std::to_string(it->second) +
                             " and " + std::to_string(stage) + "): a layer belongs to one stage");
  }
  return Status::Ok();
}

}  // namespace

Status CheckPipelineConfig(const PipelineConfig& config, int device_num, int64_t batch) {
  SINKRT_RETURN_IF_ERROR(CheckStages(config));
  if (device_num % config.stages != 0)
    return InvalidArgument("device_num " + std::to_string(device_num) + " is not divisible by pipeline_stages " +
                           std::to_string(config.stages) + ": every stage needs device_num / pipeline_stages devices");
  if (config.micro_size < 1)
    return InvalidArgument("micro_size must be at least 1, but got " + std::to_string(config.micro_size));
  if (config.micro_size < config.stages)
    return InvalidArgument("micro_size must be greater than or equal to pipeline_stages, but got micro_size " +
                           std::to_string(config.micro_size) + " and pipeline_stages " + std::to_string(config.stages));
  if (batch > 0 && batch % config.micro_size != 0)
    return InvalidArgument("the batch of " + std::to_string(batch) + " does not split into micro_size " +
                           std::to_string(config.micro_size) + " equal micro-batches");
  if (config.scheduler != "1f1b" && config.scheduler != "gpipe")
    return InvalidArgument("pipeline_scheduler " + Quoted(config.scheduler) +
                           ": sinkrt schedules 1f1b (the default) or gpipe");
  return Status::Ok();
}

Result<PipelineStages> AssignPipelineStages(const Graph& g, const PipelineConfig& config,
                                            const Calibration& calibration) {
  SINKRT_RETURN_IF_ERROR(g.status(), "pipeline stages");
  SINKRT_RETURN_IF_ERROR(CheckStages(config));
  const std::vector<OpNode>& ops = g.ops();
  const size_t n = ops.size();
  PipelineStages out;
  out.stages = config.stages;
  out.op_stage.assign(n, 0);
  out.stage_seconds.assign(static_cast<size_t>(config.stages), 0);
  out.stage_source.assign(static_cast<size_t>(config.stages), "");
  if (static_cast<size_t>(config.stages) > n)
    return InvalidArgument("pipeline_stages " + std::to_string(config.stages) + " is more than the network's " +
                           std::to_string(n) + " ops: a stage would be empty");

  std::vector<int64_t> producer(g.tensors().size(), -1);
  for (size_t i = 0; i < n; ++i)
    for (TensorId t : ops[i].outputs) producer[t] = static_cast<int64_t>(i);
  SINKRT_ASSIGN_OR_RETURN(std::vector<double> seconds, OpSeconds(g, calibration));

  if (!config.stage_of.empty()) {
    std::vector<bool> used(config.stage_of.size(), false);
    for (size_t i = 0; i < n; ++i) {
      int stage = NamedStage(ops[i].name, config.stage_of, &used);
      if (stage < 0) {
        stage = 0;
        for (TensorId t : ops[i].inputs)
          if (producer[t] >= 0) stage = std::max(stage, out.op_stage[static_cast<size_t>(producer[t])]);
      }
      out.op_stage[i] = stage;
    }
    for (size_t l = 0; l < used.size(); ++l)
      if (!used[l])
        return InvalidArgument("layer " + Quoted(config.stage_of[l].first) + " (stage " +
                               std::to_string(config.stage_of[l].second) +
                               ") names no op of the network: a layer is a name scope, as in op '" +
                               (n ? ops[0].name : std::string()) + "'");
    for (const auto& [layer, stage] : config.stage_of) {
      std::string& src = out.stage_source[static_cast<size_t>(stage)];
      src += (src.empty() ? "layers " : ", ") + layer;
    }
  } else {
    // A cut may not separate the readers of one parameter.
    std::vector<bool> cut(n, true);
    std::vector<int64_t> first(g.tensors().size(), -1), last(g.tensors().size(), -1);
    for (size_t i = 0; i < n; ++i)
      for (TensorId t : ops[i].inputs)
        if (g.tensors()[t].kind == TensorKind::Param) {
          if (first[t] < 0) first[t] = static_cast<int64_t>(i);
          last[t] = static_cast<int64_t>(i);
        }
    for (size_t t = 0; t < first.size(); ++t)
      for (int64_t i = first[t] + 1; first[t] >= 0 && i <= last[t]; ++i) cut[static_cast<size_t>(i)] = false;
    const std::vector<size_t> starts = BalancedCuts(seconds, cut, config.stages);
    if (starts.empty())
      return InvalidArgument("the network's ops cannot be cut into " + std::to_string(config.stages) +
                             " stages without splitting a parameter's readers; name the stages with --stage-of");
    for (int s = 0; s < config.stages; ++s) {
      const size_t end = s + 1 < config.stages ? starts[static_cast<size_t>(s) + 1] : n;
      for (size_t i = starts[static_cast<size_t>(s)]; i < end; ++i) out.op_stage[i] = s;
      out.stage_source[static_cast<size_t>(s)] = "balanced";
    }
  }

  // Every stage holds ops; data flows forward; a parameter lives in one stage.
  std::vector<size_t> count(static_cast<size_t>(config.stages), 0);
  std::vector<int> param_stage(g.tensors().size(), -1);
  for (size_t i = 0; i < n; ++i) {
    const int stage = out.op_stage[i];
    ++count[static_cast<size_t>(stage)];
    out.stage_seconds[static_cast<size_t>(stage)] += seconds[i];
    for (TensorId t : ops[i].inputs) {
      const TensorInfo& info = g.tensors()[t];
      if (producer[t] >= 0 && out.op_stage[static_cast<size_t>(producer[t])] > stage) {
        const OpNode& p = ops[static_cast<size_t>(producer[t])];
        return InvalidArgument("op " + Quoted(ops[i].name) + " in stage " + std::to_string(stage) + " reads " +
                               Quoted(info.name) + " from op " + Quoted(p.name) + " in stage " +
                               std::to_string(out.op_stage[static_cast<size_t>(producer[t])]) +
                               ": data flows forward through the stages; give both the same stage or move the "
                               "reader later");
      }
      if (info.kind == TensorKind::Param) {
        if (param_stage[t] >= 0 && param_stage[t] != stage)
          return InvalidArgument("parameter " + Quoted(info.name) + " is read in stages " +
                                 std::to_string(param_stage[t]) + " and " + std::to_string(stage) + " (op " +
                                 Quoted(ops[i].name) + "): a parameter lives in one stage");
        param_stage[t] = stage;
      }
    }
  }
  for (int s = 0; s < config.stages; ++s)
    if (count[static_cast<size_t>(s)] == 0)
      return InvalidArgument("stage " + std::to_string(s) + " of " + std::to_string(config.stages) +
                             " has no ops: every stage needs at least one layer");

  // What crosses: each output read in a later stage, to the latest reader.
  std::map<TensorId, StageBoundary> crossing;
  for (size_t i = 0; i < n; ++i)
    for (TensorId t : ops[i].inputs) {
      if (producer[t] < 0) continue;
      const int from = out.op_stage[static_cast<size_t>(producer[t])];
      if (from == out.op_stage[i]) continue;
      StageBoundary& b = crossing[t];
      b.tensor = t;
      b.from = from;
      b.to = std::max(b.to, out.op_stage[i]);
    }
  for (auto& [t, b] : crossing) out.boundaries.push_back(b);
  return out;
}

std::vector<uint32_t> StageRanks(int device_num, int stages, int stage) {
  std::vector<uint32_t> out;
  if (stages < 1 || device_num % stages != 0 || stage < 0 || stage >= stages) return out;
  const int per = device_num / stages;
  for (int r = 0; r < per; ++r) out.push_back(static_cast<uint32_t>(stage * per + r));
  return out;
}

int StageOfRank(int device_num, int stages, uint32_t rank) {
  if (stages < 1 || device_num % stages != 0) return -1;
  return static_cast<int>(rank) / (device_num / stages);
}

}  // namespace sinkrt::host
