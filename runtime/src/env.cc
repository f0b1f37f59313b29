#include "sinkrt/runtime/env.h"

#include <cstdlib>

namespace sinkrt {
namespace {

std::optional<long long> EnvInteger(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  char* end = nullptr;
  long long n = std::strtoll(v, &end, 10);
  if (*end != '\0' || n < 0) return std::nullopt;
  return n;
}

}  // namespace

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
