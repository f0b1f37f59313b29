/// \file
/// The wire protocol's frames, independent of any socket (schemas/wire.fbs).
///
/// ~~~
///   [u32 magic "SKWF"][u32 message_bytes][u64 payload_bytes]
///   [message: size-checked, verified FlatBuffer "SKWR"][payload: raw bytes]
/// ~~~
///
/// Both ends check every frame in three steps before using it: the header
/// (magic, non-empty message, both lengths within the limits), the message
/// (the FlatBuffers Verifier plus a present body), then the payload rule of
/// that message type (which types carry a payload and how large). Parsing a
/// whole frame from memory (ParseFrame) is what the fuzzer drives; sockets
/// (wire_socket.h) run the same checks piecewise so a payload can land
/// directly in its final place.
#pragma once

#include <flatbuffers/flatbuffers.h>

#include <chrono>
#include <cstdint>
#include <span>
#include <string>

#include "sinkrt/fb/wire_generated.h"
#include "sinkrt/runtime/status.h"
#include "sinkrt/runtime/wire_limits.h"

namespace sinkrt {

inline constexpr uint32_t kWireMagic = 0x46574B53;  ///< "SKWF" in little-endian byte order
/// The wire protocol's version: a peer of the same major is accepted.
inline constexpr uint16_t kProtocolMajor = 1;
inline constexpr uint16_t kProtocolMinor =
    5;  ///< 1.1: worlds of daemons; 1.2: the profiler; 1.3: bubble_ms; 1.4: the host processes' bootstrap; 1.5: the
        ///< master's token handshake and job ids (schemas/wire.fbs)
/// A frame header's size: magic, message length, payload length.
inline constexpr size_t kFrameHeaderBytes = 16;

/// The two lengths a frame header carries (the magic is implied).
struct FrameHeader {
  uint32_t message_bytes = 0;  ///< the FlatBuffer message's bytes, never 0
  uint64_t payload_bytes = 0;  ///< the raw payload's bytes after it
};

/// Writes `header`, with the magic, into the first kFrameHeaderBytes of `out`.
void EncodeFrameHeader(const FrameHeader& header, uint8_t out[kFrameHeaderBytes]);
/// Checks the magic, a non-zero message length and both limits; errors say
/// which field is wrong and by how much.
Result<FrameHeader> DecodeFrameHeader(std::span<const uint8_t> bytes, const WireLimits& limits);

/// Runs the Verifier over one message and checks its identifier and body.
Result<const fb::Message*> VerifyMessage(std::span<const uint8_t> message);

/// Which message types may carry a payload, and for types whose size the
/// message itself states (LoadProgram, SinkDone), that it matches. Sizes that
/// depend on the loaded job (a batch, a tensor) are checked by the receiver.
Status CheckPayloadRule(const fb::Message& message, uint64_t payload_bytes);

/// The message type's name ("SinkDone"), for errors and logs.
const char* MessageName(fb::MessageBody type);

/// A whole frame checked in memory; points into the bytes given.
struct ParsedFrame {
  FrameHeader header;                    ///< the checked header
  const fb::Message* message = nullptr;  ///< the verified message
  std::span<const uint8_t> payload;      ///< the payload after it
  size_t frame_bytes = 0;                ///< header + message + payload
};
/// Checks one whole frame held in `bytes` (header, message, payload rule); the result points into them.
Result<ParsedFrame> ParseFrame(std::span<const uint8_t> bytes, const WireLimits& limits);

/// Finishes `fbb` with a Message holding `body` of type `type`.
void FinishMessage(flatbuffers::FlatBufferBuilder& fbb, fb::MessageBody type, flatbuffers::Offset<void> body);

/// Error frames <-> Status. The Status message reads
/// "rank R: PROGRAM task T 'NAME': message" with the parts that are known.
struct ErrorContext {
  int rank = -1;          ///< the failing rank; -1: unknown
  std::string program;    ///< the failing program's name
  int task = -1;          ///< the failing task's index; -1: unknown
  std::string task_name;  ///< the failing task's name
};
/// Finishes `fbb` with an Error message carrying `status` and `context`.
void BuildError(flatbuffers::FlatBufferBuilder& fbb, const Status& status, const ErrorContext& context);
/// The Status an Error frame carries.
Status StatusFromError(const fb::Error& error);

}  // namespace sinkrt
