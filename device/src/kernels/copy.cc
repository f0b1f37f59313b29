// Reshape, Flatten and Copy (a byte copy of any dtype between same-size
// buffers, skipped when the compiler gave both the same memory; so bf16
// too) and Fill (an f32 or bf16 output; the value rounded to bf16 once, at
// load).
#include <algorithm>
#include <cstring>

#include "device/src/kernels/check.h"
#include "device/src/kernels/kernel_list.h"
#include "device/src/kernels/storage.h"

namespace sinkrt::device {
namespace {

struct CopyState : KernelState {
  bool same_memory = false;
  size_t bytes = 0;
};

Status CopyPrepare(const KernelArgs& args, PrepareContext&, std::unique_ptr<KernelState>* state) {
  SINKRT_RETURN_IF_ERROR(CheckOperands(args, 1, 1));
  SINKRT_RETURN_IF_ERROR(CheckNoOptions(args));
  const TensorRef &x = args.inputs[0], &y = args.outputs[0];
  SINKRT_RETURN_IF_ERROR(CheckDType(args, Out(0), x.dtype));
  if (y.numel != x.numel) {
    return OpError(args, "output 0 has shape " + ShapeToString(y.shape) + " (" + std::to_string(y.numel) +
                             " elements), expected " + std::to_string(x.numel) + " elements like input 0 " +
                             ShapeToString(x.shape));
  }
  auto s = std::make_unique<CopyState>();
  s->same_memory = x.data == y.data;
  s->bytes = Bytes(x);
  // Same start is a view; any other overlap would be a broken plan.
  if (!s->same_memory) SINKRT_RETURN_IF_ERROR(CheckNoOverlap(args, /*allow_exact_alias=*/false));
  *state = std::move(s);
  return Status::Ok();
}

// Flatten also fixes the output shape: [N, ...] -> [N, prod(...)].
Status FlattenPrepare(const KernelArgs& args, PrepareContext& ctx, std::unique_ptr<KernelState>* state) {
  SINKRT_RETURN_IF_ERROR(CopyPrepare(args, ctx, state));
  const TensorRef& x = args.inputs[0];
  if (x.rank() == 0) return OpError(args, "input 0 is a scalar, expected [N, ...]");
  int64_t rest = 1;
  for (int d = 1; d < x.rank(); ++d) rest *= x.dim(d);
  return CheckShape(
      args, Out(0), Shape{x.dim(0), rest},
      ShapeToString(Shape{x.dim(0), rest}) + " ([N, prod(...)] of input 0 " + ShapeToString(x.shape) + ")");
}

Status CopyRun(const KernelArgs& args, KernelState* state, RunContext&) {
  const auto& s = *static_cast<CopyState*>(state);
  if (!s.same_memory) std::memcpy(args.outputs[0].data, args.inputs[0].data, s.bytes);
  return Status::Ok();
}

struct FillState : KernelState {
  float value = 0.0f;
  bf16_t bf16 = 0;  // value rounded, for a bf16 output
};

Status FillPrepare(const KernelArgs& args, PrepareContext&, std::unique_ptr<KernelState>* state) {
  SINKRT_RETURN_IF_ERROR(CheckOperands(args, 0, 1));
  SINKRT_ASSIGN_OR_RETURN(const fb::FillOptions* opts, GetOptions<fb::FillOptions>(args));
  SINKRT_RETURN_IF_ERROR(CheckAllFloatDType(args).status());
  auto s = std::make_unique<FillState>();
  s->value = opts->value();
  s->bf16 = FloatToBf16(s->value);
  *state = std::move(s);
  return Status::Ok();
}

Status FillRun(const KernelArgs& args, KernelState* state, RunContext&) {
  const TensorRef& y = args.outputs[0];
  const auto& s = *static_cast<FillState*>(state);
  if (y.dtype == DType::BF16) {
    std::fill(Data<bf16_t>(y), Data<bf16_t>(y) + y.numel, s.bf16);
  } else {
    std::fill(y.f32(), y.f32() + y.numel, s.value);
  }
  return Status::Ok();
}

}  // namespace

const KernelImpl kCopyKernel = {CopyPrepare, CopyRun};
const KernelImpl kFlattenKernel = {FlattenPrepare, CopyRun};
const KernelImpl kFillKernel = {FillPrepare, FillRun};

}  // namespace sinkrt::device
