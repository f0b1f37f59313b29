// TcpEngine: the communicator's one I/O thread.
//
// It polls every peer connection (TCP data peers and the control
// connections of shm peers) and an eventfd, reads whatever arrives (data
// into pre-posted slots, credits, notices, queries, end of file) and
// finishes writes the op thread left behind. One thread for all peers, as
// in Gloo's loop: on two cores, a thread per peer and direction would only
// add context switches.
#pragma once

#include <atomic>
#include <thread>
#include <vector>

#include "sinkrt/runtime/status.h"
#include "tcp_link.h"

namespace sinkrt::device {

class TcpEngine {
 public:
  explicit TcpEngine(std::vector<TcpLink*> links);
  ~TcpEngine();  // Stop()

  Status Start();
  void Stop();
  // Makes the thread recompute its poll set (a link now waits for POLLOUT).
  void Wake();

 private:
  void Run();

  std::vector<TcpLink*> links_;
  int event_fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace sinkrt::device
