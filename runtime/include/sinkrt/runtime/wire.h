/// \file
/// The wire protocol's frames, independent of any socket (schemas/wire.fbs).
///
///   [u32 magic "SKWF"][u32 message_bytes][u64 payload_bytes]
///   [message: size-checked, verified FlatBuffer "SKWR"][payload: raw bytes]
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

namespace sinkrt {

inline constexpr uint32_t kWireMagic = 0x46574B53;  ///< "SKWF" in little-endian byte order
inline constexpr uint16_t kProtocolMajor = 1;
inline constexpr uint16_t kProtocolMinor = 4;  ///< 1.1: worlds of daemons; 1.2: the profiler; 1.3: bubble_ms; 1.4: the host processes' bootstrap (schemas/wire.fbs)
inline constexpr size_t kFrameHeaderBytes = 16;

struct WireLimits {
  /// A FlatBuffer message (control data: reports, names) is small.
  uint32_t max_message_bytes = 16u << 20;
  /// Task streams, batches and tensors. Override: SINKRT_MAX_FRAME_BYTES.
  uint64_t max_payload_bytes = 2ull << 30;

  static WireLimits FromEnvironment();
};

struct FrameHeader {
  uint32_t message_bytes = 0;
  uint64_t payload_bytes = 0;
};

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

const char* MessageName(fb::MessageBody type);

/// A whole frame checked in memory; points into the bytes given.
struct ParsedFrame {
  FrameHeader header;
  const fb::Message* message = nullptr;
  std::span<const uint8_t> payload;
  size_t frame_bytes = 0;  ///< header + message + payload
};
Result<ParsedFrame> ParseFrame(std::span<const uint8_t> bytes, const WireLimits& limits);

/// Finishes `fbb` with a Message holding `body` of type `type`.
void FinishMessage(flatbuffers::FlatBufferBuilder& fbb, fb::MessageBody type, flatbuffers::Offset<void> body);

/// Error frames <-> Status. The Status message reads
/// "rank R: PROGRAM task T 'NAME': message" with the parts that are known.
struct ErrorContext {
  int rank = -1;
  std::string program;
  int task = -1;
  std::string task_name;
};
void BuildError(flatbuffers::FlatBufferBuilder& fbb, const Status& status, const ErrorContext& context);
Status StatusFromError(const fb::Error& error);

}  // namespace sinkrt
