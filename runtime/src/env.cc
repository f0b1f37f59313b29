#include "sinkrt/runtime/env.h"

#include <cerrno>
#include <cstdlib>
#include <string>

namespace sinkrt {
namespace {

// Read as non-negative integers wherever they are read (env.cc,
// device_options.cc, daemon_options.cc, remote_connection.cc, wire.cc,
// comm/transport/futex.h, local_device_limit.cc): a variable added there
// belongs here too. SINKRT_MAX_LOCAL_DEVICES must also be positive; its
// reader says so.
constexpr const char* kNumericVariables[] = {
    "SINKRT_CONNECT_TIMEOUT_MS", "SINKRT_GETNEXT_TIMEOUT_MS", "SINKRT_PUSH_TIMEOUT_MS",
    "SINKRT_SINK_TIMEOUT_MS",    "SINKRT_REPLY_TIMEOUT_MS",   "SINKRT_PEER_TIMEOUT_MS",
    "SINKRT_DEVICE_THREADS",     "SINKRT_MAX_FRAME_BYTES",    "SINKRT_COMM_SPIN_US",
    "SINKRT_COMM_YIELD_US",      "HCCL_CONNECT_TIMEOUT",      "HCCL_EXEC_TIMEOUT",
    "SINKRT_HELLO_TIMEOUT_MS",   "SINKRT_PROGRESS_MS",        "SINKRT_MAX_LOCAL_DEVICES",
    "SINKRT_WORKER_SPIN_US",     "SINKRT_HIERARCHICAL_ALLREDUCE",
};

// Digits only: strtoll alone would take " 5", "+5" and, for unsigned
// readers, "-5" as a huge number.
std::optional<long long> ParseNonNegative(const char* v) {
  if (!v || *v < '0' || *v > '9') return std::nullopt;
  char* end = nullptr;
  errno = 0;
  long long n = std::strtoll(v, &end, 10);
  if (*end != '\0' || errno == ERANGE) return std::nullopt;
  return n;
}

std::optional<long long> EnvInteger(const char* name) { return EnvNonNegativeInteger(name); }

}  // namespace

Status CheckEnvironment() {
  for (const char* name : kNumericVariables) {
    const char* v = std::getenv(name);
    if (!v || !*v) continue;  // empty reads as unset everywhere
    if (!ParseNonNegative(v))
      return InvalidArgument(std::string(name) + "='" + v + "' is not a non-negative integer");
  }
  return Status::Ok();
}

std::optional<long long> EnvNonNegativeInteger(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  return ParseNonNegative(v);
}

std::optional<std::chrono::milliseconds> EnvMilliseconds(const char* name) {
  auto n = EnvInteger(name);
  if (!n) return std::nullopt;
  return std::chrono::milliseconds(*n);
}

std::optional<std::chrono::milliseconds> EnvPositiveMilliseconds(const char* name) {
  auto ms = EnvMilliseconds(name);
  if (!ms || ms->count() == 0) return std::nullopt;
  return ms;
}

std::chrono::milliseconds ConnectTimeoutFromEnvironment(std::chrono::milliseconds fallback) {
  if (auto ms = EnvMilliseconds("SINKRT_CONNECT_TIMEOUT_MS")) return *ms;
  if (auto s = EnvInteger("HCCL_CONNECT_TIMEOUT")) return std::chrono::seconds(*s);
  return fallback;
}

std::chrono::milliseconds ProgressIntervalFromEnvironment(std::chrono::milliseconds fallback) {
  if (auto ms = EnvPositiveMilliseconds("SINKRT_PROGRESS_MS")) return *ms;
  return fallback;
}

PeerTimeouts PeerTimeoutsFromEnvironment(PeerTimeouts t) {
  if (auto ms = EnvPositiveMilliseconds("SINKRT_PEER_TIMEOUT_MS")) {
    t.peer = *ms;
    return t;
  }
  const std::chrono::milliseconds unset = t.peer;
  if (auto s = EnvInteger("HCCL_EXEC_TIMEOUT"); s && *s > 0) t.peer = std::chrono::seconds(*s);
  if (auto s = EnvInteger("HCCL_CONNECT_TIMEOUT"); s && *s > 0) t.rendezvous = std::chrono::seconds(*s);
  if (t.rendezvous.count() == 0 && t.peer != unset) t.rendezvous = unset;
  return t;
}

}  // namespace sinkrt
