#include "sinkrt/device/device_options.h"

#include <cstdlib>
#include <string>

namespace sinkrt::device {
namespace {

void OverrideMs(const char* var, std::chrono::milliseconds* out) {
  const char* v = std::getenv(var);
  if (!v || !*v) return;
  char* end = nullptr;
  long long ms = std::strtoll(v, &end, 10);
  if (end && *end == '\0' && ms > 0) *out = std::chrono::milliseconds(ms);
}

}  // namespace

DeviceOptions DeviceOptions::FromEnvironment() {
  DeviceOptions o;
  OverrideMs("SINKRT_GETNEXT_TIMEOUT_MS", &o.get_next_timeout);
  OverrideMs("SINKRT_PUSH_TIMEOUT_MS", &o.push_timeout);
  OverrideMs("SINKRT_PEER_TIMEOUT_MS", &o.peer_timeout);
  if (const char* v = std::getenv("SINKRT_COMM_SHM")) o.shared_memory = std::string(v) != "0";
  if (const char* t = std::getenv("SINKRT_DEVICE_THREADS")) o.threads = std::atoi(t);
  return o;
}

}  // namespace sinkrt::device
