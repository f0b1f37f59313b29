/// \file
/// FrameSocket: whole frames over one connected TCP socket (Asio).
///
/// Send is thread-safe (a feeder thread pushes batches while the control
/// thread sends requests); receiving is for one thread. Reads take an
/// optional deadline, so a handshake or a reply never waits forever, and
/// Shutdown() wakes a blocked reader from any thread. A received frame's
/// payload stays in the socket until ReadPayload or SkipPayload, so the
/// receiver can put it straight where it belongs (a queue slot, the arena).
///
/// StartTls turns a connected socket into a TLS connection (runtime/tls.h):
/// every frame after it travels encrypted, through the same calls.
#pragma once

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "runtime/src/wire.h"
#include "sinkrt/runtime/address.h"

namespace sinkrt {

struct TlsContext;
struct TlsSession;

/// When a wait gives up; nullopt: never.
using Deadline = std::optional<std::chrono::steady_clock::time_point>;
/// The deadline `d` from now.
inline Deadline DeadlineIn(std::chrono::milliseconds d) { return std::chrono::steady_clock::now() + d; }

/// A received frame: header and message read and checked, the payload still in the socket.
struct InFrame {
  FrameHeader header;                    ///< the checked header
  std::vector<uint8_t> message_bytes;    ///< reused between frames
  const fb::Message* message = nullptr;  ///< verified, points into message_bytes
  uint64_t payload_left = 0;             ///< payload bytes not yet read

  /// The message's type.
  fb::MessageBody type() const { return message->body_type(); }
};

/// What a non-blocking call on a FrameSocket waits for before it can go on.
enum class IoWait {
  kNone,      ///< nothing: it made progress, or is done
  kReadable,  ///< the socket to have input
  kWritable,  ///< the socket to have room
};

/// The outcome of FrameSocket::ReadSome or WriteSome: `bytes` moved, or
/// none and what to wait for. No bytes and no wait is end of file (a read).
struct IoStep {
  size_t bytes = 0;             ///< moved by this call
  IoWait wait = IoWait::kNone;  ///< when bytes == 0: what to poll for
};

/// Where FrameSocket::Connect stands while it waits, for an observer that
/// tells a person: an attempt out with no answer yet, or why the last one
/// failed ("Connection refused": retried while the deadline allows).
struct ConnectWait {
  bool pending = false;  ///< an attempt is out with no answer yet
  std::string error;     ///< of the last attempt, when !pending
};
/// Called with each ConnectWait while FrameSocket::Connect waits.
using ConnectObserver = std::function<void(const ConnectWait&)>;

/// One connected peer speaking whole frames; see the file's description.
class FrameSocket {
 public:
  /// Takes a connected socket; frames are checked against `limits`.
  FrameSocket(asio::ip::tcp::socket socket, WireLimits limits);
  ~FrameSocket();

  /// Connects to `address`, retrying refused connections (a daemon still
  /// starting) until `timeout`; sets TCP_NODELAY, keepalive and large buffers.
  /// `observer`, if given, is called on this thread after every failed
  /// attempt and about every 100 ms while one is pending.
  static Result<std::unique_ptr<FrameSocket>> Connect(const Address& address, std::chrono::milliseconds timeout,
                                                      WireLimits limits = WireLimits::FromEnvironment(),
                                                      const ConnectObserver& observer = {});

  /// Sends one frame: the finished message and the payload pieces, gathered
  /// in one write. Thread-safe.
  Status Send(std::span<const uint8_t> message, std::span<const std::span<const uint8_t>> payload = {});
  /// Send with the message finished in `fbb`.
  Status Send(const flatbuffers::FlatBufferBuilder& fbb, std::span<const std::span<const uint8_t>> payload = {});

  /// Reads the next header and message and checks both (and the payload
  /// rule). The previous frame's payload must have been consumed.
  Status Receive(InFrame* frame, Deadline deadline = std::nullopt);
  /// Reads the next dst.size() payload bytes of `frame` into dst.
  Status ReadPayload(InFrame* frame, std::span<uint8_t> dst, Deadline deadline = std::nullopt);
  /// Discards what is left of the payload.
  Status SkipPayload(InFrame* frame, Deadline deadline = std::nullopt);

  /// Runs the TLS handshake as `context`'s role, before any frame, within
  /// `deadline`; afterwards every Send and Receive is encrypted. A server
  /// whose client sends plain frames gets FailedPrecondition, and can still
  /// answer it with a plain Error frame.
  Status StartTls(const TlsContext& context, Deadline deadline);
  /// StartTls for an event loop: one non-blocking step of the handshake.
  /// kNone once it is done (then tls() is true); otherwise call again when
  /// the socket is ready for what it returns. Errors as StartTls's.
  Result<IoWait> StepTls(const TlsContext& context);
  /// True once StartTls succeeded.
  bool tls() const { return tls_ != nullptr; }
  /// "TLSv1.3 TLS_AES_256_GCM_SHA384", or "plain".
  std::string transport() const;

  /// Byte I/O that never blocks, for code that drives the socket itself
  /// (the data plane's links, the rendezvous master's event loop), through
  /// TLS once StartTls ran. Reads and writes may run on two threads at once;
  /// each is for one thread at a time, and not beside Send or Receive.
  /// Errors are Unavailable, naming the peer.
  Result<IoStep> ReadSome(std::span<uint8_t> dst);
  /// Writes from the pieces in order (small leading pieces coalesced into
  /// one TLS record). After a wait, call again with the same pieces from
  /// the same position: TLS must repeat an unfinished record.
  Result<IoStep> WriteSome(std::span<const std::span<const uint8_t>> pieces);
  /// Ends the sending direction (with TLS, after a close_notify); the peer
  /// reads end of file once it has read everything sent before.
  void ShutdownWrite();

  /// Closes both directions now; a blocked Receive returns kUnavailable.
  /// Safe from any thread.
  void Shutdown();

  /// "127.0.0.1:40512"
  const std::string& peer() const { return peer_; }
  /// The limits frames are checked against.
  const WireLimits& limits() const { return limits_; }
  /// The socket's file descriptor.
  int native_handle();
  /// The socket itself, for an event loop's waits (async_wait) around
  /// ReadSome, WriteSome and StepTls; bytes go through this class.
  asio::ip::tcp::socket& socket() { return socket_; }

 private:
  Status ReadExact(uint8_t* dst, size_t n, Deadline deadline);
  Status SendTls(std::span<const asio::const_buffer> pieces);

  std::unique_ptr<asio::io_context> owned_context_;  ///< set by Connect
  asio::ip::tcp::socket socket_;
  WireLimits limits_;
  std::string peer_;
  std::mutex send_mu_;
  std::unique_ptr<TlsSession> tls_;            ///< set by StartTls
  std::vector<uint8_t> tls_staging_;           ///< under send_mu_: small pieces coalesced into one record
  std::unique_ptr<TlsSession> tls_handshake_;  ///< StepTls's session until its handshake is done
  std::vector<uint8_t> write_some_staging_;    ///< WriteSome's record of coalesced pieces
};

/// Sets TCP_NODELAY, SO_KEEPALIVE (dead peers found in ~15 s) and 4 MiB
/// socket buffers on a connected socket.
void TuneSocket(asio::ip::tcp::socket& socket);

}  // namespace sinkrt
