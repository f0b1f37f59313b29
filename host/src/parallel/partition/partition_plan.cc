#include "host/src/parallel/partition/partition_plan.h"

#include <algorithm>

namespace sinkrt::host::parallel {
namespace {

bool IsLeaf(TensorKind k) {
  return k == TensorKind::Param || k == TensorKind::Const || k == TensorKind::State || k == TensorKind::Input;
}

int64_t Product(const Shape& s, size_t end) {
  int64_t p = 1;
  for (size_t i = 0; i < end; ++i) p *= s[i];
  return p;
}

}  // namespace

bool SameSlices(const TensorLayout& a, const TensorLayout& b) {
  if (DeviceCount(a.device_matrix) != DeviceCount(b.device_matrix)) return false;
  if (SliceShape(a) != SliceShape(b) || a.partial.empty() != b.partial.empty()) return false;
  for (int64_t r = 0; r < DeviceCount(a.device_matrix); ++r)
    if (SliceOffset(a, r) != SliceOffset(b, r)) return false;
  return true;
}

void ReshapeLayouts(const TensorLayout& in, const Shape& out_shape, TensorLayout* need, TensorLayout* out) {
  *need = in;
  *out = in;
  out->shape = out_shape;
  out->tensor_map.assign(out_shape.size(), -1);
  for (size_t i = 0; i < in.shape.size(); ++i) {
    const int a = in.tensor_map[i];
    if (a < 0) continue;
    const int64_t s = AxisSize(in.device_matrix, a);
    if (s == 1) {
      need->tensor_map[i] = -1;
      continue;
    }
    const int64_t prefix = Product(in.shape, i);
    bool carried = false;
    for (size_t j = 0; j < out_shape.size() && !carried; ++j) {
      if (Product(out_shape, j) == prefix && out_shape[j] % s == 0 && out->tensor_map[j] < 0) {
        out->tensor_map[j] = a;
        carried = true;
      }
    }
    if (!carried) need->tensor_map[i] = -1;
  }
}

TensorLayout BatchInputLayout(const TensorLayout& labels, const Shape& shape) {
  TensorLayout l = ReplicatedLayout(labels.device_matrix, shape);
  const int a = labels.tensor_map.empty() ? -1 : labels.tensor_map[0];
  if (!shape.empty() && a >= 0 && shape[0] % AxisSize(l.device_matrix, a) == 0) l.tensor_map[0] = a;
  return l;
}

namespace {

class Planner {
 public:
  Planner(const Graph& g, std::span<const Strategy> strategies, const PartitionOptions& o)
      : g_(g), strategies_(strategies), o_(o) {}

  Result<PartitionPlan> Run() {
    const size_t n = g_.tensors().size();
    plan_.layouts.resize(n);
    plan_.layout_owner.assign(n, -1);
    plan_.mirror_axes.resize(n);
    have_.assign(n, false);
    SINKRT_RETURN_IF_ERROR(PlaceBatch());
    plan_.ops.resize(g_.ops().size());
    for (size_t i = 0; i < g_.ops().size(); ++i) SINKRT_RETURN_IF_ERROR(PlanOp(i));
    return std::move(plan_);
  }

 private:
  Result<OpSharding> Shard(size_t i) {
    const OpNode& op = g_.ops()[i];
    const bool given = i < strategies_.size() && !strategies_[i].empty();
    return ShardOp(g_, op, given ? strategies_[i] : DefaultStrategy(g_, op, o_.device_num), o_.device_num);
  }

  // Every dataset column is a slice of one batch: it is split as the loss
  // splits its labels (dim 0 along the same axis), or whole with full_batch
  // or when the loss does not split the batch.
  Status PlaceBatch() {
    batch_ = ReplicatedLayout({o_.device_num}, {});
    if (!o_.dataset_strategy.empty()) return PlaceDatasetStrategy();
    if (o_.full_batch || g_.loss() == kInvalidTensor) return Status::Ok();
    const int64_t producer = g_.producer(g_.loss());
    if (producer < 0) return Status::Ok();
    const OpNode& loss = g_.ops()[producer];
    if (loss.op != OpCode::SparseSoftmaxCrossEntropy) return Status::Ok();
    SINKRT_ASSIGN_OR_RETURN(OpSharding s, Shard(static_cast<size_t>(producer)));
    batch_ = s.inputs[1];  // labels [N]
    return Status::Ok();
  }

  // dataset_strategy's tuple: input i's splits as a device matrix [s_0,
  // ..., s_{r-1}, repeat] (MindSpore's order, the repeat on the right, so
  // that every input's slice index follows the rank the same way), dim d
  // on axis r - d (counted from the right, after the repeat).
  Status PlaceDatasetStrategy() {
    std::vector<TensorId> inputs;
    for (TensorId t = 0; t < g_.tensors().size(); ++t)
      if (g_.tensor(t).kind == TensorKind::Input) inputs.push_back(t);
    auto names = [&] {
      std::string out;
      for (TensorId t : inputs) out += (out.empty() ? "" : ", ") + g_.tensor(t).name;
      return out;
    };
    if (o_.dataset_strategy.size() != inputs.size())
      return InvalidArgument("dataset_strategy has " + std::to_string(o_.dataset_strategy.size()) +
                             " strategies, but the network has " + std::to_string(inputs.size()) + " dataset inputs (" +
                             names() + ")");
    input_layouts_.assign(g_.tensors().size(), TensorLayout{});
    for (size_t i = 0; i < inputs.size(); ++i) {
      const TensorInfo& info = g_.tensor(inputs[i]);
      const std::vector<int64_t>& s = o_.dataset_strategy[i];
      const std::string what = "dataset_strategy[" + std::to_string(i) + "] for input '" + info.name + "' is " +
                               StrategyToString({s}) + ": ";
      if (s.size() != info.shape.size())
        return InvalidArgument(what + "it needs one value per dim of " + ShapeToString(info.shape));
      int64_t product = 1;
      for (size_t d = 0; d < s.size(); ++d) {
        if (s[d] < 1 || info.shape[d] % s[d] != 0)
          return InvalidArgument(what + "dim " + std::to_string(d) + " of " + ShapeToString(info.shape) +
                                 " can not be divisible by " + std::to_string(s[d]));
        product *= s[d];
      }
      if (product > o_.device_num || o_.device_num % product != 0)
        return InvalidArgument(what + "it requires " + std::to_string(product) + " devices, but the device number is " +
                               std::to_string(o_.device_num) + ", it can not be divisible by " +
                               std::to_string(product));
      TensorLayout l;
      l.shape = info.shape;
      l.device_matrix = s;
      const int64_t repeat = o_.device_num / product;
      if (repeat > 1) l.device_matrix.push_back(repeat);
      const int shift = repeat > 1 ? 1 : 0;
      for (size_t d = 0; d < s.size(); ++d)
        l.tensor_map.push_back(s[d] > 1 ? static_cast<int>(s.size() - 1 - d) + shift : -1);
      if (l.device_matrix.empty()) l.device_matrix = {1};
      SINKRT_RETURN_IF_ERROR(CheckLayout(l), what);
      input_layouts_[inputs[i]] = std::move(l);
    }
    return Status::Ok();
  }

  TensorLayout BatchLayout(const TensorInfo& t) const { return BatchInputLayout(batch_, t.shape); }

  // The layout of input `t` of op `i`, placing a leaf on first use.
  Status PlaceLeaf(size_t i, TensorId t, const TensorLayout& need, const std::vector<int>& grad_axes) {
    const TensorInfo& info = g_.tensor(t);
    if (info.kind == TensorKind::Input) {
      if (!have_[t]) Place(t, input_layouts_.empty() ? BatchLayout(info) : input_layouts_[t], i);
      return Status::Ok();
    }
    if (!have_[t]) {
      Place(t, need, i);
      if (info.kind == TensorKind::Param) plan_.mirror_axes[t] = grad_axes;
      return Status::Ok();
    }
    const TensorLayout& have = plan_.layouts[t];
    if (SameSlices(have, need) && (grad_axes.empty() || have.device_matrix == need.device_matrix)) {
      if (info.kind == TensorKind::Param) {
        std::vector<int>& m = plan_.mirror_axes[t];
        for (int a : grad_axes)
          if (std::find(m.begin(), m.end(), a) == m.end()) m.push_back(a);
        std::sort(m.begin(), m.end());
      }
      return Status::Ok();
    }
    const std::string first = g_.ops()[plan_.layout_owner[t]].name, second = g_.ops()[i].name;
    return InvalidArgument("parameter " + info.name + " is used by " + first + " with layout " + LayoutToString(have) +
                           " and by " + second + " with layout " + LayoutToString(need) +
                           "; a parameter shared by several ops must get the same layout in each");
  }

  void Place(TensorId t, TensorLayout l, size_t owner) {
    plan_.layouts[t] = std::move(l);
    plan_.layout_owner[t] = static_cast<int64_t>(owner);
    have_[t] = true;
  }

  Status PlanInput(size_t i, size_t k, const TensorLayout& need, const std::vector<int>& grad_axes, InputPlan* ip) {
    const TensorId t = g_.ops()[i].inputs[k];
    const TensorInfo& info = g_.tensor(t);
    ip->need = need;
    if (IsLeaf(info.kind)) SINKRT_RETURN_IF_ERROR(PlaceLeaf(i, t, need, grad_axes));
    // A parameter's partial gradient is reduced by its mirror group; an
    // activation's by a GradAllReduce in front of the op; data needs none.
    const bool activation =
        info.kind != TensorKind::Input ||
        std::find(o_.activation_inputs.begin(), o_.activation_inputs.end(), t) != o_.activation_inputs.end();
    if (info.kind != TensorKind::Param && info.kind != TensorKind::Const && info.kind != TensorKind::State &&
        activation && info.dtype == DType::F32)
      ip->grad_partial_axes = grad_axes;
    if (!have_[t]) {
      return InvalidArgument(g_.ops()[i].name + ": input " + info.name + " has no layout (it is produced later?)");
    }
    if (IsLeaf(info.kind) && info.kind != TensorKind::Input) return Status::Ok();  // stored as needed
    Result<RedistPlan> r = PlanRedistribution(plan_.layouts[t], need, info.dtype);
    if (!r.ok()) return InvalidArgument(g_.ops()[i].name + ": input " + info.name + ": " + r.status().message());
    ip->redistribution = std::move(*r);
    return Status::Ok();
  }

  Status PlanOp(size_t i) {
    const OpNode& op = g_.ops()[i];
    OpPlan& p = plan_.ops[i];
    p.inputs.resize(op.inputs.size());
    if (op.op == OpCode::Reshape || op.op == OpCode::Flatten) {
      const TensorId in = op.inputs[0];
      if (!have_[in]) {
        if (g_.tensor(in).kind == TensorKind::Input)
          Place(in, input_layouts_.empty() ? BatchLayout(g_.tensor(in)) : input_layouts_[in], i);
        else
          return InvalidArgument(op.name + ": input " + g_.tensor(in).name + " has no layout");
      }
      TensorLayout need, out;
      ReshapeLayouts(plan_.layouts[in], g_.tensor(op.outputs[0]).shape, &need, &out);
      SINKRT_RETURN_IF_ERROR(PlanInput(i, 0, need, {}, &p.inputs[0]));
      p.outputs = {out};
    } else {
      SINKRT_ASSIGN_OR_RETURN(p.sharding, Shard(i));
      p.has_rule = true;
      for (size_t k = 0; k < op.inputs.size(); ++k) {
        const TensorLayout& need = p.sharding.inputs[k];
        SINKRT_RETURN_IF_ERROR(PlanInput(i, k, need, GradPartialAxes(p.sharding, need), &p.inputs[k]));
      }
      p.outputs = p.sharding.outputs;
    }
    for (size_t o = 0; o < op.outputs.size(); ++o) Place(op.outputs[o], p.outputs[o], i);
    return Status::Ok();
  }

  const Graph& g_;
  std::span<const Strategy> strategies_;
  const PartitionOptions& o_;
  PartitionPlan plan_;
  std::vector<bool> have_;
  TensorLayout batch_;
  std::vector<TensorLayout> input_layouts_;  // per tensor, with dataset_strategy
};

}  // namespace

Result<PartitionPlan> PlanPartition(const Graph& g, std::span<const Strategy> strategies,
                                    const PartitionOptions& options) {
  if (!g.status().ok()) return g.status();
  if (options.device_num < 1) return InvalidArgument("device_num must be >= 1");
  return Planner(g, strategies, options).Run();
}

}  // namespace sinkrt::host::parallel
