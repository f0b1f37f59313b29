// Initial contents of a buffer from its fb::Init (the init program's
// InitTask), as docs/reference/ops.md "Initialisers" specifies.
//
// Random kinds use a counter-based generator: element i of a buffer seeded s
// depends only on (s, i), never on how many values were drawn before, so
// every rank of a data-parallel job and every platform computes the same
// parameters without talking to each other.
#pragma once

#include <cstdint>
#include <span>

#include "device/src/kernels/kernel.h"
#include "runtime/src/counter_random.h"

namespace sinkrt::device {

// SplitMix64, UniformAt, NormalPair and NormalAt: runtime/src/counter_random.h
// (the host draws the same values for inline tables).

// Writes `out` as `def` says. `blobs` is the stream's blob section (Inline).
// Fails with InvalidArgument, naming the kind and the problem, on a dtype the
// kind does not produce, bad parameters (fan_in ≤ 0, stddev < 0, high < low,
// a non-integral constant for i32), or an inline range outside `blobs` or of
// the wrong size.
Status FillInitializer(const fb::Init& def, const TensorRef& out, std::span<const uint8_t> blobs);

}  // namespace sinkrt::device
