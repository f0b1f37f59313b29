// trace.json: a profiled run as a Chrome trace (chrome://tracing, Perfetto),
// and back. The trace is the run's only stored form: `otherData` and the
// events' args carry all of ProfileData, so ProfileDataFromTrace rebuilds it
// exactly and `sinkprof DIR` summarises what analyse() summarised.
//
// Layout (docs/guide/profiler.md): every rank is a process (pid = rank) with
// threads compute (tid 0), comm (1) and queue (2, every GetNext); the host
// is one more process (pid = the world size) with a "control rank R" thread
// per rank (its RunSink calls), a "feeder rank R" thread per rank (pushes)
// and "credits" (instant events). Times are µs from ProfileData::origin_ns,
// on the host's clock.
#pragma once

#include <nlohmann/json.hpp>

#include "host/src/profile/profile_data.h"
#include "sinkrt/runtime/status.h"

namespace sinkrt::host {

// Records of a kind other than kTask and kSink are left out.
nlohmann::json ChromeTrace(const ProfileData& data);

// Fails with kInvalidArgument naming the first part of `trace` that is
// missing or malformed ("otherData.ranks[1] has no 'tasks'").
Result<ProfileData> ProfileDataFromTrace(const nlohmann::json& trace);

}  // namespace sinkrt::host
