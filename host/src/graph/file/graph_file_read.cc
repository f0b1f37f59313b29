// fb::Graph -> Graph. Three passes: the file's structure (indices, who writes
// what, topological order), then a check graph built through the builder in
// that order (every shape, dtype and attribute check, and the inferred
// shapes), then the Graph itself with the file's names and tensor order.
#include <algorithm>
#include <functional>
#include <queue>
#include <unordered_map>

#include "host/src/graph/file/graph_file_internal.h"
#include "host/src/graph/file/lr_schedule_options.h"
#include "host/src/graph/file/op_options.h"
#include "host/src/util/fb_vectors.h"
#include "host/src/util/schema_enums.h"

namespace sinkrt::host::graph_file {
namespace {

bool IsRandom(InitKind k) {
  switch (k) {
    case InitKind::Uniform:
    case InitKind::Normal:
    case InitKind::XavierUniform:
    case InitKind::XavierNormal:
    case InitKind::HeUniform:
    case InitKind::HeNormal:
      return true;
    default:
      return false;
  }
}

std::string Str(const flatbuffers::String* s) { return s ? s->str() : ""; }

// Whether the file spells out a dtype (FlatBuffers leaves out a field equal
// to its default, so F32 reads as "not given": it is inferred).
bool DTypeGiven(const fb::Tensor& t) {
  return reinterpret_cast<const flatbuffers::Table&>(t).CheckField(fb::Tensor::VT_DTYPE);
}

// "an Input", "a Param": leaf kinds in messages.
std::string AKind(fb::TensorKind k) {
  return std::string(k == fb::TensorKind::Input || k == fb::TensorKind::Intermediate ? "an " : "a ") +
         fb::EnumNameTensorKind(k);
}

using Strategy = std::vector<std::vector<int64_t>>;

// An op's shard strategy as the file spells it; an entry without dims is a
// scalar input's.
Strategy StrategyOf(const fb::Op& op) {
  Strategy s;
  if (!op.strategy()) return s;
  for (const fb::ShardStrategy* entry : *op.strategy()) {
    s.emplace_back();
    s.back() = Longs(entry->dims());
  }
  return s;
}

// One file being read: where errors point.
class Reader {
 public:
  Reader(const fb::Graph& def, const std::string& source, const GraphLoadOptions& options)
      : def_(def), source_(source), options_(options) {
    if (def.tensors()) tensors_.assign(def.tensors()->begin(), def.tensors()->end());
    if (def.ops()) ops_.assign(def.ops()->begin(), def.ops()->end());
  }

  Result<GraphFile> Read();

 private:
  // "op 'fc1' (ops[2])"
  std::string OpWhere(size_t i) const {
    const std::string name = Str(ops_[i]->name());
    return name.empty() ? "op ops[" + std::to_string(i) + "]" : "op '" + name + "' (ops[" + std::to_string(i) + "])";
  }
  // "tensor 'h1' (tensors[5])"
  std::string TensorWhere(size_t i) const {
    const std::string name = Str(tensors_[i]->name());
    return name.empty() ? "tensor tensors[" + std::to_string(i) + "]"
                        : "tensor '" + name + "' (tensors[" + std::to_string(i) + "])";
  }
  Status Error(const std::string& where, const std::string& message) const {
    return InvalidArgument(source_ + ": " + where + ": " + message);
  }
  Status Error(const std::string& where, const Status& s) const { return Error(where, s.message()); }

  std::string GraphName() const { return def_.name() ? def_.name()->str() : "graph"; }
  Status CheckHeader() const;
  Status CheckTensors() const;
  Status CheckOps();
  Status SortOps();
  Result<InitSpec> Init(size_t i) const;
  Result<Shape> LeafShape(size_t i) const;
  Status AddLeaf(Graph& g, size_t i) const;
  Status BuildCheckGraph();
  Status BuildGraph(Graph& g) const;
  Result<std::optional<OptimizerSpec>> Optimizer() const;

  const fb::Graph& def_;
  const std::string& source_;
  const GraphLoadOptions& options_;
  std::vector<const fb::Tensor*> tensors_;
  std::vector<const fb::Op*> ops_;
  std::vector<OpAttrs> attrs_;        // per op, from its options
  std::vector<Strategy> strategies_;  // per op, empty when the file gives none
  std::vector<int64_t> producer_;     // per tensor: the op writing it, or -1
  std::vector<size_t> order_;         // ops in topological order
  std::vector<TensorInfo> inferred_;  // per tensor, from the check graph
  std::vector<OpAttrs> canonical_;    // per op, as the builder stored them
};

Status Reader::CheckHeader() const {
  if (def_.format_major() != kFormatMajor)
    return InvalidArgument(source_ + ": field 'format_major' is " + std::to_string(def_.format_major()) +
                           ", this build reads graph files of format " + std::to_string(kFormatMajor) + ".x");
  return Status::Ok();
}

Status Reader::CheckTensors() const {
  std::unordered_map<std::string, size_t> names;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const fb::Tensor* t = tensors_[i];
    const std::string where = TensorWhere(i);
    const auto kind = t->kind();
    if (kind > fb::TensorKind::MAX)
      return Error(where, "field 'kind' is " + std::to_string(static_cast<int>(kind)) +
                              ", not a TensorKind (Intermediate, Input, Param, Const, State)");
    if (DTypeSize(t->dtype()) == 0)
      return Error(where, "field 'dtype' is " + std::to_string(static_cast<int>(t->dtype())) + ", not a DType");
    const std::string name = Str(t->name());
    if (!name.empty()) {
      auto [it, fresh] = names.emplace(name, i);
      if (!fresh) return Error(where, "name is already used by tensors[" + std::to_string(it->second) + "]");
    }
    const bool leaf = kind != fb::TensorKind::Intermediate;
    if (leaf && name.empty()) return Error(where, "field 'name' is missing: " + AKind(kind) + " needs one");
    if (leaf && !t->shape())
      return Error(where, "field 'shape' is missing: " + AKind(kind) + " needs its shape ([] for a scalar)");
    const bool initialised =
        kind == fb::TensorKind::Param || kind == fb::TensorKind::Const || kind == fb::TensorKind::State;
    if (!initialised && t->init())
      return Error(where, "field 'init': " + AKind(kind) + " has no initialiser" +
                              (kind == fb::TensorKind::Input ? " (it is fed from the dataset)" : " (an op writes it)"));
    if (initialised && !t->init())
      return Error(where, "field 'init' is missing: " + AKind(kind) +
                              " needs an initialiser ({\"kind\": \"Zeros\"}, HeUniform with a seed, ...)");
    const bool inline_init = initialised && FromFb(t->init()->kind()) == InitKind::Inline;
    if (t->inline_data() && !inline_init)
      return Error(where, "field 'inline_data' is set, but the initialiser is not Inline");
    if (inline_init && !t->inline_data())
      return Error(where, "field 'inline_data' is missing: an Inline initialiser carries its bytes there");
    if (inline_init && (t->init()->data_offset() || t->init()->data_bytes()))
      return Error(where,
                   "field 'init': data_offset/data_bytes belong to task streams; a graph file carries Inline "
                   "values in 'inline_data'");
  }
  return Status::Ok();
}

Status Reader::CheckOps() {
  const size_t n = tensors_.size();
  producer_.assign(n, -1);
  attrs_.resize(ops_.size());
  strategies_.resize(ops_.size());
  std::unordered_map<std::string, size_t> names;
  for (size_t i = 0; i < ops_.size(); ++i) {
    const fb::Op* op = ops_[i];
    const std::string where = OpWhere(i);
    const std::string name = Str(op->name());
    if (!name.empty()) {
      auto [it, fresh] = names.emplace(name, i);
      if (!fresh) return Error(where, "name is already used by ops[" + std::to_string(it->second) + "]");
    }
    const OpCode code = FromFb(op->op());
    const char* code_name = OpCodeName(code);
    if (code == OpCode::Invalid) return Error(where, "field 'op' is missing");
    if (!code_name || !*code_name)
      return Error(where, "field 'op': unknown op code " + std::to_string(static_cast<int>(code)));
    if (!IsForwardOp(code))
      return Error(where, std::string("field 'op': ") + code_name +
                              " is not a forward op; a graph file holds the forward graph (gradients and optimizer "
                              "updates are added when it is compiled)");
    const size_t arity = ForwardArity(code);
    const size_t n_in = op->inputs() ? op->inputs()->size() : 0;
    if (arity == kAnyArity && n_in == 0)
      return Error(where, std::string(code_name) + " takes one or more inputs, the file lists none");
    if (arity != kAnyArity && n_in != arity)
      return Error(where, std::string(code_name) + " takes " + std::to_string(arity) +
                              (arity == 1 ? " input" : " inputs") + ", the file lists " + std::to_string(n_in));
    for (size_t k = 0; k < n_in; ++k) {
      const uint32_t t = op->inputs()->Get(static_cast<flatbuffers::uoffset_t>(k));
      if (t >= n)
        return Error(where, "input " + std::to_string(k) + " is tensor " + std::to_string(t) + ", but the file has " +
                                std::to_string(n) + " tensors");
    }
    const size_t n_out = op->outputs() ? op->outputs()->size() : 0;
    if (n_out == 0) return Error(where, "field 'outputs' is missing");
    for (size_t k = 0; k < n_out; ++k) {
      const uint32_t t = op->outputs()->Get(static_cast<flatbuffers::uoffset_t>(k));
      const std::string out = "output " + std::to_string(k);
      if (t >= n)
        return Error(where,
                     out + " is tensor " + std::to_string(t) + ", but the file has " + std::to_string(n) + " tensors");
      if (tensors_[t]->kind() != fb::TensorKind::Intermediate)
        return Error(where, out + " is " + fb::EnumNameTensorKind(tensors_[t]->kind()) + " " + TensorWhere(t) +
                                ", which no op may write");
      if (producer_[t] >= 0)
        return Error(where,
                     out + " is " + TensorWhere(t) + ", already written by " +
                         (producer_[t] == static_cast<int64_t>(i) ? std::string("this op") : OpWhere(producer_[t])));
      producer_[t] = static_cast<int64_t>(i);
    }
    Result<OpAttrs> attrs = OpAttrsFromOptions(code, op->options_type(), op->options());
    if (!attrs.ok()) return Error(where, attrs.status());
    attrs_[i] = std::move(attrs).value();
    strategies_[i] = StrategyOf(*op);
  }
  for (size_t t = 0; t < n; ++t)
    if (tensors_[t]->kind() == fb::TensorKind::Intermediate && producer_[t] < 0)
      return Error(TensorWhere(t), "an Intermediate that no op writes (leaves are Input, Param or Const)");
  return Status::Ok();
}

// Kahn's algorithm taking the lowest ready index first, so a file already in
// order keeps it (and round-trips byte for byte).
Status Reader::SortOps() {
  const size_t m = ops_.size();
  std::vector<std::vector<size_t>> readers(m);
  std::vector<size_t> waiting(m, 0);
  for (size_t i = 0; i < m; ++i) {
    for (uint32_t t : *ops_[i]->inputs()) {
      if (producer_[t] < 0) continue;
      readers[producer_[t]].push_back(i);
      ++waiting[i];
    }
  }
  std::priority_queue<size_t, std::vector<size_t>, std::greater<>> ready;
  for (size_t i = 0; i < m; ++i)
    if (waiting[i] == 0) ready.push(i);
  while (!ready.empty()) {
    const size_t i = ready.top();
    ready.pop();
    order_.push_back(i);
    for (size_t r : readers[i])
      if (--waiting[r] == 0) ready.push(r);
  }
  if (order_.size() == m) return Status::Ok();

  // Every op left waits on another op left; walking back through the first
  // unsorted input of each must close a loop, and that loop is the culprit.
  std::vector<int> seen(m, -1);
  size_t i = 0;
  while (waiting[i] == 0) ++i;
  std::vector<size_t> path;
  while (seen[i] < 0) {
    seen[i] = static_cast<int>(path.size());
    path.push_back(i);
    for (uint32_t t : *ops_[i]->inputs()) {
      const int64_t p = producer_[t];
      if (p >= 0 && waiting[p] > 0) {
        i = static_cast<size_t>(p);
        break;
      }
    }
  }
  // path[seen[i]..] is the loop, each op reading the next one's output:
  // print it in data-flow order.
  std::vector<size_t> loop(path.begin() + seen[i], path.end());
  std::reverse(loop.begin(), loop.end());
  std::rotate(loop.begin(), std::min_element(loop.begin(), loop.end()), loop.end());
  std::string text;
  for (size_t k : loop) text += OpWhere(k) + " -> ";
  text += OpWhere(loop.front());
  return InvalidArgument(source_ + ": the ops form a cycle: " + text);
}

Result<InitSpec> Reader::Init(size_t i) const {
  const fb::Init* d = tensors_[i]->init();
  InitSpec s;
  s.kind = FromFb(d->kind());
  if (s.kind > kInitKindMax)
    return Error(TensorWhere(i),
                 "field 'init.kind' is " + std::to_string(static_cast<int>(s.kind)) + ", not an InitKind");
  s.value = d->value();
  s.low = d->low();
  s.high = d->high();
  s.mean = d->mean();
  s.stddev = d->stddev();
  s.seed = d->seed();
  s.fan_in = d->fan_in();
  s.fan_out = d->fan_out();
  if (s.kind == InitKind::Inline) s.data.assign(tensors_[i]->inline_data()->begin(), tensors_[i]->inline_data()->end());
  if (IsRandom(s.kind)) s.seed += options_.seed_offset;
  return s;
}

Result<Shape> Reader::LeafShape(size_t i) const {
  Shape shape = Longs(tensors_[i]->shape());
  if (options_.batch > 0 && tensors_[i]->kind() == fb::TensorKind::Input) {
    if (shape.empty()) return Error(TensorWhere(i), "a scalar Input has no batch dimension to set");
    shape[0] = options_.batch;
  }
  return shape;
}

Status Reader::AddLeaf(Graph& g, size_t i) const {
  const fb::Tensor* t = tensors_[i];
  const std::string name = Str(t->name());
  SINKRT_ASSIGN_OR_RETURN(Shape shape, LeafShape(i));
  switch (t->kind()) {
    case fb::TensorKind::Input:
      g.Input(name, std::move(shape), FromFb(t->dtype()));
      break;
    case fb::TensorKind::Param:
    case fb::TensorKind::Const:
    case fb::TensorKind::State: {
      // The builder makes every Param, Const and State f32.
      if (FromFb(t->dtype()) != DType::F32)
        return Error(TensorWhere(i), "field 'dtype': " + AKind(t->kind()) + " is f32, got " + DTypeName(t->dtype()));
      SINKRT_ASSIGN_OR_RETURN(InitSpec init, Init(i));
      if (t->kind() == fb::TensorKind::Param) {
        g.Param(name, std::move(shape), std::move(init));
      } else if (t->kind() == fb::TensorKind::State) {
        g.State(name, std::move(shape), std::move(init));
      } else {
        g.Const(name, std::move(shape), std::move(init));
      }
      break;
    }
    default:
      return Internal("AddLeaf: not a leaf");
  }
  if (!g.status().ok()) return Error(TensorWhere(i), g.status());
  return Status::Ok();
}

Status Reader::BuildCheckGraph() {
  // Leaves first, in file order: the builder's generated names for op
  // outputs then never collide with a leaf's.
  Graph chk(GraphName());
  std::vector<TensorId> id(tensors_.size(), kInvalidTensor);
  for (size_t i = 0; i < tensors_.size(); ++i) {
    if (tensors_[i]->kind() == fb::TensorKind::Intermediate) continue;
    SINKRT_RETURN_IF_ERROR(AddLeaf(chk, i));
    id[i] = static_cast<TensorId>(chk.tensors().size() - 1);
  }
  canonical_.resize(ops_.size());
  for (size_t i : order_) {
    const fb::Op* op = ops_[i];
    const std::string where = OpWhere(i);
    std::vector<TensorId> in;
    for (uint32_t t : *op->inputs()) in.push_back(id[t]);
    Shape target;
    const uint32_t out0 = op->outputs()->Get(0);
    if (FromFb(op->op()) == OpCode::Reshape) {
      // A Reshape's target is its output's shape: the one shape a file must
      // give for an Intermediate.
      if (!tensors_[out0]->shape())
        return Error(where, "output 0 " + TensorWhere(out0) +
                                " needs field 'shape': it is the Reshape's target (one dimension may be -1)");
      target = Longs(tensors_[out0]->shape());
    }
    Status s = AddForwardOp(chk, FromFb(op->op()), in, attrs_[i], target);
    if (!s.ok()) {
      std::string hint;
      if (FromFb(op->op()) == OpCode::Reshape && options_.batch > 0)
        hint = " (the target was written for the file's batch; use -1 for the batch dimension)";
      return Error(where, s.message() + hint);
    }
    const OpNode& node = chk.ops().back();
    const size_t n_out = op->outputs()->size();
    if (n_out != node.outputs.size())
      return Error(where, std::string(OpCodeName(FromFb(op->op()))) + " has " + std::to_string(node.outputs.size()) +
                              (node.outputs.size() == 1 ? " output" : " outputs") + ", the file lists " +
                              std::to_string(n_out));
    for (size_t k = 0; k < n_out; ++k) {
      const uint32_t t = op->outputs()->Get(static_cast<flatbuffers::uoffset_t>(k));
      const TensorInfo& got = chk.tensor(node.outputs[k]);
      const fb::Tensor* file = tensors_[t];
      const std::string out = "output " + std::to_string(k) + " " + TensorWhere(t);
      if (DTypeGiven(*file) && FromFb(file->dtype()) != got.dtype)
        return Error(
            where, out + " is " + DTypeName(file->dtype()) + " in the file, but the op gives " + DTypeName(got.dtype));
      // With a new batch every shape changes: the file's are as written.
      const bool compare = file->shape() && options_.batch <= 0 && FromFb(op->op()) != OpCode::Reshape;
      if (compare) {
        const Shape given = Longs(file->shape());
        if (given != got.shape)
          return Error(where, out + " has shape " + ShapeToString(given) + " in the file, but the op gives " +
                                  ShapeToString(got.shape));
      }
      id[t] = node.outputs[k];
    }
    canonical_[i] = node.attrs;
    if (!strategies_[i].empty()) {
      // Checked against the inferred input ranks, under the file's op name
      // (the check graph's are generated).
      OpNode named = node;
      named.name = Str(op->name()).empty() ? "ops[" + std::to_string(i) + "]" : Str(op->name());
      if (Status s = CheckStrategyShape(chk, named, strategies_[i]); !s.ok())
        return Error(where, "field 'strategy': " + s.message());
    }
  }
  inferred_.resize(tensors_.size());
  for (size_t i = 0; i < tensors_.size(); ++i) inferred_[i] = chk.tensor(id[i]);
  return Status::Ok();
}

// The Graph itself: tensors in file order (so indices stay), named as in the
// file, ops in topological order with the builder's attributes.
Status Reader::BuildGraph(Graph& g) const {
  for (size_t i = 0; i < tensors_.size(); ++i) {
    if (tensors_[i]->kind() != fb::TensorKind::Intermediate) {
      SINKRT_RETURN_IF_ERROR(AddLeaf(g, i));
      continue;
    }
    TensorInfo t;
    t.name = Str(tensors_[i]->name());
    if (t.name.empty()) {
      // Unnamed: named after its op, as the builder names op outputs.
      const fb::Op* op = ops_[producer_[i]];
      const std::string op_name = Str(op->name());
      const auto& outs = *op->outputs();
      const size_t k = std::find(outs.begin(), outs.end(), static_cast<uint32_t>(i)) - outs.begin();
      if (!op_name.empty()) t.name = k == 0 ? op_name : op_name + ":" + std::to_string(k);
    }
    t.dtype = inferred_[i].dtype;
    t.shape = inferred_[i].shape;
    t.kind = TensorKind::Intermediate;
    t.init.kind = InitKind::None;
    g.AddTensor(std::move(t));
    if (!g.status().ok()) return Error(TensorWhere(i), g.status());
  }
  for (size_t i : order_) {
    const fb::Op* op = ops_[i];
    g.AddOpInto(FromFb(op->op()), {op->inputs()->begin(), op->inputs()->end()}, canonical_[i],
                {op->outputs()->begin(), op->outputs()->end()}, Str(op->name()));
    if (!strategies_[i].empty()) g.Shard(static_cast<TensorId>(op->outputs()->Get(0)), strategies_[i]);
    if (!g.status().ok()) return Error(OpWhere(i), g.status());
  }
  const int32_t loss = def_.loss();
  if (loss < 0)
    return InvalidArgument(source_ + ": field 'loss' is " + std::to_string(loss) +
                           ": a graph file is a training graph and names its scalar loss tensor");
  if (static_cast<size_t>(loss) >= tensors_.size())
    return InvalidArgument(source_ + ": field 'loss' is tensor " + std::to_string(loss) + ", but the file has " +
                           std::to_string(tensors_.size()) + " tensors");
  g.SetLoss(static_cast<TensorId>(loss));
  if (!g.status().ok()) return InvalidArgument(source_ + ": field 'loss': " + g.status().message());
  if (def_.outputs()) {
    for (size_t k = 0; k < def_.outputs()->size(); ++k) {
      const uint32_t t = def_.outputs()->Get(static_cast<flatbuffers::uoffset_t>(k));
      if (t >= tensors_.size())
        return InvalidArgument(source_ + ": field 'outputs': output " + std::to_string(k) + " is tensor " +
                               std::to_string(t) + ", but the file has " + std::to_string(tensors_.size()) +
                               " tensors");
      g.AddOutput(t);
    }
  }
  if (!g.status().ok()) return InvalidArgument(source_ + ": " + g.status().message());
  return Status::Ok();
}

Result<std::optional<OptimizerSpec>> Reader::Optimizer() const {
  const fb::Optimizer* d = def_.optimizer();
  if (!d || d->kind() == fb::OptimizerKind::None) return std::optional<OptimizerSpec>();
  OptimizerSpec o;
  switch (d->kind()) {
    case fb::OptimizerKind::SGD:
      o.kind = OptimizerKind::SGD;
      break;
    case fb::OptimizerKind::Momentum:
      o.kind = OptimizerKind::Momentum;
      break;
    case fb::OptimizerKind::Adam:
      o.kind = OptimizerKind::Adam;
      break;
    case fb::OptimizerKind::AdamWeightDecay:
      o.kind = OptimizerKind::AdamWeightDecay;
      break;
    case fb::OptimizerKind::Lamb:
      o.kind = OptimizerKind::Lamb;
      break;
    default:
      return InvalidArgument(source_ + ": field 'optimizer.kind' is " + std::to_string(static_cast<int>(d->kind())) +
                             ", not an OptimizerKind (SGD, Momentum, Adam, AdamWeightDecay, Lamb)");
  }
  o.learning_rate = d->learning_rate();
  o.momentum = d->momentum();
  o.nesterov = d->nesterov();
  o.beta1 = d->beta1();
  o.beta2 = d->beta2();
  o.epsilon = d->epsilon();
  o.weight_decay = d->weight_decay();
  SINKRT_ASSIGN_OR_RETURN(o.schedule, ReadLrSchedule(d->schedule()), source_ + ": field 'optimizer.schedule'");
  o.clip_grad_norm = d->clip_grad_norm();
  if (d->groups()) {
    for (const fb::OptimizerGroup* group : *d->groups()) {
      ParamGroup pg{.names = {}, .weight_decay = group->weight_decay(), .learning_rate = group->learning_rate()};
      if (group->names())
        for (const flatbuffers::String* n : *group->names()) pg.names.push_back(Str(n));
      o.groups.push_back(std::move(pg));
    }
  }
  // Checked here too, so a file with a value sinkrun's flags refuse is
  // refused as it is read, naming the file.
  SINKRT_RETURN_IF_ERROR(ValidateOptimizer(o), source_ + ": field 'optimizer'");
  return std::optional<OptimizerSpec>(o);
}

Result<GraphFile> Reader::Read() {
  SINKRT_RETURN_IF_ERROR(CheckHeader());
  SINKRT_RETURN_IF_ERROR(CheckTensors());
  SINKRT_RETURN_IF_ERROR(CheckOps());
  SINKRT_RETURN_IF_ERROR(SortOps());
  SINKRT_RETURN_IF_ERROR(BuildCheckGraph());
  GraphFile file{Graph(GraphName()), std::nullopt};
  SINKRT_RETURN_IF_ERROR(BuildGraph(file.graph));
  SINKRT_ASSIGN_OR_RETURN(file.optimizer, Optimizer());
  return file;
}

}  // namespace

Result<GraphFile> ReadGraph(const fb::Graph& def, const std::string& source, const GraphLoadOptions& options) {
  return Reader(def, source, options).Read();
}

}  // namespace sinkrt::host::graph_file
