// The dropout mask (docs/guide/dropout.md): which elements a Dropout op
// keeps, as a pure function of (seed, step, op id, the element's index in
// the global tensor).
//
// Element g of the global tensor (row-major index) reads a 16-bit half of
// Philox4x32-10 block g / 8, whose counter is (block low, block high,
// op_id, step low) and whose key is (seed low, seed high ^ step high): the
// low half (g even) or the high half (g odd) of 32-bit word (g / 2) mod 4.
// It is kept when that half is at least floor(p · 2^16), so P(drop) =
// floor(p · 65536) / 65536: p quantised down to a multiple of 1/65536
// (0.1 draws 0.099991). Sixteen bits per element rather than 32 halve the
// generator's work, most of dropout's cost. Nothing depends on which rank,
// micro-batch or sink computes the element, so every split of the work
// draws the mask one device would.
#pragma once

#include <cstdint>

#include "device/src/random/philox.h"

namespace sinkrt::device {

struct DropoutKey {
  uint64_t seed = 0;
  uint64_t step = 0;
  uint32_t op_id = 0;
};

// Elements per Philox block: 4 words of 32 bits, 16 bits an element.
inline constexpr uint64_t kDropoutElementsPerBlock = 8;

// The 16-bit halves below which an element is dropped: floor(p · 2^16),
// p in [0, 1).
inline uint32_t DropoutThreshold(float p) { return static_cast<uint32_t>(static_cast<double>(p) * 65536.0); }

// The random words of elements 8·block .. 8·block + 7.
inline PhiloxCounter DropoutBlock(const DropoutKey& k, uint64_t block) {
  return Philox4x32(
      {static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), k.op_id, static_cast<uint32_t>(k.step)},
      {static_cast<uint32_t>(k.seed), static_cast<uint32_t>(k.seed >> 32) ^ static_cast<uint32_t>(k.step >> 32)});
}

// Whether global element `g` is kept under drop probability threshold `t`.
inline bool DropoutKeeps(const DropoutKey& k, uint32_t t, uint64_t g) {
  const uint32_t word = DropoutBlock(k, g >> 3)[(g >> 1) & 3];
  return ((g & 1) ? word >> 16 : word & 0xFFFFu) >= t;
}

}  // namespace sinkrt::device
