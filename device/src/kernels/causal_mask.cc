// CausalMask: scores [..., T, S] -> the same, with element (i, j) of the last
// two dims replaced by `fill` (FillOptions.value) where j > i + S - T: a
// query row i sees the S - T earlier keys and the keys up to its own
// position. A masked fill (MindSpore's masked_fill), never an added bias, so
// the kept elements are the input's bits and the masked ones exactly fill
// (rounded to bf16 once for a bf16 tensor). It is also its own gradient:
// CausalMask(dy, 0) passes dy where kept and 0 where masked.
//
// The mask is computed from the indices, never stored: no [T, S] tensor.
// In place is allowed (y exactly x); rows split across the team.
#include <algorithm>
#include <string>

#include "device/src/kernels/check.h"
#include "device/src/kernels/kernel_list.h"
#include "device/src/kernels/parallel_range.h"
#include "device/src/kernels/storage.h"

namespace sinkrt::device {
namespace {

struct CausalMaskState : KernelState {
  int64_t t = 0, s = 0;
  float fill = 0.0f;
};

Status CausalMaskPrepare(const KernelArgs& args, PrepareContext&, std::unique_ptr<KernelState>* state) {
  SINKRT_RETURN_IF_ERROR(CheckOperands(args, 1, 1));
  SINKRT_ASSIGN_OR_RETURN(const fb::FillOptions* opts, GetOptions<fb::FillOptions>(args));
  SINKRT_RETURN_IF_ERROR(CheckAllFloatDType(args).status());
  const TensorRef& x = args.inputs[0];
  if (x.rank() < 2) {
    return OpError(args, "input 0 " + ShapeToString(x.shape) + " must have rank >= 2 ([..., T, S] scores)");
  }
  SINKRT_RETURN_IF_ERROR(CheckSameShape(args, Out(0), In(0)));
  SINKRT_RETURN_IF_ERROR(CheckNoOverlap(args, /*allow_exact_alias=*/true));
  auto s = std::make_unique<CausalMaskState>();
  s->t = x.dim(x.rank() - 2);
  s->s = x.dim(x.rank() - 1);
  s->fill = opts->value();
  *state = std::move(s);
  return Status::Ok();
}

// Rows [begin, end) of x viewed as [rows, S]; row r is query r % T.
template <typename T>
void MaskRows(const CausalMaskState& st, const T* x, T* y, int64_t begin, int64_t end) {
  const T fill = Store<T>(st.fill);
  for (int64_t r = begin; r < end; ++r) {
    // Columns [0, keep) are kept: j <= i + S - T.
    const int64_t keep = std::clamp<int64_t>(r % st.t + st.s - st.t + 1, 0, st.s);
    const T* in = x + r * st.s;
    T* out = y + r * st.s;
    for (int64_t j = 0; j < keep; ++j) out[j] = in[j];
    for (int64_t j = keep; j < st.s; ++j) out[j] = fill;
  }
}

Status CausalMaskRun(const KernelArgs& args, KernelState* state, RunContext& ctx) {
  const auto& st = *static_cast<CausalMaskState*>(state);
  const TensorRef& y = args.outputs[0];
  if (y.numel == 0) return Status::Ok();
  WithStorage(y.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* x = Data<T>(args.inputs[0]);
    T* out = Data<T>(y);
    ForRange(
        ctx, y.numel / st.s, [&](int64_t begin, int64_t end) { MaskRows(st, x, out, begin, end); }, RowsPerPart(st.s));
  });
  return Status::Ok();
}

}  // namespace

const KernelImpl kCausalMaskKernel = {CausalMaskPrepare, CausalMaskRun};

}  // namespace sinkrt::device
