// AUTO_PARALLEL's cost model: what one forward op costs each rank, in
// seconds and bytes, under one shard strategy, and what a redistribution
// between two layouts costs (docs/design/auto_parallel.md, "Cost model"). The
// strategy search (strategy_search.h) sums these over a graph.
//
// Conventions the search relies on:
// - An op's cost includes its own forward communication: the pending sums
//   of its partial outputs taken by an AllReduce (MindSpore's forward_op,
//   comm_fwd_s). The search charges it only for an output nothing reads
//   (the loss); a read output's pending sums are its readers' to resolve,
//   by an AllReduce or, where the reader wants the tensor split, a
//   ReduceScatter, as the partitioner plans it: edges are priced from the
//   output layout as it is, partial included.
// - A redistribution costs its forward steps and, when the tensor needs a
//   gradient, their transposes in backward (grad_rules.cc): a Slice's is an
//   AllGather, a ReduceScatter's an AllGather, an AllToAll's an AllToAll;
//   an AllReduce's and an AllGather's are local.
// - Backward communication of the op is the AllReduce of each activation
//   input's gradient over the split loops that do not index that input
//   (Megatron's f: a column-split MatMul's dx); parameter gradients are
//   separate (grad_sync_s) and only (1 - hidden fraction) of them counts
//   in the step time.
// - Costs are per rank; all ranks of a stage do the same work.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "host/src/parallel/ops_info/op_sharding.h"
#include "host/src/parallel/tensor_layout/layout.h"
#include "host/src/parallel/tensor_layout/redistribution.h"
#include "sinkrt/host/calibration.h"
#include "sinkrt/host/graph.h"
#include "sinkrt/runtime/status.h"

namespace sinkrt::host::parallel {

struct CostOptions {
  std::string transport = "shm";  // which of the calibration's collective fits
  // Optimizer state per parameter byte: SGD 0, Momentum 1 (MindSpore's
  // default optimizer here), Adam 2 (m and v).
  double optimizer_state_factor = 1.0;
  // Gradients ride in fused AllReduce buckets of this size (comm_fusion's
  // "auto", fusion_buckets.h): one α per bucket, so each gradient is
  // charged α in proportion to its share of one.
  int64_t gradient_bucket_bytes = 16 << 20;
};

// What the cost model needs of a graph, computed once per search.
struct CostContext {
  const Graph* graph = nullptr;
  const Calibration* calibration = nullptr;
  CostOptions options;
  // Per tensor: whether backward computes its gradient (a Param, or an
  // intermediate that depends on one).
  std::vector<bool> needs_grad;
  std::vector<int> readers;  // per tensor: how many op inputs read it
};

// The context for `g` (which must outlive it, as must `c`). An options
// transport the calibration has no fits for is an error naming both.
Result<CostContext> MakeCostContext(const Graph& g, const Calibration& c, CostOptions options = {});

struct OpCost {
  double compute_fwd_s = 0;
  double compute_bwd_s = 0;
  double comm_fwd_s = 0;           // AllReduce of partial outputs
  double comm_bwd_s = 0;           // AllReduce of partial activation-input gradients
  double grad_sync_s = 0;          // parameter-gradient AllReduce over the mirror group, before overlap
  double exposed_grad_sync_s = 0;  // grad_sync_s * (1 - hidden fraction)
  double update_s = 0;             // the optimizer's update of its parameter slices (memory-bound)
  int64_t param_bytes = 0;         // this rank's parameter slices
  int64_t grad_bytes = 0;          // their gradients
  int64_t optimizer_bytes = 0;     // optimizer state: param_bytes * optimizer_state_factor
  int64_t activation_bytes = 0;    // forward tensors kept for backward

  // What the op adds to a training step: compute, both directions of its
  // own communication, the exposed part of its gradient sync and the
  // update of its parameters.
  double StepSeconds() const {
    return compute_fwd_s + compute_bwd_s + comm_fwd_s + comm_bwd_s + exposed_grad_sync_s + update_s;
  }
  int64_t MemoryBytes() const { return param_bytes + grad_bytes + optimizer_bytes + activation_bytes; }
};

// The cost of op `op` (of ctx.graph) under `sharding` (from ShardOp).
// Compute per op class, from the local slice shapes:
//   MatMul, BatchMatMul, Conv2D (as an im2col GEMM): GEMMs from the
//     calibration's grid; backward is one GEMM of the same size per input
//     that needs a gradient (dA = dY·Bᵀ, dB = Aᵀ·dY): 2x forward for a
//     weight times an activation, 1x on the first layer (its input is data);
//     a batch of products at the rate of the products stacked along M;
//   Reshape, Flatten, Split along axis 0: free (views); Split's backward
//     copies the pieces back;
//   BiasAdd after a MatMul or Conv2D, and Relu after that BiasAdd, each the
//     only reader of its input: fused into the GEMM's kernel forward
//     (compiler/fusion.h); backward reads the output gradient (Relu: and
//     its output, writing the input gradient);
//   every other op: memory-bound, (input + output slice bytes) / bandwidth
//     plus one kernel launch; backward twice that (it reads the output
//     gradient and the saved tensors and writes the input gradients).
// Activations kept for backward (MindSpore's per-class rule, simplified):
//   MatMul/BatchMatMul/Conv2D: an operand whose partner needs a gradient;
//   Relu, Sigmoid, Tanh, Softmax, LogSoftmax, Exp, Rsqrt: their output;
//   Add, Sub, BiasAdd, reductions, Reshape, Flatten, Transpose, Concat,
//   Split, Cast, Dropout: nothing; any other op: its non-parameter inputs.
// Parameters: the gradient is summed over the op's split loops that do not
// index the parameter (its mirror group, as the partitioner reduces it; a
// repeated calculation computes the same gradient everywhere and needs no
// sum) at β·f(n)·bytes plus its bucket share of α (CostOptions), and the optimizer reads the parameter, its gradient
// and its state and writes both back: (3 + 2 x optimizer_state_factor) x its bytes of memory-bound work. A parameter
// consumed by several ops is counted by each.
Result<OpCost> CostOfOp(const CostContext& ctx, const OpNode& op, const OpSharding& sharding);

// `layout` with its pending sums taken (partial cleared): what the
// consumers of an op's output read from it once its forward AllReduce ran.
TensorLayout ResolvedLayout(TensorLayout layout);

// Seconds of `plan`: Σ over its collective steps of α + β·f(n)·bytes, with
// bytes the larger of the step's in and out slice (the whole buffer of the
// collective); a Slice is local and free. With `backward`, plus the
// transposes of its steps (above).
Result<double> RedistributionSeconds(const RedistPlan& plan, const Calibration& c, const std::string& transport,
                                     bool backward = false);
// The same for the plan from `from` to `to` (PlanRedistribution).
Result<double> RedistributionSeconds(const TensorLayout& from, const TensorLayout& to, DType dtype,
                                     const Calibration& c, const std::string& transport, bool backward = false);

}  // namespace sinkrt::host::parallel
