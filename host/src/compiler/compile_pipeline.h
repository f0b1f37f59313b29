// Compile's pipeline path (docs/design/pipeline.md): from the network and the
// pipeline config, the training graph of this rank's stage.
//
// The network is first cut into micro-batches: its ops split by rows M ways
// (the "data" strategy preset over M virtual devices, partitioned for the
// first of them), which gives the forward at the micro-batch size with
// every Reshape target adjusted. The stages are assigned on that graph
// (AssignPipelineStages), split into stage graphs (SplitStageGraphs), and
// every tensor that crosses stages becomes a link of the schedule
// (PlanPipelineSchedule, checked for deadlock). Rank r runs stage
// r / (device_num / S) and talks to the rank at the same place in each
// neighbouring stage. Under data parallel its stage's ranks are its
// data-parallel group; under SEMI_AUTO_PARALLEL the stage graph is
// partitioned over them (parallel/pipeline/pipeline_shard.h).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "host/src/parallel/pipeline/pipeline_schedule.h"
#include "host/src/parallel/tensor_layout/layout.h"
#include "host/src/passes/training_graph.h"
#include "sinkrt/host/compiler.h"

namespace sinkrt::host::compiler {

struct PipelineStageGraph {
  passes::TrainingGraph tg;
  int stage = 0;
  std::vector<uint32_t> group;  // this stage's ranks: the gradients' data-parallel group
  parallel::PipelineSchedule schedule;
  parallel::PipelineSchedule eval_schedule;  // forward only; with options.eval_program
  // SEMI_AUTO_PARALLEL (parallel/pipeline/pipeline_shard.h): this rank's place in
  // its stage, and by parameter name its layout over the stage's ranks and
  // its mirror group (world ranks). Empty under data parallel.
  uint32_t place = 0;
  std::map<std::string, parallel::TensorLayout> param_layouts;
  std::map<std::string, std::vector<uint32_t>> mirror_groups;
};

Result<PipelineStageGraph> BuildPipelineStage(const Graph& forward, const CompileOptions& options);

}  // namespace sinkrt::host::compiler
