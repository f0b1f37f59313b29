// Float summation with bounded error and a fixed order.
//
// Results must be bitwise reproducible run to run and accurate for long
// reductions (a bias gradient over a big batch), without double or threads:
// sums are pairwise over blocks whose insides use 16 independent lanes, so
// the error grows with log(n) and the inner loop vectorises.
//
// The sums over bf16 storage widen each element and add in f32 in exactly
// the order of the float ones: a bf16 tensor sums to the bits its f32 copy
// sums to.
#pragma once

#include <cstdint>

#include "device/src/kernels/storage.h"

namespace sinkrt::device {

// Σ x[0..n).
float PairwiseSum(const float* __restrict x, int64_t n);
float PairwiseSum(const bf16_t* __restrict x, int64_t n);

// PairwiseSum and PairwiseDot of at most this many elements are one leaf:
// LeafSum / LeafDot below, whose bits they return.
inline constexpr int64_t kPairwiseLeaf = 256;
inline constexpr int kLeafLanes = 16;

// The lanes' total, as a tree: the same order every call.
inline float LeafLaneTotal(const float* acc) {
  float t[kLeafLanes / 2];
  for (int j = 0; j < kLeafLanes / 2; ++j) t[j] = acc[j] + acc[j + kLeafLanes / 2];
  for (int w = kLeafLanes / 4; w >= 1; w /= 2) {
    for (int j = 0; j < w; ++j) t[j] = t[j] + t[j + w];
  }
  return t[0];
}

// Σ x[0..n) for n ≤ kPairwiseLeaf, in 16 explicit lanes, so that every ISA
// adds in the same order and gets the same bits. Inline so that a row loop
// compiled per ISA (LayerNorm, Softmax over short rows) sums without a call:
// the call through the ifunc and back cost as much as a 64-float row.
template <typename T>
inline float LeafSum(const T* __restrict x, int64_t n) {
  float acc[kLeafLanes] = {};
  int64_t i = 0;
  for (; i + kLeafLanes <= n; i += kLeafLanes) {
    for (int j = 0; j < kLeafLanes; ++j) acc[j] += Load(x[i + j]);
  }
  float s = LeafLaneTotal(acc);
  for (; i < n; ++i) s += Load(x[i]);
  return s;
}

// Σ x[i]·w[i] for n ≤ kPairwiseLeaf, as LeafSum.
inline float LeafDot(const float* __restrict x, const float* __restrict w, int64_t n) {
  float acc[kLeafLanes] = {};
  int64_t i = 0;
  for (; i + kLeafLanes <= n; i += kLeafLanes) {
    for (int j = 0; j < kLeafLanes; ++j) acc[j] += x[i + j] * w[i + j];
  }
  float s = LeafLaneTotal(acc);
  for (; i < n; ++i) s += x[i] * w[i];
  return s;
}

// PairwiseSum / PairwiseDot, inline for short rows.
inline float RowSum(const float* __restrict x, int64_t n) {
  return n <= kPairwiseLeaf ? LeafSum(x, n) : PairwiseSum(x, n);
}

// Σ x[i]·w[i] for i in [0, n), same order and error bound as PairwiseSum.
float PairwiseDot(const float* __restrict x, const float* __restrict w, int64_t n);

inline float RowDot(const float* __restrict x, const float* __restrict w, int64_t n) {
  return n <= kPairwiseLeaf ? LeafDot(x, w, n) : PairwiseDot(x, w, n);
}

// y[j] += Σ_r x[r·cols + j] for j < cols: the column sums of a row-major
// [rows, cols] block, summed pairwise over blocks of rows (same error bound
// as PairwiseSum), a block of columns at a time.
void AddColumnSums(const float* __restrict x, int64_t rows, int64_t cols, float* __restrict y);
void AddColumnSums(const bf16_t* __restrict x, int64_t rows, int64_t cols, float* __restrict y);
// The same for `cols` columns of rows `stride` elements apart: each column
// is summed as it is in the whole block, whatever columns surround it, so
// a block's columns may be summed in slices (one per part of a team).
void AddColumnSums(const float* __restrict x, int64_t rows, int64_t cols, int64_t stride, float* __restrict y);
void AddColumnSums(const bf16_t* __restrict x, int64_t rows, int64_t cols, int64_t stride, float* __restrict y);

// AddColumnSums in two halves, for a kernel that computes its rows as it
// goes (LayerNormGrad) instead of storing them first. Rows are summed into
// leaves of kColumnLeafRows consecutive rows, each leaf[j] = 0 + row₀[j] +
// row₁[j] + … in row order; AddColumnLeaves adds the leaves' pairwise tree
// to y. Together they give AddColumnSums's bits.
inline constexpr int64_t kColumnLeafRows = 128;
inline int64_t ColumnLeafCount(int64_t rows) { return (rows + kColumnLeafRows - 1) / kColumnLeafRows; }
// leaves: ColumnLeafCount(rows) rows of cols floats, combined in place.
void AddColumnLeaves(float* __restrict leaves, int64_t rows, int64_t cols, float* __restrict y);

}  // namespace sinkrt::device
