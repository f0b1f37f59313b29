// The buffer table: which tensors of the training graph get a buffer, in
// which order, under which name.
//
// A tensor gets a buffer only if a program touches it (fused-away
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
// packed in that order. Data parallel lays the Grad buffers out bucket by
// bucket instead (`grad_rank`), so that one AllReduce reduces one byte range.
//
// Views (views.h) get a buffer of their own (their shape, their name) with
// view_of naming their group root's buffer in the same program; a root that
// no kernel touches (only its views are read) still gets its buffer.
//
// Liveness (first_use/last_use) is left unset: it depends on the final task
// order, which lowering.cc knows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "host/src/compiler/lowering.h"
#include "host/src/compiler/program_plan.h"
#include "host/src/compiler/views.h"
#include "host/src/passes/training_graph.h"
#include "sinkrt/host/buffer_role.h"
#include "sinkrt/host/graph.h"
#include "sinkrt/runtime/status.h"

namespace sinkrt::host::compiler {

// Maps tensors to buffer indices: one table for persistent tensors, one per
// program for transients.
struct BufferMaps {
  std::map<TensorId, uint32_t> persistent;
  std::vector<std::map<TensorId, uint32_t>> transient;  // per program plan

  uint32_t Find(bool persistent_role, int program, TensorId t) const {
    return persistent_role ? persistent.at(t) : transient[program].at(t);
  }
};

struct BufferTable {
  std::vector<BufferDef> buffers;
  BufferMaps maps;
  std::vector<BufferRole> role;  // per tensor of the graph
};

// Param, Const and OptState: filled by init.
bool HasInitializer(TensorKind k);
// Param, Const, OptState, Grad and Output live across steps and programs.
bool IsPersistentRole(BufferRole r);
// The bytes of a buffer holding `info`; fails past 2^62.
Result<uint64_t> BufferBytes(const TensorInfo& info);

// The table for `plans` (train_step first). `grad_rank`: each gradient's
// place in the data-parallel bucket-by-bucket layout (empty otherwise).
// `views`: each plan's views (views.h), one entry per plan.
// Fails on two buffers with one name or a tensor too large for a buffer.
Result<BufferTable> BuildBufferTable(const passes::TrainingGraph& tg, const GraphFacts& facts,
                                     const std::vector<ProgramPlan>& plans, const std::vector<ProgramViews>& views,
                                     const std::map<TensorId, size_t>& grad_rank);

}  // namespace sinkrt::host::compiler
