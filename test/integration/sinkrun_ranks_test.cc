// One host process per rank, end to end: `sinkrun launch -n N -- sinkrun
// train ...` and `mpirun -n N sinkrun train ...` start N real processes,
// each with its own in-process device, that meet at rank 0's master,
// join one world and train data parallel; their checkpoint must match one
// process driving N daemons (--devices N) within 1e-5. A rank started with
// another batch or network is refused at the join on every rank, naming it
// and the field; a rank that fails stops the launch.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "sinkrt/runtime/address.h"
#include "support/checkpoint_compare.h"
#include "support/run_binary.h"
#include "support/tls_certs.h"

namespace sinkrt {
namespace {

namespace fs = std::filesystem;
using testing::RunResult;
using testing::Slurp;

constexpr const char* kTrain = "train --model mlp --data synthetic:2048 --epochs 2 --parallel data_parallel";

class SinkrunRanksTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("sinkrun_ranks_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  RunResult Sh(const std::string& script) {
    // The shell runs the line; bounded: a hung rank is killed, never waited for.
    return testing::RunBinary("/usr/bin/timeout", "120 /bin/sh -c '" + script + "'", dir_);
  }
  std::string Sinkrun() const { return SINKRUN_PATH; }

  // One process driving `n` local daemons: the reference.
  fs::path Reference(int n, int batch) {
    const fs::path ckpt = dir_ / ("reference" + std::to_string(n) + ".ckpt");
    RunResult r = Sh(Sinkrun() + " " + kTrain + " --batch " + std::to_string(batch) + " --devices " +
                     std::to_string(n) + " --save-checkpoint " + ckpt.string());
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return ckpt;
  }

  fs::path dir_;
};

TEST_F(SinkrunRanksTest, LaunchOfTwoAndFourRanksMatchesOneProcess) {
  for (int n : {2, 4}) {
    const int batch = 64 / n;  // the same global batch
    const fs::path ckpt = dir_ / ("launch" + std::to_string(n) + ".ckpt");
    RunResult r = Sh(Sinkrun() + " launch -n " + std::to_string(n) + " -- sinkrun " + kTrain + " --batch " +
                     std::to_string(batch) + " --save-checkpoint " + ckpt.string());
    ASSERT_EQ(r.exit_code, 0) << r.err;
    // Rank 0 prints the training lines, once.
    EXPECT_NE(r.out.find("rank 0 of " + std::to_string(n)), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("rank 1 of"), std::string::npos) << r.out;
    testing::ExpectCheckpointsClose(ckpt, Reference(n, batch), 1e-5);
  }
}

TEST_F(SinkrunRanksTest, MpirunOfTwoAndFourRanksMatchesOneProcess) {
  if (std::system("command -v mpirun >/dev/null 2>&1") != 0) GTEST_SKIP() << "no mpirun (Debian's openmpi-bin)";
  for (int n : {2, 4}) {
    const int batch = 64 / n;
    const fs::path ckpt = dir_ / ("mpirun" + std::to_string(n) + ".ckpt");
    // Each test picks its own master port, so parallel ctest runs never meet.
    const std::string port = std::to_string(20000 + (::getpid() * 7 + n) % 20000);
    RunResult r = Sh(std::string("mpirun ") + (::geteuid() == 0 ? "--allow-run-as-root " : "") + "--oversubscribe -n " +
                     std::to_string(n) + " -x MASTER_PORT=" + port + " " + Sinkrun() + " " + kTrain + " --batch " +
                     std::to_string(batch) + " --save-checkpoint " + ckpt.string());
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("rank 0 of " + std::to_string(n) + " (OMPI_COMM_WORLD_RANK"), std::string::npos) << r.out;
    testing::ExpectCheckpointsClose(ckpt, Reference(n, batch), 1e-5);
  }
}

TEST_F(SinkrunRanksTest, ARankWithAnotherBatchIsRefusedAtTheJoinByEveryRank) {
  const std::string cmd = Sinkrun() + " launch -n 2 --log-dir " + dir_.string() + " -- /bin/sh -c \"exec " + Sinkrun() +
                          " " + kTrain + " --batch \\$((32 / (1 + RANK_ID)))\"";
  RunResult r = Sh(cmd);
  EXPECT_NE(r.exit_code, 0);
  const std::string want = "rank 1 differs from rank 0 in batch: 16 on rank 1, 32 on rank 0";
  for (int rank : {0, 1}) {
    const std::string log = Slurp(dir_ / ("worker_" + std::to_string(rank) + ".log"));
    EXPECT_NE(log.find("sinkrun: rank " + std::to_string(rank) + ": Model.Create: " + want), std::string::npos)
        << "rank " << rank << ": " << log;
  }
}

TEST_F(SinkrunRanksTest, ARankWithAnotherNetworkIsRefusedAtTheJoin) {
  RunResult r = Sh(Sinkrun() + " launch -n 2 --log-dir " + dir_.string() + " -- /bin/sh -c \"exec " + Sinkrun() + " " +
                   kTrain + " --batch 32 --seed \\$((1 + RANK_ID))\"");
  EXPECT_NE(r.exit_code, 0);
  const std::string log = Slurp(dir_ / "worker_0.log");
  EXPECT_NE(log.find("rank 1 differs from rank 0 in graph_hash"), std::string::npos) << log;
}

TEST_F(SinkrunRanksTest, ARankThatFailsStopsTheOthers) {
  // Rank 1 exits at once; rank 0 would wait for it at the master for the
  // whole rendezvous timeout, but the launcher stops it.
  RunResult r = Sh(Sinkrun() + " launch -n 2 -- /bin/sh -c \"[ \\$RANK_ID = 1 ] && exit 3; exec " + Sinkrun() + " " +
                   kTrain + " --batch 32\"");
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("sinkrun launch: rank 1 (pid "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(") exited with 3; stopping the others"), std::string::npos) << r.err;
}

TEST_F(SinkrunRanksTest, LaunchRefusesFlagsOfTheOtherForm) {
  RunResult r = Sh(Sinkrun() + " launch -n 2 --base-port 7300 -- sinkrun " + kTrain);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--base-port applies to daemons, not to a COMMAND after --"), std::string::npos) << r.err;
  r = Sh(Sinkrun() + " launch -n 2 --log-dir x");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--log-dir applies to a COMMAND after --"), std::string::npos) << r.err;
  r = Sh(Sinkrun() + " launch -n 4 --local-worker-num 3 -- true");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("do not split into hosts of --local-worker-num 3"), std::string::npos) << r.err;
}

// Issue 39: half of MindSpore's pair trained as a single process, silently.
TEST_F(SinkrunRanksTest, HalfOfTheRankVariablesIsRefusedNamingTheOtherHalf) {
  RunResult size_only = Sh("RANK_SIZE=2 " + Sinkrun() + " " + kTrain);
  EXPECT_EQ(size_only.exit_code, 2);
  EXPECT_NE(size_only.err.find("RANK_SIZE=\"2\" is set but RANK_ID is not"), std::string::npos) << size_only.err;
  RunResult rank_only = Sh("RANK_ID=1 " + Sinkrun() + " " + kTrain);
  EXPECT_EQ(rank_only.exit_code, 2);
  EXPECT_NE(rank_only.err.find("RANK_ID=\"1\" is set but RANK_SIZE is not: set RANK_SIZE to the number of ranks, "
                               "or unset RANK_ID"),
            std::string::npos)
      << rank_only.err;
  RunResult huge = Sh("RANK_ID=0 RANK_SIZE=99999999999 " + Sinkrun() + " " + kTrain);
  EXPECT_EQ(huge.exit_code, 2);
  EXPECT_NE(huge.err.find("RANK_SIZE=\"99999999999\" is out of range"), std::string::npos) << huge.err;
}

TEST_F(SinkrunRanksTest, DevicesUnderALauncherIsRefused) {
  RunResult r = Sh("RANK_ID=0 RANK_SIZE=2 " + Sinkrun() + " " + kTrain + " --devices 2");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("sinkrun: rank 0: --devices starts daemons for one process that drives every rank, but this "
                       "process is rank 0 of 2 (RANK_ID)"),
            std::string::npos)
      << r.err;
}

// The pid of the child of `parent` whose environment holds RANK_ID=rank, or -1.
pid_t RankChild(pid_t parent, int rank) {
  std::ifstream children("/proc/" + std::to_string(parent) + "/task/" + std::to_string(parent) + "/children");
  pid_t pid;
  while (children >> pid) {
    const std::string env = Slurp("/proc/" + std::to_string(pid) + "/environ");
    if (env.find(std::string("RANK_ID=") + std::to_string(rank) + '\0') != std::string::npos) return pid;
  }
  return -1;
}

// Kill rank 1 once epoch 2 of 4 is checkpointed, then resume from that
// checkpoint on 2 ranks (bitwise the uninterrupted run) and on 1 device at
// the same global batch (within 1e-5).
TEST_F(SinkrunRanksTest, ARunKilledAtEpochTwoResumesOnTwoAndOnOneDevice) {
  // gradients_mean: 2 x 32 then sums to what 1 x 64 computes.
  const std::string common =
      Sinkrun() + " train --model mlp --data synthetic:16384 --parallel data_parallel --gradients-mean true";
  const std::string train = common + " --epochs 4";
  // The run to kill is given 16 epochs (256 steps each per rank), so that a
  // test thread the machine leaves waiting still kills it long before its
  // end; its first two epochs are the 4-epoch run's.
  const std::string doomed = common + " --epochs 16";
  const fs::path full = dir_ / "full.ckpt";
  RunResult r = Sh(Sinkrun() + " launch -n 2 -- " + train + " --batch 32 --save-checkpoint " + full.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;

  const fs::path ckdir = dir_ / "ck";
  const std::string interrupted = "exec " + Sinkrun() + " launch -n 2 -- " + doomed + " --batch 32 --checkpoint-dir " +
                                  ckdir.string() + " >" + (dir_ / "killed.out").string() + " 2>" +
                                  (dir_ / "killed.err").string();
  const pid_t launcher = ::fork();
  ASSERT_GE(launcher, 0);
  if (launcher == 0) {
    ::execl("/bin/sh", "sh", "-c", interrupted.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  fs::path epoch2;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (epoch2.empty() && std::chrono::steady_clock::now() < deadline) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(ckdir, ec))
      if (e.path().filename().string().starts_with("CKP-2_") && e.path().extension() == ".ckpt") epoch2 = e.path();
    if (epoch2.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  const pid_t rank1 = RankChild(launcher, 1);
  if (rank1 > 0) ::kill(rank1, SIGKILL);
  int status = 0;
  ASSERT_EQ(::waitpid(launcher, &status, 0), launcher);
  ASSERT_FALSE(epoch2.empty()) << "no epoch-2 checkpoint in " << ckdir;
  ASSERT_GT(rank1, 0) << "rank 1 had ended before epoch 2's checkpoint appeared";
  // The launcher reports the dead rank and stops rank 0: no last epoch.
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGKILL) << Slurp(dir_ / "killed.err");
  EXPECT_NE(Slurp(dir_ / "killed.err").find("rank 1 (pid " + std::to_string(rank1) + ") was killed by SIGKILL"),
            std::string::npos)
      << Slurp(dir_ / "killed.err");
  EXPECT_EQ(Slurp(dir_ / "killed.out").find("epoch: 16 step"), std::string::npos);

  const fs::path two = dir_ / "resumed2.ckpt", one = dir_ / "resumed1.ckpt";
  r = Sh(Sinkrun() + " launch -n 2 -- " + train + " --batch 32 --resume " + epoch2.string() + " --save-checkpoint " +
         two.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("resumed from " + epoch2.string() + ": epoch 2 of 4 done"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("epoch: 2 step"), std::string::npos) << r.out;
  testing::ExpectCheckpointsClose(two, full, 0.0);

  r = Sh(train + " --batch 64 --resume " + epoch2.string() + " --save-checkpoint " + one.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  testing::ExpectCheckpointsClose(one, full, 1e-5);
}

TEST_F(SinkrunRanksTest, AResumeThatChangesTheGlobalBatchIsRefused) {
  const fs::path ck = dir_ / "a.ckpt";
  RunResult r = Sh(Sinkrun() + " " + kTrain + " --batch 32 --save-checkpoint " + ck.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = Sh(Sinkrun() + " " + kTrain + " --epochs 3 --batch 16 --resume " + ck.string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("it was saved with 64 steps per epoch, this run has 128"), std::string::npos) << r.err;
  r = Sh(Sinkrun() + " " + kTrain + " --batch 32 --resume " + ck.string());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("stands at epoch 2: --epochs 2 leaves nothing to train"), std::string::npos) << r.err;
}

// Every rank of one launch carries the same job id, the user's when given.
TEST_F(SinkrunRanksTest, LaunchGivesEveryRankOneJobId) {
  RunResult r = Sh(Sinkrun() + " launch -n 2 -- /bin/sh -c \"echo id=\\$SINKRT_JOB_ID\"");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const size_t first = r.out.find("id=launch-");
  ASSERT_NE(first, std::string::npos) << r.out;
  const std::string line = r.out.substr(first, r.out.find('\n', first) - first);
  EXPECT_EQ(line.size(), std::string("id=launch-").size() + 16) << line;
  EXPECT_NE(r.out.find(line, first + line.size()), std::string::npos) << "both ranks: " << r.out;
  r = Sh("SINKRT_JOB_ID=nightly-7 " + Sinkrun() + " launch -n 2 -- /bin/sh -c \"echo id=\\$SINKRT_JOB_ID\"");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("id=nightly-7\nid=nightly-7"), std::string::npos) << r.out;
  r = Sh("SINKRT_JOB_ID=\"a b\" " + Sinkrun() + " launch -n 2 -- true");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("SINKRT_JOB_ID='a b' is not a job id"), std::string::npos) << r.err;
}

// The two launches on one --master-port, which cross-joined and died
// with "graph_hash differs" or "connection reset". Which job's rank 0 gets
// the port is a race: a job that fails names the clash; one trains.
TEST_F(SinkrunRanksTest, TwoLaunchesOnOneMasterPortNameTheClash) {
  auto port = FreeLoopbackPort();
  ASSERT_TRUE(port.ok());
  auto launch = [&](int seed) {
    return Sinkrun() + " launch -n 2 --master-port " + std::to_string(*port) + " -- " + Sinkrun() + " " + kTrain +
           " --batch 32 --seed " + std::to_string(seed);
  };
  // Both in one shell, at once; each one's output in its own file.
  auto in_dir = [&](const char* name) { return (dir_ / name).string(); };
  RunResult r = Sh("(" + launch(1) + " > " + in_dir("a.out") + " 2> " + in_dir("a.err") + "; echo $? > " +
                   in_dir("a.rc") + ") & (" + launch(2) + " > " + in_dir("b.out") + " 2> " + in_dir("b.err") +
                   "; echo $? > " + in_dir("b.rc") + ") & wait");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  int trained = 0;
  for (const char* job : {"a", "b"}) {
    const std::string rc = Slurp(dir_ / (std::string(job) + ".rc"));
    const std::string err = Slurp(dir_ / (std::string(job) + ".err"));
    EXPECT_EQ(err.find("graph_hash"), std::string::npos) << job << ": " << err;
    EXPECT_EQ(err.find("connection reset"), std::string::npos) << job << ": " << err;
    if (rc == "0\n") {
      ++trained;
      continue;
    }
    EXPECT_TRUE(err.find("two jobs use one master port") != std::string::npos ||
                err.find("another job's master") != std::string::npos)
        << job << " (exit " << rc << "): " << err;
  }
  EXPECT_GE(trained, 1);
}

// With a token, the master and the ranks' in-process devices prove it to
// each other (wire protocol 1.5) and the job trains; a rank with another
// token is refused.
TEST_F(SinkrunRanksTest, LaunchWithATokenTrains) {
  RunResult r = Sh(Sinkrun() + " launch -n 2 --token s3cret -- " + Sinkrun() + " " + kTrain + " --batch 32");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("Eval result"), std::string::npos) << r.out;
  r = Sh(Sinkrun() +
         " launch -n 2 --token s3cret -- /bin/sh -c \"[ \\$RANK_ID = 1 ] && export SINKRT_TOKEN=guess; exec " +
         Sinkrun() + " " + kTrain + " --batch 32\"");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("wrong token"), std::string::npos) << r.err;
}

// With --tls-*, every rank reaches the master over TLS (the launcher hands
// each rank the files as SINKRT_TLS_*), and the in-process devices link to
// each other over TLS too: with shared memory off, the gradients' AllReduce
// travels through those links, and the run ends with the plain run's
// parameters, bit for bit. A rank without the files is refused by the
// master, one that asks for plain links (SINKRT_TLS_PLAIN_PEERS=1) by its
// TLS peer, each naming TLS.
TEST_F(SinkrunRanksTest, LaunchWithTlsTrainsAsPlainAndRefusesPlainRanks) {
  const testing::TlsTestFiles files = testing::WriteTlsTestFiles(dir_.string());
  const std::string tls =
      " --tls-cert " + files.server_cert + " --tls-key " + files.server_key + " --tls-ca " + files.ca_cert;
  const std::string train = Sinkrun() + " " + kTrain + " --batch 32 --save-checkpoint ";
  RunResult r =
      Sh("SINKRT_COMM_SHM=0 " + Sinkrun() + " launch -n 2" + tls + " -- " + train + (dir_ / "tls.ckpt").string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("Eval result"), std::string::npos) << r.out;
  r = Sh("SINKRT_COMM_SHM=0 " + Sinkrun() + " launch -n 2 -- " + train + (dir_ / "plain.ckpt").string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  testing::ExpectCheckpointsClose(dir_ / "tls.ckpt", dir_ / "plain.ckpt", 0.0);

  r = Sh(Sinkrun() + " launch -n 2" + tls +
         " -- /bin/sh -c \"[ \\$RANK_ID = 1 ] && unset SINKRT_TLS_CA SINKRT_TLS_CERT "
         "SINKRT_TLS_KEY; exec " +
         Sinkrun() + " " + kTrain + " --batch 32\"");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("requires TLS"), std::string::npos) << r.err;
  r = Sh("SINKRT_COMM_SHM=0 " + Sinkrun() + " launch -n 2" + tls +
         " -- /bin/sh -c \"[ \\$RANK_ID = 0 ] && export "
         "SINKRT_TLS_PLAIN_PEERS=1; exec " +
         Sinkrun() + " " + kTrain + " --batch 32\"");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("links to its peers use TLS"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace sinkrt
