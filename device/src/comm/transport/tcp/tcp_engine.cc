#include "device/src/comm/transport/tcp/tcp_engine.h"

#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace sinkrt::device {
namespace {

constexpr int64_t kTickNs = 10'000'000;  // 10 ms

}  // namespace

TcpEngine::TcpEngine(std::vector<TcpLink*> links) : links_(std::move(links)) {}

TcpEngine::~TcpEngine() {
  Stop();
  for (TcpLink* l : links_) l->SetOpSleeper(nullptr);
  if (event_fd_ >= 0) ::close(event_fd_);
  if (op_event_fd_ >= 0) ::close(op_event_fd_);
}

Status TcpEngine::Start() {
  event_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (event_fd_ < 0) return Internal(std::string("eventfd: ") + std::strerror(errno));
  op_event_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (op_event_fd_ < 0) return Internal(std::string("eventfd: ") + std::strerror(errno));
  for (TcpLink* l : links_) {
    if (!l->carries_data()) continue;
    data_links_.push_back(l);
    l->SetOpSleeper(this);
  }
  op_fds_.resize(data_links_.size() + 1);
  io_fds_.resize(links_.size() + 1);
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

void TcpEngine::WakeOp() {
  uint64_t one = 1;
  ssize_t r = ::write(op_event_fd_, &one, sizeof one);
  (void)r;
}

void TcpEngine::SetOpSleeping(bool sleeping) { op_sleeping_.store(sleeping, std::memory_order_seq_cst); }

void TcpEngine::OpSleep(std::chrono::nanoseconds max) {
  if (max.count() <= 0) return;
  const size_t n = data_links_.size();
  for (size_t i = 0; i < n; ++i) {
    TcpLink* l = data_links_[i];
    l->MarkOpReading();  // the I/O thread keeps out of this socket's input meanwhile
    short events = static_cast<short>((l->AtEof() ? 0 : POLLIN) | (l->WantsWrite() ? POLLOUT : 0));
    op_fds_[i] = {events ? l->fd() : -1, events, 0};
  }
  op_fds_[n] = {op_event_fd_, POLLIN, 0};
  const int ms = static_cast<int>(std::max<int64_t>(1, (max.count() + 999'999) / 1'000'000));
  int r = ::poll(op_fds_.data(), op_fds_.size(), ms);
  if (r <= 0) return;
  if (op_fds_[n].revents) {
    uint64_t v;
    ssize_t got = ::read(op_event_fd_, &v, sizeof v);
    (void)got;
  }
  for (size_t i = 0; i < n; ++i)
    if (op_fds_[i].revents) data_links_[i]->PollOnce();
}

void TcpEngine::Run() {
  pthread_setname_np(pthread_self(), "sinkrt-comm-io");
  std::vector<pollfd>& fds = io_fds_;
  while (!stop_.load(std::memory_order_acquire)) {
    fds[0] = {event_fd_, POLLIN, 0};
    // Links whose op thread reads for itself need a tick: one that stopped
    // polling gets its input watched here again within kTick.
    bool tick = false;
    for (TcpLink* l : links_) tick = l->ReleaseIdleReading(kTickNs) || tick;
    for (size_t i = 0; i < links_.size(); ++i) {
      short events = links_[i]->PollEvents();
      fds[i + 1] = {events ? links_[i]->fd() : -1, events, 0};
    }
    int r = ::poll(fds.data(), fds.size(), tick ? static_cast<int>(kTickNs / 1'000'000) : -1);
    if (r < 0) {
      if (errno == EINTR) continue;
      return;  // cannot happen with valid descriptors; waits still end at their deadlines
    }
    if (fds[0].revents) {
      uint64_t v;
      ssize_t n = ::read(event_fd_, &v, sizeof v);
      (void)n;
    }
    bool handled = false;
    for (size_t i = 0; i < links_.size(); ++i) {
      short re = fds[i + 1].revents;
      if (!re) continue;
      if (re & (POLLIN | POLLHUP | POLLERR)) links_[i]->OnReadable();
      if (re & (POLLOUT | POLLHUP | POLLERR)) links_[i]->OnWritable();
      handled = true;
    }
    // What we read or wrote may be what a sleeping op thread waits for.
    // (Dekker with AwaitOp: it sets op_sleeping_, then checks its condition.)
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (handled && op_sleeping_.load(std::memory_order_seq_cst)) WakeOp();
  }
}

}  // namespace sinkrt::device
