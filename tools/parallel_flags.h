// The parallel flags sinkrun train and sinkc share, turned into MindSpore's
// parallel context with its checks and messages.
#pragma once

#include <string>

#include "sinkrt/host/parallel_context.h"
#include "sinkrt/runtime/status.h"

namespace sinkrt::tools {

struct ParallelFlags {
  std::string parallel;        // --parallel
  int devices = 1;             // the device count, however the command line gave it
  std::string devices_flag;    // how to name it in messages: "--devices 4", "--rank-table t.json (4 ranks)"
  bool gradients_mean = host::ParallelContext{}.gradients_mean;  // MindSpore's default, false
  bool gradients_mean_given = false;  // --gradients-mean appeared on the command line
  bool parameter_broadcast = false;
  std::string comm_fusion;     // --comm-fusion JSON; empty: the default
};

// Errors name the flag; every one is a command-line mistake.
inline Result<host::ParallelContext> ParseParallelFlags(const ParallelFlags& f) {
  host::ParallelContext context;
  SINKRT_ASSIGN_OR_RETURN(context.mode, host::ParseParallelMode(f.parallel), "--parallel");
  context.device_num = f.devices;
  context.gradients_mean = f.gradients_mean;
  context.parameter_broadcast = f.parameter_broadcast;
  if (!f.comm_fusion.empty()) {
    SINKRT_ASSIGN_OR_RETURN(context.comm_fusion, host::ParseCommFusion(f.comm_fusion), "--comm-fusion");
  }
  SINKRT_RETURN_IF_ERROR(context.Validate({host::ParallelMode::StandAlone, host::ParallelMode::DataParallel}),
                         f.devices_flag + ", --parallel " + f.parallel);
  const bool dp_only = f.gradients_mean_given || f.parameter_broadcast || !f.comm_fusion.empty();
  if (dp_only && context.mode != host::ParallelMode::DataParallel)
    return InvalidArgument("--gradients-mean, --parameter-broadcast and --comm-fusion apply to --parallel data_parallel");
  return context;
}

// How a run header shows the context in force, e.g. "data_parallel
// (gradients_mean false: AllReduce sum)"; stand_alone has no AllReduce.
inline std::string ParallelContextText(host::ParallelMode mode, bool gradients_mean) {
  std::string s = host::ParallelModeName(mode);
  if (mode == host::ParallelMode::DataParallel)
    s += gradients_mean ? " (gradients_mean true: AllReduce mean)" : " (gradients_mean false: AllReduce sum)";
  return s;
}

}  // namespace sinkrt::tools
