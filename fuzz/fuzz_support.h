// What the fuzz targets share: FUZZ_CHECK, and the Toucher that reads every
// field of an accepted input into a running hash, so that the optimiser
// cannot drop the reads and AddressSanitizer sees each one.
#pragma once

#include <errno.h>  // program_invocation_short_name

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>

#include <flatbuffers/flatbuffers.h>

// A broken promise is a finding: say which, named by the fuzzer that found
// it, and abort so that libFuzzer keeps the input.
#define FUZZ_CHECK(cond)                                                                                               \
  do {                                                                                                                 \
    if (!(cond)) {                                                                                                     \
      std::fprintf(stderr, "%s: %s:%d: check failed: %s\n", program_invocation_short_name, __FILE__, __LINE__, #cond); \
      std::abort();                                                                                                    \
    }                                                                                                                  \
  } while (0)

namespace sinkrt::fuzz {

// Each target stores its Toucher's hash here once per input.
inline volatile uint64_t g_sink;

struct Toucher {
  uint64_t h = 0;

  template <typename T>
  void Scalar(T v) {
    uint64_t x = 0;
    std::memcpy(&x, &v, sizeof v < sizeof x ? sizeof v : sizeof x);
    h = h * 1099511628211ull ^ x;
  }
  void Str(const flatbuffers::String* s) {
    if (!s) return;
    std::string copy = s->str();
    FUZZ_CHECK(copy.size() == s->size());
    for (char c : copy) Scalar(c);
    FUZZ_CHECK(s->c_str()[s->size()] == '\0');  // the Verifier checks the terminator
  }
  template <typename T>
  void Vec(const flatbuffers::Vector<T>* v) {
    if (!v) return;
    for (uint32_t i = 0; i < v->size(); ++i) Scalar(v->Get(i));
  }
  void Bytes(std::span<const uint8_t> b) {
    for (uint8_t x : b) Scalar(x);
  }
};

}  // namespace sinkrt::fuzz
