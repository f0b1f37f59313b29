// SaveCheckpoint / LoadCheckpoint: schemas/checkpoint.fbs files.
#include <flatbuffers/flatbuffers.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "host/src/model/callbacks/checkpoint_integrity.h"
#include "host/src/util/schema_enums.h"
#include "runtime/src/file_io.h"
#include "sinkrt/fb/checkpoint_generated.h"
#include "sinkrt/host/callbacks.h"
#include "sinkrt/host/file_formats.h"
#include "sinkrt/host/model.h"
#include "sinkrt/runtime/version.h"

namespace sinkrt::host {
namespace {

constexpr uint16_t kCheckpointMajor = kCheckpointFormat.major;
constexpr uint16_t kCheckpointMinor = kCheckpointFormat.minor;
constexpr char kProducer[] = "sinkrt " SINKRT_VERSION_STRING;
// A FlatBuffer addresses itself with 32-bit offsets; leave room for the
// tables around the tensor data.
constexpr uint64_t kMaxTensorBytes = (uint64_t{1} << 31) - (uint64_t{1} << 24);

std::string Hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// The state of a dead writer's temporaries goes with it (issue 39): a
// save clears what a killed run left beside its target.
void RemoveDeadWritersTemporaries(const std::string& path) {
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  RemoveStaleTemporaries(dir.empty() ? "." : dir.string(), ".ckpt");
}

std::string Describe(DType dtype, const Shape& shape) {
  return std::string(DTypeName(dtype)) + " " + ShapeToString(shape);
}

// A checkpoint holds every parameter, so it binds to the network's
// structure, not to the values training started from (MindSpore's
// load_checkpoint matches parameters by name and shape alone): files of
// 1.1 on record the structure hash and load under another --seed. A 1.0
// file records only graph_hash, which covers the initialisers too, so its
// refusal says that either may differ.
Status CheckSameNetwork(const fb::Checkpoint& ck, const Model& model, const std::string& where) {
  const std::string saved = "saved from network '" + (ck.network() ? ck.network()->str() : std::string()) + "'";
  const std::string ours = "the model's network '" + model.network_name() + "'";
  if (ck.structure_hash() != 0 && model.network_structure_hash() != 0) {
    if (ck.structure_hash() == model.network_structure_hash()) return Status::Ok();
    return FailedPrecondition(where + ": " + saved + " (structure hash " + Hex(ck.structure_hash()) + "), " + ours +
                              " hashes to " + Hex(model.network_structure_hash()) +
                              ": a different network (its ops, tensor names or shapes differ)");
  }
  if (ck.graph_hash() == model.network_hash()) return Status::Ok();
  return FailedPrecondition(where + ": " + saved + " (graph hash " + Hex(ck.graph_hash()) + "), " + ours +
                            " hashes to " + Hex(model.network_hash()) +
                            ": a different network, or the same one with other initial values (--seed, "
                            "initialisers): this checkpoint (format " +
                            std::to_string(ck.format_major()) + "." + std::to_string(ck.format_minor()) +
                            ") binds to both");
}

}  // namespace

Status SaveCheckpoint(const std::string& path, Model& model, const CheckpointInfo& info) {
  SINKRT_ASSIGN_OR_RETURN(const auto state, model.ReadState(), "SaveCheckpoint '" + path + "'");
  // Every rank's and stage's state (rank 0's stream holds only the first
  // pipeline stage's).
  std::map<std::string, fb::CheckpointRole> roles;
  for (const Model::StateTensorSpec& s : model.StateSpecs())
    roles[s.name] = s.device_state      ? fb::CheckpointRole::State
                    : s.optimizer_state ? fb::CheckpointRole::OptState
                                        : fb::CheckpointRole::Param;

  uint64_t total = 0;
  for (const auto& [name, t] : state) total += t.data.size();
  if (total > kMaxTensorBytes)
    return ResourceExhausted("SaveCheckpoint '" + path + "': " + std::to_string(total) +
                             " bytes of state exceed what one FlatBuffer checkpoint holds (2 GiB)");

  flatbuffers::FlatBufferBuilder fbb(static_cast<size_t>(total) + 4096);
  std::vector<flatbuffers::Offset<fb::CheckpointTensor>> tensors;
  for (const auto& [name, t] : state) {
    auto n = fbb.CreateString(name);
    auto shape = fbb.CreateVector(t.shape);
    auto data = fbb.CreateVector(t.data);
    const fb::CheckpointRole role = roles.count(name) ? roles[name] : fb::CheckpointRole::Param;
    tensors.push_back(fb::CreateCheckpointTensor(fbb, n, ToFb(t.dtype), shape, role, data, Crc32(t.data)));
  }
  auto tv = fbb.CreateVector(tensors);
  auto producer = fbb.CreateString(kProducer);
  auto network = fbb.CreateString(model.network_name());
  // file_bytes and file_crc32 start non-zero so that both are stored;
  // SealCheckpoint fills them in once the size is known.
  fbb.Finish(fb::CreateCheckpoint(fbb, kCheckpointMajor, kCheckpointMinor, producer, network, model.network_hash(),
                                  info.epoch, info.step, info.batch_num, info.global_batch, tv, /*file_bytes=*/1,
                                  /*file_crc32=*/1, model.network_structure_hash()),
             fb::CheckpointIdentifier());
  const std::span<uint8_t> buffer(fbb.GetBufferPointer(), fbb.GetSize());
  SINKRT_RETURN_IF_ERROR(SealCheckpoint(buffer));
  RemoveDeadWritersTemporaries(path);
  SINKRT_RETURN_IF_ERROR(WriteFileBytes(path, buffer), "SaveCheckpoint '" + path + "'");
  return Status::Ok();
}

Status LoadCheckpoint(const std::string& path, Model& model, CheckpointInfo* info) {
  const std::string where = "LoadCheckpoint '" + path + "'";
  SINKRT_ASSIGN_OR_RETURN(const std::vector<uint8_t> bytes,
                          ReadFileBytes(path, {kFlatBufferFileLimit.max_bytes, "a checkpoint"}));
  if (bytes.size() < 8 || !fb::CheckpointBufferHasIdentifier(bytes.data()))
    return InvalidArgument(where + ": not a sinkrt checkpoint (no 'SKCK' identifier)");
  flatbuffers::Verifier::Options vo;
  vo.max_tables = 1u << 24;
  flatbuffers::Verifier verifier(bytes.data(), bytes.size(), vo);
  if (!fb::VerifyCheckpointBuffer(verifier))
    return InvalidArgument(where + ": the file is corrupt (it fails the FlatBuffers verifier)");
  const fb::Checkpoint* ck = fb::GetCheckpoint(bytes.data());
  if (ck->format_major() != kCheckpointMajor)
    return InvalidArgument(where + ": checkpoint format " + std::to_string(ck->format_major()) + "." +
                           std::to_string(ck->format_minor()) + ", this build reads " +
                           std::to_string(kCheckpointMajor) + ".x");
  bool whole_file_checked = false;
  SINKRT_RETURN_IF_ERROR(VerifyCheckpointFile(bytes, *ck, where, &whole_file_checked));
  SINKRT_RETURN_IF_ERROR(CheckSameNetwork(*ck, model, where));

  std::map<std::string, const fb::CheckpointTensor*> saved;
  if (ck->tensors())
    for (const fb::CheckpointTensor* t : *ck->tensors())
      if (t->name()) saved[t->name()->str()] = t;

  // Every parameter and optimizer state of the model, on every rank and
  // pipeline stage: a resume that left one at its initial value would train
  // on silently from a state that never existed.
  std::vector<std::pair<std::string, Tensor>> state;
  for (const Model::StateTensorSpec& s : model.StateSpecs()) {
    auto it = saved.find(s.name);
    if (it == saved.end())
      return NotFound(where + ": has no tensor '" + s.name + "' (the model's " +
                      (s.device_state      ? "device state"
                       : s.optimizer_state ? "optimizer state"
                                           : "parameter") +
                      "), so it would keep its initial value");
    const fb::CheckpointTensor* t = it->second;
    Shape shape;
    // The Verifier does not check 8-byte element alignment (google/flatbuffers#8397).
    if (t->shape() && t->shape()->size() > 0 && reinterpret_cast<uintptr_t>(t->shape()->data()) % alignof(int64_t) != 0)
      return InvalidArgument(where + ": tensor '" + s.name + "' has a misaligned shape vector");
    if (t->shape()) shape.assign(t->shape()->begin(), t->shape()->end());
    // Checkpoints hold whole tensors, as StateSpecs() gives them.
    const Shape& whole = s.shape;
    if (FromFb(t->dtype()) != s.dtype || shape != whole)
      return InvalidArgument(where + ": tensor '" + s.name + "' is " + Describe(FromFb(t->dtype()), shape) +
                             ", the model's is " + Describe(s.dtype, whole));
    const size_t have = t->data() ? t->data()->size() : 0;
    const uint64_t need = static_cast<uint64_t>(NumElements(whole)) * DTypeSize(s.dtype);
    if (have != need)
      return InvalidArgument(where + ": tensor '" + s.name + "' holds " + std::to_string(have) +
                             " bytes, its shape needs " + std::to_string(need));
    if (!whole_file_checked) SINKRT_RETURN_IF_ERROR(VerifyTensorCrc(*t, where));
    Tensor value{s.dtype, std::move(shape), {}};
    if (have) value.data.assign(t->data()->begin(), t->data()->end());
    state.emplace_back(s.name, std::move(value));
  }
  SINKRT_RETURN_IF_ERROR(model.WriteState(state), where);
  if (info) {
    info->epoch = ck->epoch();
    info->step = ck->step();
    info->batch_num = ck->batch_num();
    info->global_batch = ck->global_batch();
    info->graph_hash = ck->graph_hash();
    info->initial_epoch = ck->batch_num() > 0 && ck->step() < ck->batch_num() ? ck->epoch() - 1 : ck->epoch();
    if (info->initial_epoch < 0) info->initial_epoch = 0;
  }
  return Status::Ok();
}

}  // namespace sinkrt::host
