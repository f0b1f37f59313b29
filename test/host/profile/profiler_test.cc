// The Profiler end to end: Model::train on in-process devices and on real
// sinkd daemons records every task of every profiled step, aligns the
// devices' clocks to the host's, and analyse() writes a trace and a
// summary that agree with what the host measured.
#include "sinkrt/host/profiler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "sinkrt/device/in_process_device.h"
#include "sinkrt/fb/task_stream_generated.h"
#include "sinkrt/host/model.h"
#include "sinkrt/host/model_zoo.h"
#include "sinkrt/host/remote_device.h"
#include "support/in_process_world.h"
#include "support/model_fixtures.h"
#include "support/sinkd_process.h"
#include "support/test_util.h"

namespace sinkrt {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

fs::path OutDir(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("sinkrt-profiler-test-" + std::to_string(getpid())) / name;
  fs::remove_all(dir);
  return dir;
}

std::string LogPath(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("sinkrt-profiler-test-" + std::to_string(getpid())) / "logs";
  fs::create_directories(dir);
  return (dir / (name + ".log")).string();
}

nlohmann::json ReadJson(const fs::path& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return nlohmann::json::parse(s.str());
}

host::ModelOptions DataParallel(int n) {
  host::ModelOptions o;
  o.context.mode = host::ParallelMode::DataParallel;
  o.context.device_num = n;
  o.context.gradients_mean = true;
  o.compile_cache = "";
  return o;
}

// Tasks of the train program per stream of `stream`.
size_t TrainTasks(const VerifiedStream& stream) {
  const fb::Program* p = stream.FindProgram(ProgramKind::TrainStep);
  size_t n = 0;
  for (const fb::Stream* s : *p->streams()) n += s->tasks() ? s->tasks()->size() : 0;
  return n;
}

// Task events of the trace per pid, and the AllReduce slices per (pid, step, name).
struct TraceFacts {
  std::map<int, size_t> tasks;
  std::map<std::tuple<int, int, std::string>, std::pair<double, double>> allreduce;  // [ts, ts + dur]
  std::map<int, std::set<int>> steps;
};

TraceFacts Facts(const nlohmann::json& trace) {
  TraceFacts f;
  for (const auto& e : trace.at("traceEvents")) {
    if (e.at("ph") != "X" || e.value("cat", "") != "task") continue;
    const int pid = e.at("pid");
    const auto& args = e.at("args");
    if (args.value("program", "") != "train_step") continue;
    ++f.tasks[pid];
    const int step = args.at("step");
    f.steps[pid].insert(step);
    if (args.value("op", "") == "AllReduceTask") {
      const double ts = e.at("ts"), dur = e.at("dur");
      f.allreduce[{pid, step, e.at("name")}] = {ts, ts + dur};
    }
  }
  return f;
}

TEST(Profiler, OneDeviceSummaryAddsUpToTheHostsStepTime) {
  const fs::path dir = OutDir("one");
  const testing::SyntheticData data = testing::MakeSyntheticData(64 * 40, 784, 10, 3);
  device::DeviceOptions o = device::DeviceOptions::FromEnvironment();
  o.threads = 1;
  device::InProcessDevice dev(o);
  auto model = host::Model::Create(host::MakeMlpNetwork(64), host::LossSpec::SparseSoftmaxCrossEntropy(),
                                   host::OptimizerSpec::Momentum(0.01f, 0.9f), dev);
  SINKRT_ASSERT_OK(model);
  host::Profiler profiler(dir.string());
  SINKRT_ASSERT_OK(profiler.status());
  SINKRT_ASSERT_OK((*model)->train(2, testing::MakeDataset(data, 64), {}, true, 20));
  auto summary = profiler.analyse();
  SINKRT_ASSERT_OK(summary);

  // 2 epochs of one sink of 20 steps (sink_size makes the epoch), every
  // task of every step.
  const nlohmann::json trace = ReadJson(dir / "trace.json");
  const TraceFacts f = Facts(trace);
  EXPECT_EQ(f.tasks.at(0), TrainTasks((*model)->compiled().stream) * 40);
  EXPECT_EQ(f.steps.at(0).size(), 40u);
  ASSERT_EQ(summary->ranks.size(), 1u);
  const host::RankStepSplit& r = summary->ranks[0];
  EXPECT_EQ(r.steps, 40);
  EXPECT_GT(r.compute_ms, 0);
  // The parts add up to the device's step, and that to what the host
  // measured around each RunSink (its round trip and the sink's setup are
  // the difference).
  EXPECT_NEAR(r.compute_ms + r.exposed_comm_ms + r.queue_ms + r.other_ms, r.step_ms, 1e-6 * r.step_ms);
  EXPECT_NEAR(r.step_ms, summary->host_step_ms, 0.05 * summary->host_step_ms)
      << "device step " << r.step_ms << " ms, host " << summary->host_step_ms << " ms";
  for (const char* file : {"trace.json", "summary.txt", "summary.json", "steps.svg"})
    EXPECT_TRUE(fs::exists(dir / file)) << file;
  // sinkprof's path: the directory read back summarises the same.
  auto again = host::ReadProfile(dir.string());
  SINKRT_ASSERT_OK(again);
  EXPECT_EQ(host::SummaryText(*again), host::SummaryText(*summary));
  fs::remove_all(dir);
}

TEST(Profiler, StepWindowEveryAndKeep) {
  const fs::path dir = OutDir("window");
  const testing::SyntheticData data = testing::MakeSyntheticData(8 * 30, 16, 4, 3);
  device::DeviceOptions o = device::DeviceOptions::FromEnvironment();
  o.threads = 1;
  device::InProcessDevice dev(o);
  auto model = host::Model::Create(testing::MlpNetwork(8), host::LossSpec::SparseSoftmaxCrossEntropy(),
                                   host::OptimizerSpec::Sgd(0.1f), dev);
  SINKRT_ASSERT_OK(model);
  host::ProfilerOptions po;
  po.output_path = dir.string();
  po.start_step = 5;
  po.stop_step = 40;
  po.every = 3;
  po.keep_steps = 6;
  host::Profiler profiler(po);
  SINKRT_ASSERT_OK(profiler.status());
  // Two train() calls: steps keep counting across them (1..30, 31..60).
  SINKRT_ASSERT_OK((*model)->train(1, testing::MakeDataset(data, 8), {}, true, 30));
  SINKRT_ASSERT_OK((*model)->train(1, testing::MakeDataset(data, 8), {}, true, 30));
  auto summary = profiler.analyse();
  SINKRT_ASSERT_OK(summary);
  // Recorded: 5, 8, ..., 38 (12 steps); kept: the last 6.
  const TraceFacts f = Facts(ReadJson(dir / "trace.json"));
  EXPECT_EQ(f.steps.at(0), (std::set<int>{23, 26, 29, 32, 35, 38}));
  EXPECT_EQ(summary->dropped_steps, 6u);
  fs::remove_all(dir);
}

TEST(Profiler, OneAtATimeAndNothingRecordedAreErrors) {
  host::Profiler first(OutDir("first").string());
  SINKRT_ASSERT_OK(first.status());
  host::Profiler second(OutDir("second").string());
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(second.status().message().find("another Profiler"), std::string::npos) << second.status().message();
  auto nothing = first.analyse();
  EXPECT_FALSE(nothing.ok());
  EXPECT_NE(nothing.status().message().find("nothing was recorded"), std::string::npos);
  host::Profiler empty_path("");
  EXPECT_EQ(empty_path.status().code(), StatusCode::kInvalidArgument);
}

// Whether any task table of the trace marks a neighbour wait, and the
// summary.json ranks' bubble.
bool AnyNeighbourWait(const nlohmann::json& trace) {
  for (const auto& rank : trace.at("otherData").at("ranks"))
    for (const auto& program : rank.at("tasks"))
      for (const auto& stream : program.at("streams"))
        for (const auto& task : stream)
          if (task.value("neighbour_wait", false)) return true;
  return false;
}

// Two pipeline stages on two in-process devices: each stage's compute
// stream waits for its neighbour's activations or gradients (the comm
// stream's Send/Recv). Those waits are bubble, as the device counts them,
// and with one rank per stage there are no gradient buckets, so nothing is
// left as exposed communication.
TEST(Profiler, PipelineStagesWaitingForTheirNeighboursAreBubble) {
  const fs::path dir = OutDir("pipeline");
  const testing::SyntheticData data = testing::MakeSyntheticData(8 * 12, 16, 4, 3);
  testing::InProcessWorld world(2);
  host::ModelOptions o = DataParallel(2);
  o.context.pipeline_stages = 2;
  o.micro_size = 4;
  auto model =
      host::Model::Create(host::MakeMlpNetwork(8, {16, 32, 32, 32, 4}), host::LossSpec::SparseSoftmaxCrossEntropy(),
                          host::OptimizerSpec::Sgd(0.1f), world.links, o);
  SINKRT_ASSERT_OK(model);
  host::Profiler profiler(dir.string());
  SINKRT_ASSERT_OK(profiler.status());
  SINKRT_ASSERT_OK((*model)->train(1, testing::MakeDataset(data, 8), {}, true, 12));
  auto summary = profiler.analyse();
  SINKRT_ASSERT_OK(summary);

  ASSERT_EQ(summary->ranks.size(), 2u);
  for (const host::RankStepSplit& r : summary->ranks) {
    SCOPED_TRACE("stage " + std::to_string(r.rank));
    EXPECT_EQ(r.steps, 12);
    EXPECT_GT(r.bubble_ms, 0);
    EXPECT_EQ(r.exposed_comm_ms, 0);
    EXPECT_NEAR(r.compute_ms + r.exposed_comm_ms + r.bubble_ms + r.queue_ms + r.other_ms, r.step_ms, 1e-6 * r.step_ms);
  }
  for (const auto& r : ReadJson(dir / "summary.json").at("ranks"))
    EXPECT_GT(r.at("bubble_ms").get<double>(), 0) << r.dump();
  EXPECT_TRUE(AnyNeighbourWait(ReadJson(dir / "trace.json")));
  // sinkprof's path keeps the marks: the same summary, bubble included.
  auto again = host::ReadProfile(dir.string());
  SINKRT_ASSERT_OK(again);
  EXPECT_EQ(host::SummaryText(*again), host::SummaryText(*summary));
  fs::remove_all(dir);
}

// Data parallel on two in-process devices: its compute stream waits only
// for gradient buckets, never for a neighbour, so no bubble.
TEST(Profiler, DataParallelHasNoBubble) {
  const fs::path dir = OutDir("dp-bubble");
  const testing::SyntheticData data = testing::MakeSyntheticData(16 * 10, 16, 4, 3);
  testing::InProcessWorld world(2);
  auto model = host::Model::Create(testing::MlpNetwork(8, {16, 64, 4}), host::LossSpec::SparseSoftmaxCrossEntropy(),
                                   host::OptimizerSpec::Sgd(0.1f), world.links, DataParallel(2));
  SINKRT_ASSERT_OK(model);
  host::Profiler profiler(dir.string());
  SINKRT_ASSERT_OK(profiler.status());
  SINKRT_ASSERT_OK((*model)->train(1, testing::MakeDataset(data, 8), {}, true, 10));
  auto summary = profiler.analyse();
  SINKRT_ASSERT_OK(summary);
  ASSERT_EQ(summary->ranks.size(), 2u);
  for (const host::RankStepSplit& r : summary->ranks) {
    EXPECT_EQ(r.steps, 10) << "rank " << r.rank;
    EXPECT_EQ(r.bubble_ms, 0) << "rank " << r.rank;
  }
  EXPECT_FALSE(AnyNeighbourWait(ReadJson(dir / "trace.json")));
  for (const auto& r : ReadJson(dir / "summary.json").at("ranks")) EXPECT_EQ(r.at("bubble_ms"), 0) << r.dump();
  fs::remove_all(dir);
}

// Two sinkd daemons, one with its clock a second ahead: after alignment the
// ranks' AllReduce slices of each step overlap, as one collective must.
TEST(Profiler, TwoDaemonsDataParallelAlignClocks) {
  const fs::path dir = OutDir("daemons");
  std::vector<std::unique_ptr<testing::SinkdProcess>> daemons;
  std::vector<std::unique_ptr<host::RemoteDevice>> remotes;
  std::vector<DeviceLink*> links;
  for (int r = 0; r < 2; ++r) {
    daemons.push_back(std::make_unique<testing::SinkdProcess>());
    std::vector<std::string> args = {"--rank", std::to_string(r), "--peer-timeout-ms", "20000"};
    if (r == 1) args.insert(args.end(), {"--profile-clock-offset-us", "1000000"});
    SINKRT_ASSERT_OK(daemons.back()->Start(SINKD_PATH, args, LogPath("ProfilerDaemons-r" + std::to_string(r))));
    host::RemoteOptions ro;
    ro.connect_timeout = 20s;
    ro.reply_timeout = 30s;
    auto dev = host::RemoteDevice::Connect(daemons.back()->address(), ro);
    SINKRT_ASSERT_OK(dev);
    remotes.push_back(std::move(dev).value());
    links.push_back(remotes.back().get());
  }
  const testing::SyntheticData data = testing::MakeSyntheticData(16 * 20, 16, 4, 3);
  auto model = host::Model::Create(testing::MlpNetwork(8, {16, 64, 4}), host::LossSpec::SparseSoftmaxCrossEntropy(),
                                   host::OptimizerSpec::Sgd(0.1f), links, DataParallel(2));
  SINKRT_ASSERT_OK(model);
  host::Profiler profiler(dir.string());
  SINKRT_ASSERT_OK((*model)->train(1, testing::MakeDataset(data, 8), {}, true, 20));
  auto summary = profiler.analyse();
  SINKRT_ASSERT_OK(summary);

  ASSERT_EQ(summary->clocks.size(), 2u);
  EXPECT_NEAR(summary->clocks[0].offset_us, 0, 1000);
  EXPECT_NEAR(summary->clocks[1].offset_us, 1e6, 1000);
  const TraceFacts f = Facts(ReadJson(dir / "trace.json"));  // Facts copies what it needs
  // Each rank trains on half the batches: 20 steps, all recorded.
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(f.steps.at(r).size(), 20u);
    EXPECT_EQ(f.tasks.at(r), TrainTasks((*model)->compiled().stream) * 20);
  }
  size_t compared = 0;
  for (const auto& [key, slice] : f.allreduce) {
    if (std::get<0>(key) != 0) continue;
    auto other = f.allreduce.find({1, std::get<1>(key), std::get<2>(key)});
    ASSERT_NE(other, f.allreduce.end());
    const auto& [b0, e0] = slice;
    const auto& [b1, e1] = other->second;
    EXPECT_LT(std::max(b0, b1), std::min(e0, e1) + 50)  // overlap, up to the alignment's error (µs)
        << std::get<2>(key) << " at step " << std::get<1>(key) << ": rank 0 [" << b0 << ", " << e0 << "], rank 1 ["
        << b1 << ", " << e1 << "]";
    ++compared;
  }
  EXPECT_GE(compared, 20u);
  EXPECT_FALSE(summary->buckets.empty());
  // The host's side: a RunSink per rank, a push per batch, the daemons' credits.
  size_t pushes = 0, credits = 0, sinks = 0;
  const nlohmann::json trace = ReadJson(dir / "trace.json");
  for (const auto& e : trace.at("traceEvents")) {
    if (e.at("pid") != 2 || e.at("ph") == "M") continue;
    const std::string kind = e.at("args").value("kind", "");
    pushes += kind == "push";
    credits += kind == "credit";
    sinks += kind == "run_sink";
  }
  EXPECT_EQ(sinks, 2u);
  EXPECT_EQ(pushes, 40u);
  EXPECT_GT(credits, 0u);
  fs::remove_all(dir);
}

// sinkd --profile DIR: the daemon's own view, summarised by ReadProfile (sinkprof).
TEST(Profiler, DaemonProfilesItsOwnJobs) {
  const fs::path dir = OutDir("sinkd-own");
  testing::SinkdProcess daemon;
  SINKRT_ASSERT_OK(daemon.Start(SINKD_PATH, {"--profile", dir.string()}, LogPath("ProfilerDaemonOwn")));
  host::RemoteOptions ro;
  ro.connect_timeout = 20s;
  ro.reply_timeout = 30s;
  auto dev = host::RemoteDevice::Connect(daemon.address(), ro);
  SINKRT_ASSERT_OK(dev);
  const testing::SyntheticData data = testing::MakeSyntheticData(8 * 12, 16, 4, 3);
  auto model = host::Model::Create(testing::MlpNetwork(8), host::LossSpec::SparseSoftmaxCrossEntropy(),
                                   host::OptimizerSpec::Sgd(0.1f), **dev);
  SINKRT_ASSERT_OK(model);
  SINKRT_ASSERT_OK((*model)->train(1, testing::MakeDataset(data, 8), {}, true, 12));
  auto summary = host::ReadProfile(dir.string());
  SINKRT_ASSERT_OK(summary);
  ASSERT_EQ(summary->ranks.size(), 1u);
  EXPECT_EQ(summary->ranks[0].steps, 12);
  EXPECT_TRUE(fs::exists(dir / "trace.json"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace sinkrt
