#include "host/src/model/callbacks/checkpoint_integrity.h"

#include <zlib.h>

#include <cstdio>

namespace sinkrt::host {
namespace {

std::string Hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

// file_crc32's four bytes; null when the file has none. (A generated table
// is a flatbuffers::Table, privately: the cast is how one reaches a field's
// address.)
const uint8_t* CrcField(const fb::Checkpoint& ck) {
  return reinterpret_cast<const flatbuffers::Table*>(&ck)->GetAddressOf(fb::Checkpoint::VT_FILE_CRC32);
}

size_t CrcFieldOffset(const uint8_t* base, const fb::Checkpoint& ck) {
  return static_cast<size_t>(CrcField(ck) - base);
}

// CRC-32 of `bytes` with the four bytes at `field` read as zero.
uint32_t FileCrc(std::span<const uint8_t> bytes, size_t field) {
  static constexpr uint8_t kZero[4] = {};
  uLong crc = crc32_z(0, Z_NULL, 0);
  crc = crc32_z(crc, bytes.data(), field);
  crc = crc32_z(crc, kZero, sizeof kZero);
  crc = crc32_z(crc, bytes.data() + field + 4, bytes.size() - field - 4);
  return static_cast<uint32_t>(crc);
}

}  // namespace

uint32_t Crc32(std::span<const uint8_t> bytes) {
  return static_cast<uint32_t>(crc32_z(crc32_z(0, Z_NULL, 0), bytes.data(), bytes.size()));
}

Status SealCheckpoint(std::span<uint8_t> buffer) {
  fb::Checkpoint* ck = fb::GetMutableCheckpoint(buffer.data());
  if (!ck->mutate_file_bytes(buffer.size()) || !ck->mutate_file_crc32(0))
    return Internal("SaveCheckpoint: the checkpoint was built without file_bytes or file_crc32");
  const size_t field = CrcFieldOffset(buffer.data(), *ck);
  ck->mutate_file_crc32(FileCrc(buffer, field));
  return Status::Ok();
}

Status VerifyTensorCrc(const fb::CheckpointTensor& t, const std::string& where) {
  if (!t.crc32().has_value()) return Status::Ok();
  const std::span<const uint8_t> data =
      t.data() ? std::span<const uint8_t>(t.data()->data(), t.data()->size()) : std::span<const uint8_t>();
  const uint32_t computed = Crc32(data);
  if (computed == *t.crc32()) return Status::Ok();
  return InvalidArgument(where + ": tensor '" + (t.name() ? t.name()->str() : std::string("?")) +
                         "' is damaged: its data has CRC-32 " + Hex32(computed) + ", the file recorded " +
                         Hex32(*t.crc32()));
}

Status VerifyCheckpointFile(std::span<const uint8_t> bytes, const fb::Checkpoint& ck, const std::string& where,
                            bool* whole_file_checked) {
  *whole_file_checked = false;
  if (ck.file_bytes() == 0) return Status::Ok();  // before 1.1
  if (ck.file_bytes() != bytes.size())
    return InvalidArgument(where + ": the file holds " + std::to_string(bytes.size()) + " bytes, it was written with " +
                           std::to_string(ck.file_bytes()) + ": it is " +
                           (bytes.size() < ck.file_bytes() ? "truncated" : "longer than written (appended to)"));
  if (CrcField(ck) == nullptr)
    return InvalidArgument(where + ": the file records its size but no file_crc32: it is damaged");
  const size_t field = CrcFieldOffset(bytes.data(), ck);
  const uint32_t computed = FileCrc(bytes, field);
  if (computed == ck.file_crc32()) {
    *whole_file_checked = true;
    return Status::Ok();
  }
  // Name the tensor where the damage is, when it is in one.
  if (ck.tensors())
    for (const fb::CheckpointTensor* t : *ck.tensors()) SINKRT_RETURN_IF_ERROR(VerifyTensorCrc(*t, where));
  return InvalidArgument(where +
                         ": the file is damaged outside the tensors' data (names, shapes or where training "
                         "stood): its CRC-32 is " +
                         Hex32(computed) + ", the file recorded " + Hex32(ck.file_crc32()));
}

}  // namespace sinkrt::host
