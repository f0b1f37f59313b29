// Transpose: y dim i = x dim perm[i], any permutation up to rank 6; f32 or
// bf16 (the partitioner's redistributions move bf16 activations too).
//
// prepare() simplifies the permutation once: size-1 dims are dropped and
// neighbouring output dims that are also neighbours in x (in the same order)
// merge, so [B,4,7,4,7] -> [B,4,4,7,7] becomes a 4-D walk with a contiguous
// run of 7, and a batched last-two-dims swap becomes [B, C, R] -> [B, R, C].
// run() then writes y in order, one of two ways:
//  - runs: x's contiguous dim is y's last too, so every innermost row is a
//    contiguous copy;
//  - tiles: x's contiguous dim lands elsewhere in y (a 2-D transpose inside).
//    The plane of that dim and y's last is walked in 16x16 tiles, so both
//    the strided reads and the strided writes stay within a few cache lines.
// The remaining (outer) dims advance an odometer with incremental offsets.
#include <algorithm>
#include <cstring>
#include <string>

#include "device/src/kernels/check.h"
#include "device/src/kernels/kernel_list.h"
#include "device/src/kernels/parallel_range.h"

namespace sinkrt::device {
namespace {

constexpr int kMaxTransposeRank = 6;
constexpr int64_t kTile = 16;
constexpr int64_t kShortRow = 32;  // floats; longer rows go through memcpy

struct TransposeState : KernelState {
  int rank = 0;  // merged
  int64_t dims[kMaxTransposeRank] = {};
  int64_t x_strides[kMaxTransposeRank] = {};  // x's element stride for each y dim
  int64_t y_strides[kMaxTransposeRank] = {};  // row-major over the merged dims
  int tile_dim = -1;                          // the y dim with x stride 1, when it is not the last
  int64_t numel = 0;
};

std::string PermToString(const flatbuffers::Vector<int32_t>* perm) {
  std::string s = "[";
  for (flatbuffers::uoffset_t i = 0; perm && i < perm->size(); ++i) {
    if (i) s += ',';
    s += std::to_string(perm->Get(i));
  }
  return s + "]";
}

Status TransposePrepare(const KernelArgs& args, PrepareContext&, std::unique_ptr<KernelState>* state) {
  SINKRT_RETURN_IF_ERROR(CheckOperands(args, 1, 1));
  SINKRT_ASSIGN_OR_RETURN(const fb::TransposeOptions* opts, GetOptions<fb::TransposeOptions>(args));
  if (args.inputs.size() == 1 && args.inputs[0].dtype == DType::BF16) {
    SINKRT_RETURN_IF_ERROR(CheckDType(args, Out(0), DType::BF16));
  } else {
    SINKRT_RETURN_IF_ERROR(CheckDType(args, In(0), DType::F32));
    SINKRT_RETURN_IF_ERROR(CheckDType(args, Out(0), DType::F32));
  }
  const TensorRef &x = args.inputs[0], &y = args.outputs[0];
  const int rank = x.rank();
  if (rank > kMaxTransposeRank) {
    return OpError(args, "input 0 has shape " + ShapeToString(x.shape) + ", at most rank " +
                             std::to_string(kMaxTransposeRank) + " is supported");
  }
  const auto* perm = opts->perm();
  const int given = perm ? static_cast<int>(perm->size()) : 0;
  if (given != rank) {
    return OpError(args, "perm " + PermToString(perm) + " has " + std::to_string(given) + " entries, input 0 " +
                             ShapeToString(x.shape) + " has rank " + std::to_string(rank));
  }
  bool seen[kMaxTransposeRank] = {};
  Shape want(rank);
  for (int i = 0; i < rank; ++i) {
    const int p = perm->Get(i);
    if (p < 0 || p >= rank || seen[p]) {
      return OpError(args, "perm " + PermToString(perm) + " is not a permutation of [0, " + std::to_string(rank) +
                               ") (stored normalised)");
    }
    seen[p] = true;
    want[i] = x.shape[p];
  }
  SINKRT_RETURN_IF_ERROR(CheckShape(args, Out(0), want, ShapeToString(want) + " (input 0 permuted by perm)"));
  SINKRT_RETURN_IF_ERROR(CheckNoOverlap(args, /*allow_exact_alias=*/false));

  int64_t x_stride[kMaxTransposeRank] = {};
  int64_t stride = 1;
  for (int d = rank - 1; d >= 0; --d) {
    x_stride[d] = stride;
    stride *= x.shape[d];
  }
  auto st = std::make_unique<TransposeState>();
  st->numel = y.numel;
  for (int i = 0; i < rank; ++i) {
    const int p = perm->Get(i);
    if (x.shape[p] == 1) continue;
    const int r = st->rank;
    // Merge with the previous y dim when x holds the two in the same order, adjacent.
    if (r > 0 && st->x_strides[r - 1] == x_stride[p] * x.shape[p]) {
      st->dims[r - 1] *= x.shape[p];
      st->x_strides[r - 1] = x_stride[p];
      continue;
    }
    st->dims[r] = x.shape[p];
    st->x_strides[r] = x_stride[p];
    ++st->rank;
  }
  stride = 1;
  for (int d = st->rank - 1; d >= 0; --d) {
    st->y_strides[d] = stride;
    stride *= st->dims[d];
  }
  for (int d = 0; d + 1 < st->rank; ++d)
    if (st->x_strides[d] == 1) st->tile_dim = d;
  *state = std::move(st);
  return Status::Ok();
}

// The number of outer positions ForEachOuter walks when skipping `skip_a`
// and `skip_b`.
int64_t OuterCount(const TransposeState& s, int skip_a, int skip_b) {
  int64_t count = 1;
  for (int d = 0; d < s.rank; ++d)
    if (d != skip_a && d != skip_b) count *= s.dims[d];
  return count;
}

// y[i] for y's merged dims, skipping `skip_a` and `skip_b` (-1: none) in
// the odometer; calls body(position, x_offset, y_offset) for outer
// positions [begin, end) (in y's order).
template <typename F>
void ForEachOuter(const TransposeState& s, int skip_a, int skip_b, int64_t begin, int64_t end, F body) {
  int outer[kMaxTransposeRank];
  int n = 0;
  for (int d = 0; d < s.rank; ++d) {
    if (d == skip_a || d == skip_b) continue;
    outer[n++] = d;
  }
  // The odometer started at position `begin`.
  int64_t idx[kMaxTransposeRank] = {};
  int64_t xo = 0, yo = 0;
  int64_t rest = begin;
  for (int k = n - 1; k >= 0; --k) {
    const int d = outer[k];
    idx[k] = rest % s.dims[d];
    rest /= s.dims[d];
    xo += idx[k] * s.x_strides[d];
    yo += idx[k] * s.y_strides[d];
  }
  for (int64_t c = begin; c < end; ++c) {
    body(c, xo, yo);
    for (int k = n - 1; k >= 0; --k) {
      const int d = outer[k];
      xo += s.x_strides[d];
      yo += s.y_strides[d];
      if (++idx[k] < s.dims[d]) break;
      idx[k] = 0;
      xo -= s.x_strides[d] * s.dims[d];
      yo -= s.y_strides[d] * s.dims[d];
    }
  }
}

// Rows [begin, end) of y when x's contiguous dim is y's last. Short rows
// (the ViT's runs of 7 and 16 floats) are copied inline: a memcpy call per
// row costs more than the copy. T: float, or uint16_t for bf16's bits.
template <typename T>
void CopyRuns(const TransposeState& s, const T* __restrict x, T* __restrict y, int64_t begin, int64_t end) {
  const int last = s.rank - 1;
  const int64_t n_last = s.dims[last];
  if (n_last <= kShortRow) {
    ForEachOuter(s, last, -1, begin, end, [&](int64_t, int64_t xo, int64_t yo) {
      for (int64_t i = 0; i < n_last; ++i) y[yo + i] = x[xo + i];
    });
    return;
  }
  ForEachOuter(s, last, -1, begin, end, [&](int64_t, int64_t xo, int64_t yo) {
    std::memcpy(y + yo, x + xo, static_cast<size_t>(n_last) * sizeof(T));
  });
}

// When x's contiguous dim (the tile dim) lands elsewhere in y: units
// [begin, end) of (outer position, row of 16x16 tiles), `tile_rows` rows of
// tiles per outer position.
template <typename T>
void CopyTiles(const TransposeState& s, const T* __restrict x, T* __restrict y, int64_t tile_rows, int64_t begin,
               int64_t end) {
  const int last = s.rank - 1, t = s.tile_dim;
  const int64_t n_last = s.dims[last], xs_last = s.x_strides[last];
  const int64_t n_t = s.dims[t], ys_t = s.y_strides[t];
  const int64_t outer_end = (end + tile_rows - 1) / tile_rows;
  ForEachOuter(s, t, last, begin / tile_rows, outer_end, [&](int64_t c, int64_t xo, int64_t yo) {
    const int64_t first = std::max<int64_t>(begin - c * tile_rows, 0) * kTile;
    const int64_t stop = std::min(n_t, std::min(end - c * tile_rows, tile_rows) * kTile);
    for (int64_t i0 = first; i0 < stop; i0 += kTile) {
      const int64_t i1 = std::min(n_t, i0 + kTile);
      for (int64_t j0 = 0; j0 < n_last; j0 += kTile) {
        const int64_t j1 = std::min(n_last, j0 + kTile);
        // Read along x's contiguous dim (i), write strided by ys_t.
        for (int64_t j = j0; j < j1; ++j) {
          const T* xr = x + xo + j * xs_last;
          T* yc = y + yo + j;
          for (int64_t i = i0; i < i1; ++i) yc[i * ys_t] = xr[i];
        }
      }
    }
  });
}

// Split across ctx's team by ranges of y (rows of runs, or rows of tiles of
// each outer position): a copy, so no bit depends on the split.
template <typename T>
Status TransposeAs(const TransposeState& s, const T* x, T* y, RunContext& ctx) {
  if (s.numel == 0) return Status::Ok();  // (a dim of 0: no odometer to start)
  if (s.rank <= 1) {                      // the identity once size-1 dims are gone
    ForRange(ctx, s.numel,
             [&](int64_t b, int64_t e) { std::memcpy(y + b, x + b, static_cast<size_t>(e - b) * sizeof(T)); });
    return Status::Ok();
  }
  const int last = s.rank - 1;
  if (s.tile_dim < 0) {
    ForRange(
        ctx, OuterCount(s, last, -1), [&](int64_t b, int64_t e) { CopyRuns(s, x, y, b, e); },
        RowsPerPart(s.dims[last]));
    return Status::Ok();
  }
  const int64_t tile_rows = (s.dims[s.tile_dim] + kTile - 1) / kTile;
  ForRange(
      ctx, OuterCount(s, s.tile_dim, last) * tile_rows,
      [&](int64_t b, int64_t e) { CopyTiles(s, x, y, tile_rows, b, e); }, RowsPerPart(kTile * s.dims[last]));
  return Status::Ok();
}

Status TransposeRun(const KernelArgs& args, KernelState* state, RunContext& ctx) {
  const auto& s = *static_cast<TransposeState*>(state);
  if (args.inputs[0].dtype == DType::BF16) {
    return TransposeAs(s, static_cast<const uint16_t*>(args.inputs[0].data),
                       static_cast<uint16_t*>(args.outputs[0].data), ctx);
  }
  return TransposeAs(s, args.inputs[0].f32(), args.outputs[0].f32(), ctx);
}

}  // namespace

const KernelImpl kTransposeKernel = {TransposePrepare, TransposeRun};

}  // namespace sinkrt::device
