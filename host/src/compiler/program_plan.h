// The lowering's intermediate form: each program as kernels over tensor ids,
// before the buffer table exists (fusion.h builds the kernels,
// buffer_table.h turns tensors into buffers, lowering.cc into tasks), and the
// per-tensor facts these steps share.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "host/src/passes/training_graph.h"
#include "sinkrt/fb/task_stream_generated.h"
#include "sinkrt/host/graph.h"
#include "sinkrt/runtime/program_kind.h"
#include "sinkrt/runtime/status.h"

namespace sinkrt::host::compiler {

// One kernel of a program before buffers exist: tensor ids, and the ops it
// stands for (more than one when fused).
struct KernelPlan {
  std::vector<size_t> ops;  // graph op indices; ops[0] is the kernel's op
  std::vector<TensorId> inputs, outputs;
  TensorId bias = kInvalidTensor;
  fb::Activation activation = fb::Activation::None;
  // The kernel to run instead of ops[0]'s own (Invalid: its own): eval and
  // predict run BatchNorm as BatchNormInfer (UseMovingStatistics).
  OpCode code = OpCode::Invalid;
};

struct ProgramPlan {
  ProgramKind kind;
  std::string name;              // "train_step"
  std::string stem;              // "train": the queue's name and the transients' prefix
  std::vector<TensorId> inputs;  // the queue's columns, popped by GetNext first
  std::vector<KernelPlan> kernels;
  std::vector<TensorId> reports;
};

// Per-tensor facts the lowering needs, computed once over the whole graph.
struct GraphFacts {
  std::vector<int64_t> producer;       // op index, or -1 for a leaf
  std::vector<int32_t> producer_slot;  // output slot within the producer
  std::vector<bool> reported;          // loss, graph outputs, accuracy: never fused away
};

// Eval and predict normalise with the moving statistics, as MindSpore's
// eval mode does: each BatchNorm kernel becomes BatchNormInfer (x, gamma,
// beta, moving mean and variance -> y; no batch statistics, no update), and
// SyncBatchNorm's statistics kernels and their AllReduce, which only
// training reads, are dropped.
void UseMovingStatistics(const Graph& g, std::vector<KernelPlan>& kernels);

// Fails unless every tensor has a sized dtype and a valid shape, every op
// reads and writes tensors of the graph, no tensor has two writers and every
// MaxPool2D has its workspace output.
Result<GraphFacts> AnalyseGraph(const passes::TrainingGraph& tg);

}  // namespace sinkrt::host::compiler
