#include "sinkrt/host/local_cluster.h"
#include "host/src/link/launch/find_sinkd.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string_view>
#include <thread>

#include "runtime/src/cpu_set.h"
#include "runtime/src/env.h"
#include "sinkrt/host/remote_device.h"

namespace sinkrt::host {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

constexpr milliseconds kDefaultStart = std::chrono::seconds(30);
constexpr milliseconds kMaxStart = std::chrono::seconds(120);
// SIGTERM ends a daemon's running job first; a sink step is short, so a
// daemon still there after this is stuck and gets SIGKILL.
constexpr milliseconds kStopGrace = std::chrono::seconds(10);
constexpr milliseconds kReapPoll = milliseconds(5);
constexpr milliseconds kProbeRetry = milliseconds(50);
constexpr milliseconds kProbeTimeout = std::chrono::seconds(5);
constexpr const char* kLoopback = "127.0.0.1";
constexpr milliseconds kDefaultProgress = std::chrono::seconds(2);
// A deadline error names this many of the daemons that missed it, then
// counts the rest: a thousand names help nobody.
constexpr size_t kNamedMissing = 5;

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

std::string Seconds(milliseconds ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", ms.count() / 1e3);
  return buf;
}

milliseconds Left(Clock::time_point deadline) {
  return std::max(milliseconds(0), std::chrono::duration_cast<milliseconds>(deadline - Clock::now()));
}

std::string DescribeExit(int wait_status) {
  if (WIFEXITED(wait_status)) return "exited with status " + std::to_string(WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) {
    const int sig = WTERMSIG(wait_status);
    return "was killed by signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
  }
  return "ended with wait status " + std::to_string(wait_status);
}

// The child between fork and exec: only async-signal-safe calls, since the
// launcher may have other threads (a lock held by one of them at fork time
// is never released in the child).
[[noreturn]] void ExecDaemon(const char* path, char* const* argv, int stdout_fd, int stderr_fd, pid_t launcher,
                             const char* exec_failed, size_t exec_failed_len) {
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  // The launcher may have died before prctl; then no signal would ever come.
  if (getppid() != launcher) _exit(126);
  setpgid(0, 0);
  if (stdout_fd == STDOUT_FILENO) {
    fcntl(stdout_fd, F_SETFD, 0);  // dup2 onto itself would keep O_CLOEXEC
  } else {
    dup2(stdout_fd, STDOUT_FILENO);
  }
  if (stderr_fd >= 0 && stderr_fd != STDERR_FILENO) dup2(stderr_fd, STDERR_FILENO);
  const int null_fd = open("/dev/null", O_RDONLY);
  if (null_fd >= 0 && null_fd != STDIN_FILENO) dup2(null_fd, STDIN_FILENO);
  // The launcher blocks its stop signals to sigwait them and ignores
  // SIGPIPE; both survive exec, and the daemon must see these signals.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGPIPE}) sigaction(sig, &dfl, nullptr);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  execv(path, argv);
  ssize_t ignored = write(STDERR_FILENO, exec_failed, exec_failed_len);
  (void)ignored;
  _exit(127);
}

// Waits until `pid` has exited (then stores its wait status) or the deadline.
bool ReapBy(pid_t pid, int* wait_status, Clock::time_point deadline) {
  for (;;) {
    const pid_t r = waitpid(pid, wait_status, WNOHANG);
    if (r == pid) return true;
    if (r < 0 && errno != EINTR) {
      *wait_status = 0;  // not our child any more (SIGCHLD ignored): gone all the same
      return true;
    }
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(kReapPoll);
  }
}

// "sinkd: rank R listening on HOST:PORT (pid P)"
Status ParseReadyLine(const std::string& line, int rank, pid_t pid, int base_port, Address* address) {
  const std::string prefix = "sinkd: rank " + std::to_string(rank) + " listening on ";
  const std::string suffix = " (pid " + std::to_string(pid) + ")";
  if (line.rfind(prefix, 0) != 0 || line.size() < prefix.size() + suffix.size() ||
      line.compare(line.size() - suffix.size(), suffix.size(), suffix) != 0)
    return Internal("sinkd rank " + std::to_string(rank) + " printed an unexpected ready line: '" + line + "'");
  SINKRT_ASSIGN_OR_RETURN(const Address parsed,
                          ParseAddress(line.substr(prefix.size(), line.size() - prefix.size() - suffix.size())),
                          "sinkd rank " + std::to_string(rank) + " ready line");
  if (base_port > 0 && parsed.port != base_port + rank)
    return Internal("sinkd rank " + std::to_string(rank) + " listens on " + parsed.ToString() + ", not port " +
                    std::to_string(base_port + rank));
  *address = parsed;
  return Status::Ok();
}

}  // namespace

std::chrono::milliseconds DefaultStartTimeout() {
  return std::clamp(ConnectTimeoutFromEnvironment(kDefaultStart), milliseconds(1000), kMaxStart);
}

std::chrono::milliseconds DefaultStartProgressInterval() { return ProgressIntervalFromEnvironment(kDefaultProgress); }

struct LocalCluster::Daemon {
  int rank = 0;
  pid_t pid = -1;
  int ready_fd = -1;  // the read end of its stdout until the ready line is in
  std::string printed;
  bool ready = false;     // its ready line is in
  bool answered = false;  // it answered the Hello probe as its rank
  bool reaped = false;
  int wait_status = 0;
  Address address;

  std::string Name() const { return "sinkd rank " + std::to_string(rank) + " (pid " + std::to_string(pid) + ")"; }
  void CloseReadyFd() {
    if (ready_fd >= 0) close(ready_fd);
    ready_fd = -1;
  }
  bool TryReap() {
    if (!reaped && pid > 0) {
      const pid_t r = waitpid(pid, &wait_status, WNOHANG);
      if (r == pid || (r < 0 && errno == ECHILD)) reaped = true;
    }
    return reaped;
  }
};

LocalCluster::LocalCluster(LocalClusterOptions options) : options_(std::move(options)) {}

LocalCluster::~LocalCluster() { Stop(); }

Result<std::unique_ptr<LocalCluster>> LocalCluster::Start(LocalClusterOptions options) {
  // The start timeout came from the environment: a nonsense value there
  // would silently be the default.
  SINKRT_RETURN_IF_ERROR(CheckEnvironment());
  if (options.devices < 1)
    return InvalidArgument("a cluster needs at least one device, got " + std::to_string(options.devices));
  if (options.base_port < 0 || options.base_port + options.devices - 1 > 65535)
    return InvalidArgument("base port " + std::to_string(options.base_port) + " + " + std::to_string(options.devices) +
                           " devices does not fit in 1..65535");
  if (options.sinkd_path.empty()) return InvalidArgument("no sinkd binary given");
  if (access(options.sinkd_path.c_str(), X_OK) != 0) return NotFound(Errno("sinkd binary " + options.sinkd_path));
  const Clock::time_point deadline = Clock::now() + options.start_timeout;
  std::unique_ptr<LocalCluster> cluster(new LocalCluster(std::move(options)));
  cluster->started_ = Clock::now();
  cluster->next_report_ = cluster->started_ + cluster->options_.progress_interval;
  // On an error the cluster's destructor stops every daemon started so far.
  SINKRT_RETURN_IF_ERROR(cluster->Launch());
  SINKRT_RETURN_IF_ERROR(cluster->AwaitReadyLines(deadline));
  SINKRT_RETURN_IF_ERROR(cluster->AwaitHello(deadline));
  cluster->table_.layout = "minimal";
  for (const Daemon& d : cluster->daemons_)
    cluster->table_.ranks.push_back(RankEntry{static_cast<uint32_t>(d.rank), d.address, -1, ""});
  return cluster;
}

Status LocalCluster::Launch() {
  const pid_t launcher = getpid();
  daemons_.reserve(options_.devices);
  const std::vector<std::vector<int>> cores =
      options_.bind_cores ? ShareCpus(AllowedCpus(), options_.devices) : std::vector<std::vector<int>>();
  for (int rank = 0; rank < options_.devices; ++rank) {
    const int port = options_.base_port > 0 ? options_.base_port + rank : 0;
    std::vector<std::string> args = {options_.sinkd_path, "--rank", std::to_string(rank), "--listen",
                                     std::string(kLoopback) + ":" + std::to_string(port)};
    if (!options_.token.empty()) args.insert(args.end(), {"--token", options_.token});
    if (!options_.tls.cert_file.empty()) args.insert(args.end(), {"--tls-cert", options_.tls.cert_file});
    if (!options_.tls.key_file.empty()) args.insert(args.end(), {"--tls-key", options_.tls.key_file});
    if (!options_.tls.ca_file.empty()) args.insert(args.end(), {"--tls-ca", options_.tls.ca_file});
    if (!cores.empty() && !cores[rank].empty()) args.insert(args.end(), {"--cpus", FormatCpuList(cores[rank])});
    args.insert(args.end(), options_.sinkd_args.begin(), options_.sinkd_args.end());
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const std::string exec_failed = "sinkrun: cannot execute " + options_.sinkd_path + "\n";

    // O_CLOEXEC: a daemon must not hold the other daemons' pipes open, or
    // their end of file would never come.
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return Internal(Errno("pipe"));
    const pid_t pid = fork();
    if (pid < 0) {
      close(fds[0]);
      close(fds[1]);
      return Internal(Errno("fork"));
    }
    if (pid == 0)
      ExecDaemon(args[0].c_str(), argv.data(), fds[1], options_.stderr_fd, launcher, exec_failed.c_str(),
                 exec_failed.size());
    close(fds[1]);
    Daemon d;
    d.rank = rank;
    d.pid = pid;
    d.ready_fd = fds[0];
    daemons_.push_back(std::move(d));
  }
  return Status::Ok();
}

void LocalCluster::MaybeReport(const std::string& what) {
  if (!options_.progress || Clock::now() < next_report_) return;
  const milliseconds elapsed = std::chrono::duration_cast<milliseconds>(Clock::now() - started_);
  options_.progress(what + " after " + Seconds(elapsed) + " (limit " + Seconds(options_.start_timeout) + ")");
  next_report_ = Clock::now() + options_.progress_interval;
}

template <typename Done>
std::string LocalCluster::Missing(Done done) const {
  std::string names;
  size_t named = 0, more = 0;
  for (const Daemon& d : daemons_) {
    if (done(d)) continue;
    if (named == kNamedMissing) {
      ++more;
      continue;
    }
    names += (named++ ? ", " : "") + ("rank " + std::to_string(d.rank) + " (pid " + std::to_string(d.pid) + ")");
  }
  if (more > 0) names += " and " + std::to_string(more) + " more";
  return names;
}

Status LocalCluster::AwaitReadyLines(Clock::time_point deadline) {
  // All daemons start at once; one poll over their pipes takes each ready
  // line as it comes, so N daemons cost one start time, not N.
  const std::string total = std::to_string(daemons_.size());
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<Daemon*> waiting;
    for (Daemon& d : daemons_) {
      if (d.ready) continue;
      fds.push_back(pollfd{d.ready_fd, POLLIN, 0});
      waiting.push_back(&d);
    }
    if (fds.empty()) return Status::Ok();
    const std::string ready = std::to_string(daemons_.size() - waiting.size()) + " of " + total;
    MaybeReport(ready + " sinkd daemons ready");
    const milliseconds left = Left(deadline);
    // Woken for the next progress line too; the deadline is checked below.
    const milliseconds slice = options_.progress ? std::min(left, Left(next_report_) + milliseconds(1)) : left;
    const int n = slice.count() > 0 ? poll(fds.data(), fds.size(), static_cast<int>(slice.count())) : 0;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Internal(Errno("poll"));
    if (n == 0 && Left(deadline).count() > 0) continue;
    if (n == 0)
      return DeadlineExceeded(ready + " sinkd daemons ready within " + Seconds(options_.start_timeout) +
                              "; no ready line from " + Missing([](const Daemon& d) { return d.ready; }) +
                              " (SINKRT_CONNECT_TIMEOUT_MS sets the limit)");
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      Daemon& d = *waiting[i];
      char buf[256];
      const ssize_t got = read(d.ready_fd, buf, sizeof buf);
      if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (got <= 0) {
        // End of file before the line: the daemon is exiting (a bad flag, a
        // port in use, exec failing); its stderr has said why.
        d.CloseReadyFd();
        const bool exited = ReapBy(d.pid, &d.wait_status, Clock::now() + std::chrono::seconds(2));
        d.reaped = exited;
        return Unavailable(d.Name() + (exited ? " " + DescribeExit(d.wait_status) : " closed its stdout") +
                           " before it was ready (its stderr says why)");
      }
      d.printed.append(buf, static_cast<size_t>(got));
      const size_t eol = d.printed.find('\n');
      if (eol == std::string::npos) {
        if (d.printed.size() > 4096) return Internal(d.Name() + " printed a ready line of more than 4 KiB");
        continue;
      }
      SINKRT_RETURN_IF_ERROR(ParseReadyLine(d.printed.substr(0, eol), d.rank, d.pid, options_.base_port, &d.address));
      // The daemon prints nothing more on stdout; a later write fails with
      // EPIPE, which sinkd ignores.
      d.CloseReadyFd();
      d.ready = true;
    }
  }
}

Status LocalCluster::AwaitHello(Clock::time_point deadline) {
  // The ready line comes after bind, so the first probe normally answers;
  // retries cover a daemon still starting its accept loop.
  size_t answered = 0;
  const std::string total = std::to_string(daemons_.size());
  for (Daemon& d : daemons_) {
    Status last;
    for (;;) {
      MaybeReport(total + " of " + total + " sinkd daemons ready, " + std::to_string(answered) + " answered Hello");
      const milliseconds left = Left(deadline);
      if (left.count() == 0)
        return DeadlineExceeded(std::to_string(answered) + " of " + total + " sinkd daemons answered Hello within " +
                                Seconds(options_.start_timeout) + "; " + d.Name() + " at " + d.address.ToString() +
                                " did not" + (last.ok() ? "" : " (" + last.message() + ")") +
                                "; missing: " + Missing([](const Daemon& x) { return x.answered; }) +
                                " (SINKRT_CONNECT_TIMEOUT_MS sets the limit)");
      auto hello = ProbeDevice(d.address, std::min(left, kProbeTimeout), options_.token, options_.tls);
      if (hello.ok()) {
        if (hello->rank != d.rank)
          return FailedPrecondition(d.Name() + " at " + d.address.ToString() + " answered as rank " +
                                    std::to_string(hello->rank));
        if (hello->pid != 0 && static_cast<pid_t>(hello->pid) != d.pid)
          return FailedPrecondition(d.address.ToString() + " is served by pid " + std::to_string(hello->pid) +
                                    ", not by " + d.Name());
        d.answered = true;
        ++answered;
        break;
      }
      last = hello.status();
      if (last.code() == StatusCode::kPermissionDenied) return last.WithContext(d.Name());
      if (d.TryReap()) return Unavailable(d.Name() + " " + DescribeExit(d.wait_status) + " before it answered Hello");
      std::this_thread::sleep_for(std::min(kProbeRetry, Left(deadline)));
    }
  }
  return Status::Ok();
}

size_t LocalCluster::size() const { return daemons_.size(); }

const RankTable& LocalCluster::rank_table() const { return table_; }

std::vector<pid_t> LocalCluster::pids() const {
  std::vector<pid_t> out;
  for (const Daemon& d : daemons_) out.push_back(d.pid);
  return out;
}

Status LocalCluster::Poll() {
  std::string dead;
  for (Daemon& d : daemons_)
    if (d.TryReap()) dead += (dead.empty() ? "" : "; ") + d.Name() + " " + DescribeExit(d.wait_status);
  if (dead.empty()) return Status::Ok();
  return Unavailable(dead);
}

void LocalCluster::Stop() {
  auto reap_all = [this] {
    const Clock::time_point deadline = Clock::now() + kStopGrace;
    bool all = true;
    for (Daemon& d : daemons_) {
      if (!d.reaped) d.reaped = ReapBy(d.pid, &d.wait_status, deadline);
      all &= d.reaped;
    }
    return all;
  };
  for (Daemon& d : daemons_) {
    d.CloseReadyFd();
    if (!d.TryReap()) kill(d.pid, SIGTERM);
  }
  if (reap_all()) return;
  for (Daemon& d : daemons_)
    if (!d.reaped) kill(d.pid, SIGKILL);
  reap_all();
}

Result<std::string> FindSinkdFrom(const std::filesystem::path& exe, const char* path_env) {
  namespace fs = std::filesystem;
  std::error_code ec;
  auto runnable = [&ec](const fs::path& c) { return fs::is_regular_file(c, ec) && access(c.c_str(), X_OK) == 0; };
  std::string looked;
  if (!exe.empty()) {
    const fs::path dir = exe.parent_path();
    const fs::path candidates[] = {dir / "sinkd", (dir / ".." / "device" / "sinkd").lexically_normal()};
    for (const fs::path& c : candidates) {
      if (runnable(c)) return c.string();
      looked += c.string() + ", ";
    }
  }
  for (std::string_view rest = path_env ? path_env : ""; !rest.empty();) {
    const size_t colon = rest.find(':');
    const std::string_view dir = rest.substr(0, colon);
    rest = colon == std::string_view::npos ? std::string_view() : rest.substr(colon + 1);
    if (dir.empty()) continue;
    const fs::path c = fs::path(dir) / "sinkd";
    if (runnable(c)) return c.string();
  }
  return NotFound("cannot find the sinkd binary (looked for " + looked +
                  "and sinkd on PATH); set SINKRT_SINKD to its path");
}

Result<std::string> FindSinkd(const std::string& argv0) {
  namespace fs = std::filesystem;
  if (const char* env = std::getenv("SINKRT_SINKD"); env && *env) {
    if (access(env, X_OK) != 0) return NotFound(Errno("SINKRT_SINKD=" + std::string(env)));
    return std::string(env);
  }
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) exe = argv0.find('/') != std::string::npos ? fs::absolute(argv0, ec) : fs::path();
  return FindSinkdFrom(exe, std::getenv("PATH"));
}

}  // namespace sinkrt::host
