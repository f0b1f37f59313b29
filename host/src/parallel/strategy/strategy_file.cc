#include "host/src/parallel/strategy/strategy_file.h"

#include <algorithm>
#include <charconv>
#include <optional>

#include <nlohmann/json.hpp>

#include "host/src/parallel/partition/partition_plan.h"
#include "host/src/util/hex.h"
#include "runtime/src/file_io.h"
#include "sinkrt/host/compiler.h"

namespace sinkrt::host::parallel {
namespace {

using Json = nlohmann::ordered_json;

// A JSON string. A name that is not UTF-8 (a graph file does not check)
// gets U+FFFD where it is not, rather than an exception; reading the file
// back then names the op that does not match.
std::string Quote(const std::string& s) {
  return Json(s).dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

// A value from the file as messages show it: JSON, cut at kMaxEcho
// characters (a 10 MB "format" string went to stderr whole).
constexpr size_t kMaxEcho = 80;

std::string Clip(const std::string& text) {
  if (text.size() <= kMaxEcho) return text;
  size_t cut = kMaxEcho;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // not inside a UTF-8 character
  return text.substr(0, cut) + "... (" + std::to_string(text.size()) + " characters)";
}

std::string Echo(const Json& j) { return Clip(j.dump(-1, ' ', false, Json::error_handler_t::replace)); }

// "[2, 1]"
template <typename T>
std::string List(const std::vector<T>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// One line per op and per parameter: the file is meant to be read, diffed
// and edited by people.
std::string Format(const std::vector<std::pair<std::string, std::string>>& header,
                   const std::vector<std::pair<std::string, std::string>>& ops,
                   const std::vector<std::pair<std::string, std::string>>& parameters) {
  std::string out = "{\n";
  for (const auto& [key, value] : header) out += "  " + Quote(key) + ": " + value + ",\n";
  const auto object = [&out](const char* key, const std::vector<std::pair<std::string, std::string>>& entries) {
    out += std::string("  \"") + key + "\": {";
    for (size_t i = 0; i < entries.size(); ++i)
      out += (i ? ",\n    " : "\n    ") + Quote(entries[i].first) + ": " + entries[i].second;
    out += entries.empty() ? "}" : "\n  }";
  };
  object("ops", ops);
  out += ",\n";
  object("parameters", parameters);
  return out + "\n}\n";
}

// {"x": [8, 16], "label": [8]}: the graph's inputs, so that a file used at
// another batch can say so.
std::string InputShapes(const Graph& graph) {
  std::string s = "{";
  for (const TensorInfo& t : graph.tensors())
    if (t.kind == TensorKind::Input) s += (s.size() > 1 ? ", " : "") + Quote(t.name) + ": " + List(t.shape);
  return s + "}";
}

std::optional<uint64_t> ParseHex64(const std::string& s) {
  if (s.size() != 18 || s.compare(0, 2, "0x") != 0) return std::nullopt;
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data() + 2, s.data() + s.size(), v, 16);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

// Typed reads whose errors name the file and the field.
struct Reader {
  std::string path;

  Status Error(const std::string& field, const std::string& message) const {
    return InvalidArgument("strategy file " + path + ": \"" + Clip(field) + "\" " + message);
  }
  Result<const Json*> Field(const Json& j, const char* key) const {
    auto it = j.find(key);
    if (it == j.end()) return InvalidArgument("strategy file " + path + ": \"" + key + "\" is missing");
    return &*it;
  }
  Result<int64_t> Int(const Json& j, const std::string& field) const {
    if (!j.is_number_integer()) return Error(field, "is " + Echo(j) + ", not an integer");
    return j.get<int64_t>();
  }
  Result<std::vector<int64_t>> Ints(const Json& j, const std::string& field) const {
    if (!j.is_array()) return Error(field, "is " + Echo(j) + ", not a list of integers");
    std::vector<int64_t> v;
    for (const Json& e : j) {
      if (!e.is_number_integer()) return Error(field, "is " + Echo(j) + ", not a list of integers");
      v.push_back(e.get<int64_t>());
    }
    return v;
  }
};

Result<TensorLayout> ReadLayout(const Reader& rd, const Json& j, const std::string& field, int64_t device_num) {
  if (!j.is_object()) return rd.Error(field, "is " + Echo(j) + ", not an object with dev_matrix, tensor_map and shape");
  TensorLayout l;
  for (const char* key : {"dev_matrix", "tensor_map", "shape"}) {
    if (!j.contains(key)) return rd.Error(field, std::string("has no \"") + key + "\"");
  }
  SINKRT_ASSIGN_OR_RETURN(l.device_matrix, rd.Ints(j["dev_matrix"], field + ".dev_matrix"));
  SINKRT_ASSIGN_OR_RETURN(std::vector<int64_t> map, rd.Ints(j["tensor_map"], field + ".tensor_map"));
  for (int64_t a : map) {
    if (a < -1 || a > INT32_MAX) return rd.Error(field + ".tensor_map", "has axis " + std::to_string(a));
    l.tensor_map.push_back(static_cast<int>(a));
  }
  SINKRT_ASSIGN_OR_RETURN(l.shape, rd.Ints(j["shape"], field + ".shape"));
  if (Status s = CheckLayout(l); !s.ok()) return rd.Error(field, "is not a layout: " + s.message());
  if (DeviceCount(l.device_matrix) != device_num)
    return rd.Error(field, "has a device matrix of " + std::to_string(DeviceCount(l.device_matrix)) +
                               " ranks, the file's device_num is " + std::to_string(device_num));
  return l;
}

}  // namespace

Status WriteStrategyFile(const std::string& path, const Graph& graph, int64_t device_num,
                         const std::map<std::string, TensorLayout>& layouts) {
  const std::string where = "strategy file " + path;
  SINKRT_RETURN_IF_ERROR(graph.status(), where + ": graph '" + graph.name() + "'");
  if (device_num < 1) return InvalidArgument(where + ": device_num is " + std::to_string(device_num) + ", not >= 1");
  const std::vector<std::pair<std::string, std::string>> header = {
      {"format", Quote(kStrategyFileFormat)},
      {"version", std::to_string(kStrategyFileVersion)},
      {"graph", Quote(graph.name())},
      {"graph_hash", Quote(Hex64(GraphHashWithoutStrategies(graph)))},
      {"inputs", InputShapes(graph)},
      {"device_num", std::to_string(device_num)},
      {"stage", "0"}};

  std::vector<std::pair<std::string, std::string>> ops;
  for (const OpNode& op : graph.ops()) {
    if (op.strategy.empty()) continue;
    std::string s = "[";
    for (size_t i = 0; i < op.strategy.size(); ++i) s += (i ? ", " : "") + List(op.strategy[i]);
    ops.emplace_back(op.name, s + "]");
  }

  // Parameters in graph order; every layout must be one of them.
  std::vector<std::pair<std::string, std::string>> parameters;
  for (const TensorInfo& t : graph.tensors()) {
    auto it = layouts.find(t.name);
    if (it == layouts.end()) continue;
    const TensorLayout& l = it->second;
    const std::string param = where + ": parameter '" + t.name + "'";
    if (t.kind != TensorKind::Param) return InvalidArgument(param + " is not a Param of graph '" + graph.name() + "'");
    SINKRT_RETURN_IF_ERROR(CheckLayout(l), param);
    if (l.shape != t.shape)
      return InvalidArgument(param + ": the layout's shape " + ShapeToString(l.shape) + " is not the parameter's " +
                             ShapeToString(t.shape));
    if (!l.partial.empty())
      return InvalidArgument(param + ": a parameter's layout cannot hold a pending sum (" + LayoutToString(l) + ")");
    if (DeviceCount(l.device_matrix) != device_num)
      return InvalidArgument(param + ": the device matrix has " + std::to_string(DeviceCount(l.device_matrix)) +
                             " ranks, not device_num " + std::to_string(device_num));
    parameters.emplace_back(t.name, "{\"dev_matrix\": " + List(l.device_matrix) + ", \"tensor_map\": " +
                                        List(l.tensor_map) + ", \"shape\": " + List(l.shape) + "}");
  }
  if (parameters.size() != layouts.size()) {
    for (const auto& [name, l] : layouts)
      if (graph.FindTensor(name) == kInvalidTensor)
        return InvalidArgument(where + ": parameter '" + name + "' is not a tensor of graph '" + graph.name() + "'");
  }
  const std::string text = Format(header, ops, parameters);
  return WriteFileBytes(path, {reinterpret_cast<const uint8_t*>(text.data()), text.size()});
}

Result<StrategyFileContents> ReadStrategyFile(const std::string& path) {
  Result<std::vector<uint8_t>> bytes = ReadFileBytes(path, {kJsonFileLimit.max_bytes, "a strategy file"});
  if (!bytes.ok()) return Status(bytes.status().code(), "strategy file: " + bytes.status().message());
  Json j;
  try {
    j = Json::parse(bytes->begin(), bytes->end());
  } catch (const std::exception& e) {
    return InvalidArgument("strategy file " + path + ": not JSON (" + e.what() + ")");
  }
  if (!j.is_object()) return InvalidArgument("strategy file " + path + ": not a JSON object");
  const Reader rd{Clip(path)};
  StrategyFileContents c;
  c.source = path;

  SINKRT_ASSIGN_OR_RETURN(const Json* format, rd.Field(j, "format"));
  if (!format->is_string() || format->get<std::string>() != kStrategyFileFormat)
    return rd.Error("format", "is " + Echo(*format) + ", this build reads \"" + kStrategyFileFormat + "\"");
  SINKRT_ASSIGN_OR_RETURN(const Json* version, rd.Field(j, "version"));
  const std::string version_text = std::to_string(kStrategyFileVersion);
  // "1" is the right version in the wrong type: saying "this build reads
  // version 1" of it read as nonsense.
  if (version->is_string())
    return rd.Error("version",
                    "is " + Echo(*version) + ", a string: the version is a number (\"version\": " + version_text + ")");
  if (!version->is_number_integer())
    return rd.Error("version",
                    "is " + Echo(*version) + ", not an integer (this build reads version " + version_text + ")");
  if (version->get<int64_t>() != kStrategyFileVersion)
    return rd.Error("version", "is " + Echo(*version) + ", this build reads version " + version_text);
  SINKRT_ASSIGN_OR_RETURN(const Json* graph, rd.Field(j, "graph"));
  if (!graph->is_string()) return rd.Error("graph", "is " + Echo(*graph) + ", not a string");
  c.graph_name = graph->get<std::string>();
  SINKRT_ASSIGN_OR_RETURN(const Json* hash, rd.Field(j, "graph_hash"));
  const std::optional<uint64_t> h = hash->is_string() ? ParseHex64(hash->get<std::string>()) : std::nullopt;
  if (!h) return rd.Error("graph_hash", "is " + Echo(*hash) + ", not \"0x\" and 16 hex digits");
  c.graph_hash = *h;
  // Optional (files written before it lack it): what tells a file written
  // at another batch from one for another graph.
  if (auto in = j.find("inputs"); in != j.end()) {
    if (!in->is_object()) return rd.Error("inputs", "is " + Echo(*in) + ", not an object (input name -> shape)");
    for (auto it = in->begin(); it != in->end(); ++it) {
      SINKRT_ASSIGN_OR_RETURN(std::vector<int64_t> shape, rd.Ints(it.value(), "inputs." + it.key()));
      c.inputs.emplace_back(it.key(), std::move(shape));
    }
  }
  SINKRT_ASSIGN_OR_RETURN(const Json* device_num, rd.Field(j, "device_num"));
  SINKRT_ASSIGN_OR_RETURN(c.device_num, rd.Int(*device_num, "device_num"));
  if (c.device_num < 1) return rd.Error("device_num", "is " + std::to_string(c.device_num) + ", not >= 1");
  SINKRT_ASSIGN_OR_RETURN(const Json* stage, rd.Field(j, "stage"));
  SINKRT_ASSIGN_OR_RETURN(c.stage, rd.Int(*stage, "stage"));
  if (c.stage < 0) return rd.Error("stage", "is " + std::to_string(c.stage) + ", not >= 0");

  SINKRT_ASSIGN_OR_RETURN(const Json* ops, rd.Field(j, "ops"));
  if (!ops->is_object()) return rd.Error("ops", "is not an object (op name -> strategy)");
  for (auto it = ops->begin(); it != ops->end(); ++it) {
    const std::string field = "ops." + it.key();
    if (!it.value().is_array()) return rd.Error(field, "is " + Echo(it.value()) + ", not a list of lists of integers");
    Strategy s;
    for (const Json& entry : it.value()) {
      Result<std::vector<int64_t>> dims = rd.Ints(entry, field);
      if (!dims.ok()) return rd.Error(field, "is " + Echo(it.value()) + ", not a list of lists of integers");
      s.push_back(std::move(dims).value());
    }
    c.ops.emplace_back(it.key(), std::move(s));
  }

  SINKRT_ASSIGN_OR_RETURN(const Json* parameters, rd.Field(j, "parameters"));
  if (!parameters->is_object()) return rd.Error("parameters", "is not an object (parameter name -> layout)");
  for (auto it = parameters->begin(); it != parameters->end(); ++it) {
    SINKRT_ASSIGN_OR_RETURN(TensorLayout l, ReadLayout(rd, it.value(), "parameters." + it.key(), c.device_num));
    c.parameters.emplace_back(it.key(), std::move(l));
  }
  return c;
}

namespace {

// What makes the graph hash differ from the file's, when the file
// recorded its inputs: a shape (the batch, when only the first dimension
// differs) or, the inputs being equal, the ops or initialisers.
std::string WhatDiffers(const StrategyFileContents& c, const Graph& graph) {
  if (c.inputs.empty()) return "";
  for (const auto& [name, shape] : c.inputs) {
    const TensorId t = graph.FindTensor(name);
    if (t == kInvalidTensor || graph.tensor(t).kind != TensorKind::Input)
      return ": the file's input " + Clip(name) + " is not an input of this graph";
    const Shape& here = graph.tensor(t).shape;
    if (here == shape) continue;
    std::string why =
        ": input " + Clip(name) + " is " + ShapeToString(here) + " here, " + ShapeToString(shape) + " in the file";
    const bool only_batch =
        here.size() == shape.size() && !here.empty() && std::equal(here.begin() + 1, here.end(), shape.begin() + 1);
    if (only_batch)
      why += " (batch " + std::to_string(here[0]) + ", the file's " + std::to_string(shape[0]) +
             "): write the file again at this batch, or compile at the file's";
    return why;
  }
  if (graph.name() != c.graph_name)
    return ": the names differ (a graph's name is part of its hash), and the ops, their shapes or the initialisers "
           "may too";
  return ": the inputs are the same, so the ops, their shapes or the initialisers differ";
}

// Each rank holds the same piece under both layouts.
bool SameSlices(const TensorLayout& a, const TensorLayout& b, int64_t device_num) {
  if (SliceShape(a) != SliceShape(b)) return false;
  for (int64_t r = 0; r < device_num; ++r)
    if (SliceOffset(a, r) != SliceOffset(b, r)) return false;
  return true;
}

// The file's parameter layouts must be the ones its op strategies give
// (they are written from them): a file edited in one place and not the
// other is refused rather than half applied.
Status CheckParameterLayouts(const StrategyFileContents& c, const Graph& sharded, const std::string& file) {
  if (c.parameters.empty()) return Status::Ok();
  std::vector<Strategy> strategies;
  for (const OpNode& op : sharded.ops()) strategies.push_back(op.strategy);
  Result<PartitionPlan> plan =
      PlanPartition(sharded, strategies,
                    {.device_num = c.device_num, .full_batch = false, .dataset_strategy = {}, .activation_inputs = {}});
  if (!plan.ok()) return Status::Ok();  // the compile names what does not partition
  for (const auto& [name, layout] : c.parameters) {
    const TensorId t = sharded.FindTensor(name);
    if (plan->layout_owner[t] < 0) continue;  // no op of the file fixes it
    const TensorLayout& implied = plan->layouts[t];
    if (!SameSlices(layout, implied, c.device_num))
      return InvalidArgument(file + " gives parameter " + Clip(name) + " the layout " + LayoutToString(layout) +
                             ", but its op strategies give it " + LayoutToString(implied) +
                             ": the two disagree (write the file again, or edit both)");
  }
  return Status::Ok();
}

}  // namespace

Status ApplyStrategies(const StrategyFileContents& c, Graph& graph) {
  const std::string file = "strategy file " + Clip(c.source);
  SINKRT_RETURN_IF_ERROR(graph.status(), file + ": graph '" + graph.name() + "'");
  // Names first: a file for another graph is refused naming the first op
  // that does not match, which says more than two hashes.
  for (const auto& [name, strategy] : c.ops)
    if (graph.FindOp(name) < 0)
      return InvalidArgument(file + " names op " + Clip(name) + ", which graph " + graph.name() + " does not have");
  for (const auto& [name, layout] : c.parameters) {
    const TensorId t = graph.FindTensor(name);
    if (t == kInvalidTensor || graph.tensor(t).kind != TensorKind::Param)
      return InvalidArgument(file + " names parameter " + Clip(name) + ", which graph " + graph.name() +
                             " does not have");
    if (graph.tensor(t).shape != layout.shape)
      return InvalidArgument(file + " gives parameter " + Clip(name) + " the shape " + ShapeToString(layout.shape) +
                             "; in graph " + graph.name() + " it is " + ShapeToString(graph.tensor(t).shape));
  }
  const uint64_t hash = GraphHashWithoutStrategies(graph);
  if (hash == c.graph_hash && graph.name() != c.graph_name)
    return InvalidArgument(file + " was written for graph " + Clip(c.graph_name) + "; this graph is " + graph.name() +
                           ", the same otherwise (both hash " + Hex64(hash) + ")");
  if (hash != c.graph_hash)
    return InvalidArgument(file + " was written for graph " + Clip(c.graph_name) + " with hash " + Hex64(c.graph_hash) +
                           "; this graph" + (graph.name() == c.graph_name ? "" : ", " + graph.name() + ",") +
                           " hashes " + Hex64(hash) + WhatDiffers(c, graph));
  for (const auto& [name, strategy] : c.ops)
    SINKRT_RETURN_IF_ERROR(CheckStrategyShape(graph, graph.ops()[graph.FindOp(name)], strategy), file);
  // On a copy, so that a refused file leaves `graph` unchanged.
  Graph sharded = graph;
  for (const auto& [name, strategy] : c.ops) sharded.Shard(name, strategy);
  SINKRT_RETURN_IF_ERROR(sharded.status());
  SINKRT_RETURN_IF_ERROR(CheckParameterLayouts(c, sharded, file));
  graph = std::move(sharded);
  return graph.status();
}

}  // namespace sinkrt::host::parallel
