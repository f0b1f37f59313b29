#include "runtime/src/env.h"

#include <cerrno>
#include <cstdlib>
#include <limits>
#include <string>

namespace sinkrt {
namespace {

// Read as non-negative integers wherever they are read (env.cc,
// device_options.cc, daemon_options.cc, remote_connection.cc, wire.cc,
// comm/transport/futex.h, local_device_limit.cc): a variable added there
// belongs here too. SINKRT_MAX_LOCAL_DEVICES must also be positive; its
// reader says so.
constexpr const char* kNumericVariables[] = {
    "SINKRT_CONNECT_TIMEOUT_MS", "SINKRT_GETNEXT_TIMEOUT_MS", "SINKRT_PUSH_TIMEOUT_MS",   "SINKRT_SINK_TIMEOUT_MS",
    "SINKRT_REPLY_TIMEOUT_MS",   "SINKRT_PEER_TIMEOUT_MS",    "SINKRT_DEVICE_THREADS",    "SINKRT_MAX_FRAME_BYTES",
    "SINKRT_COMM_SPIN_US",       "SINKRT_COMM_YIELD_US",      "HCCL_CONNECT_TIMEOUT",     "HCCL_EXEC_TIMEOUT",
    "SINKRT_HELLO_TIMEOUT_MS",   "SINKRT_PROGRESS_MS",        "SINKRT_MAX_LOCAL_DEVICES", "SINKRT_WORKER_SPIN_US",
};

// Switches, read with EnvBoolean (device_options.cc): a variable added
// there belongs here too.
constexpr const char* kBooleanVariables[] = {
    "SINKRT_COMM_SHM",    "SINKRT_SHARED_ARENA",           "SINKRT_WORKER_TEAM",
    "SINKRT_PIN_THREADS", "SINKRT_HIERARCHICAL_ALLREDUCE", "SINKRT_TLS_PLAIN_PEERS",
};

constexpr const char* kBooleanSpellings = "1, true, yes or on; 0, false, no or off";

std::optional<long long> EnvInteger(const char* name) { return EnvNonNegativeInteger(name); }

bool AllDigits(std::string_view v) {
  if (v.empty()) return false;
  for (char c : v)
    if (c < '0' || c > '9') return false;
  return true;
}

std::string Quoted(const char* name, const char* value) { return std::string(name) + "='" + value + "'"; }

}  // namespace

// Digits only: strtoll alone would take " 5", "+5" and, for unsigned
// readers, "-5" as a huge number.
std::optional<long long> ParseNonNegativeInteger(std::string_view v) {
  if (!AllDigits(v)) return std::nullopt;
  const std::string text(v);
  char* end = nullptr;
  errno = 0;
  const long long n = std::strtoll(text.c_str(), &end, 10);
  if (*end != '\0' || errno == ERANGE) return std::nullopt;
  return n;
}

std::optional<bool> ParseBoolean(std::string_view v) {
  std::string lower;
  for (char c : v) lower += static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  if (lower == "1" || lower == "true" || lower == "yes" || lower == "on") return true;
  if (lower == "0" || lower == "false" || lower == "no" || lower == "off") return false;
  return std::nullopt;
}

Status CheckNonNegativeInteger(const char* name, const char* value) {
  if (ParseNonNegativeInteger(value)) return Status::Ok();
  // Digits that do not fit: the number is fine, its size is not.
  if (AllDigits(value))
    return InvalidArgument(Quoted(name, value) + " is out of range (at most " +
                           std::to_string(std::numeric_limits<long long>::max()) + ")");
  return InvalidArgument(Quoted(name, value) + " is not a non-negative integer");
}

Status CheckEnvironment() {
  for (const char* name : kNumericVariables) {
    const char* v = std::getenv(name);
    if (!v || !*v) continue;  // empty reads as unset everywhere
    SINKRT_RETURN_IF_ERROR(CheckNonNegativeInteger(name, v));
  }
  for (const char* name : kBooleanVariables) {
    const char* v = std::getenv(name);
    if (!v || !*v) continue;
    if (!ParseBoolean(v)) return InvalidArgument(Quoted(name, v) + " is not a boolean (" + kBooleanSpellings + ")");
  }
  return Status::Ok();
}

std::optional<long long> EnvNonNegativeInteger(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  return ParseNonNegativeInteger(v);
}

std::optional<bool> EnvBoolean(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  return ParseBoolean(v);
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
