#include "device/src/daemon/daemon_log.h"

#include <sys/time.h>
#include <cstdio>
#include <ctime>

namespace sinkrt::device {

void DaemonLog(bool enabled, int rank, const std::string& text) {
  if (!enabled) return;
  timeval tv;
  gettimeofday(&tv, nullptr);
  tm utc;
  gmtime_r(&tv.tv_sec, &utc);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &utc);
  // One fprintf per line: stderr is unbuffered, and one call keeps lines
  // from different threads whole.
  std::fprintf(stderr, "%s.%03dZ sinkd[rank %d] %s\n", stamp, static_cast<int>(tv.tv_usec / 1000), rank, text.c_str());
}

}  // namespace sinkrt::device
