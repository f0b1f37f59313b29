// Small helpers shared by tests.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "sinkrt/fb/task_stream_generated.h"
#include "sinkrt/runtime/status.h"
#include "sinkrt/runtime/task_stream_verifier.h"

#define SINKRT_ASSERT_OK(expr)                                     \
  do {                                                             \
    const ::sinkrt::Status _s = ::sinkrt::testing::ToStatus(expr); \
    ASSERT_TRUE(_s.ok()) << _s.ToString();                         \
  } while (0)

namespace sinkrt::testing {

inline Status ToStatus(const Status& s) { return s; }
template <typename T>
Status ToStatus(const Result<T>& r) {
  return r.status();
}

// Indices of every buffer of `role` in a compiled stream.
inline std::vector<uint32_t> BuffersWithRole(const std::vector<uint8_t>& stream, fb::BufferRole role) {
  std::vector<uint32_t> out;
  auto view = VerifyTaskStream(stream);
  if (!view.ok()) return out;
  for (uint32_t i = 0; i < view->root()->buffers()->size(); ++i)
    if (view->root()->buffers()->Get(i)->role() == role) out.push_back(i);
  return out;
}

}  // namespace sinkrt::testing
