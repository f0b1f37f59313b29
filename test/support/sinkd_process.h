// SinkdProcess: a real sinkd daemon started by a test, on 127.0.0.1 and a
// port the kernel picks, so parallel tests never collide.
//
// Start() forks and execs the built sinkd, reads its ready line from a pipe
// (bounded by a deadline) and returns its address; the destructor stops it
// with SIGTERM and reaps it. The child dies with the test (PR_SET_PDEATHSIG),
// so a crashed test leaves no daemon behind. Its stderr (the job log) goes
// to a file the test can read.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "sinkrt/runtime/address.h"
#include "sinkrt/runtime/status.h"

namespace sinkrt::testing {

class SinkdProcess {
 public:
  SinkdProcess() = default;
  SinkdProcess(const SinkdProcess&) = delete;
  SinkdProcess& operator=(const SinkdProcess&) = delete;
  ~SinkdProcess() { Stop(); }

  // `args` are extra sinkd flags; --listen 127.0.0.1:0 and --threads 1 are
  // added unless `args` names them.
  // `env` entries ("NAME=value") are set in the daemon's environment only.
  Status Start(const std::string& sinkd_path, std::vector<std::string> args = {}, const std::string& log_path = "",
               std::chrono::milliseconds timeout = std::chrono::seconds(30), std::vector<std::string> env = {}) {
    bool has_listen = false, has_threads = false;
    for (const auto& a : args) {
      has_listen |= a == "--listen";
      has_threads |= a == "--threads";
    }
    if (!has_listen) args.insert(args.end(), {"--listen", "127.0.0.1:0"});
    if (!has_threads) args.insert(args.end(), {"--threads", "1"});
    log_path_ = log_path;
    int out[2];
    if (pipe(out) != 0) return Internal("pipe failed");
    pid_t parent = getpid();
    pid_ = fork();
    if (pid_ < 0) return Internal("fork failed");
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(127);
      dup2(out[1], 1);
      close(out[0]);
      close(out[1]);
      if (!log_path.empty()) {
        int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) dup2(fd, 2);
      }
      for (auto& e : env) putenv(const_cast<char*>(e.c_str()));
      sigset_t none;
      sigemptyset(&none);
      sigprocmask(SIG_SETMASK, &none, nullptr);
      std::vector<char*> argv;
      argv.push_back(const_cast<char*>(sinkd_path.c_str()));
      for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(sinkd_path.c_str(), argv.data());
      _exit(127);
    }
    close(out[1]);
    std::string line;
    auto deadline = std::chrono::steady_clock::now() + timeout;
    char c;
    while (line.empty() || line.back() != '\n') {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      pollfd p{out[0], POLLIN, 0};
      if (left.count() <= 0 || poll(&p, 1, static_cast<int>(left.count())) <= 0) {
        close(out[0]);
        return DeadlineExceeded("sinkd printed no ready line within the timeout");
      }
      if (read(out[0], &c, 1) != 1) {
        close(out[0]);
        return Unavailable("sinkd exited before it was ready: " + line + ReadLog());
      }
      line += c;
    }
    close(out[0]);
    // "sinkd: rank R listening on HOST:PORT (pid P)"
    auto at = line.find("listening on ");
    auto end = line.find(" (pid");
    if (at == std::string::npos || end == std::string::npos) return Internal("unexpected ready line: " + line);
    auto addr = ParseAddress(line.substr(at + 13, end - at - 13));
    if (!addr.ok()) return addr.status();
    address_ = *addr;
    return Status::Ok();
  }

  // Sends `sig`; with SIGKILL the process is gone at once.
  void Signal(int sig) {
    if (pid_ > 0) kill(pid_, sig);
  }

  // Waits (bounded) for the process to exit; returns its wait status, or -1
  // if it is still running at the deadline.
  int WaitExit(std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
    if (pid_ <= 0) return status_;
    // A pidfd becomes readable when the process exits: a bounded wait on
    // an event, not a sleep loop.
    int fd = static_cast<int>(syscall(SYS_pidfd_open, pid_, 0));
    if (fd >= 0) {
      pollfd p{fd, POLLIN, 0};
      int ready = poll(&p, 1, static_cast<int>(timeout.count()));
      close(fd);
      if (ready <= 0) return -1;
    }
    int st = 0;
    if (waitpid(pid_, &st, fd >= 0 ? 0 : WNOHANG) != pid_) return -1;
    pid_ = -1;
    status_ = st;
    return st;
  }

  void Stop() {
    if (pid_ <= 0) return;
    Signal(SIGTERM);
    if (WaitExit(std::chrono::seconds(30)) == -1) {
      Signal(SIGKILL);
      WaitExit(std::chrono::seconds(30));
    }
  }

  // Resident set size in KiB from /proc (VmRSS), -1 if unreadable.
  long RssKiB() const {
    std::ifstream in("/proc/" + std::to_string(pid_) + "/status");
    std::string key;
    while (in >> key) {
      if (key == "VmRSS:") {
        long kib;
        in >> kib;
        return kib;
      }
      std::string rest;
      std::getline(in, rest);
    }
    return -1;
  }

  std::string ReadLog() const {
    if (log_path_.empty()) return "";
    std::ifstream in(log_path_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  const Address& address() const { return address_; }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  int status_ = -1;
  Address address_;
  std::string log_path_;
};

}  // namespace sinkrt::testing
