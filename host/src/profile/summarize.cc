// Summarize: per rank, per step, where the train step's time went; the
// top ops; AllReduce bandwidth per bucket; the slowest rank per step.
//
// Nouns: a "step" is one TrainStep step of one rank (the records sharing
// `step`); its "start" is the begin of its first compute-stream task. The
// compute stream runs its tasks one after another, so its task times and
// the gaps between them partition the step: that is what makes the split
// add up. Its event waits on a pipeline neighbour's transfer are bubble,
// its other waits and its collectives exposed communication.
#include "host/src/profile/summarize.h"

#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace sinkrt::host {
namespace {

constexpr uint8_t kTrainStep = 1;  // ProgramKind::TrainStep
constexpr double kNsPerMs = 1e6;

// One step of one rank, as its records add up (ns).
struct StepTotals {
  int64_t start = std::numeric_limits<int64_t>::max();  // compute stream's first begin
  int64_t last_end = std::numeric_limits<int64_t>::min();
  bool has_compute = false;
  int64_t compute = 0, exposed = 0, bubble = 0, queue = 0, comm = 0;
  double time = 0;  // filled once the next step is known
};

using Steps = std::map<uint32_t, StepTotals>;

// A record the analysis can use: it names a task of its rank and does not
// end before it begins.
const TaskInfo* UsableTask(const RankData& rank, const ProfileRecord& r) {
  if (r.end_ns < r.begin_ns) return nullptr;
  return FindTaskInfo(rank, r);
}

// The sink (index among the rank's TrainStep sink records) whose span holds
// `t`, or -1.
int SinkOf(const std::vector<std::pair<int64_t, int64_t>>& sinks, int64_t t) {
  for (size_t i = 0; i < sinks.size(); ++i)
    if (sinks[i].first <= t && t <= sinks[i].second) return static_cast<int>(i);
  return -1;
}

Steps TrainSteps(const RankData& rank) {
  Steps steps;
  std::vector<std::pair<int64_t, int64_t>> sinks;
  for (const ProfileRecord& r : rank.records) {
    if (r.program != kTrainStep) continue;
    if (r.kind == ProfileRecordKind::kSink) {
      if (r.end_ns >= r.begin_ns) sinks.emplace_back(r.begin_ns, r.end_ns);
      continue;
    }
    const TaskInfo* task = UsableTask(rank, r);
    if (!task) continue;
    StepTotals& s = steps[r.step];
    int64_t d = r.end_ns - r.begin_ns;
    if (task->collective) s.comm += d;
    if (r.stream != 0) continue;
    s.has_compute = true;
    s.start = std::min(s.start, r.begin_ns);
    s.last_end = std::max(s.last_end, r.end_ns);
    if (task->neighbour_wait)
      s.bubble += d;
    else if (task->collective || task->event_wait)
      s.exposed += d;
    else if (task->get_next)
      s.queue += std::clamp<int64_t>(r.wait_ns, 0, d);
    else
      s.compute += d;
  }
  // Steps with no compute-stream record have no start: not a step we can time.
  for (auto it = steps.begin(); it != steps.end();) it = it->second.has_compute ? std::next(it) : steps.erase(it);
  // A step runs until the next one starts when both ran in one sink (the
  // gap is the step's own dispatch); the last step of a sink ends with its
  // last compute task (what follows is the host's round trip). Without sink
  // records, consecutive steps count as one sink.
  for (auto it = steps.begin(); it != steps.end(); ++it) {
    StepTotals& s = it->second;
    int64_t end = s.last_end;
    auto next = std::next(it);
    if (next != steps.end() && next->first == it->first + 1 &&
        SinkOf(sinks, next->second.start) == SinkOf(sinks, s.start))
      end = next->second.start;
    s.time = static_cast<double>(std::max<int64_t>(0, end - s.start));
  }
  return steps;
}

RankStepSplit Split(int rank, const Steps& steps) {
  RankStepSplit out;
  out.rank = rank;
  out.steps = static_cast<int64_t>(steps.size());
  if (steps.empty()) return out;
  double time = 0, compute = 0, exposed = 0, bubble = 0, queue = 0, other = 0, comm = 0;
  for (const auto& [step, s] : steps) {
    time += s.time;
    compute += static_cast<double>(s.compute);
    exposed += static_cast<double>(s.exposed);
    bubble += static_cast<double>(s.bubble);
    queue += static_cast<double>(s.queue);
    other += std::max(0.0, s.time - static_cast<double>(s.compute + s.exposed + s.bubble + s.queue));
    comm += static_cast<double>(s.comm);
  }
  double n = static_cast<double>(steps.size()) * kNsPerMs;
  out.step_ms = time / n;
  out.compute_ms = compute / n;
  out.exposed_comm_ms = exposed / n;
  out.bubble_ms = bubble / n;
  out.queue_ms = queue / n;
  out.other_ms = other / n;
  out.comm_ms = comm / n;
  if (out.comm_ms > 0) out.overlap_pct = std::clamp(100.0 * (1.0 - out.exposed_comm_ms / out.comm_ms), 0.0, 100.0);
  return out;
}

// A task's identity across ranks: its name (ranks of one data-parallel job
// share names), else its place in the stream.
std::string TaskKey(const TaskInfo& task, const ProfileRecord& r) {
  if (!task.name.empty()) return task.name;
  std::string key = "#";  // built up: GCC 12 warns (-Wrestrict) on "#" + std::string
  key += std::to_string(r.stream);
  key += ':';
  key += std::to_string(r.task);
  return key;
}

// Per rank index: (task key, step) -> begin on the host clock, for the
// TrainStep collectives.
using CollectiveBegins = std::map<std::pair<std::string, uint32_t>, int64_t>;

CollectiveBegins Begins(const RankData& rank) {
  CollectiveBegins out;
  for (const ProfileRecord& r : rank.records) {
    if (r.program != kTrainStep) continue;
    const TaskInfo* task = UsableTask(rank, r);
    if (!task || !task->collective) continue;
    auto [it, inserted] = out.emplace(std::make_pair(TaskKey(*task, r), r.step), ToHostNs(rank, r.begin_ns));
    if (!inserted) it->second = std::min(it->second, ToHostNs(rank, r.begin_ns));
  }
  return out;
}

void Buckets(const ProfileData& data, ProfileSummary* out) {
  std::vector<CollectiveBegins> begins;
  for (const RankData& rank : data.ranks) begins.push_back(Begins(rank));
  auto index_of = [&](uint32_t world_rank) {
    for (size_t i = 0; i < data.ranks.size(); ++i)
      if (data.ranks[i].rank == static_cast<int>(world_rank)) return static_cast<int>(i);
    return -1;
  };
  for (size_t ri = 0; ri < data.ranks.size(); ++ri) {
    const RankData& rank = data.ranks[ri];
    struct Acc {
      int64_t count = 0, total_ns = 0;
      double wait_ns = 0;
    };
    // Keyed by (stream, task): the stream's order.
    std::map<std::pair<uint8_t, uint32_t>, Acc> acc;
    for (const ProfileRecord& r : rank.records) {
      if (r.program != kTrainStep) continue;
      const TaskInfo* task = UsableTask(rank, r);
      if (!task || task->op != "AllReduceTask") continue;
      Acc& a = acc[{r.stream, r.task}];
      ++a.count;
      a.total_ns += r.end_ns - r.begin_ns;
      int64_t own = ToHostNs(rank, r.begin_ns);
      int64_t latest = own;
      std::string key = TaskKey(*task, r);
      for (uint32_t member : task->group) {
        int mi = index_of(member);
        if (mi < 0 || static_cast<size_t>(mi) == ri) continue;
        auto it = begins[mi].find({key, r.step});
        if (it != begins[mi].end()) latest = std::max(latest, it->second);
      }
      a.wait_ns += static_cast<double>(latest - own);
    }
    for (const auto& [where, a] : acc) {
      const TaskInfo& task = rank.programs[kTrainStep].streams[where.first][where.second];
      BucketBandwidth b;
      b.rank = rank.rank;
      b.task = task.name;
      if (b.task.empty()) b.task = TaskKey(task, ProfileRecord{.task = where.second, .stream = where.first});
      b.bytes = task.bytes;
      b.group_size = static_cast<int>(task.group.size());
      b.count = a.count;
      b.mean_ms = static_cast<double>(a.total_ns) / kNsPerMs / static_cast<double>(a.count);
      if (b.mean_ms > 0) b.algbw_gbps = static_cast<double>(b.bytes) / (b.mean_ms * 1e-3) / 1e9;
      if (b.group_size > 0) b.busbw_gbps = b.algbw_gbps * 2.0 * (b.group_size - 1) / b.group_size;
      b.peer_wait_ms = a.wait_ns / kNsPerMs / static_cast<double>(a.count);
      out->buckets.push_back(std::move(b));
    }
  }
}

void Slowest(const ProfileData& data, const std::vector<Steps>& steps, ProfileSummary* out) {
  if (data.ranks.size() < 2) return;
  std::vector<int64_t> count(data.ranks.size(), 0);
  std::vector<double> gap_ns(data.ranks.size(), 0);
  for (const auto& [step, first] : steps[0]) {
    bool everywhere = true;
    for (const Steps& s : steps) everywhere = everywhere && s.count(step);
    if (!everywhere) continue;
    size_t slowest = 0;
    double fastest = steps[0].at(step).time;
    for (size_t i = 1; i < steps.size(); ++i) {
      double t = steps[i].at(step).time;
      if (t > steps[slowest].at(step).time) slowest = i;
      fastest = std::min(fastest, t);
    }
    ++count[slowest];
    gap_ns[slowest] += steps[slowest].at(step).time - fastest;
  }
  for (size_t i = 0; i < data.ranks.size(); ++i) {
    SlowestRank s;
    s.rank = data.ranks[i].rank;
    s.steps_slowest = count[i];
    if (count[i] > 0) s.mean_gap_ms = gap_ns[i] / kNsPerMs / static_cast<double>(count[i]);
    out->slowest.push_back(s);
  }
}

void TopOps(const ProfileData& data, ProfileSummary* out) {
  std::map<std::string, OpTotal> ops;
  double all_ns = 0;
  for (const RankData& rank : data.ranks)
    for (const ProfileRecord& r : rank.records) {
      const TaskInfo* task = UsableTask(rank, r);
      // An event wait is a stream idling until the other records: no work
      // of its own (the compute stream's show as exposed communication or
      // bubble).
      if (!task || task->event_wait) continue;
      OpTotal& op = ops[task->op];
      op.op = task->op;
      ++op.count;
      double d = static_cast<double>(r.end_ns - r.begin_ns);
      op.total_ms += d / kNsPerMs;
      all_ns += d;
    }
  for (auto& [name, op] : ops) {
    if (all_ns > 0) op.share_pct = 100.0 * op.total_ms * kNsPerMs / all_ns;
    out->top_ops.push_back(op);
  }
  std::stable_sort(out->top_ops.begin(), out->top_ops.end(),
                   [](const OpTotal& a, const OpTotal& b) { return a.total_ms > b.total_ms; });
  constexpr size_t kTopOps = 15;
  if (out->top_ops.size() > kTopOps) out->top_ops.resize(kTopOps);
}

// The host's RunSink wall time per TrainStep step. Every rank runs each
// sink at once, so one rank's calls (the lowest recorded) tell it.
double HostStepMs(const ProfileData& data) {
  int rank = std::numeric_limits<int>::max();
  for (const HostEvent& e : data.host)
    if (e.kind == HostEvent::Kind::kRunSink && e.program == kTrainStep) rank = std::min(rank, e.rank);
  int64_t ns = 0;
  uint64_t steps = 0;
  for (const HostEvent& e : data.host)
    if (e.kind == HostEvent::Kind::kRunSink && e.program == kTrainStep && e.rank == rank) {
      ns += e.end_ns - e.begin_ns;
      steps += e.arg;
    }
  return steps > 0 ? static_cast<double>(ns) / kNsPerMs / static_cast<double>(steps) : 0;
}

ClockAlignment Clock(const RankData& rank) {
  ClockAlignment c;
  c.rank = rank.rank;
  c.offset_us = static_cast<double>(rank.clock_start.offset_ns) / 1e3;
  c.uncertainty_us = static_cast<double>(rank.clock_start.uncertainty_ns) / 1e3;
  int64_t span = rank.clock_end.host_ns - rank.clock_start.host_ns;
  if (rank.clock_end.host_ns != 0 && span > 0)
    c.drift_ppm =
        static_cast<double>(rank.clock_end.offset_ns - rank.clock_start.offset_ns) / static_cast<double>(span) * 1e6;
  return c;
}

}  // namespace

ProfileSummary Summarize(const ProfileData& data) {
  ProfileSummary out;
  out.network = data.network;
  out.world_size = static_cast<int>(data.ranks.size());
  out.host_step_ms = HostStepMs(data);
  std::vector<Steps> steps;
  for (const RankData& rank : data.ranks) {
    steps.push_back(TrainSteps(rank));
    out.ranks.push_back(Split(rank.rank, steps.back()));
    out.steps = std::max(out.steps, out.ranks.back().steps);
    out.dropped_steps += rank.dropped_steps;
    out.memory.push_back(rank.memory);
    out.memory.back().rank = rank.rank;
    out.clocks.push_back(Clock(rank));
  }
  TopOps(data, &out);
  Buckets(data, &out);
  Slowest(data, steps, &out);
  return out;
}

}  // namespace sinkrt::host
