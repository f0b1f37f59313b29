// OpenSSL behind runtime/tls.h and FrameSocket: the context a TlsContext
// wraps, and one connection's session with the I/O FrameSocket calls.
#pragma once

#include <openssl/ssl.h>

#include <memory>
#include <mutex>
#include <string>

#include "runtime/src/wire_socket.h"
#include "sinkrt/runtime/tls.h"

namespace sinkrt {

struct TlsContext {
  SSL_CTX* ctx = nullptr;
  TlsRole role = TlsRole::kClient;
  ~TlsContext() { SSL_CTX_free(ctx); }
};

// One connection's TLS state. OpenSSL allows one call at a time on an SSL
// object, while FrameSocket reads on one thread and sends on others: `mu`
// guards each call, never a wait, so a writer waiting for buffer space
// never blocks the reader that drains the other direction.
struct TlsSession {
  SSL* ssl = nullptr;
  int fd = -1;
  std::mutex mu;
  ~TlsSession() { SSL_free(ssl); }
};

// What OpenSSL's error queue holds, drained: "certificate verify failed";
// `fallback` when it is empty.
std::string TakeOpenSslError(const std::string& fallback);

// The handshake on a connected descriptor (made non-blocking), within
// `deadline`. A server first checks that the client speaks TLS at all: a
// plain frame gets FailedPrecondition, so the caller can answer it plainly.
Result<std::unique_ptr<TlsSession>> TlsHandshake(const TlsContext& context, int fd, const std::string& peer,
                                                 Deadline deadline);

// The same in steps, for event loops (FrameSocket::StepTls): the server's
// look at the client's first byte (kNone: a TLS handshake is there), the
// session on `fd` (made non-blocking), then handshake steps until kNone.
Result<IoWait> PeekTlsClient(int fd, const std::string& peer);
Result<std::unique_ptr<TlsSession>> NewTlsSession(const TlsContext& context, int fd, const std::string& peer);
Result<IoWait> TlsHandshakeStep(TlsSession& session, const std::string& peer);

// Reads exactly n bytes.
Status TlsRead(TlsSession& session, uint8_t* dst, size_t n, Deadline deadline, const std::string& peer);
// Writes all n bytes; waits for buffer space as a blocking write would.
Status TlsWrite(TlsSession& session, const uint8_t* src, size_t n, const std::string& peer);
// Non-blocking, for links that drive the socket themselves: see
// FrameSocket::ReadSome and WriteSome.
Result<IoStep> TlsReadSome(TlsSession& session, uint8_t* dst, size_t n, const std::string& peer);
Result<IoStep> TlsWriteSome(TlsSession& session, const uint8_t* src, size_t n, const std::string& peer);
// Sends close_notify, then half-closes the socket.
void TlsShutdownWrite(TlsSession& session);
// "TLSv1.3 TLS_AES_256_GCM_SHA384".
std::string TlsDescription(const TlsSession& session);

}  // namespace sinkrt
