// Reductions and broadcasts: ReduceSum, ReduceMean, ReduceMax, SumToShape,
// BroadcastTo, BiasAdd, BiasAddGrad. All are planned at load into a BroadcastPlan or a
// ReducePlan (broadcast.h) and run as flat loops.
//
// Every float operand is f32, or every one bf16 (mixed precision). bf16
// computes in f32 and rounds once per stored element; the sums add in f32,
// in the float order, into kernel scratch (one float per output element),
// so a bf16 reduction is the rounded f32 reduction of the widened input.
#include <algorithm>
#include <limits>
#include <string>

#include "device/src/kernels/broadcast.h"
#include "device/src/kernels/check.h"
#include "device/src/kernels/kernel_list.h"
#include "device/src/kernels/vector_math.h"

namespace sinkrt::device {
namespace {

struct ReduceState : KernelState {
  ReducePlan plan;
};

struct BroadcastState : KernelState {
  BroadcastPlan plan;
  float scale = 1.0f;
};

// All operands f32, or all bf16.
Status CheckFloats(const KernelArgs& args) { return CheckAllFloatDType(args).status(); }

// A bf16 reduction's f32 sums live in the kernel scratch.
void ReserveReduceScratch(const KernelArgs& args, const ReducePlan& plan, PrepareContext& ctx) {
  if (args.outputs[0].dtype != DType::BF16) return;
  const uint64_t bytes = static_cast<uint64_t>(ReduceScratchFloats(plan)) * sizeof(float);
  ctx.scratch_bytes = std::max(ctx.scratch_bytes, bytes);
}

// Whether `from` broadcasts to exactly `to`: the pair SumToShape reduces
// (dx to dy) and BroadcastTo expands (x to y).
bool BroadcastsExactlyTo(const Shape& from, const Shape& to) {
  Shape b;
  return from.size() <= to.size() && BroadcastShapes(from, to, &b) && b == to;
}

template <bool kMean, bool kMax = false>
Status ReducePrepare(const KernelArgs& args, PrepareContext& ctx, std::unique_ptr<KernelState>* state) {
  SINKRT_RETURN_IF_ERROR(CheckOperands(args, 1, 1));
  SINKRT_ASSIGN_OR_RETURN(const fb::AxisOptions* opts, GetOptions<fb::AxisOptions>(args));
  SINKRT_RETURN_IF_ERROR(CheckFloats(args));
  const TensorRef& x = args.inputs[0];
  bool reduced[kMaxRank] = {};
  if (opts->axes() == nullptr || opts->axes()->size() == 0) {
    for (int d = 0; d < x.rank(); ++d) reduced[d] = true;
  } else {
    int prev = -1;
    for (int axis : *opts->axes()) {
      SINKRT_RETURN_IF_ERROR(CheckAxis(args, axis, x.rank(), In(0)));
      if (axis <= prev) {
        return OpError(
            args, "axes must be sorted and distinct, got " + std::to_string(axis) + " after " + std::to_string(prev));
      }
      reduced[axis] = true;
      prev = axis;
    }
  }
  Shape want;
  int64_t count = 1;
  for (int d = 0; d < x.rank(); ++d) {
    if (reduced[d]) count *= x.dim(d);
    if (!reduced[d]) {
      want.push_back(x.dim(d));
    } else if (opts->keep_dims()) {
      want.push_back(1);
    }
  }
  SINKRT_RETURN_IF_ERROR(
      CheckShape(args, Out(0), want,
                 ShapeToString(want) + (opts->keep_dims() ? " (reduced axes kept as 1)" : " (reduced axes dropped)")));
  SINKRT_RETURN_IF_ERROR(CheckNoOverlap(args, /*allow_exact_alias=*/false));
  auto s = std::make_unique<ReduceState>();
  const float scale = kMean && count > 0 ? 1.0f / static_cast<float>(count) : 1.0f;
  s->plan = PlanReduce(x.shape, std::span<const bool>(reduced, x.shape.size()), scale);
  if (!kMax) ReserveReduceScratch(args, s->plan, ctx);
  *state = std::move(s);
  return Status::Ok();
}

// The max of each y element's x elements, x visited in row-major order of
// the plan's merged dims: y starts at -inf and a NaN sticks (ops.ReduceMax
// propagates NaN). A max is one of its inputs, so bf16 needs no rounding
// and the order changes no bit. Empty reductions give -inf.
template <typename T>
void RunReduceMax(const ReducePlan& p, const T* x, T* y) {
  const T lowest = Store<T>(-std::numeric_limits<float>::infinity());
  std::fill(y, y + p.y_numel, lowest);
  if (p.x_numel == 0) return;
  const int last = p.rank - 1;
  const int64_t cols = p.dims[last], ys = p.y_strides[last];
  int64_t idx[kMaxRank] = {};
  for (int64_t base = 0; base < p.x_numel; base += cols) {
    int64_t yo = 0;
    for (int d = 0; d < last; ++d) yo += idx[d] * p.y_strides[d];
    const T* row = x + base;
    for (int64_t j = 0; j < cols; ++j) {
      T& m = y[yo + j * ys];
      const float v = Load(row[j]), cur = Load(m);
      if (v > cur || v != v) m = row[j];
    }
    for (int d = last - 1; d >= 0; --d) {  // the odometer over the outer dims
      if (++idx[d] < p.dims[d]) break;
      idx[d] = 0;
    }
  }
}

Status ReduceMaxRun(const KernelArgs& args, KernelState* state, RunContext&) {
  const ReducePlan& plan = static_cast<ReduceState*>(state)->plan;
  WithStorage(args.outputs[0].dtype, [&](auto tag) {
    using T = decltype(tag);
    RunReduceMax(plan, Data<T>(args.inputs[0]), Data<T>(args.outputs[0]));
  });
  return Status::Ok();
}

// Column sums of one block (BiasAddGrad's [N, C], SumToShape's [B, T, D]
// to [T, D]) split by columns across the team, each column summed in the
// same row order as unsplit; any other plan runs whole.
Status ReduceRun(const KernelArgs& args, KernelState* state, RunContext& ctx) {
  const ReducePlan& plan = static_cast<ReduceState*>(state)->plan;
  const bool bf16 = args.outputs[0].dtype == DType::BF16;
  float* acc = reinterpret_cast<float*>(ctx.scratch);
  if (const int64_t cols = ReduceColumns(plan); cols > 0) {
    ForRange(
        ctx, cols,
        [&](int64_t begin, int64_t end) {
          if (bf16) {
            RunReduceColumns(plan, Data<bf16_t>(args.inputs[0]), Data<bf16_t>(args.outputs[0]), acc, begin, end);
          } else {
            RunReduceColumns(plan, args.inputs[0].f32(), args.outputs[0].f32(), begin, end);
          }
        },
        RowsPerPart(plan.dims[0]));
  } else if (bf16) {
    RunReduce(plan, Data<bf16_t>(args.inputs[0]), Data<bf16_t>(args.outputs[0]), acc);
  } else {
    RunReduce(plan, args.inputs[0].f32(), args.outputs[0].f32());
  }
  return Status::Ok();
}

// dx (the output) must broadcast to exactly dy's shape.
Status SumToShapePrepare(const KernelArgs& args, PrepareContext& ctx, std::unique_ptr<KernelState>* state) {
  SINKRT_RETURN_IF_ERROR(CheckOperands(args, 1, 1));
  SINKRT_RETURN_IF_ERROR(CheckNoOptions(args));
  SINKRT_RETURN_IF_ERROR(CheckFloats(args));
  const TensorRef &dy = args.inputs[0], &dx = args.outputs[0];
  if (!BroadcastsExactlyTo(dx.shape, dy.shape)) {
    return OpError(args, "output 0 has shape " + ShapeToString(dx.shape) +
                             ", expected a shape that broadcasts to input 0's " + ShapeToString(dy.shape));
  }
  SINKRT_RETURN_IF_ERROR(CheckNoOverlap(args, /*allow_exact_alias=*/false));
  auto s = std::make_unique<ReduceState>();
  s->plan = PlanReduceTo(dy.shape, dx.shape, 1.0f);
  ReserveReduceScratch(args, s->plan, ctx);
  *state = std::move(s);
  return Status::Ok();
}

Status BroadcastToPrepare(const KernelArgs& args, PrepareContext&, std::unique_ptr<KernelState>* state) {
  SINKRT_RETURN_IF_ERROR(CheckOperands(args, 1, 1));
  SINKRT_ASSIGN_OR_RETURN(const fb::AxisOptions* opts, GetOptions<fb::AxisOptions>(args));
  SINKRT_RETURN_IF_ERROR(CheckFloats(args));
  const TensorRef &x = args.inputs[0], &y = args.outputs[0];
  if (!BroadcastsExactlyTo(x.shape, y.shape)) {
    return OpError(args, "input 0 has shape " + ShapeToString(x.shape) + ", which does not broadcast to output 0's " +
                             ShapeToString(y.shape));
  }
  SINKRT_RETURN_IF_ERROR(CheckNoOverlap(args, /*allow_exact_alias=*/true));
  auto s = std::make_unique<BroadcastState>();
  s->plan = PlanBroadcast(y.shape, x.shape);
  s->scale = opts->scale();
  *state = std::move(s);
  return Status::Ok();
}

// The bf16 loops of BroadcastTo and BiasAdd, compiled per ISA (storage.h:
// narrowing is slow on baseline SSE2); the f32 loops vectorise as they are.
// Both split across the team by ranges of y, which changes no bit.
SINKRT_VECTOR_CLONES void BroadcastToBf16(const BroadcastPlan& p, const bf16_t* x, bf16_t* y, float scale,
                                          int64_t begin, int64_t end) {
  RunBroadcast(
      p, x, x, y, [scale](float a, float) { return scale * a; }, begin, end);
}

Status BroadcastToRun(const KernelArgs& args, KernelState* state, RunContext& ctx) {
  const auto& s = *static_cast<BroadcastState*>(state);
  const float scale = s.scale;
  if (args.outputs[0].dtype == DType::BF16) {
    const bf16_t* x = Data<bf16_t>(args.inputs[0]);
    bf16_t* y = Data<bf16_t>(args.outputs[0]);
    ForBroadcastParts(ctx, s.plan,
                      [&](int64_t begin, int64_t end) { BroadcastToBf16(s.plan, x, y, scale, begin, end); });
    return Status::Ok();
  }
  const float* x = args.inputs[0].f32();
  float* y = args.outputs[0].f32();
  ForBroadcastParts(ctx, s.plan, [&](int64_t begin, int64_t end) {
    RunBroadcast(
        s.plan, x, x, y, [scale](float a, float) { return scale * a; }, begin, end);
  });
  return Status::Ok();
}

// The channel axis of BiasAdd / BiasAddGrad, which the contract fixes at 1
// ([N,C], [N,C,L], NCHW); the option must say so.
Result<int> ChannelAxis(const KernelArgs& args, const TensorRef& t, Operand of) {
  SINKRT_ASSIGN_OR_RETURN(const fb::AxisOptions* opts, GetOptions<fb::AxisOptions>(args));
  if (t.rank() < 2) {
    return OpError(args,
                   of.Name() + " has shape " + ShapeToString(t.shape) + ", expected rank >= 2 with channels on axis 1");
  }
  if (opts->axis() != 1) {
    return OpError(args, "axis is " + std::to_string(opts->axis()) + ", expected 1 (the channel axis of [N, C, ...])");
  }
  return 1;
}

Status BiasAddPrepare(const KernelArgs& args, PrepareContext&, std::unique_ptr<KernelState>* state) {
  SINKRT_RETURN_IF_ERROR(CheckOperands(args, 2, 1));
  SINKRT_RETURN_IF_ERROR(CheckFloats(args));
  const TensorRef& x = args.inputs[0];
  SINKRT_ASSIGN_OR_RETURN(const int axis, ChannelAxis(args, x, In(0)));
  const int64_t c = x.dim(axis);
  SINKRT_RETURN_IF_ERROR(CheckShape(
      args, In(1), Shape{c},
      "[C=" + std::to_string(c) + "] (axis " + std::to_string(axis) + " of input 0 " + ShapeToString(x.shape) + ")"));
  SINKRT_RETURN_IF_ERROR(CheckSameShape(args, Out(0), In(0)));
  SINKRT_RETURN_IF_ERROR(CheckNoOverlap(args, /*allow_exact_alias=*/true));
  // The bias as NumPy sees it: [C, 1, ..., 1] right-aligned against x.
  Shape bias_shape(static_cast<size_t>(x.rank() - axis), 1);
  bias_shape[0] = c;
  auto s = std::make_unique<BroadcastState>();
  s->plan = PlanBroadcast(x.shape, x.shape, bias_shape);
  *state = std::move(s);
  return Status::Ok();
}

struct BiasAddOp {
  float operator()(float a, float b) const { return a + b; }
};

SINKRT_VECTOR_CLONES void BiasAddBf16(const BroadcastPlan& p, const bf16_t* x, const bf16_t* bias, bf16_t* y,
                                      int64_t begin, int64_t end) {
  RunBroadcast(p, x, bias, y, BiasAddOp(), begin, end);
}

Status BiasAddRun(const KernelArgs& args, KernelState* state, RunContext& ctx) {
  const BroadcastPlan& plan = static_cast<BroadcastState*>(state)->plan;
  if (args.outputs[0].dtype == DType::BF16) {
    const bf16_t *x = Data<bf16_t>(args.inputs[0]), *bias = Data<bf16_t>(args.inputs[1]);
    bf16_t* y = Data<bf16_t>(args.outputs[0]);
    ForBroadcastParts(ctx, plan, [&](int64_t begin, int64_t end) { BiasAddBf16(plan, x, bias, y, begin, end); });
  } else {
    const float *x = args.inputs[0].f32(), *bias = args.inputs[1].f32();
    float* y = args.outputs[0].f32();
    ForBroadcastParts(ctx, plan,
                      [&](int64_t begin, int64_t end) { RunBroadcast(plan, x, bias, y, BiasAddOp(), begin, end); });
  }
  return Status::Ok();
}

Status BiasAddGradPrepare(const KernelArgs& args, PrepareContext& ctx, std::unique_ptr<KernelState>* state) {
  SINKRT_RETURN_IF_ERROR(CheckOperands(args, 1, 1));
  SINKRT_RETURN_IF_ERROR(CheckFloats(args));
  const TensorRef& dy = args.inputs[0];
  SINKRT_ASSIGN_OR_RETURN(const int axis, ChannelAxis(args, dy, In(0)));
  const int64_t c = dy.dim(axis);
  SINKRT_RETURN_IF_ERROR(CheckShape(
      args, Out(0), Shape{c},
      "[C=" + std::to_string(c) + "] (axis " + std::to_string(axis) + " of input 0 " + ShapeToString(dy.shape) + ")"));
  SINKRT_RETURN_IF_ERROR(CheckNoOverlap(args, /*allow_exact_alias=*/false));
  bool reduced[kMaxRank] = {};
  for (int d = 0; d < dy.rank(); ++d) reduced[d] = d != axis;
  auto s = std::make_unique<ReduceState>();
  s->plan = PlanReduce(dy.shape, std::span<const bool>(reduced, dy.shape.size()), 1.0f);
  ReserveReduceScratch(args, s->plan, ctx);
  *state = std::move(s);
  return Status::Ok();
}

}  // namespace

const KernelImpl kReduceSumKernel = {ReducePrepare<false>, ReduceRun};
const KernelImpl kReduceMeanKernel = {ReducePrepare<true>, ReduceRun};
const KernelImpl kReduceMaxKernel = {ReducePrepare<false, true>, ReduceMaxRun};
const KernelImpl kSumToShapeKernel = {SumToShapePrepare, ReduceRun};
const KernelImpl kBroadcastToKernel = {BroadcastToPrepare, BroadcastToRun};
const KernelImpl kBiasAddKernel = {BiasAddPrepare, BiasAddRun};
const KernelImpl kBiasAddGradKernel = {BiasAddGradPrepare, ReduceRun};

}  // namespace sinkrt::device
