// Float summation with bounded error and a fixed order.
//
// Results must be bitwise reproducible run to run and accurate for long
// reductions (a bias gradient over a big batch), without double or threads:
// sums are pairwise over blocks whose insides use 16 independent lanes, so
// the error grows with log(n) and the inner loop vectorises.
#pragma once

#include <cstdint>

namespace sinkrt::device {

// Σ x[0..n).
float PairwiseSum(const float* __restrict x, int64_t n);

// Σ x[i]·w[i] for i in [0, n), same order and error bound as PairwiseSum.
float PairwiseDot(const float* __restrict x, const float* __restrict w, int64_t n);

// y[j] += Σ_r x[r·cols + j] for j < cols: the column sums of a row-major
// [rows, cols] block, summed pairwise over blocks of rows (same error bound
// as PairwiseSum), a block of columns at a time.
void AddColumnSums(const float* __restrict x, int64_t rows, int64_t cols, float* __restrict y);

}  // namespace sinkrt::device
