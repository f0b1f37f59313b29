#include "device/src/daemon/daemon.h"
#include "runtime/src/env.h"

namespace sinkrt::device {

DaemonOptions DaemonOptions::FromEnvironment() {
  DaemonOptions o;
  // Not SINKRT_CONNECT_TIMEOUT_MS or HCCL_CONNECT_TIMEOUT: clusters set
  // those to minutes for slow peers, and a pending connection held that
  // long is a slot an attacker keeps for free.
  if (auto ms = EnvPositiveMilliseconds("SINKRT_HELLO_TIMEOUT_MS")) o.hello_timeout = *ms;
  // DeviceOptions read SINKRT_PEER_TIMEOUT_MS and the HCCL_* timeouts
  // already; Daemon::Start hands these values back to the device options,
  // so a --peer-timeout-ms flag set here reaches the rendezvous, the peer
  // hub and every collective alike.
  o.peer_timeout = o.device.peer_timeout;
  o.rendezvous_timeout = o.device.rendezvous_timeout;
  return o;
}

}  // namespace sinkrt::device
