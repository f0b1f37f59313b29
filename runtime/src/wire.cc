#include "runtime/src/wire.h"

#include <cstdlib>
#include <cstring>

#include "runtime/src/env.h"
#include "sinkrt/runtime/profile_record.h"

namespace sinkrt {
namespace {

uint32_t LoadU32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return flatbuffers::EndianScalar(v);
}
uint64_t LoadU64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return flatbuffers::EndianScalar(v);
}
void StoreU32(uint8_t* p, uint32_t v) {
  v = flatbuffers::EndianScalar(v);
  std::memcpy(p, &v, 4);
}
void StoreU64(uint8_t* p, uint64_t v) {
  v = flatbuffers::EndianScalar(v);
  std::memcpy(p, &v, 8);
}

std::string Bytes(uint64_t n) { return std::to_string(n) + " bytes"; }

}  // namespace

WireLimits WireLimits::FromEnvironment() {
  WireLimits limits;
  // Digits only (strtoull took "-5" as 2^64 - 5, which lifted the cap); 0
  // is ignored. CheckEnvironment refuses what this skips.
  if (auto n = EnvNonNegativeInteger("SINKRT_MAX_FRAME_BYTES"); n && *n > 0)
    limits.max_payload_bytes = static_cast<uint64_t>(*n);
  return limits;
}

void EncodeFrameHeader(const FrameHeader& header, uint8_t out[kFrameHeaderBytes]) {
  StoreU32(out, kWireMagic);
  StoreU32(out + 4, header.message_bytes);
  StoreU64(out + 8, header.payload_bytes);
}

Result<FrameHeader> DecodeFrameHeader(std::span<const uint8_t> bytes, const WireLimits& limits) {
  if (bytes.size() < kFrameHeaderBytes)
    return InvalidArgument("truncated frame header: " + Bytes(bytes.size()) + " of " + Bytes(kFrameHeaderBytes));
  uint32_t magic = LoadU32(bytes.data());
  if (magic != kWireMagic) {
    char hex[16];
    std::snprintf(hex, sizeof hex, "0x%08x", magic);
    return InvalidArgument(std::string("not a sinkrt frame: magic ") + hex + ", expected \"SKWF\"" +
                           " (is this port a sinkd daemon, and the peer a sinkrt host?)");
  }
  FrameHeader h;
  h.message_bytes = LoadU32(bytes.data() + 4);
  h.payload_bytes = LoadU64(bytes.data() + 8);
  if (h.message_bytes == 0) return InvalidArgument("zero-length frame: a frame must carry a message");
  if (h.message_bytes > limits.max_message_bytes)
    return ResourceExhausted("frame message of " + Bytes(h.message_bytes) + " exceeds the limit of " +
                             Bytes(limits.max_message_bytes));
  if (h.payload_bytes > limits.max_payload_bytes)
    return ResourceExhausted("frame payload of " + Bytes(h.payload_bytes) + " exceeds the limit of " +
                             Bytes(limits.max_payload_bytes) + " (SINKRT_MAX_FRAME_BYTES)");
  return h;
}

Result<const fb::Message*> VerifyMessage(std::span<const uint8_t> message) {
  if (message.size() < 8 || !flatbuffers::BufferHasIdentifier(message.data(), fb::MessageIdentifier()))
    return InvalidArgument(std::string("frame message is not a sinkrt wire message (identifier \"") +
                           fb::MessageIdentifier() + "\" missing)");
  flatbuffers::Verifier::Options opts;
  opts.max_depth = 16;
  opts.max_tables = 100'000;
  opts.check_alignment = true;
  flatbuffers::Verifier verifier(message.data(), message.size(), opts);
  if (!fb::VerifyMessageBuffer(verifier))
    return InvalidArgument("frame message failed FlatBuffers verification (" + Bytes(message.size()) + ")");
  const fb::Message* m = fb::GetMessage(message.data());
  if (m->body_type() == fb::MessageBody::NONE || m->body() == nullptr)
    return InvalidArgument("frame message has no body");
  if (static_cast<uint8_t>(m->body_type()) > static_cast<uint8_t>(fb::MessageBody::MAX))
    // A peer of a newer minor may know message types this build does not:
    // it must look at this side's Hello first, so say which side is older.
    return InvalidArgument("frame message has unknown type " + std::to_string(int(m->body_type())) +
                           " (this build speaks wire protocol " + std::to_string(kProtocolMajor) + "." +
                           std::to_string(kProtocolMinor) + ": the peer is newer, or the frame is corrupt)");
  return m;
}

Status CheckPayloadRule(const fb::Message& message, uint64_t payload_bytes) {
  switch (message.body_type()) {
    case fb::MessageBody::LoadProgram: {
      uint64_t stated = message.body_as_LoadProgram()->stream_bytes();
      if (stated != payload_bytes)
        return InvalidArgument("LoadProgram states a stream of " + Bytes(stated) + " but the frame carries " +
                               Bytes(payload_bytes));
      if (payload_bytes == 0) return InvalidArgument("LoadProgram carries an empty task stream");
      return Status::Ok();
    }
    case fb::MessageBody::SinkDone: {
      uint64_t total = 0;
      if (auto* r = message.body_as_SinkDone()->reports())
        for (const fb::ReportedBuffer* b : *r) {
          // A sum that wraps could otherwise match any payload size.
          if (b->bytes() > UINT64_MAX - total)
            return InvalidArgument("SinkDone states reports of more than 2^64 bytes");
          total += b->bytes();
        }
      const uint64_t profile = uint64_t{message.body_as_SinkDone()->profile_records()} * sizeof(ProfileRecord);
      if (profile > UINT64_MAX - total) return InvalidArgument("SinkDone states more than 2^64 bytes");
      if (total + profile != payload_bytes)
        return InvalidArgument("SinkDone states reports of " + Bytes(total) +
                               (profile ? " and profile records of " + Bytes(profile) : std::string()) +
                               " but the frame carries " + Bytes(payload_bytes));
      return Status::Ok();
    }
    case fb::MessageBody::PushBatch:
    case fb::MessageBody::TensorData:
    case fb::MessageBody::WriteTensor:
      return Status::Ok();  // sized by the loaded job; the receiver checks
    default:
      if (payload_bytes != 0)
        return InvalidArgument(std::string(MessageName(message.body_type())) + " carries no payload, got " +
                               Bytes(payload_bytes));
      return Status::Ok();
  }
}

const char* MessageName(fb::MessageBody type) {
  const char* name = fb::EnumNameMessageBody(type);
  return name && *name ? name : "Unknown";
}

Result<ParsedFrame> ParseFrame(std::span<const uint8_t> bytes, const WireLimits& limits) {
  ParsedFrame f;
  SINKRT_ASSIGN_OR_RETURN(f.header, DecodeFrameHeader(bytes, limits));
  uint64_t have = bytes.size() - kFrameHeaderBytes;
  if (have < f.header.message_bytes)
    return InvalidArgument("truncated frame: message of " + Bytes(f.header.message_bytes) + ", only " + Bytes(have) +
                           " present");
  SINKRT_ASSIGN_OR_RETURN(f.message, VerifyMessage(bytes.subspan(kFrameHeaderBytes, f.header.message_bytes)));
  SINKRT_RETURN_IF_ERROR(CheckPayloadRule(*f.message, f.header.payload_bytes));
  have -= f.header.message_bytes;
  if (have < f.header.payload_bytes)
    return InvalidArgument("truncated frame: payload of " + Bytes(f.header.payload_bytes) + ", only " + Bytes(have) +
                           " present");
  f.payload = bytes.subspan(kFrameHeaderBytes + f.header.message_bytes, f.header.payload_bytes);
  f.frame_bytes = kFrameHeaderBytes + f.header.message_bytes + f.header.payload_bytes;
  return f;
}

void FinishMessage(flatbuffers::FlatBufferBuilder& fbb, fb::MessageBody type, flatbuffers::Offset<void> body) {
  fb::MessageBuilder mb(fbb);
  mb.add_body(body);
  mb.add_body_type(type);
  fbb.Finish(mb.Finish(), fb::MessageIdentifier());
}

void BuildError(flatbuffers::FlatBufferBuilder& fbb, const Status& status, const ErrorContext& context) {
  auto program = fbb.CreateString(context.program);
  auto task_name = fbb.CreateString(context.task_name);
  // Keep the message within any sane limit: it is read by people.
  std::string text = status.message();
  if (text.size() > 64 * 1024) text.resize(64 * 1024);
  auto message = fbb.CreateString(text);
  fb::ErrorBuilder eb(fbb);
  eb.add_code(static_cast<uint8_t>(status.code()));
  eb.add_rank(context.rank);
  eb.add_program(program);
  eb.add_task(context.task);
  eb.add_task_name(task_name);
  eb.add_message(message);
  FinishMessage(fbb, fb::MessageBody::Error, eb.Finish().Union());
}

Status StatusFromError(const fb::Error& error) {
  StatusCode code = static_cast<StatusCode>(error.code());
  if (code == StatusCode::kOk || error.code() > static_cast<uint8_t>(StatusCode::kPermissionDenied))
    code = StatusCode::kInternal;
  std::string message = error.message() ? error.message()->str() : "(no message)";
  // The device's message already names the program and task when it has
  // them (the executor adds that context); only the rank is new here.
  std::string where = error.rank() >= 0 ? "rank " + std::to_string(error.rank()) : "device";
  return Status(code, where + ": " + message);
}

}  // namespace sinkrt
