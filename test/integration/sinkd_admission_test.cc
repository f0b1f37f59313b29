// Admission tests of the daemon: connections that never finish their Hello
// (a flood of silent ones, a slow-loris trickling bytes) must not keep a
// real host out. Pending connections have their own short deadline and
// their own quotas, per source address and in all, and a new one over a
// quota closes the oldest pending connection of the address that holds the
// most: the flood crowds out only itself.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <thread>

#include "device/src/daemon/daemon.h"
#include "sinkrt/host/model.h"
#include "sinkrt/host/remote_device.h"
#include "support/model_fixtures.h"
#include "support/raw_frames.h"
#include "support/sinkd_process.h"
#include "support/slow_loris.h"
#include "support/tcp_recorder.h"
#include "support/test_models.h"

namespace sinkrt {
namespace {

using namespace testing;  // raw frames, SinkdProcess
using namespace std::chrono_literals;

std::string LogPath() {
  auto dir = std::filesystem::temp_directory_path() / ("sinkd_admission_test_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  return (dir / (std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + ".log")).string();
}

// A connection from `source` (any 127.x.y.z is this machine's loopback, so
// one test can play several client machines) that has sent nothing yet.
std::unique_ptr<FrameSocket> DialFrom(const char* source, const Address& to) {
  static asio::io_context io;
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  EXPECT_GE(fd, 0);
  sockaddr_in from{};
  from.sin_family = AF_INET;
  inet_pton(AF_INET, source, &from.sin_addr);
  sockaddr_in dest{};
  dest.sin_family = AF_INET;
  dest.sin_port = htons(to.port);
  inet_pton(AF_INET, to.host.c_str(), &dest.sin_addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof from) != 0 ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&dest), sizeof dest) != 0) {
    ADD_FAILURE() << "cannot connect from " << source << " to " << to.ToString() << ": " << std::strerror(errno);
    ::close(fd);
    return nullptr;
  }
  asio::ip::tcp::socket socket(io);
  socket.assign(asio::ip::tcp::v4(), fd);
  return std::make_unique<FrameSocket>(std::move(socket), WireLimits{});
}

// True when nothing has arrived on `s`, not even its end: the daemon still
// holds it open, waiting for a Hello.
bool StillWaiting(FrameSocket& s) {
  pollfd p{s.native_handle(), POLLIN, 0};
  return ::poll(&p, 1, 0) == 0;
}

// The bytes of a valid host Hello frame (header included).
std::vector<uint8_t> HelloFrameBytes() {
  HelloFields hello;
  hello.role = fb::PeerRole::Host;
  flatbuffers::FlatBufferBuilder fbb;
  BuildHello(fbb, hello);
  std::vector<uint8_t> bytes(kFrameHeaderBytes);
  EncodeFrameHeader({fbb.GetSize(), 0}, bytes.data());
  bytes.insert(bytes.end(), fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
  return bytes;
}

Status TrainSmallMlp(DeviceLink& device) {
  constexpr int64_t kBatch = 8;
  SyntheticData data = MakeSyntheticData(64, 16, 4, 7);
  SINKRT_ASSIGN_OR_RETURN(auto model,
                          host::Model::Create(MlpNetwork(kBatch), host::LossSpec::SparseSoftmaxCrossEntropy(),
                                              host::OptimizerSpec::Momentum(0.05f, 0.9f), device));
  return model->train(2, MakeDataset(data, kBatch), {}, true, -1);
}

// The attack on a real sinkd: 64 connections that send nothing (four
// times the old connection limit) and a slow-loris, all from the host's own
// address and held open for the whole run. The host connects at once and
// trains; the daemon closed the oldest silent ones to make room.
TEST(SinkdAdmissionTest, SilentFloodAndSlowLorisDoNotKeepARealHostOut) {
  SinkdProcess daemon;
  const std::string log = LogPath();
  // A deadline far beyond the run: only the quotas can make room.
  ASSERT_TRUE(daemon.Start(SINKD_PATH, {"--hello-timeout-ms", "600000"}, log).ok());
  std::vector<std::unique_ptr<FrameSocket>> flood;
  for (int i = 0; i < 64; ++i) {
    flood.push_back(DialFrom("127.0.0.1", daemon.address()));
    ASSERT_TRUE(flood.back());
  }
  SlowLoris loris(DialFrom("127.0.0.1", daemon.address()), HelloFrameBytes(), 200ms);

  host::RemoteOptions options;
  options.connect_timeout = 20s;
  options.reply_timeout = 60s;
  auto remote = host::RemoteDevice::Connect(daemon.address(), options);
  ASSERT_TRUE(remote.ok()) << remote.status().ToString();
  Status trained = TrainSmallMlp(**remote);
  EXPECT_TRUE(trained.ok()) << trained.ToString();
  remote->reset();  // the job ends; the device is free again

  // A launcher's probe gets in too, and finds the device idle.
  auto probe = host::ProbeDevice(daemon.address(), 20s);
  ASSERT_TRUE(probe.ok()) << probe.status().ToString();
  EXPECT_FALSE(probe->busy);
  loris.Stop();
  // The newest silent connections still wait for their Hello; the oldest
  // were closed with a reason.
  EXPECT_TRUE(StillWaiting(*flood.back()));
  Status oldest = NextError(*flood.front());
  EXPECT_EQ(oldest.code(), StatusCode::kResourceExhausted) << oldest.ToString();
  EXPECT_NE(oldest.message().find("have not finished their Hello"), std::string::npos) << oldest.message();
  daemon.Stop();
  EXPECT_NE(daemon.ReadLog().find("without a Hello"), std::string::npos) << daemon.ReadLog();
}

// The Hello deadline covers the whole frame: trickling bytes buys no time.
TEST(SinkdAdmissionTest, ASlowLorisIsClosedAtTheHelloDeadlineHoweverOftenItSends) {
  SinkdProcess daemon;
  ASSERT_TRUE(daemon.Start(SINKD_PATH, {"--hello-timeout-ms", "1000"}, LogPath()).ok());
  auto silent = DialFrom("127.0.0.1", daemon.address());
  ASSERT_TRUE(silent);
  SlowLoris loris(DialFrom("127.0.0.1", daemon.address()), HelloFrameBytes(), 50ms);
  for (FrameSocket* s : {silent.get(), &loris.socket()}) {
    // NextError waits up to 20 s for the daemon's frame.
    Status err = NextError(*s);
    EXPECT_EQ(err.code(), StatusCode::kDeadlineExceeded) << err.ToString();
    EXPECT_NE(err.message().find("no Hello within 1000 ms"), std::string::npos) << err.message();
    EXPECT_NE(err.message().find("SINKRT_HELLO_TIMEOUT_MS"), std::string::npos) << err.message();
    EXPECT_TRUE(Closed(*s));
  }
  loris.Stop();
  EXPECT_GT(loris.sent(), 0u);  // it was sending all along
  // The daemon serves the next host as ever.
  auto probe = host::ProbeDevice(daemon.address(), 20s);
  EXPECT_TRUE(probe.ok()) << probe.status().ToString();
}

device::DaemonOptions QuotaOptions(int max_pending, int per_address) {
  device::DaemonOptions o;
  o.log = false;
  o.device.threads = 1;
  o.hello_timeout = 600s;
  o.max_pending = max_pending;
  o.max_pending_per_address = per_address;
  return o;
}

TEST(SinkdAdmissionTest, OverTheAddressQuotaTheOldestPendingOfThatAddressGoes) {
  auto daemon = device::Daemon::Start(QuotaOptions(64, 3));
  ASSERT_TRUE(daemon.ok()) << daemon.status().ToString();
  const Address at = (*daemon)->address();
  auto other = DialFrom("127.0.0.2", at);  // another machine's pending connection, oldest of all
  std::vector<std::unique_ptr<FrameSocket>> flood;
  for (int i = 0; i < 4; ++i) flood.push_back(DialFrom("127.0.0.1", at));
  // The fourth from 127.0.0.1 closed the first from 127.0.0.1, and only it.
  Status err = NextError(*flood[0]);
  EXPECT_EQ(err.code(), StatusCode::kResourceExhausted) << err.ToString();
  EXPECT_NE(err.message().find("3 connections from 127.0.0.1 have not finished their Hello (the limit per address)"),
            std::string::npos)
      << err.message();
  EXPECT_TRUE(Closed(*flood[0]));
  EXPECT_EQ((*daemon)->stats().connections_evicted, 1u);
  EXPECT_TRUE(StillWaiting(*other));
  for (int i = 1; i < 4; ++i) EXPECT_TRUE(StillWaiting(*flood[i])) << i;
}

TEST(SinkdAdmissionTest, OverTheTotalQuotaTheAddressHoldingMostLosesItsOldest) {
  auto daemon = device::Daemon::Start(QuotaOptions(4, 8));
  ASSERT_TRUE(daemon.ok()) << daemon.status().ToString();
  const Address at = (*daemon)->address();
  auto lone = DialFrom("127.0.0.1", at);  // oldest of all, alone on its address
  std::vector<std::unique_ptr<FrameSocket>> crowd;
  for (int i = 0; i < 3; ++i) crowd.push_back(DialFrom("127.0.0.2", at));
  auto late = DialFrom("127.0.0.3", at);  // the fifth pending connection
  Status err = NextError(*crowd[0]);
  EXPECT_EQ(err.code(), StatusCode::kResourceExhausted) << err.ToString();
  EXPECT_NE(err.message().find("4 connections have not finished their Hello (the limit), 3 of them from 127.0.0.2"),
            std::string::npos)
      << err.message();
  // Counted before the Error went out.
  EXPECT_EQ((*daemon)->stats().connections_evicted, 1u);
  EXPECT_TRUE(StillWaiting(*lone));
  EXPECT_TRUE(StillWaiting(*late));
}

// Pending connections never take an admitted connection's slot: with more
// silent connections than max_connections, hosts still get in.
TEST(SinkdAdmissionTest, PendingConnectionsDoNotCountAgainstTheConnectionLimit) {
  device::DaemonOptions o = QuotaOptions(64, 64);
  o.max_connections = 2;
  auto daemon = device::Daemon::Start(o);
  ASSERT_TRUE(daemon.ok()) << daemon.status().ToString();
  std::vector<std::unique_ptr<FrameSocket>> silent;
  for (int i = 0; i < 8; ++i) silent.push_back(DialFrom("127.0.0.1", (*daemon)->address()));
  for (int i = 0; i < 3; ++i) {
    auto probe = host::ProbeDevice((*daemon)->address(), 20s);
    EXPECT_TRUE(probe.ok()) << probe.status().ToString();
  }
  EXPECT_EQ((*daemon)->stats().connections_evicted, 0u);
  EXPECT_EQ((*daemon)->stats().connections_refused, 0u);
}

// The token never travels (wire protocol 1.5): a host's handshake captured
// on the way holds no token, and replayed it meets a new nonce and is
// refused. A 1.4 host, which sends the token in clear, still gets in.
TEST(SinkdAdmissionTest, AReplayedHostHandshakeIsRefused) {
  device::DaemonOptions o = QuotaOptions(64, 8);
  o.token = "s3cret";
  auto daemon = device::Daemon::Start(o);
  ASSERT_TRUE(daemon.ok()) << daemon.status().ToString();
  const Address at = (*daemon)->address();
  std::vector<uint8_t> captured;
  {
    Recorder recorder(at.port);
    host::RemoteOptions ro;
    ro.token = "s3cret";
    ro.connect_timeout = 20s;
    auto remote = host::RemoteDevice::Connect(Address{"127.0.0.1", recorder.port()}, ro);
    ASSERT_TRUE(remote.ok()) << remote.status().ToString();
    remote->reset();
    captured = recorder.Captured();
  }
  EXPECT_FALSE(Holds(captured, "s3cret")) << "the token travelled in clear";
  auto replay = Dial(at);
  ASSERT_TRUE(replay);
  ASSERT_TRUE(SendRaw(*replay, captured.data(), captured.size()).ok());
  Status err = NextError(*replay);  // after the daemon's Challenge
  EXPECT_EQ(err.code(), StatusCode::kPermissionDenied) << err.ToString();
  EXPECT_NE(err.message().find("wrong token"), std::string::npos) << err.message();
  auto old = Dial(at);
  ASSERT_TRUE(old);
  ASSERT_TRUE(SendHello(*old, fb::PeerRole::Probe, "s3cret", kProtocolMajor, 4).ok());
  auto answer = Next(*old);
  ASSERT_TRUE(answer.ok()) << answer.status().ToString();
  EXPECT_EQ(*answer, fb::MessageBody::Hello);
}

}  // namespace
}  // namespace sinkrt
