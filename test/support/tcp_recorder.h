// A one-connection TCP relay that records what its client sends: the
// capture an eavesdropper makes of a genuine handshake, for replay tests.
#pragma once

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <asio/ip/tcp.hpp>
#include <string>
#include <thread>
#include <vector>

#include "support/raw_frames.h"

namespace sinkrt::testing {

// Relays one connection from port() to 127.0.0.1:`to`, keeping the bytes
// the client sent.
class Recorder {
 public:
  explicit Recorder(uint16_t to) : to_(to) {
    asio::ip::tcp::endpoint here(asio::ip::make_address("127.0.0.1"), 0);
    acceptor_.open(here.protocol());
    acceptor_.bind(here);
    acceptor_.listen();
    port_ = acceptor_.local_endpoint().port();
    thread_ = std::thread([this] { Relay(); });
  }
  ~Recorder() {
    if (thread_.joinable()) thread_.join();
  }
  uint16_t port() const { return port_; }
  // Waits until either side closed; then the capture is whole.
  std::vector<uint8_t> Captured() {
    if (thread_.joinable()) thread_.join();
    return sent_;
  }

 private:
  void Relay() {
    asio::ip::tcp::socket client(io_);
    acceptor_.accept(client);
    auto server = Dial(Address{"127.0.0.1", to_});
    if (!server) return;
    pollfd fds[2] = {{client.native_handle(), POLLIN, 0}, {server->native_handle(), POLLIN, 0}};
    uint8_t buf[4096];
    for (;;) {
      if (::poll(fds, 2, 30000) <= 0) return;
      for (int i = 0; i < 2; ++i) {
        if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        const ssize_t got = ::read(fds[i].fd, buf, sizeof buf);
        if (got <= 0) return;
        if (i == 0) sent_.insert(sent_.end(), buf, buf + got);
        if (::send(fds[1 - i].fd, buf, static_cast<size_t>(got), MSG_NOSIGNAL) != got) return;
      }
    }
  }

  uint16_t to_, port_ = 0;
  asio::io_context io_;
  asio::ip::tcp::acceptor acceptor_{io_};
  std::vector<uint8_t> sent_;
  std::thread thread_;
};

// Whether `text` occurs in `bytes`: a secret must never be among the bytes sent.
inline bool Holds(const std::vector<uint8_t>& bytes, const std::string& text) {
  return std::search(bytes.begin(), bytes.end(), text.begin(), text.end()) != bytes.end();
}

}  // namespace sinkrt::testing
