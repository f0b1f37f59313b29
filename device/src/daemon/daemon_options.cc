#include "sinkrt/device/daemon.h"
#include "sinkrt/runtime/env.h"

namespace sinkrt::device {

DaemonOptions DaemonOptions::FromEnvironment() {
  DaemonOptions o;
  o.connect_timeout = ConnectTimeoutFromEnvironment(o.connect_timeout);
  if (auto ms = EnvMilliseconds("SINKRT_PEER_TIMEOUT_MS")) o.peer_timeout = *ms;
  return o;
}

}  // namespace sinkrt::device
