// Forward ops in graph files: which ones, their arity, and the builder call
// that checks and infers each.
#include "host/src/graph/file/graph_file_internal.h"

namespace sinkrt::host::graph_file {
namespace {

std::string OpName(OpCode op) {
  const char* n = OpCodeName(op);
  return (n && *n) ? n : "OpCode(" + std::to_string(static_cast<int>(op)) + ")";
}

// The builder says "MatMul 'matmul_7': ..."; the generated name means
// nothing to the author of a file, who is told the file's op instead.
Status WithoutGeneratedName(OpCode op, const Status& s) {
  const std::string prefix = OpName(op) + " '";
  const std::string& m = s.message();
  if (m.rfind(prefix, 0) != 0) return s;
  const size_t end = m.find("': ", prefix.size());
  if (end == std::string::npos) return s;
  return Status(s.code(), OpName(op) + ": " + m.substr(end + 3));
}

// -1 when `axis` is outside [-rank, rank).
int NormalizeAxis(int axis, size_t rank) {
  const int r = static_cast<int>(rank);
  if (axis < -r || axis >= r) return -1;
  return axis < 0 ? axis + r : axis;
}

// The builder's pools take one kernel, stride and pad for both axes.
Status CheckSquarePool(OpCode op, const OpAttrs& a) {
  if (a.kernel_h == a.kernel_w && a.stride_h == a.stride_w && a.pad_top == a.pad_bottom && a.pad_top == a.pad_left &&
      a.pad_top == a.pad_right)
    return Status::Ok();
  return InvalidArgument(
      "field 'options': " + OpName(op) + " takes one kernel, stride and pad for both axes, got kernel [" +
      std::to_string(a.kernel_h) + "," + std::to_string(a.kernel_w) + "], stride [" + std::to_string(a.stride_h) + "," +
      std::to_string(a.stride_w) + "], pads [" + std::to_string(a.pad_top) + "," + std::to_string(a.pad_bottom) + "," +
      std::to_string(a.pad_left) + "," + std::to_string(a.pad_right) + "]");
}

}  // namespace

bool IsForwardOp(OpCode op) {
  const auto v = static_cast<int>(op);
  // The forward family is schemas/common.fbs's range from MatMul up to the
  // gradient helpers (ReluGrad = 40); its values are appended in that gap.
  return (v >= static_cast<int>(OpCode::MatMul) && v < static_cast<int>(OpCode::ReluGrad)) ||
         op == OpCode::ArgMaxAccuracy || op == OpCode::Dropout || op == OpCode::BatchNorm || op == OpCode::Select ||
         op == OpCode::CausalMask || op == OpCode::OneHot || op == OpCode::Pad;
}

size_t ForwardArity(OpCode op) {
  switch (op) {
    case OpCode::MatMul:
    case OpCode::BiasAdd:
    case OpCode::Add:
    case OpCode::Sub:
    case OpCode::Mul:
    case OpCode::Div:
    case OpCode::Maximum:
    case OpCode::Minimum:
    case OpCode::Pow:
    case OpCode::SparseSoftmaxCrossEntropy:
    case OpCode::Conv2D:
    case OpCode::ArgMaxAccuracy:
    case OpCode::BatchMatMul:
    case OpCode::Gather:
      return 2;
    case OpCode::LayerNorm:
    case OpCode::Select:
      return 3;
    case OpCode::BatchNorm:
      return 5;
    case OpCode::Concat:
      return kAnyArity;
    default:
      return 1;
  }
}

namespace {

// The elementwise ops, unary and binary (no attributes): whether `op` is one.
bool AddElementwiseOp(Graph& g, OpCode op, const std::vector<TensorId>& in) {
  switch (op) {
    case OpCode::Add:
      g.Add(in[0], in[1]);
      break;
    case OpCode::Sub:
      g.Sub(in[0], in[1]);
      break;
    case OpCode::Mul:
      g.Mul(in[0], in[1]);
      break;
    case OpCode::Div:
      g.Div(in[0], in[1]);
      break;
    case OpCode::Maximum:
      g.Maximum(in[0], in[1]);
      break;
    case OpCode::Minimum:
      g.Minimum(in[0], in[1]);
      break;
    case OpCode::Pow:
      g.Pow(in[0], in[1]);
      break;
    case OpCode::Relu:
      g.Relu(in[0]);
      break;
    case OpCode::Gelu:
      g.Gelu(in[0]);
      break;
    case OpCode::Tanh:
      g.Tanh(in[0]);
      break;
    case OpCode::Sigmoid:
      g.Sigmoid(in[0]);
      break;
    case OpCode::Exp:
      g.Exp(in[0]);
      break;
    case OpCode::Log:
      g.Log(in[0]);
      break;
    case OpCode::Sqrt:
      g.Sqrt(in[0]);
      break;
    case OpCode::Rsqrt:
      g.Rsqrt(in[0]);
      break;
    case OpCode::Square:
      g.Square(in[0]);
      break;
    case OpCode::Abs:
      g.Abs(in[0]);
      break;
    case OpCode::Erf:
      g.Erf(in[0]);
      break;
    case OpCode::GeluErf:
      g.Gelu(in[0], /*approximate=*/false);
      break;
    default:
      return false;
  }
  return true;
}

// Dropout from a file: the file's op id keeps the masks of the graph that
// was saved (0: written by hand, the builder's hash of the op's name
// stands), and a file's p = 0 is an op that keeps everything (the builder
// makes none).
void AddDropout(Graph& g, TensorId x, const OpAttrs& a) {
  const TensorId y = g.Dropout(x, a.dropout_p, a.dropout_seed);
  if (!g.status().ok()) return;
  if (y == x) {
    OpAttrs keep_all = a;
    keep_all.dropout_global_shape.clear();
    keep_all.dropout_offset.clear();
    keep_all.dropout_row_stride = 1;
    g.AddOp(OpCode::Dropout, {x}, std::move(keep_all), {{g.tensor(x).shape, DType::F32}});
  } else if (a.dropout_op_id != 0) {
    const size_t last = g.ops().size() - 1;
    OpAttrs kept = g.ops()[last].attrs;
    kept.dropout_op_id = a.dropout_op_id;
    g.ExtendOp(last, {}, std::move(kept));
  }
}

// PadOptions.paddings is flat: (before, after) per axis.
Status AddPad(Graph& g, TensorId x, const OpAttrs& a) {
  if (a.paddings.size() % 2 != 0) {
    return InvalidArgument("Pad: PadOptions.paddings has " + std::to_string(a.paddings.size()) +
                           " values, expected a (before, after) pair per axis");
  }
  std::vector<std::pair<int64_t, int64_t>> pairs;
  for (size_t i = 0; i < a.paddings.size(); i += 2) pairs.emplace_back(a.paddings[i], a.paddings[i + 1]);
  g.Pad(x, std::move(pairs), a.pad_mode, a.value);
  return Status::Ok();
}

// The builder's error, or that it added exactly one op.
Status CheckAdded(const Graph& g, OpCode op, size_t before) {
  if (!g.status().ok()) return WithoutGeneratedName(op, g.status());
  if (g.ops().size() != before + 1) return Internal(OpName(op) + ": the builder added no op");
  return Status::Ok();
}

}  // namespace

Status AddForwardOp(Graph& g, OpCode op, const std::vector<TensorId>& in, const OpAttrs& a, const Shape& target) {
  const size_t before = g.ops().size();
  if (AddElementwiseOp(g, op, in)) return CheckAdded(g, op, before);
  switch (op) {
    case OpCode::MatMul:
      g.MatMul(in[0], in[1], a.transpose_a, a.transpose_b);
      break;
    case OpCode::BiasAdd:
      g.BiasAdd(in[0], in[1]);
      break;
    case OpCode::BatchNorm:
      g.BatchNorm(in[0], in[1], in[2], in[3], in[4],
                  {.eps = a.layer_norm_epsilon, .momentum = a.bn_momentum, .sync = a.bn_sync});
      break;
    case OpCode::Dropout:
      AddDropout(g, in[0], a);
      break;
    case OpCode::Softmax:
      g.Softmax(in[0], a.axis);
      break;
    case OpCode::LogSoftmax:
      g.LogSoftmax(in[0], a.axis);
      break;
    case OpCode::SparseSoftmaxCrossEntropy:
      g.SparseSoftmaxCrossEntropy(in[0], in[1]);
      break;
    case OpCode::ReduceSum:
      g.ReduceSum(in[0], a.axes, a.keep_dims);
      break;
    case OpCode::ReduceMean:
      g.ReduceMean(in[0], a.axes, a.keep_dims);
      break;
    case OpCode::ReduceMax:
      g.ReduceMax(in[0], a.axes, a.keep_dims);
      break;
    case OpCode::Select:
      g.Select(in[0], in[1], in[2]);
      break;
    case OpCode::CausalMask:
      g.CausalMask(in[0], a.value);
      break;
    case OpCode::OneHot:
      g.OneHot(in[0], a.depth, a.on_value, a.off_value, a.one_hot_axis);
      break;
    case OpCode::Pad:
      SINKRT_RETURN_IF_ERROR(AddPad(g, in[0], a));
      break;
    case OpCode::Reshape:
      g.Reshape(in[0], target);
      break;
    case OpCode::Conv2D:
      g.Conv2D(in[0], in[1], a);
      break;
    case OpCode::MaxPool2D:
    case OpCode::AvgPool2D:
      SINKRT_RETURN_IF_ERROR(CheckSquarePool(op, a));
      if (op == OpCode::MaxPool2D) {
        g.MaxPool2D(in[0], a.kernel_h, a.stride_h, a.pad_top);
      } else {
        g.AvgPool2D(in[0], a.kernel_h, a.stride_h, a.pad_top);
      }
      break;
    case OpCode::Flatten:
      g.Flatten(in[0]);
      break;
    case OpCode::ArgMaxAccuracy:
      g.ArgMaxAccuracy(in[0], in[1]);
      break;
    case OpCode::LayerNorm:
      g.LayerNorm(in[0], in[1], in[2], a.layer_norm_epsilon);
      break;
    case OpCode::Gather:
      g.Gather(in[0], in[1]);
      break;
    case OpCode::Cast:
      g.Cast(in[0], a.cast_to);
      break;
    case OpCode::BatchMatMul:
      g.BatchMatMul(in[0], in[1], a.transpose_a, a.transpose_b);
      break;
    case OpCode::Transpose:
      g.Transpose(in[0], a.perm);
      break;
    case OpCode::Concat:
      g.Concat(in, a.axis);
      break;
    case OpCode::Split:
      g.Split(in[0], a.axis, a.sizes);
      break;
    default:
      return InvalidArgument(OpName(op) + " is not a forward op");
  }
  SINKRT_RETURN_IF_ERROR(CheckAdded(g, op, before));
  // BiasAdd takes its channel axis from x's rank; a file may spell it (-1:
  // the schema default, "the channel axis") but not contradict it.
  if (op == OpCode::BiasAdd && a.axis != -1) {
    const int derived = g.ops().back().attrs.axis;
    const size_t rank = g.tensor(in[0]).shape.size();
    if (NormalizeAxis(a.axis, rank) != derived)
      return InvalidArgument("field 'options': BiasAdd adds along the channel axis " + std::to_string(derived) +
                             " of x " + ShapeToString(g.tensor(in[0]).shape) + ", got axis " + std::to_string(a.axis));
  }
  return Status::Ok();
}

}  // namespace sinkrt::host::graph_file
