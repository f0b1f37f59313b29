// Elementwise activations (Relu, Gelu, GeluErf, Tanh, Sigmoid, Neg), the
// unary math ops (Exp, Log, Sqrt, Rsqrt, Square, Abs, Erf) and their
// gradient kernels (and Pow's PowGradLog).
// Same-shape tensors, all f32 or all bf16 (mixed precision): the loops are
// templated on the storage type (storage.h), compute in f32 and round once
// per stored element, so a bf16 result is the f32 result on the widened
// inputs, rounded. y may be exactly x (in place), so the
// loops take plain pointers (GCC's overlap check still lets y == x take the
// vector path). The transcendental ones use vector_math.h and are compiled
// once per ISA (SINKRT_VECTOR_CLONES, one clone set per storage type); the
// rest vectorise as they are in f32, and are cloned per ISA in bf16
// (narrowing to bf16 is slow on baseline SSE2, storage.h).
#include <cmath>

#include "device/src/kernels/check.h"
#include "device/src/kernels/kernel_list.h"
#include "device/src/kernels/parallel_range.h"
#include "device/src/kernels/storage.h"
#include "device/src/kernels/vector_math.h"

namespace sinkrt::device {
namespace {

Status UnaryPrepare(const KernelArgs& args, PrepareContext&, std::unique_ptr<KernelState>*) {
  SINKRT_RETURN_IF_ERROR(CheckOperands(args, 1, 1));
  SINKRT_RETURN_IF_ERROR(CheckNoOptions(args));
  SINKRT_RETURN_IF_ERROR(CheckAllFloatDType(args).status());
  SINKRT_RETURN_IF_ERROR(CheckSameShape(args, Out(0), In(0)));
  return CheckNoOverlap(args, /*allow_exact_alias=*/true);
}

// dx = f(dy, v) where v is the forward input or output.
Status GradPrepare(const KernelArgs& args, PrepareContext&, std::unique_ptr<KernelState>*) {
  SINKRT_RETURN_IF_ERROR(CheckOperands(args, 2, 1));
  SINKRT_RETURN_IF_ERROR(CheckNoOptions(args));
  SINKRT_RETURN_IF_ERROR(CheckAllFloatDType(args).status());
  SINKRT_RETURN_IF_ERROR(CheckSameShape(args, In(1), In(0)));
  SINKRT_RETURN_IF_ERROR(CheckSameShape(args, Out(0), In(0)));
  return CheckNoOverlap(args, /*allow_exact_alias=*/true);
}

template <typename T, typename F>
void UnaryLoop(const T* x, T* y, int64_t n) {
  const F f;
  for (int64_t i = 0; i < n; ++i) y[i] = Store<T>(f(Load(x[i])));
}

template <typename T, typename F>
void GradLoop(const T* dy, const T* v, T* dx, int64_t n) {
  const F f;
  for (int64_t i = 0; i < n; ++i) dx[i] = Store<T>(f(Load(dy[i]), Load(v[i])));
}

// The bf16 loop of each op, compiled per ISA (storage.h: narrowing is slow
// on baseline SSE2); the f32 loops vectorise as they are.
using UnaryBf16 = void (*)(const bf16_t*, bf16_t*, int64_t);
using GradBf16 = void (*)(const bf16_t*, const bf16_t*, bf16_t*, int64_t);
// An f32 loop compiled per ISA too, for the ops whose f32 loop is
// compute-bound (Erf's polynomials: 4-wide SSE2 runs them at a quarter of
// AVX-512's rate); nullptr: the plain UnaryLoop/GradLoop.
using UnaryF32 = void (*)(const float*, float*, int64_t);
using GradF32 = void (*)(const float*, const float*, float*, int64_t);

// Every loop is split across the worker team by element ranges
// (parallel_range.h), which changes no element's value.
template <typename F, UnaryBf16 kBf16, UnaryF32 kF32 = nullptr>
Status UnaryRun(const KernelArgs& args, KernelState*, RunContext& ctx) {
  ForRange(ctx, args.outputs[0].numel, [&](int64_t b, int64_t e) {
    if (args.outputs[0].dtype == DType::BF16) {
      kBf16(Data<bf16_t>(args.inputs[0]) + b, Data<bf16_t>(args.outputs[0]) + b, e - b);
    } else if constexpr (kF32 != nullptr) {
      kF32(args.inputs[0].f32() + b, args.outputs[0].f32() + b, e - b);
    } else {
      UnaryLoop<float, F>(args.inputs[0].f32() + b, args.outputs[0].f32() + b, e - b);
    }
  });
  return Status::Ok();
}

template <typename F, GradBf16 kBf16, GradF32 kF32 = nullptr>
Status GradRun(const KernelArgs& args, KernelState*, RunContext& ctx) {
  ForRange(ctx, args.outputs[0].numel, [&](int64_t b, int64_t e) {
    if (args.outputs[0].dtype == DType::BF16) {
      kBf16(Data<bf16_t>(args.inputs[0]) + b, Data<bf16_t>(args.inputs[1]) + b, Data<bf16_t>(args.outputs[0]) + b,
            e - b);
    } else if constexpr (kF32 != nullptr) {
      kF32(args.inputs[0].f32() + b, args.inputs[1].f32() + b, args.outputs[0].f32() + b, e - b);
    } else {
      GradLoop<float, F>(args.inputs[0].f32() + b, args.inputs[1].f32() + b, args.outputs[0].f32() + b, e - b);
    }
  });
  return Status::Ok();
}

// The transcendental loops, one overload per storage type: target_clones is
// kept off templates (each overload is its own set of clones).
// `bound` is kExp2Bound, an argument so that the compiler cannot see it
// (vector_math.h, GeluExponent).
SINKRT_VECTOR_CLONES void GeluLoop(const float* x, float* y, int64_t n, float bound) {
  for (int64_t i = 0; i < n; ++i) y[i] = GeluOf(x[i], bound);
}
SINKRT_VECTOR_CLONES void GeluLoop(const bf16_t* x, bf16_t* y, int64_t n, float bound) {
  for (int64_t i = 0; i < n; ++i) y[i] = Store<bf16_t>(GeluOf(Load(x[i]), bound));
}
SINKRT_VECTOR_CLONES void TanhLoop(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = FastTanh(x[i]);
}
SINKRT_VECTOR_CLONES void TanhLoop(const bf16_t* x, bf16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = Store<bf16_t>(FastTanh(Load(x[i])));
}
SINKRT_VECTOR_CLONES void SigmoidLoop(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = FastSigmoid(x[i]);
}
SINKRT_VECTOR_CLONES void SigmoidLoop(const bf16_t* x, bf16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = Store<bf16_t>(FastSigmoid(Load(x[i])));
}
SINKRT_VECTOR_CLONES void GeluGradLoop(const float* dy, const float* x, float* dx, int64_t n, float bound) {
  for (int64_t i = 0; i < n; ++i) dx[i] = GeluGradOf(dy[i], x[i], bound);
}
SINKRT_VECTOR_CLONES void GeluGradLoop(const bf16_t* dy, const bf16_t* x, bf16_t* dx, int64_t n, float bound) {
  for (int64_t i = 0; i < n; ++i) dx[i] = Store<bf16_t>(GeluGradOf(Load(dy[i]), Load(x[i]), bound));
}

SINKRT_VECTOR_CLONES void ExpLoop(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = FastExp(x[i]);
}
SINKRT_VECTOR_CLONES void ExpLoop(const bf16_t* x, bf16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = Store<bf16_t>(FastExp(Load(x[i])));
}

Status ExpRun(const KernelArgs& args, KernelState*, RunContext& ctx) {
  return WithStorage(args.outputs[0].dtype, [&](auto t) {
    using T = decltype(t);
    ForRange(ctx, args.outputs[0].numel,
             [&](int64_t b, int64_t e) { ExpLoop(Data<T>(args.inputs[0]) + b, Data<T>(args.outputs[0]) + b, e - b); });
    return Status::Ok();
  });
}

Status TanhRun(const KernelArgs& args, KernelState*, RunContext& ctx) {
  return WithStorage(args.outputs[0].dtype, [&](auto t) {
    using T = decltype(t);
    ForRange(ctx, args.outputs[0].numel,
             [&](int64_t b, int64_t e) { TanhLoop(Data<T>(args.inputs[0]) + b, Data<T>(args.outputs[0]) + b, e - b); });
    return Status::Ok();
  });
}

Status SigmoidRun(const KernelArgs& args, KernelState*, RunContext& ctx) {
  return WithStorage(args.outputs[0].dtype, [&](auto t) {
    using T = decltype(t);
    ForRange(ctx, args.outputs[0].numel, [&](int64_t b, int64_t e) {
      SigmoidLoop(Data<T>(args.inputs[0]) + b, Data<T>(args.outputs[0]) + b, e - b);
    });
    return Status::Ok();
  });
}

Status GeluRun(const KernelArgs& args, KernelState*, RunContext& ctx) {
  return WithStorage(args.outputs[0].dtype, [&](auto t) {
    using T = decltype(t);
    ForRange(ctx, args.outputs[0].numel, [&](int64_t b, int64_t e) {
      GeluLoop(Data<T>(args.inputs[0]) + b, Data<T>(args.outputs[0]) + b, e - b, kExp2Bound);
    });
    return Status::Ok();
  });
}

Status GeluGradRun(const KernelArgs& args, KernelState*, RunContext& ctx) {
  return WithStorage(args.outputs[0].dtype, [&](auto t) {
    using T = decltype(t);
    ForRange(ctx, args.outputs[0].numel, [&](int64_t b, int64_t e) {
      GeluGradLoop(Data<T>(args.inputs[0]) + b, Data<T>(args.inputs[1]) + b, Data<T>(args.outputs[0]) + b, e - b,
                   kExp2Bound);
    });
    return Status::Ok();
  });
}

// NaN stays NaN, so a diverging step shows up in the loss.
struct Relu {
  float operator()(float x) const { return x < 0.0f ? 0.0f : x; }
};
struct Neg {
  float operator()(float x) const { return -x; }
};

// IEEE, as MindSpore: log(0) = -inf, log, sqrt and rsqrt of x < 0 are NaN,
// rsqrt(0) = +inf. libm's logf (a scalar call) and correctly rounded sqrtf.
struct Log {
  float operator()(float x) const { return std::log(x); }
};
struct Sqrt {
  float operator()(float x) const { return std::sqrt(x); }
};
struct Rsqrt {
  float operator()(float x) const { return 1.0f / std::sqrt(x); }
};
struct Square {
  float operator()(float x) const { return x * x; }
};
struct Abs {
  float operator()(float x) const { return std::fabs(x); }
};

// Pow's exponent gradient reads log(x) with x < 0 taken as 1 (MindSpore's
// Pow bprop sets x[x < 0] = 1), so 0 there; log(0) = -inf as Log.
struct PowGradLog {
  float operator()(float x) const { return x < 0.0f ? 0.0f : std::log(x); }
};
// vector_math.h's FastErf (within 2.6 ulp; libm's erff is a scalar call).
struct Erf {
  float operator()(float x) const { return FastErf(x); }
};
// Exact GELU (MindSpore's GeLU with approximate='none'): x Φ(x), with
// Φ(x) = (1 + erf(x / √2)) / 2.
constexpr float kInvSqrt2 = 0.70710678118654752f;
struct GeluErf {
  float operator()(float x) const { return 0.5f * x * (1.0f + FastErf(x * kInvSqrt2)); }
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

// dy · 2/√π · e^(−x²) (MindSpore's Erf bprop).
struct ErfGrad {
  float operator()(float dy, float x) const { return dy * (1.12837916709551257f * FastExp(-x * x)); }
};
// dy · (Φ(x) + x φ(x)), φ(x) = e^(−x²/2) / √(2π).
struct GeluErfGrad {
  float operator()(float dy, float x) const {
    const float cdf = 0.5f * (1.0f + FastErf(x * kInvSqrt2));
    const float pdf = 0.39894228040143268f * FastExp(-0.5f * x * x);
    return dy * (cdf + x * pdf);
  }
};

// dy · sign(x), 0 where x = 0 (MindSpore's AbsGrad); NaN x gives NaN.
struct AbsGrad {
  float operator()(float dy, float x) const {
    if (x > 0.0f) return dy;
    if (x < 0.0f) return -dy;
    return x == 0.0f ? 0.0f : x;
  }
};

SINKRT_VECTOR_CLONES void LogBf16(const bf16_t* x, bf16_t* y, int64_t n) { UnaryLoop<bf16_t, Log>(x, y, n); }
SINKRT_VECTOR_CLONES void SqrtBf16(const bf16_t* x, bf16_t* y, int64_t n) { UnaryLoop<bf16_t, Sqrt>(x, y, n); }
SINKRT_VECTOR_CLONES void RsqrtBf16(const bf16_t* x, bf16_t* y, int64_t n) { UnaryLoop<bf16_t, Rsqrt>(x, y, n); }
SINKRT_VECTOR_CLONES void SquareBf16(const bf16_t* x, bf16_t* y, int64_t n) { UnaryLoop<bf16_t, Square>(x, y, n); }
SINKRT_VECTOR_CLONES void AbsBf16(const bf16_t* x, bf16_t* y, int64_t n) { UnaryLoop<bf16_t, Abs>(x, y, n); }
SINKRT_VECTOR_CLONES void AbsGradBf16(const bf16_t* dy, const bf16_t* v, bf16_t* dx, int64_t n) {
  GradLoop<bf16_t, AbsGrad>(dy, v, dx, n);
}
SINKRT_VECTOR_CLONES void PowGradLogBf16(const bf16_t* x, bf16_t* y, int64_t n) {
  UnaryLoop<bf16_t, PowGradLog>(x, y, n);
}
SINKRT_VECTOR_CLONES void ErfBf16(const bf16_t* x, bf16_t* y, int64_t n) { UnaryLoop<bf16_t, Erf>(x, y, n); }
SINKRT_VECTOR_CLONES void GeluErfBf16(const bf16_t* x, bf16_t* y, int64_t n) { UnaryLoop<bf16_t, GeluErf>(x, y, n); }
SINKRT_VECTOR_CLONES void ErfGradBf16(const bf16_t* dy, const bf16_t* v, bf16_t* dx, int64_t n) {
  GradLoop<bf16_t, ErfGrad>(dy, v, dx, n);
}
SINKRT_VECTOR_CLONES void GeluErfGradBf16(const bf16_t* dy, const bf16_t* v, bf16_t* dx, int64_t n) {
  GradLoop<bf16_t, GeluErfGrad>(dy, v, dx, n);
}
SINKRT_VECTOR_CLONES void ErfF32(const float* x, float* y, int64_t n) { UnaryLoop<float, Erf>(x, y, n); }
SINKRT_VECTOR_CLONES void GeluErfF32(const float* x, float* y, int64_t n) { UnaryLoop<float, GeluErf>(x, y, n); }
SINKRT_VECTOR_CLONES void ErfGradF32(const float* dy, const float* v, float* dx, int64_t n) {
  GradLoop<float, ErfGrad>(dy, v, dx, n);
}
SINKRT_VECTOR_CLONES void GeluErfGradF32(const float* dy, const float* v, float* dx, int64_t n) {
  GradLoop<float, GeluErfGrad>(dy, v, dx, n);
}
SINKRT_VECTOR_CLONES void ReluBf16(const bf16_t* x, bf16_t* y, int64_t n) { UnaryLoop<bf16_t, Relu>(x, y, n); }
SINKRT_VECTOR_CLONES void NegBf16(const bf16_t* x, bf16_t* y, int64_t n) { UnaryLoop<bf16_t, Neg>(x, y, n); }
SINKRT_VECTOR_CLONES void ReluGradBf16(const bf16_t* dy, const bf16_t* v, bf16_t* dx, int64_t n) {
  GradLoop<bf16_t, ReluGrad>(dy, v, dx, n);
}
SINKRT_VECTOR_CLONES void TanhGradBf16(const bf16_t* dy, const bf16_t* v, bf16_t* dx, int64_t n) {
  GradLoop<bf16_t, TanhGrad>(dy, v, dx, n);
}
SINKRT_VECTOR_CLONES void SigmoidGradBf16(const bf16_t* dy, const bf16_t* v, bf16_t* dx, int64_t n) {
  GradLoop<bf16_t, SigmoidGrad>(dy, v, dx, n);
}

}  // namespace

const KernelImpl kReluKernel = {UnaryPrepare, UnaryRun<Relu, ReluBf16>};
const KernelImpl kGeluKernel = {UnaryPrepare, GeluRun};
const KernelImpl kTanhKernel = {UnaryPrepare, TanhRun};
const KernelImpl kSigmoidKernel = {UnaryPrepare, SigmoidRun};
const KernelImpl kNegKernel = {UnaryPrepare, UnaryRun<Neg, NegBf16>};
const KernelImpl kExpKernel = {UnaryPrepare, ExpRun};
const KernelImpl kLogKernel = {UnaryPrepare, UnaryRun<Log, LogBf16>};
const KernelImpl kSqrtKernel = {UnaryPrepare, UnaryRun<Sqrt, SqrtBf16>};
const KernelImpl kRsqrtKernel = {UnaryPrepare, UnaryRun<Rsqrt, RsqrtBf16>};
const KernelImpl kSquareKernel = {UnaryPrepare, UnaryRun<Square, SquareBf16>};
const KernelImpl kAbsKernel = {UnaryPrepare, UnaryRun<Abs, AbsBf16>};
const KernelImpl kAbsGradKernel = {GradPrepare, GradRun<AbsGrad, AbsGradBf16>};
const KernelImpl kReluGradKernel = {GradPrepare, GradRun<ReluGrad, ReluGradBf16>};
const KernelImpl kGeluGradKernel = {GradPrepare, GeluGradRun};
const KernelImpl kTanhGradKernel = {GradPrepare, GradRun<TanhGrad, TanhGradBf16>};
const KernelImpl kSigmoidGradKernel = {GradPrepare, GradRun<SigmoidGrad, SigmoidGradBf16>};
const KernelImpl kErfKernel = {UnaryPrepare, UnaryRun<Erf, ErfBf16, ErfF32>};
const KernelImpl kGeluErfKernel = {UnaryPrepare, UnaryRun<GeluErf, GeluErfBf16, GeluErfF32>};
const KernelImpl kPowGradLogKernel = {UnaryPrepare, UnaryRun<PowGradLog, PowGradLogBf16>};
const KernelImpl kErfGradKernel = {GradPrepare, GradRun<ErfGrad, ErfGradBf16, ErfGradF32>};
const KernelImpl kGeluErfGradKernel = {GradPrepare, GradRun<GeluErfGrad, GeluErfGradBf16, GeluErfGradF32>};

}  // namespace sinkrt::device
