// The parallel flags sinkrun train and sinkc share: their CLI11 wiring and
// their text parsed into a host::JobSpec (host::PlanJob checks and plans it;
// plan_text.h prints it).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "cli/cli_validators.h"
#include "sinkrt/host/graph.h"
#include "sinkrt/host/job_plan.h"
#include "sinkrt/host/parallel_context.h"
#include "sinkrt/host/pipeline.h"
#include "sinkrt/runtime/status.h"

namespace sinkrt::tools {

struct ParallelFlags {
  std::string parallel = "stand_alone";  // --parallel
  // The device count, however the command line gave it, and how to name it
  // in messages: "--devices 4", "--rank-table t.json (4 ranks)". Set by the
  // tool once it knows the devices.
  int devices = 1;
  std::string devices_flag;
  bool gradients_mean = host::kDefaultGradientsMean;  // MindSpore's default, false
  bool parameter_broadcast = false;
  std::string comm_fusion;  // --comm-fusion JSON; empty: the default
  // semi_auto_parallel: --strategy (data, model, DPxMP or a strategy file;
  // empty: the graph's own strategies, MindSpore's default elsewhere),
  // --strategy-save FILE and --full-batch.
  std::string strategy;
  std::string strategy_save;
  bool full_batch = false;
  // auto_parallel: --search-mode, --device-memory BYTES
  // (empty: unlimited), --calibration FILE (empty: $SINKRT_CALIBRATION,
  // else the built-in default). --strategy-save and --full-batch apply too.
  std::string search_mode = "dynamic_programming";
  std::string device_memory;
  std::string calibration;
  bool fully_use_devices = false;  // --fully-use-devices
  // Pipeline stages (data_parallel or semi_auto_parallel; docs/guide/pipeline.md): --pipeline-stages S,
  // --micro-size M (PipelineCell's micro_size), --pipeline-scheduler
  // 1f1b|gpipe, --stage-of LAYER=k,... (cell.pipeline_stage).
  int pipeline_stages = 1;
  int micro_size = 1;
  std::string pipeline_scheduler = "1f1b";
  std::string stage_of;
  // --grad-accumulation K (MindSpore's grad_accumulation_step; stand_alone
  // and data_parallel).
  int grad_accumulation = 1;
  // --enable-parallel-optimizer and --parallel-optimizer-config JSON
  // (data_parallel; docs/guide/parallel_optimizer.md).
  bool enable_parallel_optimizer = false;
  std::string parallel_optimizer_config;
};

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

// The flags' text into `spec`'s parallel fields; host::CheckJobSpec then
// checks them against each other. `cmd` says which flags were given (a
// setting given under a mode that ignores it is refused). Errors name the
// flag; every one is a command-line mistake.
template <typename App>
Status ParallelSpecFromFlags(const ParallelFlags& f, const App& cmd, host::JobSpec& spec) {
  SINKRT_ASSIGN_OR_RETURN(spec.mode, host::ParseParallelMode(f.parallel), "--parallel");
  spec.devices = f.devices;
  spec.devices_text = f.devices_flag;
  if (cmd.count("--gradients-mean")) spec.gradients_mean = f.gradients_mean;
  spec.parameter_broadcast = f.parameter_broadcast;
  if (!f.comm_fusion.empty()) {
    SINKRT_ASSIGN_OR_RETURN(spec.comm_fusion, host::ParseCommFusion(f.comm_fusion), "--comm-fusion");
  }
  spec.strategy = f.strategy;
  spec.strategy_save = f.strategy_save;
  spec.full_batch = f.full_batch;
  if (cmd.count("--search-mode")) spec.search_mode = f.search_mode;
  if (!f.device_memory.empty()) {
    SINKRT_ASSIGN_OR_RETURN(spec.device_memory, host::ParseByteSize(f.device_memory, "--device-memory"));
  }
  spec.calibration = f.calibration;
  spec.fully_use_devices = f.fully_use_devices;
  spec.pipeline_stages = f.pipeline_stages;
  if (cmd.count("--micro-size")) spec.micro_size = f.micro_size;
  if (cmd.count("--pipeline-scheduler")) spec.pipeline_scheduler = f.pipeline_scheduler;
  spec.stage_of = f.stage_of;
  spec.grad_accumulation = f.grad_accumulation;
  spec.enable_parallel_optimizer = f.enable_parallel_optimizer;
  if (!f.parallel_optimizer_config.empty()) {
    SINKRT_ASSIGN_OR_RETURN(spec.parallel_optimizer_config,
                            host::ParseParallelOptimizerConfig(f.parallel_optimizer_config),
                            "--parallel-optimizer-config");
  }
  return Status::Ok();
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
  app.add_option(
      "--stage-of", f.stage_of,
      "with --pipeline-stages: LAYER=k,... puts the ops in name scope LAYER in stage k (cell.pipeline_stage); "
      "default: contiguous stages of about equal estimated cost");
}

}  // namespace sinkrt::tools
