/// \file
/// OpCode: every operation a Graph holds.
#pragma once

#include <cstdint>

namespace sinkrt {

/// Every operation the host graph knows and the device can execute. Forward
/// ops, their gradient helpers and the optimizer updates share one code space
/// so that a graph op lowers to exactly one kernel (or one fused kernel).
/// The enumerators and their values are schemas/common.fbs's OpCode's, so
/// graph files and task streams store the value as is
/// (host/src/util/schema_enums.h maps the two and checks they agree).
enum class OpCode : uint16_t {
  Invalid = 0,
  // forward
  MatMul = 1,
  BiasAdd = 2,
  Add = 3,
  Sub = 4,
  Mul = 5,
  Relu = 6,
  Gelu = 7,
  Tanh = 8,
  Sigmoid = 9,
  Softmax = 10,
  LogSoftmax = 11,
  SparseSoftmaxCrossEntropy = 12,
  ReduceSum = 13,
  ReduceMean = 14,
  Reshape = 15,
  Conv2D = 16,
  MaxPool2D = 17,
  AvgPool2D = 18,
  Flatten = 19,
  LayerNorm = 20,    ///< over the last axis: x, gamma, beta -> y, mean, rstd
  BatchMatMul = 21,  ///< [..., M, K] x [..., K, N], batch dims broadcast
  Transpose = 22,    ///< any permutation, rank <= 6
  Gather = 23,       ///< rows of a table along axis 0 (embedding lookup)
  Concat = 24,       ///< along one axis
  Split = 25,        ///< along one axis, into given sizes
  Cast = 26,         ///< between F32 and BF16
  Exp = 27,          ///< e^x
  Log = 28,          ///< natural log; IEEE: log(0) = -inf, log(x < 0) = NaN
  Sqrt = 29,         ///< IEEE: sqrt(x < 0) = NaN
  Rsqrt = 30,        ///< 1 / sqrt(x); IEEE: rsqrt(0) = inf, rsqrt(x < 0) = NaN
  Square = 31,       ///< x * x
  Abs = 32,          ///< |x|
  Div = 33,          ///< a / b, NumPy broadcasting; IEEE (x / 0 = ±inf, 0 / 0 = NaN)
  Maximum = 34,      ///< max(a, b), broadcasting; NaN if either is NaN
  Minimum = 35,      ///< min(a, b), broadcasting; NaN if either is NaN
  Pow = 36,          ///< a ^ b, broadcasting (std::pow)
  Erf = 37,          ///< the error function
  GeluErf = 38,      ///< x/2 (1 + erf(x / sqrt 2)): exact GELU (Gelu is the tanh form)
  /// BatchNorm over channel axis 1 (docs/guide/normalization.md): x, gamma,
  /// beta, moving_mean, moving_variance [, the group's sums] -> y, mean, rstd;
  /// updates the moving statistics in place in train_step.
  BatchNorm = 123,
  BatchNormInfer = 124,  ///< x, gamma, beta, moving_mean, moving_variance -> y (eval, predict)
  BatchNormStats = 125,  ///< x, shift -> [2, C]: sum(x - shift), sum((x - shift)^2) per channel
  ReduceMax = 39,        ///< max over axes (keep_dims as ReduceSum); NaN if any is NaN
  // gradient helpers
  ReluGrad = 40,
  GeluGrad = 41,
  TanhGrad = 42,
  SigmoidGrad = 43,
  SoftmaxGrad = 44,
  LogSoftmaxGrad = 45,
  SparseSoftmaxCrossEntropyGrad = 46,
  BiasAddGrad = 47,
  SumToShape = 48,   ///< reduce a broadcast result back to an input's shape
  BroadcastTo = 49,  ///< out = scale * broadcast(in) (ReduceSum/Mean grads)
  Conv2DBackpropInput = 50,
  Conv2DBackpropFilter = 51,
  MaxPool2DGrad = 52,
  AvgPool2DGrad = 53,
  AddN = 54,  ///< gradient accumulation of a tensor used twice
  Neg = 55,
  Copy = 56,
  Fill = 57,           ///< out = value (seeds d(loss)/d(loss) = 1)
  LayerNormGrad = 58,  ///< dy, x, gamma, mean, rstd -> dx, dgamma, dbeta
  GatherGrad = 59,     ///< scatter-adds dy's rows into a zeroed table gradient
  // graph only (pipeline stages, docs/design/pipeline.md): acc += g in place, a
  // gradient summed over micro-batches; lowered to an in-place AddN task
  AccumulateGrad = 60,
  AbsGrad = 61,          ///< dy, x -> dy * sign(x) (0 where x = 0)
  MaximumGradMask = 62,  ///< a, b (broadcasting) -> 1 where a > b, 1/2 where a = b, else 0
  MinimumGradMask = 63,  ///< a, b (broadcasting) -> 1 where a < b, 1/2 where a = b, else 0
  PowGradBase = 64,      ///< x, e (broadcasting) -> e * x^(e - 1)
  PowGradLog = 65,       ///< x -> log(x), 0 where x < 0 (Pow's exponent gradient)
  ErfGrad = 66,          ///< dy, x -> dy * 2/sqrt(pi) * exp(-x^2)
  GeluErfGrad = 67,      ///< dy, x -> dy * (Phi(x) + x phi(x))
  /// dy, step -> dy * mask / (1 - p), the mask Dropout drew (docs/guide/dropout.md)
  DropoutGrad = 70,
  // BatchNorm's gradient helpers (docs/guide/normalization.md)
  BatchNormGrad = 72,       ///< dy, x, gamma, mean, rstd [, sums] -> dx, dgamma, dbeta
  BatchNormGradStats = 73,  ///< dy, x, mean, rstd -> [2, C]: sum(dy), sum(dy * x_hat) per channel
  /// dy -> dx (Pad's options): the slice of dy that x became; reflect and
  /// symmetric add each mirrored element back onto its source
  PadGrad = 71,
  EqualMask = 68,  ///< a, b (broadcasting) -> 1 where a == b, else 0 (ReduceMax's gradient)
  // optimizer updates (mutate their first inputs in place)
  SgdUpdate = 80,
  MomentumUpdate = 81,
  AdamUpdate = 82,
  AdamPowers = 83,  ///< advances beta1^t, beta2^t once per step
  /// MindSpore's AdamWeightDecay (no bias correction, decoupled decay):
  /// param, grad, m, v [, status]
  AdamWeightDecay = 88,
  /// MindSpore's Lamb, second half: param, m, v, powers, sums [3] [, status]
  LambUpdate = 89,
  // loss scaling (docs/guide/loss_scale.md); an update op then takes the status
  // as a last input: it skips the step on an overflow, else its gradient
  // is grad · status[1]
  GradOverflow = 84,     ///< loss_scale [], grads... -> status [2] f32: (any inf/NaN ? 1 : 0, 1/loss_scale)
  LossScaleUpdate = 85,  ///< loss_scale [], counters [3] i32, status [2]: MindSpore's update cell, in place
  // learning-rate schedules (docs/guide/lr_schedules.md; compiler-made from
  // OptimizerSpec::schedule, never in a graph file's ops)
  LrSchedule = 86,   ///< step [1] i32 -> lr [1] f32, in f64 rounded once
  StepAdvance = 87,  ///< step [1] i32 (, status [2]): step += 1 in place, not on an overflow
  // evaluation
  ArgMaxAccuracy = 90,  ///< number of rows whose argmax equals the label
  // compiler-made (sunk eval, docs/design/compiler.md; never in a graph file):
  // sums[i] += f64(in[i]) * weights[i] for f32 scalars in[i], into an f64
  // [k] buffer the program lists in Program.accumulators (task_stream.fbs)
  MetricSum = 91,
  // communication, inserted by the SEMI_AUTO_PARALLEL partitioner
  // (docs/design/sharding.md §6) over the ranks of CommOptions.group: the compiler
  // lowers them to collective tasks, but for ShardSlice (a local kernel)
  // and GradAllReduce (an identity in the forward)
  AllReduce = 100,      ///< x -> the sum (or mean) over the group, same shape
  AllGather = 101,      ///< x [...] -> [n, ...]: every member's x, in group order
  ReduceScatter = 102,  ///< x [n, ...] -> [...]: this member's block of the sum (or mean)
  AllToAll = 103,       ///< x [n, ...] -> [n, ...]: block j goes to member j
  ShardSlice = 104,     ///< x -> this member's block of `axis`, cut in n
  GradAllReduce = 105,  ///< identity; its gradient is an AllReduce (Megatron's f)
  // graph only (pipeline stages, docs/design/pipeline.md): point to point with the
  // rank in CommOptions.group that is not this one, lowered to SendTask and
  // RecvTask on the comm stream
  Send = 106,  ///< x -> (nothing): x to the peer
  Recv = 107,  ///< (nothing) -> y: y from the peer
  // dropout (docs/guide/dropout.md)
  Dropout = 120,      ///< x, step -> x * mask / (1 - p), the mask from Philox4x32-10
  DropoutStep = 121,  ///< step [] i64 += 1 in place, once per training step
  /// MindSpore's Lamb, first half: param, grad, m, v, powers [, status] ->
  /// sums [3]: advances m and v, and sums w², g², ĝ² over this block
  LambNorms = 145,
  // forward
  Select = 110,      ///< cond (f32; the kernel also takes u8), x, y (broadcasting) -> cond != 0 ? x : y
  CausalMask = 111,  ///< scores [..., T, S] -> value where column j > row i + S - T, else scores
  // gradient clipping by global norm (docs/guide/clipping.md; compiler-made
  // from OptimizerSpec::clip_grad_norm, never in a graph file's ops)
  SumSquares = 126,        ///< x... -> [1] f32: the sum of the squares of every element, in f64
  ClipByGlobalNorm = 127,  ///< sums [1]... [, status [2]] -> status [2]: the factor times clip / max(norm, clip)
  /// indices (i32) -> f32 with a new axis of `depth`: on_value at the index,
  /// else off_value (an index outside [0, depth): all off_value)
  OneHot = 112,
  Pad = 113,  ///< x -> x padded per axis (constant value, reflect or symmetric)
};

/// The op's name, as its enumerator is spelled ("MatMul"); "" for a value
/// from outside the enum.
const char* OpCodeName(OpCode op);

}  // namespace sinkrt
