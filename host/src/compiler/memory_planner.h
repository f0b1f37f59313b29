// Static memory planning: one offset per buffer inside one arena.
//
// The device allocates a single arena at load and never allocates again, so
// the compiler must decide, before anything runs, where every buffer lives.
// This is a pure function over (bytes, first_use, last_use) intervals; it
// knows nothing about graphs, tasks or programs. The caller puts all its
// programs on one timeline (train_step's tasks, then eval_step's), so buffers
// of two programs that never run at once never conflict in time and share the
// same bytes for free.
//
// The plan, step by step:
//
//  1. Persistent buffers (parameters, gradients, optimizer state, constants,
//     reported outputs) are live in every program and across sinks, so no
//     other buffer may ever reuse their bytes. They are packed back to back
//     from offset 0 in the caller's order, each at an aligned offset; that
//     region ends at `persistent_bytes`. The caller's order is kept so that,
//     for instance, all gradients sit contiguously (a fused AllReduce works on
//     them in place).
//
//  2. Transient buffers are placed in [persistent_bytes, arena) with TFLite
//     Micro's GreedyMemoryPlanner idea: take the buffers one at a time in some
//     order; for each, look only at the already placed buffers whose lifetimes
//     intersect its own, walk them in offset order, and put the new buffer in
//     the first gap between them that holds its (aligned) size, or after the
//     highest of them if no gap does. Every offset and every size is rounded
//     up to the alignment, so a placed buffer never breaks alignment of the
//     next one.
//
//  3. The result depends on the order and on which fitting gap is taken, and
//     no ordering is best for every graph (optimal placement is NP-complete).
//     So the planner tries a handful of orderings — largest first (TFLM's),
//     largest first breaking ties by earliest use, largest "area"
//     (bytes × lifetime) first, longest lifetime first, and earliest first
//     use (a linear scan) — each with first-fit and best-fit gap choice, and
//     keeps the smallest arena (the first one tried on a tie, so the result is
//     deterministic). It stops early once a plan reaches the lower bound.
//
//  4. The liveness lower bound is what no placement can beat: persistent
//     bytes plus the maximum, over time, of the sum of the (aligned) sizes of
//     the transient buffers live at that time. Buffers of different programs
//     are never live at the same time on the caller's timeline, so this is
//     the maximum over programs as well. The arena is rounded up to the
//     alignment, so arena_bytes >= liveness_lower_bound always holds.
//
// Views (compiler/views.h): a buffer with `view_of` set holds no bytes of its
// own; it is [offset(view_of) + view_offset, + bytes) of its root, which is
// not a view itself. The planner places the root only, over the union of the
// lifetimes of the root and all its views (one group, one interval), and the
// lower bound counts the group's bytes once, as the root's. A view has its
// root's persistence, an offset that keeps alignment and fits in the root.
//
// Cost: each placement scans every placed buffer for a time overlap, so one
// ordering is O(N²) in the number of transient buffers (plus a sort of the
// k overlapping ones); ten orderings at most. A deep network makes k grow
// with N too (every activation kept for backward is live at the turn from
// forward to backward), so past kExhaustiveTransients transient buffers
// only the earliest-first-use order is tried, swept over time: the placed
// buffers still live are kept with the gaps between them, which makes a
// placement O(log N) plus the gaps first fit walks, and the same choice
// as the scan would make. Compile time stays linear in depth
// (MemoryPlan::placement_work counts the steps; the sweep keeps a
// 10000-layer MLP within 10 % of the lower bound). A zero-byte buffer gets
// the offset of the transient region's start and takes part in no overlap.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "sinkrt/runtime/status.h"

namespace sinkrt::host::compiler {

struct BufferLifetime {
  uint64_t bytes = 0;
  // Inclusive range of the caller's timeline during which the buffer holds
  // data that is still needed. Ignored for persistent buffers.
  int32_t first_use = 0;
  int32_t last_use = 0;
  bool persistent = false;
  // A view of buffer `view_of` (an index into the same request list) at
  // byte `view_offset` of it; -1: a buffer of its own.
  int64_t view_of = -1;
  uint64_t view_offset = 0;
};

struct MemoryPlan {
  // The requests, in the caller's order, each view's group resolved: a root
  // and its views all carry the union of their lifetimes.
  std::vector<BufferLifetime> buffers;
  std::vector<uint64_t> offsets;  // one per buffer
  uint64_t alignment = 64;
  uint64_t arena_bytes = 0;       // a multiple of alignment
  uint64_t persistent_bytes = 0;  // where the transient region starts
  uint64_t liveness_lower_bound = 0;
  std::string strategy;  // which ordering won, for reports and tests
  // Placed buffers and gaps looked at, over every ordering tried: what
  // tests count to check that planning grows linearly (never by timing).
  uint64_t placement_work = 0;
};

// Above this many transient buffers, PlanMemory tries only the swept
// first-use order (see "Cost" above).
inline constexpr size_t kExhaustiveTransients = 2048;

// Plans `buffers` with every offset a multiple of `alignment` (a power of
// two). Fails on a bad alignment, an interval with first_use > last_use, a
// view that breaks the rules above, or a total that would overflow 64 bits;
// messages name the buffer index. `exhaustive_limit`: see
// kExhaustiveTransients (tests lower it to reach the sweep with few buffers).
Result<MemoryPlan> PlanMemory(std::vector<BufferLifetime> buffers, uint64_t alignment,
                              size_t exhaustive_limit = kExhaustiveTransients);

// Persistent bytes plus the peak of simultaneously live transient bytes, each
// size rounded up to `alignment`; a view group counts once (its root's bytes
// over the union of its lifetimes).
uint64_t LivenessLowerBound(std::span<const BufferLifetime> buffers, uint64_t alignment);

// True if two buffers that are live at the same time share a byte (a
// persistent buffer is live at every time); members of one view group share
// bytes by design and are not compared. O(N²); for tests and debugging,
// like TFLM's DoAnyBuffersOverlap().
bool AnyLiveOverlap(const MemoryPlan& plan);

}  // namespace sinkrt::host::compiler
