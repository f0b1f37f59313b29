/// \file
/// WireLimits: the largest frame a receiver of the wire protocol accepts
/// (sinkd, RemoteDevice); larger ones are refused before anything is read
/// into memory.
#pragma once

#include <cstdint>

namespace sinkrt {

/// The largest frame a receiver accepts, in its two parts.
struct WireLimits {
  /// A FlatBuffer message (control data: reports, names) is small.
  uint32_t max_message_bytes = 16u << 20;
  /// Task streams, batches and tensors. Override: SINKRT_MAX_FRAME_BYTES.
  uint64_t max_payload_bytes = 2ull << 30;

  /// The defaults, with SINKRT_MAX_FRAME_BYTES applied.
  static WireLimits FromEnvironment();
};

}  // namespace sinkrt
