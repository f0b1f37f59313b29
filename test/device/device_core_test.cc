// DeviceCore: what the in-process device and the daemon share. A world
// that cannot be joined is refused with the same words by both, and a
// failed sink names its rank, program and task on both.
#include "device/src/device_core.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <optional>

#include "device/src/daemon/daemon.h"
#include "sinkrt/device/in_process_device.h"
#include "sinkrt/host/compiler.h"
#include "sinkrt/host/remote_device.h"
#include "support/test_models.h"
#include "support/test_util.h"

namespace sinkrt::device {
namespace {

using ::testing::HasSubstr;

using namespace std::chrono_literals;

TEST(DeviceCore, PeersOfRefusesAWorldItCannotJoinNamingWhy) {
  WorldSpec world;
  world.job = 7;
  auto none = PeersOf(world);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().message(), "the world has no members");

  world.members = {{"127.0.0.1:4000", "a"}, {"127.0.0.1:4001", "a"}};
  world.rank = 2;
  auto outside = PeersOf(world);
  ASSERT_FALSE(outside.ok());
  EXPECT_EQ(outside.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(outside.status().message(), "rank 2 is outside a world of 2 members");

  world.rank = 0;
  world.members[1].address = "nowhere";
  auto bad = PeersOf(world);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("member 1's address 'nowhere': ")) << bad.status().message();

  world.members[1].address = "127.0.0.1:4001";
  auto good = PeersOf(world);
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  ASSERT_EQ(good->size(), 2u);
  EXPECT_EQ((*good)[1].rank, 1u);
  EXPECT_EQ((*good)[1].address.port, 4001);
  EXPECT_EQ((*good)[1].host_id, "a");
  EXPECT_EQ(JoinWorldLabel(world), "JoinWorld of job 7 as rank 0 of 2");
}

TEST(DeviceCore, CommOptionsComeFromTheDeviceOptions) {
  DeviceOptions d;
  d.peer_timeout = 1234ms;
  d.rendezvous_timeout = 567ms;
  d.shared_memory = false;
  const CommOptions c = CommOptionsOf(d);
  EXPECT_EQ(c.peer_timeout, 1234ms);
  EXPECT_EQ(c.rendezvous_timeout, 567ms);
  EXPECT_FALSE(c.use_shared_memory);
}

TEST(DeviceCore, BothFrontEndsRefuseABadMemberAddressAlike) {
  DeviceOptions opts = DeviceOptions::FromEnvironment();
  opts.threads = 1;
  InProcessDevice local(opts);
  auto local_self = local.Endpoint();
  ASSERT_TRUE(local_self.ok()) << local_self.status().ToString();
  Status local_st = local.JoinWorld({7, 0, {*local_self, {"nowhere", local_self->host_id}}});
  ASSERT_FALSE(local_st.ok());
  EXPECT_EQ(local_st.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(local_st.message(), HasSubstr("JoinWorld of job 7 as rank 0 of 2: member 1's address 'nowhere': "))
      << local_st.message();

  DaemonOptions dopts;
  dopts.device = opts;
  dopts.log = false;
  auto daemon = Daemon::Start(dopts);
  ASSERT_TRUE(daemon.ok()) << daemon.status().ToString();
  host::RemoteOptions ropts;
  ropts.connect_timeout = 20s;
  ropts.reply_timeout = 60s;
  auto remote = host::RemoteDevice::Connect((*daemon)->address(), ropts);
  ASSERT_TRUE(remote.ok()) << remote.status().ToString();
  auto remote_self = (*remote)->Endpoint();
  ASSERT_TRUE(remote_self.ok()) << remote_self.status().ToString();
  Status remote_st = (*remote)->JoinWorld({7, 0, {*remote_self, {"nowhere", remote_self->host_id}}});
  ASSERT_FALSE(remote_st.ok());
  EXPECT_EQ(remote_st.code(), local_st.code());
  // The remote side adds where the daemon is and its rank around the same words.
  EXPECT_THAT(remote_st.message(), HasSubstr(local_st.message())) << remote_st.message() << "\n" << local_st.message();
}

// A train_step whose first GetNext never gets a batch fails at once.
class DeviceCoreFailedSink : public ::testing::Test {
 protected:
  void SetUp() override {
    host::CompileOptions o;
    auto cs = host::Compile(testing::MakeMlp(8, {16, 8, 4}), o);
    ASSERT_TRUE(cs.ok()) << cs.status().ToString();
    stream_.emplace(cs->stream);
    opts_ = DeviceOptions::FromEnvironment();
    opts_.threads = 1;
    opts_.get_next_timeout = 20ms;
  }
  // The name of train_step's compute-stream task `index`.
  std::string TaskName(int index) const {
    const fb::Task* t = stream_->FindProgram(ProgramKind::TrainStep)->streams()->Get(0)->tasks()->Get(index);
    return t->name() ? t->name()->str() : "";
  }
  std::optional<VerifiedStream> stream_;  // no VerifiedStream before one is verified
  DeviceOptions opts_;
};

TEST_F(DeviceCoreFailedSink, CoreNamesRankProgramAndTask) {
  DeviceCore core(opts_);
  ASSERT_TRUE(core.Load(*stream_).ok());
  SinkOutcome sink = core.RunSink(ProgramKind::TrainStep, 3, 5);
  ASSERT_FALSE(sink.status.ok());
  EXPECT_EQ(sink.steps_run, 0u);
  EXPECT_TRUE(sink.reports.empty());
  EXPECT_EQ(sink.failure.rank, 5);
  EXPECT_EQ(sink.failure.program, std::string(ProgramKindName(ProgramKind::TrainStep)));
  ASSERT_GE(sink.failure.task, 0);
  EXPECT_FALSE(sink.failure.task_name.empty());
  EXPECT_EQ(sink.failure.task_name, TaskName(sink.failure.task));
  EXPECT_THAT(sink.status.message(), HasSubstr("'" + sink.failure.task_name + "'")) << sink.status.message();
}

TEST_F(DeviceCoreFailedSink, InProcessDeviceInAWorldNamesItsRank) {
  InProcessDevice dev(opts_);
  auto self = dev.Endpoint();
  ASSERT_TRUE(self.ok()) << self.status().ToString();
  SINKRT_ASSERT_OK(dev.JoinWorld({11, 0, {*self}}));
  SINKRT_ASSERT_OK(dev.Load(*stream_));
  auto r = dev.RunSink(ProgramKind::TrainStep, 2);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message().rfind("rank 0: ", 0), 0u) << r.status().message();
}

}  // namespace
}  // namespace sinkrt::device
