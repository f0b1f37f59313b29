#include <fcntl.h>
#include <openssl/err.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <climits>
#include <cstring>

#include "runtime/src/tls/tls_internal.h"

namespace sinkrt {
namespace {

// The first byte of a TLS record carrying a handshake message.
constexpr uint8_t kTlsHandshakeRecord = 0x16;

int PollTimeout(const Deadline& deadline) {
  if (!deadline) return -1;
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - std::chrono::steady_clock::now());
  if (left.count() <= 0) return 0;
  return left.count() > 1'000'000'000 ? 1'000'000'000 : static_cast<int>(left.count() + 1);
}

// Waits until `fd` is ready for `events` (POLLIN or POLLOUT) or the deadline.
Status WaitReady(int fd, short events, const Deadline& deadline, const std::string& peer) {
  for (;;) {
    pollfd p{fd, events, 0};
    int r = ::poll(&p, 1, PollTimeout(deadline));
    if (r > 0) return Status::Ok();  // ready, or hung up: the next call says which
    if (r == 0) return DeadlineExceeded("no data from " + peer + " before the deadline");
    if (errno != EINTR) return Unavailable("waiting for " + peer + ": " + std::strerror(errno));
  }
}

// An OpenSSL reason as a sentence about `peer`. An alert is the other side
// ending the session (in TLS 1.3 a server refuses a client's certificate
// after the client's handshake is done, so the client meets it reading).
std::string Reason(const std::string& reason, const std::string& peer, const char* doing) {
  if (reason.find("alert") != std::string::npos) return peer + " refused the TLS session: " + reason;
  if (!doing) return reason;  // the caller names the peer
  return std::string(doing) + " " + peer + ": " + reason;
}

// What an SSL call's failure means for a loop around it: Ok to wait and
// retry (the events to wait for set), or the error that ends it.
Status Classify(TlsSession& s, int ret, short* wait_for, const std::string& peer, const char* doing) {
  const int err = SSL_get_error(s.ssl, ret);
  switch (err) {
    case SSL_ERROR_WANT_READ:
      *wait_for = POLLIN;
      return Status::Ok();
    case SSL_ERROR_WANT_WRITE:
      *wait_for = POLLOUT;
      return Status::Ok();
    case SSL_ERROR_ZERO_RETURN:
      return Unavailable("connection closed by " + peer);
    case SSL_ERROR_SYSCALL: {
      const int e = errno;
      std::string queued = TakeOpenSslError("");
      if (!queued.empty()) return Unavailable(Reason(queued, peer, doing));
      if (ret == 0 || e == 0 || e == EPIPE || e == ECONNRESET) return Unavailable("connection closed by " + peer);
      return Unavailable(Reason(std::strerror(e), peer, doing));
    }
    default:
      return Unavailable(Reason(TakeOpenSslError("TLS error " + std::to_string(err)), peer, doing));
  }
}

}  // namespace

// A server's first look at what the client sent, without waiting: TLS
// starts with a handshake record; anything else (a plain sinkrt frame) is
// refused before OpenSSL reads it, so the caller can still answer in plain
// frames.
Result<IoWait> PeekTlsClient(int fd, const std::string& peer) {
  uint8_t first = 0;
  ssize_t n;
  do {
    n = ::recv(fd, &first, 1, MSG_PEEK | MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  if (n == 0) return Unavailable("connection closed by " + peer);
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) return IoWait::kReadable;
    return Unavailable("reading from " + peer + ": " + std::strerror(errno));
  }
  if (first != kTlsHandshakeRecord)
    return FailedPrecondition(peer + " does not speak TLS (its first bytes are not a TLS handshake)");
  return IoWait::kNone;
}

namespace {

// Why a handshake failed, with the certificate check's verdict when there is one.
std::string HandshakeFailure(TlsSession& s, const Status& io) {
  std::string why = io.message();
  const long verify = SSL_get_verify_result(s.ssl);
  if (verify != X509_V_OK) why += " (" + std::string(X509_verify_cert_error_string(verify)) + ")";
  if (why.find("wrong version number") != std::string::npos || why.find("packet length too long") != std::string::npos)
    why += "; the other side answered without TLS (is it started without a certificate?)";
  return why;
}

}  // namespace

Result<std::unique_ptr<TlsSession>> NewTlsSession(const TlsContext& context, int fd, const std::string& peer) {
  const int flags = ::fcntl(fd, F_GETFL, 0);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
    return Unavailable("making the socket to " + peer + " non-blocking: " + std::strerror(errno));
  ERR_clear_error();
  auto s = std::make_unique<TlsSession>();
  s->fd = fd;
  s->ssl = SSL_new(context.ctx);
  if (!s->ssl || SSL_set_fd(s->ssl, fd) != 1) return Internal("SSL_new: " + TakeOpenSslError("out of memory"));
  if (context.role == TlsRole::kServer) {
    SSL_set_accept_state(s->ssl);
  } else {
    SSL_set_connect_state(s->ssl);
  }
  return s;
}

Result<IoWait> TlsHandshakeStep(TlsSession& s, const std::string& peer) {
  ERR_clear_error();
  const int r = SSL_do_handshake(s.ssl);
  if (r == 1) return IoWait::kNone;
  short wait_for = 0;
  Status st = Classify(s, r, &wait_for, peer, nullptr);
  if (!st.ok()) return Status(st.code(), "TLS handshake with " + peer + " failed: " + HandshakeFailure(s, st));
  return wait_for == POLLIN ? IoWait::kReadable : IoWait::kWritable;
}

Result<std::unique_ptr<TlsSession>> TlsHandshake(const TlsContext& context, int fd, const std::string& peer,
                                                 Deadline deadline) {
  if (context.role == TlsRole::kServer) {
    for (;;) {
      SINKRT_ASSIGN_OR_RETURN(IoWait wait, PeekTlsClient(fd, peer));
      if (wait == IoWait::kNone) break;
      SINKRT_RETURN_IF_ERROR(WaitReady(fd, POLLIN, deadline, peer));
    }
  }
  SINKRT_ASSIGN_OR_RETURN(std::unique_ptr<TlsSession> s, NewTlsSession(context, fd, peer));
  for (;;) {
    SINKRT_ASSIGN_OR_RETURN(IoWait wait, TlsHandshakeStep(*s, peer));
    if (wait == IoWait::kNone) return s;
    Status st = WaitReady(fd, wait == IoWait::kReadable ? POLLIN : POLLOUT, deadline, peer);
    if (!st.ok()) return Status(st.code(), "TLS handshake with " + peer + " failed: " + HandshakeFailure(*s, st));
  }
}

namespace {

// Moves all n bytes through `call` (SSL_read or SSL_write on the session),
// one locked call at a time, waiting unlocked for what the call asks for.
template <typename Byte, typename Call>
Status Transfer(TlsSession& s, Byte* bytes, size_t n, Deadline deadline, const std::string& peer, const char* doing,
                Call call) {
  while (n > 0) {
    int r;
    short wait_for = 0;
    Status st;
    {
      std::lock_guard<std::mutex> lk(s.mu);
      ERR_clear_error();
      r = call(s.ssl, bytes, static_cast<int>(std::min<size_t>(n, INT_MAX)));
      if (r <= 0) st = Classify(s, r, &wait_for, peer, doing);
    }
    if (r > 0) {
      bytes += r;
      n -= static_cast<size_t>(r);
      continue;
    }
    SINKRT_RETURN_IF_ERROR(st);
    SINKRT_RETURN_IF_ERROR(WaitReady(s.fd, wait_for, deadline, peer));
  }
  return Status::Ok();
}

}  // namespace

Status TlsRead(TlsSession& s, uint8_t* dst, size_t n, Deadline deadline, const std::string& peer) {
  return Transfer(s, dst, n, deadline, peer, "reading from",
                  [](SSL* ssl, uint8_t* p, int len) { return SSL_read(ssl, p, len); });
}

Status TlsWrite(TlsSession& s, const uint8_t* src, size_t n, const std::string& peer) {
  // No deadline: as a blocking write, it waits while the peer lives.
  return Transfer(s, src, n, std::nullopt, peer, "sending to",
                  [](SSL* ssl, const uint8_t* p, int len) { return SSL_write(ssl, p, len); });
}

namespace {

// One non-blocking SSL call under the session's lock: bytes moved, end of
// file (a close_notify, or the connection closed without one: zero bytes
// and no wait), or what to wait for.
template <typename Byte, typename Call>
Result<IoStep> TransferSome(TlsSession& s, Byte* bytes, size_t n, const std::string& peer, const char* doing,
                            Call call) {
  std::lock_guard<std::mutex> lk(s.mu);
  ERR_clear_error();
  const int r = call(s.ssl, bytes, static_cast<int>(std::min<size_t>(n, INT_MAX)));
  if (r > 0) return IoStep{static_cast<size_t>(r), IoWait::kNone};
  if (SSL_get_error(s.ssl, r) == SSL_ERROR_ZERO_RETURN) return IoStep{};  // the peer's close_notify
  short wait_for = 0;
  SINKRT_RETURN_IF_ERROR(Classify(s, r, &wait_for, peer, doing));
  return IoStep{0, wait_for == POLLIN ? IoWait::kReadable : IoWait::kWritable};
}

}  // namespace

Result<IoStep> TlsReadSome(TlsSession& s, uint8_t* dst, size_t n, const std::string& peer) {
  return TransferSome(s, dst, n, peer, "reading from",
                      [](SSL* ssl, uint8_t* p, int len) { return SSL_read(ssl, p, len); });
}

Result<IoStep> TlsWriteSome(TlsSession& s, const uint8_t* src, size_t n, const std::string& peer) {
  return TransferSome(s, src, n, peer, "sending to",
                      [](SSL* ssl, const uint8_t* p, int len) { return SSL_write(ssl, p, len); });
}

void TlsShutdownWrite(TlsSession& s) {
  std::lock_guard<std::mutex> lk(s.mu);
  ERR_clear_error();
  // A close_notify tells the peer that the end is meant, not a truncation;
  // best effort: a full send buffer only loses that distinction.
  (void)SSL_shutdown(s.ssl);
  ERR_clear_error();
  ::shutdown(s.fd, SHUT_WR);
}

std::string TlsDescription(const TlsSession& s) {
  return std::string(SSL_get_version(s.ssl)) + " " + SSL_CIPHER_get_name(SSL_get_current_cipher(s.ssl));
}

}  // namespace sinkrt
