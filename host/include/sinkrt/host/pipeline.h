/// \file
/// Pipeline parallel (issue 19): the network's ops split into S stages that
/// run on S groups of device_num / S devices, micro-batches flowing through
/// them (MindSpore's pipeline_stages, cell.pipeline_stage, PipelineCell).
///
/// This header holds the first part: which op runs in which stage, and what
/// crosses between stages. Stages come from layer names (MindSpore sets
/// `cell.pipeline_stage` on cells; here a layer is a name scope: the op
/// "block0.attn.q" is in layers "block0" and "block0.attn") or, without any,
/// from a balanced split of the ops in graph order into S contiguous parts of
/// about equal estimated cost (forward, backward and update, from the
/// calibration's rates). Data flows forward through stages only: an op is
/// never in an earlier stage than an op whose output it reads.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "sinkrt/host/calibration.h"
#include "sinkrt/host/graph.h"
#include "sinkrt/runtime/status.h"

namespace sinkrt::host {

/// Pipeline stages as the job asks for them: how many, the micro-batches, the schedule and the
/// layers' stages.
struct PipelineConfig {
  int stages = 1;                                     ///< MindSpore's pipeline_stages
  int micro_size = 1;                                 ///< PipelineCell(net, micro_size)
  std::string scheduler = "1f1b";                     ///< pipeline_config's pipeline_scheduler: 1f1b or gpipe
  std::vector<std::pair<std::string, int>> stage_of;  ///< layer name -> stage (--stage-of NAME=k,...)
};

/// "block0=0,block1=1" -> {{"block0", 0}, {"block1", 1}}; errors name the entry.
Result<std::vector<std::pair<std::string, int>>> ParseStageOf(const std::string& text);

/// The config against the job: stages >= 1 dividing device_num,
/// micro_size >= stages (MindSpore: "micro_size must be greater than or equal to
/// pipeline_stages") dividing the batch, a known scheduler, stage numbers in
/// [0, stages).
Status CheckPipelineConfig(const PipelineConfig& config, int device_num, int64_t batch);

/// A tensor one stage produces and a later one reads: sent forward in every
/// micro-batch, and its gradient sent back when it has one.
struct StageBoundary {
  TensorId tensor = kInvalidTensor;  ///< the tensor crossing
  int from = 0;                      ///< the producing op's stage
  int to = 0;                        ///< the latest stage that reads it
};

/// What AssignPipelineStages decided: each op's stage, the estimated stage times and the tensors crossing.
struct PipelineStages {
  int stages = 1;                         ///< number of stages
  std::vector<int> op_stage;              ///< per op of the graph
  std::vector<double> stage_seconds;      ///< estimated forward + backward + update per stage, one device
  std::vector<StageBoundary> boundaries;  ///< every tensor that crosses stages
  std::vector<std::string> stage_source;  ///< per stage: "layers block0, block1" or "balanced"
};

/// Assigns every op of `g` to a stage. With config.stage_of: an op takes the
/// stage of the longest layer name that is a name-scope prefix of its name;
/// an op no layer names takes the latest stage among its inputs' producers
/// (stage 0 when it reads only leaves). Without: the balanced split.
/// Errors: a layer given twice, a layer no op is in, a stage outside
/// [0, stages), an empty stage, an op reading from a later stage, a
/// parameter read in two stages.
Result<PipelineStages> AssignPipelineStages(const Graph& g, const PipelineConfig& config,
                                            const Calibration& calibration);

/// One stage's forward graph, cut out of the network by its stage
/// assignment. It holds the stage's ops (same names, attributes and shard
/// strategies), the leaves they read (the dataset Inputs only in the stages
/// that read them: the inputs in the first, the labels in the last), and
/// for every tensor an earlier stage sends it an Input of the same name,
/// shape and dtype. Its outputs are what it sends on (in the order of
/// `sent`), then the network's outputs it computes.
struct StageGraph {
  int stage = 0;                   ///< its stage number
  Graph graph;                     ///< its forward graph, as above
  std::vector<TensorId> received;  ///< in `graph`: the Inputs standing for earlier stages' tensors
  std::vector<TensorId> sent;      ///< in `graph`: tensors a later stage reads
  std::vector<TensorId> original;  ///< per tensor of `graph`: its tensor in the network
};

/// The S stage graphs of `g` under `stages` (from AssignPipelineStages).
Result<std::vector<StageGraph>> SplitStageGraphs(const Graph& g, const PipelineStages& stages);

/// The world ranks of stage `stage`: device_num / stages consecutive ranks
/// (MindSpore's layout: stage k holds ranks [k·n, (k+1)·n)).
std::vector<uint32_t> StageRanks(int device_num, int stages, int stage);
/// The stage of world rank `rank`.
int StageOfRank(int device_num, int stages, uint32_t rank);

}  // namespace sinkrt::host
