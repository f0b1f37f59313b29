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

// √(2/π) and the cubic coefficient of Gelu's tanh approximation.
constexpr float kGeluC = 0.7978845608028654f;
constexpr float kGeluA = 0.044715f;

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

// Gelu's tanh approximation 0.5x(1 + tanh u), u = c(x + a x³), written as
// x·σ(2u) (0.5(1 + tanh u) = σ(2u)): one exp and one division, and no
// cancellation in 1 + tanh u where tanh u is near −1.
inline float GeluOf(float x) {
  const float u = kGeluC * (x + kGeluA * x * x * x);
  return x * FastSigmoid(2.0f * u);
}
// d/dx 0.5x(1 + tanh u) = 0.5(1 + tanh u) + 0.5x(1 − tanh² u)·c(1 + 3a x²)
//                      = s + 2x·s(1 − s)·c(1 + 3a x²), s = σ(2u) = 1/(1 + e),
// e = exp(−2u), with s(1 − s) = e·s² (no cancellation where s is near 1).
// e is capped so that e·s² is 0, not inf·0, where exp overflows.
inline float GeluGradOf(float dy, float x) {
  const float u = kGeluC * (x + kGeluA * x * x * x);
  float e = FastExp(-2.0f * u);
  e = e > 1e30f ? 1e30f : e;  // NaN stays NaN
  const float s = 1.0f / (1.0f + e);
  const float du = kGeluC * (1.0f + 3.0f * kGeluA * x * x);
  return dy * (s + 2.0f * x * (e * s * s) * du);
}

SINKRT_VECTOR_CLONES void GeluLoop(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = GeluOf(x[i]);
}
SINKRT_VECTOR_CLONES void TanhLoop(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = FastTanh(x[i]);
}
SINKRT_VECTOR_CLONES void SigmoidLoop(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = FastSigmoid(x[i]);
}
SINKRT_VECTOR_CLONES void GeluGradLoop(const float* dy, const float* x, float* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dx[i] = GeluGradOf(dy[i], x[i]);
}

template <void (*kLoop)(const float*, float*, int64_t)>
Status UnaryLoopRun(const KernelArgs& args, KernelState*, RunContext&) {
  kLoop(args.inputs[0].f32(), args.outputs[0].f32(), args.outputs[0].numel);
  return Status::Ok();
}

Status GeluGradRun(const KernelArgs& args, KernelState*, RunContext&) {
  GeluGradLoop(args.inputs[0].f32(), args.inputs[1].f32(), args.outputs[0].f32(), args.outputs[0].numel);
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
const KernelImpl kGeluKernel = {UnaryPrepare, UnaryLoopRun<GeluLoop>};
const KernelImpl kTanhKernel = {UnaryPrepare, UnaryLoopRun<TanhLoop>};
const KernelImpl kSigmoidKernel = {UnaryPrepare, UnaryLoopRun<SigmoidLoop>};
const KernelImpl kNegKernel = {UnaryPrepare, UnaryRun<Neg>};
const KernelImpl kReluGradKernel = {GradPrepare, GradRun<ReluGrad>};
const KernelImpl kGeluGradKernel = {GradPrepare, GeluGradRun};
const KernelImpl kTanhGradKernel = {GradPrepare, GradRun<TanhGrad>};
const KernelImpl kSigmoidGradKernel = {GradPrepare, GradRun<SigmoidGrad>};

}  // namespace sinkrt::device
