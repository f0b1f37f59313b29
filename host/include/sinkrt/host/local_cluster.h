/// \file
/// LocalCluster: N sinkd daemons on this machine, started and owned by one
/// launcher process (`sinkrun launch`, `sinkrun train --devices N`).
///
/// The daemons are separate processes started from the sinkd binary, so host
/// code never links device code. Start() returns once every daemon has printed
/// its ready line and answered a Hello probe with the rank it was given; on
/// any failure the daemons already started are stopped before it returns.
///
/// No orphans: each daemon gets SIGTERM when the thread that started it dies
/// (PR_SET_PDEATHSIG), even if the launcher is SIGKILLed, so start the cluster
/// from a thread that lives as long as it does (the main thread). Daemons run
/// in their own process group: a Ctrl-C at the terminal reaches the launcher
/// alone, which then stops them in order instead of racing their exit.
///
/// Start() does not judge whether the machine can host `devices` daemons: a
/// launcher asks CheckLocalDeviceCount (local_device_limit.h) first, with
/// the machine's cores, before anything is forked.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "sinkrt/runtime/rank_table.h"
#include "sinkrt/runtime/status.h"
#include "sinkrt/runtime/tls.h"

namespace sinkrt::host {

/// How long starting the daemons may take: SINKRT_CONNECT_TIMEOUT_MS or
/// HCCL_CONNECT_TIMEOUT, else 30 s, capped at 120 s (clusters set
/// HCCL_CONNECT_TIMEOUT to many minutes for slow peers; a local daemon that
/// has not started in two minutes will not).
std::chrono::milliseconds DefaultStartTimeout();

/// How often Start reports its progress: SINKRT_PROGRESS_MS, else 2 s.
std::chrono::milliseconds DefaultStartProgressInterval();

/// What LocalCluster::Start starts: how many daemons, on which ports, with which flags.
struct LocalClusterOptions {
  int devices = 1;  ///< daemons to start, one per rank
  /// 0: each daemon listens on 127.0.0.1:0 and the kernel picks a free port
  /// (never collides); P: rank i listens on 127.0.0.1:(P + i), the rank
  /// table convention of `sinkd --base-port`.
  int base_port = 0;
  std::string sinkd_path;  ///< see FindSinkd
  std::string token;       ///< passed as --token when not empty
  /// Passed as --tls-cert, --tls-key and --tls-ca; the readiness probe then
  /// speaks TLS with the same files.
  TlsConfig tls;
  std::vector<std::string> sinkd_args;  ///< more flags for every daemon: --quiet, --threads 1
  /// Bind each daemon to its own share of the cores this process may use
  /// (`sinkd --cpus`, ShareCpus in runtime/src/cpu_set.h): daemons then
  /// neither migrate nor crowd onto one core while another idles. Daemons
  /// beyond the core count share cores round robin.
  bool bind_cores = false;
  std::chrono::milliseconds start_timeout = DefaultStartTimeout();  ///< how long all may take to be ready
  int stderr_fd = -1;  ///< where the daemons' stderr (their job log) goes; -1: the launcher's
  /// Called about every progress_interval while the daemons start, on the
  /// thread that called Start, with a line such as "40 of 64 sinkd daemons
  /// ready after 4.1 s (limit 30.0 s)"; nothing when empty. Many daemons
  /// take a while (64 took 19 s on 2 cores): the launcher must not look hung.
  /// @{
  std::function<void(const std::string&)> progress;
  std::chrono::milliseconds progress_interval = DefaultStartProgressInterval();
  /// @}
};

/// N sinkd daemons on this machine owned by this process; see the file's description.
class LocalCluster {
 public:
  /// Starts every daemon and returns once all are ready, or stops those started and fails.
  static Result<std::unique_ptr<LocalCluster>> Start(LocalClusterOptions options);
  ~LocalCluster();  ///< Stop()
  LocalCluster(const LocalCluster&) = delete;
  LocalCluster& operator=(const LocalCluster&) = delete;

  size_t size() const;  ///< daemons, one per rank
  /// The minimal layout: rank i at 127.0.0.1:PORT.
  const RankTable& rank_table() const;
  std::vector<pid_t> pids() const;  ///< by rank

  /// Unavailable naming every daemon that has exited (rank, pid, exit status
  /// or signal); never blocks. Launchers call it periodically.
  Status Poll();

  /// SIGTERM to every daemon still running, a bounded wait for them to end
  /// their jobs, SIGKILL for stragglers; reaps all. Idempotent.
  void Stop();

 private:
  struct Daemon;
  explicit LocalCluster(LocalClusterOptions options);
  Status Launch();
  Status AwaitReadyLines(std::chrono::steady_clock::time_point deadline);
  Status AwaitHello(std::chrono::steady_clock::time_point deadline);
  /// Calls options_.progress with `what` once progress_interval has passed
  /// since the last call (or since the start).
  void MaybeReport(const std::string& what);
  /// "rank 3 (pid 41), rank 4 (pid 42), ... and 58 more": the daemons not
  /// yet counted by `done`.
  template <typename Done>
  std::string Missing(Done done) const;

  std::chrono::steady_clock::time_point started_;
  std::chrono::steady_clock::time_point next_report_;
  LocalClusterOptions options_;
  std::vector<Daemon> daemons_;
  RankTable table_;
};

/// Where the sinkd binary is: $SINKRT_SINKD when set; else `sinkd` beside
/// this executable (an installation's bin/); else ../device/sinkd from it (the
/// build tree: build/tools/sinkrun, build/device/sinkd); else `sinkd` on PATH
/// (an application of its own linking an installed sinkrt, whose sinkd is in
/// /usr/bin). `argv0` is used only when /proc/self/exe cannot be read. The
/// error says how to point at it.
Result<std::string> FindSinkd(const std::string& argv0);

}  // namespace sinkrt::host
