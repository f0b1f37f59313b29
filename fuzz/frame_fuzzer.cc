// libFuzzer target for the wire frame parser (runtime/wire.h).
//
// The input is a byte stream of frames, back to back, as a socket would
// deliver them. Each frame goes through sinkrt::ParseFrame; whatever it
// accepts must keep the parser's promises (lengths add up, the message
// verifies again, its payload rule holds), and every field of the accepted
// message is read, so AddressSanitizer reports any byte the Verifier let
// through that lies outside the frame. Error bodies also go through
// StatusFromError. A broken promise aborts with a message (a finding).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "fuzz_support.h"
#include "runtime/src/stream_names.h"
#include "runtime/src/wire.h"
#include "sinkrt/runtime/profile_record.h"
#include "sinkrt/runtime/task_stream_verifier.h"

namespace {

// Reads every member of a world list (JoinWorld, WorldFormed).
template <typename Touch, typename Members>
void TouchMembers(Touch& t, const Members* members) {
  if (!members) return;
  for (uint32_t i = 0; i < members->size(); ++i) {
    const auto* w = members->Get(i);
    FUZZ_CHECK(w);
    t.Str(w->address());
    t.Str(w->host_id());
  }
}

using namespace sinkrt;

using fuzz::g_sink;
using fuzz::Toucher;

void TouchMessage(const fb::Message& m, uint64_t payload_bytes, Toucher& t) {
  t.Scalar(static_cast<uint8_t>(m.body_type()));
  std::string name = MessageName(m.body_type());
  FUZZ_CHECK(!name.empty());
  switch (m.body_type()) {
    case fb::MessageBody::Hello: {
      const fb::Hello* b = m.body_as_Hello();
      FUZZ_CHECK(b);
      t.Scalar(b->protocol_major());
      t.Scalar(b->protocol_minor());
      t.Scalar(static_cast<uint8_t>(b->role()));
      t.Scalar(std::strlen(fb::EnumNamePeerRole(b->role())));
      t.Scalar(b->rank());
      t.Str(b->token());
      t.Str(b->software());
      t.Scalar(b->busy());
      t.Scalar(b->cores());
      t.Scalar(b->pid());
      t.Scalar(b->job());
      t.Str(b->host_id());
      break;
    }
    case fb::MessageBody::LoadProgram: {
      const fb::LoadProgram* b = m.body_as_LoadProgram();
      FUZZ_CHECK(b);
      FUZZ_CHECK(b->stream_bytes() == payload_bytes && payload_bytes > 0);
      break;
    }
    case fb::MessageBody::Loaded: {
      const fb::Loaded* b = m.body_as_Loaded();
      FUZZ_CHECK(b);
      t.Scalar(b->arena_bytes());
      t.Scalar(b->queue_bytes());
      t.Scalar(b->load_ms());
      if (const auto* q = b->queue_capacity()) {
        for (uint32_t i = 0; i < q->size(); ++i) t.Scalar(q->Get(i));
        for (uint32_t c : *q) t.Scalar(c);
      }
      t.Scalar(b->graph_hash());
      break;
    }
    case fb::MessageBody::PushBatch: {
      const fb::PushBatch* b = m.body_as_PushBatch();
      FUZZ_CHECK(b);
      t.Scalar(b->queue());
      t.Scalar(b->sequence());
      break;
    }
    case fb::MessageBody::Credit: {
      const fb::Credit* b = m.body_as_Credit();
      FUZZ_CHECK(b);
      t.Scalar(b->queue());
      t.Scalar(b->slots());
      break;
    }
    case fb::MessageBody::RunSink: {
      const fb::RunSink* b = m.body_as_RunSink();
      FUZZ_CHECK(b);
      t.Scalar(static_cast<uint8_t>(b->program()));
      t.Scalar(ProgramKindName(b->program()).size());
      t.Scalar(b->steps());
      t.Scalar(b->epoch());
      break;
    }
    case fb::MessageBody::SinkDone: {
      const fb::SinkDone* b = m.body_as_SinkDone();
      FUZZ_CHECK(b);
      t.Scalar(b->steps_run());
      uint64_t total = 0;
      if (const auto* r = b->reports()) {
        for (uint32_t i = 0; i < r->size(); ++i) {
          const fb::ReportedBuffer* rb = r->Get(i);
          FUZZ_CHECK(rb);
          t.Scalar(rb->buffer());
          t.Scalar(rb->bytes());
          total += rb->bytes();
        }
      }
      // The payload rule promises the reports and the profile records add
      // up to the payload.
      FUZZ_CHECK(total + uint64_t{b->profile_records()} * sizeof(ProfileRecord) == payload_bytes);
      t.Scalar(b->compute_ms());
      t.Scalar(b->comm_ms());
      t.Scalar(b->queue_wait_ms());
      t.Scalar(b->other_ms());
      t.Scalar(b->comm_wait_ms());
      t.Scalar(b->bubble_ms());
      break;
    }
    case fb::MessageBody::JoinWorld: {
      const fb::JoinWorld* b = m.body_as_JoinWorld();
      FUZZ_CHECK(b);
      t.Scalar(b->job());
      t.Scalar(b->rank());
      TouchMembers(t, b->members());
      if (const auto* groups = b->groups())
        for (uint32_t i = 0; i < groups->size(); ++i) {
          const fb::WorldGroup* g = groups->Get(i);
          FUZZ_CHECK(g);
          if (const auto* ranks = g->ranks())
            for (uint32_t k = 0; k < ranks->size(); ++k) t.Scalar(ranks->Get(k));
          t.Scalar(g->uses());
        }
      break;
    }
    case fb::MessageBody::Joined: {
      const fb::Joined* b = m.body_as_Joined();
      FUZZ_CHECK(b);
      t.Scalar(b->ms());
      if (const auto* transports = b->transports())
        for (uint32_t i = 0; i < transports->size(); ++i) t.Str(transports->Get(i));
      break;
    }
    case fb::MessageBody::RankJoin: {
      const fb::RankJoin* b = m.body_as_RankJoin();
      FUZZ_CHECK(b);
      t.Scalar(b->round());
      t.Scalar(b->rank());
      t.Scalar(b->world_size());
      t.Str(b->token());
      t.Scalar(b->pid());
      t.Str(b->job_id());
      if (const auto* p = b->proof())
        for (uint32_t i = 0; i < p->size(); ++i) t.Scalar(p->Get(i));
      if (const fb::WorldMember* w = b->member()) {
        t.Str(w->address());
        t.Str(w->host_id());
      }
      if (const auto* fields = b->fields())
        for (uint32_t i = 0; i < fields->size(); ++i) {
          const fb::JoinField* f = fields->Get(i);
          FUZZ_CHECK(f);
          t.Str(f->name());
          t.Str(f->value());
        }
      break;
    }
    case fb::MessageBody::WorldFormed: {
      const fb::WorldFormed* b = m.body_as_WorldFormed();
      FUZZ_CHECK(b);
      t.Scalar(b->round());
      t.Scalar(b->job());
      TouchMembers(t, b->members());
      break;
    }
    case fb::MessageBody::SetProfiling: {
      const fb::SetProfiling* b = m.body_as_SetProfiling();
      FUZZ_CHECK(b);
      t.Scalar(b->enabled());
      t.Scalar(b->start_step());
      t.Scalar(b->stop_step());
      t.Scalar(b->every());
      t.Scalar(b->keep_steps());
      break;
    }
    case fb::MessageBody::ReadClock:
      FUZZ_CHECK(m.body_as_ReadClock());
      break;
    case fb::MessageBody::ClockReading:
      FUZZ_CHECK(m.body_as_ClockReading());
      t.Scalar(m.body_as_ClockReading()->device_ns());
      break;
    case fb::MessageBody::ReadTensor:
      FUZZ_CHECK(m.body_as_ReadTensor());
      t.Scalar(m.body_as_ReadTensor()->buffer());
      break;
    case fb::MessageBody::TensorData:
      FUZZ_CHECK(m.body_as_TensorData());
      t.Scalar(m.body_as_TensorData()->buffer());
      break;
    case fb::MessageBody::WriteTensor:
      FUZZ_CHECK(m.body_as_WriteTensor());
      t.Scalar(m.body_as_WriteTensor()->buffer());
      break;
    case fb::MessageBody::ClearQueue:
      FUZZ_CHECK(m.body_as_ClearQueue());
      t.Scalar(m.body_as_ClearQueue()->queue());
      break;
    case fb::MessageBody::Ack:
      FUZZ_CHECK(m.body_as_Ack());
      break;
    case fb::MessageBody::Shutdown:
      FUZZ_CHECK(m.body_as_Shutdown());
      break;
    case fb::MessageBody::Error: {
      const fb::Error* b = m.body_as_Error();
      FUZZ_CHECK(b);
      t.Scalar(b->code());
      t.Scalar(b->rank());
      t.Str(b->program());
      t.Scalar(b->task());
      t.Str(b->task_name());
      t.Str(b->message());
      Status st = StatusFromError(*b);
      FUZZ_CHECK(!st.ok());  // an Error frame never reads as success
      std::string text = st.ToString();
      t.Scalar(text.size());
      break;
    }
    case fb::MessageBody::Challenge: {
      const fb::Challenge* b = m.body_as_Challenge();
      FUZZ_CHECK(b);
      if (const auto* n = b->nonce())
        for (uint32_t i = 0; i < n->size(); ++i) t.Scalar(n->Get(i));
      if (const auto* p = b->proof())
        for (uint32_t i = 0; i < p->size(); ++i) t.Scalar(p->Get(i));
      t.Str(b->job_id());
      t.Scalar(b->world_size());
      break;
    }
    case fb::MessageBody::Proof: {
      const fb::Proof* b = m.body_as_Proof();
      FUZZ_CHECK(b);
      if (const auto* p = b->proof())
        for (uint32_t i = 0; i < p->size(); ++i) t.Scalar(p->Get(i));
      break;
    }
    case fb::MessageBody::NONE:
    default:
      // VerifyMessage refuses a missing or unknown body.
      FUZZ_CHECK(false && "ParseFrame accepted a message without a known body");
  }
}

// Parses one frame from the start of `bytes` (8-byte aligned); returns the
// frame's size, or 0 when the parser refused it.
size_t OneFrame(std::span<const uint8_t> bytes, const WireLimits& limits) {
  Result<ParsedFrame> parsed = ParseFrame(bytes, limits);
  if (!parsed.ok()) {
    FUZZ_CHECK(!parsed.status().message().empty());
    return 0;
  }
  const ParsedFrame& f = parsed.value();

  // Lengths: header, message and payload add up and lie inside the input.
  FUZZ_CHECK(f.message != nullptr);
  FUZZ_CHECK(f.header.message_bytes > 0 && f.header.message_bytes <= limits.max_message_bytes);
  FUZZ_CHECK(f.header.payload_bytes <= limits.max_payload_bytes);
  FUZZ_CHECK(f.frame_bytes == kFrameHeaderBytes + f.header.message_bytes + f.header.payload_bytes);
  FUZZ_CHECK(f.frame_bytes <= bytes.size());
  FUZZ_CHECK(f.payload.size() == f.header.payload_bytes);
  FUZZ_CHECK(f.payload.data() == bytes.data() + kFrameHeaderBytes + f.header.message_bytes);
  const uint8_t* msg = bytes.data() + kFrameHeaderBytes;
  const auto* mptr = reinterpret_cast<const uint8_t*>(f.message);
  FUZZ_CHECK(mptr >= msg && mptr < msg + f.header.message_bytes);

  // The header decodes alone to the same values.
  Result<FrameHeader> h = DecodeFrameHeader(bytes.first(kFrameHeaderBytes), limits);
  FUZZ_CHECK(h.ok());
  FUZZ_CHECK(h->message_bytes == f.header.message_bytes && h->payload_bytes == f.header.payload_bytes);

  // The message verifies again, alone, and with the stock Verifier options.
  std::span<const uint8_t> message(msg, f.header.message_bytes);
  Result<const fb::Message*> again = VerifyMessage(message);
  FUZZ_CHECK(again.ok() && again.value() == f.message);
  flatbuffers::Verifier stock(message.data(), message.size());
  FUZZ_CHECK(fb::VerifyMessageBuffer(stock));

  FUZZ_CHECK(CheckPayloadRule(*f.message, f.header.payload_bytes).ok());

  Toucher t;
  TouchMessage(*f.message, f.header.payload_bytes, t);
  t.Bytes(f.payload);
  g_sink = t.h;
  return f.frame_bytes;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  WireLimits limits;
  limits.max_message_bytes = 1u << 20;
  limits.max_payload_bytes = 1u << 20;

  // A conversation: up to 8 frames back to back. Each is parsed from its own
  // 8-byte aligned copy, as a socket reader holds it (the Verifier checks
  // alignment, and flatbuffers reads scalars in place), sized exactly to
  // the bytes left so ASan sees any read past them.
  size_t at = 0;
  for (int frame = 0; frame < 8 && at < size; ++frame) {
    // operator new aligns to 16; the copy is exactly the bytes left, so ASan
    // reports any read past them.
    std::vector<uint8_t> copy(data + at, data + size);
    FUZZ_CHECK(reinterpret_cast<uintptr_t>(copy.data()) % 8 == 0);
    size_t used = OneFrame(copy, limits);
    if (used == 0) break;
    at += used;
  }
  return 0;
}
