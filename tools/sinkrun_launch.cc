// sinkrun launch: N local sinkd daemons and their rank table, kept until
// SIGINT or SIGTERM (or until one of them dies).
#include <pthread.h>
#include <signal.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "runtime/src/env.h"
#include "runtime/src/file_io.h"
#include "sinkrun.h"

namespace sinkrt::tools {
namespace {

sigset_t StopSignals() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&set, sig);
  return set;
}

// Waits for a stop signal or for a daemon to die: the signal's number, or 0
// with `died` set. A short timeout keeps a dead daemon from going unnoticed.
int WaitForStopOrDeath(const sigset_t& stop, host::LocalCluster& cluster, Status* died) {
  const timespec poll_interval{0, 200'000'000};
  for (;;) {
    const int sig = sigtimedwait(&stop, nullptr, &poll_interval);
    if (sig > 0) return sig;
    if (errno != EAGAIN && errno != EINTR) {
      *died = Internal(std::string("sigtimedwait: ") + std::strerror(errno));
      return 0;
    }
    *died = cluster.Poll();
    if (!died->ok()) return 0;
  }
}

}  // namespace

int Launch(const LaunchFlags& f, const char* argv0) {
  // As sinkd does: the start timeout comes from the environment.
  if (Status env = CheckEnvironment(); !env.ok()) return Usage(env.message());
  if (Status fits = CheckLocalDevices(f.devices); !fits.ok()) return Usage("--devices: " + fits.message());
  if (f.base_port > 0 && f.base_port + f.devices - 1 > 65535)
    return Usage("--base-port " + std::to_string(f.base_port) + ": " + std::to_string(f.devices) +
                 " daemons need ports up to " + std::to_string(f.base_port + f.devices - 1) + ", beyond 65535");
  auto sinkd = SinkdPath(f.sinkd, argv0);
  if (!sinkd.ok()) return Failure(sinkd.status().message());
  // Blocked before any daemon starts, so a Ctrl-C while they start waits for
  // sigtimedwait instead of killing the launcher halfway; each daemon
  // unblocks them before exec.
  const sigset_t stop = StopSignals();
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);

  host::LocalClusterOptions options;
  options.devices = f.devices;
  options.base_port = f.base_port;
  options.sinkd_path = *sinkd;
  options.token = f.token;
  options.tls = f.tls;
  if (f.threads > 0) options.sinkd_args.insert(options.sinkd_args.end(), {"--threads", std::to_string(f.threads)});
  if (f.quiet) options.sinkd_args.push_back("--quiet");
  options.bind_cores = BindLocalDaemons(f.no_bind, f.devices, f.threads);
  options.progress = PrintProgress;
  auto cluster = host::LocalCluster::Start(options);
  if (!cluster.ok()) return Failure("starting sinkd: " + cluster.status().message());

  const RankTable& table = (*cluster)->rank_table();
  std::string json = RankTableToJson(table);
  if (json.empty() || json.back() != '\n') json += '\n';
  Status written = WriteFileBytes(f.rank_table_out, {reinterpret_cast<const uint8_t*>(json.data()), json.size()});
  if (!written.ok()) return Failure("--rank-table-out: " + written.message());
  std::error_code ec;
  const std::filesystem::path table_path = std::filesystem::absolute(f.rank_table_out, ec);
  const std::vector<pid_t> pids = (*cluster)->pids();
  for (size_t i = 0; i < table.size(); ++i)
    std::printf("sinkrun: rank %u at %s (pid %d)\n", table.ranks[i].rank, table.ranks[i].address.ToString().c_str(),
                static_cast<int>(pids[i]));
  std::printf("sinkrun: rank table %s; Ctrl-C or SIGTERM stops the daemons\n",
              (ec ? f.rank_table_out : table_path.string()).c_str());
  std::fflush(stdout);

  Status died;
  const int sig = WaitForStopOrDeath(stop, **cluster, &died);
  if (sig > 0)
    std::fprintf(stderr, "sinkrun: SIG%s: stopping %s\n", sigabbrev_np(sig),
                 Counted(static_cast<int64_t>(table.size()), "daemon").c_str());
  else
    std::fprintf(stderr, "sinkrun: %s; stopping the others\n", died.message().c_str());
  (*cluster)->Stop();
  return sig > 0 ? 0 : 1;
}

}  // namespace sinkrt::tools
