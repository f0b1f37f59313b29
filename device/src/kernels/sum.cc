#include "sum.h"

#include <algorithm>

namespace sinkrt::device {
namespace {

constexpr int64_t kLanes = 16;
constexpr int64_t kLeaf = 256;  // elements summed by one lane block

inline float LaneTotal(const float* acc) {
  // Tree over the lanes: same order every call.
  float t[kLanes / 2];
  for (int j = 0; j < kLanes / 2; ++j) t[j] = acc[j] + acc[j + kLanes / 2];
  for (int w = kLanes / 4; w >= 1; w /= 2) {
    for (int j = 0; j < w; ++j) t[j] = t[j] + t[j + w];
  }
  return t[0];
}

float LeafSum(const float* __restrict x, int64_t n) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) acc[j] += x[i + j];
  }
  float s = LaneTotal(acc);
  for (; i < n; ++i) s += x[i];
  return s;
}

float LeafDot(const float* __restrict x, const float* __restrict w, int64_t n) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) acc[j] += x[i + j] * w[i + j];
  }
  float s = LaneTotal(acc);
  for (; i < n; ++i) s += x[i] * w[i];
  return s;
}

// Split point: a multiple of the leaf so leaves stay full.
inline int64_t Half(int64_t n) { return ((n / 2 + kLeaf - 1) / kLeaf) * kLeaf; }

}  // namespace

float PairwiseSum(const float* __restrict x, int64_t n) {
  if (n <= kLeaf) return LeafSum(x, n);
  const int64_t h = Half(n);
  return PairwiseSum(x, h) + PairwiseSum(x + h, n - h);
}

float PairwiseDot(const float* __restrict x, const float* __restrict w, int64_t n) {
  if (n <= kLeaf) return LeafDot(x, w, n);
  const int64_t h = Half(n);
  return PairwiseDot(x, w, h) + PairwiseDot(x + h, w + h, n - h);
}

void AddColumnSums(const float* __restrict x, int64_t rows, int64_t cols, float* __restrict y) {
  constexpr int64_t kCols = 64;   // a column block stays in registers / L1
  constexpr int64_t kRows = 128;  // rows summed before folding into the total
  for (int64_t c0 = 0; c0 < cols; c0 += kCols) {
    const int64_t w = std::min(kCols, cols - c0);
    float total[kCols] = {};
    for (int64_t r0 = 0; r0 < rows; r0 += kRows) {
      const int64_t r1 = std::min(rows, r0 + kRows);
      float part[kCols] = {};
      for (int64_t r = r0; r < r1; ++r) {
        const float* row = x + r * cols + c0;
        for (int64_t j = 0; j < w; ++j) part[j] += row[j];
      }
      for (int64_t j = 0; j < w; ++j) total[j] += part[j];
    }
    for (int64_t j = 0; j < w; ++j) y[c0 + j] += total[j];
  }
}

}  // namespace sinkrt::device
