#include "comm/wire/comm_wire.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstring>

namespace sinkrt::device {
namespace {

int PollMs(const Deadline& deadline) {
  if (!deadline) return -1;
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - std::chrono::steady_clock::now());
  if (left.count() <= 0) return 0;
  return left.count() > 1'000'000'000 ? 1'000'000'000 : static_cast<int>(left.count() + 1);
}

// Waits for `events` on fd; false at the deadline.
Result<bool> WaitFd(int fd, short events, const Deadline& deadline, const std::string& who) {
  for (;;) {
    pollfd p{fd, events, 0};
    int r = ::poll(&p, 1, PollMs(deadline));
    if (r > 0) return true;
    if (r == 0) return false;
    if (errno != EINTR) return Unavailable("waiting for " + who + ": " + std::strerror(errno));
  }
}

}  // namespace

Status SetNonBlocking(int fd) {
  int flags = ::fcntl(fd, F_GETFL, 0);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
    return Internal(std::string("fcntl(O_NONBLOCK): ") + std::strerror(errno));
  return Status::Ok();
}

Status WriteFully(int fd, std::span<const uint8_t> head, std::span<const uint8_t> body, Deadline deadline,
                  const std::string& who) {
  size_t done = 0;
  const size_t total = head.size() + body.size();
  while (done < total) {
    iovec iov[2];
    int n = 0;
    if (done < head.size()) iov[n++] = {const_cast<uint8_t*>(head.data()) + done, head.size() - done};
    size_t body_done = done > head.size() ? done - head.size() : 0;
    if (body_done < body.size()) iov[n++] = {const_cast<uint8_t*>(body.data()) + body_done, body.size() - body_done};
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = n;
    ssize_t w = ::sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w >= 0) {
      done += static_cast<size_t>(w);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK)
      return Unavailable(who + " closed its connection (" + std::strerror(errno) + ")");
    SINKRT_ASSIGN_OR_RETURN(bool ready, WaitFd(fd, POLLOUT, deadline, who));
    if (!ready) return DeadlineExceeded(who + " took no data");
  }
  return Status::Ok();
}

Status ReadFully(int fd, std::span<uint8_t> dst, Deadline deadline, const std::string& who) {
  size_t done = 0;
  while (done < dst.size()) {
    ssize_t r = ::recv(fd, dst.data() + done, dst.size() - done, MSG_DONTWAIT);
    if (r > 0) {
      done += static_cast<size_t>(r);
      continue;
    }
    if (r == 0) return Unavailable(who + " closed its connection");
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK)
      return Unavailable(who + " closed its connection (" + std::strerror(errno) + ")");
    SINKRT_ASSIGN_OR_RETURN(bool ready, WaitFd(fd, POLLIN, deadline, who));
    if (!ready) return DeadlineExceeded("no data from " + who);
  }
  return Status::Ok();
}

Result<RawMessage> ReadMessage(int fd, Deadline deadline, const std::string& who, uint32_t max_payload) {
  RawMessage m;
  SINKRT_RETURN_IF_ERROR(
      ReadFully(fd, std::span<uint8_t>(reinterpret_cast<uint8_t*>(&m.header), sizeof m.header), deadline, who));
  if (m.header.magic != kCommMagic) return Unavailable(who + " sent a corrupt frame (bad magic)");
  if (m.header.kind != MsgKind::kCredit && m.header.bytes > max_payload)
    return Unavailable(who + " sent a " + std::to_string(m.header.bytes) + "-byte message, at most " +
                       std::to_string(max_payload) + " expected");
  if (m.header.kind != MsgKind::kCredit && m.header.bytes > 0) {
    m.payload.resize(m.header.bytes);
    SINKRT_RETURN_IF_ERROR(ReadFully(
        fd, std::span<uint8_t>(reinterpret_cast<uint8_t*>(m.payload.data()), m.payload.size()), deadline, who));
  }
  return m;
}

Status WriteMessage(int fd, const MsgHeader& header, std::span<const uint8_t> payload, Deadline deadline,
                    const std::string& who) {
  MsgHeader h = header;
  h.bytes = static_cast<uint32_t>(payload.size());
  return WriteFully(fd, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(&h), sizeof h), payload, deadline,
                    who);
}

}  // namespace sinkrt::device
