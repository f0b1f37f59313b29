// sinkrun's profiler pieces: --profile-steps A:B and `sinkrun profile DIR`.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "sinkrun.h"

namespace sinkrt::tools {

Status ParseProfileSteps(const std::string& text, host::ProfilerOptions* options) {
  const size_t colon = text.find(':');
  auto number = [&](const std::string& part, uint64_t* out) -> bool {
    if (part.empty()) return true;
    char* end = nullptr;
    errno = 0;
    const unsigned long long v = std::strtoull(part.c_str(), &end, 10);
    if (errno != 0 || *end != '\0' || part[0] == '-' || v == 0) return false;
    *out = v;
    return true;
  };
  uint64_t start = 1, stop = UINT64_MAX;
  if (colon == std::string::npos || !number(text.substr(0, colon), &start) || !number(text.substr(colon + 1), &stop))
    return InvalidArgument("--profile-steps " + text +
                           ": expected A:B, steps counted from 1 (either side may be left out: 100:, :50)");
  if (stop < start) return InvalidArgument("--profile-steps " + text + ": the last step comes before the first");
  options->start_step = start;
  options->stop_step = stop;
  return Status::Ok();
}

int Profile(const std::string& dir, bool json) {
  auto summary = host::ReadProfile(dir);
  if (!summary.ok()) {
    std::fprintf(stderr, "sinkrun profile: %s\n", summary.status().ToString().c_str());
    return 1;
  }
  const std::string text = json ? host::SummaryJsonText(*summary) : host::SummaryText(*summary);
  std::fwrite(text.data(), 1, text.size(), stdout);
  return 0;
}

}  // namespace sinkrt::tools
