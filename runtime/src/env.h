/// \file
/// Durations and numbers from environment variables, shared by the daemon,
/// the remote client and the launcher so the same variable means the same
/// thing everywhere.
#pragma once

#include <chrono>
#include <optional>
#include <string_view>

#include "sinkrt/runtime/status.h"

namespace sinkrt {

/// Every numeric and boolean SINKRT_* and HCCL_* variable the runtime and
/// the devices read, checked together: the first one set to anything but
/// a non-negative integer (or a boolean, for the switches) is an
/// InvalidArgument naming it and its value. The readers below skip such a
/// value (they run where no error can be returned), so a process calls
/// this once at start, where it can refuse to run.
Status CheckEnvironment();

/// The one parser of numbers in variables: decimal digits only (no sign,
/// blank or exponent) that fit a long long; empty otherwise.
std::optional<long long> ParseNonNegativeInteger(std::string_view value);

/// `name`='`value`' as a non-negative integer: Ok, or an InvalidArgument
/// naming both that says whether the value is no such number or one too
/// large.
Status CheckNonNegativeInteger(const char* name, const char* value);

/// The one parser of switches in variables: 1, true, yes, on and 0, false,
/// no, off, in any case; empty for anything else.
std::optional<bool> ParseBoolean(std::string_view value);

/// A switch from `name`; empty when the variable is unset, empty or not a
/// boolean (CheckEnvironment reports the last).
std::optional<bool> EnvBoolean(const char* name);

/// A non-negative integer from `name`; empty when the variable is unset or
/// not such a number (CheckEnvironment reports the latter).
std::optional<long long> EnvNonNegativeInteger(const char* name);

/// A non-negative integer number of milliseconds from `name`; empty when the
/// variable is unset or not a number (a typo must not become "0 = forever").
std::optional<std::chrono::milliseconds> EnvMilliseconds(const char* name);

/// As EnvMilliseconds, but 0 is ignored too: for bounds where 0 would mean
/// "fail at once" rather than "no bound".
std::optional<std::chrono::milliseconds> EnvPositiveMilliseconds(const char* name);

/// The connect/handshake timeout: SINKRT_CONNECT_TIMEOUT_MS, else
/// HCCL_CONNECT_TIMEOUT (seconds, as MindSpore users already set it), else
/// `fallback`.
std::chrono::milliseconds ConnectTimeoutFromEnvironment(std::chrono::milliseconds fallback);

/// How often a wait that may be long (a launcher starting daemons, a host
/// connecting to one) says what it is waiting for: SINKRT_PROGRESS_MS, else
/// `fallback`. 0 is ignored: it would mean a line per poll.
std::chrono::milliseconds ProgressIntervalFromEnvironment(std::chrono::milliseconds fallback);

/// How long devices wait for their peers: the daemons bound their waits by
/// these, and a host driving them waits a little longer so that the
/// daemons' verdict (which peer did not come) reaches it first.
struct PeerTimeouts {
  /// Every wait inside a collective.
  std::chrono::milliseconds peer{std::chrono::seconds(300)};
  /// Joining a world (dials, handshakes, Barrier #0); 0: `peer`.
  std::chrono::milliseconds rendezvous{0};

  /// The rendezvous wait in force: `rendezvous`, or `peer` when it is 0.
  std::chrono::milliseconds effective_rendezvous() const { return rendezvous.count() > 0 ? rendezvous : peer; }
};

/// `defaults` overridden by SINKRT_PEER_TIMEOUT_MS (both waits, in ms), else
/// by HCCL_EXEC_TIMEOUT (the collectives) and HCCL_CONNECT_TIMEOUT (joining),
/// in seconds as MindSpore users set them. Zero is ignored (unset), and so
/// is not a number here (CheckEnvironment reports it).
/// HCCL_EXEC_TIMEOUT alone leaves joining at the default peer wait rather
/// than have it follow the collectives.
PeerTimeouts PeerTimeoutsFromEnvironment(PeerTimeouts defaults);

}  // namespace sinkrt
