// The dropout mask (docs/guide/dropout.md): which elements a Dropout op
// keeps, as a pure function of (seed, step, op id, the element's index in
// the global tensor).
//
// Element g of the global tensor (row-major index) reads word g mod 4 of
// Philox4x32-10 block g / 4, whose counter is (block low, block high,
// op_id, step low) and whose key is (seed low, seed high ^ step high). It is
// kept when that word is at least floor(p · 2^32), so P(keep) = 1 − p to
// within 2^-32. Nothing depends on which rank, micro-batch or sink computes
// the element, so every split of the work draws the mask one device would.
#pragma once

#include <cstdint>

#include "device/src/random/philox.h"

namespace sinkrt::device {

struct DropoutKey {
  uint64_t seed = 0;
  uint64_t step = 0;
  uint32_t op_id = 0;
};

// The 32-bit words below which an element is dropped: floor(p · 2^32),
// p in [0, 1).
inline uint32_t DropoutThreshold(float p) { return static_cast<uint32_t>(static_cast<double>(p) * 4294967296.0); }

// The random words of elements 4·block .. 4·block + 3.
inline PhiloxCounter DropoutBlock(const DropoutKey& k, uint64_t block) {
  return Philox4x32(
      {static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), k.op_id, static_cast<uint32_t>(k.step)},
      {static_cast<uint32_t>(k.seed), static_cast<uint32_t>(k.seed >> 32) ^ static_cast<uint32_t>(k.step >> 32)});
}

// Whether global element `g` is kept under drop probability threshold `t`.
inline bool DropoutKeeps(const DropoutKey& k, uint32_t t, uint64_t g) { return DropoutBlock(k, g >> 2)[g & 3] >= t; }

}  // namespace sinkrt::device
