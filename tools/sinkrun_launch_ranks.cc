// sinkrun launch -n N [...] -- COMMAND...: one process per rank, as
// MindSpore's msrun starts them (and torchrun, and mpirun): each gets
// RANK_ID, RANK_SIZE, DEVICE_ID (its index on this host), LOCAL_WORLD_SIZE
// and the master's address (MS_SCHED_HOST/MS_SCHED_PORT, and
// MASTER_ADDR/MASTER_PORT for programs that read torchrun's names) and the
// job's id (SINKRT_JOB_ID: init()'s master refuses another job's ranks). The
// launcher waits for all of them; when one fails it stops the others, so
// that no rank waits out its timeouts for a peer that is gone.
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "runtime/src/cpu_set.h"
#include "sinkrt/host/communication.h"
#include "sinkrun.h"

extern char** environ;

namespace sinkrt::tools {
namespace {

using std::chrono::milliseconds;

std::string ExitText(int status) {
  if (WIFEXITED(status)) return "exited with " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("was killed by SIG") + sigabbrev_np(WTERMSIG(status));
  return "ended with wait status " + std::to_string(status);
}

int ExitCodeOf(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

struct Child {
  uint32_t rank = 0;
  pid_t pid = -1;
  bool done = false;
  int status = 0;
};

// The environment of rank `rank`: this one's, with the launcher's
// variables replaced.
std::vector<std::string> RankEnvironment(const std::vector<std::pair<std::string, std::string>>& set) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string kv = *e;
    const std::string name = kv.substr(0, kv.find('='));
    bool replaced = false;
    for (const auto& [k, v] : set) replaced = replaced || k == name;
    // Another launcher's rank variables would not name this world: a
    // program that reads them first must not see them.
    for (const char* stale :
         {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
          "PMI_RANK", "PMI_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"})
      replaced = replaced || name == stale;
    if (!replaced) env.push_back(kv);
  }
  for (const auto& [k, v] : set) env.push_back(k + "=" + v);
  return env;
}

// "launch-" and 16 random hex digits.
std::string FreshJobId() {
  std::random_device entropy;
  char buf[32];
  std::snprintf(buf, sizeof buf, "launch-%08x%08x", entropy(), entropy());
  return buf;
}

void SignalAll(const std::vector<Child>& children, int sig) {
  for (const Child& c : children)
    if (!c.done) ::kill(c.pid, sig);
}

// Reaps every child that has ended; returns the first failure among them.
const Child* Reap(std::vector<Child>& children) {
  const Child* failed = nullptr;
  for (Child& c : children) {
    if (c.done) continue;
    int status = 0;
    const pid_t r = ::waitpid(c.pid, &status, WNOHANG);
    if (r != c.pid) continue;
    c.done = true;
    c.status = status;
    if (!failed && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) failed = &c;
  }
  return failed;
}

bool AllDone(const std::vector<Child>& children) {
  for (const Child& c : children)
    if (!c.done) return false;
  return true;
}

// SIGTERM, a grace period, then SIGKILL: every child is reaped on return.
void StopAll(std::vector<Child>& children, milliseconds grace) {
  SignalAll(children, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + grace;
  while (!AllDone(children) && std::chrono::steady_clock::now() < deadline) {
    Reap(children);
    ::usleep(20'000);
  }
  if (AllDone(children)) return;
  SignalAll(children, SIGKILL);
  for (Child& c : children)
    if (!c.done && ::waitpid(c.pid, &c.status, 0) == c.pid) c.done = true;
}

// What every rank's process is told: the world's shape, the master, the
// job, the TLS files; and how the launcher runs them.
struct RankPlan {
  int n = 0;      // ranks in the world
  int local = 0;  // ranks on this host
  int port = 0;   // the master's
  std::string job_id;
  std::vector<std::pair<std::string, std::string>> tls;  // SINKRT_TLS_* with absolute paths
  std::vector<std::string> command;
  bool bind = false;
  std::vector<std::vector<int>> shares;  // each local rank's cores, when bound
};

// -n, --local-worker-num, --node-rank and the master's address and port.
int PlanWorld(const LaunchFlags& f, RankPlan& p) {
  const int n = p.n = f.devices;
  const int local = p.local = f.local_workers > 0 ? f.local_workers : n;
  if (local > n) return Usage("--local-worker-num " + std::to_string(local) + " is more than -n " + std::to_string(n));
  if (n % local != 0)
    return Usage("-n " + std::to_string(n) + " ranks do not split into hosts of --local-worker-num " +
                 std::to_string(local));
  if (f.node_rank < 0 || f.node_rank >= n / local)
    return Usage("--node-rank " + std::to_string(f.node_rank) + ": -n " + std::to_string(n) + " over hosts of " +
                 std::to_string(local) + " makes nodes 0.." + std::to_string(n / local - 1));
  p.port = f.master_port;
  if (p.port == 0) {
    p.port = host::kDefaultMasterPort;
    if (local == n) {
      auto free = FreeLoopbackPort();
      if (!free.ok()) return Failure("the master's port: " + free.status().message());
      p.port = *free;
    }
  }
  if (local < n && f.master_addr == "127.0.0.1")
    return Usage("-n " + std::to_string(n) + " over several hosts (--local-worker-num " + std::to_string(local) +
                 "): --master-addr must be rank 0's host address, which the other hosts reach");
  // The world's identity, so that another job on the same port is refused
  // by name: the user's SINKRT_JOB_ID, else a fresh one when every rank is
  // on this host. Across hosts each launcher would make up another, so
  // only the user's (the same on every host) is passed on.
  if (const char* given = std::getenv("SINKRT_JOB_ID"); given && *given) {
    p.job_id = given;
    if (Status ok = host::CheckJobId(p.job_id, "SINKRT_JOB_ID"); !ok.ok()) return Usage(ok.message());
  } else if (local == n) {
    p.job_id = FreshJobId();
  }
  return 0;
}

// Every rank gets all three files: rank 0 serves the master with the
// certificate, the others verify it with the CA and present theirs.
int PlanTls(const LaunchFlags& f, RankPlan& p) {
  if (!f.tls.enabled()) return 0;
  if (f.tls.cert_file.empty() || f.tls.key_file.empty() || f.tls.ca_file.empty())
    return Usage(
        "--tls-cert, --tls-key and --tls-ca go together with a COMMAND: rank 0's master serves with the "
        "certificate and the other ranks verify it with the CA");
  struct TlsFile {
    const char* flag;
    const char* variable;
    const std::string& file;
  };
  for (const TlsFile& t :
       {TlsFile{"--tls-cert", "SINKRT_TLS_CERT", f.tls.cert_file},
        TlsFile{"--tls-key", "SINKRT_TLS_KEY", f.tls.key_file}, TlsFile{"--tls-ca", "SINKRT_TLS_CA", f.tls.ca_file}}) {
    // Absolute: a rank may run in another directory (--log-dir, its COMMAND's cd).
    std::error_code ec;
    const std::filesystem::path path = std::filesystem::absolute(t.file, ec);
    if (ec || !std::filesystem::is_regular_file(path, ec))
      return Usage(std::string(t.flag) + " " + t.file + ": not a regular file");
    p.tls.emplace_back(t.variable, path.string());
  }
  return 0;
}

// The log directory, the command and the ranks' cores.
int PlanProcesses(const LaunchFlags& f, RankPlan& p) {
  if (!f.log_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(f.log_dir, ec);
    if (ec) return Failure("--log-dir " + f.log_dir + ": " + ec.message());
  }
  // The command: "sinkrun" means this very binary when PATH has none.
  p.command = f.command;
  if (p.command[0] == "sinkrun" && ::access("/proc/self/exe", X_OK) == 0) {
    std::error_code ec;
    const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (!ec) p.command[0] = self.string();
  }
  // Each rank's share of this host's cores, as sinkd daemons get theirs.
  const std::vector<int> cpus = AllowedCpus();
  p.bind = !f.no_bind && p.local > 1 && static_cast<int>(cpus.size()) >= p.local;
  if (p.bind) p.shares = ShareCpus(cpus, p.local);
  return 0;
}

// The variables rank `rank` (local index `i`) is started with.
std::vector<std::string> RankVariables(const LaunchFlags& f, const RankPlan& p, uint32_t rank, int i) {
  std::vector<std::pair<std::string, std::string>> set = {
      {"RANK_ID", std::to_string(rank)}, {"RANK_SIZE", std::to_string(p.n)},
      {"DEVICE_ID", std::to_string(i)},  {"LOCAL_WORLD_SIZE", std::to_string(p.local)},
      {"MS_SCHED_HOST", f.master_addr},  {"MS_SCHED_PORT", std::to_string(p.port)},
      {"MASTER_ADDR", f.master_addr},    {"MASTER_PORT", std::to_string(p.port)},
      {"RANK", std::to_string(rank)},    {"WORLD_SIZE", std::to_string(p.n)},
      {"LOCAL_RANK", std::to_string(i)},
  };
  if (!f.token.empty()) set.emplace_back("SINKRT_TOKEN", f.token);
  if (!p.job_id.empty()) set.emplace_back("SINKRT_JOB_ID", p.job_id);
  set.insert(set.end(), p.tls.begin(), p.tls.end());
  return RankEnvironment(set);
}

// Forks and execs local rank `i`; its Child, or the exit code (the ranks
// already started stopped).
int StartRank(const LaunchFlags& f, const RankPlan& p, int i, pid_t launcher, std::vector<Child>& children) {
  const uint32_t rank = static_cast<uint32_t>(f.node_rank * p.local + i);
  std::vector<std::string> env = RankVariables(f, p, rank, i);
  std::vector<std::string> command = p.command;
  std::vector<char*> envp, argv;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  for (std::string& a : command) argv.push_back(a.data());
  argv.push_back(nullptr);
  int log_fd = -1;
  if (!f.log_dir.empty()) {
    const std::string path = (std::filesystem::path(f.log_dir) / ("worker_" + std::to_string(rank) + ".log")).string();
    log_fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (log_fd < 0) {
      StopAll(children, milliseconds(5000));
      return Failure("--log-dir: cannot write " + path + ": " + std::strerror(errno));
    }
  }
  const std::string exec_failed = "sinkrun launch: cannot execute " + command[0] + "\n";
  const pid_t pid = ::fork();
  if (pid < 0) {
    StopAll(children, milliseconds(5000));
    return Failure(std::string("fork: ") + std::strerror(errno));
  }
  if (pid == 0) {
    // Only async-signal-safe calls until exec.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != launcher) ::_exit(126);
    if (log_fd >= 0) {
      ::dup2(log_fd, STDOUT_FILENO);
      ::dup2(log_fd, STDERR_FILENO);
    }
    if (p.bind) {
      cpu_set_t set;
      CPU_ZERO(&set);
      for (int c : p.shares[i]) CPU_SET(c, &set);
      ::sched_setaffinity(0, sizeof set, &set);
    }
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execvpe(argv[0], argv.data(), envp.data());
    ssize_t ignored = ::write(STDERR_FILENO, exec_failed.data(), exec_failed.size());
    (void)ignored;
    ::_exit(127);
  }
  if (log_fd >= 0) ::close(log_fd);
  children.push_back({rank, pid});
  return 0;
}

// Until every rank has ended, one has failed (the others are then
// stopped) or the launcher is told to stop.
int WaitForRanks(std::vector<Child>& children, const sigset_t& stop) {
  const milliseconds grace(10000);
  const timespec poll{0, 200'000'000};
  for (;;) {
    if (const Child* failed = Reap(children)) {
      const Child bad = *failed;
      std::fprintf(stderr, "sinkrun launch: rank %u (pid %d) %s; stopping the others\n", bad.rank,
                   static_cast<int>(bad.pid), ExitText(bad.status).c_str());
      // A failure that every rank sees at once (a join refused by the
      // master, a collective's failure notice) ends the others by
      // themselves: let them say why before they are stopped.
      const auto settle = std::chrono::steady_clock::now() + milliseconds(3000);
      while (!AllDone(children) && std::chrono::steady_clock::now() < settle) {
        Reap(children);
        ::usleep(20'000);
      }
      StopAll(children, grace);
      return ExitCodeOf(bad.status);
    }
    if (AllDone(children)) return 0;
    const int sig = sigtimedwait(&stop, nullptr, &poll);
    if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) {
      std::fprintf(stderr, "sinkrun launch: SIG%s: stopping %s\n", sigabbrev_np(sig),
                   Counted(static_cast<int64_t>(children.size()), "rank").c_str());
      StopAll(children, grace);
      return 128 + sig;
    }
  }
}

}  // namespace

int LaunchRanks(const LaunchFlags& f, const char* argv0) {
  (void)argv0;
  RankPlan p;
  for (int (*plan)(const LaunchFlags&, RankPlan&) : {PlanWorld, PlanTls, PlanProcesses})
    if (int rc = plan(f, p)) return rc;
  sigset_t stop;
  sigemptyset(&stop);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) sigaddset(&stop, sig);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  std::vector<Child> children;
  const pid_t launcher = ::getpid();
  for (int i = 0; i < p.local; ++i)
    if (int rc = StartRank(f, p, i, launcher, children)) return rc;
  std::fprintf(stderr, "sinkrun launch: %s %d..%d of %d (master %s:%d%s)\n", p.local == 1 ? "rank" : "ranks",
               f.node_rank * p.local, f.node_rank * p.local + p.local - 1, p.n, f.master_addr.c_str(), p.port,
               f.log_dir.empty() ? "" : (", logs in " + f.log_dir).c_str());
  return WaitForRanks(children, stop);
}

}  // namespace sinkrt::tools
