// sinkd's command line and environment: usage errors exit 2 with a message
// a person can read, and a nonsense SINKRT_*/HCCL_* number stops it before
// it binds, as sinkrun and sinkc do.
#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "runtime/src/cpu_set.h"
#include "sinkrt/host/local_cluster.h"
#include "support/run_binary.h"

namespace sinkrt {
namespace {

namespace fs = std::filesystem;

class SinkdCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
#ifndef SINKD_PATH
    GTEST_SKIP() << "sinkd is not built in this configuration";
#endif
    dir_ = fs::temp_directory_path() / ("sinkd_cli_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // `env` is prepended (VAR=value ...); timeout bounds a daemon that, wrongly,
  // starts and serves instead of refusing.
  testing::RunResult Run(const std::string& env, const std::string& args) {
    testing::RunResult r;
#ifdef SINKD_PATH
    r = testing::RunBinary("env", env + " timeout 20 '" SINKD_PATH "' --listen 127.0.0.1:0 --quiet " + args, dir_);
#endif
    return r;
  }

  fs::path dir_;
};

TEST_F(SinkdCliTest, UsageErrorsExitTwoLikeTheOtherTools) {
  for (const char* args : {"--no-such-flag", "--threads", "--threads abc", "--rank -1", "stray"}) {
    SCOPED_TRACE(args);
    testing::RunResult r = Run("", args);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_FALSE(r.err.empty());
  }
  testing::RunResult help = Run("", "--help");
  EXPECT_EQ(help.exit_code, 0) << help.err;
}

TEST_F(SinkdCliTest, CpusOutsideTheAllowedOnesOrMalformedAreRefusedNamingThem) {
  const std::vector<int> allowed = AllowedCpus();
  ASSERT_FALSE(allowed.empty());
  struct Case {
    std::string cpus, names;
  };
  std::vector<Case> cases = {{"x", "'x' is not a core number"}, {"3-1", "runs backwards"}};
  if (allowed.back() + 1 < CPU_SETSIZE)
    cases.push_back({std::to_string(allowed.back() + 1), "are not among those this process may use"});
  for (const Case& c : cases) {
    SCOPED_TRACE(c.cpus);
    testing::RunResult r = Run("", "--cpus " + c.cpus);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find("--cpus " + c.cpus), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(c.names), std::string::npos) << r.err;
  }
}

// What /proc says a process may run on ("Cpus_allowed_list").
std::string CpusAllowedList(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("Cpus_allowed_list:", 0) == 0) {
      const size_t v = line.find_first_not_of(" \t", line.find(':') + 1);
      return v == std::string::npos ? "" : line.substr(v);
    }
  return "";
}

TEST_F(SinkdCliTest, LocalDaemonsBoundToCoresRunOnTheirShareOnly) {
#ifdef SINKD_PATH
  const std::vector<int> allowed = AllowedCpus();
  if (allowed.size() < 2) GTEST_SKIP() << "one core: nothing to share";
  host::LocalClusterOptions o;
  o.devices = 2;
  o.sinkd_path = SINKD_PATH;
  o.sinkd_args = {"--quiet"};
  o.bind_cores = true;
  auto cluster = host::LocalCluster::Start(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();
  const std::vector<std::vector<int>> shares = ShareCpus(allowed, 2);
  const std::vector<pid_t> pids = (*cluster)->pids();
  ASSERT_EQ(pids.size(), 2u);
  for (size_t r = 0; r < 2; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(CpusAllowedList(pids[r]), FormatCpuList(shares[r]));
  }
  EXPECT_NE(CpusAllowedList(pids[0]), CpusAllowedList(pids[1]));

  // Unbound (the default), each may use every core this process may.
  o.bind_cores = false;
  auto unbound = host::LocalCluster::Start(o);
  ASSERT_TRUE(unbound.ok()) << unbound.status().ToString();
  for (pid_t pid : (*unbound)->pids()) EXPECT_EQ(CpusAllowedList(pid), FormatCpuList(allowed));
#endif
}

TEST_F(SinkdCliTest, ThreadsMustBePositiveWithAReadableMessage) {
  for (const char* n : {"-1", "0"}) {
    SCOPED_TRACE(n);
    testing::RunResult r = Run("", std::string("--threads ") + n);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find("positive integer"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("1797693134862315708"), std::string::npos) << "DBL_MAX in full: " << r.err;
    EXPECT_LT(r.err.size(), 400u) << r.err;
  }
}

TEST_F(SinkdCliTest, NonsenseEnvironmentNumberIsRefusedNamingIt) {
  for (const char* env : {"SINKRT_CONNECT_TIMEOUT_MS=abc", "SINKRT_GETNEXT_TIMEOUT_MS=-5", "SINKRT_PEER_TIMEOUT_MS=5s",
                          "HCCL_CONNECT_TIMEOUT=abc", "HCCL_EXEC_TIMEOUT=-5", "SINKRT_DEVICE_THREADS=many"}) {
    SCOPED_TRACE(env);
    testing::RunResult r = Run(env, "");
    EXPECT_EQ(r.exit_code, 2) << r.err;
    const std::string name(env, std::string(env).find('='));
    const std::string value = std::string(env).substr(name.size() + 1);
    EXPECT_NE(r.err.find(name), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(value), std::string::npos) << r.err;
    EXPECT_EQ(r.out.find("listening"), std::string::npos) << r.out;
  }
}

}  // namespace
}  // namespace sinkrt
