// Local daemons: how many one machine may host (CheckLocalDeviceCount, a
// pure function of the machine's facts and SINKRT_MAX_LOCAL_DEVICES), and
// what LocalCluster::Start says while daemons are slow to start and when
// they miss its deadline. Stand-in daemons (shell scripts) make the slow
// starts deterministic: one never prints its ready line, one prints it but
// points at a port nobody answers on.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "sinkrt/host/local_cluster.h"
#include "sinkrt/host/local_device_limit.h"
#include "support/scoped_env.h"

namespace sinkrt::host {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;

constexpr uint64_t kMiB = uint64_t{1} << 20;

using testing::ScopedEnv;

void ExpectMentions(const Status& st, const std::vector<std::string>& parts) {
  for (const std::string& p : parts)
    EXPECT_NE(st.message().find(p), std::string::npos) << "'" << p << "' in: " << st.message();
}

TEST(LocalDeviceLimitTest, CoresBoundTheCount) {
  ScopedEnv unset("SINKRT_MAX_LOCAL_DEVICES", "");
  const LocalMachine two_cores{.cores = 2, .mem_available_bytes = std::nullopt};
  EXPECT_TRUE(CheckLocalDeviceCount(2 * kLocalDaemonsPerCore, two_cores).ok());
  const Status st = CheckLocalDeviceCount(1000, two_cores);
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
  ExpectMentions(
      st, {"1000 local sinkd daemons asked for", "at most 64", "32 per core", "2 cores", "SINKRT_MAX_LOCAL_DEVICES"});
}

TEST(LocalDeviceLimitTest, MemoryBoundsTheCountWithTheArenaWhenKnown) {
  ScopedEnv unset("SINKRT_MAX_LOCAL_DEVICES", "");
  // 5 daemons of 4 MiB arena + the baseline fit, 6 do not.
  const uint64_t arena = 4 * kMiB;
  const LocalMachine machine{.cores = 64, .mem_available_bytes = 5 * (arena + kSinkdBaselineRssBytes) + kMiB};
  EXPECT_TRUE(CheckLocalDeviceCount(5, machine, arena).ok());
  const Status st = CheckLocalDeviceCount(6, machine, arena);
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
  ExpectMentions(st, {"6 local sinkd daemons asked for", "only 5 fit in memory", "4.0 MiB arena", "MemAvailable",
                      "SINKRT_MAX_LOCAL_DEVICES"});
  // Without a known arena only the daemons themselves count: more fit.
  EXPECT_TRUE(CheckLocalDeviceCount(6, machine).ok());
  // An arena near the device limit times many daemons must not overflow.
  EXPECT_FALSE(CheckLocalDeviceCount(1 << 30, LocalMachine{.cores = 1 << 26, .mem_available_bytes = 1 << 30},
                                     uint64_t{256} << 30)
                   .ok());
}

TEST(LocalDeviceLimitTest, TheVariableOverridesAndNonsenseIsAnError) {
  const LocalMachine one_core{.cores = 1, .mem_available_bytes = 64 * kMiB};
  {
    ScopedEnv env("SINKRT_MAX_LOCAL_DEVICES", "2");
    EXPECT_TRUE(CheckLocalDeviceCount(2, one_core).ok());
    const Status st = CheckLocalDeviceCount(3, one_core);
    EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
    ExpectMentions(st, {"3 local sinkd daemons asked for", "SINKRT_MAX_LOCAL_DEVICES=2", "at most 2"});
  }
  {
    // The operator's word replaces both the cores and the memory limit.
    ScopedEnv env("SINKRT_MAX_LOCAL_DEVICES", "100");
    EXPECT_TRUE(CheckLocalDeviceCount(100, one_core).ok());
  }
  for (const char* bad : {"abc", "0", "-1", "2x", "99999999999"}) {
    SCOPED_TRACE(bad);
    ScopedEnv env("SINKRT_MAX_LOCAL_DEVICES", bad);
    const Status st = CheckLocalDeviceCount(1, one_core);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    ExpectMentions(st, {std::string("SINKRT_MAX_LOCAL_DEVICES='") + bad + "'", "positive integer"});
  }
}

TEST(LocalDeviceLimitTest, MemAvailableIsRead) {
  if (!fs::exists("/proc/meminfo")) GTEST_SKIP() << "no /proc/meminfo";
  const std::optional<uint64_t> mem = MemAvailableBytes();
  ASSERT_TRUE(mem.has_value());
  EXPECT_GT(*mem, 0u);
}

class LocalClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("local_cluster_test_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // An executable shell script standing in for sinkd (it gets --rank R as $1 $2).
  std::string Script(const std::string& body) {
    const fs::path p = dir_ / "fake-sinkd";
    std::ofstream(p) << "#!/bin/sh\n" << body;
    fs::permissions(p, fs::perms::owner_all);
    return p.string();
  }

  // Options for a start that cannot succeed within 1 s, reported every 50 ms.
  LocalClusterOptions Options(int devices, const std::string& sinkd, std::vector<std::string>* lines) {
    LocalClusterOptions o;
    o.devices = devices;
    o.sinkd_path = sinkd;
    o.start_timeout = milliseconds(1000);
    o.progress_interval = milliseconds(50);
    o.progress = [lines](const std::string& line) { lines->push_back(line); };
    return o;
  }

  fs::path dir_;
};

TEST_F(LocalClusterTest, DaemonsThatNeverGetReadyAreReportedThenNamedAtTheDeadline) {
  std::vector<std::string> lines;
  auto cluster = LocalCluster::Start(Options(8, Script("exec sleep 60\n"), &lines));
  ASSERT_FALSE(cluster.ok());
  const Status& st = cluster.status();
  EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded);
  // The first few missing ranks by name, the rest counted.
  ExpectMentions(st, {"0 of 8 sinkd daemons ready within 1.0 s", "rank 0 (pid ", "rank 4 (pid ", "and 3 more",
                      "SINKRT_CONNECT_TIMEOUT_MS"});
  EXPECT_EQ(st.message().find("rank 5 (pid"), std::string::npos) << st.message();
  // A wait of 20 intervals says so at least once.
  ASSERT_FALSE(lines.empty());
  EXPECT_NE(lines[0].find("0 of 8 sinkd daemons ready after "), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("(limit 1.0 s)"), std::string::npos) << lines[0];
}

TEST_F(LocalClusterTest, DaemonsThatNeverAnswerHelloAreReportedThenNamedAtTheDeadline) {
  // A port that accepts (the kernel's backlog) but never speaks.
  const int silent = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(silent, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  ASSERT_EQ(::bind(silent, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(silent, 16), 0);
  ASSERT_EQ(::getsockname(silent, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const std::string port = std::to_string(ntohs(addr.sin_port));
  // exec keeps the pid the ready line names.
  const std::string sinkd =
      Script("echo \"sinkd: rank $2 listening on 127.0.0.1:" + port + " (pid $$)\"\nexec sleep 60\n");
  std::vector<std::string> lines;
  auto cluster = LocalCluster::Start(Options(1, sinkd, &lines));
  ::close(silent);
  ASSERT_FALSE(cluster.ok());
  const Status& st = cluster.status();
  EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded);
  ExpectMentions(st,
                 {"0 of 1 sinkd daemons answered Hello within 1.0 s", "127.0.0.1:" + port, "missing: rank 0 (pid "});
  ASSERT_FALSE(lines.empty());
  EXPECT_NE(lines.back().find("1 of 1 sinkd daemons ready, 0 answered Hello after "), std::string::npos)
      << lines.back();
}

TEST_F(LocalClusterTest, NonsenseEnvironmentIsRefusedBeforeAnythingStarts) {
  ScopedEnv env("SINKRT_CONNECT_TIMEOUT_MS", "abc");
  std::vector<std::string> lines;
  auto cluster = LocalCluster::Start(Options(1, Script("exit 3\n"), &lines));
  ASSERT_FALSE(cluster.ok());
  EXPECT_EQ(cluster.status().code(), StatusCode::kInvalidArgument);
  ExpectMentions(cluster.status(), {"SINKRT_CONNECT_TIMEOUT_MS='abc'"});
}

}  // namespace
}  // namespace sinkrt::host
