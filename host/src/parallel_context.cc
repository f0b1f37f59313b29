// ParallelContext checks with MindSpore's messages (reference
// mindspore-semantics.md §3.1, §3.5, §4, §5.5, and parallel/_utils.py for
// the stand_alone device count).
#include "sinkrt/host/parallel_context.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "callbacks/py_repr.h"

namespace sinkrt::host {
namespace {

const char* PyBool(bool b) { return b ? "True" : "False"; }

Status CheckCommFusion(const CommFusion& f) {
  if (f.mode != "auto" && f.mode != "size" && f.mode != "index")
    return InvalidArgument("fusion method mode must be auto, index or size, but got " + f.mode);
  if (f.mode == "size" && !(f.size_mb > 0))
    return InvalidArgument("fusion threshold must be larger than 0, but got " + PyFloatRepr(f.size_mb));
  if (f.mode == "index") {
    // _auto_parallel_context.py set_all_reduce_fusion_split_indices, in its
    // order: empty, then duplicates, then sorting. Whether an index is below
    // the gradient count is only known when compiling (fusion_buckets.cc).
    const std::string who = "For 'set_auto_parallel_context().set_all_reduce_fusion_split_indices', ";
    if (f.indices.empty()) return InvalidArgument(who + "the argument 'indices' can not be empty");
    std::vector<int> sorted = f.indices;
    std::sort(sorted.begin(), sorted.end());
    if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
      return InvalidArgument("The indices has duplicate elements");
    if (sorted != f.indices)
      return InvalidArgument(who + "the elements in argument 'indices' must be sorted in ascending order");
    // Then the list goes to C++ as uint32, where pybind11 refuses a negative
    // index with a TypeError of its own; this message is sinkrt's.
    if (f.indices.front() < 0)
      return InvalidArgument(who + "the argument 'indices' must be non-negative, but got " +
                             std::to_string(f.indices.front()) + ".");
  }
  return Status::Ok();
}

}  // namespace

Result<CommFusion> ParseCommFusion(const std::string& json) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json);
  } catch (const nlohmann::json::parse_error& e) {
    return InvalidArgument(std::string("comm_fusion is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) return InvalidArgument("comm_fusion must be a JSON object, got " + j.dump());
  CommFusion f;
  for (const auto& [key, value] : j.items()) {
    if (key == "openstate") {
      if (!value.is_boolean())
        return InvalidArgument("comm_fusion: 'openstate' must be true or false, got " + value.dump());
      f.openstate = value.get<bool>();
    } else if (key == "allreduce") {
      if (!value.is_object())
        return InvalidArgument("comm_fusion: 'allreduce' must be an object {\"mode\", \"config\"}, got " +
                               value.dump());
      for (const auto& [k, v] : value.items()) {
        if (k == "mode") {
          if (!v.is_string()) return InvalidArgument("comm_fusion: 'allreduce.mode' must be a string, got " + v.dump());
          f.mode = v.get<std::string>();
        } else if (k != "config") {
          return InvalidArgument("comm_fusion: 'allreduce' has no key '" + k + "' (it has 'mode' and 'config')");
        }
      }
      if (value.contains("config") && !value["config"].is_null()) {
        const auto& c = value["config"];
        if (f.mode == "size") {
          if (!c.is_number()) return InvalidArgument("comm_fusion: mode 'size' takes a number of MB, got " + c.dump());
          f.size_mb = c.get<double>();
        } else if (f.mode == "index") {
          if (!c.is_array()) return InvalidArgument("comm_fusion: mode 'index' takes a list of indices, got " + c.dump());
          for (const auto& i : c) {
            if (!i.is_number_integer())
              return InvalidArgument("comm_fusion: mode 'index' takes integer indices, got " + i.dump());
            f.indices.push_back(i.get<int>());
          }
        } else if (f.mode == "auto") {
          return InvalidArgument("comm_fusion: mode 'auto' takes no config, got " + c.dump());
        }
      }
    } else {
      return InvalidArgument("comm_fusion has no key '" + key + "' (it has 'openstate' and 'allreduce')");
    }
  }
  return f;
}

const char* ParallelModeName(ParallelMode mode) {
  switch (mode) {
    case ParallelMode::StandAlone: return "stand_alone";
    case ParallelMode::DataParallel: return "data_parallel";
    case ParallelMode::SemiAutoParallel: return "semi_auto_parallel";
    case ParallelMode::AutoParallel: return "auto_parallel";
  }
  return "unknown";
}

Result<ParallelMode> ParseParallelMode(const std::string& name) {
  for (ParallelMode m : {ParallelMode::StandAlone, ParallelMode::DataParallel,
                         ParallelMode::SemiAutoParallel, ParallelMode::AutoParallel})
    if (name == ParallelModeName(m)) return m;
  if (name == "hybrid_parallel")
    return Unimplemented("The parallel_mode 'hybrid_parallel' (manual model parallelism) is not "
                         "supported by sinkrt: use 'semi_auto_parallel' with shard strategies.");
  return InvalidArgument(
      "The context configuration parameter 'parallel_mode' only support 'stand_alone', "
      "'data_parallel', 'hybrid_parallel', 'semi_auto_parallel' and 'auto_parallel', but got the "
      "value : " + name + ".");
}

Status ParallelContext::Validate(const std::vector<ParallelMode>& supported) const {
  if (device_num < 1 || device_num > 4096)
    return InvalidArgument(
        "The context configuration parameter 'device_num' must be in [1, 4096], but got the value "
        "of device_num : " + std::to_string(device_num) + ".");
  if (global_rank < 0 || global_rank > 4095)
    return InvalidArgument(
        "The context configuration parameter 'global_rank' must be in [0, 4095], but got the value "
        "of global_rank : " + std::to_string(global_rank) + ".");
  if (global_rank >= device_num)
    return InvalidArgument("The global_rank " + std::to_string(global_rank) +
                           " must be less than device_num " + std::to_string(device_num) + ".");
  if (search_mode != "recursive_programming" && search_mode != "dynamic_programming" &&
      search_mode != "sharding_propagation")
    return InvalidArgument(
        "The context configuration parameter 'auto_parallel_search_mode' only support "
        "'recursive_programming', 'dynamic_programming' and 'sharding_propagation', but got the "
        "value: " + search_mode + ".");
  SINKRT_RETURN_IF_ERROR(CheckCommFusion(comm_fusion));

  const char* name = ParallelModeName(mode);
  // parallel/_utils.py: _device_number_check, then _parameter_broadcast_check.
  if (mode == ParallelMode::StandAlone && device_num != 1)
    return InvalidArgument("If parallel_mode is stand_alone, device_number must be 1, device_number: " +
                           std::to_string(device_num) + ", parallel_mode:" + name);
  if (parameter_broadcast && mode != ParallelMode::DataParallel)
    return InvalidArgument(
        "stand_alone, semi_auto_parallel and auto_parallel do not support parameter broadcast, "
        "parallel_mode: " + std::string(name) + ", parameter_broadcast:" + PyBool(parameter_broadcast));

  if (std::find(supported.begin(), supported.end(), mode) == supported.end()) {
    std::string list;
    for (size_t i = 0; i < supported.size(); ++i)
      list += (i == 0 ? "'" : i + 1 == supported.size() ? " and '" : ", '") +
              std::string(ParallelModeName(supported[i])) + "'";
    return Unimplemented("The parallel_mode '" + std::string(name) +
                         "' is not supported by this build yet, it only runs " + list +
                         ", but got parallel_mode: " + name + ".");
  }
  return Status::Ok();
}

}  // namespace sinkrt::host
