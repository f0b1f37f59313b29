// Verified, read-only access to a task stream.
//
// VerifyTaskStream() is the trust boundary: it runs the FlatBuffers Verifier
// and then sinkrt's own semantic checks (every buffer inside the arena, every
// index valid, shapes consistent with sizes, inline data inside the blob
// section, every event wait met by a record, collectives over contiguous
// buffers of one group). Code holding a StreamView may index the stream
// without checks.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "sinkrt/fb/task_stream_generated.h"
#include "sinkrt/runtime/format.h"
#include "sinkrt/runtime/status.h"

namespace sinkrt {

struct StreamView {
  const fb::TaskStream* root = nullptr;
  std::span<const uint8_t> flatbuffer;
  std::span<const uint8_t> blobs;

  const fb::Program* FindProgram(fb::ProgramKind kind) const;
  // Index of the buffer named `name`, or -1.
  int64_t FindBuffer(std::string_view name) const;
};

// `file` must outlive the returned view. `supported_features` are the
// Header.requirements bits the caller can run: a device passes what it
// implements (kSupportedFeatures, the default) and refuses the rest; a tool
// that only reads streams (sinkdump) or a test of streams no device runs yet
// passes every bit it understands, e.g. kFeatureCollectives, and then gets
// the collective tasks checked instead of refused.
Result<StreamView> VerifyTaskStream(std::span<const uint8_t> file,
                                    uint64_t supported_features = kSupportedFeatures);

std::string_view OpCodeName(fb::OpCode op);
std::string_view BufferRoleName(fb::BufferRole role);
std::string_view TaskKindName(fb::TaskBody kind);
std::string_view ProgramKindName(fb::ProgramKind kind);

}  // namespace sinkrt
