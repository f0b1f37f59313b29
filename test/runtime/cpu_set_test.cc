// Core lists (runtime/src/cpu_set.h): parsing and printing them as
// taskset does, sharing a machine's cores among local daemons, and binding.
#include "runtime/src/cpu_set.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <thread>

namespace sinkrt {
namespace {

TEST(CpuSetTest, ParsesTasksetListsSortedAndWithoutDuplicates) {
  auto a = ParseCpuList("0-3,6");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(*a, (std::vector<int>{0, 1, 2, 3, 6}));
  auto b = ParseCpuList("5,1,1,2-3");
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(*b, (std::vector<int>{1, 2, 3, 5}));
  auto c = ParseCpuList("7");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(*c, (std::vector<int>{7}));
}

TEST(CpuSetTest, MalformedListsAreRefusedNamingTheEntry) {
  struct Case {
    const char* list;
    const char* names;
  };
  for (const Case& c : {Case{"", "empty"}, Case{"a", "'a'"}, Case{"1,,2", "''"}, Case{"3-1", "'3-1' runs backwards"},
                        Case{"-1", "''"}, Case{"1-", "''"}, Case{"2x", "'2x'"}, Case{"99999", "'99999'"}}) {
    SCOPED_TRACE(c.list);
    auto r = ParseCpuList(c.list);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(c.names), std::string::npos) << r.status().message();
  }
}

TEST(CpuSetTest, PrintsRangesFolded) {
  EXPECT_EQ(FormatCpuList({0, 1, 2, 3, 6}), "0-3,6");
  EXPECT_EQ(FormatCpuList({1, 3, 4}), "1,3-4");
  EXPECT_EQ(FormatCpuList({5}), "5");
  EXPECT_EQ(FormatCpuList({}), "");
  auto round = ParseCpuList(FormatCpuList({0, 2, 3, 4, 9, 10}));
  ASSERT_TRUE(round.ok());
  EXPECT_EQ(*round, (std::vector<int>{0, 2, 3, 4, 9, 10}));
}

TEST(CpuSetTest, SharesCoresInContiguousRunsOrRoundRobin) {
  using V = std::vector<std::vector<int>>;
  EXPECT_EQ(ShareCpus({0, 1, 2, 3}, 2), (V{{0, 1}, {2, 3}}));
  EXPECT_EQ(ShareCpus({0, 1, 2, 3, 4}, 2), (V{{0, 1, 2}, {3, 4}}));
  EXPECT_EQ(ShareCpus({2, 3}, 2), (V{{2}, {3}}));
  EXPECT_EQ(ShareCpus({0, 1}, 3), (V{{0}, {1}, {0}}));
  EXPECT_EQ(ShareCpus({4, 6, 8}, 1), (V{{4, 6, 8}}));
  EXPECT_EQ(ShareCpus({}, 2), (V{{}, {}}));
  EXPECT_TRUE(ShareCpus({0, 1}, 0).empty());
}

TEST(CpuSetTest, BindsTheCallingThreadAndRefusesCoresItMayNotUse) {
  const std::vector<int> allowed = AllowedCpus();
  ASSERT_FALSE(allowed.empty());
  // On a thread of its own: the binding stays with that thread, not the test.
  std::vector<int> seen;
  Status bound;
  std::thread t([&] {
    bound = BindProcessTo({allowed.back()});
    seen = AllowedCpus();
  });
  t.join();
  ASSERT_TRUE(bound.ok()) << bound.ToString();
  EXPECT_EQ(seen, std::vector<int>{allowed.back()});
  EXPECT_EQ(AllowedCpus(), allowed);

  if (allowed.back() + 1 < CPU_SETSIZE) {
    Status refused = BindProcessTo({allowed.front(), allowed.back() + 1});
    ASSERT_FALSE(refused.ok());
    EXPECT_NE(refused.message().find("cores " + std::to_string(allowed.back() + 1) + " are not among"),
              std::string::npos)
        << refused.message();
    EXPECT_NE(refused.message().find(FormatCpuList(allowed)), std::string::npos) << refused.message();
    EXPECT_EQ(AllowedCpus(), allowed);  // nothing changed
  }
  EXPECT_FALSE(BindProcessTo({}).ok());
}

}  // namespace
}  // namespace sinkrt
