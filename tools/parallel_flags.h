// The parallel flags sinkrun train and sinkc share, turned into MindSpore's
// parallel context with its checks and messages.
#pragma once

#include <filesystem>
#include <string>
#include <system_error>

#include "sinkrt/host/parallel_context.h"
#include "sinkrt/host/shard_strategies.h"
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
  // semi_auto_parallel: --strategy (data, model, DPxMP or a strategy file;
  // empty: the graph's own strategies, MindSpore's default elsewhere),
  // --strategy-save FILE and --full-batch.
  std::string strategy;
  std::string strategy_save;
  bool full_batch = false;
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
  const bool semi_auto_only = !f.strategy.empty() || !f.strategy_save.empty() || f.full_batch;
  if (semi_auto_only && context.mode != host::ParallelMode::SemiAutoParallel)
    return InvalidArgument("--strategy, --strategy-save and --full-batch apply to --parallel semi_auto_parallel");
  context.full_batch = f.full_batch;
  SINKRT_RETURN_IF_ERROR(context.Validate({host::ParallelMode::StandAlone, host::ParallelMode::DataParallel,
                                           host::ParallelMode::SemiAutoParallel}),
                         f.devices_flag + ", --parallel " + f.parallel);
  const bool dp_only = f.gradients_mean_given || f.parameter_broadcast || !f.comm_fusion.empty();
  if (dp_only && context.mode != host::ParallelMode::DataParallel)
    return InvalidArgument("--gradients-mean, --parameter-broadcast and --comm-fusion apply to --parallel data_parallel");
  // A preset's name and device count need no graph: a mistake is the
  // command line's (a strategy file is read with the graph).
  if (host::IsStrategyPresetName(f.strategy)) {
    SINKRT_RETURN_IF_ERROR(host::PresetDataParallel(f.strategy, f.devices).status(), "--strategy " + f.strategy);
  } else if (std::error_code ec; !f.strategy.empty() && !std::filesystem::is_regular_file(f.strategy, ec)) {
    return InvalidArgument("--strategy " + f.strategy +
                           ": neither a preset (data, model, or DPxMP such as 2x2) nor a strategy file");
  }
  return context;
}

// The graph's batch under semi_auto_parallel: `batch` is one data-parallel
// replica's (--batch keeps its data-parallel meaning), so the graph sees
// batch x the strategy's data-parallel degree; with full_batch every rank
// reads the whole `batch`, which is then the graph's.
inline int64_t SemiAutoGraphBatch(int64_t batch, int64_t data_parallel, bool full_batch) {
  return full_batch ? batch : batch * data_parallel;
}

// How a run header and a report name the strategy in force.
inline std::string StrategyText(const std::string& strategy) {
  return strategy.empty() ? "the graph's (MindSpore's default where none)" : strategy;
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
