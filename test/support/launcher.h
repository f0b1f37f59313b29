// Launcher: a tool in the background (`sinkrun launch`, a driver run inside
// a network namespace): its stdout through a pipe, so the test waits for its
// lines with a deadline; its stderr in a file. Killed with the test
// (PR_SET_PDEATHSIG) and by the destructor.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

namespace sinkrt::testing {

class Launcher {
  using Clock = std::chrono::steady_clock;
  using milliseconds = std::chrono::milliseconds;

 public:
  ~Launcher() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (out_ >= 0) ::close(out_);
  }

  void Start(const std::string& binary, std::vector<std::string> args, const std::filesystem::path& err) {
    int fds[2];
    ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
    args.insert(args.begin(), binary);
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const pid_t parent = ::getpid();
    pid_ = ::fork();
    ASSERT_GE(pid_, 0);
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);
      ::dup2(fds[1], 1);
      const int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (e >= 0) ::dup2(e, 2);
      ::execv(binary.c_str(), argv.data());
      ::_exit(127);
    }
    ::close(fds[1]);
    out_ = fds[0];
  }

  // Reads stdout until it holds `marker` (then true) or the deadline.
  bool ReadUntil(const std::string& marker, milliseconds timeout) {
    const Clock::time_point deadline = Clock::now() + timeout;
    while (printed_.find(marker) == std::string::npos) {
      const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
      pollfd p{out_, POLLIN, 0};
      if (left <= 0 || ::poll(&p, 1, static_cast<int>(left)) <= 0) return false;
      char buf[512];
      const ssize_t got = ::read(out_, buf, sizeof buf);
      if (got <= 0) return false;
      printed_.append(buf, static_cast<size_t>(got));
    }
    return true;
  }

  // The launcher's wait status, or -1 if it still runs at the deadline.
  int Wait(milliseconds timeout) {
    const Clock::time_point deadline = Clock::now() + timeout;
    for (;;) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return status;
      }
      if (Clock::now() >= deadline) return -1;
      std::this_thread::sleep_for(milliseconds(10));
    }
  }

  pid_t pid() const { return pid_; }
  const std::string& printed() const { return printed_; }

 private:
  pid_t pid_ = -1;
  int out_ = -1;
  std::string printed_;
};

}  // namespace sinkrt::testing
