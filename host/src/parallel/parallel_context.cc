// ParallelContext checks with MindSpore's messages (reference
// mindspore-semantics.md §3.1, §3.5, §4, §5.5, and parallel/_utils.py for
// the stand_alone device count).
#include "sinkrt/host/parallel_context.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "host/src/util/py_repr.h"

namespace sinkrt::host {
namespace {

const char* PyBool(bool b) { return b ? "True" : "False"; }

using Json = nlohmann::ordered_json;  // keys in the order written, as a Python dict keeps them

// The Python type of what json.loads gives for `v`.
std::string PyTypeName(const Json& v) {
  return v.is_boolean()          ? "bool"
         : v.is_number_integer() ? "int"
         : v.is_number()         ? "float"
         : v.is_string()         ? "str"
         : v.is_array()          ? "list"
         : v.is_object()         ? "dict"
                                 : "NoneType";
}

// type(value) as Python prints it: "<class 'int'>".
std::string PyType(const Json& v) { return "<class '" + PyTypeName(v) + "'>"; }

// str(value) in Python (repr inside containers), for "but got {}".
std::string PyStr(const Json& v, bool nested = false) {
  if (v.is_string()) return nested ? "'" + v.get<std::string>() + "'" : v.get<std::string>();
  if (v.is_boolean()) return PyBool(v.get<bool>());
  if (v.is_null()) return "None";
  if (v.is_number_float()) return PyFloatRepr(v.get<double>());
  if (v.is_number()) return v.dump();
  std::string out;
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (!out.empty()) out += ", ";
    if (v.is_object()) out += "'" + it.key() + "': ";
    out += PyStr(*it, /*nested=*/true);
  }
  return v.is_array() ? "[" + out + "]" : "{" + out + "}";
}

// set_fusion_threshold_mb: `threshold < 0` in Python, so 0 passes (the
// backend then fuses nothing) and a non-number is Python's own TypeError.
Result<double> FusionThresholdMb(const Json& config) {
  // Python compares a bool as an int, then pybind11 takes it as 0 or 1:
  // refused here as the mistake it is.
  if (config.is_boolean())
    return InvalidArgument("comm_fusion: mode 'size' takes a number of MB, got " + PyStr(config));
  if (!config.is_number())
    return InvalidArgument("'<' not supported between instances of '" + PyTypeName(config) + "' and 'int'");
  const double mb = config.get<double>();
  if (mb < 0) return InvalidArgument("fusion threshold must be larger than 0, but got " + PyStr(config));
  return mb;
}

// set_all_reduce_fusion_split_indices after its type checks, in its order:
// duplicates, then sorting. Whether an index is below the gradient count is
// only known when compiling (fusion_buckets.cc).
Status CheckIndices(const std::vector<int>& indices) {
  const std::string who = "For 'set_auto_parallel_context().set_all_reduce_fusion_split_indices', ";
  if (indices.empty()) return InvalidArgument(who + "the argument 'indices' can not be empty");
  std::vector<int> sorted = indices;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
    return InvalidArgument("The indices has duplicate elements");
  if (sorted != indices)
    return InvalidArgument(who + "the elements in argument 'indices' must be sorted in ascending order");
  // Then the list goes to C++ as uint32, where pybind11 refuses a negative
  // index with a TypeError of its own; this message is sinkrt's.
  if (indices.front() < 0)
    return InvalidArgument(who + "the argument 'indices' must be non-negative, but got " +
                           std::to_string(indices.front()) + ".");
  return Status::Ok();
}

// The {"mode", "config"} entry both _set_allreduce_comm_fusion and
// _set_allgather_comm_fusion begin with; `type_error` is the dict check's
// message, which differs between the two.
Status CheckEntry(const Json& entry, const std::string& type_error, const char* key) {
  if (!entry.is_object()) return InvalidArgument(type_error + PyType(entry) + ".");
  if (!entry.contains("mode")) return InvalidArgument("For 'comm_fusion', the key 'mode' should be contained.");
  if (!entry.contains("config")) return InvalidArgument("For 'comm_fusion', the key 'config' should be contained.");
  for (auto it = entry.begin(); it != entry.end(); ++it)
    if (it.key() != "mode" && it.key() != "config")
      return InvalidArgument("comm_fusion: '" + std::string(key) + "' has no key '" + it.key() +
                             "' (it has 'mode' and 'config')");
  return Status::Ok();
}

// _set_allreduce_comm_fusion then set_all_reduce_fusion_split_indices.
Status ParseAllReduce(const Json& entry, CommFusion* f) {
  SINKRT_RETURN_IF_ERROR(
      CheckEntry(entry, "For 'comm_fusion', the 'allreduce' config must be dict, but got the type : ", "allreduce"));
  const Json& mode = entry["mode"];
  const Json& config = entry["config"];
  if (mode != "auto" && mode != "size" && mode != "index")
    return InvalidArgument("fusion method mode must be auto, index or size, but got " + PyStr(mode));
  f->mode = mode.get<std::string>();
  f->indices.clear();
  if (f->mode == "auto") {
    f->size_mb = 64;
  } else if (f->mode == "size") {
    SINKRT_ASSIGN_OR_RETURN(f->size_mb, FusionThresholdMb(config));
  } else {
    const std::string who = "For 'set_auto_parallel_context().set_all_reduce_fusion_split_indices', ";
    // Python's `if not indices`: None, [], 0, "" and False are all "empty".
    const bool empty = config.is_null() || (config.is_array() && config.empty()) ||
                       (config.is_string() && config.get<std::string>().empty()) ||
                       (config.is_boolean() && !config.get<bool>()) ||
                       (config.is_number() && config.get<double>() == 0);
    if (empty) return InvalidArgument(who + "the argument 'indices' can not be empty");
    if (!config.is_array())
      return InvalidArgument(who + "the argument 'indices' must be list, but got the type : " + PyType(config) + " .");
    for (const Json& i : config) {
      if (!i.is_number_integer())
        return InvalidArgument(who + "the argument 'index' must be int, but got the type : " + PyType(i) + " .");
      if (i.get<int64_t>() < INT32_MIN || i.get<int64_t>() > INT32_MAX)
        return InvalidArgument(who + "the argument 'index' " + i.dump() + " is out of range");
      f->indices.push_back(i.get<int>());
    }
    SINKRT_RETURN_IF_ERROR(CheckIndices(f->indices));
  }
  return Status::Ok();
}

// _set_allgather_comm_fusion, for "allgather" and "reducescatter".
Status ParseGatherScatter(const Json& entry, const std::string& key, FusionThreshold* t) {
  SINKRT_RETURN_IF_ERROR(
      CheckEntry(entry, "For 'comm_fusion', " + key + " config must be dict, but got the type : ", key.c_str()));
  const Json& mode = entry["mode"];
  if (mode != "auto" && mode != "size")
    return InvalidArgument("fusion method mode must be auto or size, but got " + PyStr(mode));
  t->mode = mode.get<std::string>();
  t->size_mb = 64;
  if (t->mode == "size") {
    SINKRT_ASSIGN_OR_RETURN(t->size_mb, FusionThresholdMb(entry["config"]));
  }
  return Status::Ok();
}

Status CheckCommFusion(const CommFusion& f) {
  if (f.mode != "auto" && f.mode != "size" && f.mode != "index")
    return InvalidArgument("fusion method mode must be auto, index or size, but got " + f.mode);
  if (f.mode == "size" && !(f.size_mb >= 0))
    return InvalidArgument("fusion threshold must be larger than 0, but got " + PyFloatRepr(f.size_mb));
  for (const FusionThreshold* t : {&f.allgather, &f.reducescatter}) {
    if (t->mode != "auto" && t->mode != "size")
      return InvalidArgument("fusion method mode must be auto or size, but got " + t->mode);
    if (!(t->size_mb >= 0))
      return InvalidArgument("fusion threshold must be larger than 0, but got " + PyFloatRepr(t->size_mb));
  }
  if (f.mode == "index") SINKRT_RETURN_IF_ERROR(CheckIndices(f.indices));
  return Status::Ok();
}

// enable_parallel_optimizer and its config: MindSpore's values, then what
// this build runs (level1 over the whole data-parallel group, under
// data_parallel and semi_auto_parallel; stand_alone is refused, as
// MindSpore's Optimizer refuses it).
Status ValidateParallelOptimizer(const ParallelContext& c) {
  const ParallelOptimizerConfig& o = c.parallel_optimizer_config;
  if (o.threshold_kb < 0)
    return InvalidArgument(
        "For 'parallel_optimizer_config', the 'parallel_optimizer_threshold' must be int and must "
        ">= 0, but got '" +
        std::to_string(o.threshold_kb) + "'.");
  if (o.optimizer_level != "level1" && o.optimizer_level != "level2" && o.optimizer_level != "level3")
    return InvalidArgument(
        "For 'parallel_optimizer_config', the 'optimizer_level' must be 'level1', 'level2' or "
        "'level3', but got '" +
        o.optimizer_level + "'.");
  if (o.optimizer_weight_shard_size != -1 && o.optimizer_weight_shard_size <= 1)
    return InvalidArgument(
        "The setting 'optimizer_weight_shard_size' is invalid: use -1 (the whole data-parallel "
        "group) or an integer larger than 1, but got " +
        std::to_string(o.optimizer_weight_shard_size) + ".");
  if (!c.enable_parallel_optimizer) return Status::Ok();
  // MindSpore's Optimizer raises this (optimizer.py, _use_parallel_optimizer);
  // sinkrt ignored the flag without a word.
  if (c.mode == ParallelMode::StandAlone)
    return InvalidArgument(
        "For 'Optimizer', parallel optimizer is not supported in stand_alone, you should set "
        "parallel mode to 'data_parallel', 'semi_auto_parallel' or 'auto_parallel'.");
  const std::string name = ParallelModeName(c.mode);
  if (c.pipeline_stages > 1)
    return Unimplemented("enable_parallel_optimizer with pipeline_stages " + std::to_string(c.pipeline_stages) +
                         " is not supported by this build yet.");
  // gradient_accumulation_shard only means something with accumulation
  // (MindSpore: "effective only when the model runs on pipeline training
  // or gradient accumulation").
  if (c.grad_accumulation_step > 1)
    return Unimplemented("enable_parallel_optimizer with grad_accumulation_step " +
                         std::to_string(c.grad_accumulation_step) + " is not supported by this build yet.");
  if (o.optimizer_level != "level1")
    return Unimplemented("parallel_optimizer_config's optimizer_level '" + o.optimizer_level +
                         "' is not supported by this build yet: it runs 'level1' (the optimizer state and the "
                         "update sharded; gradients and weights whole).");
  if (o.optimizer_weight_shard_size != -1 && o.optimizer_weight_shard_size != c.device_num)
    return Unimplemented("optimizer_weight_shard_size " + std::to_string(o.optimizer_weight_shard_size) +
                         " is not supported by this build yet: each parameter's update is shared by the whole "
                         "data-parallel group (-1, or device_num " +
                         std::to_string(c.device_num) + ").");
  return Status::Ok();
}

}  // namespace

Result<CommFusion> ParseCommFusion(const std::string& json) {
  Json j;
  try {
    j = Json::parse(json);
  } catch (const Json::parse_error& e) {
    return InvalidArgument(std::string("comm_fusion is not valid JSON: ") + e.what());
  }
  // set_auto_parallel_context's args_type_check.
  if (!j.is_object())
    return InvalidArgument("The parameter 'comm_fusion' must be <class 'dict'>, but got " + PyType(j));
  // set_comm_fusion: each key in turn, as it comes.
  CommFusion f;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& key = it.key();
    const Json& value = it.value();
    if (key == "openstate") {
      if (!value.is_boolean())
        return InvalidArgument("For 'comm_fusion', the 'openstate' must be bool, but got the type : " + PyType(value) +
                               ".");
      // MindSpore turns the three fusions off; later entries then return
      // before any check. True leaves them as they are.
      if (!value.get<bool>()) f.openstate = false;
    } else if (key == "allreduce" || key == "allgather" || key == "reducescatter") {
      if (!f.openstate) continue;
      if (key == "allreduce")
        SINKRT_RETURN_IF_ERROR(ParseAllReduce(value, &f));
      else
        SINKRT_RETURN_IF_ERROR(ParseGatherScatter(value, key, key == "allgather" ? &f.allgather : &f.reducescatter));
    } else {
      return InvalidArgument("comm fusion type must be openstate,allreduce, allgather or reducescatter, but got " +
                             key);
    }
  }
  return f;
}

Result<ParallelOptimizerConfig> ParseParallelOptimizerConfig(const std::string& json) {
  Json j;
  try {
    j = Json::parse(json);
  } catch (const Json::parse_error& e) {
    return InvalidArgument(std::string("parallel_optimizer_config is not valid JSON: ") + e.what());
  }
  if (!j.is_object())
    return InvalidArgument("The parameter 'parallel_optimizer_config' must be <class 'dict'>, but got " + PyType(j));
  ParallelOptimizerConfig c;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& key = it.key();
    const Json& v = it.value();
    if (key == "parallel_optimizer_threshold") {
      if (!v.is_number_integer() || v.get<int64_t>() < 0)
        return InvalidArgument(
            "For 'parallel_optimizer_config', the 'parallel_optimizer_threshold' must be int and "
            "must >= 0, but got '" +
            v.dump() + "' with type '" + PyTypeName(v) + "'.");
      c.threshold_kb = v.get<int64_t>();
    } else if (key == "gradient_accumulation_shard") {
      if (!v.is_boolean())
        return InvalidArgument(
            "For 'parallel_optimizer_config', the 'gradient_accumulation_shard' must be bool, "
            "but got the type : " +
            PyType(v) + ".");
      c.gradient_accumulation_shard = v.get<bool>();
    } else if (key == "optimizer_weight_shard_size") {
      if (!v.is_number_integer())
        return InvalidArgument("The type of optimizer_weight_shard_size must be int, but got " + PyType(v) + ".");
      c.optimizer_weight_shard_size = v.get<int64_t>();
    } else if (key == "optimizer_level") {
      if (!v.is_string())
        return InvalidArgument(
            "For 'parallel_optimizer_config', the 'optimizer_level' must be str, but got the "
            "type : " +
            PyType(v) + ".");
      c.optimizer_level = v.get<std::string>();
    } else {
      return InvalidArgument("Unknown config: ['" + key + "']");
    }
  }
  return c;
}

const char* ParallelModeName(ParallelMode mode) {
  switch (mode) {
    case ParallelMode::StandAlone:
      return "stand_alone";
    case ParallelMode::DataParallel:
      return "data_parallel";
    case ParallelMode::SemiAutoParallel:
      return "semi_auto_parallel";
    case ParallelMode::AutoParallel:
      return "auto_parallel";
  }
  return "unknown";
}

Result<ParallelMode> ParseParallelMode(const std::string& name) {
  constexpr ParallelMode kModes[] = {ParallelMode::StandAlone, ParallelMode::DataParallel,
                                     ParallelMode::SemiAutoParallel, ParallelMode::AutoParallel};
  for (ParallelMode m : kModes)
    if (name == ParallelModeName(m)) return m;
  if (name == "hybrid_parallel") {
    // The list comes from the modes that parse, so it cannot go stale
    // again (it said "stand_alone and data_parallel" long after
    // semi_auto_parallel and auto_parallel ran).
    std::string runs;
    for (size_t i = 0; i < std::size(kModes); ++i)
      runs += std::string(i == 0                       ? ""
                          : i + 1 == std::size(kModes) ? " and "
                                                       : ", ") +
              "'" + ParallelModeName(kModes[i]) + "'";
    return Unimplemented(
        "The parallel_mode 'hybrid_parallel' (manual model parallelism) is not supported by sinkrt, "
        "which runs " +
        runs + ": shard strategies (semi_auto_parallel) express the same layouts.");
  }
  return InvalidArgument(
      "The context configuration parameter 'parallel_mode' only support 'stand_alone', "
      "'data_parallel', 'hybrid_parallel', 'semi_auto_parallel' and 'auto_parallel', but got the "
      "value : " +
      name + ".");
}

Status ParallelContext::Validate(const std::vector<ParallelMode>& supported) const {
  if (device_num < 1 || device_num > 4096)
    return InvalidArgument(
        "The context configuration parameter 'device_num' must be in [1, 4096], but got the value "
        "of device_num : " +
        std::to_string(device_num) + ".");
  if (global_rank < 0 || global_rank > 4095)
    return InvalidArgument(
        "The context configuration parameter 'global_rank' must be in [0, 4095], but got the value "
        "of global_rank : " +
        std::to_string(global_rank) + ".");
  if (global_rank >= device_num)
    return InvalidArgument("The global_rank " + std::to_string(global_rank) + " must be less than device_num " +
                           std::to_string(device_num) + ".");
  if (search_mode != "recursive_programming" && search_mode != "dynamic_programming" &&
      search_mode != "sharding_propagation")
    return InvalidArgument(
        "The context configuration parameter 'auto_parallel_search_mode' only support "
        "'recursive_programming', 'dynamic_programming' and 'sharding_propagation', but got the "
        "value: " +
        search_mode + ".");
  if (device_memory_capacity && *device_memory_capacity == 0)
    return InvalidArgument(
        "The context configuration parameter 'device_memory_capacity' must be larger than 0, "
        "but got the value: 0.");
  SINKRT_RETURN_IF_ERROR(CheckCommFusion(comm_fusion));
  if (pipeline_stages < 1)
    return InvalidArgument(
        "The context configuration parameter 'pipeline_stages' must be a positive int, but got "
        "the value of pipeline_stages : " +
        std::to_string(pipeline_stages) + ".");
  if (pipeline_scheduler != "1f1b" && pipeline_scheduler != "gpipe")
    return InvalidArgument(
        "For 'pipeline_config', the pipeline_scheduler only support '1f1b' and 'gpipe', but got "
        "'" +
        pipeline_scheduler + "'.");

  const char* name = ParallelModeName(mode);
  // parallel/_utils.py: _device_number_check, then _parameter_broadcast_check.
  if (mode == ParallelMode::StandAlone && device_num != 1)
    return InvalidArgument("If parallel_mode is stand_alone, device_number must be 1, device_number: " +
                           std::to_string(device_num) + ", parallel_mode:" + name);
  if (parameter_broadcast && mode != ParallelMode::DataParallel)
    return InvalidArgument(
        "stand_alone, semi_auto_parallel and auto_parallel do not support parameter broadcast, "
        "parallel_mode: " +
        std::string(name) + ", parameter_broadcast:" + PyBool(parameter_broadcast));

  if (std::find(supported.begin(), supported.end(), mode) == supported.end()) {
    std::string list;
    for (size_t i = 0; i < supported.size(); ++i)
      list += (i == 0                      ? "'"
               : i + 1 == supported.size() ? " and '"
                                           : ", '") +
              std::string(ParallelModeName(supported[i])) + "'";
    return Unimplemented("The parallel_mode '" + std::string(name) +
                         "' is not supported by this build yet, it only runs " + list +
                         ", but got parallel_mode: " + name + ".");
  }
  // Under data_parallel MindSpore's full_batch has every rank load the whole
  // batch (the same data on every rank); sinkrt always shards it, so taking
  // the flag would train something else than asked.
  if (!dataset_strategy.empty()) {
    if (mode != ParallelMode::SemiAutoParallel && mode != ParallelMode::AutoParallel)
      return InvalidArgument(
          "dataset_strategy as a tuple of strategies is only supported in semi_auto_parallel "
          "and auto_parallel, but got parallel_mode: " +
          std::string(name) + ".");
    if (full_batch)
      return InvalidArgument(
          "dataset_strategy and full_batch cannot both be set: full_batch is dataset_strategy "
          "'full_batch', every rank reading the whole batch.");
    for (size_t i = 0; i < dataset_strategy.size(); ++i)
      for (int64_t v : dataset_strategy[i])
        if (v < 1)
          return InvalidArgument("dataset_strategy[" + std::to_string(i) +
                                 "]: the value of strategy must be larger than 0, but get " + std::to_string(v));
  }
  if (full_batch && mode == ParallelMode::DataParallel)
    return Unimplemented(
        "full_batch=True (dataset_strategy 'full_batch') is not supported with data_parallel: every rank reads "
        "its own shard of the batch. It will be supported with semi_auto_parallel; set full_batch=False.");
  if (grad_accumulation_step < 1 || grad_accumulation_step > 1024)
    return InvalidArgument(
        "The context configuration parameter 'grad_accumulation_step' must be in [1, 1024], but "
        "got " +
        std::to_string(grad_accumulation_step) + ".");
  if (grad_accumulation_step > 1) {
    if (pipeline_stages > 1)
      return Unimplemented("grad_accumulation_step " + std::to_string(grad_accumulation_step) +
                           " with pipeline_stages " + std::to_string(pipeline_stages) +
                           " is not supported: the pipeline's micro_size already accumulates gradients.");
    if (mode == ParallelMode::SemiAutoParallel || mode == ParallelMode::AutoParallel)
      return Unimplemented("grad_accumulation_step " + std::to_string(grad_accumulation_step) + " with parallel_mode " +
                           name + " is not supported by this build yet: it runs under stand_alone and data_parallel.");
  }
  SINKRT_RETURN_IF_ERROR(ValidateParallelOptimizer(*this));
  if (pipeline_stages > 1) {
    if (mode == ParallelMode::StandAlone)
      return InvalidArgument("pipeline_stages " + std::to_string(pipeline_stages) +
                             " needs several devices: set parallel_mode data_parallel with device_num a multiple of "
                             "pipeline_stages, but got parallel_mode: stand_alone.");
    if (mode == ParallelMode::AutoParallel)
      return Unimplemented("pipeline_stages " + std::to_string(pipeline_stages) + " with parallel_mode " + name +
                           " is not supported by this build yet: the stages run under data_parallel or "
                           "semi_auto_parallel (give the ops' strategies for device_num / pipeline_stages devices).");
    if (mode == ParallelMode::SemiAutoParallel && !dataset_strategy.empty())
      return Unimplemented("pipeline_stages " + std::to_string(pipeline_stages) +
                           " with a dataset_strategy tuple is not supported by this build yet: every rank of a "
                           "stage reads the whole batch, as with full_batch.");
    if (device_num % pipeline_stages != 0)
      return InvalidArgument("device_num " + std::to_string(device_num) + " is not divisible by pipeline_stages " +
                             std::to_string(pipeline_stages) +
                             ": every stage needs device_num / pipeline_stages "
                             "devices.");
  }
  return Status::Ok();
}

Status CheckModelGlobalRank(const ParallelContext& context) {
  if (context.global_rank == 0) return Status::Ok();
  return InvalidArgument("global_rank " + std::to_string(context.global_rank) +
                         ": a sinkrt Model drives every rank from one host (devices[r] is rank r), so it has no "
                         "global_rank of its own; leave global_rank 0");
}

}  // namespace sinkrt::host
