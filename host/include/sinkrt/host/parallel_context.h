// ParallelContext: MindSpore's set_auto_parallel_context, as a value.
#pragma once

#include <string>
#include <vector>

#include "sinkrt/runtime/status.h"

namespace sinkrt::host {

enum class ParallelMode { StandAlone, DataParallel, SemiAutoParallel, AutoParallel };

// "stand_alone", "data_parallel", "semi_auto_parallel", "auto_parallel".
const char* ParallelModeName(ParallelMode mode);
Result<ParallelMode> ParseParallelMode(const std::string& name);

// comm_fusion = {"openstate": ..., "allreduce": {"mode": "auto"|"size"|"index", "config": ...}}
// How DATA_PARALLEL groups gradients into fused AllReduces (compiler/fusion_buckets.h;
// mindspore-semantics.md §3). An "MB" is MindSpore's DP unit as coded, 262144 bytes.
struct CommFusion {
  std::string mode = "auto";        // auto: 64 MB buckets
  double size_mb = 64;              // mode "size": N MB buckets (fractions allowed, unlike MindSpore's int)
  std::vector<int> indices;         // mode "index": inclusive 0-based bucket ends, in parameter order
  bool openstate = true;            // false: one AllReduce per gradient
};

// MindSpore's comm_fusion dict as JSON:
//   {"openstate": true, "allreduce": {"mode": "auto" | "size" | "index", "config": 32 | [2, 5]}}
// Every key is optional. Errors name the key; the values are checked by
// ParallelContext::Validate, with MindSpore's messages.
Result<CommFusion> ParseCommFusion(const std::string& json);

struct ParallelContext {
  ParallelMode mode = ParallelMode::StandAlone;
  int device_num = 1;
  int global_rank = 0;
  bool gradients_mean = false;
  bool parameter_broadcast = false;
  bool full_batch = false;
  std::string search_mode = "dynamic_programming";
  CommFusion comm_fusion;

  // MindSpore's checks and messages, e.g. "If parallel_mode is stand_alone,
  // device_number must be 1, device_number: 4, parallel_mode:stand_alone".
  // `supported` lists the modes this build can run; others are refused
  // (kUnimplemented) after the value checks. Model::Create passes the modes
  // the runtime runs; only stand_alone so far.
  Status Validate(const std::vector<ParallelMode>& supported = {ParallelMode::StandAlone}) const;
};

}  // namespace sinkrt::host
