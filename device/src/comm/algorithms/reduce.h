// Element-wise reductions for the collectives (ReduceInto in
// communicator.h is the checked public entry).
//
// Every op is evaluated as `first (op) second` with the operand order the
// algorithm chooses: max/min of +0 and -0, NaN payloads and the rounding of
// bf16 can depend on it, and bitwise identical results across ranks need
// every rank to make the same choice. Integer sums wrap (two's complement);
// max/min propagate NaN; bf16 goes through float and back, rounding to
// nearest even.
#pragma once

#include <cstddef>
#include <cstdint>

#include "device/src/comm/communicator.h"

namespace sinkrt::device {

// dst = dst (op) src, or src (op) dst when `src_first`. Mean reduces as Sum.
void ReduceRaw(uint8_t* dst, const uint8_t* src, size_t count, DType dtype, ReduceOp op, bool src_first);
// data /= divisor (Mean's last step); integers truncate toward zero.
void DivideRaw(uint8_t* data, size_t count, DType dtype, uint32_t divisor);
bool ReducibleType(DType dtype);

float Bf16ToFloat(uint16_t v);
uint16_t FloatToBf16(float f);

}  // namespace sinkrt::device
