#include "device/src/kernels/sum.h"

#include <algorithm>

#include "device/src/kernels/vector_math.h"

namespace sinkrt::device {
namespace {

constexpr int64_t kLeaf = kPairwiseLeaf;

// The leaves (sum.h) compiled per ISA.
SINKRT_VECTOR_CLONES float LeafSumClones(const float* __restrict x, int64_t n) { return LeafSum(x, n); }
SINKRT_VECTOR_CLONES float LeafSumClones(const bf16_t* __restrict x, int64_t n) { return LeafSum(x, n); }
SINKRT_VECTOR_CLONES float LeafDotClones(const float* __restrict x, const float* __restrict w, int64_t n) {
  return LeafDot(x, w, n);
}

// Split point: a multiple of the leaf so leaves stay full.
inline int64_t Half(int64_t n) { return ((n / 2 + kLeaf - 1) / kLeaf) * kLeaf; }

template <typename T>
float PairwiseSumOf(const T* __restrict x, int64_t n) {
  if (n <= kLeaf) return LeafSumClones(x, n);
  const int64_t h = Half(n);
  return PairwiseSumOf(x, h) + PairwiseSumOf(x + h, n - h);
}

}  // namespace

float PairwiseSum(const float* __restrict x, int64_t n) { return PairwiseSumOf(x, n); }
float PairwiseSum(const bf16_t* __restrict x, int64_t n) { return PairwiseSumOf(x, n); }

float PairwiseDot(const float* __restrict x, const float* __restrict w, int64_t n) {
  if (n <= kLeaf) return LeafDotClones(x, w, n);
  const int64_t h = Half(n);
  return PairwiseDot(x, w, h) + PairwiseDot(x + h, w + h, n - h);
}

namespace {

constexpr int64_t kCols = 64;               // a column block stays in registers / L1
constexpr int64_t kRows = kColumnLeafRows;  // rows summed directly before pairing

// out[j] = Σ_r x[r·cols + j] for j < w ≤ kCols, pairwise over row blocks.
template <typename T>
inline void ColumnLeafSumOf(const T* __restrict x, int64_t rows, int64_t cols, int64_t w, float* __restrict out) {
  for (int64_t j = 0; j < w; ++j) out[j] = 0.0f;
  for (int64_t r = 0; r < rows; ++r) {
    const T* row = x + r * cols;
    for (int64_t j = 0; j < w; ++j) out[j] += Load(row[j]);
  }
}
SINKRT_VECTOR_CLONES void ColumnLeafSum(const float* __restrict x, int64_t rows, int64_t cols, int64_t w,
                                        float* __restrict out) {
  ColumnLeafSumOf(x, rows, cols, w, out);
}
SINKRT_VECTOR_CLONES void ColumnLeafSum(const bf16_t* __restrict x, int64_t rows, int64_t cols, int64_t w,
                                        float* __restrict out) {
  ColumnLeafSumOf(x, rows, cols, w, out);
}

template <typename T>
void ColumnBlockSum(const T* __restrict x, int64_t rows, int64_t cols, int64_t w, float* __restrict out) {
  if (rows <= kRows) {
    ColumnLeafSum(x, rows, cols, w, out);
    return;
  }
  const int64_t h = ((rows / 2 + kRows - 1) / kRows) * kRows;
  float rest[kCols];
  ColumnBlockSum(x, h, cols, w, out);
  ColumnBlockSum(x + h * cols, rows - h, cols, w, rest);
  for (int64_t j = 0; j < w; ++j) out[j] += rest[j];
}

// Folds the pairwise tree over the leaves of `rows` rows into leaves[0..cols):
// ColumnBlockSum's tree, with the leaves already summed.
void FoldColumnLeaves(float* __restrict leaves, int64_t rows, int64_t cols) {
  if (rows <= kRows) return;
  const int64_t h = ((rows / 2 + kRows - 1) / kRows) * kRows;
  float* __restrict rest = leaves + (h / kRows) * cols;
  FoldColumnLeaves(leaves, h, cols);
  FoldColumnLeaves(rest, rows - h, cols);
  for (int64_t j = 0; j < cols; ++j) leaves[j] += rest[j];
}

}  // namespace

void AddColumnLeaves(float* __restrict leaves, int64_t rows, int64_t cols, float* __restrict y) {
  if (rows == 0) return;
  FoldColumnLeaves(leaves, rows, cols);
  for (int64_t j = 0; j < cols; ++j) y[j] += leaves[j];
}

namespace {

// Each column's sum depends only on its own elements and `rows`: the column
// blocks' widths (and where they start) change no bit.
template <typename T>
void AddColumnSumsOf(const T* __restrict x, int64_t rows, int64_t cols, int64_t stride, float* __restrict y) {
  for (int64_t c0 = 0; c0 < cols; c0 += kCols) {
    const int64_t w = std::min(kCols, cols - c0);
    float total[kCols];
    ColumnBlockSum(x + c0, rows, stride, w, total);
    for (int64_t j = 0; j < w; ++j) y[c0 + j] += total[j];
  }
}

}  // namespace

void AddColumnSums(const float* __restrict x, int64_t rows, int64_t cols, float* __restrict y) {
  AddColumnSumsOf(x, rows, cols, cols, y);
}
void AddColumnSums(const bf16_t* __restrict x, int64_t rows, int64_t cols, float* __restrict y) {
  AddColumnSumsOf(x, rows, cols, cols, y);
}
void AddColumnSums(const float* __restrict x, int64_t rows, int64_t cols, int64_t stride, float* __restrict y) {
  AddColumnSumsOf(x, rows, cols, stride, y);
}
void AddColumnSums(const bf16_t* __restrict x, int64_t rows, int64_t cols, int64_t stride, float* __restrict y) {
  AddColumnSumsOf(x, rows, cols, stride, y);
}

}  // namespace sinkrt::device
