// Add, Sub, Mul, Div, Maximum, Minimum, Pow (NumPy broadcasting), the
// broadcasting gradient helpers of Maximum, Minimum, Pow and ReduceMax
// (EqualMask), and AddN
// (same-shape sum), split across the worker team by ranges of y
// (parallel_range.h).
//
// Every operand f32, or every one bf16 (mixed precision): the loops are
// templated on the storage type (storage.h) and compute in f32, rounding
// once per stored element; AddN accumulates in f32.
//
// The compiler may run these in place (y is exactly a y-shaped input), so the
// loops take plain pointers: GCC vectorises them behind a runtime overlap
// check, and every y[i] is written after its inputs are read.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "device/src/kernels/broadcast.h"
#include "device/src/kernels/check.h"
#include "device/src/kernels/kernel_list.h"
#include "device/src/kernels/vector_math.h"

namespace sinkrt::device {
namespace {

struct BinaryState : KernelState {
  BroadcastPlan plan;
};

Status BinaryPrepare(const KernelArgs& args, PrepareContext&, std::unique_ptr<KernelState>* state) {
  SINKRT_RETURN_IF_ERROR(CheckOperands(args, 2, 1));
  SINKRT_RETURN_IF_ERROR(CheckNoOptions(args));
  SINKRT_RETURN_IF_ERROR(CheckAllFloatDType(args).status());
  const TensorRef &a = args.inputs[0], &b = args.inputs[1];
  Shape shape;
  if (!BroadcastShapes(a.shape, b.shape, &shape)) {
    return OpError(
        args, "input 0 " + ShapeToString(a.shape) + " and input 1 " + ShapeToString(b.shape) + " do not broadcast");
  }
  SINKRT_RETURN_IF_ERROR(CheckShape(args, Out(0), shape, ShapeToString(shape) + " (the broadcast of inputs 0 and 1)"));
  SINKRT_RETURN_IF_ERROR(CheckNoOverlap(args, /*allow_exact_alias=*/true));
  auto s = std::make_unique<BinaryState>();
  s->plan = PlanBroadcast(shape, a.shape, b.shape);
  *state = std::move(s);
  return Status::Ok();
}

// The bf16 loop of each op over units [begin, end), compiled per ISA
// (storage.h: narrowing is slow on baseline SSE2); the f32 loops vectorise
// as they are.
using BinaryBf16 = void (*)(const BroadcastPlan&, const bf16_t*, const bf16_t*, bf16_t*, int64_t, int64_t);

// Split across the team by ranges of y (ForBroadcastParts): every element
// is computed as unsplit, so no bit changes.
template <typename F, BinaryBf16 kBf16>
Status BinaryRun(const KernelArgs& args, KernelState* state, RunContext& ctx) {
  const BroadcastPlan& plan = static_cast<BinaryState*>(state)->plan;
  if (args.outputs[0].dtype == DType::BF16) {
    const bf16_t *a = Data<bf16_t>(args.inputs[0]), *b = Data<bf16_t>(args.inputs[1]);
    bf16_t* y = Data<bf16_t>(args.outputs[0]);
    ForBroadcastParts(ctx, plan, [&](int64_t begin, int64_t end) { kBf16(plan, a, b, y, begin, end); });
  } else {
    const float *a = args.inputs[0].f32(), *b = args.inputs[1].f32();
    float* y = args.outputs[0].f32();
    ForBroadcastParts(ctx, plan, [&](int64_t begin, int64_t end) { RunBroadcast(plan, a, b, y, F(), begin, end); });
  }
  return Status::Ok();
}

struct AddOp {
  float operator()(float a, float b) const { return a + b; }
};
struct SubOp {
  float operator()(float a, float b) const { return a - b; }
};
struct MulOp {
  float operator()(float a, float b) const { return a * b; }
};

// IEEE, as MindSpore's RealDiv: x / 0 = ±inf, 0 / 0 = NaN.
struct DivOp {
  float operator()(float a, float b) const { return a / b; }
};
// A NaN operand gives NaN (MindSpore's ops.maximum returns the NaN element);
// at a tie either operand is the value.
struct MaximumOp {
  float operator()(float a, float b) const { return (a > b || a != a) ? a : b; }
};
struct MinimumOp {
  float operator()(float a, float b) const { return (a < b || a != a) ? a : b; }
};
// libm's powf: pow(x < 0, non-integer) = NaN, pow(0, -1) = inf.
struct PowOp {
  float operator()(float a, float b) const { return std::pow(a, b); }
};
// MindSpore's MaximumGrad (CPU): dy goes to the larger operand, half of it
// to each at a tie. The mask of a; b's is the mask with a and b swapped.
struct MaximumGradMaskOp {
  float operator()(float a, float b) const { return a > b ? 1.0f : (a == b ? 0.5f : 0.0f); }
};
struct MinimumGradMaskOp {
  float operator()(float a, float b) const { return a < b ? 1.0f : (a == b ? 0.5f : 0.0f); }
};
// ReduceMax's gradient (MindSpore's _min_or_max_grad): 1 where x equals the
// broadcast max, else 0 (NaN equals nothing).
struct EqualMaskOp {
  float operator()(float a, float b) const { return a == b ? 1.0f : 0.0f; }
};
// d x^e / dx = e * x^(e - 1), as MindSpore's Pow bprop writes it.
struct PowGradBaseOp {
  float operator()(float x, float e) const { return e * std::pow(x, e - 1.0f); }
};

SINKRT_VECTOR_CLONES void DivBf16(const BroadcastPlan& p, const bf16_t* a, const bf16_t* b, bf16_t* y, int64_t begin,
                                  int64_t end) {
  RunBroadcast(p, a, b, y, DivOp(), begin, end);
}
SINKRT_VECTOR_CLONES void MaximumBf16(const BroadcastPlan& p, const bf16_t* a, const bf16_t* b, bf16_t* y,
                                      int64_t begin, int64_t end) {
  RunBroadcast(p, a, b, y, MaximumOp(), begin, end);
}
SINKRT_VECTOR_CLONES void MinimumBf16(const BroadcastPlan& p, const bf16_t* a, const bf16_t* b, bf16_t* y,
                                      int64_t begin, int64_t end) {
  RunBroadcast(p, a, b, y, MinimumOp(), begin, end);
}
SINKRT_VECTOR_CLONES void PowBf16(const BroadcastPlan& p, const bf16_t* a, const bf16_t* b, bf16_t* y, int64_t begin,
                                  int64_t end) {
  RunBroadcast(p, a, b, y, PowOp(), begin, end);
}
SINKRT_VECTOR_CLONES void MaximumGradMaskBf16(const BroadcastPlan& p, const bf16_t* a, const bf16_t* b, bf16_t* y,
                                              int64_t begin, int64_t end) {
  RunBroadcast(p, a, b, y, MaximumGradMaskOp(), begin, end);
}
SINKRT_VECTOR_CLONES void MinimumGradMaskBf16(const BroadcastPlan& p, const bf16_t* a, const bf16_t* b, bf16_t* y,
                                              int64_t begin, int64_t end) {
  RunBroadcast(p, a, b, y, MinimumGradMaskOp(), begin, end);
}
SINKRT_VECTOR_CLONES void EqualMaskBf16(const BroadcastPlan& p, const bf16_t* a, const bf16_t* b, bf16_t* y,
                                        int64_t begin, int64_t end) {
  RunBroadcast(p, a, b, y, EqualMaskOp(), begin, end);
}
SINKRT_VECTOR_CLONES void PowGradBaseBf16(const BroadcastPlan& p, const bf16_t* a, const bf16_t* b, bf16_t* y,
                                          int64_t begin, int64_t end) {
  RunBroadcast(p, a, b, y, PowGradBaseOp(), begin, end);
}

SINKRT_VECTOR_CLONES void AddBf16(const BroadcastPlan& p, const bf16_t* a, const bf16_t* b, bf16_t* y, int64_t begin,
                                  int64_t end) {
  RunBroadcast(p, a, b, y, AddOp(), begin, end);
}
SINKRT_VECTOR_CLONES void SubBf16(const BroadcastPlan& p, const bf16_t* a, const bf16_t* b, bf16_t* y, int64_t begin,
                                  int64_t end) {
  RunBroadcast(p, a, b, y, SubOp(), begin, end);
}
SINKRT_VECTOR_CLONES void MulBf16(const BroadcastPlan& p, const bf16_t* a, const bf16_t* b, bf16_t* y, int64_t begin,
                                  int64_t end) {
  RunBroadcast(p, a, b, y, MulOp(), begin, end);
}

Status AddNPrepare(const KernelArgs& args, PrepareContext&, std::unique_ptr<KernelState>*) {
  SINKRT_RETURN_IF_ERROR(CheckOperandsAtLeast(args, 2, 1));
  SINKRT_RETURN_IF_ERROR(CheckNoOptions(args));
  SINKRT_RETURN_IF_ERROR(CheckAllFloatDType(args).status());
  for (size_t i = 0; i < args.inputs.size(); ++i) {
    SINKRT_RETURN_IF_ERROR(CheckSameShape(args, In(static_cast<int>(i)), Out(0)));
  }
  return CheckNoOverlap(args, /*allow_exact_alias=*/true);
}

// Elements [begin, end), chunked so that y may be any one of the inputs: a
// chunk of every input is read before that chunk of y is written. Order:
// ((a0 + a1) + a2) + ..., in f32 whatever the storage, for each element
// alone, so the chunks' bounds (and a split's) change no bit.
// Always inlined, so that AddNBf16's clones each get their own loops.
template <typename T>
[[gnu::always_inline]] inline void AddNChunks(const KernelArgs& args, int64_t begin, int64_t end) {
  constexpr int64_t kChunk = 512;
  const size_t count = args.inputs.size();
  T* y = Data<T>(args.outputs[0]);
  for (int64_t c0 = begin; c0 < end; c0 += kChunk) {
    const int64_t w = std::min(kChunk, end - c0);
    float acc[kChunk];
    const T* __restrict a0 = Data<T>(args.inputs[0]) + c0;
    const T* __restrict a1 = Data<T>(args.inputs[1]) + c0;
    for (int64_t j = 0; j < w; ++j) acc[j] = Load(a0[j]) + Load(a1[j]);
    for (size_t k = 2; k < count; ++k) {
      const T* __restrict ak = Data<T>(args.inputs[k]) + c0;
      for (int64_t j = 0; j < w; ++j) acc[j] += Load(ak[j]);
    }
    if constexpr (std::is_same_v<T, float>) {
      std::copy(acc, acc + w, y + c0);
    } else {
      for (int64_t j = 0; j < w; ++j) y[c0 + j] = Store<T>(acc[j]);
    }
  }
}

// Compiled per ISA, as the binary ops' bf16 loops.
SINKRT_VECTOR_CLONES void AddNBf16(const KernelArgs& args, int64_t begin, int64_t end) {
  AddNChunks<bf16_t>(args, begin, end);
}

Status AddNRun(const KernelArgs& args, KernelState*, RunContext& ctx) {
  const bool bf16 = args.outputs[0].dtype == DType::BF16;
  ForRange(ctx, args.outputs[0].numel, [&](int64_t begin, int64_t end) {
    if (bf16) {
      AddNBf16(args, begin, end);
    } else {
      AddNChunks<float>(args, begin, end);
    }
  });
  return Status::Ok();
}

}  // namespace

const KernelImpl kAddKernel = {BinaryPrepare, BinaryRun<AddOp, AddBf16>};
const KernelImpl kSubKernel = {BinaryPrepare, BinaryRun<SubOp, SubBf16>};
const KernelImpl kMulKernel = {BinaryPrepare, BinaryRun<MulOp, MulBf16>};
const KernelImpl kAddNKernel = {AddNPrepare, AddNRun};
const KernelImpl kDivKernel = {BinaryPrepare, BinaryRun<DivOp, DivBf16>};
const KernelImpl kMaximumKernel = {BinaryPrepare, BinaryRun<MaximumOp, MaximumBf16>};
const KernelImpl kMinimumKernel = {BinaryPrepare, BinaryRun<MinimumOp, MinimumBf16>};
const KernelImpl kPowKernel = {BinaryPrepare, BinaryRun<PowOp, PowBf16>};
const KernelImpl kMaximumGradMaskKernel = {BinaryPrepare, BinaryRun<MaximumGradMaskOp, MaximumGradMaskBf16>};
const KernelImpl kMinimumGradMaskKernel = {BinaryPrepare, BinaryRun<MinimumGradMaskOp, MinimumGradMaskBf16>};
const KernelImpl kPowGradBaseKernel = {BinaryPrepare, BinaryRun<PowGradBaseOp, PowGradBaseBf16>};
const KernelImpl kEqualMaskKernel = {BinaryPrepare, BinaryRun<EqualMaskOp, EqualMaskBf16>};

}  // namespace sinkrt::device
