// Elementwise activations (Relu, Gelu, Tanh, Sigmoid, Neg) and their
// gradients. Same-shape f32 tensors; y may be exactly x (in place), so the
// loops take plain pointers.
#include <cmath>

#include "check.h"
#include "kernel_list.h"

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

// NaN stays NaN, so a diverging step shows up in the loss.
struct Relu {
  float operator()(float x) const { return x < 0.0f ? 0.0f : x; }
};
struct Gelu {
  float operator()(float x) const {
    return 0.5f * x * (1.0f + std::tanh(kGeluC * (x + kGeluA * x * x * x)));
  }
};
struct Tanh {
  float operator()(float x) const { return std::tanh(x); }
};
// Written so that exp never overflows: for x < 0 use e^x / (1 + e^x).
struct Sigmoid {
  float operator()(float x) const {
    if (x >= 0.0f) return 1.0f / (1.0f + std::exp(-x));
    const float e = std::exp(x);
    return e / (1.0f + e);
  }
};
struct Neg {
  float operator()(float x) const { return -x; }
};

struct ReluGrad {
  float operator()(float dy, float y) const { return y > 0.0f ? dy : 0.0f; }
};
// d/dx 0.5x(1 + tanh u), u = c(x + a x³):
//   0.5(1 + tanh u) + 0.5x(1 − tanh² u)·c(1 + 3a x²)
struct GeluGrad {
  float operator()(float dy, float x) const {
    const float t = std::tanh(kGeluC * (x + kGeluA * x * x * x));
    const float du = kGeluC * (1.0f + 3.0f * kGeluA * x * x);
    return dy * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du);
  }
};
struct TanhGrad {
  float operator()(float dy, float y) const { return dy * (1.0f - y * y); }
};
struct SigmoidGrad {
  float operator()(float dy, float y) const { return dy * y * (1.0f - y); }
};

}  // namespace

const KernelImpl kReluKernel = {UnaryPrepare, UnaryRun<Relu>};
const KernelImpl kGeluKernel = {UnaryPrepare, UnaryRun<Gelu>};
const KernelImpl kTanhKernel = {UnaryPrepare, UnaryRun<Tanh>};
const KernelImpl kSigmoidKernel = {UnaryPrepare, UnaryRun<Sigmoid>};
const KernelImpl kNegKernel = {UnaryPrepare, UnaryRun<Neg>};
const KernelImpl kReluGradKernel = {GradPrepare, GradRun<ReluGrad>};
const KernelImpl kGeluGradKernel = {GradPrepare, GradRun<GeluGrad>};
const KernelImpl kTanhGradKernel = {GradPrepare, GradRun<TanhGrad>};
const KernelImpl kSigmoidGradKernel = {GradPrepare, GradRun<SigmoidGrad>};

}  // namespace sinkrt::device
