// Reading FlatBuffers [long] vectors from files we did not write.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "flatbuffers/flatbuffers.h"

namespace sinkrt::host {

// The elements of `v` (empty when absent), copied bytewise: the FlatBuffers
// verifier checks a vector's 4-byte length prefix but not that 8-byte
// elements are 8-aligned, so a crafted file can place them anywhere, and
// Vector<int64_t>::Get would then be a misaligned load. Little-endian, as
// the format is.
inline std::vector<int64_t> Longs(const flatbuffers::Vector<int64_t>* v) {
  std::vector<int64_t> out;
  if (!v || v->size() == 0) return out;
  out.resize(v->size());
  std::memcpy(out.data(), v->Data(), out.size() * sizeof(int64_t));
  return out;
}

}  // namespace sinkrt::host
