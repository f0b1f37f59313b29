// TcpEngine: the communicator's one I/O thread.
//
// It polls every peer connection (TCP data peers and the control
// connections of shm peers) and an eventfd, reads whatever arrives (data
// into pre-posted slots, credits, notices, queries, end of file) and
// finishes writes the op thread left behind. One thread for all peers, as
// in Gloo's loop: on two cores, a thread per peer and direction would only
// add context switches.
//
// It is also where the op thread sleeps when a wait on a TCP link outlasts
// its polling (OpSleep: a poll over every data link's socket and its own
// eventfd), so a message wakes the thread that waits for it and not this
// one, which leaves those sockets' input alone while the op thread reads
// them (TcpLink::op_reading_) and, while any link is in that state, wakes
// every 10 ms to take back the input of links whose op thread went quiet.
#pragma once

#include <poll.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "device/src/comm/transport/tcp/tcp_link.h"
#include "sinkrt/runtime/status.h"

namespace sinkrt::device {

class TcpEngine final : public OpSleeper {
 public:
  explicit TcpEngine(std::vector<TcpLink*> links);
  ~TcpEngine();  // Stop()

  Status Start();
  void Stop();
  // Makes the thread recompute its poll set (a link now waits for POLLOUT).
  void Wake();

  // The op thread's sleep (OpSleeper), over the data links' sockets.
  void SetOpSleeping(bool sleeping) override;
  void OpSleep(std::chrono::nanoseconds max) override;
  // Ends an OpSleep now (Abort, a failure notice).
  void WakeOp();

 private:
  void Run();

  std::vector<TcpLink*> links_;
  std::vector<TcpLink*> data_links_;
  std::vector<pollfd> op_fds_;  // OpSleep's, allocated once
  // The I/O thread's, allocated by Start: a thread the scheduler starts late
  // must not allocate once the steps run (no_alloc_test).
  std::vector<pollfd> io_fds_;
  int event_fd_ = -1;
  int op_event_fd_ = -1;
  std::atomic<bool> op_sleeping_{false};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace sinkrt::device
