/// \file
/// RemoteDevice: a DeviceLink to a sinkd daemon over TCP.
///
/// The host drives it exactly as an in-process device, and Model.train runs
/// unchanged on either. PushBatch never waits for an answer: the host holds
/// one credit per free slot of each device queue (from Loaded, then Credit
/// frames as GetNext frees slots) and sends only while it has one, so a
/// device's queue memory stays bounded and a push waits only for a credit.
/// RunSink sends RunSink and waits for SinkDone: one control round trip.
///
/// A reader thread receives every frame from the daemon. If the connection
/// drops, or the daemon answers with an Error, the waiting call returns an
/// error naming the rank and address; a daemon that dies mid-sink is
/// noticed as soon as its socket closes (or by TCP keepalive when the whole
/// machine goes).
///
/// JoinWorld asks the daemon to connect to its peers (they dial each other
/// on the same ports the hosts use) and waits for Joined; Endpoint() is the
/// address this host dialed, with the machine id from the daemon's Hello.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "sinkrt/runtime/address.h"
#include "sinkrt/runtime/device_link.h"
#include "sinkrt/runtime/tls.h"

namespace sinkrt::host {

/// How a RemoteDevice finds and talks to its daemon: identity checks, timeouts, progress.
struct RemoteOptions {
  int rank = -1;      ///< the rank the daemon must have (-1: any)
  std::string token;  ///< the daemon's --token, if it has one
  /// TLS to a sinkd started with --tls-cert: `ca_file` verifies the daemon,
  /// `cert_file` and `key_file` are this client's certificate (needed when
  /// the daemon has a --tls-ca). Empty: plain frames.
  TlsConfig tls;
  /// Where the address came from, for messages: "rank table entry 1" makes
  /// them read "rank 1 at 10.0.0.2:7101 (rank table entry 1): ...".
  std::string origin;
  /// Connect (with retries while the daemon starts) and handshake, one
  /// budget for both. Override: SINKRT_CONNECT_TIMEOUT_MS, or
  /// HCCL_CONNECT_TIMEOUT in seconds.
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(120)};
  /// While Connect waits (a refused port retried, a connection whose Hello
  /// has not come), called about every progress_interval on the connecting
  /// thread with a line naming the rank, the address, the time waited, the
  /// limit and what the wait is on; nothing when empty. A wrong address
  /// would otherwise be silent for the whole connect_timeout.
  /// Interval override: SINKRT_PROGRESS_MS.
  /// @{
  std::function<void(const std::string&)> progress;
  std::chrono::milliseconds progress_interval{std::chrono::seconds(5)};
  /// @}
  /// How long PushBatch waits for a credit (SINKRT_PUSH_TIMEOUT_MS).
  std::chrono::milliseconds push_timeout{std::chrono::seconds(300)};
  /// Bound on any reply but SinkDone (Loaded, TensorData, Ack).
  std::chrono::milliseconds reply_timeout{std::chrono::seconds(300)};
  /// Bound on waiting for SinkDone; 0 waits as long as the connection lives
  /// (a sink's length depends on its steps). SINKRT_SINK_TIMEOUT_MS.
  std::chrono::milliseconds sink_timeout{0};
  /// The daemons' peer and rendezvous timeouts (0: peer_timeout), read from
  /// the environment as the daemons read them (PeerTimeoutsFromEnvironment:
  /// SINKRT_PEER_TIMEOUT_MS, else HCCL_EXEC_TIMEOUT and HCCL_CONNECT_TIMEOUT).
  /// @{
  std::chrono::milliseconds peer_timeout{std::chrono::seconds(300)};
  std::chrono::milliseconds rendezvous_timeout{0};
  /// @}

  /// The defaults, with the environment's overrides (named above).
  static RemoteOptions FromEnvironment();

  /// How long JoinWorld waits for Joined: the daemons' rendezvous timeout
  /// plus 10 s, so their own verdict (the members that did not come)
  /// arrives before the host gives up; never less than reply_timeout.
  std::chrono::milliseconds join_timeout() const;
};

/// What a daemon said about itself in its Hello.
struct DeviceHello {
  int rank = -1;                ///< its rank (-1: none given)
  bool busy = false;            ///< a job runs on it now
  uint32_t cores = 0;           ///< cores its kernels may use
  uint32_t pid = 0;             ///< its process id
  std::string software;         ///< "sinkrt 1.0.0"
  uint16_t protocol_minor = 0;  ///< its wire protocol minor (the major matched)
  std::string host_id;          ///< its machine (protocol 1.1); empty from older daemons
};

/// A device behind a sinkd daemon: the DeviceLink interface over the wire protocol.
class RemoteDevice final : public DeviceLink {
 public:
  /// Connects and says Hello as a host; fails with the daemon's Error (busy,
  /// bad token, version) or a timeout naming the rank and address.
  /// InvalidArgument, before any connection, when a numeric SINKRT_* or
  /// HCCL_* variable is nonsense (CheckEnvironment): `options` came from the
  /// environment, where such a value would silently be the default.
  static Result<std::unique_ptr<RemoteDevice>> Connect(const Address& address,
                                                       RemoteOptions options = RemoteOptions::FromEnvironment());
  ~RemoteDevice() override;  ///< sends Shutdown and closes

  Result<LoadInfo> Load(const VerifiedStream& stream) override;
  Status PushBatch(uint32_t queue, std::span<const ConstBytes> columns) override;
  /// Fills the frame's payload (a buffer per queue, kept) and sends it.
  Status FillBatch(uint32_t queue, const BatchFiller& fill) override;
  Result<SinkResult> RunSink(ProgramKind program, uint32_t steps) override;
  Status ClearQueue(uint32_t queue) override;
  Result<std::vector<uint8_t>> ReadTensor(uint32_t buffer) override;
  Status WriteTensor(uint32_t buffer, ConstBytes bytes) override;
  uint64_t control_round_trips() const override;
  /// {the address dialed, the daemon's host id}.
  Result<PeerEndpoint> Endpoint() override;
  /// JoinWorld -> Joined or the daemon's Error (naming the members that did
  /// not arrive); not a control round trip of training.
  Status JoinWorld(const WorldSpec& world) override;
  Status SetProfiling(const ProfileConfig& config) override;
  Result<int64_t> ReadClock() override;
  void SetCreditObserver(std::function<void(uint32_t queue, uint32_t slots)> observer) override;
  /// Per rank of the last world joined: "self", "shm" or "tcp".
  std::vector<std::string> transports() const;

  const DeviceHello& hello() const;  ///< what the daemon said in its Hello
  const Address& address() const;    ///< the daemon's address

 private:
  struct State;
  explicit RemoteDevice(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

/// Asks the daemon at `address` who it is, without taking the device
/// (launchers use it to wait until every daemon is up).
Result<DeviceHello> ProbeDevice(const Address& address, std::chrono::milliseconds timeout,
                                const std::string& token = "", const TlsConfig& tls = {});

}  // namespace sinkrt::host
