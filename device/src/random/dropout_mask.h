// The dropout mask (docs/guide/dropout.md): which elements a Dropout op
// keeps, as a pure function of (seed, step, op id, the element's index in
// the global tensor).
//
// Element g of the global tensor (row-major index) reads byte g mod 4 of
// 32-bit word (g / 4) mod 4 of Philox4x32-10 block g / 16, whose counter is
// (block low, block high, op_id, step low) and whose key is (seed low,
// seed high ^ step high). With t = floor(p · 2^16) = 256·t_hi + t_lo, the
// element is kept when its byte is above t_hi, dropped when below, and when
// equal (one time in 256) decided by a second byte: the same byte of the
// block whose counter has bit 31 of its second word set (the block's
// "refinement" twin), kept when that byte is at least t_lo. So P(drop) =
// t / 65536 exactly, as if 16 bits were compared: p quantised down to a
// multiple of 1/65536 (0.1 draws 0.099991), while a Philox block serves 16
// elements. Nothing depends on which rank, micro-batch or sink computes the
// element, so every split of the work draws the mask one device would.
#pragma once

#include <cstdint>

#include "device/src/random/philox.h"

namespace sinkrt::device {

struct DropoutKey {
  uint64_t seed = 0;
  uint64_t step = 0;
  uint32_t op_id = 0;
};

// Elements per Philox block: 4 words of 4 bytes, a byte an element.
inline constexpr uint64_t kDropoutElementsPerBlock = 16;

// floor(p · 2^16), p in [0, 1): an element is dropped with probability
// DropoutThreshold(p) / 65536.
inline uint32_t DropoutThreshold(float p) { return static_cast<uint32_t>(static_cast<double>(p) * 65536.0); }

// The counter's second word's bit that marks a refinement block.
inline constexpr uint32_t kDropoutRefineBit = 0x80000000u;

// The random words of elements 16·block .. 16·block + 15; `refine`: their
// refinement bytes' block.
inline PhiloxCounter DropoutBlock(const DropoutKey& k, uint64_t block, bool refine = false) {
  return Philox4x32(
      {static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32) | (refine ? kDropoutRefineBit : 0u), k.op_id,
       static_cast<uint32_t>(k.step)},
      {static_cast<uint32_t>(k.seed), static_cast<uint32_t>(k.seed >> 32) ^ static_cast<uint32_t>(k.step >> 32)});
}

// Byte g mod 4 of word (g / 4) mod 4 of `c` (the block of element g).
inline uint32_t DropoutByte(const PhiloxCounter& c, uint64_t g) { return (c[(g >> 2) & 3] >> (8 * (g & 3))) & 0xFFu; }

// Whether element g, whose primary byte equals t >> 8, is kept: its
// refinement byte against t & 0xFF.
inline bool DropoutRefineKeeps(const DropoutKey& k, uint32_t t, uint64_t g) {
  return DropoutByte(DropoutBlock(k, g >> 4, true), g) >= (t & 0xFFu);
}

// Whether global element `g` is kept under drop threshold `t`.
inline bool DropoutKeeps(const DropoutKey& k, uint32_t t, uint64_t g) {
  const uint32_t byte = DropoutByte(DropoutBlock(k, g >> 4), g), hi = t >> 8;
  return byte > hi || (byte == hi && DropoutRefineKeeps(k, t, g));
}

}  // namespace sinkrt::device
