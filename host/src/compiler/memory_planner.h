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
// Cost: each placement scans every placed buffer for a time overlap, so one
// ordering is O(N²) in the number of transient buffers (plus a sort of the
// k overlapping ones, k usually small); ten orderings at most. Scratch memory
// is a few vectors of N entries. A zero-byte buffer gets the offset of the
// transient region's start and takes part in no overlap.
#pragma once

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
};

struct MemoryPlan {
  std::vector<BufferLifetime> buffers;  // the requests, in the caller's order
  std::vector<uint64_t> offsets;        // one per buffer
  uint64_t alignment = 64;
  uint64_t arena_bytes = 0;             // a multiple of alignment
  uint64_t persistent_bytes = 0;        // where the transient region starts
  uint64_t liveness_lower_bound = 0;
  std::string strategy;                 // which ordering won, for reports and tests
};

// Plans `buffers` with every offset a multiple of `alignment` (a power of
// two). Fails on a bad alignment, an interval with first_use > last_use, or a
// total that would overflow 64 bits; messages name the buffer index.
Result<MemoryPlan> PlanMemory(std::vector<BufferLifetime> buffers, uint64_t alignment);

// Persistent bytes plus the peak of simultaneously live transient bytes, each
// size rounded up to `alignment`.
uint64_t LivenessLowerBound(std::span<const BufferLifetime> buffers, uint64_t alignment);

// True if two buffers that are live at the same time share a byte (a
// persistent buffer is live at every time). O(N²); for tests and debugging,
// like TFLM's DoAnyBuffersOverlap().
bool AnyLiveOverlap(const MemoryPlan& plan);

}  // namespace sinkrt::host::compiler
