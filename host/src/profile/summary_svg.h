// steps.svg: one horizontal stacked bar per rank of its mean train step
// (compute, exposed comm, queue, other), drawn without a browser or any
// tool. Machine-checkable: every bar segment is a <rect> with data-rank,
// data-part and data-ms, and each rank's <g> carries data-rank and
// data-step-ms, so a test can check the parts sum to the step.
#pragma once

#include <string>

#include "sinkrt/host/profiler.h"

namespace sinkrt::host {

// A standalone SVG 1.1 document.
std::string SummarySvg(const ProfileSummary& summary);

}  // namespace sinkrt::host
