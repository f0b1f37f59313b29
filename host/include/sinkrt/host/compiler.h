// The compiler: training graph -> one verified-format task stream.
//
//   forward graph --AppendBackward--> + backward --AppendOptimizer--> + update
//     --lower (fusion, tasks)--> --plan memory (liveness)--> --write--> bytes
//
// The same graph and options always give byte-identical streams.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sinkrt/fb/task_stream_generated.h"  // BufferRole, ProgramKind
#include "sinkrt/host/graph.h"
#include "sinkrt/host/optimizer.h"
#include "sinkrt/runtime/status.h"

namespace sinkrt::host {

struct CompileOptions {
  OptimizerSpec optimizer;
  uint32_t queue_capacity = 16;  // MS_DATASET_SINK_QUEUE's default
  uint32_t rank = 0;
  uint32_t world_size = 1;
  uint32_t arena_alignment = 64;
  bool fuse = true;              // MatMul/Conv + BiasAdd + Relu into one kernel
  bool eval_program = true;      // also emit eval_step (forward, loss, outputs)
  // Also emit predict_step: the forward ops outputs()[0] depends on, fed by
  // queue "predict" with only the Inputs they read (not the label), and
  // reporting outputs()[0]. Model turns it on for predict() and for eval's
  // partial last batch.
  bool predict_program = false;
};

struct PlannedBuffer {
  std::string name;
  uint64_t offset = 0;
  uint64_t bytes = 0;
  fb::BufferRole role = fb::BufferRole::Activation;
  // First and last task index (in program order) that touch it; persistent
  // buffers span every program: program Init, first_use 0, last_use the last
  // task of the longest step program.
  int32_t first_use = 0, last_use = 0;
  fb::ProgramKind program = fb::ProgramKind::TrainStep;
};

struct CompileReport {
  uint64_t arena_bytes = 0;
  uint64_t liveness_lower_bound = 0;  // max over time of live bytes
  uint64_t persistent_bytes = 0;
  size_t train_tasks = 0, eval_tasks = 0, predict_tasks = 0, fused_kernels = 0;
  std::vector<PlannedBuffer> buffers;
};

struct CompiledStream {
  std::vector<uint8_t> bytes;  // the .tstream file
  CompileReport report;
  uint64_t graph_hash = 0;
  // Queue 0 ("train") and queue 1 ("eval") take the graph's Input tensors in
  // creation order as their columns.
  std::vector<std::string> input_columns;
  // Queue "predict" (2, or 1 without eval_step): the Inputs outputs()[0]
  // depends on, in creation order. Empty without predict_program.
  std::vector<std::string> predict_columns;
};

// `forward` must have a loss (SetLoss). It is copied, not modified.
Result<CompiledStream> Compile(const Graph& forward, const CompileOptions& options);

// FNV-1a over the graph's canonical serialisation: names, shapes, ops, attrs,
// initialisers. Equal graphs hash equal on every platform.
uint64_t GraphHash(const Graph& g);

}  // namespace sinkrt::host
