#include "device/src/kernels/broadcast.h"

#include <algorithm>
#include <cstring>

namespace sinkrt::device {

bool BroadcastShapes(std::span<const int64_t> a, std::span<const int64_t> b, Shape* out) {
  const size_t r = std::max(a.size(), b.size());
  out->assign(r, 1);
  for (size_t i = 0; i < r; ++i) {
    const int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    const int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da != db && da != 1 && db != 1) return false;
    (*out)[i] = da == 1 ? db : da;
  }
  return true;
}

namespace {

// Row-major element strides of `s` aligned right to rank r; 0 where the
// operand has (or is padded with) a size-1 dim.
void AlignedStrides(std::span<const int64_t> s, size_t r, int64_t* out) {
  int64_t stride = 1;
  for (size_t k = 0; k < r; ++k) {
    const size_t i = r - 1 - k;
    const size_t off = r - s.size();
    const int64_t d = i < off ? 1 : s[i - off];
    out[i] = d == 1 ? 0 : stride;
    stride *= d;
  }
}

}  // namespace

BroadcastPlan PlanBroadcast(std::span<const int64_t> y, std::span<const int64_t> a, std::span<const int64_t> b) {
  BroadcastPlan p;
  const size_t r = y.size();
  int64_t sa[kMaxRank], sb[kMaxRank];
  AlignedStrides(a, r, sa);
  AlignedStrides(b, r, sb);
  p.numel = NumElements(y);
  p.rank = 0;
  for (size_t i = 0; i < r; ++i) {
    if (y[i] == 1) continue;
    if (p.rank > 0 && p.strides[0][p.rank - 1] == sa[i] * y[i] && p.strides[1][p.rank - 1] == sb[i] * y[i]) {
      p.dims[p.rank - 1] *= y[i];
      p.strides[0][p.rank - 1] = sa[i];
      p.strides[1][p.rank - 1] = sb[i];
      continue;
    }
    p.dims[p.rank] = y[i];
    p.strides[0][p.rank] = sa[i];
    p.strides[1][p.rank] = sb[i];
    ++p.rank;
  }
  if (p.rank == 0) {
    p.rank = 1;
    p.dims[0] = 1;
  }
  const int64_t na = NumElements(a), nb = NumElements(b);
  using Kind = BroadcastPlan::Kind;
  if (na == p.numel && nb == p.numel) {
    p.kind = Kind::kSame;
  } else if (na == 1 && nb == p.numel) {
    p.kind = Kind::kScalarA;
  } else if (nb == 1 && na == p.numel) {
    p.kind = Kind::kScalarB;
  } else {
    p.kind = Kind::kGeneral;
  }
  return p;
}

BroadcastPlan PlanBroadcast(std::span<const int64_t> y, std::span<const int64_t> a) { return PlanBroadcast(y, a, a); }

ReducePlan PlanReduce(std::span<const int64_t> x, std::span<const bool> reduced_dims, float scale) {
  ReducePlan p;
  p.scale = scale;
  p.x_numel = NumElements(x);
  p.rank = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i] == 1) continue;  // summing over one element changes nothing
    if (p.rank > 0 && p.reduced[p.rank - 1] == reduced_dims[i]) {
      p.dims[p.rank - 1] *= x[i];
      continue;
    }
    p.dims[p.rank] = x[i];
    p.reduced[p.rank] = reduced_dims[i];
    ++p.rank;
  }
  if (p.rank == 0) {
    p.rank = 1;
    p.dims[0] = 1;
    p.reduced[0] = false;
  }
  int64_t stride = 1;
  for (int i = p.rank - 1; i >= 0; --i) {
    p.y_strides[i] = p.reduced[i] ? 0 : stride;
    if (!p.reduced[i]) stride *= p.dims[i];
  }
  p.y_numel = stride;
  return p;
}

ReducePlan PlanReduceTo(std::span<const int64_t> x, std::span<const int64_t> y, float scale) {
  bool reduced[kMaxRank] = {};
  const size_t off = x.size() - y.size();
  for (size_t i = 0; i < x.size(); ++i) {
    const int64_t yd = i < off ? 1 : y[i - off];
    reduced[i] = yd == 1 && x[i] != 1;
  }
  return PlanReduce(x, std::span<const bool>(reduced, x.size()), scale);
}

namespace {

// The summing part of RunReduce into f32 sums y; x as stored.
template <typename T>
void ReduceInto(const ReducePlan& p, const T* __restrict x, float* __restrict y) {
  std::memset(y, 0, static_cast<size_t>(p.y_numel) * sizeof(float));
  if (p.x_numel == 0) return;
  const int last = p.rank - 1;
  // Outer dims walked by an odometer: all but the innermost (contiguous
  // reduction) or all but the innermost two (column sums of [R, L] blocks).
  const int outer = p.reduced[last] ? last : last - 1;
  const int64_t block = p.reduced[last] ? p.dims[last] : p.dims[last] * p.dims[last - 1];
  const int64_t blocks = p.x_numel / block;
  int64_t idx[kMaxRank] = {};
  int64_t off = 0;
  for (int64_t q = 0; q < blocks; ++q) {
    const T* xb = x + q * block;
    if (p.reduced[last]) {
      y[off] += PairwiseSum(xb, block);
    } else {
      AddColumnSums(xb, p.dims[last - 1], p.dims[last], y + off);
    }
    for (int d = outer - 1; d >= 0; --d) {
      off += p.y_strides[d];
      if (++idx[d] < p.dims[d]) break;
      idx[d] = 0;
      off -= p.y_strides[d] * p.dims[d];
    }
  }
  if (p.scale != 1.0f) {
    for (int64_t i = 0; i < p.y_numel; ++i) y[i] *= p.scale;
  }
}

}  // namespace

void RunReduce(const ReducePlan& p, const float* __restrict x, float* __restrict y) {
  if (p.rank == 1 && !p.reduced[0]) {
    for (int64_t i = 0; i < p.y_numel; ++i) y[i] = p.scale * x[i];
    return;
  }
  ReduceInto(p, x, y);
}

void RunReduce(const ReducePlan& p, const bf16_t* __restrict x, bf16_t* __restrict y, float* __restrict acc) {
  if (p.rank == 1 && !p.reduced[0]) {
    for (int64_t i = 0; i < p.y_numel; ++i) y[i] = FloatToBf16(p.scale * Bf16ToFloat(x[i]));
    return;
  }
  ReduceInto(p, x, acc);
  Narrow(acc, y, p.y_numel);
}

namespace {

// ReduceInto's steps for one block's columns [begin, end) into f32 sums y.
template <typename T>
void ReduceColumnsInto(const ReducePlan& p, const T* __restrict x, float* __restrict y, int64_t begin, int64_t end) {
  std::fill(y + begin, y + end, 0.0f);
  AddColumnSums(x + begin, p.dims[0], end - begin, p.dims[1], y + begin);
  if (p.scale != 1.0f) {
    for (int64_t i = begin; i < end; ++i) y[i] *= p.scale;
  }
}

}  // namespace

void RunReduceColumns(const ReducePlan& p, const float* __restrict x, float* __restrict y, int64_t begin, int64_t end) {
  ReduceColumnsInto(p, x, y, begin, end);
}

void RunReduceColumns(const ReducePlan& p, const bf16_t* __restrict x, bf16_t* __restrict y, float* __restrict acc,
                      int64_t begin, int64_t end) {
  ReduceColumnsInto(p, x, acc, begin, end);
  Narrow(acc + begin, y + begin, end - begin);
}

}  // namespace sinkrt::device
