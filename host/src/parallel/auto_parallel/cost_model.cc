#include "host/src/parallel/auto_parallel/cost_model.h"

#include <algorithm>
#include <optional>

namespace sinkrt::host::parallel {
namespace {

int64_t SliceBytes(const TensorLayout& layout, DType dtype) {
  return NumElements(SliceShape(layout)) * static_cast<int64_t>(DTypeSize(dtype));
}

// Ranks along `axes` of `dm` (the size of a group over them).
int64_t GroupSize(const DeviceMatrix& dm, const std::vector<int>& axes) {
  int64_t n = 1;
  for (int a : axes) n *= AxisSize(dm, a);
  return n;
}

bool IsGemm(OpCode op) { return op == OpCode::MatMul || op == OpCode::BatchMatMul || op == OpCode::Conv2D; }

bool SavesOutput(OpCode op) {
  return op == OpCode::Relu || op == OpCode::Sigmoid || op == OpCode::Tanh || op == OpCode::Softmax ||
         op == OpCode::LogSoftmax || op == OpCode::Exp || op == OpCode::Rsqrt;
}

// Ops whose backward reads none of their forward tensors.
bool SavesNothing(OpCode op) {
  switch (op) {
    case OpCode::Add:
    case OpCode::Sub:
    case OpCode::BiasAdd:
    case OpCode::ReduceSum:
    case OpCode::ReduceMean:
    case OpCode::Reshape:
    case OpCode::Flatten:
    case OpCode::Transpose:
    case OpCode::Concat:
    case OpCode::Split:
    case OpCode::Cast:
    case OpCode::Dropout:     // DropoutGrad redraws the mask from the step
    case OpCode::CausalMask:  // its gradient masks dy by position alone
    case OpCode::Pad:         // its gradient slices (or folds) dy alone
    case OpCode::OneHot:      // no gradient
      return true;
    default:
      return false;
  }
}

// The GEMM (batch, m, n, k) of a MatMul-like op from its local slices:
// MatMul and BatchMatMul from their operands (after the transposes),
// Conv2D as im2col: m = N·OH·OW, n = O, k = C·kh·kw.
struct Gemm {
  int64_t batch = 1, m = 0, n = 0, k = 0;
};

Gemm GemmOf(const OpNode& op, const std::vector<Shape>& in, const std::vector<Shape>& out) {
  Gemm g;
  if (op.op == OpCode::Conv2D) {
    const Shape& w = in[1];
    const Shape& y = out[0];
    g.m = y[0] * y[2] * y[3];
    g.n = w[0];
    g.k = w[1] * w[2] * w[3];
    return g;
  }
  const Shape& a = in[0];
  const Shape& b = in[1];
  const size_t ra = a.size(), rb = b.size();
  g.m = op.attrs.transpose_a ? a[ra - 1] : a[ra - 2];
  g.k = op.attrs.transpose_a ? a[ra - 2] : a[ra - 1];
  g.n = op.attrs.transpose_b ? b[rb - 2] : b[rb - 1];
  const Shape& y = out[0];
  for (size_t d = 0; d + 2 < y.size(); ++d) g.batch *= y[d];
  return g;
}

// A batch of products runs as one kernel whose rate is that of the
// products stacked along M (the batched kernels stream the batch as rows):
// batch x one tiny product's rate would charge each one the grid's per-call
// overhead.
double GemmBatchSeconds(const Calibration& c, int64_t batch, int64_t m, int64_t n, int64_t k) {
  if (batch <= 0 || m <= 0 || n <= 0 || k <= 0) return 0;
  return c.kernel_launch + double(batch) * 2.0 * double(m) * double(n) * double(k) / GemmFlops(c.gemm, batch * m, n, k);
}

// Fusion (compiler/fusion.h): MatMul or Conv2D → BiasAdd [→ Relu] run as
// one kernel when each intermediate has one reader.
bool FusedIntoGemm(const CostContext& ctx, const OpNode& op) {
  const Graph& g = *ctx.graph;
  if (op.op != OpCode::BiasAdd && op.op != OpCode::Relu) return false;
  const TensorId in = op.inputs[0];
  if (ctx.readers[in] != 1) return false;
  const int64_t p = g.producer(in);
  if (p < 0) return false;
  const OpNode& prev = g.ops()[p];
  if (op.op == OpCode::BiasAdd) return prev.op == OpCode::MatMul || prev.op == OpCode::Conv2D;
  return prev.op == OpCode::BiasAdd && FusedIntoGemm(ctx, prev);
}

// Split along axis 0 hands out views of its input: no kernel
// (compiler/views.h).
bool IsView(const OpNode& op) {
  return op.op == OpCode::Reshape || op.op == OpCode::Flatten || (op.op == OpCode::Split && op.attrs.axis == 0);
}

CollectiveKind ToCollective(RedistKind kind) {
  switch (kind) {
    case RedistKind::AllGather:
      return CollectiveKind::AllGather;
    case RedistKind::AllToAll:
      return CollectiveKind::AllToAll;
    case RedistKind::ReduceScatter:
      return CollectiveKind::ReduceScatter;
    default:
      return CollectiveKind::AllReduce;
  }
}

// A BatchNorm whose batch (x's dim 0) the plan splits runs as SyncBatchNorm
// under AUTO_PARALLEL (auto_plan.cc): an AllReduce of its 2·C statistics'
// sums over the ranks that split the batch in the forward, another of the
// two sums dx needs in the backward.
Status AddSyncBatchNormCost(const Graph& g, const OpNode& op, const std::vector<Shape>& in_slices, bool backward,
                            const Calibration& c, const std::string& transport, OpCost* cost) {
  if (op.op != OpCode::BatchNorm || in_slices.empty() || in_slices[0].size() < 2 || in_slices[0][0] < 1)
    return Status::Ok();
  const int64_t group = g.tensor(op.inputs[0]).shape[0] / in_slices[0][0];
  if (group < 2) return Status::Ok();
  const int64_t bytes = 2 * in_slices[0][1] * static_cast<int64_t>(sizeof(float));
  SINKRT_ASSIGN_OR_RETURN(const double t, CollectiveSeconds(c, transport, CollectiveKind::AllReduce, group, bytes));
  cost->comm_fwd_s += t;
  if (backward) cost->comm_bwd_s += t;
  return Status::Ok();
}

}  // namespace

Result<CostContext> MakeCostContext(const Graph& g, const Calibration& c, CostOptions options) {
  if (!c.collectives.count(options.transport)) {
    std::string have;
    for (const auto& [name, _] : c.collectives) have += (have.empty() ? "" : ", ") + name;
    return InvalidArgument("cost model: transport \"" + options.transport + "\" has no collective fits in " + c.source +
                           " (it has " + have + ")");
  }
  if (options.optimizer_state_factor < 0)
    return InvalidArgument("cost model: optimizer_state_factor " + std::to_string(options.optimizer_state_factor) +
                           " is negative");
  CostContext ctx;
  ctx.graph = &g;
  ctx.calibration = &c;
  ctx.options = std::move(options);
  ctx.needs_grad.assign(g.tensors().size(), false);
  ctx.readers.assign(g.tensors().size(), 0);
  for (const OpNode& op : g.ops())
    for (TensorId t : op.inputs) ++ctx.readers[t];
  for (size_t t = 0; t < g.tensors().size(); ++t) ctx.needs_grad[t] = g.tensors()[t].kind == TensorKind::Param;
  // Ops are in topological order: one pass carries "depends on a Param".
  for (const OpNode& op : g.ops()) {
    const bool any = std::any_of(op.inputs.begin(), op.inputs.end(), [&](TensorId t) { return ctx.needs_grad[t]; });
    if (any)
      for (TensorId t : op.outputs)
        if (g.tensor(t).kind == TensorKind::Intermediate) ctx.needs_grad[t] = true;
  }
  return ctx;
}

TensorLayout ResolvedLayout(TensorLayout layout) {
  layout.partial.clear();
  layout.partial_mean = false;
  return layout;
}

Result<double> RedistributionSeconds(const RedistPlan& plan, const Calibration& c, const std::string& transport,
                                     bool backward) {
  double s = 0;
  for (const RedistStep& step : plan.steps) {
    const int64_t bytes = std::max(step.in_bytes, step.out_bytes);
    if (step.kind != RedistKind::Slice) {
      SINKRT_ASSIGN_OR_RETURN(double t,
                              CollectiveSeconds(c, transport, ToCollective(step.kind), step.group_size, bytes));
      s += t;
    }
    if (!backward) continue;
    // The transpose of the step (grad_rules.cc, CommGrad).
    std::optional<CollectiveKind> grad;
    switch (step.kind) {
      case RedistKind::Slice:
      case RedistKind::ReduceScatter:
        grad = CollectiveKind::AllGather;
        break;
      case RedistKind::AllToAll:
        grad = CollectiveKind::AllToAll;
        break;
      case RedistKind::AllGather:
      case RedistKind::AllReduce:
        break;
    }
    if (!grad) continue;
    SINKRT_ASSIGN_OR_RETURN(double t, CollectiveSeconds(c, transport, *grad, step.group_size, bytes));
    s += t;
  }
  return s;
}

Result<double> RedistributionSeconds(const TensorLayout& from, const TensorLayout& to, DType dtype,
                                     const Calibration& c, const std::string& transport, bool backward) {
  SINKRT_ASSIGN_OR_RETURN(RedistPlan plan, PlanRedistribution(from, to, dtype));
  return RedistributionSeconds(plan, c, transport, backward);
}

Result<OpCost> CostOfOp(const CostContext& ctx, const OpNode& op, const OpSharding& sharding) {
  const Graph& g = *ctx.graph;
  const Calibration& c = *ctx.calibration;
  const std::string& transport = ctx.options.transport;
  if (sharding.inputs.size() != op.inputs.size() || sharding.outputs.size() != op.outputs.size())
    return InvalidArgument("cost model: op " + op.name + " has " + std::to_string(op.inputs.size()) + " inputs and " +
                           std::to_string(op.outputs.size()) + " outputs, its sharding " +
                           std::to_string(sharding.inputs.size()) + " and " + std::to_string(sharding.outputs.size()));
  OpCost cost;
  std::vector<Shape> in_slices, out_slices;
  std::vector<int64_t> in_bytes, out_bytes;
  for (size_t i = 0; i < op.inputs.size(); ++i) {
    in_slices.push_back(SliceShape(sharding.inputs[i]));
    in_bytes.push_back(SliceBytes(sharding.inputs[i], g.tensor(op.inputs[i]).dtype));
  }
  for (size_t i = 0; i < op.outputs.size(); ++i) {
    out_slices.push_back(SliceShape(sharding.outputs[i]));
    out_bytes.push_back(SliceBytes(sharding.outputs[i], g.tensor(op.outputs[i]).dtype));
  }
  auto needs_grad = [&](size_t i) { return ctx.needs_grad[op.inputs[i]]; };
  const bool has_backward =
      std::any_of(op.inputs.begin(), op.inputs.end(), [&](TensorId t) { return ctx.needs_grad[t]; });

  // ---- compute and activations kept ----
  if (IsGemm(op.op)) {
    const Gemm m = GemmOf(op, in_slices, out_slices);
    cost.compute_fwd_s = GemmBatchSeconds(c, m.batch, m.m, m.n, m.k);
    if (needs_grad(0)) cost.compute_bwd_s += GemmBatchSeconds(c, m.batch, m.m, m.k, m.n);  // dA = dY·Bᵀ
    if (needs_grad(1)) cost.compute_bwd_s += GemmBatchSeconds(c, m.batch, m.k, m.n, m.m);  // dB = Aᵀ·dY
    // Each operand is kept when its partner's gradient needs it; a
    // parameter is counted as a parameter, not as an activation.
    for (size_t i = 0; i < 2; ++i)
      if (needs_grad(1 - i) && g.tensor(op.inputs[i]).kind != TensorKind::Param) cost.activation_bytes += in_bytes[i];
  } else if (IsView(op)) {
    // No kernel, nothing kept; backward's gradient is a view too (or one
    // Concat of the pieces, priced as copying them).
    if (op.op == OpCode::Split && has_backward) cost.compute_bwd_s = MemoryBoundSeconds(c, 2 * in_bytes[0]);
  } else if (FusedIntoGemm(ctx, op)) {
    // Forward inside the GEMM's kernel; backward reads the output gradient
    // (BiasAdd: its sum over rows is the bias gradient; Relu: masked by the
    // output it keeps).
    if (has_backward) cost.compute_bwd_s = MemoryBoundSeconds(c, (op.op == OpCode::Relu ? 3 : 1) * out_bytes[0]);
    if (op.op == OpCode::Relu && has_backward) cost.activation_bytes = out_bytes[0];
  } else {
    int64_t bytes = 0;
    for (int64_t b : in_bytes) bytes += b;
    for (int64_t b : out_bytes) bytes += b;
    cost.compute_fwd_s = MemoryBoundSeconds(c, bytes);
    if (has_backward) {
      cost.compute_bwd_s = 2 * cost.compute_fwd_s;
      if (SavesOutput(op.op)) {
        cost.activation_bytes = out_bytes[0];
      } else if (!SavesNothing(op.op)) {
        for (size_t i = 0; i < op.inputs.size(); ++i)
          if (g.tensor(op.inputs[i]).kind != TensorKind::Param) cost.activation_bytes += in_bytes[i];
      }
    }
  }

  // ---- forward communication: the pending sums of partial outputs ----
  for (size_t i = 0; i < op.outputs.size(); ++i) {
    const TensorLayout& out = sharding.outputs[i];
    if (out.partial.empty()) continue;
    SINKRT_ASSIGN_OR_RETURN(
        double t, RedistributionSeconds(out, ResolvedLayout(out), g.tensor(op.outputs[i]).dtype, c, transport),
        "cost model: op " + op.name + " output " + std::to_string(i));
    cost.comm_fwd_s += t;
  }

  SINKRT_RETURN_IF_ERROR(AddSyncBatchNormCost(g, op, in_slices, has_backward, c, transport, &cost),
                         "cost model: op " + op.name);

  // ---- backward communication and parameter state ----
  for (size_t i = 0; i < op.inputs.size(); ++i) {
    const TensorInfo& info = g.tensor(op.inputs[i]);
    const TensorLayout& need = sharding.inputs[i];
    if (info.kind == TensorKind::Param) {
      cost.param_bytes += in_bytes[i];
      // The mirror group: the split loops that do not index the parameter
      // leave an addend of its gradient on each of their ranks.
      const int64_t n = GroupSize(need.device_matrix, GradPartialAxes(sharding, need));
      SINKRT_ASSIGN_OR_RETURN(double t, CollectiveSeconds(c, transport, CollectiveKind::AllReduce, n, in_bytes[i]));
      SINKRT_ASSIGN_OR_RETURN(const double alpha, CollectiveSeconds(c, transport, CollectiveKind::AllReduce, n, 0));
      const double share =
          std::min(1.0, double(in_bytes[i]) / double(std::max<int64_t>(1, ctx.options.gradient_bucket_bytes)));
      cost.grad_sync_s += t - alpha * (1 - share);
      cost.update_s += MemoryBoundSeconds(
          c, static_cast<int64_t>(double(in_bytes[i]) * (3.0 + 2.0 * ctx.options.optimizer_state_factor)));
    } else if (needs_grad(i)) {
      // Split loops that do not index this input leave its gradient
      // partial along their axes (the repeated axis is not a loop).
      const int64_t n = GroupSize(need.device_matrix, GradPartialAxes(sharding, need));
      SINKRT_ASSIGN_OR_RETURN(double t, CollectiveSeconds(c, transport, CollectiveKind::AllReduce, n, in_bytes[i]));
      cost.comm_bwd_s += t;
    }
  }
  cost.grad_bytes = cost.param_bytes;
  cost.optimizer_bytes = static_cast<int64_t>(double(cost.param_bytes) * ctx.options.optimizer_state_factor);
  cost.exposed_grad_sync_s = cost.grad_sync_s * (1.0 - c.grad_hidden_fraction);
  return cost;
}

}  // namespace sinkrt::host::parallel
