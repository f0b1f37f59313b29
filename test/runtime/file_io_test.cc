// runtime/file_io: every reader refuses what is not a regular file (naming
// what it is) and what is larger than its format allows; writes report the
// system's reason; a directory is known writable before work is done in it;
// only dead writers' temporaries are removed.
#include "runtime/src/file_io.h"

#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "support/test_util.h"

namespace sinkrt {
namespace {

namespace fs = std::filesystem;

class FileIo : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("sinkrt_file_io_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  void Touch(const std::string& name, const std::string& text = "x") {
    std::ofstream(Path(name), std::ios::binary) << text;
  }

  fs::path dir_;
};

void ExpectError(const Status& st, StatusCode code, const std::string& text) {
  ASSERT_FALSE(st.ok()) << "expected: " << text;
  EXPECT_EQ(st.code(), code) << st.ToString();
  EXPECT_NE(st.message().find(text), std::string::npos) << st.message();
}

constexpr FileLimit kTestLimit{1000, "a test file"};

// 'path' (appended, not `"'" + path`, which GCC 12 warns about: -Wrestrict).
std::string Quoted(const std::string& path) { return std::string(1, '\'').append(path).append(1, '\''); }

// /dev/zero never ends: it was read until std::bad_alloc at 4 GB.
TEST_F(FileIo, ReadingAnythingButARegularFileIsRefusedNamingWhatItIs) {
  ExpectError(ReadFileBytes("/dev/zero", kTestLimit).status(), StatusCode::kInvalidArgument,
              "'/dev/zero' is a character device, not a regular file");
  ExpectError(ReadFileBytes("/dev/urandom", kFlatBufferFileLimit).status(), StatusCode::kInvalidArgument,
              "'/dev/urandom' is a character device");
  ExpectError(ReadFileBytes(dir_.string(), kTestLimit).status(), StatusCode::kInvalidArgument,
              Quoted(dir_.string()) + " is a directory, not a regular file");
  // A FIFO with no writer: refused at once, not waited on.
  ASSERT_EQ(::mkfifo(Path("fifo").c_str(), 0600), 0);
  ExpectError(ReadFileBytes(Path("fifo"), kTestLimit).status(), StatusCode::kInvalidArgument,
              "is a FIFO (named pipe), not a regular file");
  ExpectError(ReadFileBytes(Path("none"), kTestLimit).status(), StatusCode::kNotFound, Path("none"));
  ExpectError(CheckRegularFile("/dev/zero"), StatusCode::kInvalidArgument, "'/dev/zero' is a character device");
  ExpectError(CheckRegularFile(Path("none")), StatusCode::kNotFound, Quoted(Path("none")) + ": no such file");
  Touch("a", "abc");
  EXPECT_TRUE(testing::ToStatus(CheckRegularFile(Path("a"))).ok());
  auto bytes = ReadFileBytes(Path("a"), kTestLimit);
  SINKRT_ASSERT_OK(bytes);
  EXPECT_EQ(std::string(bytes->begin(), bytes->end()), "abc");
}

TEST_F(FileIo, AFileLargerThanItsFormatAllowsIsRefusedBeforeItIsRead) {
  Touch("big", std::string(1001, 'x'));
  ExpectError(ReadFileBytes(Path("big"), kTestLimit).status(), StatusCode::kInvalidArgument,
              "holds 1001 bytes, more than a test file may (1000)");
  Touch("fits", std::string(1000, 'x'));
  EXPECT_TRUE(testing::ToStatus(ReadFileBytes(Path("fits"), kTestLimit)).ok());
  // /proc files say they are empty and are not: read to their end all the same.
  auto meminfo = ReadFileBytes("/proc/self/status", kJsonFileLimit);
  SINKRT_ASSERT_OK(meminfo);
  EXPECT_GT(meminfo->size(), 0u);
}

// A full disk said "error writing" without the reason.
TEST_F(FileIo, AWriteThatFailsSaysWhy) {
  const std::vector<uint8_t> bytes(4096, 7);
  ExpectError(WriteFileBytes("/dev/full", bytes), StatusCode::kUnavailable,
              "error writing '/dev/full': No space left on device");
  EXPECT_TRUE(fs::is_character_file("/dev/full")) << "a device is written into, never replaced";
  ExpectError(WriteFileBytes(Path("no-dir/f"), bytes), StatusCode::kUnavailable, "No such file or directory");
  ExpectError(WriteFileBytes(dir_.string(), bytes), StatusCode::kInvalidArgument, "is a directory");
  SINKRT_ASSERT_OK(WriteFileBytes(Path("ok"), bytes));
  EXPECT_EQ(fs::file_size(Path("ok")), bytes.size());
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename().string());
  EXPECT_EQ(names, std::vector<std::string>{"ok"}) << "no temporary left";
}

TEST_F(FileIo, ADirectoryIsKnownWritableBeforeWorkIsDoneInIt) {
  EXPECT_TRUE(testing::ToStatus(CheckDirectoryWritable(dir_.string())).ok());
  // Not there yet: where it would be created must be writable; nothing is created.
  EXPECT_TRUE(testing::ToStatus(CheckDirectoryWritable(Path("a/b/c"))).ok());
  EXPECT_FALSE(fs::exists(Path("a")));
  // Read-only for root too.
  ExpectError(CheckDirectoryWritable("/sys/kernel"), StatusCode::kPermissionDenied,
              "cannot write in the directory '/sys/kernel'");
  ExpectError(CheckDirectoryWritable("/sys/no-such/dir"), StatusCode::kPermissionDenied,
              "cannot create the directory '/sys/no-such/dir': cannot write in '/sys'");
  Touch("file");
  ExpectError(CheckDirectoryWritable(Path("file")), StatusCode::kInvalidArgument,
              Quoted(Path("file")) + " is a regular file, not a directory");
  ExpectError(
      CheckDirectoryWritable(Path("file/sub")), StatusCode::kInvalidArgument,
      "cannot create the directory " + Quoted(Path("file/sub")) + ": " + Quoted(Path("file")) + " is a regular file");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1) << "no probe left";
}

// A pid that was alive and is not any more: a child that has been reaped.
pid_t DeadPid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  int status = 0;
  ::waitpid(child, &status, 0);
  return child;
}

TEST_F(FileIo, OnlyTemporariesOfDeadWritersAreRemoved) {
  const std::string dead = ".a-1_1.ckpt.tmp." + std::to_string(DeadPid());
  const std::string live = ".a-1_2.ckpt.tmp." + std::to_string(::getpid());
  const std::string other_suffix = ".report.json.tmp." + std::to_string(DeadPid());
  const std::string not_temp = "a-1_1.ckpt.tmp.1x";
  // Dead by its pid, but locked: a writer whose pid this process cannot see
  // (another PID namespace, another host on a shared filesystem).
  const std::string locked = ".a-1_3.ckpt.tmp." + std::to_string(DeadPid());
  for (const std::string& name : {dead, live, other_suffix, not_temp, locked}) Touch(name);
  const int fd = ::open(Path(locked).c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX), 0);
  EXPECT_EQ(RemoveStaleTemporaries(dir_.string(), ".ckpt"), std::vector<std::string>{dead});
  ::close(fd);
  for (const std::string& name : {live, other_suffix, not_temp, locked}) EXPECT_TRUE(fs::exists(Path(name))) << name;
  EXPECT_FALSE(fs::exists(Path(dead)));
  EXPECT_EQ(RemoveStaleTemporaries(dir_.string(), ".ckpt"), std::vector<std::string>{locked});
}

}  // namespace
}  // namespace sinkrt
