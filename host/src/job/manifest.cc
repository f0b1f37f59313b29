#include "host/src/job/manifest.h"

#include <cinttypes>
#include <cstdio>
#include <utility>

#include "host/src/compiler/graph_hash.h"
#include "host/src/util/hex.h"
#include "host/src/util/schema_enums.h"
#include "sinkrt/fb/task_stream_generated.h"

namespace sinkrt::host::job {
namespace {

using Json = nlohmann::ordered_json;

Json OptionsToJson(const CompileOptions& o) {
  const OptimizerSpec& s = o.optimizer;
  Json optimizer = {{"kind", OptimizerKindName(s.kind)}, {"learning_rate", s.learning_rate}};
  if (s.kind == OptimizerKind::Momentum) {
    optimizer["momentum"] = s.momentum;
    optimizer["nesterov"] = s.nesterov;
  }
  if (s.kind == OptimizerKind::Adam || s.kind == OptimizerKind::AdamWeightDecay || s.kind == OptimizerKind::Lamb) {
    optimizer["beta1"] = s.beta1;
    optimizer["beta2"] = s.beta2;
    optimizer["epsilon"] = s.epsilon;
  }
  optimizer["weight_decay"] = s.weight_decay;
  // Absent without groups, so that older manifests keep their text.
  if (!s.groups.empty()) {
    Json groups = Json::array();
    for (const ParamGroup& g : s.groups)
      groups.push_back({{"names", g.names}, {"weight_decay", g.weight_decay}, {"learning_rate", g.learning_rate}});
    optimizer["groups"] = std::move(groups);
  }
  // Absent without clipping, so that older manifests keep their text.
  if (s.clip_grad_norm != 0) optimizer["clip_grad_norm"] = s.clip_grad_norm;
  Json parallel = {{"mode", ParallelModeName(o.parallel_mode)}, {"device_num", o.world_size}};
  if (o.parallel_mode == ParallelMode::DataParallel) {
    parallel["gradients_mean"] = o.gradients_mean;
    parallel["parameter_broadcast"] = o.parameter_broadcast;
    const CommFusion& f = o.comm_fusion;
    Json fusion = {{"openstate", f.openstate}, {"mode", f.mode}};
    if (f.mode == "size") fusion["size_mb"] = f.size_mb;
    if (f.mode == "index") fusion["indices"] = f.indices;
    parallel["comm_fusion"] = std::move(fusion);
  }
  if (o.pipeline.stages > 1) {
    Json stage_of = Json::array();
    for (const auto& [layer, stage] : o.pipeline.stage_of) stage_of.push_back({layer, stage});
    parallel["pipeline"] = {{"stages", o.pipeline.stages},
                            {"micro_size", o.pipeline.micro_size},
                            {"scheduler", o.pipeline.scheduler},
                            {"stage_of", std::move(stage_of)}};
  }
  if (o.grad_accumulation > 1) parallel["grad_accumulation_step"] = o.grad_accumulation;
  // Written only when on, so that other manifests read as before.
  if (o.enable_parallel_optimizer) {
    const ParallelOptimizerConfig& c = o.parallel_optimizer_config;
    parallel["enable_parallel_optimizer"] = true;
    parallel["parallel_optimizer_config"] = {{"parallel_optimizer_threshold", c.threshold_kb},
                                             {"optimizer_weight_shard_size", c.optimizer_weight_shard_size},
                                             {"optimizer_level", c.optimizer_level},
                                             {"gradient_accumulation_shard", c.gradient_accumulation_shard}};
  }
  Json out = {{"optimizer", std::move(optimizer)},    {"queue_capacity", o.queue_capacity},
              {"arena_alignment", o.arena_alignment}, {"fuse", o.fuse},
              {"eval_program", o.eval_program},       {"predict_program", o.predict_program},
              {"parallel", std::move(parallel)}};
  // Written only when on, so that an O0 manifest reads as before amp.
  if (o.amp_level != AmpLevel::O0) out["amp_level"] = AmpLevelName(o.amp_level);
  if (o.loss_scale.enabled()) {
    const LossScaleManager& m = o.loss_scale;
    Json ls = {{"kind", m.kind == LossScaleManager::Kind::Fixed ? "fixed" : "dynamic"}, {"loss_scale", m.loss_scale}};
    if (m.kind == LossScaleManager::Kind::Fixed) ls["drop_overflow_update"] = m.drop_overflow_update;
    if (m.kind == LossScaleManager::Kind::Dynamic) {
      ls["scale_factor"] = m.scale_factor;
      ls["scale_window"] = m.scale_window;
    }
    out["loss_scale_manager"] = std::move(ls);
  }
  return out;
}

Json ColumnsToJson(const fb::QueueSpec& q) {
  Json cols = Json::array();
  if (q.columns())
    for (const fb::QueueColumn* c : *q.columns()) {
      Json shape = Json::array();
      if (c->shape())
        for (int64_t d : *c->shape()) shape.push_back(d);
      cols.push_back(
          {{"name", c->name() ? c->name()->str() : ""}, {"dtype", DTypeName(c->dtype())}, {"shape", std::move(shape)}});
    }
  return cols;
}

// A typed read of `j[key]` whose errors name the manifest and the key path.
struct Reader {
  const std::string& path;
  Status status;

  template <typename T>
  T Get(const Json& j, const char* key, const std::string& where, T fallback = {}) {
    if (!status.ok()) return fallback;
    const std::string name = where.empty() ? key : where + "." + key;
    auto it = j.find(key);
    if (it == j.end()) {
      status = InvalidArgument(path + ": missing \"" + name + "\"");
      return fallback;
    }
    try {
      return it->template get<T>();
    } catch (const std::exception& e) {
      status = InvalidArgument(path + ": \"" + name + "\" has the wrong type (" + e.what() + ")");
      return fallback;
    }
  }
  uint64_t Hash(const Json& j, const char* key, const std::string& where) {
    const std::string s = Get<std::string>(j, key, where);
    if (!status.ok()) return 0;
    uint64_t v = 0;
    if (s.size() != 18 || s.compare(0, 2, "0x") != 0 || std::sscanf(s.c_str() + 2, "%" SCNx64, &v) != 1)
      status = InvalidArgument(path + ": \"" + where + "." + key + "\" is \"" + s + "\", not 0x and 16 hex digits");
    return v;
  }
};

}  // namespace

std::string RankFileName(uint32_t rank) { return "rank_" + std::to_string(rank) + ".tstream"; }

uint64_t ContentHash(std::span<const uint8_t> bytes) {
  compiler::Fnv1a64 h;
  h.Bytes(bytes);
  return h.value();
}

Json ManifestToJson(const CompiledJob& job) {
  Json j;
  j["format"] = kManifestFormat;
  j["network"] = {{"name", job.network_name},
                  {"hash", Hex64(job.network_hash)},
                  {"structure_hash", Hex64(job.network_structure_hash)},
                  {"label_column", job.label_column}};
  j["options"] = OptionsToJson(job.options);
  Json queues = Json::array();
  if (!job.ranks.empty()) {
    const fb::TaskStream& rank0 = *job.ranks[0].stream.root();
    if (rank0.queues())
      for (const fb::QueueSpec* q : *rank0.queues())
        queues.push_back(
            {{"name", q->name() ? q->name()->str() : ""}, {"capacity", q->capacity()}, {"columns", ColumnsToJson(*q)}});
  }
  j["queues"] = std::move(queues);
  Json ranks = Json::array();
  for (uint32_t r = 0; r < job.ranks.size(); ++r) {
    const CompiledStream& s = job.ranks[r];
    ranks.push_back({{"rank", r},
                     {"file", RankFileName(r)},
                     {"bytes", s.stream.bytes().size()},
                     {"arena_bytes", s.report.arena_bytes},
                     {"stream_hash", Hex64(s.graph_hash)},
                     {"content_hash", Hex64(ContentHash(s.stream.bytes()))}});
  }
  j["ranks"] = std::move(ranks);
  Json buckets = Json::array();
  if (!job.ranks.empty())
    for (const GradientBucket& b : job.ranks[0].report.buckets)
      buckets.push_back({{"offset", b.offset}, {"bytes", b.bytes}, {"gradients", b.gradients}});
  j["buckets"] = std::move(buckets);
  return j;
}

Result<Manifest> ParseManifest(const std::string& text, const std::string& path) {
  Json j;
  try {
    j = Json::parse(text);
  } catch (const std::exception& e) {
    return InvalidArgument(path + ": not JSON (" + e.what() + ")");
  }
  if (!j.is_object()) return InvalidArgument(path + ": not a JSON object");
  Reader rd{path, Status::Ok()};
  const std::string format = rd.Get<std::string>(j, "format", "");
  if (rd.status.ok() && format != kManifestFormat)
    return InvalidArgument(path + ": format \"" + format + "\", this build reads \"" + kManifestFormat + "\"");
  Manifest m;
  const Json network = rd.Get<Json>(j, "network", "");
  m.network_name = rd.Get<std::string>(network, "name", "network");
  m.network_hash = rd.Hash(network, "hash", "network");
  // Optional: manifests written before it existed load, and their
  // checkpoints bind by network_hash alone.
  if (network.is_object() && network.contains("structure_hash"))
    m.network_structure_hash = rd.Hash(network, "structure_hash", "network");
  m.label_column = rd.Get<std::string>(network, "label_column", "network");

  const Json options = rd.Get<Json>(j, "options", "");
  CompileOptions& o = m.options;
  const Json opt = rd.Get<Json>(options, "optimizer", "options");
  const std::string kind = rd.Get<std::string>(opt, "kind", "options.optimizer");
  if (rd.status.ok()) {
    SINKRT_ASSIGN_OR_RETURN(o.optimizer.kind, ParseOptimizerKind(kind), path + ": options.optimizer.kind");
  }
  o.optimizer.learning_rate = rd.Get<float>(opt, "learning_rate", "options.optimizer");
  if (o.optimizer.kind == OptimizerKind::Momentum) {
    o.optimizer.momentum = rd.Get<float>(opt, "momentum", "options.optimizer");
    o.optimizer.nesterov = rd.Get<bool>(opt, "nesterov", "options.optimizer");
  }
  if (o.optimizer.kind == OptimizerKind::Adam || o.optimizer.kind == OptimizerKind::AdamWeightDecay ||
      o.optimizer.kind == OptimizerKind::Lamb) {
    o.optimizer.beta1 = rd.Get<float>(opt, "beta1", "options.optimizer");
    o.optimizer.beta2 = rd.Get<float>(opt, "beta2", "options.optimizer");
    o.optimizer.epsilon = rd.Get<float>(opt, "epsilon", "options.optimizer");
  }
  o.optimizer.weight_decay = rd.Get<float>(opt, "weight_decay", "options.optimizer");
  if (opt.is_object() && opt.contains("groups")) {
    const Json groups = rd.Get<Json>(opt, "groups", "options.optimizer");
    if (!groups.is_array()) return InvalidArgument(path + ": options.optimizer.groups is not an array");
    for (const Json& g : groups) {
      ParamGroup pg;
      pg.names = rd.Get<std::vector<std::string>>(g, "names", "options.optimizer.groups[]");
      pg.weight_decay = rd.Get<float>(g, "weight_decay", "options.optimizer.groups[]");
      pg.learning_rate = rd.Get<float>(g, "learning_rate", "options.optimizer.groups[]");
      o.optimizer.groups.push_back(std::move(pg));
    }
  }
  if (opt.is_object() && opt.contains("clip_grad_norm"))
    o.optimizer.clip_grad_norm = rd.Get<float>(opt, "clip_grad_norm", "options.optimizer");
  o.queue_capacity = rd.Get<uint32_t>(options, "queue_capacity", "options");
  o.arena_alignment = rd.Get<uint32_t>(options, "arena_alignment", "options");
  o.fuse = rd.Get<bool>(options, "fuse", "options");
  o.eval_program = rd.Get<bool>(options, "eval_program", "options");
  o.predict_program = rd.Get<bool>(options, "predict_program", "options");
  const Json parallel = rd.Get<Json>(options, "parallel", "options");
  const std::string mode = rd.Get<std::string>(parallel, "mode", "options.parallel");
  if (rd.status.ok()) {
    SINKRT_ASSIGN_OR_RETURN(o.parallel_mode, ParseParallelMode(mode), path + ": options.parallel.mode");
  }
  o.world_size = rd.Get<uint32_t>(parallel, "device_num", "options.parallel");
  if (o.parallel_mode == ParallelMode::DataParallel) {
    o.gradients_mean = rd.Get<bool>(parallel, "gradients_mean", "options.parallel");
    o.parameter_broadcast = rd.Get<bool>(parallel, "parameter_broadcast", "options.parallel");
    const Json fusion = rd.Get<Json>(parallel, "comm_fusion", "options.parallel");
    o.comm_fusion.openstate = rd.Get<bool>(fusion, "openstate", "options.parallel.comm_fusion");
    o.comm_fusion.mode = rd.Get<std::string>(fusion, "mode", "options.parallel.comm_fusion");
    if (o.comm_fusion.mode == "size")
      o.comm_fusion.size_mb = rd.Get<double>(fusion, "size_mb", "options.parallel.comm_fusion");
    if (o.comm_fusion.mode == "index")
      o.comm_fusion.indices = rd.Get<std::vector<int>>(fusion, "indices", "options.parallel.comm_fusion");
  }
  if (rd.status.ok() && parallel.is_object() && parallel.contains("pipeline")) {
    const Json pipe = rd.Get<Json>(parallel, "pipeline", "options.parallel");
    o.pipeline.stages = rd.Get<int>(pipe, "stages", "options.parallel.pipeline");
    o.pipeline.micro_size = rd.Get<int>(pipe, "micro_size", "options.parallel.pipeline");
    o.pipeline.scheduler = rd.Get<std::string>(pipe, "scheduler", "options.parallel.pipeline");
    o.pipeline.stage_of =
        rd.Get<std::vector<std::pair<std::string, int>>>(pipe, "stage_of", "options.parallel.pipeline");
  }
  if (rd.status.ok() && parallel.is_object() && parallel.contains("grad_accumulation_step")) {
    o.grad_accumulation = rd.Get<int>(parallel, "grad_accumulation_step", "options.parallel");
    if (rd.status.ok() && (o.grad_accumulation < 1 || o.grad_accumulation > 1024))
      return InvalidArgument(path + ": options.parallel.grad_accumulation_step " + std::to_string(o.grad_accumulation) +
                             " must be in [1, 1024]");
  }
  if (rd.status.ok() && parallel.is_object() && parallel.contains("enable_parallel_optimizer")) {
    o.enable_parallel_optimizer = rd.Get<bool>(parallel, "enable_parallel_optimizer", "options.parallel");
    const Json config = rd.Get<Json>(parallel, "parallel_optimizer_config", "options.parallel");
    if (rd.status.ok()) {
      SINKRT_ASSIGN_OR_RETURN(o.parallel_optimizer_config, ParseParallelOptimizerConfig(config.dump()),
                              path + ": options.parallel.parallel_optimizer_config");
    }
  }
  if (rd.status.ok() && options.is_object() && options.contains("loss_scale_manager")) {
    const Json ls = rd.Get<Json>(options, "loss_scale_manager", "options");
    const std::string kind = rd.Get<std::string>(ls, "kind", "options.loss_scale_manager");
    const float scale = rd.Get<float>(ls, "loss_scale", "options.loss_scale_manager");
    if (rd.status.ok() && kind == "fixed") {
      o.loss_scale =
          LossScaleManager::Fixed(scale, rd.Get<bool>(ls, "drop_overflow_update", "options.loss_scale_manager"));
    } else if (rd.status.ok() && kind == "dynamic") {
      o.loss_scale = LossScaleManager::Dynamic(scale, rd.Get<float>(ls, "scale_factor", "options.loss_scale_manager"),
                                               rd.Get<int>(ls, "scale_window", "options.loss_scale_manager"));
    } else if (rd.status.ok()) {
      return InvalidArgument(path + ": options.loss_scale_manager.kind '" + kind + "' is not fixed or dynamic");
    }
    if (rd.status.ok())
      SINKRT_RETURN_IF_ERROR(ValidateLossScaleManager(o.loss_scale), path + ": options.loss_scale_manager");
  }
  if (rd.status.ok() && options.is_object() && options.contains("amp_level")) {
    const std::string level = rd.Get<std::string>(options, "amp_level", "options");
    if (rd.status.ok()) {
      SINKRT_ASSIGN_OR_RETURN(o.amp_level, ParseAmpLevel(level), path + ": options.amp_level");
    }
  }

  const Json ranks = rd.Get<Json>(j, "ranks", "");
  if (rd.status.ok() && !ranks.is_array()) return InvalidArgument(path + ": \"ranks\" is not a list");
  if (rd.status.ok())
    for (size_t i = 0; i < ranks.size() && rd.status.ok(); ++i) {
      const std::string where = "ranks[" + std::to_string(i) + "]";
      RankEntry e;
      e.rank = rd.Get<uint32_t>(ranks[i], "rank", where);
      e.file = rd.Get<std::string>(ranks[i], "file", where);
      e.bytes = rd.Get<uint64_t>(ranks[i], "bytes", where);
      e.arena_bytes = rd.Get<uint64_t>(ranks[i], "arena_bytes", where);
      e.stream_hash = rd.Hash(ranks[i], "stream_hash", where);
      e.content_hash = rd.Hash(ranks[i], "content_hash", where);
      if (rd.status.ok() && (e.rank != i || e.file != RankFileName(e.rank)))
        return InvalidArgument(path + ": " + where + " is rank " + std::to_string(e.rank) + " in \"" + e.file +
                               "\", expected rank " + std::to_string(i) + " in \"" + RankFileName(i) + "\"");
      m.ranks.push_back(std::move(e));
    }
  if (!rd.status.ok()) return rd.status;
  if (m.ranks.empty()) return InvalidArgument(path + ": \"ranks\" is empty");
  if (m.ranks.size() != o.world_size)
    return InvalidArgument(path + ": " + std::to_string(m.ranks.size()) +
                           " ranks listed, but options.parallel.device_num is " + std::to_string(o.world_size));
  return m;
}

}  // namespace sinkrt::host::job
