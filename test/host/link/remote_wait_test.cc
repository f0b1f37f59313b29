// RemoteDevice::Connect while nothing answers: a dead port (refused, retried)
// and a port that accepts but never speaks are reported through
// RemoteOptions::progress while the wait lasts, and the final error names
// the rank, the address and where the address came from. A daemon whose
// Hello arrives in pieces across the progress slices is still understood.
// Everything on 127.0.0.1; the stand-in servers are plain sockets.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "runtime/src/hello.h"
#include "runtime/src/wire.h"
#include "sinkrt/host/remote_device.h"
#include "support/loopback_listener.h"
#include "support/raw_frames.h"
#include "support/text.h"

namespace sinkrt::host {
namespace {

using ::testing::HasSubstr;

using std::chrono::milliseconds;

using Listener = testing::LoopbackListener;

// What a host's sinkrun gets for rank 1 of a rank table: a short limit,
// progress every 50 ms into `lines`.
RemoteOptions Rank1Options(std::vector<std::string>* lines) {
  RemoteOptions o;
  o.rank = 1;
  o.origin = "rank table entry 1";
  o.connect_timeout = milliseconds(1500);
  o.progress_interval = milliseconds(50);
  o.progress = [lines](const std::string& line) { lines->push_back(line); };
  return o;
}

TEST(RemoteWaitTest, DeadPortIsReportedWhileRetriedAndNamedWithItsRank) {
  Listener gone;
  ASSERT_GT(gone.port, 0);
  const Address address = gone.address();
  gone.Close();  // nothing listens there now: connections are refused
  std::vector<std::string> lines;
  auto device = RemoteDevice::Connect(address, Rank1Options(&lines));
  ASSERT_FALSE(device.ok());
  const std::string who = "rank 1 at " + address.ToString() + " (rank table entry 1)";
  EXPECT_EQ(device.status().message(), who + ": no sinkd answered within 1.5 s: connection refused");
  // 1.5 s of 50 ms intervals: at least one line, whatever the scheduling.
  ASSERT_FALSE(lines.empty());
  bool refused = false;
  for (const std::string& line : lines) {
    EXPECT_THAT(line, HasSubstr("waiting for " + who + ": ")) << line;
    EXPECT_THAT(line, HasSubstr(" of 1.5 s (SINKRT_CONNECT_TIMEOUT_MS sets the limit)")) << line;
    refused |= testing::HasText(line, ": connection refused, retrying; ");
  }
  EXPECT_TRUE(refused) << lines.front();
}

TEST(RemoteWaitTest, SilentServerIsReportedAsConnectedWithoutHello) {
  Listener silent;  // the kernel accepts into the backlog; nobody ever speaks
  ASSERT_GT(silent.port, 0);
  std::vector<std::string> lines;
  auto device = RemoteDevice::Connect(silent.address(), Rank1Options(&lines));
  ASSERT_FALSE(device.ok());
  EXPECT_EQ(device.status().code(), StatusCode::kDeadlineExceeded);
  const std::string who = "rank 1 at " + silent.address().ToString() + " (rank table entry 1)";
  EXPECT_THAT(device.status().message(), HasSubstr(who + ": connected, but no Hello within 1.5 s"))
      << device.status().message();
  ASSERT_FALSE(lines.empty());
  EXPECT_THAT(lines.back(), HasSubstr("waiting for " + who + ": connected, no Hello yet; ")) << lines.back();
}

// Reads whatever the peer sent within `timeout` (the host's Hello), or nothing.
void Drain(int fd, milliseconds timeout) {
  pollfd p{fd, POLLIN, 0};
  char buf[4096];
  if (::poll(&p, 1, static_cast<int>(timeout.count())) > 0) (void)!::read(fd, buf, sizeof buf);
}

TEST(RemoteWaitTest, AHelloArrivingInPiecesAcrossProgressSlicesIsReadWhole) {
  Listener server;
  ASSERT_GT(server.port, 0);
  // A Device Hello, rank 0, as one frame.
  HelloFields hello;
  hello.role = fb::PeerRole::Device;
  hello.rank = 0;
  const std::vector<uint8_t> frame = testing::HelloFrameBytes(hello);

  // A slow daemon: silent for several progress intervals, then half a
  // header, silent again, then the rest. The pauses are what is under test
  // (a slice ending mid-frame must not lose the frame's start).
  std::thread daemon([&] {
    const int c = ::accept4(server.fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) return;
    Drain(c, milliseconds(5000));
    std::this_thread::sleep_for(milliseconds(200));
    (void)!::write(c, frame.data(), 5);
    std::this_thread::sleep_for(milliseconds(200));
    (void)!::write(c, frame.data() + 5, frame.size() - 5);
    ::close(c);  // the host's reader then sees the end; Connect has returned by then
  });
  std::vector<std::string> lines;
  RemoteOptions options;
  options.connect_timeout = milliseconds(10000);
  options.progress_interval = milliseconds(20);
  options.progress = [&lines](const std::string& line) { lines.push_back(line); };
  auto device = RemoteDevice::Connect(server.address(), options);
  daemon.join();
  ASSERT_TRUE(device.ok()) << device.status().ToString();
  EXPECT_EQ((*device)->hello().rank, 0);
  ASSERT_FALSE(lines.empty());
  EXPECT_THAT(lines.front(), HasSubstr("connected, no Hello yet")) << lines.front();
}

}  // namespace
}  // namespace sinkrt::host
