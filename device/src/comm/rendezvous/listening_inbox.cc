#include "device/src/comm/rendezvous/listening_inbox.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <asio/ip/tcp.hpp>
#include <cerrno>
#include <cstring>

#include "runtime/src/auth.h"

namespace sinkrt::device {
namespace {

// Sockets handed over must outlive the inbox, so they live on a context
// that is never destroyed (no operation ever runs on it: FrameSocket uses
// synchronous calls and poll).
asio::io_context& SocketContext() {
  static auto* context = new asio::io_context;
  return *context;
}

}  // namespace

struct ListeningInbox::Impl {
  asio::ip::tcp::acceptor acceptor{SocketContext()};
  int wake_fd = -1;
  ~Impl() {
    if (wake_fd >= 0) ::close(wake_fd);
  }
};

ListeningInbox::ListeningInbox(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<ListeningInbox>> ListeningInbox::Start(std::chrono::milliseconds hello_timeout,
                                                              const std::string& host, std::string token,
                                                              std::shared_ptr<const TlsContext> tls) {
  auto impl = std::make_unique<Impl>();
  asio::error_code ec;
  const asio::ip::address ip = asio::ip::make_address(host, ec);
  if (ec) return InvalidArgument("peer inbox: '" + host + "' is not an IP address: " + ec.message());
  asio::ip::tcp::endpoint endpoint(ip, 0);
  impl->acceptor.open(endpoint.protocol(), ec);
  if (!ec) impl->acceptor.bind(endpoint, ec);
  if (!ec) impl->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (!ec) impl->acceptor.non_blocking(true, ec);
  if (ec) return Unavailable("peer inbox: cannot listen on " + host + ": " + ec.message());
  impl->wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (impl->wake_fd < 0) return Internal(std::string("eventfd: ") + std::strerror(errno));
  auto local = impl->acceptor.local_endpoint(ec);
  std::unique_ptr<ListeningInbox> inbox(new ListeningInbox(std::move(impl)));
  inbox->address_ = Address{host, local.port()};
  inbox->hello_timeout_ = hello_timeout;
  inbox->token_ = std::move(token);
  inbox->tls_ = std::move(tls);
  inbox->thread_ = std::thread([p = inbox.get()] { p->Loop(); });
  return inbox;
}

ListeningInbox::~ListeningInbox() {
  uint64_t one = 1;
  ssize_t w = ::write(impl_->wake_fd, &one, sizeof one);
  (void)w;
  if (thread_.joinable()) thread_.join();
  asio::error_code ec;
  impl_->acceptor.close(ec);
}

namespace {

// Challenge out, the peer's Proof checked; false on any failure (the peer
// is dropped without a word, as one with a wrong clear token is).
bool ChallengePeer(FrameSocket& s, const flatbuffers::Vector<uint8_t>& peer_nonce, const std::string& token,
                   Deadline deadline) {
  auto client = NonceFrom({peer_nonce.data(), peer_nonce.size()}, "the peer's Hello");
  auto server = FreshNonce();
  if (!client.ok() || !server.ok()) return false;
  const Proof mine = ProveToken(token, kSinkdAuthLabel, AuthSide::kServer, *client, *server);
  flatbuffers::FlatBufferBuilder fbb(256);
  auto body = fb::CreateChallenge(fbb, fbb.CreateVector(server->data(), server->size()),
                                  fbb.CreateVector(mine.data(), mine.size()));
  FinishMessage(fbb, fb::MessageBody::Challenge, body.Union());
  if (!s.Send(fbb).ok()) return false;
  InFrame frame;
  if (!s.Receive(&frame, deadline).ok() || frame.type() != fb::MessageBody::Proof || frame.payload_left != 0)
    return false;
  const fb::Proof& proof = *frame.message->body_as_Proof();
  std::span<const uint8_t> got;
  if (proof.proof()) got = {proof.proof()->data(), proof.proof()->size()};
  return ProofMatches(got, ProveToken(token, kSinkdAuthLabel, AuthSide::kClient, *client, *server));
}

// A peer that dialed in plain frames hears why, in plain frames, instead of
// waiting out its rendezvous for an answer.
void RefusePlainPeer(FrameSocket& s) {
  flatbuffers::FlatBufferBuilder fbb(512);
  ErrorContext context;
  BuildError(fbb,
             PermissionDenied("this device's links to its peers use TLS (SINKRT_TLS_CERT, SINKRT_TLS_KEY, "
                              "SINKRT_TLS_CA): give every rank the same TLS files, or SINKRT_TLS_PLAIN_PEERS=1 to "
                              "every rank"),
             context);
  (void)s.Send(fbb);
}

}  // namespace

void ListeningInbox::Loop() {
  for (;;) {
    pollfd fds[2] = {{impl_->acceptor.native_handle(), POLLIN, 0}, {impl_->wake_fd, POLLIN, 0}};
    int r = ::poll(fds, 2, -1);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 || fds[1].revents) return;
    asio::ip::tcp::socket socket(SocketContext());
    asio::error_code ec;
    impl_->acceptor.accept(socket, ec);
    if (ec) continue;
    TuneSocket(socket);
    auto s = std::make_unique<FrameSocket>(std::move(socket), WireLimits{});
    const Deadline deadline = DeadlineIn(hello_timeout_);
    if (tls_) {
      Status secured = s->StartTls(*tls_, deadline);
      if (secured.code() == StatusCode::kFailedPrecondition) RefusePlainPeer(*s);
      if (!secured.ok()) continue;
    }
    InFrame frame;
    if (!s->Receive(&frame, deadline).ok()) continue;
    if (frame.type() != fb::MessageBody::Hello || frame.payload_left != 0) continue;
    const fb::Hello& hello = *frame.message->body_as_Hello();
    if (hello.role() != fb::PeerRole::Device || hello.rank() < 0) continue;
    if (!token_.empty()) {
      // A 1.5 peer proves the token over nonces (runtime/auth.h); a 1.4
      // peer sends it in clear.
      const bool proven = hello.nonce() ? ChallengePeer(*s, *hello.nonce(), token_, deadline)
                                        : hello.token() && hello.token()->str() == token_;
      if (!proven) continue;
    }
    {
      std::lock_guard<std::mutex> lk(mu_);
      ready_.emplace_back(static_cast<uint32_t>(hello.rank()), std::move(s));
    }
    cv_.notify_all();
  }
}

Result<std::pair<uint32_t, std::unique_ptr<FrameSocket>>> ListeningInbox::Accept(Deadline deadline) {
  std::unique_lock<std::mutex> lk(mu_);
  while (ready_.empty()) {
    if (deadline) {
      if (cv_.wait_until(lk, *deadline) == std::cv_status::timeout && ready_.empty())
        return DeadlineExceeded("no peer connected before the deadline");
    } else {
      cv_.wait(lk);
    }
  }
  auto next = std::move(ready_.front());
  ready_.pop_front();
  return next;
}

}  // namespace sinkrt::device
