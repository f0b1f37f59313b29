// One host's connection to a sinkd daemon, under RemoteDevice: the socket,
// the reader thread that takes every frame the daemon sends (replies and
// credits), the one reply slot a control request waits on, and why the
// connection ended. RemoteDevice (remote_device.cc) turns DeviceLink calls
// into requests and pushes on it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "runtime/src/wire_socket.h"
#include "sinkrt/host/remote_device.h"

namespace sinkrt::host {

std::string Ms(std::chrono::milliseconds d);
// Bounds come from the environment and may be absurd; condition_variable
// would overflow the clock on them.
std::chrono::milliseconds Sane(std::chrono::milliseconds d);

// Shared with pushers by pointer, so a Load that replaces the queue table
// cannot free one under a push still finishing on the old job.
struct QueueState {
  std::string name;
  std::vector<uint64_t> column_bytes;
  uint64_t credits = 0;  // free device slots this host may fill
  uint64_t next_sequence = 0;
  uint64_t generation = 0;                 // bumped by ClearQueue: pushes waiting from before it abort
  bool clearing = false;                   // between a ClearQueue's start and its Ack
  uint32_t sending = 0;                    // pushes that hold a credit and are on their way to the wire
  std::mutex push_mu;                      // one push per queue at a time: sequences reach the wire in order
  flatbuffers::FlatBufferBuilder fbb{64};  // reused under push_mu
  // FillBatch's frame payload, the columns back to back, and its column
  // spans: sized by the first fill and reused under push_mu.
  std::vector<uint8_t> payload;
  std::vector<std::span<uint8_t>> fill_spans;
  std::vector<ConstBytes> send_spans;
};

struct Reply {
  fb::MessageBody type = fb::MessageBody::NONE;
  std::vector<uint8_t> message;  // verified by the reader
  std::vector<uint8_t> payload;

  const fb::Message* get() const { return fb::GetMessage(message.data()); }
};

// Tells RemoteOptions::progress what a connection is waiting for, at most
// once per progress_interval: "waiting for rank 1 at 127.0.0.1:7101
// (rank table entry 1): connection refused, retrying; 5.0 s of 120.0 s
// (SINKRT_CONNECT_TIMEOUT_MS sets the limit)". Inert without a callback.
class ConnectProgress {
 public:
  using Clock = std::chrono::steady_clock;
  ConnectProgress(const RemoteOptions& options, std::string who);

  // Reports `state` if the interval has passed since the start or the last report.
  void Report(const std::string& state);
  bool enabled() const { return static_cast<bool>(options_.progress); }
  // How long a wait may block before the next report is due (at least 1 ms).
  std::chrono::milliseconds UntilNextReport() const;

 private:
  const RemoteOptions& options_;
  std::string who_;
  Clock::time_point start_;
  Clock::time_point next_;
};

// "rank 1 at 127.0.0.1:7101 (rank table entry 1)", "sinkd at HOST:PORT": a
// connection in messages, before the daemon has said who it is.
std::string ConnectTarget(const Address& address, const RemoteOptions& options);

// "1.5 s"
std::string Seconds(std::chrono::milliseconds d);

// Says Hello as `role` and reads the daemon's; fails with the daemon's
// Error (busy, bad token, version) or a timeout naming the address.
// `progress`, if given, hears "connected, no Hello yet" while the daemon is
// silent: the socket is polled for readability in slices, and the frame is
// then received whole against the one deadline (a slice ending mid-frame
// would lose the frame's start).
Result<DeviceHello> Handshake(FrameSocket& socket, const Address& address, fb::PeerRole role, int rank,
                              const std::string& token, std::chrono::milliseconds timeout,
                              ConnectProgress* progress = nullptr);

struct RemoteConnection {
  // Connects, says Hello as a host and starts the reader.
  static Result<std::unique_ptr<RemoteConnection>> Open(const Address& address, RemoteOptions options);
  // Ends the session: Shutdown, then the daemon's close, then the reader.
  ~RemoteConnection();

  Address address;
  RemoteOptions options;
  DeviceHello hello;
  std::string who;  // "rank 0 (127.0.0.1:7100)"
  std::unique_ptr<FrameSocket> socket;
  std::thread reader;

  // Everything below is guarded by mu; nothing is sent while holding it.
  std::mutex mu;
  std::condition_variable reply_cv;  // reply slot, connection loss, reader exit
  std::condition_variable queue_cv;  // credits, clears, sends finishing, job changes, connection loss
  std::optional<std::string> lost;   // why the connection is gone; set once, first reason wins
  bool reader_done = false;
  bool awaiting = false;
  fb::MessageBody expect = fb::MessageBody::NONE;
  std::optional<Reply> reply;
  // The job's queues and their credits: the reader adds what Credit frames
  // give, pushes take one per batch.
  bool loaded = false;
  uint64_t job = 0;      // bumped by EndJob: pushes for the old job abort
  uint32_t sending = 0;  // pushes on their way to the wire, all queues
  std::vector<std::shared_ptr<QueueState>> queues;
  // DeviceLink::SetCreditObserver's: called by the reader, under mu, for
  // each Credit of the loaded job (it must not call back into this device).
  std::shared_ptr<const std::function<void(uint32_t queue, uint32_t slots)>> credit_observer;

  // Records why the connection ended and wakes every waiter. The socket is
  // shut down so that the reader, and a send blocked on a full socket, wake too.
  void LoseLocked(std::string reason);
  void Lose(std::string reason);

  // `during`: the request that was waiting when the connection went.
  Status LostStatus(const std::string& during = "") const;

  // Sends one control request and waits for its reply (`expect` or Error).
  // There is one reply slot: callers make sure only one request is out. A
  // zero timeout waits as long as the connection lives. `daemon_error`, if
  // given, tells an Error the daemon answered from a local failure.
  Result<Reply> Request(const flatbuffers::FlatBufferBuilder& fbb, std::span<const ConstBytes> payload,
                        fb::MessageBody expect_type, const std::string& what, std::chrono::milliseconds timeout,
                        bool* daemon_error = nullptr);

  // Ends the loaded job before a message that replaces it on the daemon
  // (LoadProgram, JoinWorld): pushes waiting on it abort, a push already
  // holding a credit reaches the wire first (the daemon never sees an old
  // job's batch after the new job's message), and the queue table goes.
  // A send that does not leave within the reply timeout closes the
  // connection. `during` names the call in a connection-lost error.
  Status EndJob(const std::string& during);

 private:
  void ReadLoop();
};

}  // namespace sinkrt::host
