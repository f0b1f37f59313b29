/// \file
/// Graph: the host's training graph, built op by op with shapes inferred.
///
/// A Graph is plain data — tensors and ops in topological order — so that
/// autodiff, the optimizer pass, the parallel planner and the compiler are all
/// free functions that read one graph and append to it. Builder calls never
/// throw: the first error (a shape mismatch, a bad attribute) is kept in
/// status() and every later call returns kInvalidTensor, as a TF Scope does,
/// so a model reads as straight-line code and is checked once at the end.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "sinkrt/host/init_kind.h"
#include "sinkrt/host/lr_schedule.h"
#include "sinkrt/host/op_code.h"
#include "sinkrt/runtime/dtype.h"
#include "sinkrt/runtime/status.h"

/// The host library (CMake target sinkrt::host): graphs, the compiler, datasets, Model and
/// callbacks, RemoteDevice and LocalCluster.
namespace sinkrt::host {

/// A tensor's index in its Graph's tensors().
using TensorId = uint32_t;
/// No tensor: what builder calls return after an error.
inline constexpr TensorId kInvalidTensor = UINT32_MAX;

/// What a tensor is for: it decides who writes it and whether it is trained.
enum class TensorKind : uint8_t {
  Intermediate,  ///< produced by an op
  Input,         ///< a dataset column, fed through the device queue
  Param,         ///< trained
  Const,         ///< initialised once, never trained
  Grad,          ///< d(loss)/d(param), added by autodiff
  OptState,      ///< optimizer state, added by the optimizer pass
  /// Device state the step updates in place, never trained (BatchNorm's
  /// moving statistics): initialised by `init`, checkpointed, read by eval.
  State,
};

/// How init fills a Param/Const/OptState. Mirrors the schemas' Init table.
struct InitSpec {
  InitKind kind = InitKind::Zeros;  ///< which initializer
  /// The initializers' parameters: Constant's value, Uniform's range, Normal's mean and stddev.
  /// @{
  float value = 0, low = 0, high = 0, mean = 0, stddev = 0;
  /// @}
  uint64_t seed = 0;  ///< the random kinds' seed
  /// Fans in and out (Xavier, He); 0: derived from the shape at compile time.
  /// @{
  int64_t fan_in = 0, fan_out = 0;
  /// @}
  std::vector<uint8_t> data;  ///< Inline
  /// A slice of a larger tensor (a sharded parameter): the whole tensor's
  /// shape and where this slice starts. Random kinds then draw each element
  /// at its index in the whole tensor, and fans come from the whole shape,
  /// so every rank holds exactly what one device would hold there. Empty:
  /// the tensor is whole.
  /// @{
  Shape global_shape;
  std::vector<int64_t> slice_offset;
  /// @}

  /// All zeros.
  static InitSpec Zeros() { return {}; }
  /// Every element `v`.
  static InitSpec Constant(float v);
  /// Uniform on [low, high).
  static InitSpec Uniform(float low, float high, uint64_t seed);
  /// Normal(mean, stddev).
  static InitSpec Normal(float mean, float stddev, uint64_t seed);
  /// Glorot's initializers, from the tensor's fans.
  /// @{
  static InitSpec XavierUniform(uint64_t seed);
  static InitSpec XavierNormal(uint64_t seed);
  /// @}
  /// He's initializers, from the tensor's fans.
  /// @{
  static InitSpec HeUniform(uint64_t seed);
  static InitSpec HeNormal(uint64_t seed);
  /// @}
  /// Exactly `values`, in row-major order.
  static InitSpec Inline(std::vector<float> values);
};

/// A tensor of a Graph: its name, type, shape, kind and initializer.
struct TensorInfo {
  std::string name;                            ///< unique in its graph
  DType dtype = DType::F32;                    ///< element type
  Shape shape;                                 ///< its dims
  TensorKind kind = TensorKind::Intermediate;  ///< what it is for
  InitSpec init;                               ///< Param, Const, OptState
};

/// Pad's modes (MindSpore's nn.Pad / ops.pad): "constant" fills with a
/// value; "reflect" mirrors about the edge element, which is not repeated
/// (padding < extent); "symmetric" mirrors with the edge repeated (padding
/// <= extent). Values as schemas/common.fbs's PadMode.
enum class PadMode : uint8_t {
  Constant = 0,   ///< a constant value
  Reflect = 1,    ///< [1 2 3] padded 2 before: [3 2 1 2 3]
  Symmetric = 2,  ///< [1 2 3] padded 2 before: [2 1 1 2 3]
};

/// All op attributes in one plain struct; each op reads the fields it needs
/// (host/src/graph_file/op_options.h maps them to and from the schemas' OpOptions).
struct OpAttrs {
  /// MatMul: use the transpose of a or b.
  /// @{
  bool transpose_a = false, transpose_b = false;
  /// @}
  int axis = -1;           ///< Softmax, LogSoftmax, BiasAdd channel axis
  std::vector<int> axes;   ///< ReduceSum/Mean (empty: all)
  bool keep_dims = false;  ///< ReduceSum/Mean: keep reduced dims as 1
  float scale = 1.0f;      ///< BroadcastTo
  /// Conv2D, pools: strides.
  /// @{
  int stride_h = 1, stride_w = 1;
  /// @}
  /// Conv2D, pools: padding of each side.
  /// @{
  int pad_top = 0, pad_bottom = 0, pad_left = 0, pad_right = 0;
  /// @}
  /// Conv2D: dilations.
  /// @{
  int dilation_h = 1, dilation_w = 1;
  /// @}
  /// pools: window size.
  /// @{
  int kernel_h = 1, kernel_w = 1;
  /// @}
  float value = 0;  ///< Fill
  /// optimizers: hyperparameters.
  /// @{
  float learning_rate = 0, momentum = 0, weight_decay = 0;
  /// @}
  bool nesterov = false;  ///< optimizers: Nesterov momentum
  /// Update ops: the rate is an f32 [1] input (LrSchedule's output) after
  /// the op's own operands and before the loss-scale status, not
  /// learning_rate (schemas/common.fbs, SgdOptions).
  bool lr_input = false;
  LrSchedule lr_schedule;  ///< LrSchedule: the schedule it computes
  /// Adam's coefficients.
  /// @{
  float beta1 = 0.9f, beta2 = 0.999f, epsilon = 1e-8f;
  /// @}
  float layer_norm_epsilon = 1e-5f;  ///< LayerNorm, LayerNormGrad (epsilon is Adam's)
  DType cast_to = DType::Invalid;    ///< Cast: the output dtype (F32 or BF16)
  std::vector<int> perm;             ///< Transpose: y dim i = x dim perm[i]
  std::vector<int64_t> sizes;        ///< Split: each output's extent along `axis`
  /// Communication ops (AllReduce ... GradAllReduce): the group's world
  /// ranks, ascending; this rank's position in it; a mean, not a sum
  /// (AllReduce, ReduceScatter). ShardSlice cuts `axis`.
  /// @{
  std::vector<uint32_t> group;
  uint32_t group_position = 0;
  bool mean = false;
  /// @}
  bool max = false;  ///< AllReduce: the maximum (the loss-scale status)
  /// Send and Recv (pipeline stages; never in a graph file): the peer's
  /// world rank, the transfer's place in the comm stream's order (both ends
  /// use the same), and its channel (one tensor to one peer: a send waits for
  /// the channel's previous send before it reuses the channel).
  /// @{
  uint32_t peer = 0;
  int64_t comm_order = 0;
  int64_t channel = 0;
  /// @}
  /// GradOverflow and LossScaleUpdate (docs/guide/loss_scale.md; compiler-made).
  /// @{
  bool loss_scale_check = true;
  bool loss_scale_dynamic = false;
  float scale_factor = 2.0f;
  int scale_window = 2000;
  /// @}
  /// MetricSum (sunk eval; compiler-made, never in a graph): per input, the
  /// f64 weight its value is multiplied by before it is added to its sum.
  std::vector<double> weights;
  /// Dropout and DropoutGrad (docs/guide/dropout.md): the drop probability,
  /// the generator's seed and the op's own stream (a hash of its name when
  /// built). `dropout_global_shape`, `dropout_offset` and
  /// `dropout_row_stride` place this tensor in the global one whose element
  /// indices key the mask (element i at offset + i, dim 0 at offset[0] +
  /// i[0] · row_stride; compiler-made: data-parallel ranks, micro-batches,
  /// shards); empty: it is the whole.
  /// @{
  float dropout_p = 0;
  uint64_t dropout_seed = 0;
  uint32_t dropout_op_id = 0;
  std::vector<int64_t> dropout_global_shape;
  std::vector<int64_t> dropout_offset;
  int64_t dropout_row_stride = 1;
  /// @}
  /// BatchNorm: MindSpore's momentum, and SyncBatchNorm (`group` then holds
  /// the ranks whose statistics it reduces, once the compiler expanded it).
  /// epsilon is layer_norm_epsilon.
  /// @{
  float bn_momentum = 0.9f;
  bool bn_sync = false;
  /// @}
  /// OneHot: the new axis's extent, its position (-1: last) and the two
  /// values (MindSpore's ops.OneHot).
  /// @{
  int64_t depth = 0;
  int one_hot_axis = -1;
  float on_value = 1.0f, off_value = 0.0f;
  /// @}
  /// Pad and PadGrad: (before, after) per axis of x, the mode, and the
  /// constant mode's fill (`value`).
  /// @{
  std::vector<int64_t> paddings;
  PadMode pad_mode = PadMode::Constant;
  /// @}
};

/// BatchNorm's hyperparameters, MindSpore's names and defaults.
struct BatchNormConfig {
  float eps = 1e-5f;      ///< added to the variance
  float momentum = 0.9f;  ///< moving = momentum * moving + (1 - momentum) * batch
  bool sync = false;      ///< SyncBatchNorm: the statistics of the data-parallel group's batch
};

/// One op of a Graph: its code, inputs, outputs and attributes.
struct OpNode {
  std::string name;             ///< unique in its graph
  OpCode op = OpCode::Invalid;  ///< the operation
  /// Its tensors, in the op's order.
  /// @{
  std::vector<TensorId> inputs;
  std::vector<TensorId> outputs;
  /// @}
  OpAttrs attrs;  ///< the op's attributes
  /// SEMI_AUTO_PARALLEL shard strategy (MindSpore's in_strategy): per input,
  /// the number of slices of each dim. Empty: none given, the op gets
  /// MindSpore's default when it is compiled. See Graph::Shard.
  std::vector<std::vector<int64_t>> strategy;
  /// Recomputation (MindSpore's cell.recompute(); Graph::Recompute): the
  /// segment this op belongs to, re-run in the backward pass instead of
  /// keeping its activations. Empty: not recomputed.
  std::string recompute;
};

/// Which inputs of `op` it overwrites in place (optimizer updates: param and
/// state). Every other input is read-only.
std::vector<size_t> MutatedInputs(OpCode op);

/// The host's training graph, built op by op; see the file's description.
class Graph {
 public:
  /// An empty graph called `name`.
  explicit Graph(std::string name = "graph") : name_(std::move(name)) {}

  const std::string& name() const { return name_; }                        ///< the graph's name
  const Status& status() const { return status_; }                         ///< the first builder error, or OK
  const std::vector<TensorInfo>& tensors() const { return tensors_; }      ///< every tensor, indexed by TensorId
  const std::vector<OpNode>& ops() const { return ops_; }                  ///< every op, in topological order
  const TensorInfo& tensor(TensorId id) const { return tensors_.at(id); }  ///< tensor `id`'s facts (checked)
  /// The tensor called `name`, or kInvalidTensor.
  TensorId FindTensor(const std::string& name) const;
  TensorId loss() const { return loss_; }  ///< the training loss (kInvalidTensor until SetLoss)
  /// Tensors reported by eval besides the loss (logits for accuracy).
  const std::vector<TensorId>& outputs() const { return outputs_; }

  // -- leaves --------------------------------------------------------------
  /// A dataset column, fed through the device queue each step.
  TensorId Input(const std::string& name, Shape shape, DType dtype = DType::F32);
  /// A trained parameter, filled by `init`.
  TensorId Param(const std::string& name, Shape shape, InitSpec init);
  /// A constant, filled once by `init`, never trained.
  TensorId Const(const std::string& name, Shape shape, InitSpec init);
  /// Device state, filled by `init` and then updated in place by the step
  /// (BatchNorm's moving statistics): never trained, kept in checkpoints.
  TensorId State(const std::string& name, Shape shape, InitSpec init);

  // -- forward ops (MindSpore names and semantics) -------------------------
  /// a x b, either side transposed first; 2-D.
  TensorId MatMul(TensorId a, TensorId b, bool transpose_a = false, bool transpose_b = false);
  /// bias along `axis` of x: 1 for NCHW feature maps, the last for [N, C].
  TensorId BiasAdd(TensorId x, TensorId bias);
  /// NumPy broadcasting.
  TensorId Add(TensorId a, TensorId b);
  /// a - b, with NumPy broadcasting.
  TensorId Sub(TensorId a, TensorId b);
  /// a * b, elementwise with NumPy broadcasting.
  TensorId Mul(TensorId a, TensorId b);
  /// a / b, with NumPy broadcasting; IEEE: x / 0 = ±inf, 0 / 0 = NaN
  /// (MindSpore's ops.div).
  TensorId Div(TensorId a, TensorId b);
  /// The larger of a and b, with NumPy broadcasting; NaN where either is
  /// (ops.maximum). Its gradient goes to the larger operand, half to each
  /// at a tie (MindSpore's MaximumGrad).
  TensorId Maximum(TensorId a, TensorId b);
  /// The smaller of a and b, as Maximum (ops.minimum).
  TensorId Minimum(TensorId a, TensorId b);
  /// a ^ b, with NumPy broadcasting (ops.pow); both a and b have gradients
  /// (the exponent's reads log(a) as 0 where a < 0, as MindSpore).
  TensorId Pow(TensorId a, TensorId b);
  /// max(x, 0).
  TensorId Relu(TensorId x);
  TensorId Gelu(TensorId x);  ///< tanh approximation, as MindSpore's GeLU
  /// MindSpore's nn.GELU(approximate): true is Gelu(x), the tanh form;
  /// false the exact x·Φ(x) = x/2·(1 + erf(x/√2)) (op GeluErf).
  TensorId Gelu(TensorId x, bool approximate);
  /// The hyperbolic tangent.
  TensorId Tanh(TensorId x);
  /// 1 / (1 + exp(-x)).
  TensorId Sigmoid(TensorId x);
  /// e^x, elementwise (MindSpore's ops.Exp).
  TensorId Exp(TensorId x);
  /// The natural logarithm; IEEE: log(0) = -inf, log(x < 0) = NaN (ops.Log).
  TensorId Log(TensorId x);
  /// The square root; IEEE: sqrt(x < 0) = NaN (ops.Sqrt).
  TensorId Sqrt(TensorId x);
  /// 1 / sqrt(x); IEEE: rsqrt(0) = inf, rsqrt(x < 0) = NaN (ops.Rsqrt).
  TensorId Rsqrt(TensorId x);
  /// x * x (ops.Square).
  TensorId Square(TensorId x);
  /// |x| (ops.Abs).
  TensorId Abs(TensorId x);
  /// The error function (ops.Erf).
  TensorId Erf(TensorId x);
  /// MindSpore's nn.Dropout(p): in training each element is zeroed with
  /// probability `p` and the kept ones scaled by 1 / (1 - p); eval and
  /// predict pass x through. p must be in [0, 1) (0: the identity, no op).
  /// The mask is a function of (seed, training step, this op, the element's
  /// index in the global tensor), drawn on the device from Philox4x32-10;
  /// see docs/guide/dropout.md.
  TensorId Dropout(TensorId x, float p, uint64_t seed = 0);
  /// softmax along `axis`.
  TensorId Softmax(TensorId x, int axis = -1);
  /// log(softmax(x)) along `axis`.
  TensorId LogSoftmax(TensorId x, int axis = -1);
  /// Mean over the batch of -log softmax(logits)[label]; labels int32 [N].
  TensorId SparseSoftmaxCrossEntropy(TensorId logits, TensorId labels);
  /// Sum over `axes` (empty: all); reduced dims stay as 1 when `keep_dims`.
  TensorId ReduceSum(TensorId x, std::vector<int> axes = {}, bool keep_dims = false);
  /// Mean over `axes` (empty: all); reduced dims stay as 1 when `keep_dims`.
  TensorId ReduceMean(TensorId x, std::vector<int> axes = {}, bool keep_dims = false);
  /// Maximum over `axes` (empty: all); reduced dims stay as 1 when `keep_dims`
  /// (ops.ReduceMax). NaN if any element reduced is NaN. Its gradient goes to
  /// the positions equal to the max, split evenly at a tie (MindSpore's
  /// _min_or_max_grad).
  TensorId ReduceMax(TensorId x, std::vector<int> axes = {}, bool keep_dims = false);
  /// cond ? x : y elementwise, the three broadcast together (ops.select,
  /// Where); cond is f32, nonzero meaning true (the runtime has no bool).
  /// cond gets no gradient; x's is dy where cond, y's where not.
  TensorId Select(TensorId cond, TensorId x, TensorId y);
  /// Causal masking of attention scores [..., T, S] (rank >= 2) without a
  /// materialised mask: element (i, j) of the last two dims becomes `fill`
  /// where j > i + S - T (a key after the query; S - T earlier keys are all
  /// visible), and stays scores[i, j] elsewhere. A masked fill, not an added
  /// -1e4: masked positions are exactly `fill` (use -inf or a large negative).
  TensorId CausalMask(TensorId scores, float fill);
  /// MindSpore's ops.OneHot(axis)(indices, depth, on_value, off_value):
  /// int32 `indices` of rank r -> f32 of rank r + 1 with a new axis of
  /// `depth` at `axis` (in [-1, r]; -1: last). on_value where the position
  /// equals the index, else off_value; an index outside [0, depth) (negative
  /// included) gives a row of off_value (MindSpore's CPU kernel). No gradient.
  TensorId OneHot(TensorId indices, int64_t depth, float on_value = 1.0f, float off_value = 0.0f, int axis = -1);
  /// x padded along each axis (MindSpore's ops.Pad, nn.Pad, ops.pad):
  /// `paddings` holds (before, after) per axis of x, each >= 0. "constant"
  /// fills with `value` (ops.Pad: 0); reflect needs each padding < the
  /// axis's extent, symmetric <= it. The gradient is PadGrad.
  TensorId Pad(TensorId x, std::vector<std::pair<int64_t, int64_t>> paddings, PadMode mode = PadMode::Constant,
               float value = 0.0f);
  TensorId Reshape(TensorId x, Shape shape);  ///< one dim may be -1
  /// x NCHW, w OIHW (MindSpore's layout), symmetric or explicit padding.
  TensorId Conv2D(TensorId x, TensorId w, int stride = 1, int pad = 0);
  /// Conv2D with every attribute (strides, padding of each side, dilations) from `attrs`.
  TensorId Conv2D(TensorId x, TensorId w, const OpAttrs& attrs);
  /// Max pooling of NCHW x: square window `kernel`, `stride`, symmetric padding `pad`.
  TensorId MaxPool2D(TensorId x, int kernel, int stride, int pad = 0);
  /// Average pooling of NCHW x: square window `kernel`, `stride`, symmetric padding `pad`.
  TensorId AvgPool2D(TensorId x, int kernel, int stride, int pad = 0);
  TensorId Flatten(TensorId x);  ///< [N, ...] -> [N, prod(...)]
  /// Normalises x [..., D] over its last axis: (x - mean) * rstd * gamma + beta,
  /// gamma and beta [D], rstd = 1/sqrt(var + epsilon) with the biased
  /// variance (PyTorch, MindSpore). Returns y; the op's other outputs, mean and
  /// rstd per row (f32 [rows]), are what its gradient reads.
  TensorId LayerNorm(TensorId x, TensorId gamma, TensorId beta, float epsilon = 1e-5f);
  /// MindSpore's BatchNorm over channel axis 1 of x [N, C, ...] ([N, C] for
  /// BatchNorm1d, [N, C, H, W] for BatchNorm2d), gamma and beta Params [C],
  /// moving_mean and moving_variance State [C]. Training normalises with the
  /// batch's mean and biased variance and updates, in place,
  /// moving = momentum * moving + (1 - momentum) * batch (the variance's
  /// batch value unbiased, M / (M - 1)); eval and predict normalise with the
  /// moving statistics. `sync` (SyncBatchNorm): under data parallel the
  /// statistics are the whole group's batch. Returns y (outputs 1 and 2, the
  /// batch mean and rstd [C], are what its gradient reads).
  TensorId BatchNorm(TensorId x, TensorId gamma, TensorId beta, TensorId moving_mean, TensorId moving_variance,
                     const BatchNormConfig& config = {});
  /// Rows of table [V, ...] along axis 0 at int32 `indices` [...]: the result
  /// is [..., table dims after 0] (an embedding lookup). An index outside
  /// [0, V) fails the step.
  TensorId Gather(TensorId table, TensorId indices);
  /// x converted to `to`: F32 <-> BF16 (round to nearest even) or the identity.
  TensorId Cast(TensorId x, DType to);
  /// [..., M, K] x [..., K, N] (before the transposes of the last two dims),
  /// batch dims broadcast by NumPy rules; each side has rank >= 2.
  TensorId BatchMatMul(TensorId a, TensorId b, bool transpose_a = false, bool transpose_b = false);
  /// y dim i = x dim perm[i]; perm is a permutation of [0, rank), rank <= 6.
  TensorId Transpose(TensorId x, std::vector<int> perm);
  /// Joins `xs` (same rank, equal dims but `axis`) along `axis` (may be negative).
  TensorId Concat(std::vector<TensorId> xs, int axis = 0);
  /// Cuts x along `axis` into pieces of `sizes` (each >= 1, summing to x's
  /// extent); MindSpore's Split(axis, output_num) with explicit sizes.
  std::vector<TensorId> Split(TensorId x, int axis, std::vector<int64_t> sizes);

  /// Number of rows whose argmax equals the label (eval metric); f32 scalar.
  TensorId ArgMaxAccuracy(TensorId logits, TensorId labels);

  /// Makes `loss` the tensor training minimises.
  void SetLoss(TensorId loss);
  /// Reports `t` from eval besides the loss (outputs()).
  void AddOutput(TensorId t);

  // -- shard strategies (SEMI_AUTO_PARALLEL, docs/design/sharding.md) --------------
  /// Sets the strategy of the op that produced `output` and returns `output`,
  /// so that it chains: g.Shard(g.MatMul(x, w), {{2, 1}, {1, 4}}). One entry
  /// per op input, one value per dim of that input, each >= 1 (MindSpore's
  /// in_strategy); an empty strategy removes the op's. Checks that need the
  /// device count (divisibility, powers of 2, the product) are made when the
  /// graph is compiled. A leaf, an unknown op or a malformed strategy is
  /// recorded in status() with MindSpore's message naming the op.
  TensorId Shard(TensorId output, std::vector<std::vector<int64_t>> strategy);
  /// The same for the op called `op_name` (NameScope's names,
  /// "block0.attn.qkv.matmul").
  void Shard(const std::string& op_name, std::vector<std::vector<int64_t>> strategy);
  /// Index in ops() of the op called `name`, or -1.
  int64_t FindOp(const std::string& name) const;

  /// Marks every BatchNorm of the graph SyncBatchNorm (`sync`) or not
  /// (sinkrun train --sync-bn; docs/guide/normalization.md); returns how
  /// many BatchNorm ops there are.
  size_t SetSyncBatchNorm(bool sync);

  // -- recomputation (MindSpore's cell.recompute(); docs/guide/recompute.md) ------
  /// Marks the ops of layer `layer` (its name scope: "block0", "block0.attn")
  /// for recomputation: the backward pass re-runs them from the layer's
  /// inputs instead of keeping their activations alive since the forward.
  /// "all" marks every op inside a name scope, each top-level layer its own
  /// segment. Call it on the finished forward graph; a layer that names no
  /// op is recorded in status().
  void Recompute(const std::string& layer);

  // -- names ------------------------------------------------------------------
  /// Ops built while a scope is open are named "<scope>.<op>"
  /// ("block0.attn.qkv.matmul"), with "_N" added only on a clash; scopes nest
  /// with '.'. Shard strategies, pipeline stages and profiles refer to layers
  /// by these names. Prefer the RAII NameScope below to these two.
  void PushNameScope(const std::string& name);
  /// Closes the innermost scope.
  void PopNameScope();
  /// The open scope's name: "" or "a.b.c".
  const std::string& name_scope() const { return scope_; }

  // -- low level: used by autodiff, the optimizer pass and graph loading ----
  /// Adds an op whose outputs are new tensors of the given shapes/dtypes.
  /// Output 0 is named after the op, output k "<op>:k"; no shape checks here.
  std::vector<TensorId> AddOp(OpCode op, std::vector<TensorId> inputs, OpAttrs attrs,
                              std::vector<std::pair<Shape, DType>> outputs, std::string name = "");
  /// Adds a tensor made by the caller (a name, kind and initializer of its own).
  TensorId AddTensor(TensorInfo info);
  /// Adds an op that writes tensors made beforehand with AddTensor: a Grad
  /// tensor with its own name and kind, or the tensors of a graph file. A
  /// tensor is written by at most one op, and never a leaf (Input, Param,
  /// Const, OptState: those change only through MutatedInputs).
  void AddOpInto(OpCode op, std::vector<TensorId> inputs, OpAttrs attrs, std::vector<TensorId> outputs,
                 std::string name = "");
  /// Puts op `op` (an index in ops()) in recomputation segment `segment`
  /// (OpNode::recompute): for passes that rebuild a graph op by op.
  void SetOpRecompute(size_t op, std::string segment);
  /// Gives op `op` (an index in ops()) more inputs, appended, and new
  /// attributes: for passes that complete an op in place (dropout's step
  /// counter and global index, passes/dropout.h). Its outputs stay.
  void ExtendOp(size_t op, std::vector<TensorId> more_inputs, OpAttrs attrs);
  /// Index in ops() of the op that writes `t`; -1 for leaves and unwritten tensors.
  int64_t producer(TensorId t) const;
  /// Records the first error; later builder calls become no-ops.
  void Fail(Status status);
  /// Whether `t` is a tensor of this graph.
  bool valid(TensorId t) const { return t < tensors_.size(); }

 private:
  TensorId Unary(OpCode op, TensorId x, const char* name);
  TensorId Broadcasting(OpCode op, TensorId a, TensorId b, const char* name);
  TensorId Reduce(OpCode op, TensorId x, std::vector<int> axes, bool keep_dims);
  TensorId Pool(OpCode op, TensorId x, int kernel, int stride, int pad);
  TensorId AxisOp(OpCode op, TensorId x, int axis, const char* name);  ///< Softmax, LogSoftmax
  std::string UniqueName(const std::string& base);
  /// Name for an op's output: `preferred` when free, else a generated one.
  std::string TensorName(const std::string& preferred);
  /// Records an error naming op `op` called `name`.
  void FailOp(OpCode op, const std::string& name, const std::string& message);
  /// False (after recording why) unless `t` is a tensor of this graph of dtype `want`.
  bool CheckInput(OpCode op, const std::string& name, const char* role, TensorId t, DType want);
  TensorId Leaf(const char* what, const std::string& name, Shape shape, DType dtype, TensorKind kind, InitSpec init);
  bool CheckOpName(const std::string& name);
  bool CheckLogitsLabels(OpCode op, const std::string& name, TensorId logits, TensorId labels);

  std::string name_;
  std::string scope_;                ///< "" or "a.b.c", see PushNameScope
  std::vector<size_t> scope_marks_;  ///< scope_'s length before each push
  Status status_;
  std::vector<TensorInfo> tensors_;
  std::vector<OpNode> ops_;
  TensorId loss_ = kInvalidTensor;
  std::vector<TensorId> outputs_;
  uint64_t name_counter_ = 0;
  std::unordered_map<std::string, TensorId> tensor_names_;
  std::unordered_map<std::string, size_t> op_names_;  ///< name -> index in ops_
  std::vector<int64_t> producer_;                     ///< per tensor, see producer()
};

/// Opens a name scope on `g` for its lifetime:
/// ~~~
///   { NameScope attn(g, "block0.attn"); ... }   // ops named block0.attn.*
/// ~~~
class NameScope {
 public:
  /// Opens scope `name` on `g` until this object is destroyed.
  NameScope(Graph& g, const std::string& name) : g_(g) { g_.PushNameScope(name); }
  ~NameScope() { g_.PopNameScope(); }
  NameScope(const NameScope&) = delete;
  NameScope& operator=(const NameScope&) = delete;

 private:
  Graph& g_;
};

/// MindSpore's nn.BatchNorm1d (x [N, C]) and nn.BatchNorm2d (x [N, C, H, W])
/// as layer `name`: Params "<name>.gamma" (ones) and "<name>.beta" (zeros),
/// State "<name>.moving_mean" (zeros) and "<name>.moving_variance" (ones),
/// and the BatchNorm op in name scope `name`. Returns y.
/// @{
TensorId BatchNorm1d(Graph& g, const std::string& name, TensorId x, const BatchNormConfig& config = {});
TensorId BatchNorm2d(Graph& g, const std::string& name, TensorId x, const BatchNormConfig& config = {});
/// @}

/// A shard strategy as MindSpore prints one: "((2, 4), (4, 1))", a single
/// entry with a trailing comma: "((2, 4),)".
std::string StrategyToString(const std::vector<std::vector<int64_t>>& strategy);

/// Why `strategy` cannot be op `op`'s (an op of `g`): an entry count other
/// than the op's inputs, an entry length other than that input's rank, or a
/// value below 1, in MindSpore's words naming the op and the strategy. The
/// checks Graph::Shard makes, for callers that must not touch the graph's
/// status (a strategy file checked before it is applied).
Status CheckStrategyShape(const Graph& g, const OpNode& op, const std::vector<std::vector<int64_t>>& strategy);

/// NumPy broadcast of two shapes; error names both shapes.
Result<Shape> BroadcastShapes(const Shape& a, const Shape& b);

}  // namespace sinkrt::host
