// The collectives lowering adds to the programs (lowering.h), apart from
// lowering the ops themselves: under data parallel, train_step's gradient
// buckets (AllReduce, and optimizer parallel's ReduceScatter and
// AllGather) and the comm stream they run on; for a pipeline stage, its
// Send and Recv tasks on that stream; and the tasks of the sharded
// graph's collective ops.
//
// What to reduce and in which bucket is parallel planning
// (parallel/data_parallel/gradient_buckets.h), the order of the two
// streams too (parallel/data_parallel/gradient_reduction.h,
// parallel/pipeline/pipeline_comm.h); this file hands those plans the
// lowered program's facts and turns their answers into buckets and tasks.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "host/src/compiler/buffer_table.h"
#include "host/src/compiler/lowering.h"
#include "host/src/compiler/program_plan.h"
#include "host/src/parallel/data_parallel/gradient_buckets.h"
#include "host/src/passes/training_graph.h"
#include "sinkrt/runtime/status.h"

namespace sinkrt::host::compiler {

// Data parallel's plan, made before the buffer table since the buckets fix
// the Grad buffers' order.
struct GradientCollectivePlan {
  std::vector<parallel::FusionGradient> grads;  // tg.grads, in order
  parallel::AllReduceBuckets reduced;           // the gradients optimizer parallel does not shard
  std::map<TensorId, size_t> grad_rank;         // place in the bucket-by-bucket layout
};

// Optimizer parallel: a sharded parameter's gradient is ReduceScattered on
// its own, the others fuse into AllReduce buckets. `train`: train_step's
// plan, whose task positions say when each gradient is ready.
Result<GradientCollectivePlan> PlanGradientCollectives(const passes::TrainingGraph& tg, const ProgramPlan& train,
                                                       const LoweringOptions& options);

// Writes out.groups (group 0 is the world) and out.buckets: the AllReduce
// buckets and the ReduceScatter buckets in the order they are ready, then
// the AllGather buckets. Returns each bucket's ready position (AllGather:
// -1). Fails when the buckets need more events than a program may have.
Result<std::vector<int64_t>> AddGradientBuckets(const passes::TrainingGraph& tg, const GradientCollectivePlan& plan,
                                                const BufferMaps& maps, const LoweringOptions& options,
                                                LoweredStream& out);

// Group index of `ranks` in `groups`, added when new ("world" when it is
// every rank, else "ranks_0_2").
uint32_t GroupIndex(std::vector<CommGroupDef>& groups, const std::vector<uint32_t>& ranks, uint32_t world_size);

bool IsCollectiveOp(OpCode op);

// A collective op of the sharded graph as its tasks: AllReduce reduces in
// place, so its input is first copied into its output.
void AddCollective(const KernelDef& k, const std::string& name, std::vector<CommGroupDef>& groups, uint32_t world_size,
                   std::vector<TaskDef>& tasks);

// Splices the buckets' events into train_step's compute stream and writes
// its comm stream, as parallel::ScheduleGradientReduction orders them.
// ready_at[k] is a compute position before any event is inserted.
void AddGradientReduction(ProgramDef& prog, const std::vector<BufferDef>& buffers,
                          const std::vector<BucketDef>& buckets, const std::vector<int64_t>& ready_at, fb::ReduceOp op);

// A pipeline stage's program: its Send and Recv tasks, its collectives and
// (train_step) the gradient buckets move to the comm stream as
// parallel::SchedulePipelineComm orders them.
Status AddPipelineComm(ProgramDef& prog, const std::vector<BufferDef>& buffers, const std::vector<BucketDef>& buckets,
                       const std::vector<int64_t>& ready_at, fb::ReduceOp op);

}  // namespace sinkrt::host::compiler
