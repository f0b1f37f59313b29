#include "host/src/parallel/ops_info/op_loops.h"

#include <algorithm>
#include <numeric>

namespace sinkrt::host::parallel {
namespace {

int Normalize(int axis, size_t rank) { return axis < 0 ? axis + static_cast<int>(rank) : axis; }

// One loop per dim of `shape`.
std::vector<int> LoopPerDim(OpLoops& l, const Shape& shape, const std::vector<std::string>& fixed = {}) {
  std::vector<int> dims;
  for (size_t d = 0; d < shape.size(); ++d)
    dims.push_back(l.AddLoop(shape[d], false, d < fixed.size() ? fixed[d] : ""));
  return dims;
}

// `shape` right-aligned against the loops `out` of a broadcast result: a
// dim of 1 under a larger loop is broadcast (-1).
std::vector<int> Aligned(const OpLoops& l, const Shape& shape, const std::vector<int>& out) {
  std::vector<int> dims(shape.size(), -1);
  const size_t skip = out.size() - shape.size();
  for (size_t d = 0; d < shape.size(); ++d) {
    const int loop = out[skip + d];
    dims[d] = shape[d] == l.extents[loop] ? loop : -1;
  }
  return dims;
}

// [M, K] or, transposed, [K, M].
std::vector<int> Matrix(int rows, int cols, bool transposed) {
  return transposed ? std::vector<int>{cols, rows} : std::vector<int>{rows, cols};
}

Result<OpLoops> Unsupported(const OpNode& op) {
  return Unimplemented(op.name + ": " + OpCodeName(op.op) + " has no sharding rule");
}

const Shape& ShapeOf(const Graph& g, TensorId t) { return g.tensor(t).shape; }

// Each op family's loops; x is the op's input 0.

// MatMul.
Result<OpLoops> MatMulLoops(const Graph& g, const OpNode& op, const Shape& x) {
  OpLoops l;
  const OpAttrs& a = op.attrs;
  const Shape& b = ShapeOf(g, op.inputs[1]);
  const int m = l.AddLoop(a.transpose_a ? x[1] : x[0]);
  const int k = l.AddLoop(a.transpose_a ? x[0] : x[1], /*is_reduction=*/true);
  const int n = l.AddLoop(a.transpose_b ? b[0] : b[1]);
  l.inputs = {Matrix(m, k, a.transpose_a), Matrix(k, n, a.transpose_b)};
  l.outputs = {{m, n}};
  return l;
}

// BatchMatMul.
Result<OpLoops> BatchMatMulLoops(const Graph& g, const OpNode& op, const Shape& x) {
  OpLoops l;
  const OpAttrs& a = op.attrs;
  const Shape& b = ShapeOf(g, op.inputs[1]);
  const Shape& y = ShapeOf(g, op.outputs[0]);
  std::vector<int> out;
  for (size_t d = 0; d + 2 < y.size(); ++d) out.push_back(l.AddLoop(y[d]));
  const int m = l.AddLoop(y[y.size() - 2]);
  const int k = l.AddLoop(a.transpose_a ? x[x.size() - 2] : x.back(), /*is_reduction=*/true);
  const int n = l.AddLoop(y.back());
  auto operand = [&](const Shape& s, int rows, int cols, bool transposed) {
    std::vector<int> dims = Aligned(l, Shape(s.begin(), s.end() - 2), out);
    const std::vector<int> last = Matrix(rows, cols, transposed);
    dims.insert(dims.end(), last.begin(), last.end());
    return dims;
  };
  l.inputs = {operand(x, m, k, a.transpose_a), operand(b, k, n, a.transpose_b)};
  out.push_back(m);
  out.push_back(n);
  l.outputs = {out};
  return l;
}

// Add, Sub, Mul, Div, Maximum, Minimum, Pow; Select (cond, x, y).
Result<OpLoops> BroadcastLoops(const Graph& g, const OpNode& op, const Shape& x) {
  OpLoops l;
  const std::vector<int> out = LoopPerDim(l, ShapeOf(g, op.outputs[0]));
  for (TensorId in : op.inputs) l.inputs.push_back(Aligned(l, ShapeOf(g, in), out));
  l.outputs = {out};
  return l;
}

// CausalMask: any split of the leading (batch, head) dims; a block of the
// last two would need its global row and column offsets to place the
// diagonal, which the kernel does not take.
Result<OpLoops> CausalMaskLoops(const Graph& g, const OpNode& op, const Shape& x) {
  OpLoops l;
  std::vector<std::string> fixed(x.size());
  const char* why = "the causal mask places its diagonal by position in the last two dims";
  fixed[x.size() - 2] = why;
  fixed[x.size() - 1] = why;
  const std::vector<int> dims = LoopPerDim(l, x, fixed);
  l.inputs = {dims};
  l.outputs = {dims};
  return l;
}

// OneHot: indices [I...] -> the same with depth inserted at the axis. Any
// index dim splits (each block encodes its own indices); the depth axis
// stays whole, since a block of it would need its offset into the depth,
// which the kernel does not take.
Result<OpLoops> OneHotLoops(const Graph& g, const OpNode& op, const Shape& x) {
  OpLoops l;
  const std::vector<int> idx = LoopPerDim(l, x);
  std::vector<int> out = idx;
  const int axis = op.attrs.one_hot_axis == -1 ? static_cast<int>(x.size()) : op.attrs.one_hot_axis;
  const int depth = l.AddLoop(op.attrs.depth, false, "a block of the depth axis would need its offset into it");
  out.insert(out.begin() + axis, depth);
  l.inputs = {idx};
  l.outputs = {out};
  return l;
}

// Pad: an axis padded on either side stays whole (its block edges would need
// the neighbours' elements, or which block holds the border); the axes it
// leaves alone split freely.
Result<OpLoops> PadLoops(const Graph& g, const OpNode& op, const Shape& x) {
  OpLoops l;
  std::vector<std::string> fixed(x.size());
  const std::vector<int64_t>& p = op.attrs.paddings;
  for (size_t d = 0; d < x.size() && 2 * d + 1 < p.size(); ++d)
    if (p[2 * d] != 0 || p[2 * d + 1] != 0) fixed[d] = "a padded axis needs its borders in one block";
  const std::vector<int> dims = LoopPerDim(l, x, fixed);
  std::vector<int> out = dims;
  for (size_t d = 0; d < x.size(); ++d)
    if (!fixed[d].empty()) out[d] = -1;
  l.inputs = {dims};
  l.outputs = {out};
  return l;
}

// Relu, Gelu, GeluErf, Tanh, Sigmoid, Neg, Exp, Log, Sqrt, Rsqrt, Square,
// Abs, Erf, Cast, Copy (the gather in front of a pipeline stage's Send),
// Dropout (any split: each block draws its elements at their global
// indices, passes/dropout.h).
Result<OpLoops> ElementwiseLoops(const Graph& g, const OpNode& op, const Shape& x) {
  OpLoops l;
  const std::vector<int> dims = LoopPerDim(l, x);
  l.inputs = {dims};
  l.outputs = {dims};
  return l;
}

// BiasAdd.
Result<OpLoops> BiasAddLoops(const Graph& g, const OpNode& op, const Shape& x) {
  OpLoops l;
  const std::vector<int> dims = LoopPerDim(l, x);
  const size_t channel = x.size() >= 3 ? 1 : x.size() - 1;  // as the builder places it
  l.inputs = {dims, {dims[channel]}};
  l.outputs = {dims};
  return l;
}

// Softmax, LogSoftmax.
Result<OpLoops> SoftmaxLoops(const Graph& g, const OpNode& op, const Shape& x) {
  OpLoops l;
  std::vector<std::string> fixed(x.size());
  fixed[Normalize(op.attrs.axis, x.size())] = "it normalises over that axis";
  const std::vector<int> dims = LoopPerDim(l, x, fixed);
  l.inputs = {dims};
  l.outputs = {dims};
  return l;
}

// LayerNorm.
Result<OpLoops> LayerNormLoops(const Graph& g, const OpNode& op, const Shape& x) {
  OpLoops l;
  // mean and rstd are [rows], the leading dims flattened: only dim 0 of
  // them may be split for the rows to stay one block per rank.
  std::vector<std::string> fixed(x.size());
  fixed.back() = "it normalises over the last axis";
  for (size_t d = 1; d + 1 < x.size(); ++d) fixed[d] = "mean and rstd flatten the leading dims";
  const std::vector<int> dims = LoopPerDim(l, x, fixed);
  l.inputs = {dims, {dims.back()}, {dims.back()}};
  const std::vector<int> rows = {x.size() >= 2 ? dims[0] : -1};
  l.outputs = {dims, rows, rows};
  return l;
}

// BatchNorm: x [N, C, ...]; gamma, beta, the moving statistics and the
// batch mean and rstd [C]. A channel split is local. A batch split
// normalises each rank's rows with their own statistics (MindSpore's
// BatchNorm under data parallel), unless the op is sync (SyncBatchNorm:
// the compiler reduces the statistics over the ranks that split the batch).
// The spatial dims stay whole: the statistics cover them.
Result<OpLoops> BatchNormLoops(const Graph& g, const OpNode& op, const Shape& x) {
  OpLoops l;
  std::vector<std::string> fixed(x.size());
  for (size_t d = 2; d < x.size(); ++d) fixed[d] = "its statistics cover every spatial position";
  const std::vector<int> dims = LoopPerDim(l, x, fixed);
  const std::vector<int> c = {dims[1]};
  l.inputs = {dims, c, c, c, c};
  l.outputs = {dims, c, c};
  return l;
}

// ReduceSum, ReduceMean, ReduceMax. A split reduced axis leaves partial
// results that a collective combines; the collectives sum (or average), so
// ReduceMax keeps its reduced axes whole rather than sum partial maxima.
Result<OpLoops> ReduceLoops(const Graph& g, const OpNode& op, const Shape& x) {
  OpLoops l;
  const std::vector<int>& axes = op.attrs.axes;
  const bool max = op.op == OpCode::ReduceMax;
  std::vector<int> in, out;
  for (size_t d = 0; d < x.size(); ++d) {
    const bool reduced = axes.empty() || std::count(axes.begin(), axes.end(), static_cast<int>(d));
    const int loop = l.AddLoop(
        x[d], reduced,
        max && reduced ? "a split reduced axis needs a max over the group, and the collectives only sum" : "");
    in.push_back(loop);
    if (!reduced)
      out.push_back(loop);
    else if (op.attrs.keep_dims)
      out.push_back(-1);
  }
  l.inputs = {in};
  l.outputs = {out};
  l.mean = op.op == OpCode::ReduceMean;
  return l;
}

// SparseSoftmaxCrossEntropy, ArgMaxAccuracy.
Result<OpLoops> LossLoops(const Graph& g, const OpNode& op, const Shape& x) {
  OpLoops l;
  // logits [N, C], labels [N] -> a scalar: the mean loss or the count
  // of correct rows; a split batch leaves it partial.
  const int n = l.AddLoop(x[0], /*is_reduction=*/true);
  const int c = l.AddLoop(x[1], false, "the loss normalises over the classes");
  l.inputs = {{n, c}, {n}};
  l.outputs = {{}};
  l.mean = op.op == OpCode::SparseSoftmaxCrossEntropy;
  return l;
}

// Transpose.
Result<OpLoops> TransposeLoops(const Graph& g, const OpNode& op, const Shape& x) {
  OpLoops l;
  const std::vector<int> dims = LoopPerDim(l, x);
  std::vector<int> out;
  for (int p : op.attrs.perm) out.push_back(dims[p]);
  l.inputs = {dims};
  l.outputs = {out};
  return l;
}

// Gather.
Result<OpLoops> GatherLoops(const Graph& g, const OpNode& op, const Shape& x) {
  OpLoops l;
  // table [V, R...], indices [I...] -> [I..., R...]. A split V would
  // need each rank to mask the rows it does not hold: not done.
  const int v = l.AddLoop(x[0], false, "splitting the table's rows is not supported");
  const std::vector<int> idx = LoopPerDim(l, ShapeOf(g, op.inputs[1]));
  std::vector<int> table = {v}, out = idx;
  for (size_t d = 1; d < x.size(); ++d) {
    table.push_back(l.AddLoop(x[d]));
    out.push_back(table.back());
  }
  l.inputs = {table, idx};
  l.outputs = {out};
  return l;
}

// Concat, Split.
Result<OpLoops> ConcatSplitLoops(const Graph& g, const OpNode& op, const Shape& x) {
  OpLoops l;
  const Shape& whole = op.op == OpCode::Concat ? ShapeOf(g, op.outputs[0]) : x;
  const int axis = Normalize(op.attrs.axis, whole.size());
  std::vector<std::string> fixed(whole.size());
  fixed[axis] = std::string("it ") + (op.op == OpCode::Concat ? "joins" : "cuts") + " along that axis";
  const std::vector<int> dims = LoopPerDim(l, whole, fixed);
  // Every piece has the whole's loops; only the axis's extent differs,
  // and that loop is never split.
  l.inputs.assign(op.inputs.size(), dims);
  l.outputs.assign(op.outputs.size(), dims);
  return l;
}

// Conv2D.
Result<OpLoops> Conv2DLoops(const Graph& g, const OpNode& op, const Shape& x) {
  OpLoops l;
  // x [N, Ci, H, W], w [Co, Ci, Kh, Kw] -> [N, Co, Ho, Wo]. A split of
  // the image would need halo exchange: not done.
  const Shape& w = ShapeOf(g, op.inputs[1]);
  const Shape& y = ShapeOf(g, op.outputs[0]);
  const int n = l.AddLoop(x[0]);
  const int ci = l.AddLoop(x[1], /*is_reduction=*/true);
  const char* halo = "splitting the image needs halo exchange, not supported";
  const int h = l.AddLoop(x[2], false, halo), wd = l.AddLoop(x[3], false, halo);
  const int co = l.AddLoop(w[0]);
  const int kh = l.AddLoop(w[2], false, halo), kw = l.AddLoop(w[3], false, halo);
  l.inputs = {{n, ci, h, wd}, {co, ci, kh, kw}};
  l.outputs = {{n, co, y[2] == x[2] ? h : -1, y[3] == x[3] ? wd : -1}};
  return l;
}

// MaxPool2D, AvgPool2D.
Result<OpLoops> PoolLoops(const Graph& g, const OpNode& op, const Shape& x) {
  OpLoops l;
  const char* halo = "splitting the image needs halo exchange, not supported";
  // MaxPool2D's output 1 is its argmax workspace, one flat dim in y's
  // order: a split of the batch cuts it into the ranks' blocks, a split
  // of the channels would not be one block per rank.
  const bool max = op.op == OpCode::MaxPool2D;
  const std::vector<int> dims =
      LoopPerDim(l, x, {"", max ? "the argmax workspace is flat: only the batch may be split" : "", halo, halo});
  const Shape& y = ShapeOf(g, op.outputs[0]);
  l.inputs = {dims};
  l.outputs = {{dims[0], dims[1], y[2] == x[2] ? dims[2] : -1, y[3] == x[3] ? dims[3] : -1}};
  if (max) l.outputs.push_back({dims[0]});
  return l;
}

}  // namespace

int OpLoops::AddLoop(int64_t extent, bool is_reduction, std::string fixed_because) {
  extents.push_back(extent);
  reduction.push_back(is_reduction);
  fixed.push_back(std::move(fixed_because));
  return static_cast<int>(extents.size()) - 1;
}

Result<OpLoops> LoopsOf(const Graph& g, const OpNode& op) {
  const Shape& x = ShapeOf(g, op.inputs[0]);
  switch (op.op) {
    case OpCode::MatMul:
      return MatMulLoops(g, op, x);
    case OpCode::BatchMatMul:
      return BatchMatMulLoops(g, op, x);
    case OpCode::Add:
    case OpCode::Sub:
    case OpCode::Mul:
    case OpCode::Div:
    case OpCode::Maximum:
    case OpCode::Minimum:
    case OpCode::Pow:
    case OpCode::Select:
      return BroadcastLoops(g, op, x);
    case OpCode::CausalMask:
      return CausalMaskLoops(g, op, x);
    case OpCode::OneHot:
      return OneHotLoops(g, op, x);
    case OpCode::Pad:
      return PadLoops(g, op, x);
    case OpCode::Relu:
    case OpCode::Gelu:
    case OpCode::Tanh:
    case OpCode::Sigmoid:
    case OpCode::Neg:
    case OpCode::Exp:
    case OpCode::Log:
    case OpCode::Sqrt:
    case OpCode::Rsqrt:
    case OpCode::Square:
    case OpCode::Abs:
    case OpCode::Erf:
    case OpCode::GeluErf:
    case OpCode::Dropout:
    case OpCode::Cast:
    case OpCode::Copy:
      return ElementwiseLoops(g, op, x);
    case OpCode::BiasAdd:
      return BiasAddLoops(g, op, x);
    case OpCode::Softmax:
    case OpCode::LogSoftmax:
      return SoftmaxLoops(g, op, x);
    case OpCode::LayerNorm:
      return LayerNormLoops(g, op, x);
    case OpCode::BatchNorm:
      return BatchNormLoops(g, op, x);
    case OpCode::ReduceSum:
    case OpCode::ReduceMean:
    case OpCode::ReduceMax:
      return ReduceLoops(g, op, x);
    case OpCode::SparseSoftmaxCrossEntropy:
    case OpCode::ArgMaxAccuracy:
      return LossLoops(g, op, x);
    case OpCode::Transpose:
      return TransposeLoops(g, op, x);
    case OpCode::Gather:
      return GatherLoops(g, op, x);
    case OpCode::Concat:
    case OpCode::Split:
      return ConcatSplitLoops(g, op, x);
    case OpCode::Conv2D:
      return Conv2DLoops(g, op, x);
    case OpCode::MaxPool2D:
    case OpCode::AvgPool2D:
      return PoolLoops(g, op, x);
    default:
      return Unsupported(op);
  }
}

}  // namespace sinkrt::host::parallel
