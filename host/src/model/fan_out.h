// Fan-out over the devices of a data-parallel Model: one request to every
// rank at once, and one answer for the caller.
//
// A world's members block for each other (JoinWorld, a Load whose init
// broadcasts, a sink whose AllReduce waits for every rank), so the host
// must ask them all concurrently, not one after another.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "sinkrt/runtime/status.h"

namespace sinkrt::host {

// Runs fn(rank) for ranks 0..n-1 at once: rank 0 on the calling thread, the
// others on a thread each. Returns every rank's status.
std::vector<Status> OnEveryRank(uint32_t n, const std::function<Status(uint32_t rank)>& fn);

// Ok when every rank is; otherwise the failures by rank, the first one that
// is not merely an abort (the echo of another rank's failure) leading and
// giving the code: "<what> failed on rank 1 of 3: <its error> (also rank 0:
// ...; rank 2: ...)". A world of one device keeps its error as it is.
Status CombineRankStatuses(const std::vector<Status>& statuses, const std::string& what);

}  // namespace sinkrt::host
