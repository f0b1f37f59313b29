// Addresses, rank tables in their three layouts (MindSpore's samples
// included) and the launcher environment.
#include "sinkrt/runtime/rank_table.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <string>

#include "runtime/src/file_io.h"
#include "sinkrt/runtime/address.h"

namespace sinkrt {
namespace {

constexpr const char* kSource = "cluster/ranks.json";

std::string DataPath(const char* name) { return std::string(SINKRT_SOURCE_DIR) + "/test/data/rank_tables/" + name; }

std::string ReadSample(const char* name) {
  auto bytes = ReadFileBytes(DataPath(name), kJsonFileLimit);
  EXPECT_TRUE(bytes.ok()) << bytes.status().ToString();
  return bytes.ok() ? std::string(bytes->begin(), bytes->end()) : std::string();
}

// The sample with one edit; failing loudly if the edit no longer applies
// keeps a test from passing on an unedited table.
std::string Edit(std::string text, const std::string& from, const std::string& to) {
  size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << "'" << from << "' is not in the sample";
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

// An InvalidArgument whose message contains every one of `parts`.
template <typename T>
::testing::AssertionResult FailsWith(const Result<T>& r, std::initializer_list<std::string> parts) {
  if (r.ok()) return ::testing::AssertionFailure() << "succeeded";
  if (r.status().code() != StatusCode::kInvalidArgument)
    return ::testing::AssertionFailure() << "wrong code: " << r.status().ToString();
  for (const std::string& part : parts)
    if (r.status().message().find(part) == std::string::npos)
      return ::testing::AssertionFailure() << "'" << part << "' not in: " << r.status().message();
  return ::testing::AssertionSuccess() << r.status().message();
}

// A table error: also prefixed by the source.
::testing::AssertionResult TableFails(std::string_view json, std::initializer_list<std::string> parts,
                                      uint16_t base_port = kDefaultBasePort) {
  auto r = ParseRankTable(json, kSource, base_port);
  auto result = FailsWith(r, parts);
  if (!result) return result;
  if (r.status().message().rfind(std::string(kSource) + ": ", 0) != 0)
    return ::testing::AssertionFailure() << "not prefixed by the source: " << r.status().message();
  return result;
}

// ---- Addresses ----

TEST(AddressTest, ParsesIpv4AndNames) {
  auto a = ParseAddress("127.0.0.1:7100");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 7100);
  EXPECT_EQ(a->ToString(), "127.0.0.1:7100");

  auto b = ParseAddress("node-3.cluster:65535");
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->host, "node-3.cluster");
  EXPECT_EQ(b->port, 65535);
}

TEST(AddressTest, ParsesBracketedIpv6) {
  auto a = ParseAddress("[::1]:7100");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->host, "::1");
  EXPECT_EQ(a->port, 7100);
  EXPECT_EQ(a->ToString(), "[::1]:7100");
  EXPECT_EQ(ParseAddress(a->ToString()).value(), *a);

  auto b = ParseAddress("[fe80::1:2]:1");
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->host, "fe80::1:2");
}

TEST(AddressTest, MissingPort) {
  EXPECT_TRUE(FailsWith(ParseAddress("127.0.0.1"), {"address '127.0.0.1' has no port: write HOST:PORT"}));
  EXPECT_TRUE(FailsWith(ParseAddress("[::1]"), {"'[::1]'", "no port"}));
  EXPECT_TRUE(FailsWith(ParseAddress("host:"), {"'host:'", "empty port"}));
  EXPECT_TRUE(FailsWith(ParseAddress(""), {"''", "empty"}));
}

TEST(AddressTest, BadPort) {
  EXPECT_TRUE(FailsWith(ParseAddress("h:99999"), {"address 'h:99999': port 99999 is out of range 1..65535"}));
  EXPECT_TRUE(FailsWith(ParseAddress("h:65536"), {"'h:65536'", "65536 is out of range"}));
  EXPECT_TRUE(FailsWith(ParseAddress("h:123456789012345678901234567890"), {"out of range"}));
  EXPECT_TRUE(FailsWith(ParseAddress("h:http"), {"'h:http'", "port 'http' is not a number"}));
  EXPECT_TRUE(FailsWith(ParseAddress("h:-1"), {"port '-1' is not a number"}));
  EXPECT_TRUE(FailsWith(ParseAddress("h: 80"), {"not a number"}));
}

TEST(AddressTest, PortZeroOnlyWithFlag) {
  EXPECT_TRUE(FailsWith(ParseAddress("127.0.0.1:0"), {"'127.0.0.1:0'", "port 0 is out of range 1..65535"}));
  auto a = ParseAddress("127.0.0.1:0", /*allow_port_zero=*/true);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->port, 0);
  EXPECT_TRUE(FailsWith(ParseAddress("h:70000", true), {"out of range 0..65535"}));
}

TEST(AddressTest, BadHost) {
  EXPECT_TRUE(FailsWith(ParseAddress(":7100"), {"':7100'", "no host"}));
  EXPECT_TRUE(FailsWith(ParseAddress("[]:7100"), {"'[]:7100'", "no host"}));
  EXPECT_TRUE(FailsWith(ParseAddress("::1:7100"), {"'::1:7100'", "needs brackets", "[HOST]:PORT"}));
  EXPECT_TRUE(FailsWith(ParseAddress("[::1:7100"), {"'[::1:7100'", "without ']'"}));
  EXPECT_TRUE(FailsWith(ParseAddress("[::1]7100"), {"expected ':' after ']'"}));
  EXPECT_TRUE(FailsWith(ParseAddress("[localhost]:80"), {"brackets are for IPv6"}));
  EXPECT_TRUE(FailsWith(ParseAddress("my host:80"), {"'my host:80'", "contains ' '"}));
}

TEST(AddressTest, Loopback) {
  for (const char* host :
       {"127.0.0.1", "127.255.3.4", "localhost", "LocalHost", "::1", "0:0:0:0:0:0:0:1", "::ffff:127.0.0.1"})
    EXPECT_TRUE(IsLoopback(host)) << host;
  for (const char* host :
       {"10.0.0.1", "128.0.0.1", "0.0.0.0", "::", "::2", "example.com", "", "127.0.0.1.example.com", "::ffff:10.0.0.1"})
    EXPECT_FALSE(IsLoopback(host)) << host;
}

// ---- MindSpore's layouts, from the samples ----

TEST(RankTableTest, GroupListSample) {
  auto table = LoadRankTable(DataPath("group_list_8dev.json"));
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  EXPECT_EQ(table->layout, "group_list");
  ASSERT_EQ(table->size(), 8u);
  for (uint32_t i = 0; i < 8; ++i) {
    const RankEntry& r = table->ranks[i];
    EXPECT_EQ(r.rank, i);
    EXPECT_EQ(r.address, (Address{"127.0.0.1", static_cast<uint16_t>(7100 + i)}));
    EXPECT_EQ(r.device_id, static_cast<int>(i));
  }
  EXPECT_EQ(table->ranks[0].device_ip, "192.1.27.6");
  EXPECT_EQ(table->ranks[7].device_ip, "192.4.27.7");
}

TEST(RankTableTest, ServerListSample) {
  auto table = LoadRankTable(DataPath("server_list_2x4dev.json"));
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  EXPECT_EQ(table->layout, "server_list");
  ASSERT_EQ(table->size(), 8u);
  for (uint32_t i = 0; i < 8; ++i) {
    const RankEntry& r = table->ranks[i];
    EXPECT_EQ(r.rank, i);
    EXPECT_EQ(r.address.host, i < 4 ? "127.0.0.1" : "127.0.0.2");
    EXPECT_EQ(r.address.port, 7100 + i % 4);
    EXPECT_EQ(r.device_id, static_cast<int>(i % 4));
  }
  EXPECT_EQ(table->ranks[5].device_ip, "192.2.27.7");
}

TEST(RankTableTest, BasePortMovesEveryRank) {
  auto table = LoadRankTable(DataPath("server_list_2x4dev.json"), 9000);
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  EXPECT_EQ(table->ranks[0].address.ToString(), "127.0.0.1:9000");
  EXPECT_EQ(table->ranks[7].address.ToString(), "127.0.0.2:9003");
}

TEST(RankTableTest, MissingFileNamesThePath) {
  std::string path = DataPath("no_such_table.json");
  auto table = LoadRankTable(path);
  ASSERT_FALSE(table.ok());
  EXPECT_NE(table.status().message().find(path), std::string::npos) << table.status().message();
}

// MindSpore's tutorial prints this table with a comma after the last
// instance_list entry; users paste it.
TEST(RankTableTest, TutorialTrailingCommaIsPointedAt) {
  std::string text = ReadSample("group_list_8dev.json");
  size_t last = text.find('}', text.find("\"rank_id\": \"7\""));
  ASSERT_NE(last, std::string::npos);
  text.insert(last + 1, ",");
  size_t close = text.find(']', last);
  size_t line = 1 + std::count(text.begin(), text.begin() + close, '\n');
  size_t column = close - text.rfind('\n', close);
  std::string at = "line " + std::to_string(line) + ", column " + std::to_string(column);
  EXPECT_TRUE(TableFails(text, {"invalid JSON at " + at, "trailing comma after the last element"}));

  std::string path = ::testing::TempDir() + "rank_table_trailing_comma.json";
  ASSERT_TRUE(WriteFileBytes(path, {reinterpret_cast<const uint8_t*>(text.data()), text.size()}).ok());
  auto loaded = LoadRankTable(path);
  EXPECT_TRUE(FailsWith(loaded, {path + ": invalid JSON at " + at, "trailing comma"}));
  std::remove(path.c_str());
}

TEST(RankTableTest, TrailingCommaInObject) {
  EXPECT_TRUE(TableFails("{\"devices\": [],\n  \t}", {"line 2, column 4", "trailing comma", "line 1, column 15"}));
}

TEST(RankTableTest, OtherSyntaxErrorsGiveLineAndColumn) {
  const char* missing_comma = "{\n  \"devices\": [\n    {\"rank\": 0 \"address\": \"h:1\"}\n  ]\n}";
  auto r = ParseRankTable(missing_comma, kSource);
  EXPECT_TRUE(FailsWith(r, {"cluster/ranks.json: invalid JSON at line 3, column", "syntax error"}));
  EXPECT_EQ(r.status().message().find("trailing comma"), std::string::npos);
  EXPECT_TRUE(TableFails("{\"devices\": [", {"invalid JSON at line 1, column"}));
  EXPECT_TRUE(TableFails("", {"invalid JSON at line 1, column 1"}));
}

// ---- The minimal layout ----

TEST(RankTableTest, Minimal) {
  auto table = ParseRankTable(R"({"devices": [
      {"rank": 1, "address": "[::1]:7101", "device_id": 1},
      {"rank": "0", "address": "127.0.0.1:7100", "device_ip": "10.0.0.1"}]})",
                              kSource);
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  EXPECT_EQ(table->layout, "minimal");
  ASSERT_EQ(table->size(), 2u);
  EXPECT_EQ(table->ranks[0].address, (Address{"127.0.0.1", 7100}));
  EXPECT_EQ(table->ranks[0].device_id, -1);
  EXPECT_EQ(table->ranks[0].device_ip, "10.0.0.1");
  EXPECT_EQ(table->ranks[1].address, (Address{"::1", 7101}));
  EXPECT_EQ(table->ranks[1].device_id, 1);
}

TEST(RankTableTest, MinimalNeedsAddress) {
  EXPECT_TRUE(TableFails(R"({"devices": [{"rank": 0}]})", {"devices[0].address is missing"}));
  EXPECT_TRUE(TableFails(R"({"devices": [{"address": "h:1"}]})", {"devices[0].rank is missing"}));
  EXPECT_TRUE(TableFails(R"({"devices": [{"rank": 0, "address": 7100}]})", {"devices[0].address", "7100"}));
}

TEST(RankTableTest, MinimalBadAddress) {
  EXPECT_TRUE(TableFails(R"({"devices": [{"rank": 0, "address": "h:1"}, {"rank": 1, "address": "127.0.0.1"}]})",
                         {"devices[1].address: address '127.0.0.1' has no port"}));
  EXPECT_TRUE(TableFails(R"({"devices": [{"rank": 0, "address": "h:0"}]})", {"devices[0].address", "port 0"}));
}

// ---- Numbers ----

TEST(RankTableTest, NumbersMayBeStringsOrNumbers) {
  std::string text = ReadSample("server_list_2x4dev.json");
  text = Edit(text, R"("rank_id": "0")", R"("rank_id": 0)");
  text = Edit(text, R"("device_id": "3")", R"("device_id": 3)");
  text = Edit(text, R"("server_count": "2")", R"("server_count": 2)");
  auto table = ParseRankTable(text, kSource);
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  EXPECT_EQ(table->ranks[3].address.port, 7103);
  EXPECT_EQ(table->ranks[0].rank, 0u);
}

TEST(RankTableTest, NonIntegerNamesFieldAndPath) {
  std::string sample = ReadSample("server_list_2x4dev.json");
  EXPECT_TRUE(TableFails(Edit(sample, R"("rank_id": "6")", R"("rank_id": "x")"),
                         {R"(server_list[1].device[2].rank_id: "x" is not a non-negative integer)"}));
  EXPECT_TRUE(TableFails(Edit(sample, R"("rank_id": "6")", R"("rank_id": -6)"),
                         {"server_list[1].device[2].rank_id: -6 is not a non-negative integer"}));
  EXPECT_TRUE(TableFails(Edit(sample, R"("rank_id": "6")", R"("rank_id": 6.5)"),
                         {"server_list[1].device[2].rank_id: 6.5 is not a non-negative integer"}));
  EXPECT_TRUE(TableFails(Edit(sample, R"("rank_id": "6")", R"("rank_id": " 6")"), {R"(" 6" is not)"}));
  EXPECT_TRUE(TableFails(Edit(sample, R"("rank_id": "6")", R"("rank_id": "99999999999")"),
                         {"server_list[1].device[2].rank_id", "out of range"}));
  EXPECT_TRUE(TableFails(Edit(sample, R"("device_id": "1")", R"("device_id": "one")"),
                         {R"(server_list[0].device[1].device_id: "one" is not a non-negative integer)"}));

  std::string group = ReadSample("group_list_8dev.json");
  EXPECT_TRUE(TableFails(Edit(group, R"("rank_id": "2")", R"("rank_id": "2a")"),
                         {R"(group_list[0].instance_list[2].rank_id: "2a" is not a non-negative integer)"}));
}

// ---- Validation ----

TEST(RankTableTest, DeviceIdRequiredInMindSporeLayouts) {
  std::string server =
      Edit(ReadSample("server_list_2x4dev.json"), "\"device_id\": \"2\",\n          \"device_ip\": \"192.3.27.6\"",
           "\"device_ip\": \"192.3.27.6\"");
  EXPECT_TRUE(TableFails(server, {"server_list[0].device[2].device_id is missing"}));

  std::string group =
      Edit(ReadSample("group_list_8dev.json"), "\"device_id\": \"3\",\n              \"device_ip\": \"192.4.27.6\"",
           "\"device_ip\": \"192.4.27.6\"");
  EXPECT_TRUE(TableFails(group, {"group_list[0].instance_list[3].devices[0].device_id is missing"}));
}

TEST(RankTableTest, DuplicateRank) {
  std::string text = Edit(ReadSample("server_list_2x4dev.json"), R"("rank_id": "6")", R"("rank_id": "5")");
  EXPECT_TRUE(TableFails(text, {"rank 5 appears twice", "server_list[1].device[1]", "server_list[1].device[2]"}));
}

TEST(RankTableTest, MissingRank) {
  std::string text = Edit(ReadSample("server_list_2x4dev.json"), R"("rank_id": "3")", R"("rank_id": "8")");
  EXPECT_TRUE(TableFails(text, {"rank 3 is missing", "0..7"}));
  EXPECT_TRUE(TableFails(R"({"devices": [{"rank": 1, "address": "h:1"}]})",
                         {"rank 0 is missing: a table of 1 rank must number it 0"}));
}

TEST(RankTableTest, EmptyTable) {
  EXPECT_TRUE(TableFails(R"({"devices": []})", {"no ranks"}));
  EXPECT_TRUE(TableFails(R"({"version": "1.0", "server_list": [], "status": "completed"})", {"no ranks"}));
  EXPECT_TRUE(TableFails(R"({"group_list": [{"instance_list": []}]})", {"no ranks"}));
}

TEST(RankTableTest, SharedAddress) {
  EXPECT_TRUE(TableFails(R"({"devices": [{"rank": 0, "address": "127.0.0.1:7100"},
                                         {"rank": 1, "address": "127.0.0.1:7100"}]})",
                         {"ranks 0 and 1 share address 127.0.0.1:7100", "devices[0]", "devices[1]"}));
  // Two servers with one IP: device d of each lands on the same port.
  std::string text =
      Edit(ReadSample("server_list_2x4dev.json"), R"("server_id": "127.0.0.2")", R"("server_id": "127.0.0.1")");
  EXPECT_TRUE(TableFails(text, {"ranks 0 and 4 share address 127.0.0.1:7100", "server_list[1].device[0]"}));
}

TEST(RankTableTest, StatusMustBeCompleted) {
  std::string text =
      Edit(ReadSample("group_list_8dev.json"), R"("status": "completed")", R"("status": "initializing")");
  EXPECT_TRUE(TableFails(text, {R"(status is "initializing", not "completed")"}));
  // Absent is fine: hand-written tables leave it out.
  EXPECT_TRUE(ParseRankTable(R"({"devices": [{"rank": 0, "address": "h:1"}]})", kSource).ok());
}

TEST(RankTableTest, PortOverflow) {
  EXPECT_TRUE(TableFails(ReadSample("server_list_2x4dev.json"),
                         {"server_list[0].device[2]: base port 65534 + device_id 2 = 65536 is above 65535"}, 65534));
  std::string text = Edit(ReadSample("group_list_8dev.json"), R"("device_id": "7")", R"("device_id": "60000")");
  EXPECT_TRUE(TableFails(text, {"group_list[0].instance_list[7].devices[0]", "67100 is above 65535"}));
}

TEST(RankTableTest, BadServerId) {
  std::string sample = ReadSample("server_list_2x4dev.json");
  EXPECT_TRUE(TableFails(Edit(sample, R"("server_id": "127.0.0.2")", R"("server_id": "127.0.0.2:7100")"),
                         {R"(server_list[1].server_id: "127.0.0.2:7100" carries a port)"}));
  EXPECT_TRUE(TableFails(Edit(sample, R"("server_id": "127.0.0.2")", R"("server_id": "")"),
                         {"server_list[1].server_id is empty"}));
  EXPECT_TRUE(TableFails(Edit(sample, R"("server_id": "127.0.0.2")", R"("server_id": "node 2")"),
                         {"server_list[1].server_id", "contains ' '"}));
  // IPv6 hosts get brackets in the address.
  auto table = ParseRankTable(Edit(sample, R"("server_id": "127.0.0.2")", R"("server_id": "fd00::2")"), kSource);
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  EXPECT_EQ(table->ranks[4].address.ToString(), "[fd00::2]:7100");
}

TEST(RankTableTest, ServerListVersionAndCount) {
  std::string sample = ReadSample("server_list_2x4dev.json");
  EXPECT_TRUE(TableFails(Edit(sample, R"("version": "1.0")", R"("version": "2.0")"), {R"(version: "2.0")", "1.0"}));
  EXPECT_TRUE(TableFails(Edit(sample, R"("server_count": "2")", R"("server_count": "3")"),
                         {"server_count is 3 but server_list has 2 servers"}));
  // Both are optional.
  std::string bare = Edit(Edit(sample, R"("version": "1.0",)", ""), R"("server_count": "2",)", "");
  EXPECT_TRUE(ParseRankTable(bare, kSource).ok());
}

TEST(RankTableTest, UnknownLayout) {
  EXPECT_TRUE(TableFails(R"({"ranks": [], "hosts": 2})",
                         {R"("devices")", R"("server_list")", R"("group_list")", "found keys: hosts, ranks"}));
  EXPECT_TRUE(TableFails("[1, 2]", {"JSON object"}));
}

TEST(RankTableTest, GroupListOneDevicePerInstance) {
  std::string text = Edit(ReadSample("group_list_8dev.json"), R"("device_ip": "192.2.27.6"
            })",
                          R"("device_ip": "192.2.27.6"
            }, {"device_id": "9"})");
  EXPECT_TRUE(TableFails(text, {"group_list[0].instance_list[1].devices has 2 entries"}));
}

// ---- Writing ----

TEST(RankTableTest, ToJsonRoundTrips) {
  for (const char* sample : {"server_list_2x4dev.json", "group_list_8dev.json"}) {
    auto table = LoadRankTable(DataPath(sample));
    ASSERT_TRUE(table.ok()) << table.status().ToString();
    std::string text = RankTableToJson(*table);
    EXPECT_NE(text.find("{\n  \"devices\": [\n    {\n      \"rank\": 0,\n      \"address\": \"127.0.0.1:7100\""),
              std::string::npos)
        << text;
    auto again = ParseRankTable(text, "written");
    ASSERT_TRUE(again.ok()) << again.status().ToString() << "\n" << text;
    EXPECT_EQ(again->layout, "minimal");
    ASSERT_EQ(again->size(), table->size());
    for (size_t i = 0; i < table->size(); ++i) {
      EXPECT_EQ(again->ranks[i].rank, table->ranks[i].rank);
      EXPECT_EQ(again->ranks[i].address, table->ranks[i].address);
      EXPECT_EQ(again->ranks[i].device_id, table->ranks[i].device_id);
      EXPECT_EQ(again->ranks[i].device_ip, table->ranks[i].device_ip);
    }
  }
}

TEST(RankTableTest, ToJsonIpv6AndNoDevice) {
  RankTable table;
  table.layout = "minimal";
  table.ranks.resize(2);
  table.ranks[0].address = {"::1", 7100};
  table.ranks[1].rank = 1;
  table.ranks[1].address = {"localhost", 7101};
  table.ranks[1].device_id = 3;
  std::string text = RankTableToJson(table);
  EXPECT_NE(text.find("\"[::1]:7100\""), std::string::npos) << text;
  EXPECT_EQ(text.find("device_ip"), std::string::npos) << text;
  auto again = ParseRankTable(text, "written");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->ranks[0].address, (Address{"::1", 7100}));
  EXPECT_EQ(again->ranks[0].device_id, -1);
  EXPECT_EQ(again->ranks[1].device_id, 3);
}

// ---- Launcher environment ----

constexpr const char* kLauncherVariables[] = {"RANK_ID",
                                              "RANK_SIZE",
                                              "DEVICE_ID",  //
                                              "OMPI_COMM_WORLD_RANK",
                                              "OMPI_COMM_WORLD_SIZE",
                                              "OMPI_COMM_WORLD_LOCAL_RANK",  //
                                              "PMI_RANK",
                                              "PMI_SIZE",  //
                                              "SLURM_PROCID",
                                              "SLURM_NTASKS",
                                              "SLURM_LOCALID"};

// Starts and leaves with none of the launcher variables set, whatever the
// environment the test runs under (it may itself be inside Slurm).
class LaunchRankTest : public ::testing::Test {
 protected:
  void SetUp() override { Clear(); }
  void TearDown() override { Clear(); }
  static void Clear() {
    for (const char* name : kLauncherVariables) unsetenv(name);
  }
  static void Set(const char* name, const char* value) { setenv(name, value, 1); }
};

TEST_F(LaunchRankTest, NothingSet) {
  auto launch = LaunchRankFromEnvironment();
  ASSERT_TRUE(launch.ok()) << launch.status().ToString();
  EXPECT_FALSE(launch->rank);
  EXPECT_FALSE(launch->world_size);
  EXPECT_FALSE(launch->local_rank);
  EXPECT_EQ(launch->source, "");
}

TEST_F(LaunchRankTest, MindSpore) {
  Set("RANK_ID", "5");
  Set("RANK_SIZE", "8");
  Set("DEVICE_ID", "1");
  auto launch = LaunchRankFromEnvironment();
  ASSERT_TRUE(launch.ok()) << launch.status().ToString();
  EXPECT_EQ(launch->rank, 5u);
  EXPECT_EQ(launch->world_size, 8u);
  EXPECT_EQ(launch->local_rank, 1u);
  EXPECT_EQ(launch->source, "RANK_ID");

  unsetenv("DEVICE_ID");
  unsetenv("RANK_SIZE");
  launch = LaunchRankFromEnvironment();
  ASSERT_TRUE(launch.ok()) << launch.status().ToString();
  EXPECT_EQ(launch->rank, 5u);
  EXPECT_FALSE(launch->world_size);
  EXPECT_FALSE(launch->local_rank);
}

TEST_F(LaunchRankTest, OpenMpi) {
  Set("OMPI_COMM_WORLD_RANK", "6");
  Set("OMPI_COMM_WORLD_SIZE", "16");
  Set("OMPI_COMM_WORLD_LOCAL_RANK", "2");
  auto launch = LaunchRankFromEnvironment();
  ASSERT_TRUE(launch.ok()) << launch.status().ToString();
  EXPECT_EQ(launch->rank, 6u);
  EXPECT_EQ(launch->world_size, 16u);
  EXPECT_EQ(launch->local_rank, 2u);
  EXPECT_EQ(launch->source, "OMPI_COMM_WORLD_RANK");
}

TEST_F(LaunchRankTest, Mpich) {
  Set("PMI_RANK", "0");
  Set("PMI_SIZE", "2");
  auto launch = LaunchRankFromEnvironment();
  ASSERT_TRUE(launch.ok()) << launch.status().ToString();
  EXPECT_EQ(launch->rank, 0u);
  EXPECT_EQ(launch->world_size, 2u);
  EXPECT_FALSE(launch->local_rank);
  EXPECT_EQ(launch->source, "PMI_RANK");
}

TEST_F(LaunchRankTest, Slurm) {
  Set("SLURM_PROCID", "3");
  Set("SLURM_NTASKS", "4");
  Set("SLURM_LOCALID", "3");
  Set("DEVICE_ID", "0");  // MindSpore's, not Slurm's: ignored without RANK_ID
  auto launch = LaunchRankFromEnvironment();
  ASSERT_TRUE(launch.ok()) << launch.status().ToString();
  EXPECT_EQ(launch->rank, 3u);
  EXPECT_EQ(launch->world_size, 4u);
  EXPECT_EQ(launch->local_rank, 3u);
  EXPECT_EQ(launch->source, "SLURM_PROCID");
}

TEST_F(LaunchRankTest, FirstLauncherWins) {
  Set("SLURM_PROCID", "1");
  Set("SLURM_NTASKS", "2");
  Set("OMPI_COMM_WORLD_RANK", "7");
  Set("OMPI_COMM_WORLD_SIZE", "8");
  auto launch = LaunchRankFromEnvironment();
  ASSERT_TRUE(launch.ok()) << launch.status().ToString();
  EXPECT_EQ(launch->source, "OMPI_COMM_WORLD_RANK");
  EXPECT_EQ(launch->rank, 7u);
  EXPECT_EQ(launch->world_size, 8u);
  EXPECT_FALSE(launch->local_rank);  // not taken from another launcher

  Set("RANK_ID", "0");
  launch = LaunchRankFromEnvironment();
  ASSERT_TRUE(launch.ok()) << launch.status().ToString();
  EXPECT_EQ(launch->source, "RANK_ID");
  EXPECT_EQ(launch->rank, 0u);
  EXPECT_FALSE(launch->world_size);
}

// Issue 39: RANK_SIZE=2 without RANK_ID trained as one process, silently.
TEST_F(LaunchRankTest, AWorldSizeWithoutItsRankIsRefusedNamingTheMissingVariable) {
  Set("RANK_SIZE", "2");
  EXPECT_TRUE(FailsWith(LaunchRankFromEnvironment(),
                        {"RANK_SIZE=\"2\" is set but RANK_ID is not: set RANK_ID to this process's rank, "
                         "or unset RANK_SIZE"}));
  Clear();
  Set("OMPI_COMM_WORLD_SIZE", "4");
  EXPECT_TRUE(FailsWith(LaunchRankFromEnvironment(), {"OMPI_COMM_WORLD_SIZE=\"4\" is set but OMPI_COMM_WORLD_RANK"}));
  Clear();
  // An sbatch/salloc shell: SLURM_NTASKS for the steps it will start.
  Set("SLURM_NTASKS", "4");
  auto launch = LaunchRankFromEnvironment();
  ASSERT_TRUE(launch.ok()) << launch.status().ToString();
  EXPECT_FALSE(launch->rank);
  // A rank without its size comes back as such, naming where the size is
  // read from, for the tools to refuse by name.
  Clear();
  Set("RANK_ID", "1");
  launch = LaunchRankFromEnvironment();
  ASSERT_TRUE(launch.ok()) << launch.status().ToString();
  EXPECT_FALSE(launch->world_size);
  EXPECT_EQ(launch->size_source, "RANK_SIZE");
}

// Issue 39: RANK_SIZE=99999999999 was "not a non-negative integer".
TEST_F(LaunchRankTest, AValueTooLargeIsOutOfRange) {
  Set("RANK_ID", "0");
  Set("RANK_SIZE", "99999999999");
  EXPECT_TRUE(FailsWith(LaunchRankFromEnvironment(),
                        {"RANK_SIZE=\"99999999999\" is out of range (a rank or a world size is at most 4294967295)"}));
  Set("RANK_SIZE", "999999999999999999999999999999");
  EXPECT_TRUE(FailsWith(LaunchRankFromEnvironment(), {"RANK_SIZE=\"999999999999999999999999999999\" is out of range"}));
}

TEST_F(LaunchRankTest, BadValuesNameTheVariable) {
  Set("OMPI_COMM_WORLD_RANK", "1");
  Set("OMPI_COMM_WORLD_SIZE", "eight");
  EXPECT_TRUE(FailsWith(LaunchRankFromEnvironment(), {"OMPI_COMM_WORLD_SIZE", "\"eight\""}));
  Clear();

  Set("RANK_ID", "-1");
  EXPECT_TRUE(FailsWith(LaunchRankFromEnvironment(), {"RANK_ID=\"-1\" is not a non-negative integer"}));
  Clear();

  Set("SLURM_PROCID", "0");
  Set("SLURM_LOCALID", "");
  EXPECT_TRUE(FailsWith(LaunchRankFromEnvironment(), {"SLURM_LOCALID=\"\""}));
  Clear();

  Set("RANK_ID", "1");
  Set("DEVICE_ID", "9999999999");
  EXPECT_TRUE(FailsWith(LaunchRankFromEnvironment(), {"DEVICE_ID=\"9999999999\""}));
  Clear();

  Set("PMI_RANK", "4");
  Set("PMI_SIZE", "4");
  EXPECT_TRUE(FailsWith(LaunchRankFromEnvironment(), {"PMI_RANK=\"4\" is not below PMI_SIZE=\"4\""}));
  Clear();

  Set("PMI_RANK", "0");
  Set("PMI_SIZE", "0");
  EXPECT_TRUE(FailsWith(LaunchRankFromEnvironment(), {"PMI_SIZE=\"0\""}));
}

}  // namespace
}  // namespace sinkrt
