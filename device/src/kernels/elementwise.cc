// Add, Sub, Mul (NumPy broadcasting) and AddN (same-shape sum).
//
// Every operand f32, or every one bf16 (mixed precision): the loops are
// templated on the storage type (storage.h) and compute in f32, rounding
// once per stored element; AddN accumulates in f32.
//
// The compiler may run these in place (y is exactly a y-shaped input), so the
// loops take plain pointers: GCC vectorises them behind a runtime overlap
// check, and every y[i] is written after its inputs are read.
#include <algorithm>
#include <type_traits>

#include "broadcast.h"
#include "check.h"
#include "kernel_list.h"

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
    return OpError(args, "input 0 " + ShapeToString(a.shape) + " and input 1 " +
                             ShapeToString(b.shape) + " do not broadcast");
  }
  SINKRT_RETURN_IF_ERROR(CheckShape(
      args, Out(0), shape, ShapeToString(shape) + " (the broadcast of inputs 0 and 1)"));
  SINKRT_RETURN_IF_ERROR(CheckNoOverlap(args, /*allow_exact_alias=*/true));
  auto s = std::make_unique<BinaryState>();
  s->plan = PlanBroadcast(shape, a.shape, b.shape);
  *state = std::move(s);
  return Status::Ok();
}

template <typename F>
Status BinaryRun(const KernelArgs& args, KernelState* state, RunContext&) {
  return WithStorage(args.outputs[0].dtype, [&](auto t) {
    using T = decltype(t);
    RunBroadcast(static_cast<BinaryState*>(state)->plan, Data<T>(args.inputs[0]), Data<T>(args.inputs[1]),
                 Data<T>(args.outputs[0]), F());
    return Status::Ok();
  });
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

Status AddNPrepare(const KernelArgs& args, PrepareContext&, std::unique_ptr<KernelState>*) {
  SINKRT_RETURN_IF_ERROR(CheckOperandsAtLeast(args, 2, 1));
  SINKRT_RETURN_IF_ERROR(CheckNoOptions(args));
  SINKRT_RETURN_IF_ERROR(CheckAllFloatDType(args).status());
  for (size_t i = 0; i < args.inputs.size(); ++i) {
    SINKRT_RETURN_IF_ERROR(CheckSameShape(args, In(static_cast<int>(i)), Out(0)));
  }
  return CheckNoOverlap(args, /*allow_exact_alias=*/true);
}

// Chunked so that y may be any one of the inputs: a chunk of every input is
// read before that chunk of y is written. Order: ((a0 + a1) + a2) + ..., in
// f32 whatever the storage.
template <typename T>
void AddNChunks(const KernelArgs& args) {
  constexpr int64_t kChunk = 512;
  const int64_t n = args.outputs[0].numel;
  const size_t count = args.inputs.size();
  T* y = Data<T>(args.outputs[0]);
  for (int64_t c0 = 0; c0 < n; c0 += kChunk) {
    const int64_t w = std::min(kChunk, n - c0);
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

Status AddNRun(const KernelArgs& args, KernelState*, RunContext&) {
  return WithStorage(args.outputs[0].dtype, [&](auto t) {
    AddNChunks<decltype(t)>(args);
    return Status::Ok();
  });
}

}  // namespace

const KernelImpl kAddKernel = {BinaryPrepare, BinaryRun<AddOp>};
const KernelImpl kSubKernel = {BinaryPrepare, BinaryRun<SubOp>};
const KernelImpl kMulKernel = {BinaryPrepare, BinaryRun<MulOp>};
const KernelImpl kAddNKernel = {AddNPrepare, AddNRun};

}  // namespace sinkrt::device
