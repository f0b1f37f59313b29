// One column's Map transforms compiled, where they allow it, into a single
// pass from the source's sample bytes to the batch's: no per-sample tensor,
// no scratch buffer swapped per transform, no second copy into the batch.
//
// A chain of per-value transforms (Rescale, Normalize, TypeCast) on u8 input
// maps each of the 256 input values, per channel, to one output element, so
// it becomes a table made by running the transforms' own `apply` over the
// 256 values: bitwise what the unfused chain gives, by construction, whatever
// each transform's arithmetic order. Shape-only transforms (Reshape) move no
// bytes. Anything else (custom transforms, HWC2CHW, OneHot, non-u8 input to
// a per-value chain, a dim that varies per sample) stays unfused.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "sinkrt/host/dataset.h"

namespace sinkrt::host {

struct FusedColumn {
  enum class Kind { kUnfused, kCopy, kTable };
  Kind kind = Kind::kUnfused;
  int64_t elements = 0;  // per sample
  size_t in_bytes = 0;   // per sample, as the source holds it
  size_t out_bytes = 0;  // per sample, as the batch holds it
  DType out_dtype = DType::Invalid;
  Shape out_shape;  // per sample
  // kTable: `channels` rows of 256 output elements of `out_size` bytes;
  // element i of a sample reads row i % channels.
  int64_t channels = 1;
  size_t out_size = 0;
  std::vector<uint8_t> table;
};

// `source`: the column as the source yields it; `transforms` and `specs`:
// every transform mapped onto it, in order, with the spec after each.
FusedColumn FuseColumn(const ColumnSpec& source, std::span<const Transform* const> transforms,
                       std::span<const ColumnSpec* const> specs);

// One sample: in_bytes from `in`, out_bytes to `out`. kCopy or kTable only.
void WriteFused(const FusedColumn& f, const uint8_t* in, uint8_t* out);

}  // namespace sinkrt::host
