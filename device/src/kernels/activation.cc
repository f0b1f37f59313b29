// Elementwise activations (Relu, Gelu, Tanh, Sigmoid, Neg) and their
// gradients. Same-shape f32 tensors; y may be exactly x (in place), so the
// loops take plain pointers (GCC's overlap check still lets y == x take the
// vector path). The transcendental ones use vector_math.h and are compiled
// once per ISA (SINKRT_VECTOR_CLONES); the rest vectorise as they are.
#include <cmath>

#include "check.h"
#include "kernel_list.h"
#include "vector_math.h"

namespace sinkrt::device {
namespace {

Status UnaryPrepare(const KernelArgs& args, PrepareContext&, std::unique_ptr<KernelState>*) {
  SINKRT_RETURN_IF_ERROR(CheckOperands(args, 1, 1));
  SINKRT_RETURN_IF_ERROR(CheckNoOptions(args));
  SINKRT_RETURN_IF_ERROR(CheckDType(args, In(0), DType::F32));
  SINKRT_RETURN_IF_ERROR(CheckDType(args, Out(0), DType::F32));
  SINKRT_RETURN_IF_ERROR(CheckSameShape(args, Out(0), In(0)));
  return CheckNoOverlap(args, /*allow_exact_alias=*/true);
}

// dx = f(dy, v) where v is the forward input or output.
Status GradPrepare(const KernelArgs& args, PrepareContext&, std::unique_ptr<KernelState>*) {
  SINKRT_RETURN_IF_ERROR(CheckOperands(args, 2, 1));
  SINKRT_RETURN_IF_ERROR(CheckNoOptions(args));
  for (int i = 0; i < 2; ++i) SINKRT_RETURN_IF_ERROR(CheckDType(args, In(i), DType::F32));
  SINKRT_RETURN_IF_ERROR(CheckDType(args, Out(0), DType::F32));
  SINKRT_RETURN_IF_ERROR(CheckSameShape(args, In(1), In(0)));
  SINKRT_RETURN_IF_ERROR(CheckSameShape(args, Out(0), In(0)));
  return CheckNoOverlap(args, /*allow_exact_alias=*/true);
}

template <typename F>
Status UnaryRun(const KernelArgs& args, KernelState*, RunContext&) {
  const float* x = args.inputs[0].f32();
  float* y = args.outputs[0].f32();
  const int64_t n = args.outputs[0].numel;
  const F f;
  for (int64_t i = 0; i < n; ++i) y[i] = f(x[i]);
  return Status::Ok();
}

template <typename F>
Status GradRun(const KernelArgs& args, KernelState*, RunContext&) {
  const float* dy = args.inputs[0].f32();
  const float* v = args.inputs[1].f32();
  float* dx = args.outputs[0].f32();
  const int64_t n = args.outputs[0].numel;
  const F f;
  for (int64_t i = 0; i < n; ++i) dx[i] = f(dy[i], v[i]);
  return Status::Ok();
}

// `bound` is kExp2Bound, an argument so that the compiler cannot see it
// (vector_math.h, GeluExponent).
SINKRT_VECTOR_CLONES void GeluLoop(const float* x, float* y, int64_t n, float bound) {
  for (int64_t i = 0; i < n; ++i) y[i] = GeluOf(x[i], bound);
}
SINKRT_VECTOR_CLONES void TanhLoop(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = FastTanh(x[i]);
}
SINKRT_VECTOR_CLONES void SigmoidLoop(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = FastSigmoid(x[i]);
}
SINKRT_VECTOR_CLONES void GeluGradLoop(const float* dy, const float* x, float* dx, int64_t n, float bound) {
  for (int64_t i = 0; i < n; ++i) dx[i] = GeluGradOf(dy[i], x[i], bound);
}

template <void (*kLoop)(const float*, float*, int64_t)>
Status UnaryLoopRun(const KernelArgs& args, KernelState*, RunContext&) {
  kLoop(args.inputs[0].f32(), args.outputs[0].f32(), args.outputs[0].numel);
  return Status::Ok();
}

Status GeluRun(const KernelArgs& args, KernelState*, RunContext&) {
  GeluLoop(args.inputs[0].f32(), args.outputs[0].f32(), args.outputs[0].numel, kExp2Bound);
  return Status::Ok();
}

Status GeluGradRun(const KernelArgs& args, KernelState*, RunContext&) {
  GeluGradLoop(args.inputs[0].f32(), args.inputs[1].f32(), args.outputs[0].f32(), args.outputs[0].numel,
               kExp2Bound);
  return Status::Ok();
}

// NaN stays NaN, so a diverging step shows up in the loss.
struct Relu {
  float operator()(float x) const { return x < 0.0f ? 0.0f : x; }
};
struct Neg {
  float operator()(float x) const { return -x; }
};

struct ReluGrad {
  float operator()(float dy, float y) const { return y > 0.0f ? dy : 0.0f; }
};
struct TanhGrad {
  float operator()(float dy, float y) const { return dy * (1.0f - y * y); }
};
struct SigmoidGrad {
  float operator()(float dy, float y) const { return dy * y * (1.0f - y); }
};

}  // namespace

const KernelImpl kReluKernel = {UnaryPrepare, UnaryRun<Relu>};
const KernelImpl kGeluKernel = {UnaryPrepare, GeluRun};
const KernelImpl kTanhKernel = {UnaryPrepare, UnaryLoopRun<TanhLoop>};
const KernelImpl kSigmoidKernel = {UnaryPrepare, UnaryLoopRun<SigmoidLoop>};
const KernelImpl kNegKernel = {UnaryPrepare, UnaryRun<Neg>};
const KernelImpl kReluGradKernel = {GradPrepare, GradRun<ReluGrad>};
const KernelImpl kGeluGradKernel = {GradPrepare, GeluGradRun};
const KernelImpl kTanhGradKernel = {GradPrepare, GradRun<TanhGrad>};
const KernelImpl kSigmoidGradKernel = {GradPrepare, GradRun<SigmoidGrad>};

}  // namespace sinkrt::device
