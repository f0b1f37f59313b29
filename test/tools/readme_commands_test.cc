// The documentation's shell commands, run as written. The pages are
// README.md and every page under docs/ (docs/**/*.md, in path order): the
// commands moved from the README into the user guide and the reference, so
// the test reads them wherever they are. The ```sh blocks are read at test
// time, so a command added to any page is either run here or skipped by a
// rule below with its reason; a command no rule classifies fails the test,
// so that every new one is considered.
//
// Each block runs in a fresh directory holding a link to examples/ (the
// pages' commands are written from the repository root), its lines in
// order, with `build/` meaning this build tree. A line passes when it exits 0
// within kLineTimeout; `sinkrun launch`, which serves until stopped, passes
// when it writes its rank table and then exits 0 on SIGTERM at the end of
// its block.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr seconds kLineTimeout{120};
constexpr seconds kLaunchTimeout{60};

struct Line {
  std::string page;  // relative to the source tree, e.g. docs/guide/sinkd.md
  int number = 0;    // in the page, 1-based
  int block = 0;
  std::string text;
};

// "docs/guide/sinkd.md:12", for messages.
std::string Where(const std::string& page, int number) { return page + ":" + std::to_string(number); }
std::string Where(const Line& line) { return Where(line.page, line.number); }

// The pages whose commands run: README.md, then every page under docs/.
std::vector<std::string> Pages(const fs::path& source) {
  std::vector<std::string> docs;
  for (const auto& entry : fs::recursive_directory_iterator(source / "docs"))
    if (entry.is_regular_file() && entry.path().extension() == ".md")
      docs.push_back(fs::relative(entry.path(), source).generic_string());
  std::sort(docs.begin(), docs.end());
  docs.insert(docs.begin(), "README.md");
  return docs;
}

// Every command line of the page's shell blocks; comments and blank lines
// are not commands, and a line ending in '\' continues on the next.
std::vector<Line> ShellLines(const fs::path& source, const std::string& page) {
  std::ifstream in(source / page);
  std::vector<Line> lines;
  std::string text;
  bool in_shell = false;
  bool in_other = false;
  int number = 0;
  int block = 0;
  bool continued = false;
  while (std::getline(in, text)) {
    ++number;
    if (text.rfind("```", 0) == 0) {
      const std::string lang = text.substr(3);
      if (in_shell || in_other) {
        in_shell = in_other = false;
      } else if (lang == "sh" || lang == "bash" || lang == "shell" || lang == "console") {
        in_shell = true;
        ++block;
      } else {
        in_other = true;
      }
      continued = false;
      continue;
    }
    if (!in_shell) continue;
    const size_t first = text.find_first_not_of(" \t");
    if (!continued && (first == std::string::npos || text[first] == '#')) continue;
    if (continued) {
      lines.back().text += "\n" + text;
    } else {
      lines.push_back({page, number, block, text});
    }
    continued = !text.empty() && text.back() == '\\';
  }
  return lines;
}

enum class Action { kSkip, kRun, kLaunch };

struct Rule {
  std::regex pattern;
  Action action;
  const char* reason;
};

// Checked in order; the first match decides.
const std::vector<Rule>& Rules() {
  static const std::vector<Rule> rules = {
      {std::regex(R"(^scripts/demo\b)"), Action::kSkip,
       "installs packages, builds the tree and trains 5 epochs: minutes; its training command is the sinkrun "
       "train line run below"},
      {std::regex(R"(^scripts/test\b)"), Action::kSkip, "installs, builds and runs every test, this one included"},
      {std::regex(R"(^build/device/sinkd --listen )"), Action::kSkip,
       "a daemon on the fixed port 7100 that serves until stopped (a fixed port can collide with another test; "
       "0.0.0.0 reaches beyond loopback); sinkd_test starts daemons on free ports, and the rank-table line "
       "after it runs against a daemon this test launches"},
      {std::regex(R"(^(sinkd|sinkrun|sinkc|sinkdump|sinkprof) )"), Action::kSkip,
       "an installed tool on a cluster's machines, with certificates and other hosts' addresses this test does "
       "not have; sinkd_tls_test, master_tls_test and sinkrun_test run the same with certificates of their own "
       "on 127.0.0.1"},
      {std::regex(R"(^(scripts/netns_testbed\.sh|ip netns ))"), Action::kSkip,
       "creates network namespaces, which needs root; netns_test runs the same steps where it is root"},
      {std::regex(
           R"(^(cmake --install |cmake -S examples/app |cmake --build /tmp/|export PKG_CONFIG_PATH=|g\+\+ |cd build && cpack |apt install ))"),
       Action::kSkip,
       "installs into a prefix, builds the app against it, makes and installs the Debian packages: "
       "scripts/install_check runs these steps on every CI run (its 'install and package check' stage), "
       "into a temporary prefix and package root"},
      {std::regex(R"(^(nice )?/usr/bin/python3 bench/compare_)"), Action::kSkip,
       "a speed comparison against PyTorch (python3-torch, optional): rounds of benchmarks, minutes on a "
       "quiet machine; bench/README.md has its figures and how they were taken"},
      {std::regex(R"(\.\.\.|\[-)"), Action::kSkip,
       "a synopsis: '...' and [optional flags] are placeholders, not a command"},
      {std::regex(R"(^build/tools/sinkrun launch .* -- )"), Action::kRun, ""},  // one process per rank: ends
      {std::regex(R"(^build/tools/sinkrun launch )"), Action::kLaunch, ""},
      {std::regex(R"(^build/tools/(sinkrun|sinkc|sinkdump|sinkprof) )"), Action::kRun, ""},
  };
  return rules;
}

const Rule* Classify(const std::string& text) {
  for (const Rule& r : Rules())
    if (std::regex_search(text, r.pattern)) return &r;
  return nullptr;
}

// The README's `build/` is this build tree.
std::string WithBuildTree(const std::string& text) {
  return std::regex_replace(text, std::regex(R"((^|[\s=])build/)"), std::string("$1") + SINKRT_BINARY_DIR + "/");
}

std::string Slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string Tail(const std::string& s, size_t n = 3000) { return s.size() <= n ? s : "..." + s.substr(s.size() - n); }

// `sh -c command` in dir, in its own process group (so a timeout ends its
// children too), stdout to a pipe when `pipe_out`, else with stderr to log.
struct Child {
  pid_t pid = -1;
  int out = -1;
};

Child Spawn(const std::string& command, const fs::path& dir, const fs::path& log, bool pipe_out) {
  int fds[2] = {-1, -1};
  if (pipe_out && ::pipe2(fds, O_CLOEXEC) != 0) return {};
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    if (::chdir(dir.c_str()) != 0) ::_exit(127);
    const int l = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (l < 0) ::_exit(127);
    ::dup2(pipe_out ? fds[1] : l, 1);
    ::dup2(l, 2);
    ::execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  if (pipe_out) ::close(fds[1]);
  if (pid < 0) {
    if (pipe_out) ::close(fds[0]);
    return {};
  }
  ::setpgid(pid, pid);
  return {pid, pipe_out ? fds[0] : -1};
}

// The wait status, or -1 at the deadline (the group is then killed).
int WaitFor(pid_t pid, milliseconds timeout) {
  const Clock::time_point deadline = Clock::now() + timeout;
  int status = 0;
  while (true) {
    const pid_t got = ::waitpid(pid, &status, WNOHANG);
    if (got == pid) return status;
    if (got < 0 || Clock::now() >= deadline) break;
    std::this_thread::sleep_for(milliseconds(20));
  }
  ::kill(-pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  return -1;
}

std::string Describe(int status) {
  if (status == -1) return "did not finish within its bound";
  if (WIFEXITED(status)) return "exited " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status));
  return "wait status " + std::to_string(status);
}

// A `sinkrun launch` serving the rest of its block.
class Launch {
 public:
  Launch(std::string where, int number, std::string command, const fs::path& dir)
      : where_(std::move(where)),
        command_(std::move(command)),
        log_(dir / ("launch_" + std::to_string(number) + ".log")) {
    // exec: the signal goes to sinkrun, not to the shell.
    child_ = Spawn("exec " + WithBuildTree(command_), dir, log_, /*pipe_out=*/true);
  }
  ~Launch() {
    if (child_.pid > 0) {
      ::kill(-child_.pid, SIGKILL);
      ::waitpid(child_.pid, nullptr, 0);
    }
    if (child_.out >= 0) ::close(child_.out);
  }

  // Waits for "rank table" on its stdout.
  bool Ready() {
    if (child_.pid <= 0) return false;
    const Clock::time_point deadline = Clock::now() + kLaunchTimeout;
    while (printed_.find("rank table") == std::string::npos) {
      const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
      pollfd p{child_.out, POLLIN, 0};
      if (left <= 0 || ::poll(&p, 1, static_cast<int>(left)) <= 0) return false;
      char buf[512];
      const ssize_t got = ::read(child_.out, buf, sizeof buf);
      if (got <= 0) return false;
      printed_.append(buf, static_cast<size_t>(got));
    }
    return true;
  }

  // SIGTERM; the docs promise it stops its daemons and exits 0.
  void Stop() {
    ::kill(child_.pid, SIGTERM);
    const int status = WaitFor(child_.pid, seconds(30));
    EXPECT_TRUE(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << where_ << ": `" << command_ << "` on SIGTERM " << Describe(status) << "\n"
        << Tail(printed_ + Slurp(log_));
    child_.pid = -1;
  }

  std::string output() const { return printed_ + Slurp(log_); }

 private:
  std::string where_;
  std::string command_;
  fs::path log_;
  Child child_;
  std::string printed_;
};

// What a line needs that its page makes elsewhere or leaves to the reader.
// A file name a page uses as a stand-in is made here.
void Prepare(const Line& line, const fs::path& dir, std::vector<std::unique_ptr<Launch>>& launches) {
  // The sinkd page's table: what `sinkrun launch` writes by default.
  if (line.text.find("--rank-table rank_table.json") != std::string::npos && !fs::exists(dir / "rank_table.json")) {
    launches.push_back(std::make_unique<Launch>(Where(line), line.number, "build/tools/sinkrun launch -n 1", dir));
    ASSERT_TRUE(launches.back()->Ready()) << Where(line) << ": the daemon for rank_table.json did not start\n"
                                          << Tail(launches.back()->output());
  }
  // sinkdump's example file: the zoo MLP compiled by sinkc.
  if (line.text.find("model.tstream") != std::string::npos && !fs::exists(dir / "model.tstream")) {
    const std::string make = WithBuildTree("build/tools/sinkc examples/mlp.json -q -o model_job") +
                             " && cp model_job/rank_0.tstream model.tstream";
    const Child c = Spawn(make, dir, dir / "prepare.log", false);
    const int status = WaitFor(c.pid, kLineTimeout);
    ASSERT_TRUE(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "making model.tstream for " << Where(line) << ": " << Describe(status) << "\n"
        << Slurp(dir / "prepare.log");
  }
}

// A page's path as a name: every character but letters and digits as '_'.
std::string Slug(const std::string& page) {
  std::string name = page;
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return name;
}

// The pages that have shell lines: one test each, so that each has the
// test timeout to itself.
std::vector<std::string> PagesWithCommands() {
  std::vector<std::string> pages;
  for (const std::string& page : Pages(SINKRT_SOURCE_DIR))
    if (!ShellLines(SINKRT_SOURCE_DIR, page).empty()) pages.push_back(page);
  return pages;
}

class PageCommands : public ::testing::TestWithParam<std::string> {};

TEST_P(PageCommands, EveryShellLineRunsOrIsSkippedForAReason) {
  const fs::path source = SINKRT_SOURCE_DIR;
  const std::string page = GetParam();
  const std::vector<Line> lines = ShellLines(source, page);
  ASSERT_FALSE(lines.empty()) << "no ```sh blocks in " << (source / page);

  const fs::path root = fs::temp_directory_path() / ("sinkrt_readme_" + std::to_string(::getpid()) + "_" + Slug(page));
  fs::remove_all(root);
  int ran = 0;
  int skipped = 0;
  size_t i = 0;
  while (i < lines.size()) {
    const int block = lines[i].block;
    const fs::path dir = root / ("block_" + std::to_string(block));
    fs::create_directories(dir);
    fs::create_directory_symlink(source / "examples", dir / "examples");
    std::vector<std::unique_ptr<Launch>> launches;
    for (; i < lines.size() && lines[i].block == block; ++i) {
      const Line& line = lines[i];
      const Rule* rule = Classify(line.text);
      if (rule == nullptr) {
        ADD_FAILURE() << Where(line) << ": `" << line.text
                      << "` is neither run nor skipped: add a rule to test/tools/readme_commands_test.cc";
        continue;
      }
      if (rule->action == Action::kSkip) {
        std::cout << "skip " << Where(line) << ": " << line.text << "\n  (" << rule->reason << ")\n";
        ++skipped;
        continue;
      }
      std::cout << "run  " << Where(line) << ": " << line.text << std::endl;
      ++ran;
      if (rule->action == Action::kLaunch) {
        launches.push_back(std::make_unique<Launch>(Where(line), line.number, line.text, dir));
        EXPECT_TRUE(launches.back()->Ready()) << Where(line) << ": `" << line.text << "` wrote no rank table\n"
                                              << Tail(launches.back()->output());
        continue;
      }
      ASSERT_NO_FATAL_FAILURE(Prepare(line, dir, launches));
      const fs::path log = dir / ("line_" + std::to_string(line.number) + ".log");
      const Clock::time_point start = Clock::now();
      const Child c = Spawn(WithBuildTree(line.text), dir, log, false);
      ASSERT_GT(c.pid, 0) << "cannot start sh";
      const int status = WaitFor(c.pid, kLineTimeout);
      const double s = std::chrono::duration<double>(Clock::now() - start).count();
      std::cout << "     " << Describe(status) << " in " << s << " s" << std::endl;
      EXPECT_TRUE(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0)
          << Where(line) << ": `" << line.text << "` " << Describe(status) << "\n"
          << Tail(Slurp(log));
    }
    for (auto& l : launches) l->Stop();
  }
  std::cout << page << ": " << ran << " lines run, " << skipped << " skipped" << std::endl;
  if (!::testing::Test::HasFailure()) fs::remove_all(root);
}

INSTANTIATE_TEST_SUITE_P(ReadmeCommands, PageCommands, ::testing::ValuesIn(PagesWithCommands()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return Slug(info.param); });

// The README keeps its commands: the other pages must not have taken them all.
TEST(ReadmeCommands, TheReadmeAndTheGuideHaveCommands) {
  const std::vector<std::string> pages = PagesWithCommands();
  EXPECT_NE(std::find(pages.begin(), pages.end(), "README.md"), pages.end());
  const auto in_guide = [](const std::string& p) { return p.rfind("docs/guide/", 0) == 0; };
  EXPECT_TRUE(std::any_of(pages.begin(), pages.end(), in_guide)) << "no page under docs/guide/ has a ```sh block";
}

// The two commands a newcomer and CI start with stay the README's first
// block, as written: .ci/run runs scripts/test, and scripts/fresh_check
// proves what scripts/demo does on a fresh machine.
TEST(ReadmeCommands, TheReadmeStartsWithDemoAndTest) {
  const std::vector<Line> lines = ShellLines(SINKRT_SOURCE_DIR, "README.md");
  ASSERT_GE(lines.size(), 2u);
  EXPECT_EQ(lines[0].block, 1);
  EXPECT_EQ(lines[1].block, 1);
  EXPECT_EQ(lines[0].text.rfind("scripts/demo ", 0), 0u) << lines[0].text;
  EXPECT_EQ(lines[1].text.rfind("scripts/test ", 0), 0u) << lines[1].text;
  EXPECT_TRUE(lines.size() == 2 || lines[2].block != 1) << "the first block holds more than the two commands";
}

}  // namespace

namespace {

// A sample of a tool's output in a page: the ``` block right after a
// ```sh block, beginning with "sinkc: ", and the sinkc line that printed it.
struct Sample {
  std::string page;
  int number = 0;  // of the command line
  std::string command;
  std::string output;
};

std::vector<Sample> SinkcSamples(const fs::path& source, const std::string& page) {
  std::ifstream in(source / page);
  std::vector<Sample> samples;
  std::string text, last_sinkc;
  int number = 0, last_sinkc_number = 0;
  enum { kOutside, kShell, kAfterShell, kOther } state = kOutside;
  std::string block;
  while (std::getline(in, text)) {
    ++number;
    const bool fence = text.rfind("```", 0) == 0;
    switch (state) {
      case kOutside:
      case kAfterShell:
        if (fence && text == "```" && state == kAfterShell) {
          state = kOther;
          block.clear();
        } else if (fence) {
          const std::string lang = text.substr(3);
          state = lang == "sh" ? kShell : kOther;
          last_sinkc.clear();
          block.clear();
        } else if (!text.empty()) {
          state = kOutside;  // prose between: not this command's output
        }
        break;
      case kShell:
        if (fence) {
          state = kAfterShell;
        } else if (text.rfind("build/tools/sinkc ", 0) == 0) {
          last_sinkc = text;
          last_sinkc_number = number;
        }
        break;
      case kOther:
        if (fence) {
          if (!last_sinkc.empty() && block.rfind("sinkc: ", 0) == 0)
            samples.push_back({page, last_sinkc_number, last_sinkc, block});
          last_sinkc.clear();
          state = kOutside;
        } else {
          block += text + "\n";
        }
        break;
    }
  }
  return samples;
}

}  // namespace

// A sinkc sample once had a stale hash and byte count. A sample printed by
// a sinkc line, on any page, is that line's output, exactly (sinkc's output
// is byte-identical for the same input and flags).
TEST(ReadmeCommands, SinkcSampleOutputIsWhatSinkcPrints) {
  const fs::path source = SINKRT_SOURCE_DIR;
  std::vector<Sample> samples;
  for (const std::string& page : Pages(source)) {
    std::vector<Sample> more = SinkcSamples(source, page);
    samples.insert(samples.end(), more.begin(), more.end());
  }
  ASSERT_FALSE(samples.empty()) << "no sinkc sample output in README.md or docs/";
  const fs::path root = fs::temp_directory_path() / ("sinkrt_readme_samples_" + std::to_string(::getpid()));
  for (const Sample& sample : samples) {
    std::string name = sample.page + "_" + std::to_string(sample.number);
    for (char& c : name)
      if (c == '/' || c == '.') c = '_';
    const fs::path dir = root / name;
    fs::remove_all(dir);
    fs::create_directories(dir);
    fs::create_directory_symlink(source / "examples", dir / "examples");
    const Child c = Spawn(WithBuildTree(sample.command), dir, dir / "output.log", false);
    const int status = WaitFor(c.pid, kLineTimeout);
    ASSERT_TRUE(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << Where(sample.page, sample.number) << ": " << Describe(status) << "\n"
        << Slurp(dir / "output.log");
    EXPECT_EQ(Slurp(dir / "output.log"), sample.output)
        << Where(sample.page, sample.number) << ": the sample output after `" << sample.command
        << "` is not what it prints: paste the output above in its place";
  }
  fs::remove_all(root);
}
