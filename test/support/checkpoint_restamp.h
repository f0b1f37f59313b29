// A checkpoint rebuilt under another format version, as compatibility tests
// need it: every field of format 1.0 copied, the 1.1 fields (checksums,
// file size, structure hash) left out as a 1.0 writer leaves them. (A
// version cannot be changed in place: minor 0 is the schema default and is
// not stored.)
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sinkrt/fb/checkpoint_generated.h"

namespace sinkrt::testing {

// `bytes` as format major.minor, with `producer` (default: the file's own).
inline std::vector<uint8_t> RestampCheckpoint(const std::vector<uint8_t>& bytes, uint16_t major, uint16_t minor,
                                              std::optional<std::string> producer = std::nullopt) {
  const fb::Checkpoint* ck = fb::GetCheckpoint(bytes.data());
  flatbuffers::FlatBufferBuilder fbb;
  std::vector<flatbuffers::Offset<fb::CheckpointTensor>> tensors;
  for (const fb::CheckpointTensor* t : *ck->tensors())
    tensors.push_back(fb::CreateCheckpointTensor(
        fbb, fbb.CreateString(t->name()->str()), t->dtype(),
        fbb.CreateVector(std::vector<int64_t>(t->shape()->begin(), t->shape()->end())), t->role(),
        fbb.CreateVector(std::vector<uint8_t>(t->data()->begin(), t->data()->end()))));
  auto tv = fbb.CreateVector(tensors);
  fbb.Finish(fb::CreateCheckpoint(fbb, major, minor, fbb.CreateString(producer.value_or(ck->producer()->str())),
                                  fbb.CreateString(ck->network()->str()), ck->graph_hash(), ck->epoch(), ck->step(),
                                  ck->batch_num(), ck->global_batch(), tv),
             fb::CheckpointIdentifier());
  return std::vector<uint8_t>(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
}

}  // namespace sinkrt::testing
