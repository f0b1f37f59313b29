// Two "hosts" made of Linux network namespaces (scripts/netns_testbed.sh),
// two sinkd daemons in each, one data-parallel job across all four: TCP
// between the namespaces, shared memory inside each (LocalHostId includes
// the network namespace), the same parameters as one device; and a link cut
// mid-job fails every rank within the peer timeout, naming who is
// unreachable. Root only: the tests skip where namespaces cannot be made.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "sinkrt/fb/checkpoint_generated.h"
#include "support/checkpoint_compare.h"
#include "support/launcher.h"
#include "support/run_binary.h"
#include "support/sinkd_process.h"

namespace sinkrt {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::Launcher;
using testing::RunBinary;
using testing::RunResult;
using testing::SinkdProcess;
using testing::Slurp;
using Clock = std::chrono::steady_clock;

constexpr int kHosts = 2;
constexpr int kPerHost = 2;
constexpr int kRanks = kHosts * kPerHost;
constexpr char kToken[] = "netns-test-token";
constexpr int kBasePort = 7100;

std::string FindIp() {
  for (const char* p : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"})
    if (::access(p, X_OK) == 0) return p;
  return "";
}

std::string HostAddress(int host) { return "10.77.0." + std::to_string(host + 1); }

class NetnsTest : public ::testing::Test {
 protected:
  void SetUp() override {
#if !defined(SINKD_PATH) || !defined(SINKRUN_PATH)
    GTEST_SKIP() << "sinkd and sinkrun are not built in this configuration";
#else
    if (::geteuid() != 0) GTEST_SKIP() << "needs root to create network namespaces (ip netns add); not root";
    ip_ = FindIp();
    if (ip_.empty()) GTEST_SKIP() << "no `ip` binary (iproute2) in /usr/sbin, /sbin, /usr/bin or /bin";
    const std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    dir_ = fs::temp_directory_path() / ("sinkrt_netns_" + std::to_string(::getpid()) + "_" + name);
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    // Unique per process; ctest runs each case in a process of its own.
    prefix_ = "snt" + std::to_string(::getpid());
    const std::string script = std::string(SINKRT_SOURCE_DIR) + "/scripts/netns_testbed.sh";
    RunResult up = RunBinary("/bin/bash",
                             "'" + script + "' up " + std::to_string(kHosts) + " --prefix " + prefix_ + " --owner " +
                                 std::to_string(::getpid()),
                             dir_);
    // Root in a container without CAP_SYS_ADMIN, or a kernel without veth
    // or bridges: the test bed cannot exist here, which is not a failure.
    if (up.exit_code != 0 &&
        (up.err.find("not permitted") != std::string::npos || up.err.find("Permission denied") != std::string::npos ||
         up.err.find("not supported") != std::string::npos))
      GTEST_SKIP() << "network namespaces are unavailable here: " << up.err;
    ASSERT_EQ(up.exit_code, 0) << up.out << up.err;
    up_ = true;
#endif
  }

  void TearDown() override {
    daemons_.clear();  // SIGTERM, then SIGKILL, each reaped
    if (up_) {
      RunResult down =
          RunBinary("/bin/bash",
                    "'" + std::string(SINKRT_SOURCE_DIR) + "/scripts/netns_testbed.sh' down --prefix " + prefix_, dir_);
      EXPECT_EQ(down.exit_code, 0) << down.err;
      EXPECT_FALSE(fs::exists("/run/netns/" + prefix_ + "0")) << "the test bed outlived its test";
    }
    if (!dir_.empty() && !HasFailure()) fs::remove_all(dir_);
  }

  std::string Namespace(int host) const { return prefix_ + std::to_string(host); }
  fs::path Log(int rank) const { return dir_ / ("sinkd" + std::to_string(rank) + ".log"); }

  // kPerHost daemons per namespace, rank = host * kPerHost + local, each on
  // its namespace's address, and the server_list rank table naming them.
  void StartDaemons(const std::vector<std::string>& extra = {}) {
#ifdef SINKD_PATH
    for (int h = 0; h < kHosts; ++h)
      for (int d = 0; d < kPerHost; ++d) {
        const int rank = h * kPerHost + d;
        std::vector<std::string> args = {"netns",      "exec",
                                         Namespace(h), SINKD_PATH,
                                         "--listen",   HostAddress(h) + ":" + std::to_string(kBasePort + d),
                                         "--rank",     std::to_string(rank),
                                         "--token",    kToken,
                                         "--threads",  "1"};
        args.insert(args.end(), extra.begin(), extra.end());
        auto daemon = std::make_unique<SinkdProcess>();
        ASSERT_TRUE(daemon->Start(ip_, args, Log(rank).string()).ok()) << daemon->ReadLog();
        EXPECT_EQ(daemon->address().ToString(), HostAddress(h) + ":" + std::to_string(kBasePort + d));
        daemons_.push_back(std::move(daemon));
      }
#endif
    nlohmann::json servers = nlohmann::json::array();
    for (int h = 0; h < kHosts; ++h) {
      nlohmann::json devices = nlohmann::json::array();
      for (int d = 0; d < kPerHost; ++d)
        devices.push_back({{"device_id", std::to_string(d)}, {"rank_id", std::to_string(h * kPerHost + d)}});
      servers.push_back({{"server_id", HostAddress(h)}, {"device", devices}});
    }
    std::ofstream(dir_ / "rank_table.json") << nlohmann::json{
        {"version", "1.0"},
        {"server_count", std::to_string(kHosts)},
        {"server_list", servers},
        {"status", "completed"}}.dump(1);
  }

  // ip's arguments that run sinkrun in namespace 0 as the job's driver;
  // `env`: NAME=value entries for the driver alone.
  std::vector<std::string> Driver(const std::string& args, const std::vector<std::string>& env = {}) const {
    std::vector<std::string> argv = {"netns", "exec", Namespace(0), "/usr/bin/env"};
    argv.insert(argv.end(), env.begin(), env.end());
    argv.insert(argv.end(), {"/bin/sh", "-c"});
#ifdef SINKRUN_PATH
    argv.push_back(std::string("exec '") + SINKRUN_PATH + "' " + args + " --rank-table '" +
                   (dir_ / "rank_table.json").string() + "' --token " + kToken);
#endif
    return argv;
  }

  std::string ip_, prefix_;
  fs::path dir_;
  bool up_ = false;
  std::vector<std::unique_ptr<SinkdProcess>> daemons_;
};

// 4 ranks x batch 16 on two namespaces against one device x batch 64, the
// gradients averaged: the same parameters within 1e-5 (the sums run in
// another order). Each daemon's join line says which peers it reaches by
// shared memory and which by TCP.
TEST_F(NetnsTest, DataParallelAcrossTwoNamespacesMatchesOneDevice) {
  ASSERT_NO_FATAL_FAILURE(StartDaemons());
  const std::string common = "train --model mlp --data synthetic:512 --epochs 2 --seed 5";
  Launcher dp;
  ASSERT_NO_FATAL_FAILURE(dp.Start(ip_,
                                   Driver(common +
                                          " --batch 16 --parallel data_parallel --gradients-mean true "
                                          "--save-checkpoint '" +
                                          (dir_ / "dp.ckpt").string() + "'"),
                                   dir_ / "dp.err"));
  dp.ReadUntil("Trained ", seconds(60));
  const int dp_status = dp.Wait(seconds(60));
  ASSERT_TRUE(dp_status != -1 && WIFEXITED(dp_status) && WEXITSTATUS(dp_status) == 0)
      << dp.printed() << Slurp(dir_ / "dp.err");
  EXPECT_NE(dp.printed().find("device: 4 sinkd daemons, ranks 0-3"), std::string::npos) << dp.printed();
  // Two hosts of two: the gradients take the two-level AllReduce.
  EXPECT_NE(dp.printed().find(") two-level (shm reduce-scatter, tcp doubling across 2 hosts, shm all-gather)"),
            std::string::npos)
      << dp.printed();

#ifdef SINKRUN_PATH
  RunResult one = RunBinary(
      SINKRUN_PATH, common + " --batch 64 --threads 1 --save-checkpoint '" + (dir_ / "one.ckpt").string() + "'", dir_);
  ASSERT_EQ(one.exit_code, 0) << one.out << one.err;
#endif
  testing::ExpectCheckpointsClose(dir_ / "dp.ckpt", dir_ / "one.ckpt", 1e-5);

  // Ranks 0 and 1 live in namespace 0, 2 and 3 in namespace 1.
  const char* expected[kRanks] = {
      "(shm ranks 1, tcp ranks 2 3; 3 connections, 1 shm)", "(shm ranks 0, tcp ranks 2 3; 3 connections, 1 shm)",
      "(shm ranks 3, tcp ranks 0 1; 3 connections, 1 shm)", "(shm ranks 2, tcp ranks 0 1; 3 connections, 1 shm)"};
  for (int r = 0; r < kRanks; ++r) {
    const std::string log = Slurp(Log(r));
    EXPECT_NE(log.find(std::string("as rank ") + std::to_string(r) + " of 4 " + expected[r]), std::string::npos)
        << "rank " << r << ":\n"
        << log;
  }
}

// One host process per rank across the two namespaces, as a cluster runs
// it: `sinkrun launch --node-rank H` on each host starts its two ranks, which
// meet at rank 0's master on host 0 and train with in-process devices that
// accept their peers on their namespace's address. Rank 0 writes the
// checkpoint; it matches one device at the global batch within 1e-5.
TEST_F(NetnsTest, OneProcessPerRankOnTwoHostsMatchesOneDevice) {
  const std::string common = "train --model mlp --data synthetic:512 --epochs 2 --seed 5";
#ifdef SINKRUN_PATH
  std::vector<std::unique_ptr<Launcher>> hosts;
  for (int h = 0; h < kHosts; ++h) {
    std::vector<std::string> argv = {"netns",
                                     "exec",
                                     Namespace(h),
                                     SINKRUN_PATH,
                                     "launch",
                                     "-n",
                                     std::to_string(kRanks),
                                     "--local-worker-num",
                                     std::to_string(kPerHost),
                                     "--node-rank",
                                     std::to_string(h),
                                     "--master-addr",
                                     HostAddress(0),
                                     "--master-port",
                                     "8118",
                                     "--token",
                                     kToken,
                                     "--",
                                     "/bin/sh",
                                     "-c",
                                     std::string("exec '") + SINKRUN_PATH + "' " + common +
                                         " --batch 16 --parallel data_parallel --gradients-mean true "
                                         "--save-checkpoint '" +
                                         (dir_ / "ranks.ckpt").string() + "'"};
    hosts.push_back(std::make_unique<Launcher>());
    ASSERT_NO_FATAL_FAILURE(hosts.back()->Start(ip_, argv, dir_ / ("host" + std::to_string(h) + ".err")));
  }
  // Rank 0 prints the training lines; the other ranks only their errors.
  hosts[0]->ReadUntil("Trained ", seconds(90));
  for (int h = 0; h < kHosts; ++h) {
    const int status = hosts[h]->Wait(seconds(90));
    ASSERT_TRUE(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "host " << h << ": " << hosts[h]->printed() << Slurp(dir_ / ("host" + std::to_string(h) + ".err"));
  }
  EXPECT_NE(hosts[0]->printed().find("in-process, rank 0 of 4 (RANK_ID; master " + HostAddress(0) + ":8118)"),
            std::string::npos)
      << hosts[0]->printed();
  RunResult one = RunBinary(
      SINKRUN_PATH, common + " --batch 64 --threads 1 --save-checkpoint '" + (dir_ / "one.ckpt").string() + "'", dir_);
  ASSERT_EQ(one.exit_code, 0) << one.out << one.err;
#endif
  testing::ExpectCheckpointsClose(dir_ / "ranks.ckpt", dir_ / "one.ckpt", 1e-5);
}

// Seconds since the epoch of a sinkd log line's stamp
// ("2026-11-27T05:38:38.098Z sinkd[rank 0] ..."), -1 if it has none.
double LogStamp(const std::string& line) {
  std::tm t{};
  int ms = 0;
  if (std::sscanf(line.c_str(), "%d-%d-%dT%d:%d:%d.%dZ", &t.tm_year, &t.tm_mon, &t.tm_mday, &t.tm_hour, &t.tm_min,
                  &t.tm_sec, &ms) != 7)
    return -1;
  t.tm_year -= 1900;
  t.tm_mon -= 1;
  return static_cast<double>(::timegm(&t)) + ms / 1000.0;
}

// The link of namespace 1 goes down while sinks run: no RST, no FIN, the
// packets just vanish. Every rank must fail within the peer timeout (plus
// the stall report's second and a margin for the 2-core box), naming the
// ranks of the other namespace as not answering; the driver, whose own
// deadline for a sink's answer is SINKRT_SINK_TIMEOUT_MS, exits non-zero
// naming them. Without that deadline the driver learns of the cut ranks
// only from TCP keepalive (wire_socket.cc: 10 s idle + 3 probes 2 s apart).
TEST_F(NetnsTest, LinkCutFailsEveryRankWithinThePeerTimeout) {
  constexpr int kPeerTimeoutMs = 2000, kSinkTimeoutMs = 5000;
  ASSERT_NO_FATAL_FAILURE(StartDaemons({"--peer-timeout-ms", std::to_string(kPeerTimeoutMs)}));
  Launcher job;
  ASSERT_NO_FATAL_FAILURE(job.Start(ip_,
                                    Driver("train --model mlp --data synthetic:8192 --epochs 100000 --seed 5 "
                                           "--batch 16 --parallel data_parallel --sink-size 64",
                                           {"SINKRT_PEER_TIMEOUT_MS=" + std::to_string(kPeerTimeoutMs),
                                            "SINKRT_SINK_TIMEOUT_MS=" + std::to_string(kSinkTimeoutMs)}),
                                    dir_ / "job.err"));
  // The first sink's loss line: every rank has joined, and the second sink
  // runs (sinks of 64 steps, a few hundred ms, a host round trip apart: a cut
  // between two sinks, which idle daemons would not notice, is unlikely).
  ASSERT_TRUE(job.ReadUntil("epoch: 1 step: 64, loss is", seconds(60))) << job.printed() << Slurp(dir_ / "job.err");

  const Clock::time_point cut = Clock::now();
  const double cut_wall = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  RunResult down = RunBinary(ip_, "-n " + Namespace(1) + " link set eth0 down", dir_);
  ASSERT_EQ(down.exit_code, 0) << down.err;

  const int status = job.Wait(seconds(30));
  const double driver_s = std::chrono::duration<double>(Clock::now() - cut).count();
  const std::string err = Slurp(dir_ / "job.err");
  ASSERT_NE(status, -1) << "the driver still runs 30 s after the cut:\n" << job.printed() << err;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0) << status << "\n" << err;
  EXPECT_LT(driver_s, (kSinkTimeoutMs + 5000) / 1000.0) << err;
  EXPECT_TRUE(err.find("rank 2") != std::string::npos && err.find("rank 3") != std::string::npos) << err;
  std::printf("driver exited %.1f s after the cut: %s\n", driver_s, err.c_str());

  // Each daemon's log: its sink failed (its own failure or the notice of a
  // peer in its namespace, which shares memory with it), naming a rank of
  // the other namespace as not answering.
  const Clock::time_point deadline = cut + seconds(30);
  bool names_other_host[kHosts] = {};
  for (int r = 0; r < kRanks; ++r) {
    std::string log;
    while ((log = Slurp(Log(r))).find(": sink failed: ") == std::string::npos && Clock::now() < deadline)
      std::this_thread::sleep_for(milliseconds(20));  // polling a file, bounded by the deadline
    const size_t at = log.find(": sink failed: ");
    ASSERT_NE(at, std::string::npos) << "rank " << r << " did not fail within 30 s of the cut:\n" << log;
    const size_t begin = log.rfind('\n', at) == std::string::npos ? 0 : log.rfind('\n', at) + 1;
    const std::string line = log.substr(begin, log.find('\n', at) - begin);
    const double after = LogStamp(line) - cut_wall;
    std::printf("rank %d, %.1f s after the cut: %s\n", r, after, line.c_str());
    EXPECT_LT(after, (kPeerTimeoutMs + 3000) / 1000.0) << line;
    // The two-level AllReduce's cross-host phase pairs each rank with the
    // rank of its local index on the other host, which it names as not
    // answering. A rank the cut found in the shm phase fails on its
    // host-mate instead, whose stall report says it is stuck in the
    // cross-host phase ("rank 1 has not arrived (it is in AllReduce #66 of
    // another group, waiting for rank 3)"; whom it waits for only when its
    // progress said so in time). At least one rank of each host names the
    // other host.
    bool named = false;
    for (int other : r < kPerHost ? std::vector<int>{2, 3} : std::vector<int>{0, 1})
      named = named || line.find("rank " + std::to_string(other) + " does not answer") != std::string::npos ||
              line.find("waiting for rank " + std::to_string(other)) != std::string::npos;
    names_other_host[r / kPerHost] = names_other_host[r / kPerHost] || named;
    EXPECT_TRUE(named || line.find("has not arrived (it is in AllReduce #") != std::string::npos)
        << "rank " << r << ": " << line;
  }
  for (int h = 0; h < kHosts; ++h)
    EXPECT_TRUE(names_other_host[h]) << "no rank of host " << h << " names the other host";
}

}  // namespace
}  // namespace sinkrt
