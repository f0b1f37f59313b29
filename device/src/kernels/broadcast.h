// NumPy broadcasting and its inverse (summing back to a shape), planned at
// load so that run() is a few flat loops.
//
// Both plans first align shapes to the right, then drop size-1 output dims
// and merge neighbouring dims that every operand walks contiguously (or all
// broadcast the same way). [N,C,H,W] + [1,C,1,1] becomes [N, C, H·W] with
// the bias strides (0, 1, 0); a row-vector bias [M,N] + [N] becomes [M, N]
// with strides (0, 1). After merging, every operand's innermost stride is 0
// or 1, so the inner loop is contiguous or a scalar, and vectorises.
#pragma once

#include <cstdint>
#include <span>

#include "device/src/kernels/check.h"
#include "device/src/kernels/parallel_range.h"
#include "device/src/kernels/storage.h"
#include "device/src/kernels/sum.h"

namespace sinkrt::device {

// y = f(a, b) (or y = f(a)) with a and b broadcast to y's shape.
struct BroadcastPlan {
  enum class Kind : uint8_t {
    kSame,     // every operand has y's numel: one flat loop
    kScalarA,  // a is one element, b is y-shaped
    kScalarB,  // b is one element, a is y-shaped
    kGeneral,  // odometer over outer dims, contiguous-or-scalar inner loop
  };
  Kind kind = Kind::kSame;
  int rank = 1;  // merged
  int64_t numel = 0;
  int64_t dims[kMaxRank] = {};
  int64_t strides[2][kMaxRank] = {};  // element strides of a, b; 0 = broadcast
};

// The shape NumPy broadcasting gives `a` and `b`, or false if incompatible.
bool BroadcastShapes(std::span<const int64_t> a, std::span<const int64_t> b, Shape* out);

// Plans y = f(operands...) for one or two operands whose shapes broadcast to
// exactly `y` (the caller has checked that).
BroadcastPlan PlanBroadcast(std::span<const int64_t> y, std::span<const int64_t> a, std::span<const int64_t> b);
BroadcastPlan PlanBroadcast(std::span<const int64_t> y, std::span<const int64_t> a);

// RunBroadcast's work comes in units, which a caller may split into ranges
// (parts of a worker team): y's elements for a flat plan, y's rows of the
// innermost merged dim for a general one. Every y element is computed the
// same way whatever the range, so a split changes no bit.
inline int64_t BroadcastUnitElements(const BroadcastPlan& p) {
  return p.kind == BroadcastPlan::Kind::kGeneral ? p.dims[p.rank - 1] : 1;
}
inline int64_t BroadcastUnits(const BroadcastPlan& p) {
  const int64_t per = BroadcastUnitElements(p);
  return per == 0 ? 0 : p.numel / per;
}

// fn(begin, end) over a plan's units, split across ctx.team as ForRange
// splits rows: each part at least kMinPartElements elements.
template <typename F>
void ForBroadcastParts(RunContext& ctx, const BroadcastPlan& p, F&& fn) {
  ForRange(ctx, BroadcastUnits(p), fn, RowsPerPart(BroadcastUnitElements(p)));
}

// Runs y[i] = f(a[ia], b[ib]) over units [begin, end) of a plan. The
// pointers may alias y only when that operand is y-shaped (each y[i] is
// written after its inputs are read).
// T is the storage type (storage.h): f computes in float either way.
// Always inlined, so that a caller compiled per ISA (the bf16 loops) gets
// the loops built for its ISA instead of a call to one shared copy.
template <typename T, typename F>
[[gnu::always_inline]] inline void RunBroadcast(const BroadcastPlan& p, const T* a, const T* b, T* y, F f,
                                                int64_t begin, int64_t end) {
  using Kind = BroadcastPlan::Kind;
  if (p.kind == Kind::kSame) {
    for (int64_t i = begin; i < end; ++i) y[i] = Store<T>(f(Load(a[i]), Load(b[i])));
    return;
  }
  if (p.kind == Kind::kScalarA) {
    const float s = Load(a[0]);
    for (int64_t i = begin; i < end; ++i) y[i] = Store<T>(f(s, Load(b[i])));
    return;
  }
  if (p.kind == Kind::kScalarB) {
    const float s = Load(b[0]);
    for (int64_t i = begin; i < end; ++i) y[i] = Store<T>(f(Load(a[i]), s));
    return;
  }
  const int last = p.rank - 1;
  const int64_t inner = p.dims[last];
  const int64_t sa = p.strides[0][last], sb = p.strides[1][last];
  // The odometer over the outer dims, started at row `begin`.
  int64_t idx[kMaxRank] = {};
  int64_t oa = 0, ob = 0;
  for (int64_t d = last - 1, r = begin; d >= 0; --d) {
    idx[d] = r % p.dims[d];
    r /= p.dims[d];
    oa += idx[d] * p.strides[0][d];
    ob += idx[d] * p.strides[1][d];
  }
  for (int64_t r = begin; r < end; ++r) {
    const T* pa = a + oa;
    const T* pb = b + ob;
    T* py = y + r * inner;
    if (sa != 0 && sb != 0) {
      for (int64_t i = 0; i < inner; ++i) py[i] = Store<T>(f(Load(pa[i]), Load(pb[i])));
    } else if (sa != 0) {
      const float s = Load(pb[0]);
      for (int64_t i = 0; i < inner; ++i) py[i] = Store<T>(f(Load(pa[i]), s));
    } else if (sb != 0) {
      const float s = Load(pa[0]);
      for (int64_t i = 0; i < inner; ++i) py[i] = Store<T>(f(s, Load(pb[i])));
    } else {
      const T v = Store<T>(f(Load(pa[0]), Load(pb[0])));
      for (int64_t i = 0; i < inner; ++i) py[i] = v;
    }
    // Odometer over the outer dims, keeping operand offsets incremental.
    for (int d = last - 1; d >= 0; --d) {
      oa += p.strides[0][d];
      ob += p.strides[1][d];
      if (++idx[d] < p.dims[d]) break;
      idx[d] = 0;
      oa -= p.strides[0][d] * p.dims[d];
      ob -= p.strides[1][d] * p.dims[d];
    }
  }
}

// y = scale · Σ x over the dims of x that y keeps as 1 (or drops).
struct ReducePlan {
  int rank = 1;  // merged; reduced and kept dims alternate
  int64_t x_numel = 0;
  int64_t y_numel = 0;
  int64_t dims[kMaxRank] = {};
  bool reduced[kMaxRank] = {};
  int64_t y_strides[kMaxRank] = {};  // 0 on reduced dims
  float scale = 1.0f;
};

// `reduced_dims[i]` says whether dim i of x is summed over.
ReducePlan PlanReduce(std::span<const int64_t> x, std::span<const bool> reduced_dims, float scale);
// Plans the sum of x down to `y`, a shape that broadcasts to x (SumToShape).
ReducePlan PlanReduceTo(std::span<const int64_t> x, std::span<const int64_t> y, float scale);

// Deterministic: a fixed summation order (pairwise along contiguous runs,
// blocked across rows), independent of anything but the plan and the data.
void RunReduce(const ReducePlan& p, const float* __restrict x, float* __restrict y);
// bf16: sums in f32, in the float version's order, into `acc`
// (ReduceScratchFloats(p) floats of scratch), then rounds each sum once into
// y; so y is the f32 result on the widened x, rounded to bf16.
void RunReduce(const ReducePlan& p, const bf16_t* __restrict x, bf16_t* __restrict y, float* __restrict acc);
inline int64_t ReduceScratchFloats(const ReducePlan& p) { return p.y_numel; }

// The columns of a plan that sums the columns of one [R, C] block (a bias
// gradient [N, C] -> [C], SumToShape [B, T, D] -> [T, D]): every y element
// is one column's sum, so the columns split across a team, each summed as
// RunReduce sums it. 0 for any other plan (run whole).
inline int64_t ReduceColumns(const ReducePlan& p) {
  return p.x_numel > 0 && p.rank == 2 && p.reduced[0] && !p.reduced[1] ? p.dims[1] : 0;
}
// RunReduce of columns [begin, end) of a ReduceColumns plan: RunReduce's
// bits for those y elements (`acc`: the bf16 form's scratch, whole).
void RunReduceColumns(const ReducePlan& p, const float* __restrict x, float* __restrict y, int64_t begin, int64_t end);
void RunReduceColumns(const ReducePlan& p, const bf16_t* __restrict x, bf16_t* __restrict y, float* __restrict acc,
                      int64_t begin, int64_t end);

}  // namespace sinkrt::device
