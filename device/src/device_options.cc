#include "sinkrt/device/device_options.h"

#include <algorithm>
#include <climits>

#include "runtime/src/env.h"

namespace sinkrt::device {

DeviceOptions DeviceOptions::FromEnvironment() {
  DeviceOptions o;
  if (auto ms = EnvPositiveMilliseconds("SINKRT_GETNEXT_TIMEOUT_MS")) o.get_next_timeout = *ms;
  if (auto ms = EnvPositiveMilliseconds("SINKRT_PUSH_TIMEOUT_MS")) o.push_timeout = *ms;
  // Resolved in runtime/ so that hosts wait on the same values.
  const PeerTimeouts peer = PeerTimeoutsFromEnvironment({o.peer_timeout, o.rendezvous_timeout});
  o.peer_timeout = peer.peer;
  o.rendezvous_timeout = peer.rendezvous;
  // Switches: CheckEnvironment refuses what EnvBoolean cannot read.
  if (auto on = EnvBoolean("SINKRT_COMM_SHM")) o.shared_memory = *on;
  if (auto on = EnvBoolean("SINKRT_SHARED_ARENA")) o.shared_arena = *on;
  if (auto on = EnvBoolean("SINKRT_HIERARCHICAL_ALLREDUCE")) o.hierarchical_allreduce = *on;
  if (auto n = EnvNonNegativeInteger("SINKRT_DEVICE_THREADS"))
    o.threads = static_cast<int>(std::min<long long>(*n, INT_MAX));
  if (auto on = EnvBoolean("SINKRT_WORKER_TEAM")) o.worker_team = *on;
  if (auto on = EnvBoolean("SINKRT_PIN_THREADS")) o.pin_threads = *on;
  if (auto n = EnvNonNegativeInteger("SINKRT_WORKER_SPIN_US")) o.worker_spin = std::chrono::microseconds(*n);
  o.tls = TlsConfig::FromEnvironment();
  if (auto on = EnvBoolean("SINKRT_TLS_PLAIN_PEERS")) o.tls_plain_peers = *on;
  return o;
}

}  // namespace sinkrt::device
