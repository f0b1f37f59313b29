// Checkpoint integrity (format 1.1): a CRC-32 per tensor, the file's size,
// and a CRC-32 of the whole file, so that a flipped bit or a missing byte is
// refused at load, naming the tensor where it can, instead of training on.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "sinkrt/fb/checkpoint_generated.h"
#include "sinkrt/runtime/status.h"

namespace sinkrt::host {

// zlib's CRC-32 of `bytes` (any length).
uint32_t Crc32(std::span<const uint8_t> bytes);

// Fills file_bytes and file_crc32 of the finished checkpoint in `buffer`,
// which must have been built with both fields present (non-zero).
Status SealCheckpoint(std::span<uint8_t> buffer);

// Checks what the file records about itself: its size, then its CRC-32. On
// a CRC mismatch, names the first tensor whose own crc32 fails, else says the
// damage lies outside the tensors' data. Ok for a file that records neither
// (before 1.1). `where` starts every message ("LoadCheckpoint 'a.ckpt'").
// *whole_file_checked tells whether the file CRC covered the tensors.
Status VerifyCheckpointFile(std::span<const uint8_t> bytes, const fb::Checkpoint& ck, const std::string& where,
                            bool* whole_file_checked);

// The tensor's recorded crc32 against its data; Ok when it records none.
Status VerifyTensorCrc(const fb::CheckpointTensor& t, const std::string& where);

}  // namespace sinkrt::host
