// Lowering: a TrainingGraph becomes programs of tasks over a buffer table.
//
// This is the whole task stream except the memory plan (offsets, arena) and
// the header, as plain structs the writer serialises one to one. Everything
// is in a deterministic order derived from tensor and op indices only.
//
// The steps, in order (docs/design/compiler.md):
//   1. program_plan.h: check the graph and gather per-tensor facts;
//   2. fusion.h: each program's ops become kernels (some fused);
//   3. views.h: Reshapes (and axis-0 Splits and Concats) that share their
//      input's bytes become views and leave the kernel list;
//   4. gradient_collectives.h (data parallel), planning with
//      parallel/data_parallel/gradient_buckets.h: the gradient buckets,
//      which also fix the Grad buffers' order;
//   5. buffer_table.h: which tensors get buffers, in which order, named how;
//   6. here: initializers, the init program, each step program's tasks (the
//      buckets' comm stream spliced into train_step by
//      gradient_collectives.h) and the transients' liveness.
//
// Data parallel (LoweringOptions::data_parallel): see
// parallel/data_parallel/gradient_reduction.h for the comm stream and its events. Group 0
// is "world" (every rank). With parameter_broadcast, init ends with a
// Broadcast of every Param from rank 0. eval_step and predict_step never
// communicate.
//
// Queues: one per step program that reads inputs, in program order — "train"
// (0), "eval" (1), "predict" (2 with eval, else 1). train and eval take every
// Input tensor; predict only those its output depends on.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "host/src/passes/training_graph.h"
#include "sinkrt/fb/task_stream_generated.h"
#include "sinkrt/host/buffer_role.h"
#include "sinkrt/host/graph.h"
#include "sinkrt/host/parallel_context.h"
#include "sinkrt/runtime/dtype.h"
#include "sinkrt/runtime/program_kind.h"
#include "sinkrt/runtime/status.h"

namespace sinkrt::host::compiler {

// A sharded tensor's layout and this rank's slice of it (fb::Slice;
// docs/design/sharding.md §2). Set by Compile under SEMI_AUTO_PARALLEL.
struct SliceInfo {
  Shape global_shape;
  std::vector<int64_t> offset;
  std::vector<int64_t> device_matrix;
  std::vector<int> tensor_map;
  std::vector<int> partial;
};

struct BufferDef {
  std::string name;
  TensorId tensor = kInvalidTensor;
  DType dtype = DType::F32;
  Shape shape;
  uint64_t bytes = 0;
  BufferRole role = BufferRole::Activation;
  bool persistent = false;
  // Transient buffers: the program that uses them and the first/last task
  // index (in that program) that touches them.
  ProgramKind program = ProgramKind::TrainStep;
  int32_t first_use = -1, last_use = -1;
  // A view (compiler/views.h): these bytes are [view_offset, + bytes) of
  // buffer `view_of`, the group's root, in the same program. A root's
  // first_use/last_use cover its whole group; a view's are its own uses.
  int64_t view_of = -1;
  uint64_t view_offset = 0;
  std::optional<SliceInfo> slice;
};

struct KernelDef {
  OpCode op = OpCode::Invalid;
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

struct EventRecordDef {
  uint32_t event = 0;
};

struct EventWaitDef {
  uint32_t event = 0;
};

// In place over `buffers`, which are contiguous in the arena in this order.
struct AllReduceDef {
  uint32_t group = 0;
  fb::ReduceOp op = fb::ReduceOp::Sum;
  std::vector<uint32_t> buffers;
};

struct BroadcastDef {
  uint32_t group = 0;
  uint32_t root = 0;
  std::vector<uint32_t> buffers;
};

// The sharded graph's collectives (docs/design/sharding.md §6), on the compute
// stream where the graph puts them.
// Fused and blocked when `inputs` is non-empty (optimizer parallel's
// buckets; task_stream.fbs): then `input` and `output` are unused.
struct AllGatherDef {
  uint32_t group = 0;
  uint32_t input = 0, output = 0;
  std::vector<uint32_t> inputs{}, outputs{};  // {}: lets designated initialisers omit them
};

struct ReduceScatterDef {
  uint32_t group = 0;
  fb::ReduceOp op = fb::ReduceOp::Sum;
  uint32_t input = 0, output = 0;
  std::vector<uint32_t> inputs{}, outputs{};  // {}: lets designated initialisers omit them
};

struct AllToAllDef {
  uint32_t group = 0;
  uint32_t input = 0, output = 0;
};

// Pipeline stages' point to point transfers (docs/design/pipeline.md): `buffer`
// to or from world rank `peer`, in `group` (the pair). `order` and
// `channel` are the schedule's (OpAttrs::comm_order, channel): they place
// the transfer on the comm stream and are not written to the stream.
struct SendDef {
  uint32_t group = 0;
  uint32_t peer = 0;
  uint32_t buffer = 0;
  int64_t order = 0, channel = 0;
};

struct RecvDef {
  uint32_t group = 0;
  uint32_t peer = 0;
  uint32_t buffer = 0;
  int64_t order = 0;
};

struct TaskDef {
  std::string name;  // op names ("a+b+c" for a fused chain)
  std::variant<KernelDef, GetNextDef, InitTaskDef, EventRecordDef, EventWaitDef, AllReduceDef, BroadcastDef,
               AllGatherDef, ReduceScatterDef, AllToAllDef, SendDef, RecvDef>
      body;
};

// The buffers a task reads or writes (kernels: with a fused bias; events
// and init: none).
std::vector<uint32_t> TaskBuffers(const TaskDef& task);

struct ProgramDef {
  std::string name;
  ProgramKind kind = ProgramKind::TrainStep;
  std::vector<TaskDef> tasks;  // the "compute" stream
  std::vector<uint32_t> reports;
  // Buffers the device zeroes when a sink starts (eval_step's metric sums).
  std::vector<uint32_t> accumulators;
  std::vector<TaskDef> comm_tasks;  // the "comm" stream; none: a single-stream program
  uint32_t num_events = 0;
};

struct CommGroupDef {
  std::string name;
  std::vector<uint32_t> ranks;
};

// One collective of train_step's comm stream that the compiler adds: an
// AllReduce of Grad buffers (in arena order, contiguous) over `group` (0,
// "world", under data parallel), or optimizer parallel's ReduceScatter of
// a gradient into this rank's block of it (buffers {gradient, block}) or
// AllGather of the updated parameter blocks (buffers {block, parameter}).
struct BucketDef {
  enum class Kind : uint8_t { AllReduce, ReduceScatter, AllGather };
  Kind kind = Kind::AllReduce;
  std::vector<uint32_t> buffers;  // AllReduce: its gradients; the others: inputs then outputs
  uint32_t group = 0;
  // ReduceScatter: gradients and their blocks; AllGather: parameter blocks
  // and their parameters (one pair: the plain task, more: the fused one).
  std::vector<uint32_t> inputs, outputs;
};

struct InitializerDef {
  uint32_t buffer = 0;
  InitSpec init;  // fan_in/fan_out resolved from the shape when unset
};

struct QueueColumnDef {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
  TensorId tensor = kInvalidTensor;  // the Input it fills
  std::optional<SliceInfo> slice;
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
  std::vector<CommGroupDef> groups;  // data parallel: [world]
  std::vector<BucketDef> buckets;    // data parallel: in the order their inputs are ready
  size_t fused_kernels = 0;          // kernels of train_step that absorbed ops
};

struct LoweringOptions {
  bool fuse = true;
  bool eval_program = true;
  bool predict_program = false;
  uint32_t queue_capacity = 16;
  // Every buffer offset is a multiple of it, so a view (a Split's piece, a
  // Concat's input) is made only at such an offset inside its root.
  uint64_t arena_alignment = 64;
  // Data parallel over ranks [0, world_size); see parallel/data_parallel/gradient_reduction.h.
  bool data_parallel = false;
  uint32_t world_size = 1;
  bool gradients_mean = false;
  bool parameter_broadcast = false;
  CommFusion comm_fusion;
  // Sharded (SEMI_AUTO_PARALLEL): per gradient of tg.grads, the ranks whose
  // gradients of that slice are summed (its mirror group, this rank
  // included); one rank means none. Buckets then form per group, each
  // AllReduce over its own group. Empty: every gradient over the world.
  std::vector<std::vector<uint32_t>> grad_groups;
  // Pipeline stage (docs/design/pipeline.md): the graph's Send and Recv ops move to
  // train_step's comm stream in their schedule order
  // (parallel/pipeline/pipeline_comm.h), beside the gradient buckets.
  bool pipeline = false;
};

Result<LoweredStream> Lower(const passes::TrainingGraph& tg, const LoweringOptions& options);

// fan_in/fan_out as docs/reference/ops.md defines them: 2-D [in, out] → (shape[0],
// shape[1]); OIHW (and any rank ≥ 3, O and I first) → (I·∏spatial,
// O·∏spatial); 1-D → (shape[0], shape[0]); a scalar → (1, 1).
std::pair<int64_t, int64_t> FanInOut(const Shape& shape);

}  // namespace sinkrt::host::compiler
