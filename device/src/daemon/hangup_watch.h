// Watches a connection for the far end hanging up while the thread that
// would read it is busy elsewhere (a JoinWorld's rendezvous runs on the
// session's reader thread). A host that leaves mid-rendezvous then frees its
// daemon at once instead of leaving it busy until the peer timeout.
#pragma once

#include <functional>
#include <thread>

namespace sinkrt::device {

class HangupWatch {
 public:
  // Calls `on_hangup` (once, from the watch's thread) when `fd`'s peer closes
  // or resets the connection. Data arriving is not a hang-up and is left
  // unread for the reader.
  HangupWatch(int fd, std::function<void()> on_hangup);
  // Stops watching and joins: after it returns, `on_hangup` is not running
  // and will not be called.
  ~HangupWatch();

  HangupWatch(const HangupWatch&) = delete;
  HangupWatch& operator=(const HangupWatch&) = delete;

 private:
  int stop_fd_ = -1;  // an eventfd the destructor writes
  std::thread thread_;
};

}  // namespace sinkrt::device
