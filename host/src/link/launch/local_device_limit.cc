#include "sinkrt/host/local_device_limit.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "runtime/src/env.h"

namespace sinkrt::host {
namespace {

constexpr const char* kOverride = "SINKRT_MAX_LOCAL_DEVICES";

std::string Bytes(uint64_t n) {
  char buf[32];
  if (n >= (uint64_t{1} << 30))
    std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(n) / (uint64_t{1} << 30));
  else
    std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(n) / (uint64_t{1} << 20));
  return buf;
}

std::string Daemons(long long n) { return std::to_string(n) + " local sinkd daemon" + (n == 1 ? "" : "s"); }

}  // namespace

std::optional<uint64_t> MemAvailableBytes() {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  uint64_t value = 0;
  while (in >> key >> value) {
    std::getline(in, unit);
    if (key == "MemAvailable:") return value * 1024;  // the kernel prints kB (KiB)
  }
  return std::nullopt;
}

Result<std::optional<int>> MaxLocalDevicesFromEnvironment() {
  const char* v = std::getenv(kOverride);
  if (!v || !*v) return std::optional<int>();
  const std::optional<long long> n = EnvNonNegativeInteger(kOverride);
  if (!n || *n < 1 || *n > INT_MAX)
    return InvalidArgument(std::string(kOverride) + "='" + v + "' is not a positive integer (the most sinkd daemons " +
                           "a launcher may start on this machine)");
  return std::optional<int>(static_cast<int>(*n));
}

Status CheckLocalDeviceCount(int devices, const LocalMachine& machine, uint64_t arena_bytes) {
  SINKRT_ASSIGN_OR_RETURN(const std::optional<int> override_limit, MaxLocalDevicesFromEnvironment());
  const std::string asked = Daemons(devices) + " asked for";
  if (override_limit) {
    if (devices <= *override_limit) return Status::Ok();
    return ResourceExhausted(asked + ", but " + kOverride + "=" + std::to_string(*override_limit) + " allows at most " +
                             std::to_string(*override_limit) + " (raise it to start more)");
  }
  const int cores = std::max(1, machine.cores);
  const long long by_cores = static_cast<long long>(cores) * kLocalDaemonsPerCore;
  if (devices > by_cores)
    return ResourceExhausted(asked + ", but this machine hosts at most " + std::to_string(by_cores) + ": " +
                             std::to_string(kLocalDaemonsPerCore) + " per core on the " + std::to_string(cores) +
                             (cores == 1 ? " core" : " cores") + " this process may use (set " + kOverride +
                             "=N to allow N)");
  if (machine.mem_available_bytes) {
    // Not multiplied out: an arena near the device limit times many
    // daemons would overflow.
    const uint64_t each = arena_bytes + kSinkdBaselineRssBytes;
    const uint64_t fit = *machine.mem_available_bytes / each;
    if (static_cast<uint64_t>(devices) > fit) {
      const std::string need = arena_bytes > 0 ? " (its " + Bytes(arena_bytes) + " arena + about " +
                                                     Bytes(kSinkdBaselineRssBytes) + " for the daemon itself)"
                                               : " for the daemon itself, before its job's arena";
      return ResourceExhausted(asked + ", but only " + std::to_string(fit) + " fit in memory: each needs about " +
                               Bytes(each) + need + " and " + Bytes(*machine.mem_available_bytes) +
                               " is available (MemAvailable in /proc/meminfo) (set " + kOverride + "=N to allow N)");
    }
  }
  return Status::Ok();
}

}  // namespace sinkrt::host
