/// \file
/// Profiler: where the sunk device's time went, per rank, per task, per step.
///
/// MindSpore's shape: construct a Profiler before training and call
/// analyse() after it. While one exists, every Model::train in the process
/// records: each device keeps a preallocated ring of task records (begin,
/// end, step, stream; GetNext waits and queue depth) that comes back with
/// each sink's answer, and the host records its own side (feeder pushes,
/// credits, RunSink calls). The devices' clocks are aligned to the host's by
/// round trips measured when recording starts and ends.
///
/// analyse() writes into the output directory (docs/guide/profiler.md):
/// ~~~
///   trace.json    Chrome trace / Perfetto timeline: every rank a process,
///                 with compute, comm and queue threads; the host a process
///   summary.txt   top ops, compute / comm / exposed comm / queue / other per
///                 rank, AllReduce bandwidth per bucket, overlap, the slowest
///                 rank per step, the memory plan, the clock offsets
///   summary.json  the same, as JSON
///   steps.svg     per rank, a stacked bar of where the mean step went
/// ~~~
/// `sinkprof DIR` prints the summary of a recorded directory again.
///
/// Threading: construct, analyse and destroy on the thread that trains.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "sinkrt/runtime/status.h"

namespace sinkrt::host {

/// Where a Profiler writes and which steps it records.
struct ProfilerOptions {
  std::string output_path;  ///< a directory; created by analyse()
  /// Steps counted per program from 1 since the Profiler started (MindSpore's
  /// numbering): record [start_step, stop_step], every `every`-th of them,
  /// and keep the last `keep_steps` recorded (sinkrun --profile-steps A:B,
  /// --profile-every K, --profile-keep N).
  /// @{
  uint64_t start_step = 1;
  uint64_t stop_step = std::numeric_limits<uint64_t>::max();
  uint32_t every = 1;
  uint32_t keep_steps = 200;
  /// @}
};

// --- The summary (summary.txt / summary.json) ---

/// One rank's mean step, split so that the parts add up to it.
struct RankStepSplit {
  int rank = 0;                ///< the rank
  int64_t steps = 0;           ///< profiled train steps
  double step_ms = 0;          ///< mean, step start to the next step's start (compute stream)
  double compute_ms = 0;       ///< kernels and init on the compute stream
  double exposed_comm_ms = 0;  ///< compute stream blocked on communication (event waits, inline collectives)
  double bubble_ms = 0;    ///< compute stream waiting for a neighbour pipeline stage (its Send/Recv); 0 without stages
  double queue_ms = 0;     ///< GetNext waiting for a batch
  double other_ms = 0;     ///< the rest: batch copies, dispatch, gaps
  double comm_ms = 0;      ///< all collective time, either stream (hidden or not)
  double overlap_pct = 0;  ///< share of comm_ms hidden behind compute: 100 * (1 - exposed / comm)
};

/// One op's share of the task time (the summary's top ops).
struct OpTotal {
  std::string op;        ///< a kernel's op ("MatMul"), else the task kind ("AllReduceTask")
  int64_t count = 0;     ///< tasks of it run
  double total_ms = 0;   ///< over every rank and profiled step
  double share_pct = 0;  ///< of all task time
};

/// One fusion bucket (one AllReduce task) on one rank.
struct BucketBandwidth {
  int rank = 0;             ///< the rank
  std::string task;         ///< the task's name in the stream
  uint64_t bytes = 0;       ///< the bucket's bytes
  int group_size = 0;       ///< ranks in its group
  int64_t count = 0;        ///< runs profiled
  double mean_ms = 0;       ///< mean time per run
  double algbw_gbps = 0;    ///< bytes / time, GB/s
  double busbw_gbps = 0;    ///< algbw * 2 (n - 1) / n: the ring's bytes per link
  double peer_wait_ms = 0;  ///< mean wait for the group's last rank to arrive (aligned clocks)
};

/// A rank that was the slowest in some steps.
struct SlowestRank {
  int rank = 0;               ///< the rank
  int64_t steps_slowest = 0;  ///< steps in which this rank's step took longest
  double mean_gap_ms = 0;     ///< in those steps, its step time minus the fastest rank's
};

/// One rank's memory: its arena and queues.
struct MemoryPlan {
  int rank = 0;                                           ///< the rank
  uint64_t arena_bytes = 0;                               ///< the arena's bytes
  uint64_t queue_bytes = 0;                               ///< all queue slots' bytes
  std::vector<std::pair<std::string, uint64_t>> by_role;  ///< "Param", "Grad", ...: bytes in the arena
};

/// One rank's device clock against the host's.
struct ClockAlignment {
  int rank = 0;               ///< the rank
  double offset_us = 0;       ///< device clock minus host clock, at the start
  double uncertainty_us = 0;  ///< half the best round trip
  double drift_ppm = 0;       ///< change of the offset between start and end
};

/// What a Profiler's analyse() finds: summary.txt and summary.json.
struct ProfileSummary {
  std::string network;                   ///< the trained network's name
  int world_size = 0;                    ///< ranks that trained
  int64_t steps = 0;                     ///< profiled train steps (per rank)
  double host_step_ms = 0;               ///< the host's RunSink wall time per step, profiled sinks
  uint64_t dropped_steps = 0;            ///< recorded steps the rings or keep_steps let go
  std::vector<RankStepSplit> ranks;      ///< per rank, the mean step split
  std::vector<OpTotal> top_ops;          ///< by total time, at most 15
  std::vector<BucketBandwidth> buckets;  ///< per rank and bucket, the AllReduce bandwidth
  std::vector<SlowestRank> slowest;      ///< ranks that were slowest in some steps
  std::vector<MemoryPlan> memory;        ///< per rank, the memory plan
  std::vector<ClockAlignment> clocks;    ///< per rank, the clock alignment
};

struct ProfileSession;  ///< what one Profiler has recorded (host/src/profile)

/// Records every training run in this process and analyses it (MindSpore's Profiler).
class Profiler {
 public:
  /// Starts recording for every Model::train in this process until analyse()
  /// or destruction. One Profiler at a time: a second one's status() says so.
  explicit Profiler(std::string output_path);
  /// Starts recording with `options`; as above.
  explicit Profiler(ProfilerOptions options);
  ~Profiler();
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  /// Why this Profiler records nothing, if it does not (another one is active).
  Status status() const;
  const ProfilerOptions& options() const { return options_; }  ///< where and what it records

  /// Stops recording, writes the output directory and returns its summary.
  Result<ProfileSummary> analyse();

  /// The Profiler recording now, or nullptr.
  static Profiler* Active();
  /// What it has recorded so far (for the training loop).
  ProfileSession& session() { return *session_; }

 private:
  ProfilerOptions options_;
  Status status_;
  std::unique_ptr<ProfileSession> session_;
};

/// Reads a directory analyse() wrote (its trace.json) and summarises it again.
Result<ProfileSummary> ReadProfile(const std::string& dir);
/// The summary as summary.txt holds it.
std::string SummaryText(const ProfileSummary& summary);
/// The summary as summary.json holds it (indented JSON).
std::string SummaryJsonText(const ProfileSummary& summary);

}  // namespace sinkrt::host
