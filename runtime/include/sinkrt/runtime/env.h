// Durations and numbers from environment variables, shared by the daemon,
// the remote client and the launcher so the same variable means the same
// thing everywhere.
#pragma once

#include <chrono>
#include <optional>

namespace sinkrt {

// A non-negative integer number of milliseconds from `name`; empty when the
// variable is unset or not a number (a typo must not become "0 = forever").
std::optional<std::chrono::milliseconds> EnvMilliseconds(const char* name);

// The connect/handshake timeout: SINKRT_CONNECT_TIMEOUT_MS, else
// HCCL_CONNECT_TIMEOUT (seconds, as MindSpore users already set it), else
// `fallback`.
std::chrono::milliseconds ConnectTimeoutFromEnvironment(std::chrono::milliseconds fallback);

}  // namespace sinkrt
