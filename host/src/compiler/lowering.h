// Lowering: a TrainingGraph becomes programs of tasks over a buffer table.
//
// This is the whole task stream except the memory plan (offsets, arena) and
// the header, as plain structs the writer serialises one to one. Everything
// is in a deterministic order derived from tensor and op indices only.
//
// Buffers. A tensor gets a buffer only if a program touches it (fused-away
// intermediates get none). Persistent tensors (Param, Const, OptState, Grad
// and reported Outputs) get one buffer shared by every program. Transient
// tensors (Input, Activation, Workspace) get one buffer per program that uses
// them: train_step, eval_step and predict_step never run at once, so each
// program's copy is planned over the same bytes with its own liveness; eval's
// copies are named "eval/<tensor>", predict's "predict/<tensor>". Buffers are
// named after their tensors, except the loss ("loss") and eval's accuracy
// count ("accuracy"), which the host looks up by name (unless another tensor
// already has that name). Table order: Param, Const, OptState, Grad, Output,
// then train_step's transients, then eval_step's, then predict_step's, each
// by tensor index — so the persistent buffers of one role are contiguous once
// packed in that order.
//
// Queues: one per step program that reads inputs, in program order — "train"
// (0), "eval" (1), "predict" (2 with eval, else 1). train and eval take every
// Input tensor; predict only those its output depends on.
//
// Fusion. With `fuse`, MatMul → BiasAdd [→ Relu] and Conv2D → BiasAdd
// [→ Relu] become one kernel (docs/ops.md "Fusion") when, in the program
// being lowered, each dropped intermediate has exactly one reader (the next
// op of the chain) and is not a loss, graph output or report. The chain need
// not be adjacent in op order, so the bias must also be ready when the first
// op runs (a leaf, or produced earlier) and not be updated in place between.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "compiler/training_graph.h"
#include "sinkrt/fb/task_stream_generated.h"
#include "sinkrt/host/graph.h"
#include "sinkrt/runtime/dtype.h"
#include "sinkrt/runtime/status.h"

namespace sinkrt::host::compiler {

struct BufferDef {
  std::string name;
  TensorId tensor = kInvalidTensor;
  DType dtype = DType::F32;
  Shape shape;
  uint64_t bytes = 0;
  fb::BufferRole role = fb::BufferRole::Activation;
  bool persistent = false;
  // Transient buffers: the program that uses them and the first/last task
  // index (in that program) that touches them.
  fb::ProgramKind program = fb::ProgramKind::TrainStep;
  int32_t first_use = -1, last_use = -1;
};

struct KernelDef {
  fb::OpCode op = fb::OpCode::Invalid;
  std::vector<uint32_t> inputs, outputs;  // buffer indices
  OpAttrs attrs;                          // of the first op of a fused chain
  int32_t fused_bias = -1;
  fb::Activation fused_activation = fb::Activation::None;
};

struct GetNextDef {
  uint32_t queue = 0;
  std::vector<uint32_t> outputs;
};

struct InitTaskDef {
  std::vector<uint32_t> initializers;  // indices into LoweredStream::initializers
};

struct TaskDef {
  std::string name;  // op names ("a+b+c" for a fused chain)
  std::variant<KernelDef, GetNextDef, InitTaskDef> body;
};

struct ProgramDef {
  std::string name;
  fb::ProgramKind kind = fb::ProgramKind::TrainStep;
  std::vector<TaskDef> tasks;  // one "compute" stream
  std::vector<uint32_t> reports;
};

struct InitializerDef {
  uint32_t buffer = 0;
  InitSpec init;  // fan_in/fan_out resolved from the shape when unset
};

struct QueueColumnDef {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
};

struct QueueDef {
  std::string name;
  uint32_t capacity = 16;
  std::vector<QueueColumnDef> columns;
};

struct LoweredStream {
  std::vector<BufferDef> buffers;
  std::vector<InitializerDef> initializers;
  std::vector<QueueDef> queues;
  std::vector<ProgramDef> programs;  // init, train_step[, eval_step][, predict_step]
  size_t fused_kernels = 0;          // kernels of train_step that absorbed ops
};

struct LoweringOptions {
  bool fuse = true;
  bool eval_program = true;
  bool predict_program = false;
  uint32_t queue_capacity = 16;
};

Result<LoweredStream> Lower(const TrainingGraph& tg, const LoweringOptions& options);

// fan_in/fan_out as docs/ops.md defines them: 2-D [in, out] → (shape[0],
// shape[1]); OIHW (and any rank ≥ 3, O and I first) → (I·∏spatial,
// O·∏spatial); 1-D → (shape[0], shape[0]); a scalar → (1, 1).
std::pair<int64_t, int64_t> FanInOut(const Shape& shape);

}  // namespace sinkrt::host::compiler
