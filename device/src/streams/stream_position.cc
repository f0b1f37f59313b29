#include "device/src/streams/stream_position.h"

#include <algorithm>
#include <string_view>

#include "device/src/loaded_job.h"
#include "runtime/src/clock.h"
#include "runtime/src/stream_names.h"

namespace sinkrt::device {
namespace {

template <size_t N>
void CopyTruncated(std::string_view from, char (&to)[N]) {
  const size_t n = std::min(from.size(), N - 1);
  std::copy_n(from.data(), n, to);
  std::fill(to + n, to + N, '\0');
}

std::string_view NameOf(const PreparedTask& pt) { return pt.def->name() ? pt.def->name()->string_view() : ""; }

std::string_view WhatOf(const PreparedTask& pt) {
  return pt.kind == fb::TaskBody::KernelTask ? OpCodeName(pt.def->body_as_KernelTask()->op()) : TaskKindName(pt.kind);
}

}  // namespace

void JobPositions::Describe(TaskPositionReport* out) const {
  const int64_t now = NowNs();
  for (int s = 0; s < 2; ++s) {
    StreamPosition& p = out->streams[s];
    p = StreamPosition{};
    const StreamPositionCell& c = cells[s];
    const uint64_t where = c.where.load(std::memory_order_relaxed);
    const uint32_t program_step = c.program_step.load(std::memory_order_relaxed);
    const int64_t since = c.since_ns.load(std::memory_order_relaxed);
    const auto state = static_cast<StreamState>(where & 0xff);
    if (state == StreamState::kNone || state > StreamState::kDone) continue;
    p.state = state;
    if (state == StreamState::kIdle && program_step == 0) continue;  // no sink ran yet
    const uint32_t k = program_step >> 28;
    p.program = static_cast<uint8_t>(k);
    p.step = program_step & StreamPositionCell::kStepMask;
    p.task = static_cast<int32_t>((where >> 8) & StreamPositionCell::kTaskMask) - 1;
    p.last_done = static_cast<int32_t>((where >> 36) & StreamPositionCell::kTaskMask) - 1;
    p.for_ms = now > since ? static_cast<uint32_t>(std::min<int64_t>((now - since) / 1'000'000, UINT32_MAX)) : 0;
    if (k >= static_cast<uint32_t>(LoadedJob::kPrograms) || !job_.has_program[k]) continue;
    const PreparedProgram& prog = job_.programs[k];
    p.streams = static_cast<uint8_t>(prog.num_streams);
    if (s >= prog.num_streams) continue;
    const std::vector<PreparedTask>& tasks = prog.streams[s];
    if (p.task >= 0 && static_cast<size_t>(p.task) < tasks.size()) {
      CopyTruncated(NameOf(tasks[p.task]), p.task_name);
      CopyTruncated(WhatOf(tasks[p.task]), p.what);
    }
    if (p.last_done >= 0 && static_cast<size_t>(p.last_done) < tasks.size())
      CopyTruncated(NameOf(tasks[p.last_done]), p.last_name);
  }
}

}  // namespace sinkrt::device
