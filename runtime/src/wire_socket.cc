#include "runtime/src/wire_socket.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <asio/connect.hpp>
#include <asio/write.hpp>
#include <cerrno>
#include <cstring>
#include <thread>

#include "runtime/src/tls/tls_internal.h"

namespace sinkrt {
namespace {

std::string EndpointText(const asio::ip::tcp::endpoint& e) {
  Address a{e.address().to_string(), e.port()};
  return a.ToString();
}

// Milliseconds left until `deadline` for poll(): -1 without one, 0 once past.
int PollTimeout(const Deadline& deadline) {
  if (!deadline) return -1;
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - std::chrono::steady_clock::now());
  if (left.count() <= 0) return 0;
  return left.count() > 1'000'000'000 ? 1'000'000'000 : static_cast<int>(left.count() + 1);
}

}  // namespace

void TuneSocket(asio::ip::tcp::socket& socket) {
  asio::error_code ec;
  socket.set_option(asio::ip::tcp::no_delay(true), ec);
  socket.set_option(asio::socket_base::keep_alive(true), ec);
  // Large buffers let a whole batch leave in one write (Gloo grows its send
  // buffer to 32 MiB for the same reason); the kernel caps them at its limits.
  socket.set_option(asio::socket_base::send_buffer_size(4 << 20), ec);
  socket.set_option(asio::socket_base::receive_buffer_size(4 << 20), ec);
  // A peer whose machine vanished (no FIN, no RST) is found after
  // 10 s idle + 3 probes 2 s apart, instead of the kernel's two hours.
  int fd = socket.native_handle();
  int idle = 10, interval = 2, count = 3;
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
}

FrameSocket::FrameSocket(asio::ip::tcp::socket socket, WireLimits limits)
    : socket_(std::move(socket)), limits_(limits) {
  asio::error_code ec;
  auto remote = socket_.remote_endpoint(ec);
  peer_ = ec ? std::string("(unconnected)") : EndpointText(remote);
}

FrameSocket::~FrameSocket() {
  asio::error_code ec;
  socket_.close(ec);
}

int FrameSocket::native_handle() { return socket_.native_handle(); }

Result<std::unique_ptr<FrameSocket>> FrameSocket::Connect(const Address& address, std::chrono::milliseconds timeout,
                                                          WireLimits limits, const ConnectObserver& observer) {
  // How often an observer hears of an attempt still pending (a SYN nobody
  // answers waits for the whole deadline).
  constexpr auto kObserverTick = std::chrono::milliseconds(100);
  auto context = std::make_unique<asio::io_context>();
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  asio::ip::tcp::resolver resolver(*context);
  asio::error_code ec;
  auto endpoints = resolver.resolve(address.host, std::to_string(address.port), ec);
  if (ec) return Unavailable("cannot resolve '" + address.host + "': " + ec.message());

  auto backoff = std::chrono::milliseconds(10);
  std::string last_error = "timed out";
  for (;;) {
    asio::ip::tcp::socket socket(*context);
    asio::error_code result = asio::error::would_block;
    asio::async_connect(socket, endpoints,
                        [&](const asio::error_code& e, const asio::ip::tcp::endpoint&) { result = e; });
    context->restart();
    if (observer) {
      // In ticks: run_until returns at the tick with the connect still
      // pending, or earlier once it has completed (the context runs dry).
      for (auto now = std::chrono::steady_clock::now(); now < deadline; now = std::chrono::steady_clock::now()) {
        context->run_until(std::min(deadline, now + kObserverTick));
        if (context->stopped()) break;
        observer(ConnectWait{true, {}});
      }
    } else {
      context->run_until(deadline);
    }
    if (!context->stopped()) {  // the deadline passed with the connect pending
      socket.close(ec);
      context->run();
      result = asio::error::timed_out;
    }
    if (!result) {
      TuneSocket(socket);
      auto s = std::make_unique<FrameSocket>(std::move(socket), limits);
      s->owned_context_ = std::move(context);
      return s;
    }
    last_error = result.message();
    if (observer) observer(ConnectWait{false, last_error});
    // A daemon that is still starting refuses connections: try again until
    // the deadline, backing off so a missing one does not spin a core.
    if (result != asio::error::connection_refused || std::chrono::steady_clock::now() + backoff >= deadline) break;
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(200));
  }
  return Unavailable("cannot connect to " + address.ToString() + " within " + std::to_string(timeout.count()) +
                     " ms: " + last_error);
}

Status FrameSocket::Send(std::span<const uint8_t> message, std::span<const std::span<const uint8_t>> payload) {
  uint64_t payload_bytes = 0;
  for (auto p : payload) payload_bytes += p.size();
  uint8_t header[kFrameHeaderBytes];
  EncodeFrameHeader({static_cast<uint32_t>(message.size()), payload_bytes}, header);
  // Gather the pieces into one write: small frames leave in one segment
  // (TCP_NODELAY) and batches are never copied into a staging buffer.
  asio::const_buffer stack_buffers[8];
  std::vector<asio::const_buffer> heap_buffers;
  size_t n = 2 + payload.size();
  asio::const_buffer* buffers = stack_buffers;
  if (n > 8) {
    heap_buffers.resize(n);
    buffers = heap_buffers.data();
  }
  buffers[0] = asio::buffer(header, sizeof header);
  buffers[1] = asio::buffer(message.data(), message.size());
  for (size_t i = 0; i < payload.size(); ++i) buffers[2 + i] = asio::buffer(payload[i].data(), payload[i].size());
  std::span<asio::const_buffer> seq(buffers, n);
  std::lock_guard<std::mutex> lk(send_mu_);
  if (tls_) return SendTls(seq);
  asio::error_code ec;
  asio::write(socket_, seq, ec);
  if (ec) return Unavailable("sending to " + peer_ + ": " + ec.message());
  return Status::Ok();
}

// Under send_mu_. Pieces below a TLS record's size are gathered first, so a
// request leaves as one record and one segment instead of one per piece;
// large payloads go straight from where they lie.
Status FrameSocket::SendTls(std::span<const asio::const_buffer> pieces) {
  constexpr size_t kRecordBytes = 16 * 1024;
  auto flush = [&]() -> Status {
    if (tls_staging_.empty()) return Status::Ok();
    Status st = TlsWrite(*tls_, tls_staging_.data(), tls_staging_.size(), peer_);
    tls_staging_.clear();
    return st;
  };
  for (const auto& b : pieces) {
    const auto* p = static_cast<const uint8_t*>(b.data());
    if (tls_staging_.size() + b.size() <= kRecordBytes) {
      tls_staging_.insert(tls_staging_.end(), p, p + b.size());
      continue;
    }
    SINKRT_RETURN_IF_ERROR(flush());
    SINKRT_RETURN_IF_ERROR(TlsWrite(*tls_, p, b.size(), peer_));
  }
  return flush();
}

Status FrameSocket::StartTls(const TlsContext& context, Deadline deadline) {
  if (tls_) return Internal("StartTls on a connection that already speaks TLS");
  SINKRT_ASSIGN_OR_RETURN(tls_, TlsHandshake(context, socket_.native_handle(), peer_, deadline));
  tls_staging_.reserve(16 * 1024);
  return Status::Ok();
}

Result<IoWait> FrameSocket::StepTls(const TlsContext& context) {
  if (tls_) return Internal("StepTls on a connection that already speaks TLS");
  const int fd = socket_.native_handle();
  if (!tls_handshake_) {
    if (context.role == TlsRole::kServer) {
      SINKRT_ASSIGN_OR_RETURN(IoWait wait, PeekTlsClient(fd, peer_));
      if (wait != IoWait::kNone) return wait;
    }
    SINKRT_ASSIGN_OR_RETURN(tls_handshake_, NewTlsSession(context, fd, peer_));
  }
  SINKRT_ASSIGN_OR_RETURN(IoWait wait, TlsHandshakeStep(*tls_handshake_, peer_));
  if (wait == IoWait::kNone) {
    tls_ = std::move(tls_handshake_);
    tls_staging_.reserve(16 * 1024);
  }
  return wait;
}

Result<IoStep> FrameSocket::ReadSome(std::span<uint8_t> dst) {
  if (tls_) return TlsReadSome(*tls_, dst.data(), dst.size(), peer_);
  for (;;) {
    const ssize_t r = ::recv(socket_.native_handle(), dst.data(), dst.size(), MSG_DONTWAIT);
    if (r >= 0) return IoStep{static_cast<size_t>(r), IoWait::kNone};
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return IoStep{0, IoWait::kReadable};
    return Unavailable("reading from " + peer_ + ": " + std::strerror(errno));
  }
}

Result<IoStep> FrameSocket::WriteSome(std::span<const std::span<const uint8_t>> pieces) {
  if (tls_) {
    // A small leading piece (a message header) shares its record with what
    // follows: one record and one segment instead of two. Rebuilt the same
    // from the same pieces, as a retried record must be.
    constexpr size_t kRecordBytes = 16 * 1024;
    if (pieces.size() > 1 && pieces[0].size() < kRecordBytes) {
      write_some_staging_.clear();
      for (std::span<const uint8_t> p : pieces) {
        const size_t take = std::min(p.size(), kRecordBytes - write_some_staging_.size());
        write_some_staging_.insert(write_some_staging_.end(), p.begin(), p.begin() + static_cast<long>(take));
        if (write_some_staging_.size() == kRecordBytes) break;
      }
      return TlsWriteSome(*tls_, write_some_staging_.data(), write_some_staging_.size(), peer_);
    }
    if (pieces.empty()) return IoStep{};
    return TlsWriteSome(*tls_, pieces[0].data(), pieces[0].size(), peer_);
  }
  iovec iov[8];
  const size_t n = std::min<size_t>(pieces.size(), 8);
  for (size_t i = 0; i < n; ++i) iov[i] = {const_cast<uint8_t*>(pieces[i].data()), pieces[i].size()};
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = n;
  for (;;) {
    const ssize_t w = ::sendmsg(socket_.native_handle(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w >= 0) return IoStep{static_cast<size_t>(w), IoWait::kNone};
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return IoStep{0, IoWait::kWritable};
    return Unavailable("sending to " + peer_ + ": " + std::strerror(errno));
  }
}

void FrameSocket::ShutdownWrite() {
  if (tls_) return TlsShutdownWrite(*tls_);
  ::shutdown(socket_.native_handle(), SHUT_WR);
}

std::string FrameSocket::transport() const { return tls_ ? TlsDescription(*tls_) : std::string("plain"); }

Status FrameSocket::Send(const flatbuffers::FlatBufferBuilder& fbb, std::span<const std::span<const uint8_t>> payload) {
  return Send(std::span<const uint8_t>(fbb.GetBufferPointer(), fbb.GetSize()), payload);
}

Status FrameSocket::ReadExact(uint8_t* dst, size_t n, Deadline deadline) {
  if (tls_) return TlsRead(*tls_, dst, n, deadline, peer_);
  int fd = socket_.native_handle();
  while (n > 0) {
    pollfd p{fd, POLLIN, 0};
    int r = ::poll(&p, 1, PollTimeout(deadline));
    if (r < 0) {
      if (errno == EINTR) continue;
      return Unavailable("waiting for " + peer_ + ": " + std::strerror(errno));
    }
    if (r == 0) return DeadlineExceeded("no data from " + peer_ + " before the deadline");
    asio::error_code ec;
    size_t got = socket_.read_some(asio::buffer(dst, n), ec);
    if (ec == asio::error::eof) return Unavailable("connection closed by " + peer_);
    if (ec) return Unavailable("reading from " + peer_ + ": " + ec.message());
    dst += got;
    n -= got;
  }
  return Status::Ok();
}

Status FrameSocket::Receive(InFrame* frame, Deadline deadline) {
  if (frame->payload_left != 0)
    return Internal("Receive with " + std::to_string(frame->payload_left) +
                    " payload bytes of the previous frame unread");
  frame->message = nullptr;
  uint8_t header[kFrameHeaderBytes];
  SINKRT_RETURN_IF_ERROR(ReadExact(header, sizeof header, deadline));
  SINKRT_ASSIGN_OR_RETURN(frame->header, DecodeFrameHeader(header, limits_));
  frame->message_bytes.resize(frame->header.message_bytes);
  SINKRT_RETURN_IF_ERROR(
      ReadExact(frame->message_bytes.data(), frame->message_bytes.size(), deadline).WithContext("truncated frame"));
  SINKRT_ASSIGN_OR_RETURN(frame->message, VerifyMessage(frame->message_bytes));
  SINKRT_RETURN_IF_ERROR(CheckPayloadRule(*frame->message, frame->header.payload_bytes));
  frame->payload_left = frame->header.payload_bytes;
  return Status::Ok();
}

Status FrameSocket::ReadPayload(InFrame* frame, std::span<uint8_t> dst, Deadline deadline) {
  if (dst.size() > frame->payload_left)
    return Internal("reading " + std::to_string(dst.size()) + " payload bytes, only " +
                    std::to_string(frame->payload_left) + " left");
  SINKRT_RETURN_IF_ERROR(ReadExact(dst.data(), dst.size(), deadline).WithContext("truncated frame payload"));
  frame->payload_left -= dst.size();
  return Status::Ok();
}

Status FrameSocket::SkipPayload(InFrame* frame, Deadline deadline) {
  uint8_t sink[64 * 1024];
  while (frame->payload_left > 0) {
    size_t n = std::min<uint64_t>(sizeof sink, frame->payload_left);
    SINKRT_RETURN_IF_ERROR(ReadPayload(frame, std::span<uint8_t>(sink, n), deadline));
  }
  return Status::Ok();
}

void FrameSocket::Shutdown() {
  // shutdown(2), not close: the descriptor stays valid for a reader blocked
  // in poll on another thread, which wakes with end of file.
  ::shutdown(socket_.native_handle(), SHUT_RDWR);
}

}  // namespace sinkrt
