// The profiler's analysis half: a hand-built two-rank run with known times
// (docs/guide/profiler.md's definitions worked by hand), its trace out and back,
// the picture, the output directory, and bad directories.
#include <gtest/gtest.h>

#include <unistd.h>
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "host/src/profile/chrome_trace.h"
#include "host/src/profile/profile_data.h"
#include "host/src/profile/profile_dir.h"
#include "host/src/profile/summarize.h"
#include "host/src/profile/summary_json.h"
#include "host/src/profile/summary_svg.h"
#include "host/src/util/schema_enums.h"
#include "runtime/src/stream_names.h"
#include "sinkrt/fb/task_stream_generated.h"
#include "sinkrt/host/compiler.h"
#include "sinkrt/host/parallel_context.h"
#include "sinkrt/host/profiler.h"
#include "sinkrt/runtime/dtype.h"
#include "sinkrt/runtime/stream_format.h"
#include "support/test_models.h"
#include "support/text.h"

namespace sinkrt {
namespace {

using host::HostEvent;
using host::ProfileData;
using host::ProfileSummary;
using host::RankData;
using host::TaskInfo;
using nlohmann::json;

//===--- The hand-built run ---===//
//
// Two ranks, TrainStep streams alike:
//   compute: 0 get_next (GetNext), 1 fwd (MatMul), 2 bwd (MatMulGrad),
//            3 wait_grads (EventWait), 4 update (SgdUpdate)
//   comm:    0 allreduce_bucket0 (AllReduce, 4 MB, group {0, 1})
// and an init program (one InitTask, run on rank 0). Two steps in one sink.
// Times below are µs on the host clock from kOrigin; rank 1's device clock
// runs kOffset1 ahead of the host's, so its records hold host + kOffset1.
//
//             rank 0                          rank 1
// step 0  GN 0..500 (wait 300)            GN 200..500 (wait 100)
//         fwd 500..3500, bwd 3500..6500   fwd 500..3500, bwd 3500..7000
//         AR 5000..8000 (comm stream)     AR 5500..8000
//         wait 6500..8000, upd 8000..9000 wait 7000..8000, upd 8000..9000
// step 1  the same + 10000                the same + 10000, but
//                                         GN starts at 10000 (wait 300),
//                                         upd 18000..19500
//
// By hand (ms): rank 0 step 0 = 10 (to step 1's start), step 1 = 9 (last
// of its sink: to its last compute end); compute 7 and 7, exposed 1.5,
// queue 0.3, other 1.2 and 0.2, comm 3 -> overlap 50 %. Rank 1: steps 9.8
// and 9.5; compute 7.5 and 8, exposed 1, queue 0.1 and 0.3, other 1.2 and
// 0.2, comm 2.5 -> overlap 60 %. Rank 0 starts its AllReduce 0.5 ms before
// rank 1 (host clock): peer wait 0.5 ms; rank 1's is 0. Slowest: step 0
// rank 0 (by 0.2), step 1 rank 1 (by 0.5).
constexpr int64_t kOrigin = 1'000'000'000'000;
constexpr int64_t kOffset1 = 5'000'000;  // rank 1: device - host, ns
constexpr uint64_t kBucketBytes = 4'000'000;

TaskInfo Task(std::string name, std::string op) {
  TaskInfo t;
  t.name = std::move(name);
  t.op = std::move(op);
  t.get_next = t.op == "GetNextTask";
  t.event_wait = t.op == "EventWaitTask";
  t.collective = t.op == "AllReduceTask";
  if (t.collective) {
    t.bytes = kBucketBytes;
    t.group = {0, 1};
  }
  return t;
}

void DescribeStreams(RankData* r) {
  r->programs[0].present = true;
  r->programs[0].name = "init";
  r->programs[0].streams[0] = {Task("init", "InitTask")};
  host::ProgramInfo& train = r->programs[1];
  train.present = true;
  train.name = "train_step";
  train.streams[0] = {Task("get_next", "GetNextTask"), Task("fwd", "MatMul"), Task("bwd", "MatMulGrad"),
                      Task("wait_grads", "EventWaitTask"), Task("update", "SgdUpdate")};
  train.streams[1] = {Task("allreduce_bucket0", "AllReduceTask")};
}

ProfileRecord Rec(const RankData& r, uint8_t program, uint8_t stream, uint32_t task, uint32_t step, int64_t begin_us,
                  int64_t end_us, int64_t wait_us = 0, uint32_t depth = 0) {
  int64_t offset = r.rank == 1 ? kOffset1 : 0;
  ProfileRecord rec;
  rec.begin_ns = kOrigin + begin_us * 1000 + offset;
  rec.end_ns = kOrigin + end_us * 1000 + offset;
  rec.wait_ns = wait_us * 1000;
  rec.step = step;
  rec.task = task;
  rec.depth = depth;
  rec.stream = stream;
  rec.program = program;
  return rec;
}

ProfileRecord Sink(const RankData& r, int64_t begin_us, int64_t end_us, uint32_t first_step, uint32_t steps) {
  ProfileRecord rec = Rec(r, 1, 0, 0, first_step, begin_us, end_us);
  rec.kind = ProfileRecordKind::kSink;
  rec.depth = steps;
  return rec;
}

// One step of rank `r`: `start` is GetNext's begin, `bwd_end` when the
// backward ends, `ar_begin` the AllReduce's begin, `upd_end` the update's end.
void AddStep(RankData* r, uint32_t step, int64_t base, int64_t start, int64_t gn_wait, int64_t bwd_end,
             int64_t ar_begin, int64_t upd_end) {
  auto& rec = r->records;
  rec.push_back(Rec(*r, 1, 0, 0, step, base + start, base + 500, gn_wait, /*depth=*/2));
  rec.push_back(Rec(*r, 1, 0, 1, step, base + 500, base + 3500));
  rec.push_back(Rec(*r, 1, 0, 2, step, base + 3500, base + bwd_end));
  rec.push_back(Rec(*r, 1, 1, 0, step, base + ar_begin, base + 8000));
  rec.push_back(Rec(*r, 1, 0, 3, step, base + bwd_end, base + 8000));
  rec.push_back(Rec(*r, 1, 0, 4, step, base + 8000, base + upd_end));
}

ProfileData HandRun() {
  ProfileData d;
  d.network = "hand<mlp>";
  d.origin_ns = kOrigin;
  for (int rank = 0; rank < 2; ++rank) {
    RankData r;
    r.rank = rank;
    DescribeStreams(&r);
    r.memory.rank = rank;
    r.memory.arena_bytes = 3 << 20;
    r.memory.queue_bytes = 1 << 20;
    r.memory.by_role = {{"Activation", 1 << 20}, {"Param", 1 << 20}, {"Grad", 1 << 20}};
    if (rank == 1) {
      r.clock_start = {.offset_ns = kOffset1, .uncertainty_ns = 20'000, .host_ns = kOrigin - 10'000'000};
      r.clock_end = {.offset_ns = kOffset1, .uncertainty_ns = 30'000, .host_ns = kOrigin + 30'000'000};
      r.dropped_steps = 3;
    } else {
      r.clock_start = {.offset_ns = 0, .uncertainty_ns = 10'000, .host_ns = kOrigin - 10'000'000};
    }
    if (rank == 0) r.records.push_back(Rec(r, 0, 0, 0, 0, -5000, -3000));
    r.records.push_back(Sink(r, -500, rank == 0 ? 19500 : 19800, 0, 2));
    if (rank == 0) {
      AddStep(&r, 0, 0, 0, 300, 6500, 5000, 9000);
      AddStep(&r, 1, 10000, 0, 300, 6500, 5000, 9000);
    } else {
      AddStep(&r, 0, 0, 200, 100, 7000, 5500, 9000);
      AddStep(&r, 1, 10000, 0, 300, 7000, 5500, 9500);
    }
    // Records may arrive in any order.
    std::reverse(r.records.begin(), r.records.end());
    d.ranks.push_back(std::move(r));
  }
  auto host_ns = [](int64_t us) { return kOrigin + us * 1000; };
  d.host.push_back({.kind = HostEvent::Kind::kPush,
                    .rank = 0,
                    .queue = 0,
                    .begin_ns = host_ns(-2000),
                    .end_ns = host_ns(-1900),
                    .arg = 7});
  d.host.push_back({.kind = HostEvent::Kind::kPush,
                    .rank = 1,
                    .queue = 0,
                    .begin_ns = host_ns(-1900),
                    .end_ns = host_ns(-1800),
                    .arg = 7});
  d.host.push_back({.kind = HostEvent::Kind::kRunSink,
                    .rank = 0,
                    .begin_ns = host_ns(-1000),
                    .end_ns = host_ns(20000),
                    .arg = 2,
                    .program = 1});
  d.host.push_back({.kind = HostEvent::Kind::kRunSink,
                    .rank = 1,
                    .begin_ns = host_ns(-900),
                    .end_ns = host_ns(20100),
                    .arg = 2,
                    .program = 1});
  d.host.push_back({.kind = HostEvent::Kind::kCredit,
                    .rank = 0,
                    .queue = 0,
                    .begin_ns = host_ns(100),
                    .end_ns = host_ns(100),
                    .arg = 1});
  return d;
}

const host::RankStepSplit& SplitOf(const ProfileSummary& s, int rank) {
  for (const auto& r : s.ranks)
    if (r.rank == rank) return r;
  ADD_FAILURE() << "no rank " << rank;
  return s.ranks.at(0);
}

//===--- Summarize ---===//

TEST(ProfileAnalysisSummary, SplitsEachRanksStepAsWorkedByHand) {
  ProfileSummary s = host::Summarize(HandRun());
  EXPECT_EQ(s.network, "hand<mlp>");
  EXPECT_EQ(s.world_size, 2);
  EXPECT_EQ(s.steps, 2);
  EXPECT_EQ(s.dropped_steps, 3u);
  EXPECT_DOUBLE_EQ(s.host_step_ms, 10.5);  // rank 0's RunSink: 21 ms for 2 steps
  ASSERT_EQ(s.ranks.size(), 2u);

  const auto& r0 = SplitOf(s, 0);
  EXPECT_EQ(r0.steps, 2);
  EXPECT_DOUBLE_EQ(r0.step_ms, 9.5);
  EXPECT_DOUBLE_EQ(r0.compute_ms, 7.0);
  EXPECT_DOUBLE_EQ(r0.exposed_comm_ms, 1.5);
  EXPECT_DOUBLE_EQ(r0.queue_ms, 0.3);
  EXPECT_NEAR(r0.other_ms, 0.7, 1e-12);
  EXPECT_DOUBLE_EQ(r0.comm_ms, 3.0);
  EXPECT_NEAR(r0.overlap_pct, 50.0, 1e-9);

  const auto& r1 = SplitOf(s, 1);
  EXPECT_DOUBLE_EQ(r1.step_ms, 9.65);
  EXPECT_DOUBLE_EQ(r1.compute_ms, 7.75);
  EXPECT_DOUBLE_EQ(r1.exposed_comm_ms, 1.0);
  EXPECT_DOUBLE_EQ(r1.queue_ms, 0.2);
  EXPECT_NEAR(r1.other_ms, 0.7, 1e-12);
  EXPECT_DOUBLE_EQ(r1.comm_ms, 2.5);
  EXPECT_NEAR(r1.overlap_pct, 60.0, 1e-9);

  for (const auto& r : s.ranks) {
    EXPECT_EQ(r.bubble_ms, 0) << "rank " << r.rank << ": no pipeline stages, no neighbours to wait for";
    EXPECT_NEAR(r.compute_ms + r.exposed_comm_ms + r.queue_ms + r.other_ms, r.step_ms, 1e-9) << "rank " << r.rank;
  }
}

// The same run with rank 1's wait marked as one on a pipeline neighbour's
// transfer: those 1 ms per step move from exposed comm to bubble, nothing
// else moves, and the trace carries the mark back.
TEST(ProfileAnalysisSummary, NeighbourWaitsAreBubbleNotExposedComm) {
  ProfileData d = HandRun();
  d.ranks[1].programs[1].streams[0][3].neighbour_wait = true;
  ProfileSummary s = host::Summarize(d);
  ProfileSummary before = host::Summarize(HandRun());
  const auto& r1 = SplitOf(s, 1);
  EXPECT_DOUBLE_EQ(r1.bubble_ms, 1.0);
  EXPECT_DOUBLE_EQ(r1.exposed_comm_ms, 0.0);
  EXPECT_DOUBLE_EQ(r1.compute_ms, SplitOf(before, 1).compute_ms);
  EXPECT_DOUBLE_EQ(r1.queue_ms, SplitOf(before, 1).queue_ms);
  EXPECT_NEAR(r1.other_ms, SplitOf(before, 1).other_ms, 1e-12);
  EXPECT_DOUBLE_EQ(r1.step_ms, SplitOf(before, 1).step_ms);
  EXPECT_NEAR(r1.overlap_pct, 100.0, 1e-9);  // overlap compares exposed comm alone with comm
  EXPECT_NEAR(r1.compute_ms + r1.exposed_comm_ms + r1.bubble_ms + r1.queue_ms + r1.other_ms, r1.step_ms, 1e-9);
  EXPECT_EQ(host::SummaryJson(s)["ranks"][0], host::SummaryJson(before)["ranks"][0]);  // rank 0 untouched
  EXPECT_EQ(host::SummaryJson(s)["ranks"][1]["bubble_ms"], 1.0);
  EXPECT_NE(host::SummaryText(s).find("bubble"), std::string::npos);

  json trace = host::ChromeTrace(d);
  size_t marked = 0;
  for (const json& ev : trace["traceEvents"])
    if (ev.value("cat", "") == "task" && ev["args"].value("bubble", false)) {
      EXPECT_EQ(ev["pid"], 1);
      EXPECT_EQ(ev["args"]["task"], 3);
      ++marked;
    }
  EXPECT_EQ(marked, 2u);  // rank 1's wait in each of its two steps
  auto back = host::ProfileDataFromTrace(json::parse(trace.dump()));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(back->ranks[1].programs[1].streams[0][3].neighbour_wait);
  EXPECT_EQ(host::SummaryJson(host::Summarize(*back)), host::SummaryJson(s));
}

TEST(ProfileAnalysisSummary, BucketBandwidthAndPeerWaitOnAlignedClocks) {
  ProfileSummary s = host::Summarize(HandRun());
  ASSERT_EQ(s.buckets.size(), 2u);
  const auto& b0 = s.buckets[0];
  EXPECT_EQ(b0.rank, 0);
  EXPECT_EQ(b0.task, "allreduce_bucket0");
  EXPECT_EQ(b0.bytes, kBucketBytes);
  EXPECT_EQ(b0.group_size, 2);
  EXPECT_EQ(b0.count, 2);
  EXPECT_DOUBLE_EQ(b0.mean_ms, 3.0);
  EXPECT_NEAR(b0.algbw_gbps, 4e6 / 3e-3 / 1e9, 1e-9);
  EXPECT_NEAR(b0.busbw_gbps, b0.algbw_gbps * 2 * (2 - 1) / 2, 1e-12);
  // Rank 1's device clock is 5 ms ahead: unaligned, rank 0 would seem to
  // wait 5.5 ms.
  EXPECT_NEAR(b0.peer_wait_ms, 0.5, 1e-12);
  const auto& b1 = s.buckets[1];
  EXPECT_EQ(b1.rank, 1);
  EXPECT_DOUBLE_EQ(b1.mean_ms, 2.5);
  EXPECT_NEAR(b1.algbw_gbps, 1.6, 1e-9);
  EXPECT_DOUBLE_EQ(b1.peer_wait_ms, 0.0);
}

TEST(ProfileAnalysisSummary, SlowestRankPerStep) {
  ProfileSummary s = host::Summarize(HandRun());
  ASSERT_EQ(s.slowest.size(), 2u);
  EXPECT_EQ(s.slowest[0].rank, 0);
  EXPECT_EQ(s.slowest[0].steps_slowest, 1);  // step 0: 10 vs 9.8
  EXPECT_NEAR(s.slowest[0].mean_gap_ms, 0.2, 1e-12);
  EXPECT_EQ(s.slowest[1].rank, 1);
  EXPECT_EQ(s.slowest[1].steps_slowest, 1);  // step 1: 9.5 vs 9
  EXPECT_NEAR(s.slowest[1].mean_gap_ms, 0.5, 1e-12);
}

TEST(ProfileAnalysisSummary, TopOpsOverEveryProgramAndRank) {
  ProfileSummary s = host::Summarize(HandRun());
  // Event waits are idling, not work: left out.
  std::vector<std::pair<std::string, double>> want = {{"MatMulGrad", 13}, {"MatMul", 12},  {"AllReduceTask", 11},
                                                      {"SgdUpdate", 4.5}, {"InitTask", 2}, {"GetNextTask", 1.8}};
  ASSERT_EQ(s.top_ops.size(), want.size());
  double share = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(s.top_ops[i].op, want[i].first);
    EXPECT_NEAR(s.top_ops[i].total_ms, want[i].second, 1e-9) << want[i].first;
    EXPECT_NEAR(s.top_ops[i].share_pct, 100 * want[i].second / 44.3, 1e-9) << want[i].first;
    share += s.top_ops[i].share_pct;
  }
  EXPECT_NEAR(share, 100, 1e-9);
  EXPECT_EQ(s.top_ops[0].count, 4);
  EXPECT_EQ(s.top_ops[4].count, 1);
}

TEST(ProfileAnalysisSummary, MemoryAndClocks) {
  ProfileSummary s = host::Summarize(HandRun());
  ASSERT_EQ(s.memory.size(), 2u);
  EXPECT_EQ(s.memory[1].rank, 1);
  EXPECT_EQ(s.memory[1].arena_bytes, 3u << 20);
  ASSERT_EQ(s.memory[1].by_role.size(), 3u);
  EXPECT_EQ(s.memory[1].by_role[1].first, "Param");
  ASSERT_EQ(s.clocks.size(), 2u);
  EXPECT_DOUBLE_EQ(s.clocks[1].offset_us, 5000);
  EXPECT_DOUBLE_EQ(s.clocks[1].uncertainty_us, 20);
  EXPECT_DOUBLE_EQ(s.clocks[1].drift_ppm, 0);
  EXPECT_DOUBLE_EQ(s.clocks[0].drift_ppm, 0);  // no end sample
}

TEST(ProfileAnalysisSummary, ClockOffsetIsInterpolatedBetweenTheSamples) {
  RankData r;
  r.clock_start = {.offset_ns = 1000, .uncertainty_ns = 5, .host_ns = 1'000'000'000};
  EXPECT_EQ(host::ToHostNs(r, 1'000'001'000), 1'000'000'000);  // no end sample: the start's offset
  r.clock_end = {.offset_ns = 2000, .uncertainty_ns = 5, .host_ns = 2'000'000'000};
  EXPECT_EQ(host::ToHostNs(r, 1'000'001'000), 1'000'000'000);
  EXPECT_EQ(host::ToHostNs(r, 2'000'002'000), 2'000'000'000);
  EXPECT_EQ(host::ToHostNs(r, 1'500'001'500), 1'500'000'000);
  ProfileData d;
  d.ranks.push_back(r);
  ProfileSummary s = host::Summarize(d);
  ASSERT_EQ(s.clocks.size(), 1u);
  EXPECT_DOUBLE_EQ(s.clocks[0].offset_us, 1);
  EXPECT_DOUBLE_EQ(s.clocks[0].drift_ppm, 1);  // 1 µs over 1 s
}

TEST(ProfileAnalysisSummary, SkipsRecordsThatNameNoTaskAndNeverCrashes) {
  ProfileData d = HandRun();
  RankData& r1 = d.ranks[1];
  r1.records.push_back(Rec(r1, 1, 0, 99, 0, 0, 100));    // task outside the table
  r1.records.push_back(Rec(r1, 7, 0, 0, 0, 0, 100));     // no such program
  r1.records.push_back(Rec(r1, 1, 5, 0, 0, 0, 100));     // no such stream
  r1.records.push_back(Rec(r1, 2, 0, 0, 0, 0, 100));     // a program the stream lacks
  r1.records.push_back(Rec(r1, 1, 0, 1, 0, 3500, 500));  // ends before it begins
  ProfileRecord odd = Rec(r1, 1, 0, 1, 0, 0, 100);
  odd.kind = static_cast<ProfileRecordKind>(9);  // a kind this build does not know
  r1.records.push_back(odd);
  EXPECT_EQ(host::SummaryJson(host::Summarize(d)), host::SummaryJson(host::Summarize(HandRun())));

  // The trace keeps every task record, named or not, and reads back the same.
  json trace = host::ChromeTrace(d);
  auto back = host::ProfileDataFromTrace(json::parse(trace.dump()));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->ranks[1].records.size(), d.ranks[1].records.size() - 1);  // all but the unknown kind
  EXPECT_EQ(host::SummaryJson(host::Summarize(*back)), host::SummaryJson(host::Summarize(HandRun())));

  ProfileData empty;
  ProfileSummary s = host::Summarize(empty);
  EXPECT_EQ(s.world_size, 0);
  EXPECT_FALSE(host::SummaryText(s).empty());
  EXPECT_NE(host::SummarySvg(s).find("</svg>"), std::string::npos);
}

//===--- trace.json ---===//

bool SameRecord(const ProfileRecord& a, const ProfileRecord& b) {
  return a.begin_ns == b.begin_ns && a.end_ns == b.end_ns && a.wait_ns == b.wait_ns && a.step == b.step &&
         a.task == b.task && a.depth == b.depth && a.stream == b.stream && a.program == b.program && a.kind == b.kind;
}

bool SameTask(const TaskInfo& a, const TaskInfo& b) {
  return a.name == b.name && a.op == b.op && a.collective == b.collective && a.get_next == b.get_next &&
         a.event_wait == b.event_wait && a.neighbour_wait == b.neighbour_wait && a.bytes == b.bytes &&
         a.group == b.group;
}

void ExpectSameData(const ProfileData& a, const ProfileData& b) {
  EXPECT_EQ(a.network, b.network);
  EXPECT_EQ(a.origin_ns, b.origin_ns);
  ASSERT_EQ(a.ranks.size(), b.ranks.size());
  for (size_t i = 0; i < a.ranks.size(); ++i) {
    const RankData &x = a.ranks[i], &y = b.ranks[i];
    EXPECT_EQ(x.rank, y.rank);
    EXPECT_EQ(x.dropped_steps, y.dropped_steps);
    EXPECT_EQ(x.clock_start.offset_ns, y.clock_start.offset_ns);
    EXPECT_EQ(x.clock_start.uncertainty_ns, y.clock_start.uncertainty_ns);
    EXPECT_EQ(x.clock_start.host_ns, y.clock_start.host_ns);
    EXPECT_EQ(x.clock_end.offset_ns, y.clock_end.offset_ns);
    EXPECT_EQ(x.clock_end.host_ns, y.clock_end.host_ns);
    EXPECT_EQ(x.memory.arena_bytes, y.memory.arena_bytes);
    EXPECT_EQ(x.memory.queue_bytes, y.memory.queue_bytes);
    EXPECT_EQ(x.memory.by_role, y.memory.by_role);
    for (int p = 0; p < host::kProfilePrograms; ++p) {
      EXPECT_EQ(x.programs[p].present, y.programs[p].present);
      EXPECT_EQ(x.programs[p].name, y.programs[p].name);
      for (int s = 0; s < 2; ++s) {
        ASSERT_EQ(x.programs[p].streams[s].size(), y.programs[p].streams[s].size());
        for (size_t t = 0; t < x.programs[p].streams[s].size(); ++t)
          EXPECT_TRUE(SameTask(x.programs[p].streams[s][t], y.programs[p].streams[s][t]))
              << "rank " << i << " program " << p << " stream " << s << " task " << t;
      }
    }
    ASSERT_EQ(x.records.size(), y.records.size());
    for (size_t k = 0; k < x.records.size(); ++k)
      EXPECT_TRUE(SameRecord(x.records[k], y.records[k])) << "rank " << i << " record " << k;
  }
  ASSERT_EQ(a.host.size(), b.host.size());
  for (size_t k = 0; k < a.host.size(); ++k) {
    const HostEvent &x = a.host[k], &y = b.host[k];
    EXPECT_TRUE(x.kind == y.kind && x.rank == y.rank && x.queue == y.queue && x.begin_ns == y.begin_ns &&
                x.end_ns == y.end_ns && x.arg == y.arg && x.program == y.program)
        << "host event " << k;
  }
}

TEST(ProfileAnalysisTrace, IsChromeTraceJsonWithEveryTaskRecord) {
  ProfileData d = HandRun();
  json trace = json::parse(host::ChromeTrace(d).dump());
  ASSERT_TRUE(trace.is_object());
  EXPECT_EQ(trace["displayTimeUnit"], "ns");
  ASSERT_TRUE(trace["traceEvents"].is_array());
  size_t records = 0;
  for (const RankData& r : d.ranks)
    for (const ProfileRecord& rec : r.records) records += rec.kind == ProfileRecordKind::kTask;
  size_t tasks = 0, sinks = 0;
  std::map<std::pair<int, int>, std::string> thread_names;
  std::map<int, std::string> process_names;
  std::vector<std::pair<double, double>> allreduce[2];
  for (const json& ev : trace["traceEvents"]) {
    ASSERT_TRUE(ev.contains("ph") && ev.contains("pid") && ev.contains("name")) << ev.dump();
    if (ev["ph"] == "M") {
      if (ev["name"] == "thread_name")
        thread_names[{ev["pid"].get<int>(), ev["tid"].get<int>()}] = ev["args"]["name"].get<std::string>();
      if (ev["name"] == "process_name") process_names[ev["pid"].get<int>()] = ev["args"]["name"].get<std::string>();
      continue;
    }
    ASSERT_TRUE(ev.contains("ts") && ev["ts"].is_number() && ev.contains("tid")) << ev.dump();
    if (ev["ph"] == "X") {
      ASSERT_TRUE(ev.contains("dur") && ev["dur"].is_number() && ev["dur"] >= 0) << ev.dump();
      ASSERT_TRUE(ev["name"].is_string() && !ev["name"].get<std::string>().empty()) << ev.dump();
    }
    if (ev.value("cat", "") == "sink") ++sinks;
    if (ev.value("cat", "") != "task") continue;
    ++tasks;
    const json& args = ev["args"];
    if (args["op"] == "GetNextTask") {
      EXPECT_EQ(ev["tid"], 2);
      EXPECT_TRUE(args.contains("wait_us") && args.contains("depth"));
    }
    if (args["op"] == "AllReduceTask") {
      EXPECT_EQ(ev["tid"], 1);
      EXPECT_EQ(args["bytes"], kBucketBytes);
      EXPECT_EQ(args["group_size"], 2);
      allreduce[ev["pid"].get<int>()].emplace_back(ev["ts"].get<double>(),
                                                   ev["ts"].get<double>() + ev["dur"].get<double>());
    }
    if (args["op"] == "MatMul") {
      EXPECT_EQ(ev["tid"], 0);
      // Both ranks' fwd of step 1 began at 500 µs on the host clock; rank
      // 1's device said 5500.
      if (args["step"] == 1) {
        EXPECT_DOUBLE_EQ(ev["ts"].get<double>(), 500.0) << "rank " << ev["pid"];
      }
      EXPECT_EQ(args["program"], "train_step");
    }
  }
  EXPECT_EQ(tasks, records);
  EXPECT_EQ(sinks, 2u);
  EXPECT_EQ(process_names[0], "rank 0");
  EXPECT_EQ(process_names[1], "rank 1");
  EXPECT_EQ(process_names[2], "host");
  EXPECT_EQ((thread_names[{1, 0}]), "compute");
  EXPECT_EQ((thread_names[{1, 1}]), "comm");
  EXPECT_EQ((thread_names[{1, 2}]), "queue");
  EXPECT_EQ((thread_names[{2, 0}]), "control rank 0");
  EXPECT_EQ((thread_names[{2, 1001}]), "feeder rank 1");
  EXPECT_EQ((thread_names[{2, 2000}]), "credits");
  // After alignment the two ranks' AllReduce slices overlap, step by step.
  ASSERT_EQ(allreduce[0].size(), 2u);
  ASSERT_EQ(allreduce[1].size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    auto [a0, a1] = allreduce[0][i];
    bool overlaps = false;
    for (auto [b0, b1] : allreduce[1]) overlaps = overlaps || (a0 < b1 && b0 < a1);
    EXPECT_TRUE(overlaps) << "rank 0 AllReduce at " << a0;
  }
}

TEST(ProfileAnalysisTrace, ReadsBackTheSameDataAndSummary) {
  ProfileData d = HandRun();
  std::string text = host::ChromeTrace(d).dump();
  auto back = host::ProfileDataFromTrace(json::parse(text));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ExpectSameData(d, *back);
  EXPECT_EQ(host::SummaryJson(host::Summarize(*back)), host::SummaryJson(host::Summarize(d)));
  EXPECT_EQ(host::ChromeTrace(*back).dump(), text);
}

TEST(ProfileAnalysisTrace, NamesWhatIsWrongInABadTrace) {
  json good = host::ChromeTrace(HandRun());
  auto error = [](const json& t) {
    auto r = host::ProfileDataFromTrace(t);
    return r.ok() ? std::string("(read)") : r.status().message();
  };
  json t = good;
  t["otherData"]["ranks"][1].erase("tasks");
  EXPECT_EQ(error(t), "otherData.ranks[1] has no 'tasks'");
  t = good;
  t["otherData"]["ranks"][0]["tasks"][1]["streams"][0][2]["op"] = 7;
  EXPECT_EQ(error(t), "otherData.ranks[0].tasks[1].streams[0][2].op is not a string");
  t = good;
  t["otherData"]["ranks"][1]["clock_start"]["offset_ns"] = "soon";
  EXPECT_EQ(error(t), "otherData.ranks[1].clock_start.offset_ns is not an integer");
  t = good;
  t["otherData"]["ranks"][0]["tasks"][0]["program"] = 9;
  EXPECT_NE(error(t).find("otherData.ranks[0].tasks[0].program is 9"), std::string::npos) << error(t);
  t = good;
  t.erase("otherData");
  EXPECT_EQ(error(t), "the trace has no 'otherData'");
  t = good;
  t["otherData"]["version"] = 99;
  EXPECT_NE(error(t).find("version is 99"), std::string::npos) << error(t);
  t = good;
  for (json& ev : t["traceEvents"])
    if (ev.value("cat", "") == "task") {
      ev["pid"] = 5;
      break;
    }
  EXPECT_NE(error(t).find("has pid 5"), std::string::npos) << error(t);
  t = good;
  for (json& ev : t["traceEvents"])
    if (ev.value("cat", "") == "task") {
      ev["args"].erase("device_begin_ns");
      break;
    }
  EXPECT_NE(error(t).find(".args has no 'device_begin_ns'"), std::string::npos) << error(t);
  EXPECT_EQ(error(json::array()), "the trace is not a JSON object");
}

//===--- steps.svg ---===//

// A minimal XML check: tags balance, one root, and the attributes of every
// element, in document order.
struct Element {
  std::string name;
  std::map<std::string, std::string> attrs;
};

::testing::AssertionResult ParseXml(const std::string& xml, std::vector<Element>* elements) {
  std::vector<std::string> open;
  int roots = 0;
  size_t i = 0;
  std::regex attr_re(R"re(([A-Za-z_:][-A-Za-z0-9_:.]*)="([^"<]*)")re");
  while ((i = xml.find('<', i)) != std::string::npos) {
    if (xml.compare(i, 4, "<!--") == 0) {
      i = xml.find("-->", i);
      if (i == std::string::npos) return ::testing::AssertionFailure() << "unclosed comment";
      continue;
    }
    size_t end = xml.find('>', i);
    if (end == std::string::npos) return ::testing::AssertionFailure() << "unclosed tag at " << i;
    std::string tag = xml.substr(i + 1, end - i - 1);
    i = end + 1;
    if (tag.starts_with("?")) continue;  // the XML declaration
    if (tag.starts_with("/")) {
      if (open.empty() || open.back() != tag.substr(1))
        return ::testing::AssertionFailure()
               << "</" << tag.substr(1) << "> closes " << (open.empty() ? "nothing" : "<" + open.back() + ">");
      open.pop_back();
      continue;
    }
    bool self_closing = tag.ends_with("/");
    if (self_closing) tag.pop_back();
    Element e;
    e.name = tag.substr(0, tag.find_first_of(" \n\t"));
    for (std::sregex_iterator it(tag.begin(), tag.end(), attr_re), stop; it != stop; ++it) e.attrs[(*it)[1]] = (*it)[2];
    if (open.empty()) ++roots;
    elements->push_back(e);
    if (!self_closing) open.push_back(e.name);
  }
  if (!open.empty()) return ::testing::AssertionFailure() << "<" << open.back() << "> is never closed";
  if (roots != 1) return ::testing::AssertionFailure() << roots << " root elements";
  return ::testing::AssertionSuccess();
}

TEST(ProfileAnalysisSvg, IsWellFormedAndItsBarsSumToTheStep) {
  ProfileData d = HandRun();
  d.network = "a<b>&\"c\"";  // escaped in the title
  ProfileSummary s = host::Summarize(d);
  std::string svg = host::SummarySvg(s);
  std::vector<Element> elements;
  ASSERT_TRUE(ParseXml(svg, &elements)) << svg;
  ASSERT_FALSE(elements.empty());
  EXPECT_EQ(elements[0].name, "svg");
  EXPECT_EQ(elements[0].attrs["xmlns"], "http://www.w3.org/2000/svg");
  EXPECT_NE(svg.find("a&lt;b&gt;&amp;&quot;c&quot;"), std::string::npos);
  std::map<std::string, double> step_ms, sum_ms;
  std::map<std::string, std::vector<std::string>> parts;
  for (const Element& e : elements) {
    if (e.name == "g" && e.attrs.count("data-step-ms"))
      step_ms[e.attrs.at("data-rank")] = std::stod(e.attrs.at("data-step-ms"));
    if (e.name == "rect" && e.attrs.count("data-part")) {
      sum_ms[e.attrs.at("data-rank")] += std::stod(e.attrs.at("data-ms"));
      parts[e.attrs.at("data-rank")].push_back(e.attrs.at("data-part"));
    }
  }
  ASSERT_EQ(step_ms.size(), 2u);
  for (const auto& r : s.ranks) {
    std::string rank = std::to_string(r.rank);
    EXPECT_NEAR(step_ms[rank], r.step_ms, 1e-5);
    EXPECT_NEAR(sum_ms[rank], step_ms[rank], 1e-5) << "rank " << rank;
    EXPECT_EQ(parts[rank], (std::vector<std::string>{"compute", "exposed_comm", "bubble", "queue", "other"}));
  }
}

//===--- The output directory ---===//

std::filesystem::path TempDir(const std::string& name) {
  std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("sinkrt_profile_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  return dir;
}

// Also the setup of ctest's ProfileAnalysisFilesParse, which checks the
// files with Python's own parsers: SINKRT_PROFILE_SAMPLE_DIR says where.
TEST(ProfileAnalysisFiles, WritesTheDirectoryAndReadsItBack) {
  const char* env = std::getenv("SINKRT_PROFILE_SAMPLE_DIR");
  std::filesystem::path dir = env && *env ? std::filesystem::path(env) : TempDir("dir") / "nested" / "out";
  ProfileData d = HandRun();
  ProfileSummary written;
  Status st = host::WriteProfileDir(d, dir.string(), &written);
  ASSERT_TRUE(st.ok()) << st.ToString();
  for (const char* f : {"trace.json", "summary.txt", "summary.json", "steps.svg"})
    EXPECT_TRUE(std::filesystem::is_regular_file(dir / f)) << f;
  EXPECT_EQ(testing::Slurp(dir / "summary.txt"), host::SummaryText(written));
  EXPECT_EQ(json::parse(testing::Slurp(dir / "summary.json")), host::SummaryJson(written));
  EXPECT_EQ(testing::Slurp(dir / "steps.svg"), host::SummarySvg(written));
  std::string text = host::SummaryText(written);
  for (const char* want :
       {"hand<mlp>", "2 ranks", "host 10.500 ms/step", "allreduce_bucket0", "MatMulGrad", "Param 1.000", "overlap"})
    EXPECT_NE(text.find(want), std::string::npos) << want << " in\n" << text;

  auto read = host::ReadProfile(dir.string());
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(host::SummaryJson(*read), host::SummaryJson(written));
  EXPECT_EQ(host::SummaryJsonText(*read), testing::Slurp(dir / "summary.json"));
  if (!(env && *env)) std::filesystem::remove_all(dir.parent_path().parent_path());
}

TEST(ProfileAnalysisFiles, BadDirectoriesGiveClearErrors) {
  std::filesystem::path dir = TempDir("bad");
  auto missing = host::ReadProfile(dir.string());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find(dir.string()), std::string::npos) << missing.status().message();

  std::filesystem::create_directories(dir);
  auto empty = host::ReadProfile(dir.string());
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("no trace.json"), std::string::npos) << empty.status().message();

  ASSERT_TRUE(host::WriteProfileDir(HandRun(), dir.string()).ok());
  std::string trace = testing::Slurp(dir / "trace.json");
  {
    std::ofstream f(dir / "trace.json", std::ios::binary | std::ios::trunc);
    f << trace.substr(0, trace.size() / 2);
  }
  auto truncated = host::ReadProfile(dir.string());
  ASSERT_FALSE(truncated.ok());
  EXPECT_EQ(truncated.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(truncated.status().message().find((dir / "trace.json").string() + " is not valid JSON"), std::string::npos)
      << truncated.status().message();

  json t = json::parse(trace);
  t["otherData"]["ranks"][1].erase("tasks");
  {
    std::ofstream f(dir / "trace.json", std::ios::binary | std::ios::trunc);
    f << t.dump();
  }
  auto bad_rank = host::ReadProfile(dir.string());
  ASSERT_FALSE(bad_rank.ok());
  EXPECT_EQ(bad_rank.status().message(), (dir / "trace.json").string() + ": otherData.ranks[1] has no 'tasks'");

  // A file where the directory should be.
  std::filesystem::path file = dir / "summary.txt";
  Status st = host::WriteProfileDir(HandRun(), file.string());
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find(file.string()), std::string::npos) << st.message();
  std::filesystem::remove_all(dir);
}

//===--- DescribeRankStream on a compiled data-parallel stream ---===//

TEST(ProfileAnalysisStreamTables, DescribesACompiledDataParallelStream) {
  host::CompileOptions o;
  o.optimizer = host::OptimizerSpec::Momentum(0.01f, 0.9f);
  o.parallel_mode = host::ParallelMode::DataParallel;
  o.world_size = 2;
  o.rank = 1;
  auto cs = host::Compile(testing::MakeMlp(8, {16, 8, 4}), o);
  ASSERT_TRUE(cs.ok()) << cs.status().ToString();
  const VerifiedStream& v = cs->stream;
  const fb::TaskStream& root = *v.root();
  RankData r = host::DescribeRankStream(v, 1);
  EXPECT_EQ(r.rank, 1);
  ASSERT_TRUE(r.programs[1].present);
  EXPECT_EQ(r.programs[1].name, "train_step");
  EXPECT_TRUE(r.programs[0].present);

  const fb::Program* train = v.FindProgram(ProgramKind::TrainStep);
  int allreduces = 0, get_nexts = 0, kernels = 0;
  for (uint32_t s = 0; s < train->streams()->size(); ++s) {
    const auto* tasks = train->streams()->Get(s)->tasks();
    ASSERT_EQ(r.programs[1].streams[s].size(), tasks->size());
    for (uint32_t t = 0; t < tasks->size(); ++t) {
      const fb::Task* task = tasks->Get(t);
      const TaskInfo& info = r.programs[1].streams[s][t];
      EXPECT_EQ(info.name, task->name() ? task->name()->str() : "");
      switch (task->body_type()) {
        case fb::TaskBody::KernelTask:
          ++kernels;
          EXPECT_EQ(info.op, OpCodeName(task->body_as_KernelTask()->op()));
          EXPECT_FALSE(info.collective || info.get_next || info.event_wait);
          break;
        case fb::TaskBody::GetNextTask:
          ++get_nexts;
          EXPECT_EQ(info.op, "GetNextTask");
          EXPECT_TRUE(info.get_next);
          break;
        case fb::TaskBody::EventWaitTask:
          EXPECT_TRUE(info.event_wait);
          break;
        case fb::TaskBody::AllReduceTask: {
          ++allreduces;
          EXPECT_EQ(info.op, "AllReduceTask");
          EXPECT_TRUE(info.collective);
          uint64_t bytes = 0;
          for (uint32_t b : *task->body_as_AllReduceTask()->buffers()) bytes += root.buffers()->Get(b)->bytes();
          EXPECT_EQ(info.bytes, bytes);
          EXPECT_GT(info.bytes, 0u);
          EXPECT_EQ(info.group, (std::vector<uint32_t>{0, 1}));
          break;
        }
        default:
          break;
      }
    }
  }
  EXPECT_GE(allreduces, 1);
  EXPECT_EQ(get_nexts, 1);
  EXPECT_GT(kernels, 3);

  EXPECT_EQ(r.memory.arena_bytes, root.arena_bytes());
  uint64_t queue_bytes = 0;
  for (const fb::QueueSpec* q : *root.queues())
    for (const fb::QueueColumn* c : *q->columns()) {
      uint64_t n = 1;
      for (size_t i = 0; i < c->shape()->size(); ++i) n *= static_cast<uint64_t>(c->shape()->Get(i));
      queue_bytes += q->capacity() * n * DTypeSize(c->dtype());
    }
  EXPECT_EQ(r.memory.queue_bytes, queue_bytes);
  EXPECT_GT(queue_bytes, 0u);
  uint64_t role_total = 0, buffer_total = 0;
  int last_role = -1;
  for (const auto& [role, bytes] : r.memory.by_role) {
    int index = -1;
    for (fb::BufferRole br : fb::EnumValuesBufferRole())
      if (BufferRoleName(br) == role) index = static_cast<int>(br);
    EXPECT_GT(index, last_role) << role << ": roles come in the enum's order";
    last_role = index;
    EXPECT_GT(bytes, 0u);
    role_total += bytes;
  }
  for (const fb::Buffer* b : *root.buffers()) buffer_total += b->bytes();
  EXPECT_EQ(role_total, buffer_total);
  ASSERT_FALSE(r.memory.by_role.empty());
}

// A pipeline stage's compute stream waits on its transfers' "done" events
// (the comm stream records each right after a Send or Recv): those waits,
// and only those, are neighbour waits. A data-parallel stream has none.
TEST(ProfileAnalysisStreamTables, MarksAPipelineStagesWaitsOnItsNeighbours) {
  for (int stages : {1, 2}) {
    for (uint32_t rank = 0; rank < 2; ++rank) {
      SCOPED_TRACE("stages " + std::to_string(stages) + " rank " + std::to_string(rank));
      host::CompileOptions o;
      o.optimizer = host::OptimizerSpec::Sgd(0.1f);
      o.parallel_mode = host::ParallelMode::DataParallel;
      o.world_size = 2;
      o.rank = rank;
      o.gradients_mean = true;
      o.pipeline.stages = stages;
      o.pipeline.micro_size = 4;
      auto cs = host::Compile(testing::MakeMlp(8, {16, 32, 32, 32, 4}), o);
      ASSERT_TRUE(cs.ok()) << cs.status().ToString();
      RankData r = host::DescribeRankStream(cs->stream, static_cast<int>(rank));
      const fb::Program* train = cs->stream.FindProgram(ProgramKind::TrainStep);
      ASSERT_NE(train, nullptr);
      // The done events, by the comm stream's order.
      std::set<uint32_t> done;
      if (train->streams()->size() > 1) {
        bool after_transfer = false;
        for (const fb::Task* task : *train->streams()->Get(1)->tasks()) {
          if (task->body_type() == fb::TaskBody::EventRecordTask && after_transfer)
            done.insert(task->body_as_EventRecordTask()->event());
          after_transfer = task->body_type() == fb::TaskBody::SendTask || task->body_type() == fb::TaskBody::RecvTask;
        }
      }
      int neighbour = 0, other_waits = 0;
      const auto* compute = train->streams()->Get(0)->tasks();
      ASSERT_EQ(r.programs[1].streams[0].size(), compute->size());
      for (uint32_t t = 0; t < compute->size(); ++t) {
        const TaskInfo& info = r.programs[1].streams[0][t];
        const fb::Task* task = compute->Get(t);
        bool want =
            task->body_type() == fb::TaskBody::EventWaitTask && done.count(task->body_as_EventWaitTask()->event()) > 0;
        EXPECT_EQ(info.neighbour_wait, want) << "compute task " << t << " " << info.name;
        neighbour += info.neighbour_wait;
        other_waits += info.event_wait && !info.neighbour_wait;
      }
      for (const TaskInfo& info : r.programs[1].streams[1]) EXPECT_FALSE(info.neighbour_wait) << info.name;
      if (stages == 2) {
        EXPECT_GT(neighbour, 0);
        EXPECT_EQ(other_waits, 0);  // one rank per stage: no gradient buckets to wait for
      } else {
        EXPECT_EQ(neighbour, 0);
        EXPECT_GT(other_waits, 0);  // the gradient buckets
      }
    }
  }
}

}  // namespace
}  // namespace sinkrt
