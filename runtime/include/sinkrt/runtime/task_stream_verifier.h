/// \file
/// The trust boundary for task streams: VerifyTaskStream() and the only way to
/// get a VerifiedStream.
///
/// VerifyTaskStream runs the FlatBuffers Verifier and then sinkrt's own
/// semantic checks (every buffer inside the arena, every index valid, shapes
/// consistent with sizes, inline data inside the blob section, every event
/// wait met by a record, collectives over contiguous buffers of one dtype and
/// of a group this rank belongs to). Code holding a VerifiedStream may index
/// the stream without checks, so every function past the point where bytes
/// enter (compile output, a file read, a stream received by a daemon) takes a
/// VerifiedStream, never bytes.
///
/// Ownership: a VerifiedStream owns its bytes, shared and immutable. Copies
/// are cheap (a reference count) and all see the same bytes; the pointers
/// root(), flatbuffer() and blobs() hand out stay valid as long as any copy
/// lives. Safe to read from several threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "sinkrt/runtime/program_kind.h"
#include "sinkrt/runtime/status.h"
#include "sinkrt/runtime/stream_format.h"

/// The stream's tables, as flatc generates them from schemas/task_stream.fbs.
/// Opaque here: the generated headers are internal (never installed), so
/// only sinkrt's own code and tools read a stream's tables.
namespace sinkrt::fb {
struct TaskStream;
struct Program;
}  // namespace sinkrt::fb

namespace sinkrt {

class VerifiedStream;

/// Takes the bytes of a .tstream file. `supported_features` are the
/// Header.requirements bits the caller can run: a device passes what it
/// implements (kSupportedFeatures, the default) and refuses the rest; a tool
/// that only reads streams (sinkdump) or a test of streams no device runs yet
/// passes every bit it understands, e.g. kFeatureCollectives, and then gets
/// the collective tasks checked instead of refused.
Result<VerifiedStream> VerifyTaskStream(std::vector<uint8_t> file, uint64_t supported_features = kSupportedFeatures);

/// A task stream that VerifyTaskStream checked: the only form the rest of sinkrt reads.
class VerifiedStream {
 public:
  /// The stream's root table, for sinkrt's own code and tools (which
  /// include the internal generated header that defines it).
  const fb::TaskStream* root() const { return root_; }
  /// The whole .tstream file, as given to VerifyTaskStream.
  const std::vector<uint8_t>& bytes() const { return *file_; }
  std::span<const uint8_t> flatbuffer() const { return flatbuffer_; }  ///< the FlatBuffer, without the size prefix
  std::span<const uint8_t> blobs() const { return blobs_; }            ///< the blob section

  /// The program of that kind, or null.
  const fb::Program* FindProgram(ProgramKind kind) const;
  /// Index of the buffer named `name`, or -1.
  int64_t FindBuffer(std::string_view name) const;

 private:
  friend Result<VerifiedStream> VerifyTaskStream(std::vector<uint8_t>, uint64_t);
  VerifiedStream() = default;

  std::shared_ptr<const std::vector<uint8_t>> file_;
  const fb::TaskStream* root_ = nullptr;
  std::span<const uint8_t> flatbuffer_;
  std::span<const uint8_t> blobs_;
};

}  // namespace sinkrt
