// sinkd's command line and environment: usage errors exit 2 with a message
// a person can read, and a nonsense SINKRT_*/HCCL_* number stops it before
// it binds, as sinkrun and sinkc do.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

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
  for (const char* env : {"SINKRT_CONNECT_TIMEOUT_MS=abc", "SINKRT_GETNEXT_TIMEOUT_MS=-5",
                          "SINKRT_PEER_TIMEOUT_MS=5s", "HCCL_CONNECT_TIMEOUT=abc", "HCCL_EXEC_TIMEOUT=-5",
                          "SINKRT_DEVICE_THREADS=many"}) {
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
