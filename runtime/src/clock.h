/// \file
/// One monotonic clock for the timings the host and the device report.
#pragma once

#include <chrono>
#include <cstdint>

namespace sinkrt {

/// Nanoseconds of std::chrono::steady_clock: only differences mean anything.
inline int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace sinkrt
