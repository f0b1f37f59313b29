// One pipeline stage's training graph (docs/design/pipeline.md): every
// micro-batch's forward and backward of the stage, laid out in the
// schedule's order, with the transfers between stages as Send and Recv ops,
// the gradients summed over the micro-batches, and one optimizer update.
//
// From the stage's forward graph at the micro-batch size (a StageGraph of
// the network split into micro-batches), the template: its forward ops,
// then its backward (autodiff seeded by the loss / M on the last stage and
// by the gradients received for what it sends elsewhere, and asked for the
// gradients of what it receives). The stage graph then holds, per block of
// the schedule, a copy of the template's forward or backward ops for that
// micro-batch, named "mb<m>/<op>":
// - the dataset columns at the whole batch, each cut by one axis-0 Split
//   into M row blocks (views of the batch the queue delivered);
// - a Recv op per received tensor, placed at the start of the block before
//   the one that reads it (where its buffer may start to be written);
// - a Send op right after the op that writes what is sent;
// - parameter gradients: micro-batch 0's backward writes the Grad tensors,
//   every later one writes its own and adds it in with AccumulateGrad;
// - the last stage's loss: the mean of the micro-batches' losses, after
//   the last forward.
// - Dropout and DropoutGrad: micro-batch m's copy placed at rows m·b.. of
//   the batch (passes::DropoutForMicroStep), so the micro-batches draw the
//   whole batch's masks; the stage's "dropout/step" is shared by them.
// Then the optimizer updates every parameter once (and the dropout step
// advances).
//
// With an eval schedule, the graph also holds eval_step: every
// micro-batch's forward in order ("eval/mb<m>/<op>", its own Splits of the
// same dataset columns, its own transfers), and on the last stage the
// batch's mean loss, its count of correct rows (when the loss is a sparse
// cross-entropy of logits and labels) and the logits of the whole batch,
// reported in that order.
#pragma once

#include <cstdint>
#include <vector>

#include "host/src/parallel/pipeline/pipeline_schedule.h"
#include "host/src/passes/training_graph.h"
#include "sinkrt/host/optimizer.h"
#include "sinkrt/host/pipeline.h"

namespace sinkrt::host::parallel {

// This stage's end of one of the schedule's links.
struct StageLinkEnd {
  int link = 0;                      // index in schedule.links
  TensorId tensor = kInvalidTensor;  // in the stage graph: what it sends, or the Input it receives into
  uint32_t peer = 0;                 // the world rank at the other end
};

struct PipelineStageSpec {
  const StageGraph* stage = nullptr;  // forward, at the micro-batch size
  const parallel::PipelineSchedule* schedule = nullptr;
  // eval_step's transfers: forward only (links without gradients); nullptr:
  // no eval_step.
  const parallel::PipelineSchedule* eval_schedule = nullptr;
  uint32_t rank = 0;
  std::vector<StageLinkEnd> links;  // every link this stage sends or receives on
  TensorId loss = kInvalidTensor;   // in the stage graph: the network's loss, if this stage computes it
  OptimizerSpec optimizer;
  // Gradient clipping by global norm (optimizer.clip_grad_norm > 0,
  // docs/guide/clipping.md): the ranks, one per stage at this rank's place
  // among its stage's, whose sums of squares together cover every
  // gradient once, and this stage's position among them.
  NormGroup clip_span;
};

Result<passes::TrainingGraph> BuildPipelineStageGraph(const PipelineStageSpec& spec);

}  // namespace sinkrt::host::parallel
