// The output directory of a profiled run (docs/guide/profiler.md): trace.json,
// summary.txt, summary.json and steps.svg. ReadProfile (profiler.h) reads
// its trace.json back.
#pragma once

#include <string>

#include "host/src/profile/profile_data.h"
#include "sinkrt/host/profiler.h"
#include "sinkrt/runtime/status.h"

namespace sinkrt::host {

// Creates `dir` (and its parents) if needed and writes the four files, each
// whole or not at all (a file is written beside and renamed). `summary`,
// when given, receives what summary.txt holds. Fails naming the path it
// could not create or write.
Status WriteProfileDir(const ProfileData& data, const std::string& dir, ProfileSummary* summary = nullptr);

}  // namespace sinkrt::host
