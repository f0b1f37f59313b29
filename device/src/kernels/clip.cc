// Gradient clipping by global norm (docs/guide/clipping.md), MindSpore's
// ops.clip_by_global_norm inside the sink, in two kernels so that the
// compiler can all-reduce partial sums between them:
//
// SumSquares: x... (f32) -> sum [1] f32
//   sum = Σ over every input's elements of x², in f64, rounded once.
// ClipByGlobalNorm: sums [1]... [, status [2]] -> status' [2] f32
//   norm = √(Σ sums) · status[1]   (the loss scale taken out; 1 without it)
//   status' = (status[0], status[1] · clip / max(norm, clip))
// The optimizer updates read status' where they would read the loss-scale
// status: they multiply the gradient by its factor and skip the step when
// status[0] says it overflowed (the factor is then left as it was: an
// overflowed step clips nothing). Without loss scaling the status is
// taken as (0, 1). FillOptions.value carries clip_norm (> 0).
#include <algorithm>
#include <cmath>
#include <string>

#include "device/src/kernels/check.h"
#include "device/src/kernels/kernel_list.h"

namespace sinkrt::device {
namespace {

Status SumSquaresPrepare(const KernelArgs& args, PrepareContext&, std::unique_ptr<KernelState>*) {
  SINKRT_RETURN_IF_ERROR(CheckOperandsAtLeast(args, 1, 1));
  for (size_t i = 0; i < args.inputs.size(); ++i)
    SINKRT_RETURN_IF_ERROR(CheckDType(args, In(static_cast<int>(i)), DType::F32));
  SINKRT_RETURN_IF_ERROR(CheckDType(args, Out(0), DType::F32));
  SINKRT_RETURN_IF_ERROR(CheckShape(args, Out(0), Shape{1}, "[1] (the sum of squares)"));
  return CheckNoOverlap(args, /*allow_exact_alias=*/false);
}

// One serial pass in f64 with four independent partial sums, combined in
// a fixed order: the same bits whatever the team size, so that a sink of N
// stays bitwise N sinks of 1 and one device equals itself run after run.
double SquaresOf(const float* x, int64_t n) {
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += static_cast<double>(x[i]) * x[i];
    s1 += static_cast<double>(x[i + 1]) * x[i + 1];
    s2 += static_cast<double>(x[i + 2]) * x[i + 2];
    s3 += static_cast<double>(x[i + 3]) * x[i + 3];
  }
  for (; i < n; ++i) s0 += static_cast<double>(x[i]) * x[i];
  return (s0 + s1) + (s2 + s3);
}

Status SumSquaresRun(const KernelArgs& args, KernelState*, RunContext&) {
  double sum = 0;
  for (const TensorRef& x : args.inputs) sum += SquaresOf(x.f32(), x.numel);
  args.outputs[0].f32()[0] = static_cast<float>(sum);
  return Status::Ok();
}

struct ClipState : KernelState {
  float clip_norm = 1.0f;
  size_t sums = 0;      // how many [1] sums come first
  bool scaled = false;  // a loss-scale status [2] follows them
};

Status ClipPrepare(const KernelArgs& args, PrepareContext&, std::unique_ptr<KernelState>* state) {
  SINKRT_RETURN_IF_ERROR(CheckOperandsAtLeast(args, 1, 1));
  SINKRT_ASSIGN_OR_RETURN(const fb::FillOptions* opts, GetOptions<fb::FillOptions>(args));
  if (!(opts->value() > 0.0f) || !std::isfinite(opts->value()))
    return OpError(args, "clip_norm is " + std::to_string(opts->value()) + ", expected a finite value > 0");
  auto s = std::make_unique<ClipState>();
  s->clip_norm = opts->value();
  const TensorRef& last = args.inputs.back();
  s->scaled = last.shape == Shape{2};
  s->sums = args.inputs.size() - (s->scaled ? 1 : 0);
  if (s->sums == 0) return OpError(args, "expected at least one sum of squares [1] before the status");
  for (size_t i = 0; i < args.inputs.size(); ++i) {
    SINKRT_RETURN_IF_ERROR(CheckDType(args, In(static_cast<int>(i)), DType::F32));
    if (i < s->sums)
      SINKRT_RETURN_IF_ERROR(CheckShape(args, In(static_cast<int>(i)), Shape{1}, "[1] (a sum of squares)"));
  }
  SINKRT_RETURN_IF_ERROR(CheckDType(args, Out(0), DType::F32));
  SINKRT_RETURN_IF_ERROR(CheckShape(args, Out(0), Shape{2}, "[2] (overflow, the gradient's factor)"));
  SINKRT_RETURN_IF_ERROR(CheckNoOverlap(args, /*allow_exact_alias=*/false));
  *state = std::move(s);
  return Status::Ok();
}

Status ClipRun(const KernelArgs& args, KernelState* state, RunContext&) {
  const auto& s = *static_cast<ClipState*>(state);
  const float overflow = s.scaled ? args.inputs[s.sums].f32()[0] : 0.0f;
  const float inv = s.scaled ? args.inputs[s.sums].f32()[1] : 1.0f;
  float* out = args.outputs[0].f32();
  out[0] = overflow;
  out[1] = inv;
  if (overflow != 0.0f) return Status::Ok();
  double sum = 0;
  for (size_t i = 0; i < s.sums; ++i) sum += static_cast<double>(args.inputs[i].f32()[0]);
  const double norm = std::sqrt(sum) * static_cast<double>(inv);
  const double clip = s.clip_norm;
  // MindSpore's x · clip / max(norm, clip); a NaN norm (a NaN gradient
  // without loss scaling) gives a NaN factor (std::max keeps it), as there.
  out[1] = static_cast<float>(static_cast<double>(inv) * (clip / std::max(norm, clip)));
  return Status::Ok();
}

}  // namespace

const KernelImpl kSumSquaresKernel = {SumSquaresPrepare, SumSquaresRun};
const KernelImpl kClipByGlobalNormKernel = {ClipPrepare, ClipRun};

}  // namespace sinkrt::device
