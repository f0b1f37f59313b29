// What a profiled run leaves, in one place: per rank the task tables of its
// stream, the device's records and its clock samples; the host's own events.
// The Profiler fills it while training; analysis (summary, trace, picture)
// reads only this, and trace.json carries all of it, so `sinkprof DIR`
// rebuilds it from the file and summarises the same way.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sinkrt/host/profiler.h"
#include "sinkrt/runtime/profile_record.h"
#include "sinkrt/runtime/task_stream_verifier.h"

namespace sinkrt::host {

// One task of a program's stream, as the trace names it.
struct TaskInfo {
  std::string name;  // the stream's task name ("" when it has none)
  std::string op;    // a kernel's op ("MatMul"), else the task kind ("GetNextTask")
  bool collective = false;
  bool get_next = false;
  bool event_wait = false;
  // A compute-stream event wait for a point-to-point transfer's "done" (the
  // event a comm stream records right after a Send or Recv, as the device
  // marks it at load): a pipeline stage waiting for its neighbour, which the
  // summary counts as bubble rather than exposed communication.
  bool neighbour_wait = false;
  uint64_t bytes = 0;           // collectives: the bytes this rank sends in (AllReduce: the bucket)
  std::vector<uint32_t> group;  // collectives: the group's world ranks
};

struct ProgramInfo {
  bool present = false;
  std::string name;                  // "train_step"
  std::vector<TaskInfo> streams[2];  // compute, comm
};

inline constexpr int kProfilePrograms = 4;  // ProgramKind: Init, TrainStep, EvalStep, PredictStep

struct RankData {
  int rank = 0;
  ProgramInfo programs[kProfilePrograms];
  MemoryPlan memory;
  ClockSample clock_start, clock_end;  // device - host
  std::vector<ProfileRecord> records;  // device clock, in arrival order
  uint64_t dropped_steps = 0;
};

struct HostEvent {
  enum class Kind : uint8_t { kPush, kCredit, kRunSink };
  Kind kind = Kind::kPush;
  int rank = 0;
  uint32_t queue = 0;
  int64_t begin_ns = 0, end_ns = 0;  // host clock (a credit: begin == end)
  uint64_t arg = 0;                  // push: the global batch; credit: slots; RunSink: steps
  uint8_t program = 1;               // RunSink: ProgramKind
};

struct ProfileData {
  std::string network;
  int64_t origin_ns = 0;  // host clock when recording started: the trace's time 0
  std::vector<RankData> ranks;
  std::vector<HostEvent> host;
};

// The task tables and memory plan of one rank's stream.
RankData DescribeRankStream(const VerifiedStream& stream, int rank);

// A device time of `rank` on the host's clock, the offset interpolated
// between the two samples (the start sample alone when there is no end).
int64_t ToHostNs(const RankData& rank, int64_t device_ns);

// The task a task record names, or null when it names none of `rank`'s
// tables (a record of another stream, or a corrupt one): analysis skips it.
const TaskInfo* FindTaskInfo(const RankData& rank, const ProfileRecord& record);

}  // namespace sinkrt::host
