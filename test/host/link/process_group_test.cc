// ProcessGroup: the host processes of one job meet at rank 0's master.
// Ranks are threads of this process here (each its own ProcessGroup on its
// own connections), so the checks run without a launcher: worlds form,
// rounds carry every rank's endpoint, and every refusal reaches every rank
// naming the rank and the field.
#include <gtest/gtest.h>
#include <unistd.h>

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "sinkrt/host/communication.h"
#include "support/on_each_rank.h"
#include "support/scoped_env.h"

namespace sinkrt::host {
namespace {

using std::chrono::milliseconds;

uint16_t FreePort() {
  auto port = FreeLoopbackPort();
  return port.ok() ? *port : 0;
}

ProcessGroup::Options RankOptions(uint32_t rank, uint32_t size, uint16_t port,
                                  milliseconds timeout = milliseconds(20000)) {
  ProcessGroup::Options o;
  o.rank = rank;
  o.world_size = size;
  o.master = Address{"127.0.0.1", port};
  o.timeout = timeout;
  return o;
}

std::vector<JoinField> Fields(int64_t batch) {
  return {{"world_size", "3"}, {"graph_hash", "00ab"}, {"batch", std::to_string(batch)}};
}

TEST(ProcessGroupTest, FormsAWorldAndEveryRoundCarriesEveryEndpoint) {
  const uint16_t port = FreePort();
  std::vector<Result<FormedWorld>> first(3, Internal("not run")), second(3, Internal("not run"));
  testing::OnEachRank(3, [&](uint32_t r) {
    auto pg = ProcessGroup::Join(RankOptions(r, 3, port));
    ASSERT_TRUE(pg.ok()) << pg.status().message();
    EXPECT_EQ((*pg)->rank(), r);
    EXPECT_EQ((*pg)->local_host(), "127.0.0.1");
    const PeerEndpoint me{"127.0.0.1:" + std::to_string(9000 + r), "host-" + std::to_string(r)};
    first[r] = (*pg)->Round("first", Fields(64), me);
    second[r] = (*pg)->Round("second", Fields(64), me);
  });
  for (uint32_t r = 0; r < 3; ++r) {
    ASSERT_TRUE(first[r].ok()) << first[r].status().message();
    ASSERT_TRUE(second[r].ok()) << second[r].status().message();
    EXPECT_EQ(first[r]->job, first[0]->job);
    EXPECT_EQ(second[r]->job, second[0]->job);
    ASSERT_EQ(first[r]->members.size(), 3u);
    for (uint32_t m = 0; m < 3; ++m) {
      EXPECT_EQ(first[r]->members[m].address, "127.0.0.1:" + std::to_string(9000 + m));
      EXPECT_EQ(first[r]->members[m].host_id, "host-" + std::to_string(m));
    }
  }
  EXPECT_NE(first[0]->job, second[0]->job) << "every round is a fresh world";
}

TEST(ProcessGroupTest, AMismatchFailsEveryRankNamingTheRankAndTheField) {
  const uint16_t port = FreePort();
  std::vector<Status> got(3);
  testing::OnEachRank(3, [&](uint32_t r) {
    auto pg = ProcessGroup::Join(RankOptions(r, 3, port));
    ASSERT_TRUE(pg.ok()) << pg.status().message();
    got[r] = (*pg)->Round("Model.Create", Fields(r == 2 ? 32 : 64)).status();
  });
  for (uint32_t r = 0; r < 3; ++r) {
    EXPECT_EQ(got[r].code(), StatusCode::kFailedPrecondition) << r;
    EXPECT_EQ(got[r].message(), "Model.Create: rank 2 differs from rank 0 in batch: 32 on rank 2, 64 on rank 0") << r;
  }
}

TEST(ProcessGroupTest, ARankWithAnotherProgramIsNamed) {
  const uint16_t port = FreePort();
  std::vector<Status> got(2);
  testing::OnEachRank(2, [&](uint32_t r) {
    auto pg = ProcessGroup::Join(RankOptions(r, 2, port));
    ASSERT_TRUE(pg.ok()) << pg.status().message();
    std::vector<JoinField> f = Fields(64);
    if (r == 1) f.pop_back();
    got[r] = (*pg)->Round("Model.Create", f).status();
  });
  for (uint32_t r = 0; r < 2; ++r)
    EXPECT_NE(got[r].message().find("rank 1 sends no 'batch'"), std::string::npos) << got[r].message();
}

TEST(ProcessGroupTest, RanksThatNeverComeAreNamedAtTheDeadline) {
  const uint16_t port = FreePort();
  std::vector<Status> got(2);
  testing::OnEachRank(
      2, [&](uint32_t r) { got[r] = ProcessGroup::Join(RankOptions(r, 4, port, milliseconds(1500))).status(); });
  EXPECT_EQ(got[0].code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(got[0].message().find("rank(s) 2, 3 did not join the master at 127.0.0.1:" + std::to_string(port)),
            std::string::npos)
      << got[0].message();
  // Rank 1 hears rank 0's verdict rather than waiting out its own.
  EXPECT_NE(got[1].message().find("rank(s) 2, 3 did not join"), std::string::npos) << got[1].message();
}

TEST(ProcessGroupTest, NoMasterIsNamedWithItsAddress) {
  const uint16_t port = FreePort();
  Status st = ProcessGroup::Join(RankOptions(1, 2, port, milliseconds(600))).status();
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("rank 1 cannot reach the master (rank 0) at 127.0.0.1:" + std::to_string(port)),
            std::string::npos)
      << st.message();
}

TEST(ProcessGroupTest, TwoProcessesClaimingOneRankFailTheWorld) {
  const uint16_t port = FreePort();
  std::vector<Status> got(3);
  testing::OnEachRank(3, [&](uint32_t i) {
    // Threads 1 and 2 both say they are rank 1 of a world of 3.
    got[i] = ProcessGroup::Join(RankOptions(i == 0 ? 0 : 1, 3, port)).status();
  });
  EXPECT_NE(got[0].message().find("two processes claim rank 1"), std::string::npos) << got[0].message();
}

TEST(ProcessGroupTest, AWorldSizeMismatchIsNamed) {
  const uint16_t port = FreePort();
  std::vector<Status> got(2);
  testing::OnEachRank(2,
                      [&](uint32_t r) { got[r] = ProcessGroup::Join(RankOptions(r, r == 0 ? 2 : 3, port)).status(); });
  for (uint32_t r = 0; r < 2; ++r)
    EXPECT_NE(got[r].message().find("rank 1 (pid " + std::to_string(::getpid()) +
                                    ") is in a world of 3 ranks, rank 0 in one of 2"),
              std::string::npos)
        << got[r].message();
}

TEST(ProcessGroupTest, AWrongTokenIsRefusedAndTheRightOneJoins) {
  const uint16_t port = FreePort();
  Status stranger, member, master;
  std::thread zero([&] {
    ProcessGroup::Options o = RankOptions(0, 2, port, milliseconds(20000));
    o.token = "secret";
    master = ProcessGroup::Join(o).status();
  });
  ProcessGroup::Options bad = RankOptions(1, 2, port);
  bad.token = "guess";
  stranger = ProcessGroup::Join(bad).status();
  ProcessGroup::Options good = RankOptions(1, 2, port);
  good.token = "secret";
  member = ProcessGroup::Join(good).status();
  zero.join();
  EXPECT_EQ(stranger.code(), StatusCode::kPermissionDenied) << stranger.message();
  EXPECT_NE(stranger.message().find("wrong token"), std::string::npos) << stranger.message();
  EXPECT_TRUE(member.ok()) << member.message();
  EXPECT_TRUE(master.ok()) << master.message();
}

TEST(ProcessGroupTest, ANonLoopbackMasterNeedsAToken) {
  ProcessGroup::Options o = RankOptions(0, 2, 8118);
  o.master.host = "10.77.0.1";
  Status st = ProcessGroup::Join(o).status();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("give every rank a token"), std::string::npos) << st.message();
}

TEST(ProcessGroupTest, TheLaunchersVariablesNameTheWorld) {
  testing::ScopedEnv env({{"OMPI_COMM_WORLD_RANK", "2"},
                          {"OMPI_COMM_WORLD_SIZE", "4"},
                          {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                          {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                          {"MASTER_ADDR", "127.0.0.2"},
                          {"MASTER_PORT", "29555"},
                          {"MS_SCHED_PORT", nullptr},
                          {"MS_SCHED_HOST", nullptr},
                          {"RANK_ID", nullptr},
                          {"SINKRT_TOKEN", "t"}});
  auto o = ProcessGroupOptionsFromEnvironment();
  ASSERT_TRUE(o.ok()) << o.status().message();
  EXPECT_EQ(o->rank, 2u);
  EXPECT_EQ(o->world_size, 4u);
  EXPECT_EQ(o->local_rank, 0u);
  EXPECT_EQ(o->local_world_size, 2u);
  EXPECT_EQ(o->master.ToString(), "127.0.0.2:29555");
  EXPECT_EQ(o->token, "t");
  EXPECT_EQ(o->source, "OMPI_COMM_WORLD_RANK");
}

TEST(ProcessGroupTest, MindSporesSchedulerVariablesWin) {
  testing::ScopedEnv env({{"RANK_ID", "1"},
                          {"RANK_SIZE", "2"},
                          {"MS_SCHED_HOST", "127.0.0.3"},
                          {"MS_SCHED_PORT", "8200"},
                          {"MASTER_ADDR", "127.0.0.2"},
                          {"MASTER_PORT", "29555"}});
  auto o = ProcessGroupOptionsFromEnvironment();
  ASSERT_TRUE(o.ok()) << o.status().message();
  EXPECT_EQ(o->master.ToString(), "127.0.0.3:8200");
  EXPECT_EQ(o->source, "RANK_ID");
}

TEST(ProcessGroupTest, ABadPortIsNamed) {
  testing::ScopedEnv env({{"RANK_ID", "0"}, {"RANK_SIZE", "2"}, {"MS_SCHED_PORT", "70000"}});
  auto o = ProcessGroupOptionsFromEnvironment();
  EXPECT_FALSE(o.ok());
  EXPECT_NE(o.status().message().find("MS_SCHED_PORT='70000' is not a port"), std::string::npos)
      << o.status().message();
}

TEST(ProcessGroupTest, WithoutALauncherTheProcessIsTheWholeWorld) {
  testing::ScopedEnv env(
      {{"RANK_ID", nullptr}, {"OMPI_COMM_WORLD_RANK", nullptr}, {"PMI_RANK", nullptr}, {"SLURM_PROCID", nullptr}});
  ASSERT_TRUE(init().ok());
  EXPECT_TRUE(initialized());
  EXPECT_EQ(get_rank(), 0u);
  EXPECT_EQ(get_group_size(), 1u);
  EXPECT_EQ(init().code(), StatusCode::kFailedPrecondition) << "once per process";
  release();
  EXPECT_FALSE(initialized());
}

}  // namespace
}  // namespace sinkrt::host
