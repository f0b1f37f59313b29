// Model's state, shared by the files that implement it: model.cc (create,
// state), train_loop.cc, eval.cc.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "host/src/job/stream_report.h"
#include "host/src/model/slices.h"
#include "sinkrt/fb/task_stream_generated.h"
#include "sinkrt/host/buffer_role.h"
#include "sinkrt/host/model.h"
#include "sinkrt/runtime/task_stream_verifier.h"

namespace sinkrt::host {

class ProcessGroup;

// A device queue as the host feeds it: its index and its columns with their
// per-batch shapes (the batch size is baked into the graph).
struct QueueInfo {
  int64_t index = -1;  // -1: the stream has no such queue
  std::vector<ColumnSpec> columns;
};

// A persistent buffer a checkpoint carries: a Param or an OptState.
struct StateBuffer {
  uint32_t index = 0;
  std::string name;
  DType dtype = DType::Invalid;
  Shape shape;
  uint64_t bytes = 0;
  BufferRole role = BufferRole::Param;
  std::optional<job::StreamSlice> slice;  // a sharded rank's part of the whole tensor
};

// Every Param and OptState buffer of a verified stream, in table order.
std::vector<StateBuffer> StateBuffers(const VerifiedStream& stream);

// What the host needs of one rank's stream when the ranks hold slices
// (SEMI_AUTO_PARALLEL): how each queue takes the batch, the state buffers
// with their slices, and the slices of the tensors eval and predict read
// back.
struct RankPlan {
  RankFeed train, eval, predict;
  std::vector<StateBuffer> state;
  // The rows of eval_step's accuracy count relative to the global batch's:
  // the logits it counts cover local/global of the rows.
  int64_t accuracy_rows = 0, accuracy_global_rows = 0;
  std::optional<job::StreamSlice> predict_output;  // predict_step's report
};

struct Model::Impl {
  explicit Impl(CompiledStream rank0) : compiled(std::move(rank0)) {}

  std::vector<DeviceLink*> devices;  // by rank, from first_rank
  // One process per rank (communication.h): this Model drives rank
  // first_rank of world_size alone, and its rounds go through `group`.
  // Otherwise first_rank 0, world_size = devices.size(), group null.
  ProcessGroup* group = nullptr;
  uint32_t first_rank = 0;
  uint32_t world_size = 1;
  DeviceLink* device = nullptr;  // rank 0: eval, predict, state
  ParallelContext context;
  CompiledStream compiled;              // rank 0's
  std::vector<VerifiedStream> streams;  // by rank (shared bytes): the profiler's task tables
  std::string network_name;
  uint64_t network_hash = 0;            // NetworkHash of the network with its loss
  uint64_t network_structure_hash = 0;  // NetworkStructureHash of the same; 0: unknown (an old job)

  QueueInfo train_queue, eval_queue, predict_queue;
  // Reports of eval_step: positions of the loss and of the correct-row count
  // (-1 when the graph has no accuracy metric).
  int loss_report = -1;
  int accuracy_report = -1;
  // Sunk eval (model/eval_sunk.h): the position of eval_step's f64 metric
  // sums, [loss x rows, correct count] summed over a sink's steps (-1 when
  // the stream has none: eval then runs one batch per sink).
  int metric_sums_report = -1;
  // When the loss is SparseSoftmaxCrossEntropy(outputs()[0], an Input), the
  // name of that Input: eval then computes a partial batch's loss and
  // accuracy on the host from predict_step's logits. Empty otherwise.
  std::string label_column;

  std::vector<StateBuffer> state;

  // SEMI_AUTO_PARALLEL: every rank holds a slice and runs eval and predict
  // too; per rank, how (empty otherwise).
  bool sharded = false;
  std::optional<AutoParallelPlan> auto_parallel;  // the search, under auto_parallel
  std::vector<RankPlan> ranks;
  // Optimizer parallel under data parallel (docs/guide/parallel_optimizer.md):
  // the ranks hold different dim-0 blocks of the sharded parameters'
  // optimizer state; each rank's state buffers, which ReadState() merges
  // and WriteState() splits (empty otherwise).
  bool state_sliced = false;
  std::vector<std::vector<StateBuffer>> rank_state;

  // Rank r's state buffers when the ranks' differ (sharded or
  // state_sliced).
  const std::vector<StateBuffer>& RankState(uint32_t r) const { return sharded ? ranks[r].state : rank_state[r]; }

  // Pipeline stages (docs/design/pipeline.md): the stage count, each rank's train
  // queue (index -1: a middle stage, fed nothing) and whether its train_step
  // reports the loss (the last stage), and the model's state across the
  // stages: every Param and OptState with the rank that holds it. Under
  // data parallel that is the first replica of its stage (the others hold
  // the same); with stage_sharded (SEMI_AUTO_PARALLEL inside the stages)
  // every rank of the stage, each with its slice.
  int pipeline_stages = 1;
  bool stage_sharded = false;
  // Gradient accumulation (docs/guide/grad_accumulation.md): dataset batches per
  // train_step; its queue takes their columns in turn.
  int accumulation = 1;
  // Loss scaling (docs/guide/loss_scale.md): train_step reports the scale and its
  // counters after the loss.
  bool loss_scaled = false;
  // A learning-rate schedule (docs/guide/lr_schedules.md): train_step
  // reports the step's rate last.
  bool lr_scheduled = false;
  // The device's count of overflowed steps (loss_scale/counters[2]) as the
  // host last saw it: from the last sink's report, or from WriteState. A
  // train() starts from it, so that its first sink's overflow_steps are
  // that sink's, not those of earlier runs or of a resumed checkpoint.
  int64_t overflow_steps_seen = 0;
  std::vector<QueueInfo> rank_train_queues, rank_eval_queues;
  std::vector<bool> reports_loss;
  std::vector<std::pair<uint32_t, StateBuffer>> stage_state;
  LoadInfo load_info;  // the first device's, from its Load (Model::load_info)
};

}  // namespace sinkrt::host
