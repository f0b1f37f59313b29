// The parallel flags sinkrun train and sinkc share, turned into MindSpore's
// parallel context with its checks and messages.
#pragma once

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "cli/cli_validators.h"
#include "sinkrt/host/auto_parallel.h"
#include "sinkrt/host/graph.h"
#include "sinkrt/host/parallel_context.h"
#include "sinkrt/host/pipeline.h"
#include "sinkrt/host/shard_strategies.h"
#include "runtime/src/file_io.h"
#include "sinkrt/runtime/status.h"

namespace sinkrt::tools {

struct ParallelFlags {
  std::string parallel;        // --parallel
  int devices = 1;             // the device count, however the command line gave it
  std::string devices_flag;    // how to name it in messages: "--devices 4", "--rank-table t.json (4 ranks)"
  bool gradients_mean = host::kDefaultGradientsMean;  // MindSpore's default, false
  bool gradients_mean_given = false;  // --gradients-mean appeared on the command line
  bool parameter_broadcast = false;
  std::string comm_fusion;     // --comm-fusion JSON; empty: the default
  // semi_auto_parallel: --strategy (data, model, DPxMP or a strategy file;
  // empty: the graph's own strategies, MindSpore's default elsewhere),
  // --strategy-save FILE and --full-batch.
  std::string strategy;
  std::string strategy_save;
  bool full_batch = false;
  // auto_parallel: --search-mode (given or not), --device-memory BYTES
  // (empty: unlimited), --calibration FILE (empty: $SINKRT_CALIBRATION,
  // else the built-in default). --strategy-save and --full-batch apply too.
  std::string search_mode = "dynamic_programming";
  bool search_mode_given = false;
  std::string device_memory;
  std::string calibration;
  bool fully_use_devices = false;  // --fully-use-devices
  // Pipeline stages (data_parallel or semi_auto_parallel; docs/guide/pipeline.md): --pipeline-stages S,
  // --micro-size M (PipelineCell's micro_size), --pipeline-scheduler
  // 1f1b|gpipe, --stage-of LAYER=k,... (cell.pipeline_stage).
  int pipeline_stages = 1;
  int micro_size = 1;
  bool micro_size_given = false;
  std::string pipeline_scheduler = "1f1b";
  bool pipeline_scheduler_given = false;
  std::string stage_of;
  // --grad-accumulation K (MindSpore's grad_accumulation_step; stand_alone
  // and data_parallel).
  int grad_accumulation = 1;
  // --enable-parallel-optimizer and --parallel-optimizer-config JSON
  // (data_parallel; docs/guide/parallel_optimizer.md).
  bool enable_parallel_optimizer = false;
  std::string parallel_optimizer_config;
};

// A byte count as --device-memory takes it: plain bytes ("8589934592"), or
// a number with a suffix KB, MB, GB (10^3, 10^6, 10^9) or KiB, MiB, GiB
// (2^10, 2^20, 2^30), any case, e.g. "512MiB", "1.5GB". Positive; `flag`
// names the flag in the message.
inline Result<uint64_t> ParseByteSize(const std::string& text, const std::string& flag) {
  const std::string why = flag + " '" + text +
                          "': expected a positive number of bytes, optionally with a suffix KB, MB, GB (10^3, "
                          "10^6, 10^9) or KiB, MiB, GiB (2^10, 2^20, 2^30), e.g. 8GiB";
  size_t end = 0;
  while (end < text.size() && (std::isdigit(static_cast<unsigned char>(text[end])) || text[end] == '.')) ++end;
  const std::string number = text.substr(0, end);
  std::string suffix = text.substr(end);
  for (char& c : suffix) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (number.empty() || number == "." || number.find('.') != number.rfind('.')) return InvalidArgument(why);
  double scale = 0;
  if (suffix.empty() || suffix == "b") scale = 1;
  else if (suffix == "kb") scale = 1e3;
  else if (suffix == "mb") scale = 1e6;
  else if (suffix == "gb") scale = 1e9;
  else if (suffix == "kib") scale = 1024.0;
  else if (suffix == "mib") scale = 1024.0 * 1024;
  else if (suffix == "gib") scale = 1024.0 * 1024 * 1024;
  else return InvalidArgument(why);
  if (scale == 1 && number.find('.') != std::string::npos) return InvalidArgument(why);  // no fractional bytes
  const double bytes = std::floor(std::strtod(number.c_str(), nullptr) * scale);  // inf past double's range
  if (!(bytes >= 1) || bytes >= 18446744073709551616.0) return InvalidArgument(why);
  return static_cast<uint64_t>(bytes);
}

// The pipeline the flags ask for (stages 1: none); ParseParallelFlags
// checks it.
inline Result<host::PipelineConfig> PipelineFromFlags(const ParallelFlags& f) {
  host::PipelineConfig p;
  p.stages = f.pipeline_stages;
  p.micro_size = f.micro_size;
  p.scheduler = f.pipeline_scheduler;
  if (!f.stage_of.empty()) {
    SINKRT_ASSIGN_OR_RETURN(p.stage_of, host::ParseStageOf(f.stage_of));
  }
  return p;
}

// Errors name the flag; every one is a command-line mistake.
// "a,b,c" as its non-empty entries.
inline std::vector<std::string> SplitList(const std::string& list) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t comma = std::min(list.find(',', start), list.size());
    if (comma > start) out.push_back(list.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

// The ranks a shard strategy spans: every device, or with pipeline stages
// one stage's (the stage's ops are partitioned over them).
inline int StrategyDevices(const host::ParallelContext& c) {
  return c.pipeline_stages > 1 ? c.device_num / c.pipeline_stages : c.device_num;
}

inline Result<host::ParallelContext> ParseParallelFlags(const ParallelFlags& f) {
  host::ParallelContext context;
  SINKRT_ASSIGN_OR_RETURN(context.mode, host::ParseParallelMode(f.parallel), "--parallel");
  context.device_num = f.devices;
  context.gradients_mean = f.gradients_mean;
  context.parameter_broadcast = f.parameter_broadcast;
  if (!f.comm_fusion.empty()) {
    SINKRT_ASSIGN_OR_RETURN(context.comm_fusion, host::ParseCommFusion(f.comm_fusion), "--comm-fusion");
  }
  const bool auto_parallel = context.mode == host::ParallelMode::AutoParallel;
  const bool sharded = context.mode == host::ParallelMode::SemiAutoParallel || auto_parallel;
  // The search sets every op's strategy; a preset or file would leave it
  // nothing to search (a graph file's own strategies are kept, as fixed).
  if (!f.strategy.empty() && auto_parallel)
    return InvalidArgument("--strategy " + f.strategy +
                           " does not apply to --parallel auto_parallel, which searches every op's strategy (ops "
                           "that carry one in a graph file keep it); give --parallel semi_auto_parallel to "
                           "compile a strategy as it is");
  if ((!f.strategy.empty() || !f.strategy_save.empty() || f.full_batch) && !sharded)
    return InvalidArgument("--strategy, --strategy-save and --full-batch apply to --parallel semi_auto_parallel "
                           "(--strategy-save and --full-batch to auto_parallel too)");
  const bool auto_only =
      f.search_mode_given || !f.device_memory.empty() || !f.calibration.empty() || f.fully_use_devices;
  if (auto_only && !auto_parallel)
    return InvalidArgument(
        "--search-mode, --device-memory, --calibration and --fully-use-devices apply to --parallel auto_parallel");
  context.full_batch = f.full_batch;
  context.pipeline_stages = f.pipeline_stages;
  context.pipeline_scheduler = f.pipeline_scheduler;
  context.grad_accumulation_step = f.grad_accumulation;
  context.enable_parallel_optimizer = f.enable_parallel_optimizer;
  if (!f.parallel_optimizer_config.empty()) {
    if (!f.enable_parallel_optimizer)
      return InvalidArgument("--parallel-optimizer-config applies with --enable-parallel-optimizer");
    SINKRT_ASSIGN_OR_RETURN(context.parallel_optimizer_config,
                            host::ParseParallelOptimizerConfig(f.parallel_optimizer_config),
                            "--parallel-optimizer-config");
  }
  if (f.pipeline_stages == 1 && (f.micro_size_given || f.pipeline_scheduler_given || !f.stage_of.empty()))
    return InvalidArgument("--micro-size, --pipeline-scheduler and --stage-of apply with --pipeline-stages above 1");
  if (!f.stage_of.empty()) {
    SINKRT_RETURN_IF_ERROR(host::ParseStageOf(f.stage_of).status());
  }
  if (auto_parallel) {
    if (f.search_mode != "dynamic_programming" && f.search_mode != "sharding_propagation")
      return InvalidArgument("--search-mode " + f.search_mode +
                             ": sinkrt searches with dynamic_programming or sharding_propagation" +
                             (f.search_mode == "recursive_programming"
                                  ? " (MindSpore's recursive_programming is not implemented)"
                                  : ""));
    context.search_mode = f.search_mode;
    if (!f.device_memory.empty()) {
      SINKRT_ASSIGN_OR_RETURN(context.device_memory_capacity, ParseByteSize(f.device_memory, "--device-memory"));
    }
    // The true reason: missing, or a directory or device in the way.
    if (Status st = f.calibration.empty() ? Status::Ok() : CheckRegularFile(f.calibration); !st.ok())
      return InvalidArgument("--calibration " + st.message() +
                             (st.code() == StatusCode::kNotFound ? " (write one with sinkrun calibrate)" : ""));
    context.calibration_file = f.calibration;
    context.fully_use_devices = f.fully_use_devices;
  }
  SINKRT_RETURN_IF_ERROR(context.Validate({host::ParallelMode::StandAlone, host::ParallelMode::DataParallel,
                                           host::ParallelMode::SemiAutoParallel, host::ParallelMode::AutoParallel}),
                         f.devices_flag + ", --parallel " + f.parallel);
  if (f.pipeline_stages > 1) {
    // MindSpore's pipeline rules that need no graph, so that a mistake is
    // the command line's and is refused before sinkrun starts a daemon; the
    // compile checks that the batch splits into the micro-batches.
    SINKRT_ASSIGN_OR_RETURN(const host::PipelineConfig pipeline, PipelineFromFlags(f));
    SINKRT_RETURN_IF_ERROR(host::CheckPipelineConfig(pipeline, f.devices, 0),
                           "--pipeline-stages " + std::to_string(f.pipeline_stages) + ", --micro-size " +
                               std::to_string(f.micro_size) + (f.stage_of.empty() ? "" : ", --stage-of " + f.stage_of));
  }
  const bool dp_only = f.gradients_mean_given || f.parameter_broadcast || !f.comm_fusion.empty();
  if (dp_only && context.mode != host::ParallelMode::DataParallel)
    return InvalidArgument("--gradients-mean, --parameter-broadcast and --comm-fusion apply to --parallel data_parallel");
  // A preset's name and device count need no graph: a mistake is the
  // command line's (a strategy file is read with the graph).
  if (host::IsStrategyPresetName(f.strategy)) {
    SINKRT_RETURN_IF_ERROR(host::PresetDataParallel(f.strategy, StrategyDevices(context)).status(),
                           "--strategy " + f.strategy);
  } else if (Status st = f.strategy.empty() ? Status::Ok() : CheckRegularFile(f.strategy); !st.ok()) {
    // Something that is there but no file (a device, a directory) is named as what it is.
    if (st.code() != StatusCode::kNotFound) return InvalidArgument("--strategy " + st.message());
    return InvalidArgument("--strategy " + f.strategy +
                           ": neither a preset (data, model, or DPxMP such as 2x2) nor a strategy file");
  }
  return context;
}

// --enable-parallel-optimizer and --parallel-optimizer-config, for sinkc
// and sinkrun train.
template <typename App>
void AddParallelOptimizerFlags(App& app, bool& enable, std::string& config) {
  app.add_flag("--enable-parallel-optimizer", enable,
               "data_parallel, semi_auto_parallel and auto_parallel: each rank keeps and updates only its share "
               "of the optimizer state of each parameter it holds whole or in the same slice as others (ZeRO-1; "
               "MindSpore's enable_parallel_optimizer; refused under stand_alone, as MindSpore does; "
               "docs/guide/parallel_optimizer.md)");
  app.add_option("--parallel-optimizer-config", config,
                 "with --enable-parallel-optimizer: MindSpore's parallel_optimizer_config as JSON, e.g. "
                 "'{\"parallel_optimizer_threshold\": 24}' (KB; smaller parameters stay replicated; default 64)");
}

// The command-line flags of a pipeline and of gradient accumulation, for
// sinkc and sinkrun train.
template <typename App>
void AddPipelineFlags(App& app, ParallelFlags& f) {
  app.add_option("--grad-accumulation", f.grad_accumulation,
                 "K: one optimizer step is K batches of --batch, their gradients summed on the device before one "
                 "reduction and one update (MindSpore's grad_accumulation_step; stand_alone and data_parallel; "
                 "steps and --sink-size count optimizer steps; docs/guide/grad_accumulation.md)")
      ->check(PositiveInteger());
  app.add_option("--pipeline-stages", f.pipeline_stages,
                 "data_parallel or semi_auto_parallel: cut the network into S pipeline stages of devices/S ranks "
                 "each (MindSpore's pipeline_stages; docs/guide/pipeline.md); under semi_auto_parallel --strategy is "
                 "for devices/S ranks and every rank reads the whole batch")
      ->check(PositiveInteger());
  app.add_option("--micro-size", f.micro_size,
                 "with --pipeline-stages: micro-batches per batch (PipelineCell's micro_size; at least the stages, "
                 "dividing --batch)")
      ->check(PositiveInteger());
  app.add_option("--pipeline-scheduler", f.pipeline_scheduler,
                 "with --pipeline-stages: 1f1b (default) or gpipe (MindSpore's pipeline_config)");
  app.add_option("--stage-of", f.stage_of,
                 "with --pipeline-stages: LAYER=k,... puts the ops in name scope LAYER in stage k (cell.pipeline_stage); "
                 "default: contiguous stages of about equal estimated cost");
}

// The graph's batch under semi_auto_parallel: `batch` is one data-parallel
// replica's (--batch keeps its data-parallel meaning), so the graph sees
// batch x the strategy's data-parallel degree; with full_batch every rank
// reads the whole `batch`, which is then the graph's.
inline int64_t SemiAutoGraphBatch(int64_t batch, int64_t data_parallel, bool full_batch) {
  return full_batch ? batch : batch * data_parallel;
}

// The graph's batch under auto_parallel: `batch` x the device count, as
// data_parallel's global batch (so a run compares like for like with
// --strategy data at the same --batch); with full_batch every rank reads
// the whole `batch`, which is then the graph's.
inline int64_t AutoParallelGraphBatch(int64_t batch, int64_t devices, bool full_batch) {
  return full_batch ? batch : batch * devices;
}

// Sets the strategies `plan` chose on `graph` (the network it searched,
// by op name), e.g. to write them with SaveShardStrategies: the graph then
// compiles under semi_auto_parallel to the searched streams.
inline Status ApplyAutoParallelPlan(const host::AutoParallelPlan& plan, host::Graph& graph) {
  for (const host::OpPlanChoice& op : plan.ops) {
    if (op.strategy.empty()) continue;
    if (graph.FindOp(op.op) < 0) return NotFound("the searched op '" + op.op + "' is not in graph '" + graph.name() + "'");
    graph.Shard(op.op, op.strategy);
  }
  return graph.status();
}

inline std::string MibText(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(bytes) / 1048576.0);
  return buf;
}

// The line every auto_parallel run prints: the search, its prediction and
// the calibration file it used.
inline std::string AutoParallelText(const host::AutoParallelPlan& plan) {
  char step[64], search[64];
  std::snprintf(step, sizeof step, "%.3f ms", plan.step_s * 1e3);
  std::snprintf(search, sizeof search, "%.1f ms", plan.search_s * 1e3);
  std::string s = "auto_parallel: " + plan.search_mode + " search on " + std::to_string(plan.device_num) +
                  (plan.device_num == 1 ? " device" : " devices") + " in " + search + " (" +
                  std::to_string(plan.candidates) + " candidates, " + std::to_string(plan.ops.size()) +
                  " ops): predicted step " + step + ", memory " + MibText(plan.memory_bytes) + " per rank";
  if (plan.memory_limit_bytes) {
    // The limit binds the compiled arena, which the search's estimate
    // leaves parts of out: say what was compiled, and how many searches it took.
    s += " (limit " + MibText(*plan.memory_limit_bytes);
    if (plan.compiled_arena_bytes) s += "; compiled arena " + MibText(plan.compiled_arena_bytes);
    if (plan.memory_searches > 1) s += ", searched " + std::to_string(plan.memory_searches) + " times to fit it";
    s += ")";
  }
  if (!plan.exact) s += ", not exact (Pareto fronts thinned under the limit)";
  return s + "; calibration " + plan.calibration + " (" + plan.transport + ")";
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
  if (mode == host::ParallelMode::AutoParallel) s += " (searched strategies, compiled as semi_auto_parallel)";
  return s;
}

}  // namespace sinkrt::tools
