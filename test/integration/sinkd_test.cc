// Integration tests of the daemon: real sinkd processes on 127.0.0.1,
// driven by RemoteDevice (what Model.train uses) and by raw frames (what a
// broken or hostile peer sends).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <future>
#include <thread>

#include "runtime/src/wire_socket.h"
#include "sinkrt/device/in_process_device.h"
#include "sinkrt/host/model.h"
#include "sinkrt/host/remote_device.h"
#include "support/compare.h"
#include "support/model_fixtures.h"
#include "support/sinkd_process.h"
#include "support/test_models.h"

namespace sinkrt {
namespace {

using testing::SinkdProcess;
using namespace std::chrono_literals;

constexpr int64_t kBatch = 8;

std::filesystem::path Scratch(const std::string& name) {
  auto p = std::filesystem::temp_directory_path() / ("sinkd_test_" + std::to_string(getpid())) / name;
  std::filesystem::create_directories(p.parent_path());
  return p;
}

// A DeviceLink that forwards and keeps every SinkResult (queue high water).
class RecordingLink final : public DeviceLink {
 public:
  explicit RecordingLink(DeviceLink& inner) : inner_(inner) {}
  Result<LoadInfo> Load(const VerifiedStream& s) override { return inner_.Load(s); }
  Status PushBatch(uint32_t q, std::span<const ConstBytes> c) override { return inner_.PushBatch(q, c); }
  Result<SinkResult> RunSink(ProgramKind p, uint32_t steps) override {
    auto r = inner_.RunSink(p, steps);
    if (r.ok()) results.push_back(*r);
    return r;
  }
  Status ClearQueue(uint32_t q) override { return inner_.ClearQueue(q); }
  Result<std::vector<uint8_t>> ReadTensor(uint32_t b) override { return inner_.ReadTensor(b); }
  Status WriteTensor(uint32_t b, ConstBytes bytes) override { return inner_.WriteTensor(b, bytes); }
  uint64_t control_round_trips() const override { return inner_.control_round_trips(); }
  std::vector<SinkResult> results;

 private:
  DeviceLink& inner_;
};

struct TrainOutcome {
  std::vector<std::pair<std::string, host::Tensor>> state;
  uint64_t round_trips = 0;
  host::EvalResult eval;
};

// Trains the small MLP on `device` and returns its final state.
Result<TrainOutcome> Train(DeviceLink& device, int epochs, bool sink, uint32_t queue_capacity = 16,
                           int sink_size = -1) {
  testing::SyntheticData data = testing::MakeSyntheticData(64, 16, 4, 7);
  host::ModelOptions options;
  options.queue_capacity = queue_capacity;
  SINKRT_ASSIGN_OR_RETURN(auto model,
                          host::Model::Create(testing::MlpNetwork(kBatch), host::LossSpec::SparseSoftmaxCrossEntropy(),
                                              host::OptimizerSpec::Momentum(0.05f, 0.9f), device, options));
  host::Dataset ds = testing::MakeDataset(data, kBatch).Shuffle(3);
  SINKRT_RETURN_IF_ERROR(model->train(epochs, ds, {}, sink, sink_size));
  TrainOutcome out;
  out.round_trips = model->host_round_trips();
  SINKRT_ASSIGN_OR_RETURN(out.eval, model->eval(testing::MakeDataset(data, kBatch, /*drop_remainder=*/false)));
  SINKRT_ASSIGN_OR_RETURN(out.state, model->ReadState());
  return out;
}

host::RemoteOptions FastOptions(int rank = -1) {
  host::RemoteOptions o;
  o.rank = rank;
  o.connect_timeout = 20s;
  o.reply_timeout = 60s;
  o.push_timeout = 60s;
  return o;
}

class SinkdTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(daemon_.Start(SINKD_PATH, {}, Scratch(Name() + ".log")).ok()); }
  std::string Name() const { return ::testing::UnitTest::GetInstance()->current_test_info()->name(); }
  SinkdProcess daemon_;
};

TEST_F(SinkdTest, TrainsBitwiseLikeInProcessWithOneRoundTripPerSink) {
  device::DeviceOptions opts = device::DeviceOptions::FromEnvironment();
  opts.threads = 1;
  device::InProcessDevice local(opts);
  auto reference = Train(local, 3, /*sink=*/true);
  ASSERT_TRUE(reference.ok()) << reference.status().ToString();

  auto remote = host::RemoteDevice::Connect(daemon_.address(), FastOptions());
  ASSERT_TRUE(remote.ok()) << remote.status().ToString();
  RecordingLink link(**remote);
  auto got = Train(link, 3, /*sink=*/true);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  testing::ExpectSameTensors(reference->state, got->state);
  EXPECT_EQ(got->eval.accuracy, reference->eval.accuracy);
  EXPECT_EQ(got->eval.loss, reference->eval.loss);
  // Train: one RunSink per epoch; then eval runs one per batch (as
  // MindSpore's eval), on both devices alike.
  EXPECT_EQ(got->round_trips, 3u);
  EXPECT_EQ((*remote)->control_round_trips(), local.control_round_trips());
  ASSERT_GE(link.results.size(), 3u);
  for (int e = 0; e < 3; ++e) EXPECT_EQ(link.results[e].steps_run, 8u);
}

TEST_F(SinkdTest, NonSinkModeMatchesAndCountsOneRoundTripPerStep) {
  device::DeviceOptions opts = device::DeviceOptions::FromEnvironment();
  opts.threads = 1;
  device::InProcessDevice local(opts);
  auto reference = Train(local, 2, /*sink=*/false);
  ASSERT_TRUE(reference.ok()) << reference.status().ToString();
  auto remote = host::RemoteDevice::Connect(daemon_.address(), FastOptions());
  ASSERT_TRUE(remote.ok()) << remote.status().ToString();
  RecordingLink link(**remote);
  auto got = Train(link, 2, /*sink=*/false);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  testing::ExpectSameTensors(reference->state, got->state);
  // 2 epochs x 8 steps, one RunSink each; then the eval batches.
  EXPECT_EQ(got->round_trips, 16u);
  EXPECT_EQ(link.results.size(), (*remote)->control_round_trips());
  EXPECT_EQ((*remote)->control_round_trips(), local.control_round_trips());
  EXPECT_EQ(link.results[0].steps_run, 1u);
}

TEST_F(SinkdTest, QueueNeverHoldsMoreThanItsCapacity) {
  // A two-slot queue and a sink of 8 steps: the feeder is far ahead of the
  // device all the time, so only credits keep the queue bounded.
  auto remote = host::RemoteDevice::Connect(daemon_.address(), FastOptions());
  ASSERT_TRUE(remote.ok()) << remote.status().ToString();
  RecordingLink link(**remote);
  auto got = Train(link, 4, /*sink=*/true, /*queue_capacity=*/2);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_FALSE(link.results.empty());
  for (const SinkResult& r : link.results) {
    ASSERT_FALSE(r.queue_high_water.empty());
    for (uint32_t hw : r.queue_high_water) EXPECT_LE(hw, 2u);
  }
  // The train queue filled up at some point: the bound was exercised.
  EXPECT_EQ(link.results.back().queue_high_water[0], 2u);

  device::DeviceOptions opts = device::DeviceOptions::FromEnvironment();
  opts.threads = 1;
  device::InProcessDevice local(opts);
  auto reference = Train(local, 4, /*sink=*/true, 2);
  ASSERT_TRUE(reference.ok());
  testing::ExpectSameTensors(reference->state, got->state);
}

TEST_F(SinkdTest, SecondHostIsRefusedWhileAJobRunsAndProbesStillAnswer) {
  auto first = host::RemoteDevice::Connect(daemon_.address(), FastOptions());
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  auto second = host::RemoteDevice::Connect(daemon_.address(), FastOptions());
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("device busy"), std::string::npos) << second.status().message();
  EXPECT_NE(second.status().message().find("rank 0"), std::string::npos) << second.status().message();
  auto probe = host::ProbeDevice(daemon_.address(), 10s);
  ASSERT_TRUE(probe.ok()) << probe.status().ToString();
  EXPECT_TRUE(probe->busy);
  EXPECT_EQ(probe->rank, 0);
  EXPECT_EQ(static_cast<pid_t>(probe->pid), daemon_.pid());
  first->reset();  // Shutdown: the device is free again
  auto third = host::RemoteDevice::Connect(daemon_.address(), FastOptions());
  ASSERT_TRUE(third.ok()) << third.status().ToString();
  auto got = Train(**third, 1, true);
  EXPECT_TRUE(got.ok()) << got.status().ToString();
}

TEST_F(SinkdTest, WrongRankIsRefused) {
  auto remote = host::RemoteDevice::Connect(daemon_.address(), FastOptions(/*rank=*/3));
  ASSERT_FALSE(remote.ok());
  EXPECT_NE(remote.status().message().find("rank 0"), std::string::npos) << remote.status().message();
  EXPECT_NE(remote.status().message().find("rank 3"), std::string::npos) << remote.status().message();
}

TEST_F(SinkdTest, DaemonKilledMidSinkGivesAnErrorNamingTheRank) {
  auto remote = host::RemoteDevice::Connect(daemon_.address(), FastOptions());
  ASSERT_TRUE(remote.ok()) << remote.status().ToString();
  testing::SyntheticData data = testing::MakeSyntheticData(64, 16, 4, 7);
  auto model = host::Model::Create(testing::MlpNetwork(kBatch), host::LossSpec::SparseSoftmaxCrossEntropy(),
                                   host::OptimizerSpec::Sgd(0.05f), **remote);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  // A sink of 1000 steps with no batches sent waits in GetNext: it is
  // certainly running when the daemon dies.
  auto sink = std::async(std::launch::async, [&] { return (*remote)->RunSink(ProgramKind::TrainStep, 1000); });
  EXPECT_EQ(sink.wait_for(200ms), std::future_status::timeout);
  daemon_.Signal(SIGKILL);
  ASSERT_EQ(sink.wait_for(30s), std::future_status::ready) << "host hung after the daemon died";
  auto r = sink.get();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("rank 0"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find(daemon_.address().ToString()), std::string::npos) << r.status().message();
  // Every later call fails the same way, at once.
  EXPECT_FALSE((*remote)->ReadTensor(0).ok());
}

TEST_F(SinkdTest, DaemonStoppedMidSinkSaysItIsShuttingDownAndExitsCleanly) {
  auto remote = host::RemoteDevice::Connect(daemon_.address(), FastOptions());
  ASSERT_TRUE(remote.ok()) << remote.status().ToString();
  auto model = host::Model::Create(testing::MlpNetwork(kBatch), host::LossSpec::SparseSoftmaxCrossEntropy(),
                                   host::OptimizerSpec::Sgd(0.05f), **remote);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  auto sink = std::async(std::launch::async, [&] { return (*remote)->RunSink(ProgramKind::TrainStep, 1000); });
  EXPECT_EQ(sink.wait_for(200ms), std::future_status::timeout);
  daemon_.Signal(SIGTERM);
  ASSERT_EQ(sink.wait_for(30s), std::future_status::ready);
  auto r = sink.get();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("shutting down"), std::string::npos) << r.status().message();
  int st = daemon_.WaitExit(30s);
  ASSERT_NE(st, -1);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "wait status " << st;
  EXPECT_NE(daemon_.ReadLog().find("stopping (SIGTERM)"), std::string::npos);
}

// sinkd takes its rank (and, for its port, its local rank) from the
// variables cluster launchers set, so mpirun or srun can start one per device.
TEST(SinkdLaunchTest, RankComesFromLauncherVariables) {
  struct Case {
    std::vector<std::string> env;
    int rank;
  };
  std::vector<Case> cases = {{{"RANK_ID=3"}, 3},
                             {{"OMPI_COMM_WORLD_RANK=2", "OMPI_COMM_WORLD_SIZE=4"}, 2},
                             {{"PMI_RANK=1", "PMI_SIZE=2"}, 1},
                             {{"SLURM_PROCID=5", "SLURM_NTASKS=8"}, 5}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.env[0]);
    SinkdProcess daemon;
    ASSERT_TRUE(daemon.Start(SINKD_PATH, {}, Scratch("env.log"), 30s, c.env).ok()) << daemon.ReadLog();
    auto hello = host::ProbeDevice(daemon.address(), 10s);
    ASSERT_TRUE(hello.ok()) << hello.status().ToString();
    EXPECT_EQ(hello->rank, c.rank);
  }
  // A bad value is refused, naming the variable.
  SinkdProcess bad;
  ASSERT_FALSE(bad.Start(SINKD_PATH, {}, Scratch("env_bad.log"), 30s, {"RANK_ID=two"}).ok());
  EXPECT_NE(bad.ReadLog().find("RANK_ID"), std::string::npos) << bad.ReadLog();
}

TEST(SinkdLaunchTest, PortIsBasePortPlusLocalRank) {
  // A free port pair from the kernel (closed again before sinkd binds it).
  asio::io_context io;
  asio::ip::tcp::acceptor probe(io, asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  uint16_t base = probe.local_endpoint().port();
  probe.close();
  SinkdProcess daemon;
  Status st = daemon.Start(SINKD_PATH, {"--listen", "127.0.0.1", "--base-port", std::to_string(base - 1)},
                           Scratch("port.log"), 30s, {"OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_LOCAL_RANK=1"});
  ASSERT_TRUE(st.ok()) << st.ToString() << daemon.ReadLog();
  EXPECT_EQ(daemon.address().port, base);
  auto hello = host::ProbeDevice(daemon.address(), 10s);
  ASSERT_TRUE(hello.ok());
  EXPECT_EQ(hello->rank, 1);
}

}  // namespace
}  // namespace sinkrt
