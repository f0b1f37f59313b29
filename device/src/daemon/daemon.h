/// \file
/// Daemon: the device runtime behind a TCP port (the body of sinkd).
///
/// One job at a time: the first host whose Hello passes (protocol version,
/// token) owns the device until it sends Shutdown or disconnects; every other
/// host is answered with an Error naming the job in progress and closed, and
/// probes (launchers asking "are you up?") are answered at any time. A frame
/// that is malformed or not allowed in the current state gets an Error and
/// closes that connection only; the running job, if it is another
/// connection's, never notices. When a job ends for any reason the daemon
/// stops its sink, frees its arena and queues, and is ready for the next one.
///
/// Threads: one accepting, one per connection reading frames (PushBatch goes
/// straight into a free queue slot from there), one running sinks, so a sink
/// and the batches feeding it proceed together.
///
/// Admission: a connection is *pending* until its Hello passes the version
/// and token checks, and pending connections never take the slots of
/// admitted ones (hosts, peers, probes). A pending connection has
/// hello_timeout to finish its Hello, however slowly its bytes come; each
/// source address may hold max_pending_per_address of them and all sources
/// together max_pending. A new connection over either quota closes the
/// oldest pending connection of its own address (over the total: of the
/// address holding the most), so a flood of silent or slow connections only
/// ever crowds out its own sender, and a real host, which says Hello at
/// once, gets in at any time.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "runtime/src/wire.h"
#include "sinkrt/device/device_options.h"
#include "sinkrt/runtime/address.h"
#include "sinkrt/runtime/status.h"
#include "sinkrt/runtime/tls.h"

namespace sinkrt::device {

/// How a Daemon listens, whom it admits, and the device it serves.
struct DaemonOptions {
  Address listen{"127.0.0.1", 0};  ///< port 0: any free port (see Daemon::address)
  /// Required when `listen` is not a loopback address; every Hello must
  /// carry it then.
  std::string token;
  int rank = 0;                                             ///< the rank its logs and errors name
  DeviceOptions device = DeviceOptions::FromEnvironment();  ///< the device's threads, queues and timeouts
  WireLimits limits = WireLimits::FromEnvironment();        ///< the largest frames accepted
  /// A new connection must finish its Hello within this
  /// (SINKRT_HELLO_TIMEOUT_MS). Short on purpose: a real host or peer sends
  /// its Hello as soon as it connects, and until then nothing proves the
  /// connection is not an attack.
  std::chrono::milliseconds hello_timeout{std::chrono::seconds(5)};
  /// Waiting on a peer daemon during collectives (DeviceOptions::peer_timeout:
  /// SINKRT_PEER_TIMEOUT_MS, else HCCL_EXEC_TIMEOUT in seconds).
  std::chrono::milliseconds peer_timeout{std::chrono::seconds(300)};
  /// Joining a world, and how long a peer's dial waits for its JoinWorld;
  /// 0: peer_timeout (DeviceOptions::rendezvous_timeout: SINKRT_PEER_TIMEOUT_MS,
  /// else HCCL_CONNECT_TIMEOUT in seconds).
  std::chrono::milliseconds rendezvous_timeout{0};
  /// Admitted connections (hosts, peers, probes) at once; a Hello beyond
  /// this is refused.
  int max_connections = 16;
  /// Connections that have not finished their Hello: at once, and per source
  /// address (see Admission above).
  int max_pending = 64;
  int max_pending_per_address = 8;  ///< pending connections per source address
  /// TLS on the port (sinkd --tls-cert, --tls-key, --tls-ca): hosts,
  /// probes and peer daemons handshake before their Hello. With a CA, every
  /// client must present a certificate it signed (mutual authentication),
  /// and a non-loopback `listen` needs no token. The daemon dials its peers
  /// with TLS too, from the same files, so the links of a world (the data
  /// plane) are encrypted and both ends authenticated; joining a world of
  /// more than one daemon then needs the CA. Empty: plain frames.
  TlsConfig tls;
  /// With `tls`: peer daemons may connect in plain frames, and this daemon
  /// dials its peers plainly: the links of a world (the data plane) stay
  /// plain TCP, the user's choice for speed (sinkd --tls-plain-peers).
  bool tls_plain_peers = false;
  /// One line per job event; false in tests that count nothing from logs.
  bool log = true;
  /// Non-empty (sinkd --profile DIR): every job is profiled from its load
  /// (a host's SetProfiling still sets what is recorded), its stream kept as
  /// `DIR/rank<R>-job<J>.tstream` and each sink's records appended to
  /// `DIR/rank<R>-job<J>.records`: the daemon's own view, for `sinkprof DIR`.
  std::string profile_dir;

  /// Timeouts from the environment, over these defaults.
  static DaemonOptions FromEnvironment();
};

/// Counters for tests and benchmarks.
struct DaemonStats {
  uint64_t jobs_started = 0;         ///< hosts admitted as the owner of a job
  uint64_t jobs_ended = 0;           ///< those jobs ended (Shutdown, disconnect, Stop)
  uint64_t connections_refused = 0;  ///< busy, bad token, bad version, over the limit
  uint64_t connections_evicted = 0;  ///< pending ones closed for a newer one over a quota
  uint64_t hello_timeouts = 0;       ///< pending ones closed at hello_timeout
  uint64_t protocol_errors = 0;      ///< malformed or out-of-order frames
};

/// sinkd's core: one device served over the wire protocol to one host at a time.
class Daemon {
 public:
  ~Daemon();  ///< Stop() and Wait()

  /// Binds and starts serving; the port is bound when this returns.
  static Result<std::unique_ptr<Daemon>> Start(DaemonOptions options);

  /// The bound address (the real port when 0 was asked for).
  Address address() const;

  /// Stops accepting, ends the running job (its host gets an Error) and
  /// closes every connection. Safe from any thread and from a signal-watching
  /// thread; returns at once.
  void Stop();
  /// Blocks until every thread has finished after Stop().
  void Wait();

  /// A snapshot of the counters.
  DaemonStats stats() const;

 private:
  struct State;
  explicit Daemon(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace sinkrt::device
