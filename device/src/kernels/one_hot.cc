// OneHot (MindSpore's ops.OneHot(axis)(indices, depth, on_value, off_value)):
// i32 indices [X0..Xn] -> [X0..X(axis-1), depth, X(axis)..Xn], on_value where
// the position along the new axis equals the index, off_value elsewhere.
//
// An index outside [0, depth), negative included, gives all off_value, as
// MindSpore's CPU kernel and TensorFlow do: a data value, not an error (a
// padding label of -1 is a common use). The output is viewed as
// [outer, depth, inner] (inner: the index dims after the axis), rows of
// `outer` split across the team.
#include <string>

#include "device/src/kernels/check.h"
#include "device/src/kernels/kernel_list.h"
#include "device/src/kernels/parallel_range.h"
#include "device/src/kernels/storage.h"

namespace sinkrt::device {
namespace {

struct OneHotState : KernelState {
  int64_t outer = 0, depth = 0, inner = 0;
  float on = 1.0f, off = 0.0f;
};

Status OneHotPrepare(const KernelArgs& args, PrepareContext&, std::unique_ptr<KernelState>* state) {
  SINKRT_RETURN_IF_ERROR(CheckOperands(args, 1, 1));
  SINKRT_ASSIGN_OR_RETURN(const fb::OneHotOptions* opts, GetOptions<fb::OneHotOptions>(args));
  SINKRT_RETURN_IF_ERROR(CheckDType(args, In(0), DType::I32));
  SINKRT_RETURN_IF_ERROR(CheckFloatDType(args, {Out(0)}).status());
  const TensorRef& idx = args.inputs[0];
  if (opts->depth() < 0) return OpError(args, "depth " + std::to_string(opts->depth()) + " must be >= 0");
  const int axis = opts->axis();
  if (axis < -1 || axis > idx.rank()) {
    return OpError(args, "axis " + std::to_string(axis) + " is outside [-1, " + std::to_string(idx.rank()) +
                             "] (indices " + ShapeToString(idx.shape) + ")");
  }
  const int at = axis == -1 ? idx.rank() : axis;
  Shape want = idx.shape;
  want.insert(want.begin() + at, opts->depth());
  SINKRT_RETURN_IF_ERROR(CheckShape(args, Out(0), want));
  auto s = std::make_unique<OneHotState>();
  s->depth = opts->depth();
  s->inner = 1;
  for (int d = at; d < idx.rank(); ++d) s->inner *= idx.dim(d);
  s->outer = s->inner == 0 ? 0 : idx.numel / s->inner;
  s->on = opts->on_value();
  s->off = opts->off_value();
  *state = std::move(s);
  return Status::Ok();
}

// Blocks [begin, end) of `outer`: each is depth x inner outputs.
template <typename T>
void OneHotBlocks(const OneHotState& st, const int32_t* idx, T* y, int64_t begin, int64_t end) {
  const T on = Store<T>(st.on), off = Store<T>(st.off);
  const int64_t block = st.depth * st.inner;
  for (int64_t o = begin; o < end; ++o) {
    T* out = y + o * block;
    for (int64_t k = 0; k < block; ++k) out[k] = off;
    const int32_t* in = idx + o * st.inner;
    for (int64_t i = 0; i < st.inner; ++i) {
      const int64_t d = in[i];
      if (d >= 0 && d < st.depth) out[d * st.inner + i] = on;
    }
  }
}

Status OneHotRun(const KernelArgs& args, KernelState* state, RunContext& ctx) {
  const auto& st = *static_cast<OneHotState*>(state);
  const TensorRef& y = args.outputs[0];
  if (y.numel == 0) return Status::Ok();
  WithStorage(y.dtype, [&](auto tag) {
    using T = decltype(tag);
    const int32_t* idx = args.inputs[0].i32();
    T* out = Data<T>(y);
    ForRange(
        ctx, st.outer, [&](int64_t begin, int64_t end) { OneHotBlocks(st, idx, out, begin, end); },
        RowsPerPart(st.depth * st.inner));
  });
  return Status::Ok();
}

}  // namespace

const KernelImpl kOneHotKernel = {OneHotPrepare, OneHotRun};

}  // namespace sinkrt::device
