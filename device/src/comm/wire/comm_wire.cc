#include "device/src/comm/wire/comm_wire.h"

#include <fcntl.h>
#include <poll.h>

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

Status WriteFully(FrameSocket& socket, std::span<const uint8_t> head, std::span<const uint8_t> body, Deadline deadline,
                  const std::string& who) {
  size_t done = 0;
  const size_t total = head.size() + body.size();
  while (done < total) {
    // From the same position after a wait, as a TLS record must be retried.
    std::span<const uint8_t> pieces[2];
    size_t n = 0;
    if (done < head.size()) pieces[n++] = head.subspan(done);
    const size_t body_done = done > head.size() ? done - head.size() : 0;
    if (body_done < body.size()) pieces[n++] = body.subspan(body_done);
    Result<IoStep> w = socket.WriteSome(std::span<const std::span<const uint8_t>>(pieces, n));
    if (!w.ok()) return Unavailable(who + " closed its connection (" + w.status().message() + ")");
    done += w->bytes;
    if (w->bytes > 0) continue;
    SINKRT_ASSIGN_OR_RETURN(
        bool ready, WaitFd(socket.native_handle(), w->wait == IoWait::kReadable ? POLLIN : POLLOUT, deadline, who));
    if (!ready) return DeadlineExceeded(who + " took no data");
  }
  return Status::Ok();
}

Status ReadFully(FrameSocket& socket, std::span<uint8_t> dst, Deadline deadline, const std::string& who) {
  size_t done = 0;
  while (done < dst.size()) {
    // A TLS session may hold bytes it read ahead: poll only when it says so.
    Result<IoStep> r = socket.ReadSome(dst.subspan(done));
    if (!r.ok()) return Unavailable(who + " closed its connection (" + r.status().message() + ")");
    if (r->bytes > 0) {
      done += r->bytes;
      continue;
    }
    if (r->wait == IoWait::kNone) return Unavailable(who + " closed its connection");
    SINKRT_ASSIGN_OR_RETURN(
        bool ready, WaitFd(socket.native_handle(), r->wait == IoWait::kWritable ? POLLOUT : POLLIN, deadline, who));
    if (!ready) return DeadlineExceeded("no data from " + who);
  }
  return Status::Ok();
}

Result<RawMessage> ReadMessage(FrameSocket& socket, Deadline deadline, const std::string& who, uint32_t max_payload) {
  RawMessage m;
  SINKRT_RETURN_IF_ERROR(
      ReadFully(socket, std::span<uint8_t>(reinterpret_cast<uint8_t*>(&m.header), sizeof m.header), deadline, who));
  if (m.header.magic != kCommMagic) return Unavailable(who + " sent a corrupt frame (bad magic)");
  if (m.header.kind != MsgKind::kCredit && m.header.bytes > max_payload)
    return Unavailable(who + " sent a " + std::to_string(m.header.bytes) + "-byte message, at most " +
                       std::to_string(max_payload) + " expected");
  if (m.header.kind != MsgKind::kCredit && m.header.bytes > 0) {
    m.payload.resize(m.header.bytes);
    SINKRT_RETURN_IF_ERROR(ReadFully(
        socket, std::span<uint8_t>(reinterpret_cast<uint8_t*>(m.payload.data()), m.payload.size()), deadline, who));
  }
  return m;
}

Status WriteMessage(FrameSocket& socket, const MsgHeader& header, std::span<const uint8_t> payload, Deadline deadline,
                    const std::string& who) {
  MsgHeader h = header;
  h.bytes = static_cast<uint32_t>(payload.size());
  return WriteFully(socket, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(&h), sizeof h), payload, deadline,
                    who);
}

}  // namespace sinkrt::device
