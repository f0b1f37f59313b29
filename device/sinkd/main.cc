// sinkd: the device runtime daemon, one per device.
//
//   sinkd [--listen HOST:PORT | --listen HOST --base-port P] [--token T] [--rank R]
//         [--threads N] [--cpus LIST] [--tls-cert PEM --tls-key PEM [--tls-ca PEM] [--tls-plain-peers]]
//   sinkd --version
//
// Prints one line "sinkd: rank R listening on HOST:PORT (pid P)" on stdout
// once the port is bound (launchers and tests wait for it; with port 0 it
// names the port the kernel chose), then logs job events on stderr. Peer
// daemons of a data-parallel world connect to the same port (JoinWorld).
// Exits 0 on SIGTERM or SIGINT after ending the running job; 2 on a bad
// command line or a SINKRT_*/HCCL_* number that is not one, before binding.
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>

#include "cli/cli_validators.h"
#include "cli/tool_version.h"
#include "device/src/daemon/daemon.h"
#include "runtime/src/cpu_set.h"
#include "runtime/src/env.h"
#include "sinkrt/device/openmp_policy.h"
#include "sinkrt/runtime/rank_table.h"
#include "sinkrt/runtime/version.h"

namespace {

struct Flags {
  std::string listen;
  int base_port = -1;
  std::string token;
  sinkrt::TlsConfig tls = sinkrt::TlsConfig::FromEnvironment();
  bool tls_plain_peers = false;
  int rank = -1;
  int threads = -1;
  std::string cpus;
  long long hello_timeout_ms = -1;
  long long getnext_timeout_ms = -1;
  long long peer_timeout_ms = -1;
  bool quiet = false;
  std::string profile;
  long long profile_clock_offset_us = 0;
};

int Fail(const std::string& message) {
  std::fprintf(stderr, "sinkd: %s\n", message.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  sinkrt::device::EnsurePassiveOpenMp(argv);
  Flags f;
  CLI::App app{"sinkd: the sinkrt device runtime daemon (one per device)"};
  sinkrt::tools::AddVersionFlag(app, sinkrt::VersionText("sinkd"));
  app.add_option("--listen", f.listen,
                 "HOST:PORT to serve hosts on (default 127.0.0.1:7100 + local rank); HOST alone with --base-port");
  app.add_option("--base-port", f.base_port,
                 "port of local device 0; this daemon listens on base + its local rank (rank table convention)")
      ->check(CLI::Range(1, 65535));
  app.add_option("--token", f.token, "secret every host must send (required when listening beyond loopback)");
  app.add_option("--tls-cert", f.tls.cert_file,
                 "PEM certificate: hosts must connect with TLS (default: SINKRT_TLS_CERT; docs/guide/tls.md)");
  app.add_option("--tls-key", f.tls.key_file, "PEM private key of --tls-cert (default: SINKRT_TLS_KEY)");
  app.add_option("--tls-ca", f.tls.ca_file,
                 "PEM CA: hosts must present a certificate it signed (mutual TLS; default: SINKRT_TLS_CA)");
  app.add_flag("--tls-plain-peers", f.tls_plain_peers,
               "with TLS: the links between the daemons of a world (the data plane) stay plain TCP, for speed; "
               "by default they use TLS with this daemon's --tls-cert/--tls-key, verified by --tls-ca");
  app.add_option("--rank", f.rank,
                 "this device's rank (default: RANK_ID, OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID, or 0)")
      ->check(sinkrt::tools::NonNegativeInteger());
  app.add_option("--threads", f.threads, "kernel threads (default: every core this process may use)")
      ->check(sinkrt::tools::PositiveInteger());  // as sinkrun's: leave it out for every core
  app.add_option("--cpus", f.cpus,
                 "run on these cores only, e.g. 0-3,6 (as taskset -c); --threads then defaults to their number. "
                 "sinkrun binds each local daemon to a share of the machine's cores");
  app.add_option("--hello-timeout-ms", f.hello_timeout_ms,
                 "a new connection must finish its Hello within this (SINKRT_HELLO_TIMEOUT_MS; 5000)")
      ->check(sinkrt::tools::PositiveInteger());
  app.add_option("--getnext-timeout-ms", f.getnext_timeout_ms,
                 "a sink fails when its data queue stays empty this long (SINKRT_GETNEXT_TIMEOUT_MS; 300000)")
      ->check(sinkrt::tools::PositiveInteger());
  app.add_option("--peer-timeout-ms", f.peer_timeout_ms,
                 "waiting on a peer daemon: joining a world, each collective (SINKRT_PEER_TIMEOUT_MS; else "
                 "HCCL_CONNECT_TIMEOUT s for joining, HCCL_EXEC_TIMEOUT s for collectives; 300000)")
      ->check(sinkrt::tools::PositiveInteger());
  app.add_flag("--quiet", f.quiet, "no job log on stderr");
  app.add_option("--profile", f.profile,
                 "record every sink of every job into DIR (rank<R>-job<J>.tstream and .records; `sinkprof DIR` "
                 "summarises them)");
  app.add_option("--profile-clock-offset-us", f.profile_clock_offset_us,
                 "shift this daemon's profiler clock by this many microseconds (to check that a host's profile "
                 "aligns clocks)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return sinkrt::tools::UsageExit(app, e);
  }
  // A typo in a timeout must not silently leave the default in place.
  if (sinkrt::Status env = sinkrt::CheckEnvironment(); !env.ok()) return Fail(env.message());
  // Before any thread starts: every thread of the daemon inherits the cores.
  if (!f.cpus.empty()) {
    auto cpus = sinkrt::ParseCpuList(f.cpus);
    sinkrt::Status bound = cpus.ok() ? sinkrt::BindProcessTo(*cpus) : cpus.status();
    if (!bound.ok()) return Fail("--cpus " + f.cpus + ": " + bound.message());
  }

  sinkrt::device::DaemonOptions options = sinkrt::device::DaemonOptions::FromEnvironment();
  auto launch = sinkrt::LaunchRankFromEnvironment();
  if (!launch.ok()) return Fail(launch.status().message());
  options.rank = f.rank >= 0 ? f.rank : static_cast<int>(launch->rank.value_or(0));
  uint32_t local_rank = launch->local_rank.value_or(f.rank >= 0 ? 0 : launch->rank.value_or(0));

  // --listen HOST:PORT wins; otherwise HOST (default loopback) on the base
  // port plus this daemon's local rank, as rank tables assume.
  std::string host = "127.0.0.1";
  int port = -1;
  if (!f.listen.empty()) {
    auto parsed = sinkrt::ParseAddress(f.listen, /*allow_port_zero=*/true);
    if (parsed.ok()) {
      host = parsed->host;
      port = parsed->port;
      if (f.base_port >= 0) return Fail("--listen " + f.listen + " names a port; drop --base-port or the port");
    } else if (f.listen.find(':') == std::string::npos || f.listen.front() == '[') {
      host = f.listen;
    } else {
      return Fail(parsed.status().message());
    }
  }
  if (port < 0) {
    int base = f.base_port >= 0 ? f.base_port : sinkrt::kDefaultBasePort;
    port = base + static_cast<int>(local_rank);
    if (port > 65535)
      return Fail("base port " + std::to_string(base) + " + local rank " + std::to_string(local_rank) +
                  " is beyond 65535");
  }
  options.listen = sinkrt::Address{host, static_cast<uint16_t>(port)};
  options.token = f.token;
  options.tls = f.tls;
  options.tls_plain_peers = f.tls_plain_peers;
  if (f.threads > 0) options.device.threads = f.threads;
  if (f.hello_timeout_ms > 0) options.hello_timeout = std::chrono::milliseconds(f.hello_timeout_ms);
  if (f.getnext_timeout_ms > 0) options.device.get_next_timeout = std::chrono::milliseconds(f.getnext_timeout_ms);
  if (f.peer_timeout_ms > 0) {  // the flag wins over every variable, for both waits
    options.peer_timeout = std::chrono::milliseconds(f.peer_timeout_ms);
    options.rendezvous_timeout = std::chrono::milliseconds(0);
  }
  options.log = !f.quiet;
  options.profile_dir = f.profile;
  options.device.profile_clock_offset_ns = f.profile_clock_offset_us * 1000;

  // Signals are taken by one thread with sigwait, so no handler runs inside
  // a lock; SIGPIPE is ignored because a vanished host is a normal event.
  signal(SIGPIPE, SIG_IGN);
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);  // inherited by every thread the daemon starts

  auto daemon = sinkrt::device::Daemon::Start(options);
  if (!daemon.ok()) return Fail(daemon.status().message());
  std::printf("sinkd: rank %d listening on %s (pid %d)\n", options.rank, (*daemon)->address().ToString().c_str(),
              static_cast<int>(getpid()));
  std::fflush(stdout);

  int sig = 0;
  sigwait(&stop_signals, &sig);
  if (!f.quiet)
    std::fprintf(stderr, "sinkd: rank %d stopping (%s)\n", options.rank, sig == SIGTERM ? "SIGTERM" : "SIGINT");
  (*daemon)->Stop();
  (*daemon)->Wait();
  return 0;
}
