// Graph as a container: its tensors and ops, names, the first error, the
// leaves (Input, Param, Const) and the low-level AddOp/AddOpInto every op
// builder ends in. The op builders themselves, which check shapes and
// dtypes, are in the *_ops.cc files beside this one; InitSpec's factories in
// init_spec.cc.
#include "sinkrt/host/graph.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "host/src/graph/builder_helpers.h"

namespace sinkrt::host {

using internal::LowerName;
using internal::OpLabel;

namespace {

// Element count times dtype size must fit in int64: a buffer's byte count is
// computed from them everywhere downstream. The dtype must be valid.
bool ByteCountOverflows(const Shape& shape, DType dtype) {
  const int64_t n = NumElements(shape);
  return n >= 0 && n > INT64_MAX / static_cast<int64_t>(DTypeSize(dtype));
}

const char* KindName(TensorKind k) {
  switch (k) {
    case TensorKind::Intermediate:
      return "Intermediate";
    case TensorKind::Input:
      return "Input";
    case TensorKind::Param:
      return "Param";
    case TensorKind::Const:
      return "Const";
    case TensorKind::Grad:
      return "Grad";
    case TensorKind::OptState:
      return "OptState";
    case TensorKind::State:
      return "State";
  }
  return "?";
}

bool IsLeaf(TensorKind k) {
  return k == TensorKind::Input || k == TensorKind::Param || k == TensorKind::Const || k == TensorKind::OptState ||
         k == TensorKind::State;
}

// "f32 [64,10] 'matmul_3'": what an error says about a tensor it rejects.
std::string Describe(const TensorInfo& t) {
  return std::string(DTypeName(t.dtype)) + " " + ShapeToString(t.shape) + " '" + t.name + "'";
}

}  // namespace

// -- op semantics ----------------------------------------------------------------

std::vector<size_t> MutatedInputs(OpCode op) {
  switch (op) {
    case OpCode::SgdUpdate:
      return {0};
    case OpCode::MomentumUpdate:
      return {0, 2};
    case OpCode::AdamUpdate:
    case OpCode::AdamWeightDecay:
      return {0, 2, 3};
    case OpCode::LambNorms:
      return {2, 3};
    case OpCode::LambUpdate:
      return {0};
    case OpCode::AdamPowers:
    case OpCode::StepAdvance:
    case OpCode::DropoutStep:
      return {0};
    case OpCode::LossScaleUpdate:
      return {0, 1};
    case OpCode::AccumulateGrad:
      return {0};
    case OpCode::BatchNorm:  // the moving mean and variance (train_step; eval reads them)
      return {3, 4};
    default:
      return {};
  }
}

// -- bookkeeping ----------------------------------------------------------------

TensorId Graph::FindTensor(const std::string& name) const {
  auto it = tensor_names_.find(name);
  return it == tensor_names_.end() ? kInvalidTensor : it->second;
}

int64_t Graph::producer(TensorId t) const { return valid(t) ? producer_[t] : -1; }

int64_t Graph::FindOp(const std::string& name) const {
  auto it = op_names_.find(name);
  return it == op_names_.end() ? -1 : static_cast<int64_t>(it->second);
}

void Graph::Fail(Status status) {
  if (status_.ok() && !status.ok()) status_ = std::move(status);
}

void Graph::FailOp(OpCode op, const std::string& name, const std::string& message) {
  Fail(InvalidArgument(OpLabel(op) + " '" + name + "': " + message));
}

void Graph::PushNameScope(const std::string& name) {
  scope_marks_.push_back(scope_.size());
  if (name.empty()) return;
  scope_ += (scope_.empty() ? "" : ".") + name;
}

void Graph::PopNameScope() {
  if (scope_marks_.empty()) return Fail(FailedPrecondition("PopNameScope without a PushNameScope"));
  scope_.resize(scope_marks_.back());
  scope_marks_.pop_back();
}

std::string Graph::UniqueName(const std::string& base) {
  if (!scope_.empty()) {
    // In a scope the plain name is the readable one; a counter only on a clash.
    const std::string scoped = scope_ + "." + base;
    if (!tensor_names_.count(scoped) && !op_names_.count(scoped)) return scoped;
    for (;;) {
      std::string n = scoped + "_" + std::to_string(name_counter_++);
      if (!tensor_names_.count(n) && !op_names_.count(n)) return n;
    }
  }
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

bool Graph::CheckInput(OpCode op, const std::string& name, const char* role, TensorId t, DType want) {
  if (!valid(t)) {
    FailOp(op, name, std::string(role) + " is not a tensor of this graph (id " + std::to_string(t) + ")");
    return false;
  }
  if (tensors_[t].dtype != want) {
    FailOp(op, name, std::string(role) + " must be " + DTypeName(want) + ", got " + Describe(tensors_[t]));
    return false;
  }
  return true;
}

TensorId Graph::AddTensor(TensorInfo info) {
  if (!status_.ok()) return kInvalidTensor;
  if (info.name.empty()) info.name = UniqueName("t");
  if (auto it = tensor_names_.find(info.name); it != tensor_names_.end()) {
    Fail(InvalidArgument("tensor name '" + info.name + "' is already used by " + KindName(tensors_[it->second].kind) +
                         " tensor " + std::to_string(it->second)));
    return kInvalidTensor;
  }
  if (DTypeSize(info.dtype) == 0) {
    Fail(InvalidArgument("tensor '" + info.name + "': invalid dtype " + std::to_string(static_cast<int>(info.dtype))));
    return kInvalidTensor;
  }
  if (NumElements(info.shape) < 0) {
    Fail(InvalidArgument("tensor '" + info.name + "': shape " + ShapeToString(info.shape) +
                         " has a negative dimension or too many elements"));
    return kInvalidTensor;
  }
  if (ByteCountOverflows(info.shape, info.dtype)) {
    Fail(InvalidArgument("tensor '" + info.name + "': shape " + ShapeToString(info.shape) + " of " +
                         DTypeName(info.dtype) + " has a byte count beyond int64"));
    return kInvalidTensor;
  }
  const TensorId id = static_cast<TensorId>(tensors_.size());
  tensor_names_.emplace(info.name, id);
  tensors_.push_back(std::move(info));
  producer_.push_back(-1);
  return id;
}

std::vector<TensorId> Graph::AddOp(OpCode op, std::vector<TensorId> inputs, OpAttrs attrs,
                                   std::vector<std::pair<Shape, DType>> outputs, std::string name) {
  std::vector<TensorId> ids(outputs.size(), kInvalidTensor);
  if (!status_.ok()) return ids;
  if (name.empty()) {
    name = UniqueName(LowerName(op));
  } else if (!CheckOpName(name)) {
    return ids;
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!valid(inputs[i])) {
      FailOp(op, name,
             "input " + std::to_string(i) + " is not a tensor of this graph (id " + std::to_string(inputs[i]) + ")");
      return ids;
    }
  }
  // Check every output before creating any, so a failure leaves no orphans.
  for (size_t k = 0; k < outputs.size(); ++k) {
    if (DTypeSize(outputs[k].second) == 0 || NumElements(outputs[k].first) < 0) {
      FailOp(op, name,
             "output " + std::to_string(k) + " has an invalid dtype or shape " + ShapeToString(outputs[k].first));
      return ids;
    }
    if (ByteCountOverflows(outputs[k].first, outputs[k].second)) {
      FailOp(op, name,
             "output " + std::to_string(k) + " of shape " + ShapeToString(outputs[k].first) + " of " +
                 DTypeName(outputs[k].second) + " has a byte count beyond int64");
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
    t.init.kind = InitKind::None;
    ids[k] = AddTensor(std::move(t));
    if (ids[k] == kInvalidTensor) return ids;
    producer_[ids[k]] = op_index;
  }
  op_names_.emplace(name, ops_.size());
  ops_.push_back(OpNode{std::move(name), op, std::move(inputs), ids, std::move(attrs), {}, {}});
  return ids;
}

void Graph::AddOpInto(OpCode op, std::vector<TensorId> inputs, OpAttrs attrs, std::vector<TensorId> outputs,
                      std::string name) {
  if (!status_.ok()) return;
  if (name.empty()) {
    name = UniqueName(LowerName(op));
  } else if (!CheckOpName(name)) {
    return;
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!valid(inputs[i])) {
      FailOp(op, name,
             "input " + std::to_string(i) + " is not a tensor of this graph (id " + std::to_string(inputs[i]) + ")");
      return;
    }
  }
  for (size_t k = 0; k < outputs.size(); ++k) {
    const TensorId t = outputs[k];
    if (!valid(t)) {
      FailOp(op, name, "output " + std::to_string(k) + " is not a tensor of this graph (id " + std::to_string(t) + ")");
      return;
    }
    if (IsLeaf(tensors_[t].kind)) {
      FailOp(op, name,
             "output " + std::to_string(k) + " is " + KindName(tensors_[t].kind) + " tensor '" + tensors_[t].name +
                 "', which no op may write");
      return;
    }
    if (producer_[t] >= 0) {
      FailOp(op, name,
             "output " + std::to_string(k) + " '" + tensors_[t].name + "' is already written by op '" +
                 ops_[producer_[t]].name + "'");
      return;
    }
    if (std::find(outputs.begin(), outputs.begin() + k, t) != outputs.begin() + k) {
      FailOp(op, name, "tensor '" + tensors_[t].name + "' is listed twice as an output");
      return;
    }
  }
  const int64_t op_index = static_cast<int64_t>(ops_.size());
  for (TensorId t : outputs) producer_[t] = op_index;
  op_names_.emplace(name, ops_.size());
  ops_.push_back(OpNode{std::move(name), op, std::move(inputs), std::move(outputs), std::move(attrs), {}, {}});
}

// -- leaves -------------------------------------------------------------------

TensorId Graph::Leaf(const char* what, const std::string& name, Shape shape, DType dtype, TensorKind kind,
                     InitSpec init) {
  if (!status_.ok()) return kInvalidTensor;
  const std::string who = std::string(what) + " '" + name + "': ";
  if (name.empty()) {
    Fail(InvalidArgument(std::string(what) + ": name must not be empty"));
    return kInvalidTensor;
  }
  if (auto it = tensor_names_.find(name); it != tensor_names_.end()) {
    Fail(InvalidArgument(who + "name is already used by " + KindName(tensors_[it->second].kind) + " tensor " +
                         std::to_string(it->second)));
    return kInvalidTensor;
  }
  for (int64_t d : shape) {
    if (d <= 0) {
      Fail(InvalidArgument(who + "shape " + ShapeToString(shape) + " must have positive dimensions"));
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
      Fail(InvalidArgument(who + "dtype must be f32 (features) or i32 (labels), got " + DTypeName(dtype)));
      return kInvalidTensor;
    }
    init = InitSpec{};
    init.kind = InitKind::None;  // filled by GetNext, never by init
  } else {
    switch (init.kind) {
      case InitKind::Zeros:
      case InitKind::Constant:
      case InitKind::XavierUniform:
      case InitKind::XavierNormal:
      case InitKind::HeUniform:
      case InitKind::HeNormal:
        break;
      case InitKind::Uniform:
        if (!(init.low <= init.high)) {
          Fail(InvalidArgument(who + "Uniform initialiser needs low <= high, got [" + std::to_string(init.low) + ", " +
                               std::to_string(init.high) + ")"));
          return kInvalidTensor;
        }
        break;
      case InitKind::Normal:
        if (!(init.stddev >= 0)) {
          Fail(InvalidArgument(who + "Normal initialiser needs stddev >= 0, got " + std::to_string(init.stddev)));
          return kInvalidTensor;
        }
        break;
      case InitKind::Inline:
        if (init.data.size() != static_cast<size_t>(numel) * sizeof(float)) {
          Fail(InvalidArgument(who + "Inline initialiser has " + std::to_string(init.data.size() / sizeof(float)) +
                               " values, shape " + ShapeToString(shape) + " needs " + std::to_string(numel)));
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

TensorId Graph::State(const std::string& name, Shape shape, InitSpec init) {
  return Leaf("State", name, std::move(shape), DType::F32, TensorKind::State, std::move(init));
}

// -- loss and outputs ------------------------------------------------------------

void Graph::SetLoss(TensorId loss) {
  if (!status_.ok()) return;
  if (!valid(loss)) {
    Fail(InvalidArgument("SetLoss: loss is not a tensor of this graph (id " + std::to_string(loss) + ")"));
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

namespace sinkrt::host {

void Graph::ExtendOp(size_t op, std::vector<TensorId> more_inputs, OpAttrs attrs) {
  if (!status_.ok()) return;
  if (op >= ops_.size())
    return Fail(Internal("ExtendOp: op index " + std::to_string(op) + " is outside graph '" + name_ + "'"));
  for (TensorId t : more_inputs)
    if (!valid(t))
      return FailOp(ops_[op].op, ops_[op].name, "ExtendOp: input id " + std::to_string(t) + " is not a tensor");
  ops_[op].inputs.insert(ops_[op].inputs.end(), more_inputs.begin(), more_inputs.end());
  ops_[op].attrs = std::move(attrs);
}

}  // namespace sinkrt::host
