#include "tcp_engine.h"

#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace sinkrt::device {

TcpEngine::TcpEngine(std::vector<TcpLink*> links) : links_(std::move(links)) {}

TcpEngine::~TcpEngine() {
  Stop();
  if (event_fd_ >= 0) ::close(event_fd_);
}

Status TcpEngine::Start() {
  event_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (event_fd_ < 0) return Internal(std::string("eventfd: ") + std::strerror(errno));
  for (TcpLink* l : links_) l->SetEngineWake([this] { Wake(); });
  thread_ = std::thread([this] { Run(); });
  return Status::Ok();
}

void TcpEngine::Stop() {
  if (!thread_.joinable()) return;
  stop_.store(true, std::memory_order_release);
  Wake();
  thread_.join();
}

void TcpEngine::Wake() {
  uint64_t one = 1;
  ssize_t r = ::write(event_fd_, &one, sizeof one);
  (void)r;  // EAGAIN: the counter is already non-zero, the thread wakes anyway
}

void TcpEngine::Run() {
  pthread_setname_np(pthread_self(), "sinkrt-comm-io");
  std::vector<pollfd> fds(links_.size() + 1);
  while (!stop_.load(std::memory_order_acquire)) {
    fds[0] = {event_fd_, POLLIN, 0};
    for (size_t i = 0; i < links_.size(); ++i) {
      short events = links_[i]->PollEvents();
      fds[i + 1] = {events ? links_[i]->fd() : -1, events, 0};
    }
    int r = ::poll(fds.data(), fds.size(), -1);
    if (r < 0) {
      if (errno == EINTR) continue;
      return;  // cannot happen with valid descriptors; waits still end at their deadlines
    }
    if (fds[0].revents) {
      uint64_t v;
      ssize_t n = ::read(event_fd_, &v, sizeof v);
      (void)n;
    }
    for (size_t i = 0; i < links_.size(); ++i) {
      short re = fds[i + 1].revents;
      if (!re) continue;
      if (re & (POLLIN | POLLHUP | POLLERR)) links_[i]->OnReadable();
      if (re & (POLLOUT | POLLHUP | POLLERR)) links_[i]->OnWritable();
    }
  }
}

}  // namespace sinkrt::device
