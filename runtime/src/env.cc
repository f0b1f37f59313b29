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

std::chrono::milliseconds ConnectTimeoutFromEnvironment(std::chrono::milliseconds fallback) {
  if (auto ms = EnvMilliseconds("SINKRT_CONNECT_TIMEOUT_MS")) return *ms;
  if (auto s = EnvInteger("HCCL_CONNECT_TIMEOUT")) return std::chrono::seconds(*s);
  return fallback;
}

}  // namespace sinkrt
