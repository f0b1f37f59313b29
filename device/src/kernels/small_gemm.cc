// The register-blocked product of small_gemm.h. Built with
// -ffp-contract=fast (device/CMakeLists.txt), unlike the rest of the device
// library, so that the x86-64-v3/v4 clones turn acc += a·b into FMAs.
#include "device/src/kernels/small_gemm.h"

#include <cstring>

#include "device/src/kernels/vector_math.h"  // SINKRT_VECTOR_CLONES

namespace sinkrt::device {
namespace {

// Eight lanes, one ymm register in the x86-64-v3/v4 clones (the SSE2
// clone splits it in two). Wider GCC vectors are no help: a 16-lane type
// under AVX2 is lowered through memory, accumulators included.
typedef float V8 __attribute__((vector_size(32)));

// Rows [0, R) of y (stride ldy), columns [0, cols) with cols ≤ 8·C:
// y[r][j] = Σ_p a[r·a_row + p·a_col] · panel[p·ldp + j]. The panel holds
// 8·C columns in every row (zero-padded past cols); only cols are stored.
// R·C accumulators: 8 of the 16 ymm registers at R = 4, C = 2, enough
// independent FMA chains to cover the FMA latency on two pipes.
template <int R, int C>
inline __attribute__((always_inline)) void Tile(const float* __restrict a, int64_t a_row, int64_t a_col,
                                                const float* __restrict panel, int64_t ldp, int64_t k,
                                                float* __restrict y, int64_t ldy, int64_t cols) {
  V8 acc[R][C];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int c = 0; c < C; ++c) acc[r][c] = V8{};
  for (int64_t p = 0; p < k; ++p) {
    V8 bv[C];
#pragma GCC unroll 2
    for (int c = 0; c < C; ++c) std::memcpy(&bv[c], panel + p * ldp + 8 * c, sizeof(V8));
    const float* ap = a + p * a_col;
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const float s = ap[r * a_row];
#pragma GCC unroll 2
      for (int c = 0; c < C; ++c) acc[r][c] += s * bv[c];
    }
  }
  if (cols == 8 * C) {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
      for (int c = 0; c < C; ++c) std::memcpy(y + r * ldy + 8 * c, &acc[r][c], sizeof(V8));
  } else {
    for (int r = 0; r < R; ++r) {
      float row[8 * C];
      std::memcpy(row, acc[r], sizeof(row));
      std::memcpy(y + r * ldy, row, cols * sizeof(float));
    }
  }
}

// dst[p·ldd + j] = src[j·lds + p] for an 8×8 block, in registers: the
// usual unpack / shuffle / 128-bit permute network, which GCC maps to
// vunpcklps, vshufps and vperm2f128 in the AVX clones. A scalar loop here
// cost as much as the products it packs for.
inline __attribute__((always_inline)) void Transpose8x8(const float* __restrict src, int64_t lds, float* __restrict dst,
                                                        int64_t ldd) {
  V8 r[8], t[8], u[8];
#pragma GCC unroll 8
  for (int j = 0; j < 8; ++j) std::memcpy(&r[j], src + j * lds, sizeof(V8));
#pragma GCC unroll 4
  for (int j = 0; j < 8; j += 2) {
    t[j] = __builtin_shufflevector(r[j], r[j + 1], 0, 8, 1, 9, 4, 12, 5, 13);
    t[j + 1] = __builtin_shufflevector(r[j], r[j + 1], 2, 10, 3, 11, 6, 14, 7, 15);
  }
#pragma GCC unroll 2
  for (int h = 0; h < 8; h += 4) {
    u[h] = __builtin_shufflevector(t[h], t[h + 2], 0, 1, 8, 9, 4, 5, 12, 13);
    u[h + 1] = __builtin_shufflevector(t[h], t[h + 2], 2, 3, 10, 11, 6, 7, 14, 15);
    u[h + 2] = __builtin_shufflevector(t[h + 1], t[h + 3], 0, 1, 8, 9, 4, 5, 12, 13);
    u[h + 3] = __builtin_shufflevector(t[h + 1], t[h + 3], 2, 3, 10, 11, 6, 7, 14, 15);
  }
  // u[q] (q < 4) holds columns q and q + 4 of rows 0–3; u[q + 4] of rows 4–7.
#pragma GCC unroll 4
  for (int q = 0; q < 4; ++q) {
    const V8 lo = __builtin_shufflevector(u[q], u[q + 4], 0, 1, 2, 3, 8, 9, 10, 11);
    const V8 hi = __builtin_shufflevector(u[q], u[q + 4], 4, 5, 6, 7, 12, 13, 14, 15);
    std::memcpy(dst + q * ldd, &lo, sizeof(V8));
    std::memcpy(dst + (q + 4) * ldd, &hi, sizeof(V8));
  }
}

// Columns [j0, j0 + cols) of y, cols ≤ 8·C, for every row.
template <int C>
inline __attribute__((always_inline)) void Panel(const SmallGemmDims& d, const float* __restrict a,
                                                 const float* __restrict b, float* __restrict y, int64_t j0,
                                                 int64_t cols, float* __restrict tile) {
  constexpr int W = 8 * C;
  const int64_t m = d.m, n = d.n, k = d.k;
  const float* panel = b + j0;
  int64_t ldp = n;
  if (d.tb || cols < W) {
    // op(b)[p][j0 + j] into tile[p·W + j], zeros past cols.
    if (d.tb) {
      const float* rows = b + j0 * k;  // row j of op(b)ᵀ is column j of the panel
      const int64_t k8 = k - k % 8, c8 = cols - cols % 8;
      for (int64_t p = 0; p < k8; p += 8)
        for (int64_t j = 0; j < c8; j += 8) Transpose8x8(rows + j * k + p, k, tile + p * W + j, W);
      for (int64_t j = 0; j < cols; ++j)
        for (int64_t p = j < c8 ? k8 : 0; p < k; ++p) tile[p * W + j] = rows[j * k + p];
    } else {
      for (int64_t p = 0; p < k; ++p)
        for (int64_t j = 0; j < cols; ++j) tile[p * W + j] = b[p * n + j0 + j];
    }
    for (int64_t p = 0; p < k; ++p)
      for (int64_t j = cols; j < W; ++j) tile[p * W + j] = 0.0f;
    panel = tile;
    ldp = W;
  }
  // op(a)[i][p] = a[i·a_row + p·a_col].
  const int64_t a_row = d.ta ? 1 : k, a_col = d.ta ? m : 1;
  int64_t i = 0;
  for (; i + 4 <= m; i += 4) Tile<4, C>(a + i * a_row, a_row, a_col, panel, ldp, k, y + i * n + j0, n, cols);
  const float* ai = a + i * a_row;
  float* yi = y + i * n + j0;
  switch (m - i) {
    case 3:
      Tile<3, C>(ai, a_row, a_col, panel, ldp, k, yi, n, cols);
      break;
    case 2:
      Tile<2, C>(ai, a_row, a_col, panel, ldp, k, yi, n, cols);
      break;
    case 1:
      Tile<1, C>(ai, a_row, a_col, panel, ldp, k, yi, n, cols);
      break;
    default:
      break;
  }
}

}  // namespace

SINKRT_VECTOR_CLONES void SmallGemm(const SmallGemmDims& d, const float* a, const float* b, float* y) {
  alignas(64) float tile[kSmallGemmMaxK * 16];
  int64_t j = 0;
  for (; j + 16 <= d.n; j += 16) Panel<2>(d, a, b, y, j, 16, tile);
  const int64_t rest = d.n - j;
  // A tail of at most 8 columns takes half the work in 8-lane panels.
  if (rest > 8)
    Panel<2>(d, a, b, y, j, rest, tile);
  else if (rest > 0)
    Panel<1>(d, a, b, y, j, rest, tile);
}

}  // namespace sinkrt::device
