#include "sinkrt/host/graph.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <utility>

namespace sinkrt::host {
namespace {

std::string OpCodeName(fb::OpCode op) {
  const char* n = fb::EnumNameOpCode(op);
  return (n && *n) ? n : "OpCode(" + std::to_string(static_cast<int>(op)) + ")";
}

// "matmul" for MatMul: the base of generated op names.
std::string LowerName(fb::OpCode op) {
  std::string s = OpCodeName(op);
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

const char* KindName(TensorKind k) {
  switch (k) {
    case TensorKind::Intermediate: return "Intermediate";
    case TensorKind::Input: return "Input";
    case TensorKind::Param: return "Param";
    case TensorKind::Const: return "Const";
    case TensorKind::Grad: return "Grad";
    case TensorKind::OptState: return "OptState";
  }
  return "?";
}

bool IsLeaf(TensorKind k) {
  return k == TensorKind::Input || k == TensorKind::Param || k == TensorKind::Const ||
         k == TensorKind::OptState;
}

// "f32 [64,10] 'matmul_3'": what an error says about a tensor it rejects.
std::string Describe(const TensorInfo& t) {
  return std::string(DTypeName(t.dtype)) + " " + ShapeToString(t.shape) + " '" + t.name + "'";
}

std::string AxisRange(size_t rank) {
  const int r = static_cast<int>(rank);
  std::string s = "[";
  s += std::to_string(-r);
  s += ", ";
  s += std::to_string(r);
  s += ")";
  return s;
}

// -1 when `axis` is outside [-rank, rank).
int NormalizeAxis(int axis, size_t rank) {
  const int r = static_cast<int>(rank);
  if (axis < -r || axis >= r) return -1;
  return axis < 0 ? axis + r : axis;
}

}  // namespace

// -- InitSpec -----------------------------------------------------------------

InitSpec InitSpec::Constant(float v) {
  InitSpec s;
  s.kind = fb::InitKind::Constant;
  s.value = v;
  return s;
}

InitSpec InitSpec::Uniform(float low, float high, uint64_t seed) {
  InitSpec s;
  s.kind = fb::InitKind::Uniform;
  s.low = low;
  s.high = high;
  s.seed = seed;
  return s;
}

InitSpec InitSpec::Normal(float mean, float stddev, uint64_t seed) {
  InitSpec s;
  s.kind = fb::InitKind::Normal;
  s.mean = mean;
  s.stddev = stddev;
  s.seed = seed;
  return s;
}

static InitSpec Seeded(fb::InitKind kind, uint64_t seed) {
  InitSpec s;
  s.kind = kind;
  s.seed = seed;
  return s;
}

InitSpec InitSpec::XavierUniform(uint64_t seed) { return Seeded(fb::InitKind::XavierUniform, seed); }
InitSpec InitSpec::XavierNormal(uint64_t seed) { return Seeded(fb::InitKind::XavierNormal, seed); }
InitSpec InitSpec::HeUniform(uint64_t seed) { return Seeded(fb::InitKind::HeUniform, seed); }
InitSpec InitSpec::HeNormal(uint64_t seed) { return Seeded(fb::InitKind::HeNormal, seed); }

InitSpec InitSpec::Inline(std::vector<float> values) {
  InitSpec s;
  s.kind = fb::InitKind::Inline;
  s.data.resize(values.size() * sizeof(float));
  if (!values.empty()) std::memcpy(s.data.data(), values.data(), s.data.size());
  return s;
}

// -- free functions -----------------------------------------------------------

std::vector<size_t> MutatedInputs(fb::OpCode op) {
  switch (op) {
    case fb::OpCode::SgdUpdate: return {0};
    case fb::OpCode::MomentumUpdate: return {0, 2};
    case fb::OpCode::AdamUpdate: return {0, 2, 3};
    case fb::OpCode::AdamPowers: return {0};
    default: return {};
  }
}

Result<Shape> BroadcastShapes(const Shape& a, const Shape& b) {
  const size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    // Shapes align at their last axis; missing leading axes count as 1.
    const int64_t da = i + a.size() < rank ? 1 : a[i + a.size() - rank];
    const int64_t db = i + b.size() < rank ? 1 : b[i + b.size() - rank];
    if (da == db || db == 1) {
      out[i] = da;
    } else if (da == 1) {
      out[i] = db;
    } else {
      return InvalidArgument("operands could not be broadcast together with shapes " +
                             ShapeToString(a) + " and " + ShapeToString(b) + " (" +
                             std::to_string(da) + " vs " + std::to_string(db) +
                             " at broadcast axis " + std::to_string(i) + ")");
    }
  }
  return out;
}

// -- bookkeeping ----------------------------------------------------------------

TensorId Graph::FindTensor(const std::string& name) const {
  auto it = tensor_names_.find(name);
  return it == tensor_names_.end() ? kInvalidTensor : it->second;
}

int64_t Graph::producer(TensorId t) const { return valid(t) ? producer_[t] : -1; }

void Graph::Fail(Status status) {
  if (status_.ok() && !status.ok()) status_ = std::move(status);
}

void Graph::FailOp(fb::OpCode op, const std::string& name, const std::string& message) {
  Fail(InvalidArgument(OpCodeName(op) + " '" + name + "': " + message));
}

std::string Graph::UniqueName(const std::string& base) {
  for (;;) {
    std::string n = base + "_" + std::to_string(name_counter_++);
    if (!tensor_names_.count(n) && !op_names_.count(n)) return n;
  }
}

std::string Graph::TensorName(const std::string& preferred) {
  if (!preferred.empty() && !tensor_names_.count(preferred)) return preferred;
  return UniqueName(preferred.empty() ? "t" : preferred);
}

bool Graph::CheckOpName(const std::string& name) {
  if (op_names_.count(name)) {
    Fail(InvalidArgument("op name '" + name + "' is already used"));
    return false;
  }
  return true;
}

bool Graph::CheckInput(fb::OpCode op, const std::string& name, const char* role, TensorId t,
                       DType want) {
  if (!valid(t)) {
    FailOp(op, name, std::string(role) + " is not a tensor of this graph (id " +
                         std::to_string(t) + ")");
    return false;
  }
  if (tensors_[t].dtype != want) {
    FailOp(op, name, std::string(role) + " must be " + DTypeName(want) + ", got " +
                         Describe(tensors_[t]));
    return false;
  }
  return true;
}

TensorId Graph::AddTensor(TensorInfo info) {
  if (!status_.ok()) return kInvalidTensor;
  if (info.name.empty()) info.name = UniqueName("t");
  if (auto it = tensor_names_.find(info.name); it != tensor_names_.end()) {
    Fail(InvalidArgument("tensor name '" + info.name + "' is already used by " +
                         KindName(tensors_[it->second].kind) + " tensor " +
                         std::to_string(it->second)));
    return kInvalidTensor;
  }
  if (DTypeSize(info.dtype) == 0) {
    Fail(InvalidArgument("tensor '" + info.name + "': invalid dtype " +
                         std::to_string(static_cast<int>(info.dtype))));
    return kInvalidTensor;
  }
  if (NumElements(info.shape) < 0) {
    Fail(InvalidArgument("tensor '" + info.name + "': shape " + ShapeToString(info.shape) +
                         " has a negative dimension or too many elements"));
    return kInvalidTensor;
  }
  const TensorId id = static_cast<TensorId>(tensors_.size());
  tensor_names_.emplace(info.name, id);
  tensors_.push_back(std::move(info));
  producer_.push_back(-1);
  return id;
}

std::vector<TensorId> Graph::AddOp(fb::OpCode op, std::vector<TensorId> inputs, OpAttrs attrs,
                                   std::vector<std::pair<Shape, DType>> outputs,
                                   std::string name) {
  std::vector<TensorId> ids(outputs.size(), kInvalidTensor);
  if (!status_.ok()) return ids;
  if (name.empty()) {
    name = UniqueName(LowerName(op));
  } else if (!CheckOpName(name)) {
    return ids;
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!valid(inputs[i])) {
      FailOp(op, name, "input " + std::to_string(i) + " is not a tensor of this graph (id " +
                           std::to_string(inputs[i]) + ")");
      return ids;
    }
  }
  // Check every output before creating any, so a failure leaves no orphans.
  for (size_t k = 0; k < outputs.size(); ++k) {
    if (DTypeSize(outputs[k].second) == 0 || NumElements(outputs[k].first) < 0) {
      FailOp(op, name, "output " + std::to_string(k) + " has an invalid dtype or shape " +
                           ShapeToString(outputs[k].first));
      return ids;
    }
  }
  const int64_t op_index = static_cast<int64_t>(ops_.size());
  for (size_t k = 0; k < outputs.size(); ++k) {
    TensorInfo t;
    t.name = TensorName(k == 0 ? name : name + ":" + std::to_string(k));
    t.dtype = outputs[k].second;
    t.shape = std::move(outputs[k].first);
    t.kind = TensorKind::Intermediate;
    t.init.kind = fb::InitKind::None;
    ids[k] = AddTensor(std::move(t));
    if (ids[k] == kInvalidTensor) return ids;
    producer_[ids[k]] = op_index;
  }
  op_names_.insert(name);
  ops_.push_back(OpNode{std::move(name), op, std::move(inputs), ids, std::move(attrs)});
  return ids;
}

void Graph::AddOpInto(fb::OpCode op, std::vector<TensorId> inputs, OpAttrs attrs,
                      std::vector<TensorId> outputs, std::string name) {
  if (!status_.ok()) return;
  if (name.empty()) {
    name = UniqueName(LowerName(op));
  } else if (!CheckOpName(name)) {
    return;
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!valid(inputs[i])) {
      FailOp(op, name, "input " + std::to_string(i) + " is not a tensor of this graph (id " +
                           std::to_string(inputs[i]) + ")");
      return;
    }
  }
  for (size_t k = 0; k < outputs.size(); ++k) {
    const TensorId t = outputs[k];
    if (!valid(t)) {
      FailOp(op, name, "output " + std::to_string(k) + " is not a tensor of this graph (id " +
                           std::to_string(t) + ")");
      return;
    }
    if (IsLeaf(tensors_[t].kind)) {
      FailOp(op, name, "output " + std::to_string(k) + " is " + KindName(tensors_[t].kind) +
                           " tensor '" + tensors_[t].name + "', which no op may write");
      return;
    }
    if (producer_[t] >= 0) {
      FailOp(op, name, "output " + std::to_string(k) + " '" + tensors_[t].name +
                           "' is already written by op '" + ops_[producer_[t]].name + "'");
      return;
    }
    if (std::find(outputs.begin(), outputs.begin() + k, t) != outputs.begin() + k) {
      FailOp(op, name, "tensor '" + tensors_[t].name + "' is listed twice as an output");
      return;
    }
  }
  const int64_t op_index = static_cast<int64_t>(ops_.size());
  for (TensorId t : outputs) producer_[t] = op_index;
  op_names_.insert(name);
  ops_.push_back(OpNode{std::move(name), op, std::move(inputs), std::move(outputs), std::move(attrs)});
}

// -- leaves -------------------------------------------------------------------

TensorId Graph::Leaf(const char* what, const std::string& name, Shape shape, DType dtype,
                     TensorKind kind, InitSpec init) {
  if (!status_.ok()) return kInvalidTensor;
  const std::string who = std::string(what) + " '" + name + "': ";
  if (name.empty()) {
    Fail(InvalidArgument(std::string(what) + ": name must not be empty"));
    return kInvalidTensor;
  }
  if (auto it = tensor_names_.find(name); it != tensor_names_.end()) {
    Fail(InvalidArgument(who + "name is already used by " + KindName(tensors_[it->second].kind) +
                         " tensor " + std::to_string(it->second)));
    return kInvalidTensor;
  }
  for (int64_t d : shape) {
    if (d <= 0) {
      Fail(InvalidArgument(who + "shape " + ShapeToString(shape) +
                           " must have positive dimensions"));
      return kInvalidTensor;
    }
  }
  const int64_t numel = NumElements(shape);
  if (numel < 0) {
    Fail(InvalidArgument(who + "shape " + ShapeToString(shape) + " has too many elements"));
    return kInvalidTensor;
  }
  if (kind == TensorKind::Input) {
    if (dtype != DType::F32 && dtype != DType::I32) {
      Fail(InvalidArgument(who + "dtype must be f32 (features) or i32 (labels), got " +
                           DTypeName(dtype)));
      return kInvalidTensor;
    }
    init = InitSpec{};
    init.kind = fb::InitKind::None;  // filled by GetNext, never by init
  } else {
    switch (init.kind) {
      case fb::InitKind::Zeros:
      case fb::InitKind::Constant:
      case fb::InitKind::XavierUniform:
      case fb::InitKind::XavierNormal:
      case fb::InitKind::HeUniform:
      case fb::InitKind::HeNormal:
        break;
      case fb::InitKind::Uniform:
        if (!(init.low <= init.high)) {
          Fail(InvalidArgument(who + "Uniform initialiser needs low <= high, got [" +
                               std::to_string(init.low) + ", " + std::to_string(init.high) + ")"));
          return kInvalidTensor;
        }
        break;
      case fb::InitKind::Normal:
        if (!(init.stddev >= 0)) {
          Fail(InvalidArgument(who + "Normal initialiser needs stddev >= 0, got " +
                               std::to_string(init.stddev)));
          return kInvalidTensor;
        }
        break;
      case fb::InitKind::Inline:
        if (init.data.size() != static_cast<size_t>(numel) * sizeof(float)) {
          Fail(InvalidArgument(who + "Inline initialiser has " +
                               std::to_string(init.data.size() / sizeof(float)) +
                               " values, shape " + ShapeToString(shape) + " needs " +
                               std::to_string(numel)));
          return kInvalidTensor;
        }
        break;
      default:
        Fail(InvalidArgument(who + "needs an initialiser (InitSpec::Zeros(), HeUniform(), ...)"));
        return kInvalidTensor;
    }
  }
  TensorInfo t;
  t.name = name;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.kind = kind;
  t.init = std::move(init);
  return AddTensor(std::move(t));
}

TensorId Graph::Input(const std::string& name, Shape shape, DType dtype) {
  return Leaf("Input", name, std::move(shape), dtype, TensorKind::Input, InitSpec{});
}

TensorId Graph::Param(const std::string& name, Shape shape, InitSpec init) {
  return Leaf("Param", name, std::move(shape), DType::F32, TensorKind::Param, std::move(init));
}

TensorId Graph::Const(const std::string& name, Shape shape, InitSpec init) {
  return Leaf("Const", name, std::move(shape), DType::F32, TensorKind::Const, std::move(init));
}

// -- forward ops ----------------------------------------------------------------

TensorId Graph::MatMul(TensorId a, TensorId b, bool transpose_a, bool transpose_b) {
  if (!status_.ok()) return kInvalidTensor;
  constexpr auto op = fb::OpCode::MatMul;
  const std::string name = UniqueName("matmul");
  if (!CheckInput(op, name, "a", a, DType::F32) || !CheckInput(op, name, "b", b, DType::F32))
    return kInvalidTensor;
  const Shape sa = tensors_[a].shape, sb = tensors_[b].shape;
  if (sa.size() != 2 || sb.size() != 2) {
    FailOp(op, name, std::string(sa.size() != 2 ? "a" : "b") + " must be 2-D, got " +
                         ShapeToString(sa.size() != 2 ? sa : sb));
    return kInvalidTensor;
  }
  const int64_t m = transpose_a ? sa[1] : sa[0], ka = transpose_a ? sa[0] : sa[1];
  const int64_t kb = transpose_b ? sb[1] : sb[0], n = transpose_b ? sb[0] : sb[1];
  if (ka != kb) {
    FailOp(op, name, "inner dimensions differ: a is " + ShapeToString(sa) +
                         (transpose_a ? " transposed" : "") + " (K=" + std::to_string(ka) +
                         "), b is " + ShapeToString(sb) + (transpose_b ? " transposed" : "") +
                         " (K=" + std::to_string(kb) + ")");
    return kInvalidTensor;
  }
  OpAttrs attrs;
  attrs.transpose_a = transpose_a;
  attrs.transpose_b = transpose_b;
  return AddOp(op, {a, b}, attrs, {{{m, n}, DType::F32}}, name)[0];
}

TensorId Graph::BiasAdd(TensorId x, TensorId bias) {
  if (!status_.ok()) return kInvalidTensor;
  constexpr auto op = fb::OpCode::BiasAdd;
  const std::string name = UniqueName("biasadd");
  if (!CheckInput(op, name, "x", x, DType::F32) || !CheckInput(op, name, "bias", bias, DType::F32))
    return kInvalidTensor;
  const Shape sx = tensors_[x].shape, sb = tensors_[bias].shape;
  if (sx.size() < 2) {
    FailOp(op, name, "x must have rank >= 2 ([N,C] or NCHW), got " + ShapeToString(sx));
    return kInvalidTensor;
  }
  // NCHW feature maps carry channels on axis 1; a [N, C] matrix on its last.
  const int axis = sx.size() >= 3 ? 1 : static_cast<int>(sx.size()) - 1;
  if (sb.size() != 1 || sb[0] != sx[axis]) {
    FailOp(op, name, "bias must be [C] = [" + std::to_string(sx[axis]) + "] for x " +
                         ShapeToString(sx) + " (channel axis " + std::to_string(axis) +
                         "), got " + ShapeToString(sb));
    return kInvalidTensor;
  }
  OpAttrs attrs;
  attrs.axis = axis;
  return AddOp(op, {x, bias}, attrs, {{sx, DType::F32}}, name)[0];
}

TensorId Graph::Broadcasting(fb::OpCode op, TensorId a, TensorId b, const char* base) {
  if (!status_.ok()) return kInvalidTensor;
  const std::string name = UniqueName(base);
  if (!CheckInput(op, name, "a", a, DType::F32) || !CheckInput(op, name, "b", b, DType::F32))
    return kInvalidTensor;
  Result<Shape> shape = BroadcastShapes(tensors_[a].shape, tensors_[b].shape);
  if (!shape.ok()) {
    FailOp(op, name, shape.status().message());
    return kInvalidTensor;
  }
  return AddOp(op, {a, b}, OpAttrs{}, {{std::move(shape).value(), DType::F32}}, name)[0];
}

TensorId Graph::Add(TensorId a, TensorId b) { return Broadcasting(fb::OpCode::Add, a, b, "add"); }
TensorId Graph::Sub(TensorId a, TensorId b) { return Broadcasting(fb::OpCode::Sub, a, b, "sub"); }
TensorId Graph::Mul(TensorId a, TensorId b) { return Broadcasting(fb::OpCode::Mul, a, b, "mul"); }

TensorId Graph::Unary(fb::OpCode op, TensorId x, const char* base) {
  if (!status_.ok()) return kInvalidTensor;
  const std::string name = UniqueName(base);
  if (!CheckInput(op, name, "x", x, DType::F32)) return kInvalidTensor;
  Shape shape = tensors_[x].shape;
  return AddOp(op, {x}, OpAttrs{}, {{std::move(shape), DType::F32}}, name)[0];
}

TensorId Graph::Relu(TensorId x) { return Unary(fb::OpCode::Relu, x, "relu"); }
TensorId Graph::Gelu(TensorId x) { return Unary(fb::OpCode::Gelu, x, "gelu"); }
TensorId Graph::Tanh(TensorId x) { return Unary(fb::OpCode::Tanh, x, "tanh"); }
TensorId Graph::Sigmoid(TensorId x) { return Unary(fb::OpCode::Sigmoid, x, "sigmoid"); }

TensorId Graph::AxisOp(fb::OpCode op, TensorId x, int axis, const char* base) {
  if (!status_.ok()) return kInvalidTensor;
  const std::string name = UniqueName(base);
  if (!CheckInput(op, name, "x", x, DType::F32)) return kInvalidTensor;
  const Shape shape = tensors_[x].shape;
  const int a = NormalizeAxis(axis, shape.size());
  if (a < 0) {
    FailOp(op, name, "axis " + std::to_string(axis) + " is out of range for x " +
                         ShapeToString(shape) + " (valid: " + AxisRange(shape.size()) + ")");
    return kInvalidTensor;
  }
  OpAttrs attrs;
  attrs.axis = a;
  return AddOp(op, {x}, attrs, {{shape, DType::F32}}, name)[0];
}

TensorId Graph::Softmax(TensorId x, int axis) {
  return AxisOp(fb::OpCode::Softmax, x, axis, "softmax");
}

TensorId Graph::LogSoftmax(TensorId x, int axis) {
  return AxisOp(fb::OpCode::LogSoftmax, x, axis, "logsoftmax");
}

bool Graph::CheckLogitsLabels(fb::OpCode op, const std::string& name, TensorId logits,
                              TensorId labels) {
  if (!CheckInput(op, name, "logits", logits, DType::F32) ||
      !CheckInput(op, name, "labels", labels, DType::I32))
    return false;
  const Shape& sl = tensors_[logits].shape;
  const Shape& sy = tensors_[labels].shape;
  if (sl.size() != 2) {
    FailOp(op, name, "logits must be [N,C], got " + ShapeToString(sl));
    return false;
  }
  if (sy.size() != 1 || sy[0] != sl[0]) {
    FailOp(op, name, "labels must be [N] = [" + std::to_string(sl[0]) + "] for logits " +
                         ShapeToString(sl) + ", got " + ShapeToString(sy));
    return false;
  }
  return true;
}

TensorId Graph::SparseSoftmaxCrossEntropy(TensorId logits, TensorId labels) {
  if (!status_.ok()) return kInvalidTensor;
  constexpr auto op = fb::OpCode::SparseSoftmaxCrossEntropy;
  const std::string name = UniqueName("sparsesoftmaxcrossentropy");
  if (!CheckLogitsLabels(op, name, logits, labels)) return kInvalidTensor;
  return AddOp(op, {logits, labels}, OpAttrs{}, {{Shape{}, DType::F32}}, name)[0];
}

TensorId Graph::ArgMaxAccuracy(TensorId logits, TensorId labels) {
  if (!status_.ok()) return kInvalidTensor;
  constexpr auto op = fb::OpCode::ArgMaxAccuracy;
  const std::string name = UniqueName("argmaxaccuracy");
  if (!CheckLogitsLabels(op, name, logits, labels)) return kInvalidTensor;
  return AddOp(op, {logits, labels}, OpAttrs{}, {{Shape{}, DType::F32}}, name)[0];
}

TensorId Graph::Reduce(fb::OpCode op, TensorId x, std::vector<int> axes, bool keep_dims) {
  if (!status_.ok()) return kInvalidTensor;
  const std::string name = UniqueName(LowerName(op));
  if (!CheckInput(op, name, "x", x, DType::F32)) return kInvalidTensor;
  const Shape sx = tensors_[x].shape;
  for (int& a : axes) {
    const int n = NormalizeAxis(a, sx.size());
    if (n < 0) {
      FailOp(op, name, "axis " + std::to_string(a) + " is out of range for x " +
                           ShapeToString(sx) + " (valid: " + AxisRange(sx.size()) + ")");
      return kInvalidTensor;
    }
    a = n;
  }
  std::sort(axes.begin(), axes.end());
  axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
  Shape out;
  for (size_t i = 0; i < sx.size(); ++i) {
    const bool reduced =
        axes.empty() || std::binary_search(axes.begin(), axes.end(), static_cast<int>(i));
    if (!reduced) {
      out.push_back(sx[i]);
    } else if (keep_dims) {
      out.push_back(1);
    }
  }
  OpAttrs attrs;
  attrs.axes = std::move(axes);
  attrs.keep_dims = keep_dims;
  return AddOp(op, {x}, std::move(attrs), {{std::move(out), DType::F32}}, name)[0];
}

TensorId Graph::ReduceSum(TensorId x, std::vector<int> axes, bool keep_dims) {
  return Reduce(fb::OpCode::ReduceSum, x, std::move(axes), keep_dims);
}

TensorId Graph::ReduceMean(TensorId x, std::vector<int> axes, bool keep_dims) {
  return Reduce(fb::OpCode::ReduceMean, x, std::move(axes), keep_dims);
}

TensorId Graph::Reshape(TensorId x, Shape shape) {
  if (!status_.ok()) return kInvalidTensor;
  constexpr auto op = fb::OpCode::Reshape;
  const std::string name = UniqueName("reshape");
  if (!valid(x)) {
    FailOp(op, name, "x is not a tensor of this graph (id " + std::to_string(x) + ")");
    return kInvalidTensor;
  }
  const TensorInfo& tx = tensors_[x];
  const DType dtype = tx.dtype;
  const int64_t numel = NumElements(tx.shape);
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (infer >= 0) {
        FailOp(op, name, "shape " + ShapeToString(shape) + " has more than one -1");
        return kInvalidTensor;
      }
      infer = static_cast<int>(i);
    } else if (shape[i] <= 0) {
      FailOp(op, name, "shape " + ShapeToString(shape) +
                           " must have positive dimensions (or one -1)");
      return kInvalidTensor;
    } else {
      if (known > (int64_t{1} << 62) / shape[i]) {
        FailOp(op, name, "shape " + ShapeToString(shape) + " has too many elements");
        return kInvalidTensor;
      }
      known *= shape[i];
    }
  }
  const std::string from = "cannot reshape x " + ShapeToString(tx.shape) + " (" +
                           std::to_string(numel) + " elements) into " + ShapeToString(shape);
  if (infer >= 0) {
    if (numel % known != 0) {
      FailOp(op, name, from + ": " + std::to_string(numel) + " is not a multiple of " +
                           std::to_string(known));
      return kInvalidTensor;
    }
    shape[infer] = numel / known;
  } else if (known != numel) {
    FailOp(op, name, from + " (" + std::to_string(known) + " elements)");
    return kInvalidTensor;
  }
  return AddOp(op, {x}, OpAttrs{}, {{std::move(shape), dtype}}, name)[0];
}

TensorId Graph::Flatten(TensorId x) {
  if (!status_.ok()) return kInvalidTensor;
  constexpr auto op = fb::OpCode::Flatten;
  const std::string name = UniqueName("flatten");
  if (!valid(x)) {
    FailOp(op, name, "x is not a tensor of this graph (id " + std::to_string(x) + ")");
    return kInvalidTensor;
  }
  const Shape sx = tensors_[x].shape;
  const DType dtype = tensors_[x].dtype;
  if (sx.empty()) {
    FailOp(op, name, "x must be [N, ...], got a scalar []");
    return kInvalidTensor;
  }
  int64_t rest = 1;
  for (size_t i = 1; i < sx.size(); ++i) rest *= sx[i];
  return AddOp(op, {x}, OpAttrs{}, {{Shape{sx[0], rest}, dtype}}, name)[0];
}

TensorId Graph::Conv2D(TensorId x, TensorId w, int stride, int pad) {
  OpAttrs attrs;
  attrs.stride_h = attrs.stride_w = stride;
  attrs.pad_top = attrs.pad_bottom = attrs.pad_left = attrs.pad_right = pad;
  return Conv2D(x, w, attrs);
}

TensorId Graph::Conv2D(TensorId x, TensorId w, const OpAttrs& a) {
  if (!status_.ok()) return kInvalidTensor;
  constexpr auto op = fb::OpCode::Conv2D;
  const std::string name = UniqueName("conv2d");
  if (!CheckInput(op, name, "x", x, DType::F32) || !CheckInput(op, name, "w", w, DType::F32))
    return kInvalidTensor;
  const Shape sx = tensors_[x].shape, sw = tensors_[w].shape;
  if (sx.size() != 4) {
    FailOp(op, name, "x must be 4-D NCHW, got " + ShapeToString(sx));
    return kInvalidTensor;
  }
  if (sw.size() != 4) {
    FailOp(op, name, "w must be 4-D OIHW, got " + ShapeToString(sw));
    return kInvalidTensor;
  }
  if (sx[1] != sw[1]) {
    FailOp(op, name, "x " + ShapeToString(sx) + " has C=" + std::to_string(sx[1]) +
                         " channels but w " + ShapeToString(sw) + " expects " +
                         std::to_string(sw[1]));
    return kInvalidTensor;
  }
  if (a.stride_h < 1 || a.stride_w < 1) {
    FailOp(op, name, "strides must be >= 1, got (" + std::to_string(a.stride_h) + ", " +
                         std::to_string(a.stride_w) + ")");
    return kInvalidTensor;
  }
  if (a.dilation_h < 1 || a.dilation_w < 1) {
    FailOp(op, name, "dilations must be >= 1, got (" + std::to_string(a.dilation_h) + ", " +
                         std::to_string(a.dilation_w) + ")");
    return kInvalidTensor;
  }
  if (a.pad_top < 0 || a.pad_bottom < 0 || a.pad_left < 0 || a.pad_right < 0) {
    FailOp(op, name, "pads must be >= 0, got (" + std::to_string(a.pad_top) + ", " +
                         std::to_string(a.pad_bottom) + ", " + std::to_string(a.pad_left) +
                         ", " + std::to_string(a.pad_right) + ")");
    return kInvalidTensor;
  }
  const int64_t kh = int64_t{a.dilation_h} * (sw[2] - 1) + 1;
  const int64_t kw = int64_t{a.dilation_w} * (sw[3] - 1) + 1;
  const int64_t ph = sx[2] + a.pad_top + a.pad_bottom, pw = sx[3] + a.pad_left + a.pad_right;
  if (kh > ph || kw > pw) {
    FailOp(op, name, "kernel [" + std::to_string(sw[2]) + "," + std::to_string(sw[3]) +
                         "] (dilated [" + std::to_string(kh) + "," + std::to_string(kw) +
                         "]) is larger than the padded input [" + std::to_string(ph) + "," +
                         std::to_string(pw) + "]");
    return kInvalidTensor;
  }
  // Only the convolution fields travel, so equal convolutions compare equal.
  OpAttrs attrs;
  attrs.stride_h = a.stride_h;
  attrs.stride_w = a.stride_w;
  attrs.pad_top = a.pad_top;
  attrs.pad_bottom = a.pad_bottom;
  attrs.pad_left = a.pad_left;
  attrs.pad_right = a.pad_right;
  attrs.dilation_h = a.dilation_h;
  attrs.dilation_w = a.dilation_w;
  const Shape out{sx[0], sw[0], (ph - kh) / a.stride_h + 1, (pw - kw) / a.stride_w + 1};
  return AddOp(op, {x, w}, attrs, {{out, DType::F32}}, name)[0];
}

TensorId Graph::Pool(fb::OpCode op, TensorId x, int kernel, int stride, int pad) {
  if (!status_.ok()) return kInvalidTensor;
  const std::string name = UniqueName(LowerName(op));
  if (!CheckInput(op, name, "x", x, DType::F32)) return kInvalidTensor;
  const Shape sx = tensors_[x].shape;
  if (sx.size() != 4) {
    FailOp(op, name, "x must be 4-D NCHW, got " + ShapeToString(sx));
    return kInvalidTensor;
  }
  if (kernel < 1 || stride < 1) {
    FailOp(op, name, "kernel and stride must be >= 1, got kernel " + std::to_string(kernel) +
                         ", stride " + std::to_string(stride));
    return kInvalidTensor;
  }
  // Beyond half a kernel some windows would hold only padding: no max, and an
  // average over nothing.
  if (pad < 0 || 2 * pad > kernel) {
    FailOp(op, name, "pad must be in [0, kernel/2], got pad " + std::to_string(pad) +
                         " for kernel " + std::to_string(kernel));
    return kInvalidTensor;
  }
  const int64_t ph = sx[2] + 2 * pad, pw = sx[3] + 2 * pad;
  if (kernel > ph || kernel > pw) {
    FailOp(op, name, "kernel " + std::to_string(kernel) + " is larger than the padded input [" +
                         std::to_string(ph) + "," + std::to_string(pw) + "]");
    return kInvalidTensor;
  }
  OpAttrs attrs;
  attrs.kernel_h = attrs.kernel_w = kernel;
  attrs.stride_h = attrs.stride_w = stride;
  attrs.pad_top = attrs.pad_bottom = attrs.pad_left = attrs.pad_right = pad;
  const Shape y{sx[0], sx[1], (ph - kernel) / stride + 1, (pw - kernel) / stride + 1};
  std::vector<std::pair<Shape, DType>> outs{{y, DType::F32}};
  // oneDNN keeps the argmax of every output element; 4 bytes each covers it.
  if (op == fb::OpCode::MaxPool2D) outs.push_back({Shape{4 * NumElements(y)}, DType::U8});
  return AddOp(op, {x}, attrs, std::move(outs), name)[0];
}

TensorId Graph::MaxPool2D(TensorId x, int kernel, int stride, int pad) {
  return Pool(fb::OpCode::MaxPool2D, x, kernel, stride, pad);
}

TensorId Graph::AvgPool2D(TensorId x, int kernel, int stride, int pad) {
  return Pool(fb::OpCode::AvgPool2D, x, kernel, stride, pad);
}

void Graph::SetLoss(TensorId loss) {
  if (!status_.ok()) return;
  if (!valid(loss)) {
    Fail(InvalidArgument("SetLoss: loss is not a tensor of this graph (id " +
                         std::to_string(loss) + ")"));
    return;
  }
  const TensorInfo& t = tensors_[loss];
  if (t.dtype != DType::F32 || !t.shape.empty()) {
    Fail(InvalidArgument("SetLoss: loss must be an f32 scalar (shape []), got " + Describe(t)));
    return;
  }
  loss_ = loss;
}

void Graph::AddOutput(TensorId t) {
  if (!status_.ok()) return;
  if (!valid(t)) {
    Fail(InvalidArgument("AddOutput: not a tensor of this graph (id " + std::to_string(t) + ")"));
    return;
  }
  if (std::find(outputs_.begin(), outputs_.end(), t) == outputs_.end()) outputs_.push_back(t);
}

}  // namespace sinkrt::host
