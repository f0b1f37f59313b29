// Knobs of one device runtime, with defaults and environment overrides.
#pragma once

#include <chrono>
#include <cstdint>

namespace sinkrt::device {

struct DeviceOptions {
  // Threads for kernels (oneDNN's OpenMP team). 0: every core this process
  // may run on (sched_getaffinity), never more.
  int threads = 0;
  // How long GetNext waits on a dry queue before failing the sink, like
  // MindSpore's GetNext timeout. Override: SINKRT_GETNEXT_TIMEOUT_MS.
  std::chrono::milliseconds get_next_timeout{std::chrono::seconds(300)};
  // How long PushBatch waits for a free slot. Override: SINKRT_PUSH_TIMEOUT_MS.
  std::chrono::milliseconds push_timeout{std::chrono::seconds(300)};
  // Touch every arena and queue page at load and ask for transparent huge
  // pages: a first touch costs ~10 µs per 4 KiB page on these machines.
  bool prefault = true;
  // Every wait on a peer device: connecting, the rendezvous, each receive
  // inside a collective. A dead or stalled peer fails the sink after this,
  // naming it. Override: SINKRT_PEER_TIMEOUT_MS.
  std::chrono::milliseconds peer_timeout{std::chrono::seconds(300)};
  // Peers on the same host exchange data through shared memory, the rest
  // over TCP. SINKRT_COMM_SHM=0 turns shared memory off (everything TCP),
  // for measurements.
  bool shared_memory = true;

  // Defaults overridden by the SINKRT_* environment variables above.
  static DeviceOptions FromEnvironment();
};

}  // namespace sinkrt::device
