/// \file
/// InProcessDevice: the device runtime running inside the host's process.
///
/// The embedded default: the host drives it through DeviceLink exactly as it
/// will drive a remote sinkd daemon. PushBatch may be called from a feeder
/// thread while RunSink runs on another, and ClearQueue may stop a PushBatch
/// blocked on another thread; everything else is for one thread.
#pragma once

#include <memory>

#include "sinkrt/device/device_options.h"
#include "sinkrt/runtime/device_link.h"

namespace sinkrt::device {

class DeviceCore;
class Executor;
class ListeningInbox;

/// A device in this process: an Executor behind the DeviceLink interface, no sockets.
class InProcessDevice final : public DeviceLink {
 public:
  /// A device with `options`' threads, queues and timeouts.
  explicit InProcessDevice(DeviceOptions options = DeviceOptions::FromEnvironment());
  ~InProcessDevice() override;

  Result<LoadInfo> Load(const VerifiedStream& stream) override;
  Status PushBatch(uint32_t queue, std::span<const ConstBytes> columns) override;
  /// Fills the queue slot in place (Executor::FillNextSlot), waiting for a
  /// free one as PushBatch does.
  Status FillBatch(uint32_t queue, const BatchFiller& fill) override;
  Result<SinkResult> RunSink(ProgramKind program, uint32_t steps) override;
  Status ClearQueue(uint32_t queue) override;
  Result<std::vector<uint8_t>> ReadTensor(uint32_t buffer) override;
  Status WriteTensor(uint32_t buffer, ConstBytes bytes) override;
  uint64_t control_round_trips() const override { return round_trips_; }
  /// Peers reach this device through a listening socket of its own on
  /// 127.0.0.1, opened by the first Endpoint(); a world of in-process devices
  /// lives in one process, so its members share memory.
  Result<PeerEndpoint> Endpoint() override;
  /// Unloads the current job (it may run collectives in the old world).
  Status JoinWorld(const WorldSpec& world) override;
  Status SetProfiling(const ProfileConfig& config) override;
  Result<int64_t> ReadClock() override;

  /// The threads the loaded job's kernels run on (its compute thread and
  /// that thread's team); 0 before Load.
  int threads() const;

  /// The loaded job, for white-box tests and benchmarks (nullptr before Load).
  Executor* executor();

 private:
  Status MakePeerTls();  ///< tls_server_ and tls_client_ from options_.tls

  struct FreeSlots;  ///< what a FillBatch waiting for a slot sleeps on

  DeviceOptions options_;
  std::unique_ptr<FreeSlots> free_slots_;
  std::unique_ptr<ListeningInbox> inbox_;
  /// With options_.tls (and not tls_plain_peers): the peers' dials are
  /// accepted (server) and made (client) with these, made at Endpoint.
  std::shared_ptr<const TlsContext> tls_server_, tls_client_;
  std::unique_ptr<DeviceCore> core_;  ///< the world and the job; its sinks run on the caller's thread
  uint64_t round_trips_ = 0;
};

}  // namespace sinkrt::device
