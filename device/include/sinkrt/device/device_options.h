/// \file
/// Knobs of one device runtime, with defaults and environment overrides.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "sinkrt/runtime/tls.h"

namespace sinkrt::device {

/// A device's resources and limits: threads, queue depth, timeouts (InProcessDevice, Daemon).
struct DeviceOptions {
  /// Threads for kernels: the compute thread and its worker team (large
  /// MatMuls and updates split across them), and oneDNN's OpenMP team for
  /// the kernels that do not split themselves. 0: every core this process
  /// may run on (sched_getaffinity), never more. Override:
  /// SINKRT_DEVICE_THREADS.
  int threads = 0;
  /// How long a worker of the team polls for its next part, and the compute
  /// thread for the workers' ends, before sleeping on a futex. Inside a step
  /// the next split kernel follows within microseconds; waking a sleeping
  /// thread costs tens of µs on these VMs. 0: sleep at once. Override:
  /// SINKRT_WORKER_SPIN_US.
  std::chrono::microseconds worker_spin{50};
  /// false: no worker team; oneDNN's OpenMP team splits each large kernel
  /// instead, as before the team existed. SINKRT_WORKER_TEAM=0 turns it
  /// off, for measurements (bench/history/kernels.md compares the two).
  bool worker_team = true;
  /// Pin the worker team's threads and, for the length of each sink, the
  /// thread running the compute stream, to one core each of those this
  /// process may use (in order): a part of a split kernel then always runs
  /// on the same core, and the weights it reads stay in that core's cache.
  /// Off by default: a machine shared with other work may want the
  /// scheduler to move threads. Override: SINKRT_PIN_THREADS=1.
  bool pin_threads = false;
  /// How long GetNext waits on a dry queue before failing the sink, like
  /// MindSpore's GetNext timeout. Override: SINKRT_GETNEXT_TIMEOUT_MS.
  std::chrono::milliseconds get_next_timeout{std::chrono::seconds(300)};
  /// How long PushBatch waits for a free slot. Override: SINKRT_PUSH_TIMEOUT_MS.
  std::chrono::milliseconds push_timeout{std::chrono::seconds(300)};
  /// Touch every arena and queue page at load and ask for transparent huge
  /// pages: a first touch costs ~10 µs per 4 KiB page on these machines.
  bool prefault = true;
  /// How long a collective waits for its peers (each receive, send-window
  /// wait and flush): a dead or stalled peer fails the sink after this,
  /// naming it. Override: SINKRT_PEER_TIMEOUT_MS, else HCCL_EXEC_TIMEOUT
  /// (seconds, HCCL's meaning: how long a collective may wait for its
  /// peers, as MindSpore users already set it).
  std::chrono::milliseconds peer_timeout{std::chrono::seconds(300)};
  /// Joining a world: the device-to-device rendezvous (dials, handshakes,
  /// option check, shared-memory setup, Barrier #0) and how long a peer's
  /// dial waits to be claimed. 0: peer_timeout. Override:
  /// SINKRT_PEER_TIMEOUT_MS (which bounds both, as it always has), else
  /// HCCL_CONNECT_TIMEOUT (seconds, HCCL's meaning: how long building the
  /// links between devices may take).
  std::chrono::milliseconds rendezvous_timeout{0};
  /// Peers on the same host exchange data through shared memory, the rest
  /// over TCP. SINKRT_COMM_SHM=0 turns shared memory off (everything TCP),
  /// for measurements.
  bool shared_memory = true;
  /// When every member of the world shares memory with every other, the
  /// arena lives in memory they all map (Communicator::ShareMemory), and an
  /// AllReduce of gradients reads the peers' arenas in place instead of
  /// copying through rings. Off by default until it is shown to pay in
  /// training: on the loaded 2-core VM, 2 daemons of the data-parallel MLP
  /// ran 0.76-1.37x as fast with it, median 0.96 (6 interleaved pairs,
  /// bench/history/communication.md "Reading the peers' buffers"),
  /// the compute a few % slower on an arena of 4 KiB shared pages (no huge
  /// pages for shmem here) and the AllReduce no faster with both daemons'
  /// threads on 2 cores. SINKRT_SHARED_ARENA=1 turns it on. Every rank of a
  /// world must agree (the rendezvous checks it).
  bool shared_arena = false;
  /// AllReduce below this many bytes uses recursive doubling, the rest the
  /// ring (CommOptions::small_allreduce_bytes); the ranks of a world must
  /// agree, the rendezvous refuses them otherwise. 0: always the ring, whose
  /// summation order a ReduceScatter shares (tests compare the two bitwise).
  size_t small_allreduce_bytes = 256 << 10;
  /// The same switch for a group of two, when larger
  /// (CommOptions::pair_allreduce_bytes); the ranks must agree on it too.
  size_t pair_allreduce_bytes = SIZE_MAX;
  /// An AllReduce over members on several hosts, the same number on each,
  /// runs in two levels: inside each host, then across the hosts
  /// (CommOptions::hierarchical_allreduce). SINKRT_HIERARCHICAL_ALLREDUCE=0
  /// turns it off (the flat schedules, for A/B); the ranks must agree.
  bool hierarchical_allreduce = true;
  /// The machine an in-process device says it runs on (its PeerEndpoint's
  /// host id); empty: LocalHostId(). Tests give devices of one process
  /// different ids to make them "hosts" (TCP between them, the two-level
  /// AllReduce); a daemon always reports its own machine's.
  std::string host_id;
  /// Added to every time the profiler records and to the clock the host
  /// reads for alignment (sinkd --profile-clock-offset-us): a device whose
  /// clock disagrees with the host's, to check that alignment undoes it.
  int64_t profile_clock_offset_ns = 0;
  /// An in-process device's peer endpoint: the address it accepts its
  /// peers on (port chosen by the kernel), and the token they must send.
  /// A host process per rank on several machines listens where it reaches
  /// its master from (ProcessGroup::local_host); anything but loopback
  /// needs a token, as sinkd's --listen does.
  std::string listen_host = "127.0.0.1";
  std::string token;  ///< what a peer must send when listen_host is not loopback
  /// TLS on an in-process device's peer links (one process per rank, as
  /// sinkd's --tls-* do for daemons): it accepts its peers with the
  /// certificate and key and, given the CA, asks for theirs; it dials them
  /// verifying theirs against the CA and presenting its own. Every member
  /// of a world needs all three files. Empty: plain links. Override:
  /// SINKRT_TLS_CERT, SINKRT_TLS_KEY, SINKRT_TLS_CA (the files init()'s
  /// master uses).
  TlsConfig tls;
  /// With `tls`: the links stay plain TCP all the same, the user's choice
  /// for speed (the master's connections keep their TLS). Override:
  /// SINKRT_TLS_PLAIN_PEERS=1.
  bool tls_plain_peers = false;

  /// Defaults overridden by the environment variables above. Precedence,
  /// highest first: explicit options or flags (set after this), SINKRT_*,
  /// HCCL_*, the defaults: a sinkrt variable is the more specific (and in
  /// ms), the HCCL ones are there so a MindSpore setup works unchanged.
  static DeviceOptions FromEnvironment();

  /// rendezvous_timeout, or peer_timeout when it is 0.
  std::chrono::milliseconds effective_rendezvous_timeout() const {
    return rendezvous_timeout.count() > 0 ? rendezvous_timeout : peer_timeout;
  }
};

/// Cores this process may run on (sched_getaffinity), at least 1: the
/// default for DeviceOptions::threads and for how many devices share a machine.
int AvailableCores();

}  // namespace sinkrt::device
