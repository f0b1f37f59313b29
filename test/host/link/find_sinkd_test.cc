// Where a program finds sinkd (FindSinkd): beside itself (an installation's
// bin/), in ../device (the build tree), then along PATH (an application of
// its own linking an installed sinkrt). Real files in a temporary tree.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "host/src/link/launch/find_sinkd.h"

namespace sinkrt::host {
namespace {

namespace fs = std::filesystem;

class FindSinkdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("find_sinkd_test_" + std::to_string(::getpid()) + "_" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    for (const char* d : {"app", "bin", "build/tools", "build/device", "path1", "path2"})
      fs::create_directories(root_ / d);
  }
  void TearDown() override { fs::remove_all(root_); }

  fs::path Executable(const fs::path& p, fs::perms perms = fs::perms::owner_all) {
    std::ofstream(p) << "#!/bin/sh\n";
    fs::permissions(p, perms);
    return p;
  }
  fs::path root_;
};

TEST_F(FindSinkdTest, BesideTheExecutableFirst) {
  const fs::path beside = Executable(root_ / "bin/sinkd");
  Executable(root_ / "path1/sinkd");
  const std::string path = (root_ / "path1").string();
  auto found = FindSinkdFrom(root_ / "bin/sinkrun", path.c_str());
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  EXPECT_EQ(*found, beside.string());
}

TEST_F(FindSinkdTest, TheBuildTreesDeviceFolderSecond) {
  const fs::path built = Executable(root_ / "build/device/sinkd");
  auto found = FindSinkdFrom(root_ / "build/tools/sinkrun", nullptr);
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  EXPECT_EQ(*found, built.string());
}

TEST_F(FindSinkdTest, PathLastSkippingEmptyEntriesAndFilesThatDoNotRun) {
  Executable(root_ / "path1/sinkd", fs::perms::owner_read | fs::perms::owner_write);  // not executable
  const fs::path runnable = Executable(root_ / "path2/sinkd");
  const std::string path = "::" + (root_ / "path1").string() + "::" + (root_ / "path2").string() + ":";
  auto found = FindSinkdFrom(root_ / "app/my_trainer", path.c_str());
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  EXPECT_EQ(*found, runnable.string());
}

TEST_F(FindSinkdTest, NowhereSaysWhereItLookedAndHowToPointAtIt) {
  const std::string path = (root_ / "path1").string();
  auto found = FindSinkdFrom(root_ / "app/my_trainer", path.c_str());
  ASSERT_FALSE(found.ok());
  const std::string message = found.status().ToString();
  EXPECT_NE(message.find((root_ / "app/sinkd").string()), std::string::npos) << message;
  EXPECT_NE(message.find("on PATH"), std::string::npos) << message;
  EXPECT_NE(message.find("SINKRT_SINKD"), std::string::npos) << message;
}

TEST_F(FindSinkdTest, UnknownExecutableAndNoPathIsAnError) {
  auto found = FindSinkdFrom({}, nullptr);
  ASSERT_FALSE(found.ok());
  EXPECT_NE(found.status().ToString().find("SINKRT_SINKD"), std::string::npos);
}

}  // namespace
}  // namespace sinkrt::host
