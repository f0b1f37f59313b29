// The rendezvous master (init()'s rank 0) against strangers, as sinkd's
// admission is tested: a flood of silent connections and a slow-loris
// while a real world forms, a captured join replayed, a rank of another
// job, two jobs on one port, and a master port held by a sinkd. Ranks are
// threads of this process, each with its own ProcessGroup and connections.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <asio/ip/tcp.hpp>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include "device/src/daemon/daemon.h"
#include "runtime/src/auth.h"
#include "sinkrt/host/communication.h"
#include "support/raw_frames.h"
#include "support/slow_loris.h"
#include "support/tcp_recorder.h"

namespace sinkrt::host {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

using namespace sinkrt::testing;  // raw frames
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

uint16_t FreePort() {
  auto port = FreeLoopbackPort();
  return port.ok() ? *port : 0;
}

ProcessGroup::Options RankOptions(uint32_t rank, uint32_t size, uint16_t port, const std::string& job = "job-a") {
  ProcessGroup::Options o;
  o.rank = rank;
  o.world_size = size;
  o.master = Address{"127.0.0.1", port};
  o.timeout = 20s;
  o.job_id = job;
  return o;
}

// A connection that has sent nothing yet. The first one retries while the
// master is not listening yet (FrameSocket::Connect); the master is then up.
std::unique_ptr<FrameSocket> Silent(uint16_t port) { return Dial(Address{"127.0.0.1", port}); }

// A rank's Hello, for the slow-loris to trickle.
std::vector<uint8_t> RankHelloBytes() {
  HelloFields hello;
  hello.role = fb::PeerRole::Rank;
  hello.nonce.assign(kNonceBytes, 1);
  return HelloFrameBytes(hello);
}

// Ranks 1..n-1 join at once; returns how long the slowest took, failing the
// test for any rank that did not join.
std::chrono::milliseconds JoinOthers(uint32_t n, uint16_t port) {
  const auto start = Clock::now();
  std::vector<std::thread> threads;
  std::vector<Status> got(n);
  for (uint32_t r = 1; r < n; ++r)
    threads.emplace_back([&, r] { got[r] = ProcessGroup::Join(RankOptions(r, n, port)).status(); });
  for (auto& t : threads) t.join();
  for (uint32_t r = 1; r < n; ++r) EXPECT_TRUE(got[r].ok()) << "rank " << r << ": " << got[r].message();
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
}

class MasterFloodTest : public ::testing::TestWithParam<uint32_t> {};

// The attack: 64 silent connections (eight times the per-address
// quota) and a slow-loris, all from the ranks' own address and held open,
// while a world of 2 (4) forms. The master's deadline for them is far
// beyond the run, so only concurrency and the quotas let the ranks in; the
// old master, serving one connection at a time, spent 10 s on each.
TEST_P(MasterFloodTest, SilentFloodAndSlowLorisDoNotDelayTheWorld) {
  const uint32_t n = GetParam();
  const uint16_t port = FreePort();
  Status master;
  std::thread zero([&] {
    ProcessGroup::Options o = RankOptions(0, n, port);
    o.hello_timeout = 600s;
    master = ProcessGroup::Join(o).status();
  });
  std::vector<std::unique_ptr<FrameSocket>> flood;
  for (int i = 0; i < 64; ++i) {
    flood.push_back(Silent(port));
    ASSERT_TRUE(flood.back());
  }
  SlowLoris loris(Silent(port), RankHelloBytes(), 20ms);
  const auto took = JoinOthers(n, port);
  zero.join();
  EXPECT_TRUE(master.ok()) << master.message();
  // Bounded whatever the number of silent sockets: they are never waited on.
  EXPECT_LT(took, 5s) << "the world of " << n << " formed in " << took.count() << " ms";
  loris.Stop();
  // The oldest silent connections were closed with a reason to make room.
  Status oldest = NextError(*flood.front());
  EXPECT_EQ(oldest.code(), StatusCode::kResourceExhausted) << oldest.ToString();
  EXPECT_THAT(oldest.message(),
              HasSubstr("connections from 127.0.0.1 have not finished their Hello (the limit per address)"))
      << oldest.message();
}

INSTANTIATE_TEST_SUITE_P(Ranks, MasterFloodTest, ::testing::Values(2u, 4u));

// The deadline covers the whole handshake: trickling bytes buys no time,
// and the world still forms after.
TEST(MasterAdmissionTest, ASlowLorisIsClosedAtTheHelloDeadline) {
  const uint16_t port = FreePort();
  Status master;
  std::thread zero([&] {
    ProcessGroup::Options o = RankOptions(0, 2, port);
    o.hello_timeout = 1000ms;
    master = ProcessGroup::Join(o).status();
  });
  SlowLoris loris(Silent(port), RankHelloBytes(), 50ms);
  Status err = NextError(loris.socket());
  EXPECT_EQ(err.code(), StatusCode::kDeadlineExceeded) << err.ToString();
  EXPECT_THAT(err.message(), HasSubstr("no Hello and RankJoin within 1000 ms of connecting (SINKRT_HELLO_TIMEOUT_MS)"))
      << err.message();
  loris.Stop();
  EXPECT_GT(loris.sent(), 0u);
  JoinOthers(2, port);
  zero.join();
  EXPECT_TRUE(master.ok()) << master.message();
}

// A genuine rank 1's bytes (Hello and RankJoin with its proof) from a world
// of `size` with token "secret" and job "job-a".
std::vector<uint8_t> CaptureAJoin(uint32_t size) {
  const uint16_t port = FreePort();
  Recorder recorder(port);
  std::vector<Status> got(size);
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < size; ++r)
    threads.emplace_back([&, r] {
      ProcessGroup::Options o = RankOptions(r, size, r == 1 ? recorder.port() : port);
      o.token = "secret";
      got[r] = ProcessGroup::Join(o).status();  // the group closes as the thread ends
    });
  for (auto& t : threads) t.join();
  for (uint32_t r = 0; r < size; ++r) EXPECT_TRUE(got[r].ok()) << got[r].message();
  std::vector<uint8_t> captured = recorder.Captured();
  EXPECT_FALSE(Holds(captured, "secret")) << "the token travelled in clear";
  return captured;
}

// Replays `captured` at a master of a world of `size` (same token, same
// job) before its real rank 1 comes: the replay is refused alone, and the
// world then forms with the real rank 1.
void ExpectReplayRefused(const std::vector<uint8_t>& captured, uint32_t size) {
  ASSERT_FALSE(captured.empty());
  const uint16_t port = FreePort();
  Status master;
  std::thread zero([&] {
    ProcessGroup::Options o = RankOptions(0, size, port);
    o.token = "secret";
    master = ProcessGroup::Join(o).status();
  });
  auto replay = Silent(port);
  ASSERT_TRUE(replay);
  ASSERT_TRUE(SendRaw(*replay, captured.data(), captured.size()).ok());
  Status err = NextError(*replay);  // the Challenge comes first and is skipped
  EXPECT_EQ(err.code(), StatusCode::kPermissionDenied) << err.ToString();
  EXPECT_THAT(err.message(), HasSubstr("wrong token")) << err.message();
  EXPECT_TRUE(Closed(*replay));
  std::vector<std::thread> threads;
  std::vector<Status> got(size);
  for (uint32_t r = 1; r < size; ++r)
    threads.emplace_back([&, r] {
      ProcessGroup::Options o = RankOptions(r, size, port);
      o.token = "secret";
      got[r] = ProcessGroup::Join(o).status();
    });
  for (auto& t : threads) t.join();
  zero.join();
  EXPECT_TRUE(master.ok()) << master.message();
  for (uint32_t r = 1; r < size; ++r) EXPECT_TRUE(got[r].ok()) << got[r].message();
}

// The old master took a replayed rank-1 join as rank 1 (the real one was
// then "a second process"): the proof is bound to the nonces of one
// connection, so the replay fails.
TEST(MasterAdmissionTest, AReplayedJoinIsRefusedAndTheRealRankJoins) { ExpectReplayRefused(CaptureAJoin(3), 3); }

// The old master ended the world on a replayed join that claimed another
// world size; now it never gets past the proof.
TEST(MasterAdmissionTest, AReplayedJoinOfAnotherWorldSizeDoesNotEndTheWorld) {
  ExpectReplayRefused(CaptureAJoin(3), 2);
}

// A rank's Hello with a fresh nonce, and the master's Challenge back.
Result<const fb::Challenge*> Greet(FrameSocket& s, InFrame* frame) {
  HelloFields hello;
  hello.role = fb::PeerRole::Rank;
  auto nonce = FreshNonce();
  SINKRT_RETURN_IF_ERROR(nonce.status());
  hello.nonce.assign(nonce->begin(), nonce->end());
  flatbuffers::FlatBufferBuilder fbb;
  BuildHello(fbb, hello);
  SINKRT_RETURN_IF_ERROR(s.Send(fbb));
  SINKRT_RETURN_IF_ERROR(s.Receive(frame, DeadlineIn(20s)));
  if (frame->type() != fb::MessageBody::Challenge)
    return Internal(std::string("got ") + MessageName(frame->type()) + ", not Challenge");
  return frame->message->body_as_Challenge();
}

TEST(MasterAdmissionTest, ARankOfAnotherJobIsRefusedNamingBothJobs) {
  const uint16_t port = FreePort();
  Status master;
  std::thread zero([&] { master = ProcessGroup::Join(RankOptions(0, 2, port, "job-a")).status(); });
  // The master's side of it, as a raw rank of job-b sees it.
  auto raw = Silent(port);
  ASSERT_TRUE(raw);
  InFrame frame;
  auto challenge = Greet(*raw, &frame);
  ASSERT_TRUE(challenge.ok()) << challenge.status().ToString();
  EXPECT_EQ((*challenge)->job_id()->str(), "job-a");
  ASSERT_TRUE(SendMessage(*raw, fb::MessageBody::RankJoin, [](flatbuffers::FlatBufferBuilder& b) {
                auto member = fb::CreateWorldMemberDirect(b, "", "");
                return fb::CreateRankJoin(b, 0, 1, 2, 0, member, 0, 4242, 0, b.CreateString("job-b")).Union();
              }).ok());
  Status err = NextError(*raw);
  EXPECT_EQ(err.code(), StatusCode::kFailedPrecondition) << err.ToString();
  EXPECT_THAT(err.message(), HasSubstr("the master of job job-a at 127.0.0.1:" + std::to_string(port) +
                                       " refused rank 1 (pid 4242) of job job-b"))
      << err.message();
  EXPECT_THAT(err.message(), HasSubstr("two jobs use one master port")) << err.message();
  // A real rank of job-b is told the same, from its side.
  Status other = ProcessGroup::Join(RankOptions(1, 2, port, "job-b")).status();
  EXPECT_EQ(other.code(), StatusCode::kFailedPrecondition) << other.ToString();
  EXPECT_THAT(other.message(),
              HasSubstr("init(): rank 1 of job job-b reached the master at 127.0.0.1:" + std::to_string(port) +
                        ", which serves job job-a: two jobs use one master port"))
      << other.message();
  // Neither ended job-a's world.
  JoinOthers(2, port);
  zero.join();
  EXPECT_TRUE(master.ok()) << master.message();
}

// Ranks missing at the deadline are named, with who was refused meanwhile:
// often the reason (another job's rank on this port, another token).
TEST(MasterAdmissionTest, TheDeadlineNamesWhoWasRefusedMeanwhile) {
  const uint16_t port = FreePort();
  Status master;
  std::thread zero([&] {
    ProcessGroup::Options o = RankOptions(0, 2, port, "job-a");
    o.timeout = 1500ms;
    master = ProcessGroup::Join(o).status();
  });
  Status other = ProcessGroup::Join(RankOptions(1, 2, port, "job-b")).status();
  zero.join();
  EXPECT_THAT(other.message(), HasSubstr("two jobs use one master port")) << other.message();
  EXPECT_EQ(master.code(), StatusCode::kDeadlineExceeded) << master.ToString();
  EXPECT_THAT(master.message(),
              HasSubstr("init(): rank(s) 1 did not join the master at 127.0.0.1:" + std::to_string(port)))
      << master.message();
  EXPECT_THAT(master.message(), HasSubstr("; meanwhile it refused rank 1 (pid " + std::to_string(::getpid()) +
                                          ") of job job-b from 127.0.0.1:"))
      << master.message();
}

// Two jobs given one port (two `sinkrun launch --master-port P`): job-b's
// rank 0 cannot listen, and its rank 1, which reached job-a's master, is
// refused naming the clash; job-a forms regardless.
TEST(MasterAdmissionTest, TwoJobsOnOnePortAreToldSo) {
  const uint16_t port = FreePort();
  Status a0;
  std::thread zero([&] { a0 = ProcessGroup::Join(RankOptions(0, 2, port, "job-a")).status(); });
  Status b1 = ProcessGroup::Join(RankOptions(1, 2, port, "job-b")).status();  // job-a's master answers it
  Status b0 = ProcessGroup::Join(RankOptions(0, 2, port, "job-b")).status();
  EXPECT_THAT(b1.message(), HasSubstr("two jobs use one master port")) << b1.message();
  EXPECT_THAT(b1.message(), HasSubstr("--master-port")) << b1.message();
  EXPECT_EQ(b0.code(), StatusCode::kUnavailable) << b0.ToString();
  EXPECT_THAT(b0.message(), HasSubstr("rank 0 cannot listen at the master address 127.0.0.1:" + std::to_string(port)))
      << b0.message();
  EXPECT_THAT(b0.message(), HasSubstr("another job's master")) << b0.message();
  JoinOthers(2, port);
  zero.join();
  EXPECT_TRUE(a0.ok()) << a0.message();
}

// The "first frame must be Hello, got RankJoin": a rank whose master
// port is a sinkd's hears where it is.
TEST(MasterAdmissionTest, AMasterPortHeldByASinkdIsNamed) {
  device::DaemonOptions o;
  o.log = false;
  o.device.threads = 1;
  auto daemon = device::Daemon::Start(o);
  ASSERT_TRUE(daemon.ok()) << daemon.status().ToString();
  const Address at = (*daemon)->address();
  Status st = ProcessGroup::Join(RankOptions(1, 2, at.port)).status();
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  EXPECT_THAT(st.message(), HasSubstr("init(): rank 1: " + at.ToString() + " is not a sinkrt rendezvous master"))
      << st.message();
  EXPECT_THAT(st.message(), HasSubstr("sinkd rank 0's device port")) << st.message();
  EXPECT_THAT(st.message(), Not(HasSubstr("first frame must be Hello"))) << st.message();
}

// And the other way round: a host that dials the master's port as a sinkd's.
TEST(MasterAdmissionTest, AHostDialingTheMasterIsToldItIsNoSinkd) {
  const uint16_t port = FreePort();
  Status master;
  std::thread zero([&] { master = ProcessGroup::Join(RankOptions(0, 2, port)).status(); });
  auto host = Silent(port);
  ASSERT_TRUE(host);
  ASSERT_TRUE(SendHello(*host, fb::PeerRole::Host).ok());
  Status err = NextError(*host);
  EXPECT_THAT(err.message(), HasSubstr("127.0.0.1:" + std::to_string(port) + " is a sinkrt rendezvous master"))
      << err.message();
  EXPECT_THAT(err.message(), HasSubstr("not a sinkd")) << err.message();
  JoinOthers(2, port);
  zero.join();
  EXPECT_TRUE(master.ok()) << master.message();
}

// A 1.4 rank (a RankJoin with the token in clear, no Hello) is refused by
// name, without ending the world.
TEST(MasterAdmissionTest, AProtocol14RankIsRefusedByName) {
  const uint16_t port = FreePort();
  Status master;
  std::thread zero([&] { master = ProcessGroup::Join(RankOptions(0, 2, port)).status(); });
  auto old = Silent(port);
  ASSERT_TRUE(old);
  ASSERT_TRUE(SendMessage(*old, fb::MessageBody::RankJoin, [](flatbuffers::FlatBufferBuilder& b) {
                auto member = fb::CreateWorldMemberDirect(b, "", "");
                return fb::CreateRankJoin(b, 0, 1, 3, b.CreateString(""), member, 0, 1).Union();
              }).ok());
  Status err = NextError(*old);
  EXPECT_EQ(err.code(), StatusCode::kUnimplemented) << err.ToString();
  EXPECT_THAT(err.message(), HasSubstr("sent a protocol 1.4 RankJoin")) << err.message();
  JoinOthers(2, port);
  zero.join();
  EXPECT_TRUE(master.ok()) << master.message();
}

TEST(MasterAdmissionTest, AHelloOfAnotherMajorIsRefusedNamingBoth) {
  const uint16_t port = FreePort();
  Status master;
  std::thread zero([&] { master = ProcessGroup::Join(RankOptions(0, 2, port)).status(); });
  auto newer = Silent(port);
  ASSERT_TRUE(newer);
  ASSERT_TRUE(SendHello(*newer, fb::PeerRole::Rank, "", kProtocolMajor + 1, 0).ok());
  Status err = NextError(*newer);
  EXPECT_EQ(err.code(), StatusCode::kUnimplemented) << err.ToString();
  EXPECT_THAT(err.message(),
              HasSubstr("protocol version " + std::to_string(kProtocolMajor + 1) +
                        ".0 is not supported: this rendezvous master (sinkrt " SINKRT_VERSION_STRING ") speaks " +
                        std::to_string(kProtocolMajor) + "." + std::to_string(kProtocolMinor)))
      << err.message();
  JoinOthers(2, port);
  zero.join();
  EXPECT_TRUE(master.ok()) << master.message();
}

TEST(MasterAdmissionTest, ABadJobIdIsNamed) {
  ProcessGroup::Options o = RankOptions(0, 2, 8118, "job a");
  Status st = ProcessGroup::Join(o).status();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("'job a' is not a job id")) << st.message();
}

}  // namespace
}  // namespace sinkrt::host
