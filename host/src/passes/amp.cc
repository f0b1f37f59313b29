// The mixed-precision pass (passes/amp.h).
#include "host/src/passes/amp.h"

#include <iterator>
#include <map>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

namespace sinkrt::host::passes {
namespace {

// How an op's dtype is chosen.
enum class Precision {
  kLow,     // bf16 where the level says so (it has a bf16 kernel)
  kF32,     // always f32 (no bf16 kernel, or it must not round: the loss)
  kFollow,  // moves or reduces bytes: bf16 when a float input is, else f32
  kFixed,   // a Cast the network asked for: left as it is
};

Precision Classify(OpCode op) {
  switch (op) {
    case OpCode::MatMul:
    case OpCode::BatchMatMul:
    case OpCode::Conv2D:
    case OpCode::MaxPool2D:
    case OpCode::AvgPool2D:
    case OpCode::Add:
    case OpCode::Sub:
    case OpCode::Mul:
    case OpCode::AddN:
    case OpCode::Neg:
    case OpCode::Relu:
    case OpCode::Gelu:
    case OpCode::Tanh:
    case OpCode::Sigmoid:
    case OpCode::Exp:
    case OpCode::Log:
    case OpCode::Sqrt:
    case OpCode::Rsqrt:
    case OpCode::Square:
    case OpCode::Abs:
    case OpCode::Div:
    case OpCode::Maximum:
    case OpCode::Minimum:
    case OpCode::Pow:
    case OpCode::Erf:
    case OpCode::GeluErf:
    case OpCode::BiasAdd:
    case OpCode::ReduceSum:
    case OpCode::ReduceMean:
    case OpCode::BroadcastTo:
    case OpCode::SumToShape:
    case OpCode::Softmax:
    case OpCode::LogSoftmax:
    case OpCode::LayerNorm:
    case OpCode::Fill:
      return Precision::kLow;
    case OpCode::Reshape:
    case OpCode::Flatten:
    case OpCode::Transpose:
    // A max, a selection and a masked fill move input bits: they never round
    // (but the fill value, once, to bf16).
    case OpCode::ReduceMax:
    case OpCode::Select:
    case OpCode::CausalMask:
    case OpCode::Pad:  // copies and mirrors; the constant value rounds once
    case OpCode::Copy:
    case OpCode::Concat:
    case OpCode::Split:
    case OpCode::ShardSlice:
    case OpCode::Dropout:  // masks in the dtype it gets (bf16 under O2/O3)
    case OpCode::AllReduce:
    case OpCode::AllGather:
    case OpCode::ReduceScatter:
    case OpCode::AllToAll:
    case OpCode::GradAllReduce:
      return Precision::kFollow;
    case OpCode::Cast:
      return Precision::kFixed;
    case OpCode::BatchNorm:  // f32 at every level (MindSpore's O2 keeps BatchNorm in f32)
      return Precision::kF32;
    default:  // the loss, Gather, metrics, optimizer updates
      return Precision::kF32;
  }
}

// The dtype a kLow op computes in at `level`.
DType LowOpDType(OpCode op, AmpLevel level) {
  switch (level) {
    case AmpLevel::O0:
      return DType::F32;
    case AmpLevel::O1:  // MindSpore's white list (Dense is MatMul here)
      return op == OpCode::MatMul || op == OpCode::BatchMatMul || op == OpCode::Conv2D || op == OpCode::Relu
                 ? DType::BF16
                 : DType::F32;
    case AmpLevel::O2:  // its black list: the normalisations (and the loss, kF32)
      return op == OpCode::LayerNorm || op == OpCode::Softmax || op == OpCode::LogSoftmax ? DType::F32 : DType::BF16;
    case AmpLevel::O3:
      return DType::BF16;
  }
  return DType::F32;
}

bool IsFloat(DType t) { return t == DType::F32 || t == DType::BF16; }

struct PlannedOp {
  OpCode op;
  std::vector<TensorId> inputs;
  OpAttrs attrs;
  std::vector<TensorId> outputs;
  std::string name;
  std::string recompute;
};

// Builds the op list and the new tensors, then the graph in one go, so that
// every tensor of `forward` keeps its id.
class AmpRewrite {
 public:
  AmpRewrite(const Graph& forward, AmpLevel level) : f_(forward), level_(level) {
    for (const TensorInfo& t : f_.tensors()) {
      dtype_.push_back(t.dtype);
      taken_.insert(t.name);
    }
    for (const OpNode& op : f_.ops()) taken_.insert(op.name);
    pinned_.assign(f_.tensors().size(), false);
    if (f_.valid(f_.loss())) pinned_[f_.loss()] = true;
    for (TensorId t : f_.outputs()) pinned_[t] = true;
  }

  Result<Graph> Run() {
    for (const OpNode& op : f_.ops()) Rewrite(op);
    Graph g(f_.name());
    for (TensorId t = 0; t < f_.tensors().size(); ++t) {
      TensorInfo info = f_.tensor(t);
      info.dtype = dtype_[t];
      g.AddTensor(std::move(info));
    }
    for (TensorInfo& info : extra_) g.AddTensor(std::move(info));
    plan_.insert(plan_.begin(), std::make_move_iterator(leaf_casts_.begin()),
                 std::make_move_iterator(leaf_casts_.end()));
    for (PlannedOp& p : plan_) {
      g.AddOpInto(p.op, std::move(p.inputs), std::move(p.attrs), std::move(p.outputs), std::move(p.name));
      if (!p.recompute.empty()) g.SetOpRecompute(g.ops().size() - 1, p.recompute);
    }
    if (f_.valid(f_.loss())) g.SetLoss(f_.loss());
    for (TensorId t : f_.outputs()) g.AddOutput(t);
    SINKRT_RETURN_IF_ERROR(g.status(),
                           std::string("amp_level ") + AmpLevelName(level_) + " on graph '" + f_.name() + "'");
    return g;
  }

 private:
  DType DTypeOf(TensorId t) const { return t < dtype_.size() ? dtype_[t] : extra_[t - dtype_.size()].dtype; }
  const std::string& NameOf(TensorId t) const {
    return t < dtype_.size() ? f_.tensor(t).name : extra_[t - dtype_.size()].name;
  }

  std::string FreshName(const std::string& base) {
    std::string n = base;
    for (int k = 1; taken_.count(n) != 0; ++k) n = base + "_" + std::to_string(k);
    taken_.insert(n);
    return n;
  }

  TensorId NewTensor(const std::string& name, DType dtype, const Shape& shape) {
    TensorInfo info;
    info.name = name;
    info.dtype = dtype;
    info.shape = shape;
    info.init.kind = InitKind::None;
    extra_.push_back(std::move(info));
    return static_cast<TensorId>(dtype_.size() + extra_.size() - 1);
  }

  Shape ShapeOf(TensorId t) const { return t < dtype_.size() ? f_.tensor(t).shape : extra_[t - dtype_.size()].shape; }

  // `t` in dtype `want`: itself, or one shared Cast of it.
  TensorId As(TensorId t, DType want, const std::string& segment) {
    if (DTypeOf(t) == want) return t;
    const auto key = std::make_pair(t, want);
    if (auto it = casts_.find(key); it != casts_.end()) return it->second;
    const std::string name = FreshName(NameOf(t) + (want == DType::BF16 ? "/to_bf16" : "/to_f32"));
    const TensorId c = NewTensor(name, want, ShapeOf(t));
    OpAttrs a;
    a.cast_to = want;
    // A leaf's cast (a parameter's bf16 copy, the input's) goes first, so
    // that no cast sits inside a MatMul → BiasAdd → Relu chain the fusion
    // pass folds; it is read again in backward, so it is never recomputed.
    if (t < dtype_.size() && f_.producer(t) < 0) {
      leaf_casts_.push_back({OpCode::Cast, {t}, a, {c}, name, {}});
    } else {
      plan_.push_back({OpCode::Cast, {t}, a, {c}, name, segment});
    }
    casts_[key] = c;
    return c;
  }

  void Rewrite(const OpNode& op) {
    const Precision p = Classify(op.op);
    if (p == Precision::kFixed) {
      plan_.push_back({op.op, op.inputs, op.attrs, op.outputs, op.name, op.recompute});
      return;
    }
    DType run = DType::F32;
    if (p == Precision::kLow) run = LowOpDType(op.op, level_);
    // A byte mover runs in bf16 when any of its float inputs is bf16 (a
    // Concat of a bf16 activation and an f32 parameter casts the parameter),
    // so no activation goes back to f32 only to be moved.
    if (p == Precision::kFollow)
      for (TensorId t : op.inputs)
        if (DTypeOf(t) == DType::BF16) run = DType::BF16;
    PlannedOp out{op.op, {}, op.attrs, {}, op.name, op.recompute};
    for (TensorId t : op.inputs) out.inputs.push_back(IsFloat(DTypeOf(t)) ? As(t, run, op.recompute) : t);
    std::vector<std::pair<TensorId, TensorId>> back;  // (pinned f32 tensor, its bf16 value)
    for (size_t k = 0; k < op.outputs.size(); ++k) {
      const TensorId o = op.outputs[k];
      const DType was = f_.tensor(o).dtype;
      // LayerNorm's mean and rstd are statistics for its gradient: f32.
      const DType want = !IsFloat(was) || (op.op == OpCode::LayerNorm && k > 0) ? was : run;
      if (pinned_[o] && want != was) {
        const TensorId w = NewTensor(FreshName(f_.tensor(o).name + "/bf16"), want, f_.tensor(o).shape);
        out.outputs.push_back(w);
        back.emplace_back(o, w);
        casts_[{o, want}] = w;
      } else {
        dtype_[o] = want;
        out.outputs.push_back(o);
      }
    }
    plan_.push_back(std::move(out));
    for (const auto& [o, w] : back) {
      OpAttrs a;
      a.cast_to = f_.tensor(o).dtype;
      plan_.push_back({OpCode::Cast, {w}, a, {o}, FreshName(f_.tensor(o).name + "/to_f32"), op.recompute});
    }
  }

  const Graph& f_;
  const AmpLevel level_;
  std::vector<DType> dtype_;       // per tensor of f_: the dtype it takes
  std::vector<bool> pinned_;       // the loss and the outputs: stay f32
  std::vector<TensorInfo> extra_;  // new tensors, ids from f_.tensors().size()
  std::vector<PlannedOp> plan_;
  std::vector<PlannedOp> leaf_casts_;  // run before every other op
  std::map<std::pair<TensorId, DType>, TensorId> casts_;
  std::unordered_set<std::string> taken_;  // tensor and op names in use
};

}  // namespace

Result<Graph> ApplyAmp(const Graph& forward, AmpLevel level) {
  if (level == AmpLevel::O0) return forward;
  SINKRT_RETURN_IF_ERROR(forward.status(), "amp_level on graph '" + forward.name() + "'");
  return AmpRewrite(forward, level).Run();
}

}  // namespace sinkrt::host::passes
