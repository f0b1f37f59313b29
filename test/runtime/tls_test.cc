// TLS on FrameSocket (runtime/tls.h): frames through a handshake over
// loopback, both directions at once, and every way a handshake must fail.
#include <gtest/gtest.h>
#include <unistd.h>

#include <asio/ip/tcp.hpp>
#include <filesystem>
#include <thread>

#include "runtime/src/wire.h"
#include "runtime/src/wire_socket.h"
#include "sinkrt/runtime/tls.h"
#include "support/tls_certs.h"

namespace sinkrt {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tls_test_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    files_ = testing::WriteTlsTestFiles(dir_.string());
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::shared_ptr<const TlsContext> Context(const TlsConfig& c, TlsRole role) {
    auto ctx = MakeTlsContext(c, role);
    EXPECT_TRUE(ctx.ok()) << ctx.status().ToString();
    return ctx.ok() ? std::move(ctx).value() : nullptr;
  }
  TlsConfig Server(bool mutual = true) const {
    return {files_.server_cert, files_.server_key, mutual ? files_.ca_cert : ""};
  }
  TlsConfig Client() const { return {files_.client_cert, files_.client_key, files_.ca_cert}; }

  // A connected pair over 127.0.0.1: the dial completes in the listen
  // backlog, so no thread is needed to accept it.
  void Connect() {
    asio::ip::tcp::acceptor acceptor(io_, {asio::ip::make_address("127.0.0.1"), 0});
    auto dialed = FrameSocket::Connect({"127.0.0.1", acceptor.local_endpoint().port()}, 5s);
    ASSERT_TRUE(dialed.ok()) << dialed.status().ToString();
    client_ = std::move(dialed).value();
    asio::ip::tcp::socket s(io_);
    acceptor.accept(s);
    server_ = std::make_unique<FrameSocket>(std::move(s), WireLimits{});
  }

  // Both handshakes at once (each waits for the other); their results.
  std::pair<Status, Status> Handshake(const TlsContext& server_ctx, const TlsContext& client_ctx) {
    Status server_status;
    std::thread t([&] { server_status = server_->StartTls(server_ctx, DeadlineIn(10s)); });
    Status client_status = client_->StartTls(client_ctx, DeadlineIn(10s));
    // A failed side closes, so the other never waits for its deadline.
    if (!client_status.ok()) client_->Shutdown();
    t.join();
    return {server_status, client_status};
  }

  fs::path dir_;
  testing::TlsTestFiles files_;
  asio::io_context io_;
  std::unique_ptr<FrameSocket> server_, client_;
};

Status SendBatch(FrameSocket& s, uint64_t sequence, std::span<const uint8_t> payload) {
  flatbuffers::FlatBufferBuilder fbb;
  FinishMessage(fbb, fb::MessageBody::PushBatch, fb::CreatePushBatch(fbb, 0, sequence).Union());
  std::span<const uint8_t> pieces[] = {payload};
  return s.Send(fbb, pieces);
}

// Receives one PushBatch and checks its sequence and payload.
void ExpectBatch(FrameSocket& s, uint64_t sequence, std::span<const uint8_t> expected) {
  InFrame f;
  ASSERT_TRUE(s.Receive(&f, DeadlineIn(30s)).ok());
  ASSERT_EQ(f.type(), fb::MessageBody::PushBatch);
  EXPECT_EQ(f.message->body_as_PushBatch()->sequence(), sequence);
  std::vector<uint8_t> got(f.payload_left);
  ASSERT_TRUE(s.ReadPayload(&f, got).ok());
  ASSERT_TRUE(std::equal(got.begin(), got.end(), expected.begin(), expected.end())) << "batch " << sequence;
}

std::vector<uint8_t> Pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 131 + seed);
  return v;
}

TEST_F(TlsTest, MutualHandshakeCarriesFramesEncrypted) {
  auto server_ctx = Context(Server(), TlsRole::kServer);
  auto client_ctx = Context(Client(), TlsRole::kClient);
  ASSERT_TRUE(server_ctx && client_ctx);
  ASSERT_NO_FATAL_FAILURE(Connect());
  auto [s, c] = Handshake(*server_ctx, *client_ctx);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_TRUE(c.ok()) << c.ToString();
  EXPECT_TRUE(client_->tls());
  EXPECT_NE(client_->transport().find("TLSv1.3"), std::string::npos) << client_->transport();
  // A small frame (one record) and a large one (many records, partial writes).
  const auto small = Pattern(100, 1), large = Pattern(3 << 20, 2);
  ASSERT_TRUE(SendBatch(*client_, 0, small).ok());
  ASSERT_TRUE(SendBatch(*client_, 1, large).ok());
  ExpectBatch(*server_, 0, small);
  ExpectBatch(*server_, 1, large);
}

// Each side sends while the other sends too, with payloads far beyond the
// socket buffers: a writer waiting for space must never keep the reader
// that makes the space from running.
TEST_F(TlsTest, BothDirectionsAtOnceDoNotDeadlock) {
  auto server_ctx = Context(Server(), TlsRole::kServer);
  auto client_ctx = Context(Client(), TlsRole::kClient);
  ASSERT_TRUE(server_ctx && client_ctx);
  ASSERT_NO_FATAL_FAILURE(Connect());
  auto [s, c] = Handshake(*server_ctx, *client_ctx);
  ASSERT_TRUE(s.ok() && c.ok()) << s.ToString() << " / " << c.ToString();
  constexpr int kFrames = 24;
  const auto up = Pattern(1 << 20, 3), down = Pattern(1 << 20, 4);
  std::thread server_sender([&] {
    for (int i = 0; i < kFrames; ++i) ASSERT_TRUE(SendBatch(*server_, i, down).ok());
  });
  std::thread client_sender([&] {
    for (int i = 0; i < kFrames; ++i) ASSERT_TRUE(SendBatch(*client_, i, up).ok());
  });
  std::thread server_reader([&] {
    for (int i = 0; i < kFrames; ++i) ExpectBatch(*server_, i, up);
  });
  for (int i = 0; i < kFrames; ++i) ExpectBatch(*client_, i, down);
  server_reader.join();
  client_sender.join();
  server_sender.join();
}

TEST_F(TlsTest, ServerWithCaRefusesClientWithoutCertificate) {
  auto server_ctx = Context(Server(), TlsRole::kServer);
  auto client_ctx = Context({"", "", files_.ca_cert}, TlsRole::kClient);
  ASSERT_TRUE(server_ctx && client_ctx);
  ASSERT_NO_FATAL_FAILURE(Connect());
  auto [s, c] = Handshake(*server_ctx, *client_ctx);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("certificate"), std::string::npos) << s.ToString();
}

TEST_F(TlsTest, ServerWithoutCaTakesClientWithoutCertificate) {
  auto server_ctx = Context(Server(/*mutual=*/false), TlsRole::kServer);
  auto client_ctx = Context({"", "", files_.ca_cert}, TlsRole::kClient);
  ASSERT_TRUE(server_ctx && client_ctx);
  ASSERT_NO_FATAL_FAILURE(Connect());
  auto [s, c] = Handshake(*server_ctx, *client_ctx);
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(c.ok()) << c.ToString();
}

TEST_F(TlsTest, ClientSignedByAnotherCaIsRefused) {
  auto server_ctx = Context(Server(), TlsRole::kServer);
  auto client_ctx = Context({files_.rogue_cert, files_.rogue_key, files_.ca_cert}, TlsRole::kClient);
  ASSERT_TRUE(server_ctx && client_ctx);
  ASSERT_NO_FATAL_FAILURE(Connect());
  auto [s, c] = Handshake(*server_ctx, *client_ctx);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("certificate verify failed"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("unable to get local issuer certificate"), std::string::npos) << s.ToString();
}

TEST_F(TlsTest, ClientRefusesServerItsCaDidNotSign) {
  auto server_ctx = Context(Server(/*mutual=*/false), TlsRole::kServer);
  auto client_ctx = Context({"", "", files_.other_ca_cert}, TlsRole::kClient);
  ASSERT_TRUE(server_ctx && client_ctx);
  ASSERT_NO_FATAL_FAILURE(Connect());
  auto [s, c] = Handshake(*server_ctx, *client_ctx);
  EXPECT_FALSE(c.ok());
  EXPECT_NE(c.message().find("certificate verify failed"), std::string::npos) << c.ToString();
  EXPECT_NE(c.message().find("TLS handshake with 127.0.0.1:"), std::string::npos) << c.ToString();
}

TEST_F(TlsTest, ServerAnswersPlainClientInPlainFrames) {
  auto server_ctx = Context(Server(), TlsRole::kServer);
  ASSERT_TRUE(server_ctx);
  ASSERT_NO_FATAL_FAILURE(Connect());
  ASSERT_TRUE(SendBatch(*client_, 0, Pattern(10, 5)).ok());
  Status s = server_->StartTls(*server_ctx, DeadlineIn(10s));
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.message().find("does not speak TLS"), std::string::npos) << s.ToString();
  // Nothing was consumed: the server still reads the plain frame.
  ExpectBatch(*server_, 0, Pattern(10, 5));
}

TEST_F(TlsTest, SilentClientMeetsTheDeadline) {
  auto server_ctx = Context(Server(), TlsRole::kServer);
  ASSERT_TRUE(server_ctx);
  ASSERT_NO_FATAL_FAILURE(Connect());
  Status s = server_->StartTls(*server_ctx, DeadlineIn(50ms));
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.ToString();
}

TEST_F(TlsTest, ContextErrorsNameTheFile) {
  auto missing = MakeTlsContext({dir_.string() + "/nope.pem", files_.server_key, ""}, TlsRole::kServer);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("TLS certificate '" + dir_.string() + "/nope.pem'"), std::string::npos)
      << missing.status().ToString();
  auto mismatch = MakeTlsContext({files_.server_cert, files_.client_key, ""}, TlsRole::kServer);
  ASSERT_FALSE(mismatch.ok());
  EXPECT_NE(mismatch.status().message().find("does not belong to the certificate"), std::string::npos)
      << mismatch.status().ToString();
  auto not_pem = MakeTlsContext({files_.server_key, files_.server_key, ""}, TlsRole::kServer);
  ASSERT_FALSE(not_pem.ok());
  EXPECT_NE(not_pem.status().message().find("TLS certificate '" + files_.server_key + "'"), std::string::npos)
      << not_pem.status().ToString();
  auto dir_as_ca = MakeTlsContext({"", "", dir_.string()}, TlsRole::kClient);
  ASSERT_FALSE(dir_as_ca.ok());
  EXPECT_NE(dir_as_ca.status().message().find("is not a regular file"), std::string::npos);
  auto server_without_cert = MakeTlsContext({"", "", files_.ca_cert}, TlsRole::kServer);
  EXPECT_FALSE(server_without_cert.ok());
  auto client_without_ca = MakeTlsContext({files_.client_cert, files_.client_key, ""}, TlsRole::kClient);
  ASSERT_FALSE(client_without_ca.ok());
  EXPECT_NE(client_without_ca.status().message().find("needs the CA"), std::string::npos);
  auto cert_without_key = MakeTlsContext({files_.client_cert, "", files_.ca_cert}, TlsRole::kClient);
  ASSERT_FALSE(cert_without_key.ok());
  EXPECT_NE(cert_without_key.status().message().find("without its key"), std::string::npos);
}

}  // namespace
}  // namespace sinkrt
