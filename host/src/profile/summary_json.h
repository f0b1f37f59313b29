// The summary as summary.json holds it (and `sinkprof DIR --json` prints):
// the fields of ProfileSummary under their own names.
#pragma once

#include <nlohmann/json.hpp>

#include "sinkrt/host/profiler.h"

namespace sinkrt::host {

nlohmann::json SummaryJson(const ProfileSummary& summary);

}  // namespace sinkrt::host
