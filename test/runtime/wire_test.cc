// The wire codec (runtime/wire.h) without sockets: every message type makes
// the round trip build -> frame -> ParseFrame with its fields and payload
// intact, and every refusal of the header, message and payload checks gives
// its own error code and message.
#include <flatbuffers/flatbuffers.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "runtime/src/hello.h"
#include "runtime/src/wire.h"

namespace sinkrt {
namespace {

//===--- Helpers -------------------------------------------------------------===//

std::vector<uint8_t> Pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 7);
  return v;
}

// Header + message + payload, the header stating exactly what follows unless
// told otherwise.
std::vector<uint8_t> Frame(std::span<const uint8_t> message, std::span<const uint8_t> payload,
                           std::optional<uint64_t> stated_payload = std::nullopt) {
  std::vector<uint8_t> out(kFrameHeaderBytes);
  EncodeFrameHeader({static_cast<uint32_t>(message.size()), stated_payload.value_or(payload.size())}, out.data());
  out.insert(out.end(), message.begin(), message.end());
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

std::vector<uint8_t> Finished(flatbuffers::FlatBufferBuilder& fbb) {
  return {fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize()};
}

// A finished message of `type` whose body is an empty table of that type
// (every field at its default): enough for rules that look at the type only.
std::vector<uint8_t> EmptyBody(fb::MessageBody type) {
  flatbuffers::FlatBufferBuilder fbb;
  const flatbuffers::uoffset_t start = fbb.StartTable();
  const flatbuffers::Offset<void> body(fbb.EndTable(start));
  FinishMessage(fbb, type, body);
  return Finished(fbb);
}

void ExpectError(const Status& st, StatusCode code, const std::string& part) {
  ASSERT_FALSE(st.ok()) << "accepted; expected an error containing '" << part << "'";
  EXPECT_EQ(st.code(), code) << st.ToString();
  EXPECT_NE(st.message().find(part), std::string::npos) << "'" << part << "' not in: " << st.message();
}

//===--- Round trip of every message type -------------------------------------===//

struct RoundTripCase {
  fb::MessageBody type;
  std::vector<uint8_t> payload;
  std::function<flatbuffers::Offset<void>(flatbuffers::FlatBufferBuilder&)> build;
  std::function<void(const fb::Message&)> check;
};

// gtest prints a parameter in test listings (and ctest names); name it.
void PrintTo(const RoundTripCase& c, std::ostream* os) { *os << MessageName(c.type); }

std::vector<RoundTripCase> RoundTripCases() {
  using B = flatbuffers::FlatBufferBuilder;
  using M = const fb::Message&;
  std::vector<RoundTripCase> c;
  c.push_back({fb::MessageBody::Hello,
               {},
               [](B& b) {
                 return fb::CreateHelloDirect(b, kProtocolMajor, kProtocolMinor, fb::PeerRole::Device, 3, "tok",
                                              "sinkrt " SINKRT_VERSION_STRING, true, 8, 4242, 0xABCDEFull, "host-a")
                     .Union();
               },
               [](M m) {
                 const fb::Hello* h = m.body_as_Hello();
                 EXPECT_EQ(h->protocol_major(), kProtocolMajor);
                 EXPECT_EQ(h->protocol_minor(), kProtocolMinor);
                 EXPECT_EQ(h->role(), fb::PeerRole::Device);
                 EXPECT_EQ(h->rank(), 3);
                 EXPECT_EQ(h->token()->str(), "tok");
                 EXPECT_EQ(h->software()->str(), "sinkrt " SINKRT_VERSION_STRING);
                 EXPECT_TRUE(h->busy());
                 EXPECT_EQ(h->cores(), 8u);
                 EXPECT_EQ(h->pid(), 4242u);
                 EXPECT_EQ(h->job(), 0xABCDEFull);
                 EXPECT_EQ(h->host_id()->str(), "host-a");
               }});
  c.push_back({fb::MessageBody::LoadProgram, Pattern(100, 1),
               [](B& b) { return fb::CreateLoadProgram(b, 100).Union(); },
               [](M m) { EXPECT_EQ(m.body_as_LoadProgram()->stream_bytes(), 100u); }});
  c.push_back({fb::MessageBody::Loaded,
               {},
               [](B& b) {
                 std::vector<uint32_t> caps{16, 4};
                 return fb::CreateLoadedDirect(b, 1ull << 40, 4096, 2.5, &caps, 0x1234ull).Union();
               },
               [](M m) {
                 const fb::Loaded* l = m.body_as_Loaded();
                 EXPECT_EQ(l->arena_bytes(), 1ull << 40);
                 EXPECT_EQ(l->queue_bytes(), 4096u);
                 EXPECT_EQ(l->load_ms(), 2.5);
                 EXPECT_EQ(std::vector<uint32_t>(l->queue_capacity()->begin(), l->queue_capacity()->end()),
                           (std::vector<uint32_t>{16, 4}));
                 EXPECT_EQ(l->graph_hash(), 0x1234u);
               }});
  c.push_back({fb::MessageBody::PushBatch, Pattern(64, 2), [](B& b) { return fb::CreatePushBatch(b, 2, 77).Union(); },
               [](M m) {
                 EXPECT_EQ(m.body_as_PushBatch()->queue(), 2u);
                 EXPECT_EQ(m.body_as_PushBatch()->sequence(), 77u);
               }});
  c.push_back({fb::MessageBody::Credit,
               {},
               [](B& b) { return fb::CreateCredit(b, 1, 5).Union(); },
               [](M m) {
                 EXPECT_EQ(m.body_as_Credit()->queue(), 1u);
                 EXPECT_EQ(m.body_as_Credit()->slots(), 5u);
               }});
  c.push_back({fb::MessageBody::RunSink,
               {},
               [](B& b) { return fb::CreateRunSink(b, fb::ProgramKind::EvalStep, 10, 3).Union(); },
               [](M m) {
                 EXPECT_EQ(m.body_as_RunSink()->program(), fb::ProgramKind::EvalStep);
                 EXPECT_EQ(m.body_as_RunSink()->steps(), 10u);
                 EXPECT_EQ(m.body_as_RunSink()->epoch(), 3u);
               }});
  c.push_back(
      {fb::MessageBody::SinkDone, Pattern(4 + 40, 3),
       [](B& b) {
         std::vector<flatbuffers::Offset<fb::ReportedBuffer>> reports{fb::CreateReportedBuffer(b, 7, 4),
                                                                      fb::CreateReportedBuffer(b, 9, 40)};
         std::vector<uint32_t> hw{3, 1};
         return fb::CreateSinkDoneDirect(b, 10, &reports, 1.5, 0.5, 0.25, 0.125, &hw, 0.0625, 0, 0.03125).Union();
       },
       [](M m) {
         const fb::SinkDone* d = m.body_as_SinkDone();
         EXPECT_EQ(d->steps_run(), 10u);
         ASSERT_EQ(d->reports()->size(), 2u);
         EXPECT_EQ(d->reports()->Get(0)->buffer(), 7u);
         EXPECT_EQ(d->reports()->Get(0)->bytes(), 4u);
         EXPECT_EQ(d->reports()->Get(1)->buffer(), 9u);
         EXPECT_EQ(d->reports()->Get(1)->bytes(), 40u);
         EXPECT_EQ(d->compute_ms(), 1.5);
         EXPECT_EQ(d->comm_ms(), 0.5);
         EXPECT_EQ(d->queue_wait_ms(), 0.25);
         EXPECT_EQ(d->other_ms(), 0.125);
         EXPECT_EQ(std::vector<uint32_t>(d->queue_high_water()->begin(), d->queue_high_water()->end()),
                   (std::vector<uint32_t>{3, 1}));
         EXPECT_EQ(d->comm_wait_ms(), 0.0625);
         EXPECT_EQ(d->bubble_ms(), 0.03125);
       }});
  c.push_back({fb::MessageBody::ReadTensor,
               {},
               [](B& b) { return fb::CreateReadTensor(b, 12).Union(); },
               [](M m) { EXPECT_EQ(m.body_as_ReadTensor()->buffer(), 12u); }});
  c.push_back({fb::MessageBody::TensorData, Pattern(32, 4), [](B& b) { return fb::CreateTensorData(b, 13).Union(); },
               [](M m) { EXPECT_EQ(m.body_as_TensorData()->buffer(), 13u); }});
  c.push_back({fb::MessageBody::WriteTensor, Pattern(48, 5), [](B& b) { return fb::CreateWriteTensor(b, 14).Union(); },
               [](M m) { EXPECT_EQ(m.body_as_WriteTensor()->buffer(), 14u); }});
  c.push_back({fb::MessageBody::ClearQueue,
               {},
               [](B& b) { return fb::CreateClearQueue(b, 1).Union(); },
               [](M m) { EXPECT_EQ(m.body_as_ClearQueue()->queue(), 1u); }});
  c.push_back({fb::MessageBody::Ack,
               {},
               [](B& b) { return fb::CreateAck(b).Union(); },
               [](M m) { EXPECT_NE(m.body_as_Ack(), nullptr); }});
  c.push_back({fb::MessageBody::Error,
               {},
               [](B& b) {
                 return fb::CreateErrorDirect(b, static_cast<uint8_t>(StatusCode::kOutOfRange), 2, "train", 5,
                                              "MatMul_3", "index 9 out of range")
                     .Union();
               },
               [](M m) {
                 const fb::Error* e = m.body_as_Error();
                 EXPECT_EQ(e->code(), static_cast<uint8_t>(StatusCode::kOutOfRange));
                 EXPECT_EQ(e->rank(), 2);
                 EXPECT_EQ(e->program()->str(), "train");
                 EXPECT_EQ(e->task(), 5);
                 EXPECT_EQ(e->task_name()->str(), "MatMul_3");
                 EXPECT_EQ(e->message()->str(), "index 9 out of range");
               }});
  c.push_back({fb::MessageBody::Shutdown,
               {},
               [](B& b) { return fb::CreateShutdown(b).Union(); },
               [](M m) { EXPECT_NE(m.body_as_Shutdown(), nullptr); }});
  c.push_back({fb::MessageBody::JoinWorld,
               {},
               [](B& b) {
                 std::vector<flatbuffers::Offset<fb::WorldMember>> members{
                     fb::CreateWorldMemberDirect(b, "127.0.0.1:7000", "h0"),
                     fb::CreateWorldMemberDirect(b, "127.0.0.1:7001", "h1")};
                 return fb::CreateJoinWorldDirect(b, 99, 1, &members).Union();
               },
               [](M m) {
                 const fb::JoinWorld* j = m.body_as_JoinWorld();
                 EXPECT_EQ(j->job(), 99u);
                 EXPECT_EQ(j->rank(), 1u);
                 ASSERT_EQ(j->members()->size(), 2u);
                 EXPECT_EQ(j->members()->Get(1)->address()->str(), "127.0.0.1:7001");
                 EXPECT_EQ(j->members()->Get(1)->host_id()->str(), "h1");
               }});
  c.push_back({fb::MessageBody::Joined,
               {},
               [](B& b) {
                 std::vector<std::string> t{"self", "tcp"};
                 auto v = b.CreateVectorOfStrings(t);
                 return fb::CreateJoined(b, 12.5, v).Union();
               },
               [](M m) {
                 const fb::Joined* j = m.body_as_Joined();
                 EXPECT_EQ(j->ms(), 12.5);
                 ASSERT_EQ(j->transports()->size(), 2u);
                 EXPECT_EQ(j->transports()->Get(0)->str(), "self");
                 EXPECT_EQ(j->transports()->Get(1)->str(), "tcp");
               }});
  c.push_back({fb::MessageBody::RankJoin,
               {},
               [](B& b) {
                 std::vector<flatbuffers::Offset<fb::JoinField>> f{fb::CreateJoinFieldDirect(b, "batch", "32")};
                 auto member = fb::CreateWorldMemberDirect(b, "10.77.0.2:4000", "h2");
                 return fb::CreateRankJoin(b, 3, 2, 4, b.CreateString("tok"), member, b.CreateVector(f), 77).Union();
               },
               [](M m) {
                 const fb::RankJoin* j = m.body_as_RankJoin();
                 EXPECT_EQ(j->round(), 3u);
                 EXPECT_EQ(j->rank(), 2u);
                 EXPECT_EQ(j->world_size(), 4u);
                 EXPECT_EQ(j->token()->str(), "tok");
                 EXPECT_EQ(j->member()->address()->str(), "10.77.0.2:4000");
                 EXPECT_EQ(j->member()->host_id()->str(), "h2");
                 ASSERT_EQ(j->fields()->size(), 1u);
                 EXPECT_EQ(j->fields()->Get(0)->name()->str(), "batch");
                 EXPECT_EQ(j->fields()->Get(0)->value()->str(), "32");
                 EXPECT_EQ(j->pid(), 77u);
               }});
  c.push_back({fb::MessageBody::WorldFormed,
               {},
               [](B& b) {
                 std::vector<flatbuffers::Offset<fb::WorldMember>> members{fb::CreateWorldMemberDirect(b, "a:1", "h0"),
                                                                           fb::CreateWorldMemberDirect(b, "b:2", "h1")};
                 return fb::CreateWorldFormed(b, 3, 99, b.CreateVector(members)).Union();
               },
               [](M m) {
                 const fb::WorldFormed* w = m.body_as_WorldFormed();
                 EXPECT_EQ(w->round(), 3u);
                 EXPECT_EQ(w->job(), 99u);
                 ASSERT_EQ(w->members()->size(), 2u);
                 EXPECT_EQ(w->members()->Get(1)->address()->str(), "b:2");
               }});
  c.push_back({fb::MessageBody::Challenge,
               {},
               [](B& b) {
                 const std::vector<uint8_t> nonce(32, 7), proof(32, 9);
                 return fb::CreateChallengeDirect(b, &nonce, &proof, "job-7", 4).Union();
               },
               [](M m) {
                 const fb::Challenge* ch = m.body_as_Challenge();
                 ASSERT_EQ(ch->nonce()->size(), 32u);
                 EXPECT_EQ(ch->nonce()->Get(31), 7);
                 ASSERT_EQ(ch->proof()->size(), 32u);
                 EXPECT_EQ(ch->proof()->Get(0), 9);
                 EXPECT_EQ(ch->job_id()->str(), "job-7");
                 EXPECT_EQ(ch->world_size(), 4u);
               }});
  c.push_back({fb::MessageBody::Proof,
               {},
               [](B& b) {
                 const std::vector<uint8_t> proof(32, 5);
                 return fb::CreateProofDirect(b, &proof).Union();
               },
               [](M m) {
                 const fb::Proof* p = m.body_as_Proof();
                 ASSERT_EQ(p->proof()->size(), 32u);
                 EXPECT_EQ(p->proof()->Get(31), 5);
               }});
  c.push_back({fb::MessageBody::SetProfiling,
               {},
               [](B& b) { return fb::CreateSetProfiling(b, true, 5, 50, 2, 10).Union(); },
               [](M m) {
                 const fb::SetProfiling* p = m.body_as_SetProfiling();
                 EXPECT_TRUE(p->enabled());
                 EXPECT_EQ(p->start_step(), 5u);
                 EXPECT_EQ(p->stop_step(), 50u);
                 EXPECT_EQ(p->every(), 2u);
                 EXPECT_EQ(p->keep_steps(), 10u);
               }});
  c.push_back({fb::MessageBody::ReadClock,
               {},
               [](B& b) { return fb::CreateReadClock(b).Union(); },
               [](M m) { EXPECT_NE(m.body_as_ReadClock(), nullptr); }});
  c.push_back({fb::MessageBody::ClockReading,
               {},
               [](B& b) { return fb::CreateClockReading(b, -123456789).Union(); },
               [](M m) { EXPECT_EQ(m.body_as_ClockReading()->device_ns(), -123456789); }});
  return c;
}

TEST(WireRoundTripCases, CoverEveryMessageType) {
  std::vector<fb::MessageBody> covered;
  for (const RoundTripCase& c : RoundTripCases()) covered.push_back(c.type);
  for (fb::MessageBody type : fb::EnumValuesMessageBody()) {
    if (type == fb::MessageBody::NONE) continue;
    EXPECT_NE(std::find(covered.begin(), covered.end(), type), covered.end())
        << MessageName(type) << " has no round-trip case";
  }
}

class WireRoundTrip : public ::testing::TestWithParam<RoundTripCase> {};

TEST_P(WireRoundTrip, FieldsAndPayloadSurvive) {
  const RoundTripCase& c = GetParam();
  flatbuffers::FlatBufferBuilder fbb;
  FinishMessage(fbb, c.type, c.build(fbb));
  const std::vector<uint8_t> message = Finished(fbb);
  std::vector<uint8_t> bytes = Frame(message, c.payload);
  // A second frame right behind must not disturb the first.
  const std::vector<uint8_t> next = Frame(EmptyBody(fb::MessageBody::Ack), {});
  bytes.insert(bytes.end(), next.begin(), next.end());

  Result<ParsedFrame> f = ParseFrame(bytes, WireLimits{});
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->header.message_bytes, message.size());
  EXPECT_EQ(f->header.payload_bytes, c.payload.size());
  EXPECT_EQ(f->frame_bytes, kFrameHeaderBytes + message.size() + c.payload.size());
  ASSERT_EQ(f->message->body_type(), c.type);
  EXPECT_STREQ(MessageName(c.type), fb::EnumNameMessageBody(c.type));
  c.check(*f->message);
  EXPECT_EQ(std::vector<uint8_t>(f->payload.begin(), f->payload.end()), c.payload);

  Result<ParsedFrame> second = ParseFrame(std::span<const uint8_t>(bytes).subspan(f->frame_bytes), WireLimits{});
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(second->message->body_type(), fb::MessageBody::Ack);
}

INSTANTIATE_TEST_SUITE_P(EveryMessage, WireRoundTrip, ::testing::ValuesIn(RoundTripCases()),
                         [](const ::testing::TestParamInfo<RoundTripCase>& info) {
                           return std::string(MessageName(info.param.type));
                         });

TEST(WireHeader, EncodeDecodeRoundTripAtTheLimits) {
  WireLimits limits;
  limits.max_message_bytes = std::numeric_limits<uint32_t>::max();
  limits.max_payload_bytes = std::numeric_limits<uint64_t>::max();
  for (const FrameHeader h :
       {FrameHeader{1, 0}, FrameHeader{16u << 20, 2ull << 30},
        FrameHeader{std::numeric_limits<uint32_t>::max(), std::numeric_limits<uint64_t>::max()}}) {
    uint8_t bytes[kFrameHeaderBytes];
    EncodeFrameHeader(h, bytes);
    EXPECT_EQ(std::memcmp(bytes, "SKWF", 4), 0);  // the magic reads as text on the wire
    Result<FrameHeader> d = DecodeFrameHeader(bytes, limits);
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    EXPECT_EQ(d->message_bytes, h.message_bytes);
    EXPECT_EQ(d->payload_bytes, h.payload_bytes);
  }
  // Exactly at the default limits is still accepted.
  uint8_t bytes[kFrameHeaderBytes];
  const WireLimits defaults;
  EncodeFrameHeader({defaults.max_message_bytes, defaults.max_payload_bytes}, bytes);
  EXPECT_TRUE(DecodeFrameHeader(bytes, defaults).ok());
}

//===--- Hello: the one builder and reader ------------------------------------===//

// A daemon's answer and a daemon's dial between them set every field.
// The release string of the peer whose bytes are pinned below.
constexpr const char* kPinnedSoftware = "sinkrt 0.1.0";

HelloFields DaemonAnswer() {
  HelloFields h;
  h.role = fb::PeerRole::Device;
  h.rank = 3;
  h.software = kPinnedSoftware;
  h.busy = true;
  h.cores = 8;
  h.pid = 4242;
  h.host_id = "boot/host";
  return h;
}
HelloFields PeerDial() {
  HelloFields h;
  h.role = fb::PeerRole::Device;
  h.rank = 1;
  h.software = kPinnedSoftware;
  h.pid = 4242;
  h.job = 0x5eed;
  h.token = "tok";
  return h;
}

std::vector<uint8_t> BuiltHello(const HelloFields& h) {
  flatbuffers::FlatBufferBuilder fbb;
  BuildHello(fbb, h);
  return Finished(fbb);
}

void ExpectSameHello(const HelloFields& a, const HelloFields& b) {
  EXPECT_EQ(a.protocol_major, b.protocol_major);
  EXPECT_EQ(a.protocol_minor, b.protocol_minor);
  EXPECT_EQ(a.role, b.role);
  EXPECT_EQ(a.rank, b.rank);
  EXPECT_EQ(a.token, b.token);
  EXPECT_EQ(a.software, b.software);
  EXPECT_EQ(a.busy, b.busy);
  EXPECT_EQ(a.cores, b.cores);
  EXPECT_EQ(a.pid, b.pid);
  EXPECT_EQ(a.job, b.job);
  EXPECT_EQ(a.host_id, b.host_id);
}

TEST(WireHello, BuildThenReadKeepsEveryField) {
  HelloFields host;  // the defaults: a host of this build, any rank
  EXPECT_EQ(host.software, kSoftwareName);
  for (const HelloFields& sent : {host, DaemonAnswer(), PeerDial()}) {
    const std::vector<uint8_t> message = BuiltHello(sent);
    auto parsed = ParseFrame(Frame(message, {}), WireLimits{});
    ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
    ASSERT_EQ(parsed->message->body_type(), fb::MessageBody::Hello);
    ExpectSameHello(ReadHello(*parsed->message->body_as_Hello()), sent);
  }
}

// Bytes a protocol 1.5 peer sent (a daemon's answer and the rendezvous'
// dial, as an earlier build laid them out): today's reader must still take
// every field from them. The protocol is the fields and their meaning, not
// FlatBuffers' layout of them, which a builder change may alter freely.
TEST(WireHello, APeersBytesOfProtocol15StillReadFieldByField) {
  // 16 bytes a line, as a hex dump shows them.
  // clang-format off
  const std::vector<uint8_t> answer = {
      0x10, 0x00, 0x00, 0x00, 0x53, 0x4b, 0x57, 0x52, 0x08, 0x00, 0x0e, 0x00, 0x07, 0x00, 0x08, 0x00,
      0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x20, 0x00, 0x00, 0x00, 0x00, 0x00, 0x1a, 0x00,
      0x24, 0x00, 0x22, 0x00, 0x20, 0x00, 0x1f, 0x00, 0x18, 0x00, 0x00, 0x00, 0x14, 0x00, 0x13, 0x00,
      0x0c, 0x00, 0x08, 0x00, 0x00, 0x00, 0x04, 0x00, 0x1a, 0x00, 0x00, 0x00, 0x20, 0x00, 0x00, 0x00,
      0x92, 0x10, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x20, 0x00, 0x00, 0x00,
      0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x05, 0x00, 0x01, 0x00, 0x09, 0x00, 0x00, 0x00,
      0x62, 0x6f, 0x6f, 0x74, 0x2f, 0x68, 0x6f, 0x73, 0x74, 0x00, 0x00, 0x00, 0x0c, 0x00, 0x00, 0x00,
      0x73, 0x69, 0x6e, 0x6b, 0x72, 0x74, 0x20, 0x30, 0x2e, 0x31, 0x2e, 0x30, 0x00, 0x00, 0x00, 0x00};
  const std::vector<uint8_t> dial = {
      0x14, 0x00, 0x00, 0x00, 0x53, 0x4b, 0x57, 0x52, 0x00, 0x00, 0x00, 0x00, 0x08, 0x00, 0x0c, 0x00,
      0x07, 0x00, 0x08, 0x00, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x1c, 0x00, 0x00, 0x00,
      0x18, 0x00, 0x24, 0x00, 0x22, 0x00, 0x20, 0x00, 0x1f, 0x00, 0x18, 0x00, 0x04, 0x00, 0x14, 0x00,
      0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x08, 0x00, 0x18, 0x00, 0x00, 0x00, 0x20, 0x00, 0x00, 0x00,
      0xed, 0x5e, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x92, 0x10, 0x00, 0x00, 0x18, 0x00, 0x00, 0x00,
      0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x05, 0x00, 0x01, 0x00, 0x03, 0x00, 0x00, 0x00,
      0x74, 0x6f, 0x6b, 0x00, 0x0c, 0x00, 0x00, 0x00, 0x73, 0x69, 0x6e, 0x6b, 0x72, 0x74, 0x20, 0x30,
      0x2e, 0x31, 0x2e, 0x30, 0x00, 0x00, 0x00, 0x00};
  // clang-format on
  const std::pair<const std::vector<uint8_t>&, HelloFields> cases[] = {{answer, DaemonAnswer()}, {dial, PeerDial()}};
  for (const auto& [bytes, sent] : cases) {
    auto message = VerifyMessage(bytes);
    ASSERT_TRUE(message.ok()) << message.status().ToString();
    ASSERT_EQ((*message)->body_type(), fb::MessageBody::Hello);
    HelloFields expected = sent;
    expected.protocol_minor = 5;  // what that peer spoke
    ExpectSameHello(ReadHello(*(*message)->body_as_Hello()), expected);
  }
}

//===--- Refusals ------------------------------------------------------------===//

struct RefusalCase {
  std::string name;
  std::function<std::vector<uint8_t>()> frame;
  StatusCode code;
  std::string part;  // a piece of the expected message
  WireLimits limits = {};
};

void PrintTo(const RefusalCase& c, std::ostream* os) { *os << c.name; }

std::vector<uint8_t> ValidLoadProgram(uint64_t stated, size_t payload) {
  flatbuffers::FlatBufferBuilder fbb;
  FinishMessage(fbb, fb::MessageBody::LoadProgram, fb::CreateLoadProgram(fbb, stated).Union());
  return Frame(Finished(fbb), Pattern(payload, 9));
}

std::vector<uint8_t> SinkDoneFrame(std::vector<uint64_t> report_bytes, size_t payload, uint32_t profile_records = 0) {
  flatbuffers::FlatBufferBuilder fbb;
  std::vector<flatbuffers::Offset<fb::ReportedBuffer>> reports;
  for (size_t i = 0; i < report_bytes.size(); ++i)
    reports.push_back(fb::CreateReportedBuffer(fbb, static_cast<uint32_t>(i), report_bytes[i]));
  FinishMessage(fbb, fb::MessageBody::SinkDone,
                fb::CreateSinkDoneDirect(fbb, 1, &reports, 0, 0, 0, 0, nullptr, 0, profile_records).Union());
  return Frame(Finished(fbb), Pattern(payload, 10));
}

// A profiled sink's payload: the reports, then its records (40 bytes each).
TEST(WireSinkDone, ProfileRecordsFollowTheReports) {
  auto f = ParseFrame(SinkDoneFrame({4}, 4 + 3 * 40, 3), WireLimits{});
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->message->body_as_SinkDone()->profile_records(), 3u);
  EXPECT_FALSE(ParseFrame(SinkDoneFrame({4}, 4 + 3 * 40), WireLimits{}).ok());  // records not stated
}

// A 1.2 daemon's SinkDone has no bubble_ms: the host reads 0, not garbage.
TEST(WireSinkDone, BubbleOfAnOlderDaemonReadsZero) {
  auto f = ParseFrame(SinkDoneFrame({4}, 4), WireLimits{});
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->message->body_as_SinkDone()->bubble_ms(), 0.0);
}

std::vector<RefusalCase> RefusalCases() {
  std::vector<RefusalCase> c;
  const std::vector<uint8_t> ack = EmptyBody(fb::MessageBody::Ack);
  c.push_back({"TruncatedHeader",
               [ack] {
                 std::vector<uint8_t> f = Frame(ack, {});
                 f.resize(15);
                 return f;
               },
               StatusCode::kInvalidArgument, "truncated frame header: 15 bytes of 16 bytes"});
  c.push_back({"EmptyInput", [] { return std::vector<uint8_t>(); }, StatusCode::kInvalidArgument,
               "truncated frame header: 0 bytes of 16 bytes"});
  c.push_back({"BadMagic",
               [ack] {
                 std::vector<uint8_t> f = Frame(ack, {});
                 std::memcpy(f.data(), "GET ", 4);  // an HTTP client on the daemon's port
                 return f;
               },
               StatusCode::kInvalidArgument, "not a sinkrt frame: magic 0x20544547, expected \"SKWF\""});
  c.push_back({"EmptyMessage", [] { return Frame({}, {}); }, StatusCode::kInvalidArgument,
               "zero-length frame: a frame must carry a message"});
  {
    WireLimits small;
    small.max_message_bytes = 8;
    c.push_back({"MessageOverTheCap", [ack] { return Frame(ack, {}); }, StatusCode::kResourceExhausted,
                 "frame message of " + std::to_string(ack.size()) + " bytes exceeds the limit of 8 bytes", small});
  }
  {
    WireLimits small;
    small.max_payload_bytes = 99;
    c.push_back({"PayloadOverTheCap", [] { return ValidLoadProgram(100, 100); }, StatusCode::kResourceExhausted,
                 "frame payload of 100 bytes exceeds the limit of 99 bytes (SINKRT_MAX_FRAME_BYTES)", small});
  }
  c.push_back({"TruncatedMessage",
               [ack] {
                 std::vector<uint8_t> f = Frame(ack, {});
                 f.resize(f.size() - 1);
                 return f;
               },
               StatusCode::kInvalidArgument,
               "truncated frame: message of " + std::to_string(ack.size()) + " bytes, only " +
                   std::to_string(ack.size() - 1) + " bytes present"});
  c.push_back({"MessageShorterThanAnIdentifier", [] { return Frame(Pattern(7, 0), {}); }, StatusCode::kInvalidArgument,
               "frame message is not a sinkrt wire message (identifier \"SKWR\" missing)"});
  c.push_back({"WrongIdentifier",
               [ack] {
                 std::vector<uint8_t> m = ack;
                 std::memcpy(m.data() + 4, "SKTS", 4);  // a task stream's identifier
                 return Frame(m, {});
               },
               StatusCode::kInvalidArgument, "identifier \"SKWR\" missing"});
  c.push_back({"VerifierFailure",
               [ack] {
                 std::vector<uint8_t> m = ack;
                 const uint32_t root = 0x7FFFFFF0;  // the root table far beyond the buffer
                 std::memcpy(m.data(), &root, 4);
                 return Frame(m, {});
               },
               StatusCode::kInvalidArgument,
               "frame message failed FlatBuffers verification (" + std::to_string(ack.size()) + " bytes)"});
  c.push_back({"NoBody",
               [] {
                 flatbuffers::FlatBufferBuilder fbb;
                 fb::MessageBuilder mb(fbb);
                 fbb.Finish(mb.Finish(), fb::MessageIdentifier());
                 return Frame(Finished(fbb), {});
               },
               StatusCode::kInvalidArgument, "frame message has no body"});
  c.push_back({"TypeWithoutBody",
               [] {
                 flatbuffers::FlatBufferBuilder fbb;
                 fb::MessageBuilder mb(fbb);
                 mb.add_body_type(fb::MessageBody::Credit);
                 fbb.Finish(mb.Finish(), fb::MessageIdentifier());
                 return Frame(Finished(fbb), {});
               },
               StatusCode::kInvalidArgument, "frame message has no body"});
  c.push_back({"UnknownType", [] { return Frame(EmptyBody(static_cast<fb::MessageBody>(200)), {}); },
               StatusCode::kInvalidArgument, "frame message has unknown type 200"});
  c.push_back({"LoadProgramSizeMismatch", [] { return ValidLoadProgram(100, 99); }, StatusCode::kInvalidArgument,
               "LoadProgram states a stream of 100 bytes but the frame carries 99 bytes"});
  c.push_back({"LoadProgramEmpty", [] { return ValidLoadProgram(0, 0); }, StatusCode::kInvalidArgument,
               "LoadProgram carries an empty task stream"});
  c.push_back({"SinkDoneSizeMismatch",
               [] {
                 return SinkDoneFrame({4, 40}, 43);
               },
               StatusCode::kInvalidArgument, "SinkDone states reports of 44 bytes but the frame carries 43 bytes"});
  c.push_back({"SinkDoneProfileShort", [] { return SinkDoneFrame({4}, 4 + 2 * 40 - 1, 2); },
               StatusCode::kInvalidArgument,
               "SinkDone states reports of 4 bytes and profile records of 80 bytes but the frame carries 83 bytes"});
  c.push_back({"SinkDoneReportsWrapAround",
               [] {
                 return SinkDoneFrame({1ull << 63, 1ull << 63}, 0);
               },
               StatusCode::kInvalidArgument, "SinkDone states reports of more than 2^64 bytes"});
  for (fb::MessageBody type : fb::EnumValuesMessageBody()) {
    switch (type) {
      case fb::MessageBody::NONE:
      case fb::MessageBody::LoadProgram:
      case fb::MessageBody::SinkDone:
      case fb::MessageBody::PushBatch:
      case fb::MessageBody::TensorData:
      case fb::MessageBody::WriteTensor:
        continue;  // these carry payloads (checked above and in the round trip)
      default:
        c.push_back({std::string(MessageName(type)) + "CarriesNoPayload",
                     [type] { return Frame(EmptyBody(type), Pattern(3, 0)); }, StatusCode::kInvalidArgument,
                     std::string(MessageName(type)) + " carries no payload, got 3 bytes"});
    }
  }
  c.push_back({"TruncatedPayload",
               [] {
                 std::vector<uint8_t> f = ValidLoadProgram(100, 100);
                 f.resize(f.size() - 10);
                 return f;
               },
               StatusCode::kInvalidArgument, "truncated frame: payload of 100 bytes, only 90 bytes present"});
  return c;
}

class WireRefusal : public ::testing::TestWithParam<RefusalCase> {};

TEST_P(WireRefusal, ParseFrameNamesTheProblem) {
  const RefusalCase& c = GetParam();
  const std::vector<uint8_t> bytes = c.frame();
  Result<ParsedFrame> f = ParseFrame(bytes, c.limits);
  ExpectError(f.status(), c.code, c.part);
}

INSTANTIATE_TEST_SUITE_P(EveryRule, WireRefusal, ::testing::ValuesIn(RefusalCases()),
                         [](const ::testing::TestParamInfo<RefusalCase>& info) { return info.param.name; });

// The socket path runs the same checks piecewise; the pieces refuse alone.
TEST(WirePieces, VerifyMessageAndPayloadRuleStandAlone) {
  ExpectError(VerifyMessage({}).status(), StatusCode::kInvalidArgument, "identifier \"SKWR\" missing");
  const std::vector<uint8_t> credit = EmptyBody(fb::MessageBody::Credit);
  Result<const fb::Message*> m = VerifyMessage(credit);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_TRUE(CheckPayloadRule(**m, 0).ok());
  ExpectError(CheckPayloadRule(**m, 1), StatusCode::kInvalidArgument, "Credit carries no payload, got 1 bytes");
  // Payloads sized by the loaded job pass the codec at any size.
  for (fb::MessageBody type : {fb::MessageBody::PushBatch, fb::MessageBody::TensorData, fb::MessageBody::WriteTensor}) {
    const std::vector<uint8_t> msg = EmptyBody(type);
    Result<const fb::Message*> v = VerifyMessage(msg);
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    EXPECT_TRUE(CheckPayloadRule(**v, 0).ok()) << MessageName(type);
    EXPECT_TRUE(CheckPayloadRule(**v, 1ull << 40).ok()) << MessageName(type);
  }
  EXPECT_STREQ(MessageName(static_cast<fb::MessageBody>(200)), "Unknown");
}

//===--- Limits from the environment -------------------------------------------===//

// Sets SINKRT_MAX_FRAME_BYTES for one scope and restores what was there.
class ScopedMaxFrameBytes {
 public:
  explicit ScopedMaxFrameBytes(const char* value) {
    if (const char* old = std::getenv(kName)) old_ = old;
    if (value)
      setenv(kName, value, 1);
    else
      unsetenv(kName);
  }
  ~ScopedMaxFrameBytes() {
    if (old_)
      setenv(kName, old_->c_str(), 1);
    else
      unsetenv(kName);
  }

 private:
  static constexpr const char* kName = "SINKRT_MAX_FRAME_BYTES";
  std::optional<std::string> old_;
};

TEST(WireLimitsTest, MaxFrameBytesFromTheEnvironment) {
  const WireLimits defaults;
  {
    ScopedMaxFrameBytes env(nullptr);
    EXPECT_EQ(WireLimits::FromEnvironment().max_payload_bytes, defaults.max_payload_bytes);
  }
  {
    ScopedMaxFrameBytes env("1048576");
    const WireLimits l = WireLimits::FromEnvironment();
    EXPECT_EQ(l.max_payload_bytes, 1048576u);
    EXPECT_EQ(l.max_message_bytes, defaults.max_message_bytes);  // the message cap is not configurable
  }
  // Anything but a positive decimal number leaves the default.
  for (const char* bad : {"", "0", "abc", "12x", "-5", " 7", "+7"}) {
    ScopedMaxFrameBytes env(bad);
    EXPECT_EQ(WireLimits::FromEnvironment().max_payload_bytes, defaults.max_payload_bytes) << "'" << bad << "'";
  }
}

//===--- Error frames <-> Status ------------------------------------------------===//

const fb::Error* ParseError(flatbuffers::FlatBufferBuilder& fbb) {
  Result<const fb::Message*> m = VerifyMessage({fbb.GetBufferPointer(), fbb.GetSize()});
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? (*m)->body_as_Error() : nullptr;
}

TEST(WireErrors, BuildErrorAndStatusFromErrorRoundTrip) {
  flatbuffers::FlatBufferBuilder fbb;
  BuildError(fbb, OutOfRange("train task 5 'MatMul_3': index 9"), {2, "train", 5, "MatMul_3"});
  const fb::Error* e = ParseError(fbb);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->rank(), 2);
  EXPECT_EQ(e->program()->str(), "train");
  EXPECT_EQ(e->task(), 5);
  EXPECT_EQ(e->task_name()->str(), "MatMul_3");
  const Status st = StatusFromError(*e);
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange);
  EXPECT_EQ(st.message(), "rank 2: train task 5 'MatMul_3': index 9");
}

TEST(WireErrors, StatusFromErrorGuardsCodesAndMessages) {
  {
    flatbuffers::FlatBufferBuilder fbb;
    BuildError(fbb, Unavailable("peer went away"), {});
    const Status st = StatusFromError(*ParseError(fbb));
    EXPECT_EQ(st.code(), StatusCode::kUnavailable);
    EXPECT_EQ(st.message(), "device: peer went away");  // no rank known
  }
  // An OK code or one this build does not know becomes kInternal: an Error
  // frame always means failure.
  for (uint8_t code : {uint8_t{0}, uint8_t{200}}) {
    flatbuffers::FlatBufferBuilder fbb;
    FinishMessage(fbb, fb::MessageBody::Error, fb::CreateErrorDirect(fbb, code, 1, "", -1, "", "odd").Union());
    const Status st = StatusFromError(*ParseError(fbb));
    EXPECT_EQ(st.code(), StatusCode::kInternal) << int(code);
    EXPECT_EQ(st.message(), "rank 1: odd");
  }
  {
    flatbuffers::FlatBufferBuilder fbb;
    FinishMessage(fbb, fb::MessageBody::Error,
                  fb::CreateError(fbb, static_cast<uint8_t>(StatusCode::kAborted)).Union());
    const Status st = StatusFromError(*ParseError(fbb));
    EXPECT_EQ(st.code(), StatusCode::kAborted);
    EXPECT_EQ(st.message(), "device: (no message)");
  }
  {
    // A huge message is cut to 64 KiB so the frame stays small.
    flatbuffers::FlatBufferBuilder fbb;
    BuildError(fbb, Internal(std::string(100 * 1024, 'x')), {});
    EXPECT_EQ(ParseError(fbb)->message()->size(), 64u * 1024);
  }
}

}  // namespace
}  // namespace sinkrt
