// Pad (MindSpore's ops.Pad, nn.Pad, ops.pad) and its gradient PadGrad, with
// PadOptions: (before, after) per axis of x, the mode and the constant value.
//
// Every axis maps an output position o to a source position in x: o - before
// inside, and in the padding either none (constant: the value) or the
// mirror image (reflect: the edge not repeated, -p and 2(n-1) - p; symmetric:
// the edge repeated, -p - 1 and 2n - 1 - p). The builder keeps each padding
// within one reflection, so one mirror is enough. The maps are built at
// prepare; run walks output rows (every axis but the last), copies the
// contiguous middle of each and fills or mirrors its two ends.
//
// PadGrad reverses the maps: each dx element sums the dy elements that read
// it, in a fixed order (the copy first, then the mirrors by position), so
// the rows of dx split across the team with the same bits on any team size.
// The constant mode's gradient is the slice of dy that x became.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "device/src/kernels/check.h"
#include "device/src/kernels/kernel_list.h"
#include "device/src/kernels/parallel_range.h"
#include "device/src/kernels/storage.h"

namespace sinkrt::device {
namespace {

// Pad's rank limit (PadGrad walks the leading axes with fixed arrays).
constexpr size_t kPadMaxRank = 8;

struct PadState : KernelState {
  Shape in, out;                          // x's and y's shapes (the forward's)
  std::vector<int64_t> before;            // per axis
  std::vector<std::vector<int64_t>> src;  // per axis, per output position: x's position, -1 for the value
  // PadGrad: per axis, per x position, the output positions that read it, in
  // ascending order (the copy is the one at position + before).
  std::vector<std::vector<std::vector<int64_t>>> readers;
  std::vector<int64_t> in_strides, out_strides;
  float value = 0.0f;
  bool constant = true;  // the constant mode (PadGrad: a slice)
};

int64_t Source(int64_t o, int64_t before, int64_t n, fb::PadMode mode) {
  const int64_t p = o - before;
  if (p >= 0 && p < n) return p;
  if (mode == fb::PadMode::Constant) return -1;
  if (mode == fb::PadMode::Reflect) return p < 0 ? -p : 2 * (n - 1) - p;
  return p < 0 ? -p - 1 : 2 * n - 1 - p;  // symmetric
}

std::vector<int64_t> Strides(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (size_t d = s.size(); d-- > 1;) st[d - 1] = st[d] * s[d];
  return st;
}

// Checks the paddings against x's shape (the builder did; the stream is only
// partly trusted) and returns y's shape.
Result<Shape> PaddedShape(const KernelArgs& args, const fb::PadOptions& o, const Shape& x) {
  const size_t rank = x.size();
  const size_t got = o.paddings() ? o.paddings()->size() : 0;
  if (rank == 0 || rank > kPadMaxRank) {
    return OpError(args, "x " + ShapeToString(x) + " must have rank 1 to " + std::to_string(kPadMaxRank));
  }
  if (got != 2 * rank) {
    return OpError(args, "paddings has " + std::to_string(got) + " values, expected " + std::to_string(2 * rank) +
                             " (before, after) for x " + ShapeToString(x));
  }
  if (o.mode() > fb::PadMode::MAX) return OpError(args, "mode " + std::to_string(int(o.mode())) + " is unknown");
  Shape y = x;
  for (size_t d = 0; d < rank; ++d) {
    const int64_t b = o.paddings()->Get(2 * d), a = o.paddings()->Get(2 * d + 1);
    const int64_t limit = o.mode() == fb::PadMode::Reflect     ? x[d] - 1
                          : o.mode() == fb::PadMode::Symmetric ? x[d]
                                                               : INT32_MAX;
    if (b < 0 || a < 0 || b > limit || a > limit) {
      return OpError(args, "paddings (" + std::to_string(b) + ", " + std::to_string(a) + ") of axis " +
                               std::to_string(d) + " (extent " + std::to_string(x[d]) + ") must be in [0, " +
                               std::to_string(std::max<int64_t>(limit, 0)) + "] for mode " +
                               fb::EnumNamePadMode(o.mode()));
    }
    y[d] = x[d] + b + a;
  }
  return y;
}

template <bool kGrad>
Status PadPrepare(const KernelArgs& args, PrepareContext&, std::unique_ptr<KernelState>* state) {
  SINKRT_RETURN_IF_ERROR(CheckOperands(args, 1, 1));
  SINKRT_ASSIGN_OR_RETURN(const fb::PadOptions* opts, GetOptions<fb::PadOptions>(args));
  SINKRT_RETURN_IF_ERROR(CheckAllFloatDType(args).status());
  const Operand x = kGrad ? Out(0) : In(0), y = kGrad ? In(0) : Out(0);
  auto s = std::make_unique<PadState>();
  s->in = Get(args, x).shape;
  SINKRT_ASSIGN_OR_RETURN(s->out, PaddedShape(args, *opts, s->in));
  SINKRT_RETURN_IF_ERROR(CheckShape(args, y, s->out));
  SINKRT_RETURN_IF_ERROR(CheckNoOverlap(args, /*allow_exact_alias=*/false));
  const size_t rank = s->in.size();
  s->src.resize(rank);
  s->readers.resize(rank);
  for (size_t d = 0; d < rank; ++d) {
    s->before.push_back(opts->paddings()->Get(2 * d));
    s->readers[d].resize(s->in[d]);
    for (int64_t o = 0; o < s->out[d]; ++o) {
      const int64_t p = Source(o, s->before[d], s->in[d], opts->mode());
      s->src[d].push_back(p);
      if (p >= 0) s->readers[d][p].push_back(o);
    }
  }
  s->in_strides = Strides(s->in);
  s->out_strides = Strides(s->out);
  s->value = opts->value();
  s->constant = opts->mode() == fb::PadMode::Constant;
  *state = std::move(s);
  return Status::Ok();
}

// Output rows [begin, end) (y viewed as [rows, last]).
template <typename T>
void PadRows(const PadState& st, const T* x, T* y, int64_t begin, int64_t end) {
  const size_t last = st.in.size() - 1;
  const int64_t n = st.in[last], w = st.out[last], b = st.before[last];
  const std::vector<int64_t>& src = st.src[last];
  const T value = Store<T>(st.value);
  for (int64_t r = begin; r < end; ++r) {
    T* out = y + r * w;
    // The source row: every leading axis's position, or none (the value).
    int64_t from = 0;
    for (int64_t d = static_cast<int64_t>(last) - 1, rest = r; d >= 0 && from >= 0; --d) {
      const int64_t p = st.src[d][rest % st.out[d]];
      rest /= st.out[d];
      from = p < 0 ? -1 : from + p * st.in_strides[d];
    }
    if (from < 0) {
      std::fill(out, out + w, value);
      continue;
    }
    const T* in = x + from;
    std::memcpy(out + b, in, static_cast<size_t>(n) * sizeof(T));
    for (int64_t o = 0; o < b; ++o) out[o] = src[o] < 0 ? value : in[src[o]];
    for (int64_t o = b + n; o < w; ++o) out[o] = src[o] < 0 ? value : in[src[o]];
  }
}

Status PadRun(const KernelArgs& args, KernelState* state, RunContext& ctx) {
  const auto& st = *static_cast<PadState*>(state);
  const TensorRef& y = args.outputs[0];
  if (y.numel == 0) return Status::Ok();
  const int64_t w = st.out.back();
  WithStorage(y.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* x = Data<T>(args.inputs[0]);
    T* out = Data<T>(y);
    ForRange(
        ctx, y.numel / w, [&](int64_t begin, int64_t end) { PadRows(st, x, out, begin, end); }, RowsPerPart(w));
  });
  return Status::Ok();
}

// dx rows [begin, end) of the constant mode: the slice of dy.
template <typename T>
void PadGradSliceRows(const PadState& st, const T* dy, T* dx, int64_t begin, int64_t end) {
  const size_t last = st.in.size() - 1;
  const int64_t n = st.in[last];
  for (int64_t r = begin; r < end; ++r) {
    int64_t row = st.before[last];
    for (int64_t d = static_cast<int64_t>(last) - 1, rest = r; d >= 0; --d) {
      row += (rest % st.in[d] + st.before[d]) * st.out_strides[d];
      rest /= st.in[d];
    }
    std::memcpy(dx + r * n, dy + row, static_cast<size_t>(n) * sizeof(T));
  }
}

// dx row `r` of a mirror mode: each element sums the dy elements that read
// it. The dy rows that read row r are the product, over leading axes, of
// each axis's readers, walked like an odometer; within a row each element
// adds its readers in ascending order. Sums in f32, in chunks on the stack
// (run() allocates nothing).
template <typename T>
void PadGradMirrorRow(const PadState& st, const T* dy, T* dx, int64_t r) {
  const size_t last = st.in.size() - 1;
  const int64_t n = st.in[last];
  std::array<const std::vector<int64_t>*, kPadMaxRank> lists{};
  for (int64_t d = static_cast<int64_t>(last) - 1, rest = r; d >= 0; --d) {
    lists[d] = &st.readers[d][rest % st.in[d]];
    rest /= st.in[d];
  }
  constexpr int64_t kChunk = 256;
  float acc[kChunk];
  for (int64_t c = 0; c < n; c += kChunk) {
    const int64_t k = std::min(kChunk, n - c);
    std::fill(acc, acc + k, 0.0f);
    std::array<size_t, kPadMaxRank> at{};
    for (bool more = true; more;) {
      int64_t row = 0;
      for (size_t d = 0; d < last; ++d) row += (*lists[d])[at[d]] * st.out_strides[d];
      const T* g = dy + row;
      for (int64_t p = 0; p < k; ++p)
        for (int64_t o : st.readers[last][c + p]) acc[p] += Load(g[o]);
      size_t d = last;
      while (d > 0 && ++at[d - 1] == lists[d - 1]->size()) at[--d] = 0;
      more = d > 0;
    }
    for (int64_t p = 0; p < k; ++p) dx[r * n + c + p] = Store<T>(acc[p]);
  }
}

Status PadGradRun(const KernelArgs& args, KernelState* state, RunContext& ctx) {
  const auto& st = *static_cast<PadState*>(state);
  const TensorRef& dx = args.outputs[0];
  if (dx.numel == 0) return Status::Ok();
  const int64_t n = st.in.back();
  WithStorage(dx.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* dy = Data<T>(args.inputs[0]);
    T* out = Data<T>(dx);
    ForRange(
        ctx, dx.numel / n,
        [&](int64_t begin, int64_t end) {
          if (st.constant) return PadGradSliceRows(st, dy, out, begin, end);
          for (int64_t r = begin; r < end; ++r) PadGradMirrorRow(st, dy, out, r);
        },
        RowsPerPart(n));
  });
  return Status::Ok();
}

}  // namespace

const KernelImpl kPadKernel = {PadPrepare<false>, PadRun};
const KernelImpl kPadGradKernel = {PadPrepare<true>, PadGradRun};

}  // namespace sinkrt::device
