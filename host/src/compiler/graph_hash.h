// Content hashes: the compile-cache key of a task stream.
//
// FNV-1a 64 over a canonical serialisation in which every value is written in
// a fixed width, little-endian, strings and lists length-prefixed and floats
// by their bit pattern — never a pointer, a padding byte or a hash-map order —
// so equal inputs hash equal on every platform.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "sinkrt/host/compiler.h"

namespace sinkrt::host::compiler {

class Fnv1a64 {
 public:
  void Bytes(std::span<const uint8_t> bytes);
  void U8(uint8_t v) { Bytes({&v, 1}); }
  void U32(uint32_t v);
  void U64(uint64_t v);
  void I64(int64_t v) { U64(static_cast<uint64_t>(v)); }
  void F32(float v);
  void Bool(bool v) { U8(v ? 1 : 0); }
  void String(std::string_view s);

  uint64_t value() const { return h_; }

 private:
  uint64_t h_ = 0xcbf29ce484222325ull;  // FNV-1a 64 offset basis
};

// The header's graph_hash: GraphHash(forward) mixed with every CompileOptions
// field and the format version, so a change of either gives another key.
uint64_t StreamHash(uint64_t graph_hash, const CompileOptions& options);

}  // namespace sinkrt::host::compiler
