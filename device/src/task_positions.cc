// Words for a stream position, as a stall report gives them.
#include "device/src/task_positions.h"

#include <cstdio>
#include <string_view>

#include "runtime/src/schema_enums.h"
#include "runtime/src/stream_names.h"
#include "sinkrt/fb/task_stream_generated.h"
#include "sinkrt/runtime/task_stream_verifier.h"

namespace sinkrt::device {
namespace {

// The array's text up to its NUL (a peer's bytes: never trusted to hold one).
template <size_t N>
std::string_view Text(const char (&s)[N]) {
  size_t n = 0;
  while (n < N && s[n] != '\0') ++n;
  return std::string_view(s, n);
}

std::string Duration(uint32_t ms) {
  if (ms < 1000) return std::to_string(ms) + " ms";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", ms / 1000.0);
  return buf;
}

const char* Doing(StreamState s) {
  switch (s) {
    case StreamState::kKernel:
      return "running a kernel";
    case StreamState::kCollective:
      return "in a collective";
    case StreamState::kGetNext:
      return "waiting for a batch";
    case StreamState::kEventWait:
      return "waiting for the other stream";
    default:
      return "";
  }
}

}  // namespace

std::string DescribeStreamPosition(const StreamPosition& p, int stream) {
  if (p.state == StreamState::kNone) return "";
  if (p.state == StreamState::kIdle) return "is idle (no sink running)";
  const auto program = static_cast<fb::ProgramKind>(p.program);
  std::string where(p.program <= static_cast<uint8_t>(fb::ProgramKind::MAX) ? ProgramKindName(program) : "program");
  if (p.streams > 1) where += stream == 0 ? " compute stream" : " comm stream";
  auto label = [&](int32_t task, std::string_view name, std::string_view what) {
    std::string l = "task " + std::to_string(task);
    if (!name.empty()) l += " '" + std::string(name) + "'";
    if (!what.empty()) l += " (" + std::string(what) + ")";
    return l;
  };
  const std::string step = std::to_string(p.step);
  if (p.state == StreamState::kDone)
    return "is done with " + where + " step " + step +
           (p.last_done >= 0 ? " (its last task " + label(p.last_done, Text(p.last_name), "") + ")" : "");
  const std::string current = where + " " + label(p.task, Text(p.task_name), Text(p.what)) + " at step " + step;
  if (p.state == StreamState::kFailed) return "failed in " + current;
  std::string out = "is in " + current + ", " + Doing(p.state) + " for " + Duration(p.for_ms);
  if (p.last_done < 0) {
    out += ", no task of this step completed yet";
  } else {
    out += ", last completed " + label(p.last_done, Text(p.last_name), "");
    if (p.last_done >= p.task) out += " of the step before";
  }
  return out;
}

}  // namespace sinkrt::device
