#include "sinkrt/device/device_options.h"

#include <cstdlib>
#include <string>

namespace sinkrt::device {
namespace {

// Whether `var` held a positive number of milliseconds (then in `out`).
bool OverrideMs(const char* var, std::chrono::milliseconds* out) {
  const char* v = std::getenv(var);
  if (!v || !*v) return false;
  char* end = nullptr;
  long long ms = std::strtoll(v, &end, 10);
  if (!end || *end != '\0' || ms <= 0) return false;
  *out = std::chrono::milliseconds(ms);
  return true;
}

// Whole seconds, as the HCCL_* variables are given; unset, 0 or not a
// number leaves `out` alone (a typo must not become "fail at once").
void OverrideSeconds(const char* var, std::chrono::milliseconds* out) {
  const char* v = std::getenv(var);
  if (!v || !*v) return;
  char* end = nullptr;
  long long s = std::strtoll(v, &end, 10);
  if (end && *end == '\0' && s > 0) *out = std::chrono::seconds(s);
}

}  // namespace

DeviceOptions DeviceOptions::FromEnvironment() {
  DeviceOptions o;
  OverrideMs("SINKRT_GETNEXT_TIMEOUT_MS", &o.get_next_timeout);
  OverrideMs("SINKRT_PUSH_TIMEOUT_MS", &o.push_timeout);
  // SINKRT_PEER_TIMEOUT_MS bounds the collectives and the rendezvous alike
  // (rendezvous_timeout 0 follows peer_timeout); without it, HCCL splits
  // the two as MindSpore does.
  if (!OverrideMs("SINKRT_PEER_TIMEOUT_MS", &o.peer_timeout)) {
    const std::chrono::milliseconds unset = o.peer_timeout;
    OverrideSeconds("HCCL_EXEC_TIMEOUT", &o.peer_timeout);
    OverrideSeconds("HCCL_CONNECT_TIMEOUT", &o.rendezvous_timeout);
    // HCCL_EXEC_TIMEOUT bounds the collectives only: joining keeps its own
    // default rather than follow it.
    if (o.rendezvous_timeout.count() == 0 && o.peer_timeout != unset) o.rendezvous_timeout = unset;
  }
  if (const char* v = std::getenv("SINKRT_COMM_SHM")) o.shared_memory = std::string(v) != "0";
  if (const char* t = std::getenv("SINKRT_DEVICE_THREADS")) o.threads = std::atoi(t);
  return o;
}

}  // namespace sinkrt::device
