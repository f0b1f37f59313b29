// The summary of a profiled run (summary.txt, summary.json, steps.svg),
// computed from what the run left and nothing else, so `sinkprof DIR`
// rebuilding ProfileData from trace.json gets the same numbers.
// docs/guide/profiler.md defines every number.
#pragma once

#include "host/src/profile/profile_data.h"
#include "sinkrt/host/profiler.h"

namespace sinkrt::host {

// Never fails: records that name no task of their rank's tables, or end
// before they begin, are skipped; records may come in any order.
ProfileSummary Summarize(const ProfileData& data);

}  // namespace sinkrt::host
