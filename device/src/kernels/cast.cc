// Cast between F32 and BF16, and the identity cast (docs/reference/ops.md). Narrowing
// rounds to nearest even and keeps NaNs (runtime/src/bf16.h).
#include <cstring>

#include "device/src/kernels/check.h"
#include "device/src/kernels/kernel_list.h"
#include "runtime/src/bf16.h"
#include "runtime/src/schema_enums.h"

namespace sinkrt::device {
namespace {

bool Castable(DType t) { return t == DType::F32 || t == DType::BF16; }

struct CastState : KernelState {
  DType from = DType::Invalid, to = DType::Invalid;
  bool same_memory = false;  // an identity cast the compiler gave one buffer
};

Status CastPrepare(const KernelArgs& args, PrepareContext&, std::unique_ptr<KernelState>* state) {
  SINKRT_RETURN_IF_ERROR(CheckOperands(args, 1, 1));
  SINKRT_ASSIGN_OR_RETURN(const fb::CastOptions* opts, GetOptions<fb::CastOptions>(args));
  const TensorRef &x = args.inputs[0], &y = args.outputs[0];
  if (!Castable(FromFb(opts->to())))
    return OpError(args, std::string("option 'to' is ") + DTypeName(opts->to()) + ", expected f32 or bf16");
  if (!Castable(x.dtype))
    return OpError(args, std::string("input 0 has dtype ") + DTypeName(x.dtype) + ", expected f32 or bf16");
  SINKRT_RETURN_IF_ERROR(CheckDType(args, Out(0), FromFb(opts->to())));
  SINKRT_RETURN_IF_ERROR(CheckSameShape(args, Out(0), In(0)));
  auto s = std::make_unique<CastState>();
  s->from = x.dtype;
  s->to = y.dtype;
  s->same_memory = x.data == y.data && s->from == s->to;
  if (!s->same_memory) SINKRT_RETURN_IF_ERROR(CheckNoOverlap(args, /*allow_exact_alias=*/false));
  *state = std::move(s);
  return Status::Ok();
}

Status CastRun(const KernelArgs& args, KernelState* state, RunContext&) {
  const auto& s = *static_cast<CastState*>(state);
  const TensorRef &x = args.inputs[0], &y = args.outputs[0];
  const int64_t n = x.numel;
  if (s.from == s.to) {
    if (!s.same_memory) std::memcpy(y.data, x.data, Bytes(x));
  } else if (s.to == DType::BF16) {
    const float* __restrict in = x.f32();
    uint16_t* __restrict out = static_cast<uint16_t*>(y.data);
    for (int64_t i = 0; i < n; ++i) out[i] = FloatToBf16(in[i]);
  } else {
    const uint16_t* __restrict in = static_cast<const uint16_t*>(x.data);
    float* __restrict out = y.f32();
    for (int64_t i = 0; i < n; ++i) out[i] = Bf16ToFloat(in[i]);
  }
  return Status::Ok();
}

}  // namespace

const KernelImpl kCastKernel = {CastPrepare, CastRun};

}  // namespace sinkrt::device
