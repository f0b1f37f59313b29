/// \file
/// ListeningInbox: a PeerInbox with its own listening socket, for tests and
/// benchmarks that run communicators without a daemon.
///
/// It accepts on HOST:0 (127.0.0.1 by default; any free port, address()
/// tells which), reads each connection's Hello with a deadline and queues
/// the socket under the rank the Hello names. Connections that send
/// anything else, or another token than `token` (when set), are dropped.
/// With a server TLS context, each connection's TLS handshake comes first
/// (within the same deadline), as at a daemon's port; one that fails is
/// dropped.
/// Sockets it hands over stay valid after the inbox is destroyed.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

#include "device/src/comm/communicator.h"

namespace sinkrt::device {

/// A PeerInbox that listens on its own socket; see the file's description.
class ListeningInbox final : public PeerInbox {
 public:
  /// Starts listening on `host`:0; connections must send their Hello within `hello_timeout`, with
  /// `token` when it is set, after a TLS handshake as `tls` (a server context) when it is set.
  static Result<std::unique_ptr<ListeningInbox>> Start(
      std::chrono::milliseconds hello_timeout = std::chrono::seconds(10), const std::string& host = "127.0.0.1",
      std::string token = "", std::shared_ptr<const TlsContext> tls = nullptr);
  ~ListeningInbox() override;

  /// Where peers dial it (the real port).
  const Address& address() const { return address_; }
  Result<std::pair<uint32_t, std::unique_ptr<FrameSocket>>> Accept(Deadline deadline) override;

  struct Impl;

 private:
  explicit ListeningInbox(std::unique_ptr<Impl> impl);
  void Loop();

  std::unique_ptr<Impl> impl_;
  Address address_;
  std::chrono::milliseconds hello_timeout_{10000};
  std::string token_;
  std::shared_ptr<const TlsContext> tls_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<uint32_t, std::unique_ptr<FrameSocket>>> ready_;
  std::thread thread_;
};

}  // namespace sinkrt::device
