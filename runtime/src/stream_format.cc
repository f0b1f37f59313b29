#include "sinkrt/runtime/stream_format.h"

#include <cstring>
#include <string>

namespace sinkrt {

Result<StreamSections> SplitStream(std::span<const uint8_t> file) {
  if (file.size() < 8)
    return InvalidArgument("task stream truncated: " + std::to_string(file.size()) +
                           " bytes, too short for a size prefix and identifier");
  if (file.size() > kMaxStreamBytes)
    return InvalidArgument("task stream of " + std::to_string(file.size()) + " bytes exceeds the limit of " +
                           std::to_string(kMaxStreamBytes));
  uint32_t fb_bytes;
  std::memcpy(&fb_bytes, file.data(), 4);  // FlatBuffers size prefixes are little-endian
  if (uint64_t{fb_bytes} + 4 > file.size())
    return InvalidArgument("task stream truncated: size prefix says " + std::to_string(fb_bytes) +
                           " bytes of FlatBuffer, file has " + std::to_string(file.size() - 4));
  StreamSections s;
  s.flatbuffer = file.subspan(4, fb_bytes);
  uint64_t blob_at = BlobSectionOffset(fb_bytes);
  if (blob_at >= file.size()) {
    if (file.size() != 4 + uint64_t{fb_bytes})
      return InvalidArgument("task stream has " + std::to_string(file.size() - 4 - fb_bytes) +
                             " stray bytes after the FlatBuffer (blob section must start at offset " +
                             std::to_string(blob_at) + ")");
    s.blobs = {};
  } else {
    s.blobs = file.subspan(blob_at);
  }
  return s;
}

}  // namespace sinkrt
