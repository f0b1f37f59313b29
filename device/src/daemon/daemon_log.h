// The daemon's log: one line per job event on stderr, with a UTC timestamp
// and the rank, so lines from many daemons can be merged and sorted.
#pragma once

#include <string>

namespace sinkrt::device {

void DaemonLog(bool enabled, int rank, const std::string& text);

}  // namespace sinkrt::device
