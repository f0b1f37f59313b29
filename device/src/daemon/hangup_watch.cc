#include "device/src/daemon/hangup_watch.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

namespace sinkrt::device {

HangupWatch::HangupWatch(int fd, std::function<void()> on_hangup) {
  stop_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (stop_fd_ < 0 || fd < 0) return;  // no watch: the rendezvous still ends at its deadline
  thread_ = std::thread([fd, stop = stop_fd_, on_hangup = std::move(on_hangup)] {
    for (;;) {
      // POLLRDHUP: the peer shut its side; POLLHUP/POLLERR always come back.
      pollfd fds[2] = {{fd, POLLRDHUP, 0}, {stop, POLLIN, 0}};
      const int r = ::poll(fds, 2, -1);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0 || fds[1].revents) return;
      if (fds[0].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) {
        on_hangup();
        return;
      }
    }
  });
}

HangupWatch::~HangupWatch() {
  if (thread_.joinable()) {
    uint64_t one = 1;
    ssize_t w = ::write(stop_fd_, &one, sizeof one);
    (void)w;
    thread_.join();
  }
  if (stop_fd_ >= 0) ::close(stop_fd_);
}

}  // namespace sinkrt::device
