// Every tool's --version: exit 0, on stdout, the same shape everywhere:
// "TOOL MAJOR.MINOR.PATCH" (the release of version.h), the task-stream
// format and the wire protocol, and in the tools that link the host
// library the graph file and checkpoint formats. The numbers are read here
// from the constants the writers and readers use, not from the text helper
// the tools call.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/src/wire.h"
#include "sinkrt/host/file_formats.h"
#include "sinkrt/runtime/stream_format.h"
#include "sinkrt/runtime/version.h"
#include "support/run_binary.h"

namespace sinkrt {
namespace {

namespace fs = std::filesystem;

struct Tool {
  std::string name;
  std::string path;
  bool host;  // links the host library: prints its file formats too
};

std::vector<Tool> Tools() {
  std::vector<Tool> tools;
#ifdef SINKD_PATH
  tools.push_back({"sinkd", SINKD_PATH, false});
#endif
#ifdef SINKDUMP_PATH
  tools.push_back({"sinkdump", SINKDUMP_PATH, false});
#endif
#ifdef SINKRUN_PATH
  tools.push_back({"sinkrun", SINKRUN_PATH, true});
#endif
#ifdef SINKC_PATH
  tools.push_back({"sinkc", SINKC_PATH, true});
#endif
#ifdef SINKPROF_PATH
  tools.push_back({"sinkprof", SINKPROF_PATH, true});
#endif
  return tools;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::string Dotted(uint32_t major, uint32_t minor) { return std::to_string(major) + "." + std::to_string(minor); }

TEST(ToolVersion, EveryToolPrintsItsVersionsOnStdoutAndExitsZero) {
  const std::vector<Tool> tools = Tools();
  ASSERT_EQ(tools.size(), 5u) << "a tool is not built: every one must answer --version";
  const fs::path scratch = fs::temp_directory_path() / ("sinkrt_tool_version_" + std::to_string(getpid()));
  fs::create_directories(scratch);
  const std::string release = std::to_string(SINKRT_VERSION_MAJOR) + "." + std::to_string(SINKRT_VERSION_MINOR) + "." +
                              std::to_string(SINKRT_VERSION_PATCH);
  ASSERT_EQ(release, SINKRT_VERSION_STRING);
  for (const Tool& tool : tools) {
    SCOPED_TRACE(tool.name);
    const testing::RunResult r = testing::RunBinary(tool.path, "--version", scratch);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.err, "");
    const std::vector<std::string> lines = Lines(r.out);
    ASSERT_FALSE(lines.empty()) << "nothing on stdout";
    EXPECT_TRUE(std::regex_match(lines[0], std::regex(tool.name + " [0-9]+\\.[0-9]+\\.[0-9]+"))) << lines[0];
    std::vector<std::string> expected = {tool.name + " " + release,
                                         "task stream format " + Dotted(kFormatMajor, kFormatMinor),
                                         "wire protocol " + Dotted(kProtocolMajor, kProtocolMinor)};
    if (tool.host) {
      expected.push_back("graph file format " + Dotted(host::kGraphFileFormat.major, host::kGraphFileFormat.minor));
      expected.push_back("checkpoint format " + Dotted(host::kCheckpointFormat.major, host::kCheckpointFormat.minor));
    }
    EXPECT_EQ(lines, expected) << r.out;
    EXPECT_EQ(r.out.back(), '\n');  // and no blank line after it (Lines would hold it)
  }
  fs::remove_all(scratch);
}

TEST(ToolVersion, TheApiReportsWhatTheHeadersSay) {
  const Versions v = LinkedVersions();
  EXPECT_EQ(v.library, SINKRT_VERSION_STRING);
  EXPECT_EQ(v.task_stream.major, kFormatMajor);
  EXPECT_EQ(v.task_stream.minor, kFormatMinor);
  EXPECT_EQ(v.wire_protocol.major, kProtocolMajor);
  EXPECT_EQ(v.wire_protocol.minor, kProtocolMinor);
  const host::FileFormats f = host::FileFormatVersions();
  EXPECT_EQ(f.graph_file.major, host::kGraphFileFormat.major);
  EXPECT_EQ(f.graph_file.minor, host::kGraphFileFormat.minor);
  EXPECT_EQ(f.checkpoint.major, host::kCheckpointFormat.major);
  EXPECT_EQ(f.checkpoint.minor, host::kCheckpointFormat.minor);
}

}  // namespace
}  // namespace sinkrt
