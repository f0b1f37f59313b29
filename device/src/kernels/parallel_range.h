// Splitting a kernel's work across the worker team (team/worker_team.h).
//
// Parts are equal slices fixed by the sizes alone, so a step computes the
// same bits every time; an element-wise kernel computes every element as
// it would unsplit, so its results do not depend on the split at all.
#pragma once

#include <algorithm>
#include <cstdint>

#include "device/src/kernels/kernel.h"
#include "device/src/team/worker_team.h"

namespace sinkrt::device {

// Where part p of `parts` equal slices of [0, extent) begins: boundaries
// are multiples of `align`, the last part takes the rest.
inline int64_t PartBegin(int64_t extent, int parts, int p, int64_t align) {
  if (p >= parts) return extent;
  return std::min(extent, extent / align * p / parts * align);
}

// Element-wise work below this many elements per part stays on one thread:
// a part should outlast the hand-off to a worker.
inline constexpr int64_t kMinPartElements = 8192;

// fn(begin, end) over [0, n), split across ctx.team when each part gets at
// least `min_part` elements. Boundaries are multiples of 16 elements (a
// 64-byte line of f32), so two parts never write one cache line.
template <typename F>
void ForRange(RunContext& ctx, int64_t n, F&& fn, int64_t min_part = kMinPartElements) {
  const int team = ctx.team ? ctx.team->size() : 1;
  const int parts = static_cast<int>(std::min<int64_t>(team, n / std::max<int64_t>(min_part, 1)));
  if (parts <= 1) {
    fn(int64_t{0}, n);
    return;
  }
  ctx.team->Run(parts, [&](int p) { fn(PartBegin(n, parts, p, 16), PartBegin(n, parts, p + 1, 16)); });
}

// ForRange's min_part for a loop over rows of `row_elements`: as many rows
// as make kMinPartElements.
inline int64_t RowsPerPart(int64_t row_elements) {
  return std::max<int64_t>(1, kMinPartElements / std::max<int64_t>(row_elements, 1));
}

}  // namespace sinkrt::device
