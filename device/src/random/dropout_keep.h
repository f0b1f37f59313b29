// Dropout's keep bits in bulk (docs/guide/dropout.md, "Cost"): the mask of
// dropout_mask.h, 64 elements per 64-bit word, in groups of 128 elements
// (8 Philox blocks, two words), computed with 4 or 8 Philox counters at
// once in AVX2 or AVX-512 registers and their bytes compared 32 or 64 at a
// time; the rare elements whose byte equals the threshold's high byte are
// then refined one by one.
//
// Every path computes DropoutKeeps (dropout_mask.h) bit for bit: the
// vector paths run the same 10 rounds on the same counters, only several
// at a time. The path is picked at run time from the CPU's features
// (DropoutKeepIsaBest), so one binary runs on any x86-64 and draws the same
// masks on each; test/device/random/dropout_keep_test.cc checks every path
// this CPU can run against the scalar definition.
#pragma once

#include <cstdint>

#include "device/src/random/dropout_mask.h"

namespace sinkrt::device {

enum class DropoutKeepIsa { kScalar, kAvx2, kAvx512 };

// The best path this CPU runs (AVX-512F+BW / AVX2 / scalar).
DropoutKeepIsa DropoutKeepIsaBest();

// Whether this CPU can run `isa`.
bool DropoutKeepIsaSupported(DropoutKeepIsa isa);

// Elements per group.
inline constexpr uint64_t kDropoutGroupElements = 128;

// words[j] bit e = DropoutKeeps(key, threshold, 128 · first_group + 64 · j
// + e), for j in [0, 2 · groups): the keep bits of global elements
// 128 · first_group onwards, 64 per word. `isa` must be supported.
void DropoutKeepWords(DropoutKeepIsa isa, const DropoutKey& key, uint32_t threshold, uint64_t first_group,
                      int64_t groups, uint64_t* words);

}  // namespace sinkrt::device
