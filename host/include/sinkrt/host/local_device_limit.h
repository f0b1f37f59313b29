/// \file
/// How many sinkd daemons one machine can host: the check a launcher makes
/// before it forks the first of a LocalCluster.
///
/// Starting far more daemons than cores (1000 on 2 cores: silent for over a
/// minute at a load average of 131) or than fit in memory helps nobody; the
/// launcher refuses up front, saying what the limit is, what it comes from
/// and how to override it. The machine's facts are passed in, so the policy
/// is a pure function (the launcher fills them from the device's core count
/// and /proc/meminfo; host code does not ask the device library).
#pragma once

#include <cstdint>
#include <optional>

#include "sinkrt/runtime/status.h"

namespace sinkrt::host {

/// Daemons per core the machine may run. Measured here on 2 cores: 16
/// daemons start in 2.8 s and 64 in 19 s, each with its own threads; far
/// beyond that a start stops converging within any sensible deadline.
constexpr int kLocalDaemonsPerCore = 32;

/// The resident memory of one sinkd besides its arena, as measured with
/// VmRSS/VmHWM (/proc/PID/status) on a release build, --threads 1: 7.2 MiB
/// idle, 14.9 MiB after training the built-in MLP (oneDNN's code and
/// primitives, the job's threads and task stream), 27.2 MiB at the peak
/// with its 6.4 MiB arena and queue slots. Rounded up from the after-job
/// figure: the arena is counted on its own. The shared-library pages are
/// shared between daemons, so the estimate errs on the safe side.
constexpr uint64_t kSinkdBaselineRssBytes = uint64_t{16} << 20;

/// What the machine offers the daemons.
struct LocalMachine {
  int cores = 1;  ///< cores this process may run on
  /// MemAvailable from /proc/meminfo; empty where it cannot be read (then
  /// only the cores limit applies).
  std::optional<uint64_t> mem_available_bytes;
};

/// MemAvailable from /proc/meminfo, in bytes; empty when the file or the
/// line is missing (not Linux, a restricted /proc).
std::optional<uint64_t> MemAvailableBytes();

/// SINKRT_MAX_LOCAL_DEVICES: empty when unset (or empty); InvalidArgument
/// naming the variable when it is set to anything but a positive integer.
Result<std::optional<int>> MaxLocalDevicesFromEnvironment();

/// Whether `devices` local daemons fit `machine`: at most kLocalDaemonsPerCore
/// per core, and, when the memory is known, devices x (arena_bytes +
/// kSinkdBaselineRssBytes) within it. `arena_bytes` is each daemon's job
/// arena when it is known before launch (compiled streams), else 0.
/// SINKRT_MAX_LOCAL_DEVICES replaces both limits: the operator knows the
/// machine better. Fails with kResourceExhausted naming the count asked for,
/// the limit, the cores or memory behind it and the override; with
/// kInvalidArgument when the override itself is nonsense.
Status CheckLocalDeviceCount(int devices, const LocalMachine& machine, uint64_t arena_bytes = 0);

}  // namespace sinkrt::host
