// Select (ops.select, Where): y = cond ? a : b, the three operands broadcast
// together by NumPy rules. The runtime has no bool dtype: cond is U8, f32 or
// bf16, nonzero meaning true (NaN is nonzero, -0 is zero); a, b and y are all
// f32 or all bf16. Selecting copies bits, so bf16 needs no rounding.
//
// Planned at load into per-operand element strides over y's dims (0 where an
// operand broadcasts) and run as an odometer over y's rows, split across the
// team by rows: every element is computed as unsplit.
#include <string>

#include "device/src/kernels/broadcast.h"
#include "device/src/kernels/check.h"
#include "device/src/kernels/kernel_list.h"
#include "device/src/kernels/parallel_range.h"
#include "device/src/kernels/storage.h"

namespace sinkrt::device {
namespace {

// A bf16 cond element (its bits), distinct from the bf16 values' bf16_t.
struct Bf16Cond {
  uint16_t bits;
};

struct SelectState : KernelState {
  DType cond = DType::U8;
  int rank = 0;
  int64_t dims[kMaxRank] = {};
  int64_t strides[3][kMaxRank] = {};  // cond, a, b; 0 where broadcast
};

// Element strides of `in` (right-aligned against y's rank) over y's dims.
void Strides(const Shape& in, int rank, int64_t* out) {
  int64_t stride = 1;
  const int offset = rank - static_cast<int>(in.size());
  for (int d = rank - 1; d >= 0; --d) {
    const int k = d - offset;
    const int64_t n = k >= 0 ? in[static_cast<size_t>(k)] : 1;
    out[d] = n == 1 ? 0 : stride;
    stride *= n;
  }
}

Status SelectPrepare(const KernelArgs& args, PrepareContext&, std::unique_ptr<KernelState>* state) {
  SINKRT_RETURN_IF_ERROR(CheckOperands(args, 3, 1));
  SINKRT_RETURN_IF_ERROR(CheckNoOptions(args));
  const DType cond = args.inputs[0].dtype;
  if (cond != DType::U8 && cond != DType::F32 && cond != DType::BF16) {
    return OpError(args, std::string("cond (input 0) has dtype ") + DTypeName(cond) + ", expected u8, f32 or bf16");
  }
  SINKRT_RETURN_IF_ERROR(CheckFloatDType(args, {In(1), In(2), Out(0)}).status());
  const TensorRef &c = args.inputs[0], &a = args.inputs[1], &b = args.inputs[2];
  Shape ab, shape;
  if (!BroadcastShapes(a.shape, b.shape, &ab) || !BroadcastShapes(c.shape, ab, &shape)) {
    return OpError(args, "cond " + ShapeToString(c.shape) + ", input 1 " + ShapeToString(a.shape) + " and input 2 " +
                             ShapeToString(b.shape) + " do not broadcast");
  }
  if (shape.size() > static_cast<size_t>(kMaxRank)) {
    return OpError(args, "rank " + std::to_string(shape.size()) + " exceeds " + std::to_string(kMaxRank));
  }
  SINKRT_RETURN_IF_ERROR(CheckShape(args, Out(0), shape, ShapeToString(shape) + " (the broadcast of the inputs)"));
  SINKRT_RETURN_IF_ERROR(CheckNoOverlap(args, /*allow_exact_alias=*/true));
  auto s = std::make_unique<SelectState>();
  s->cond = cond;
  s->rank = static_cast<int>(shape.size());
  for (int d = 0; d < s->rank; ++d) s->dims[d] = shape[static_cast<size_t>(d)];
  if (s->rank == 0) {  // a scalar: one row of one element, every stride 0
    s->rank = 1;
    s->dims[0] = 1;
  }
  Strides(c.shape, s->rank, s->strides[0]);
  Strides(a.shape, s->rank, s->strides[1]);
  Strides(b.shape, s->rank, s->strides[2]);
  *state = std::move(s);
  return Status::Ok();
}

// Whether a cond element is true: nonzero, -0 counting as zero.
inline bool Truth(uint8_t c) { return c != 0; }
inline bool Truth(float c) { return c != 0.0f || c != c; }
inline bool Truth(Bf16Cond c) { return (c.bits & 0x7fffu) != 0; }

// Rows [begin, end) of y viewed as [rows, dims[rank - 1]].
template <typename C, typename T>
void SelectRows(const SelectState& s, const C* c, const T* a, const T* b, T* y, int64_t begin, int64_t end) {
  const int last = s.rank - 1;
  const int64_t cols = s.dims[last];
  const int64_t sc = s.strides[0][last], sa = s.strides[1][last], sb = s.strides[2][last];
  for (int64_t row = begin; row < end; ++row) {
    int64_t oc = 0, oa = 0, ob = 0, rest = row;
    for (int d = last - 1; d >= 0; --d) {
      const int64_t i = rest % s.dims[d];
      rest /= s.dims[d];
      oc += i * s.strides[0][d];
      oa += i * s.strides[1][d];
      ob += i * s.strides[2][d];
    }
    T* out = y + row * cols;
    for (int64_t j = 0; j < cols; ++j) out[j] = Truth(c[oc + j * sc]) ? a[oa + j * sa] : b[ob + j * sb];
  }
}

template <typename C>
void SelectAll(const SelectState& s, const KernelArgs& args, RunContext& ctx) {
  const TensorRef& y = args.outputs[0];
  const int64_t cols = s.dims[s.rank - 1];
  const C* c = static_cast<const C*>(args.inputs[0].data);
  WithStorage(y.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T *a = Data<T>(args.inputs[1]), *b = Data<T>(args.inputs[2]);
    T* out = Data<T>(y);
    ForRange(
        ctx, y.numel / cols, [&](int64_t begin, int64_t end) { SelectRows(s, c, a, b, out, begin, end); },
        RowsPerPart(cols));
  });
}

Status SelectRun(const KernelArgs& args, KernelState* state, RunContext& ctx) {
  const auto& s = *static_cast<SelectState*>(state);
  if (args.outputs[0].numel == 0) return Status::Ok();
  if (s.cond == DType::U8) {
    SelectAll<uint8_t>(s, args, ctx);
  } else if (s.cond == DType::F32) {
    SelectAll<float>(s, args, ctx);
  } else {
    SelectAll<Bf16Cond>(s, args, ctx);
  }
  return Status::Ok();
}

}  // namespace

const KernelImpl kSelectKernel = {SelectPrepare, SelectRun};

}  // namespace sinkrt::device
