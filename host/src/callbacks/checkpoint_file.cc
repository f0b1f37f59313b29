// SaveCheckpoint / LoadCheckpoint: schemas/checkpoint.fbs files.
#include <flatbuffers/flatbuffers.h>

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "sinkrt/runtime/version.h"
#include "sinkrt/fb/checkpoint_generated.h"
#include "sinkrt/host/callbacks.h"
#include "sinkrt/host/file_formats.h"
#include "sinkrt/host/model.h"
#include "sinkrt/runtime/file_io.h"

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

// The whole file or nothing: written to a temporary inside the target's
// directory (a rename never crosses filesystems, and a failure leaves no
// stray beside an unrelated path), then renamed over it.
Status WriteAtomically(const std::string& path, std::span<const uint8_t> bytes) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  std::error_code ec;
  if (fs::is_directory(target, ec)) return InvalidArgument("'" + path + "' is a directory");
  const fs::path tmp = target.parent_path() / ("." + target.filename().string() + ".tmp." + std::to_string(::getpid()));
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) return NotFound("cannot create '" + tmp.string() + "': " + std::strerror(errno));
  bool ok = bytes.empty() || std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) {
    std::remove(tmp.c_str());
    return Unavailable("error writing '" + tmp.string() + "'");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    return Unavailable("cannot rename '" + tmp.string() + "' to '" + path + "': " + std::strerror(err));
  }
  return Status::Ok();
}

std::string Describe(DType dtype, const Shape& shape) {
  return std::string(DTypeName(dtype)) + " " + ShapeToString(shape);
}

}  // namespace

Status SaveCheckpoint(const std::string& path, Model& model, const CheckpointInfo& info) {
  SINKRT_ASSIGN_OR_RETURN(const auto state, model.ReadState(), "SaveCheckpoint '" + path + "'");
  // Every rank's and stage's state (rank 0's stream holds only the first
  // pipeline stage's).
  std::map<std::string, bool> optimizer_state;
  for (const Model::StateTensorSpec& s : model.StateSpecs()) optimizer_state[s.name] = s.optimizer_state;

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
    const fb::CheckpointRole role = optimizer_state[name] ? fb::CheckpointRole::OptState : fb::CheckpointRole::Param;
    tensors.push_back(fb::CreateCheckpointTensor(fbb, n, t.dtype, shape, role, data));
  }
  auto tv = fbb.CreateVector(tensors);
  auto producer = fbb.CreateString(kProducer);
  auto network = fbb.CreateString(model.network_name());
  fbb.Finish(fb::CreateCheckpoint(fbb, kCheckpointMajor, kCheckpointMinor, producer, network, model.network_hash(),
                                  info.epoch, info.step, info.batch_num, info.global_batch, tv),
             fb::CheckpointIdentifier());
  SINKRT_RETURN_IF_ERROR(WriteAtomically(path, std::span<const uint8_t>(fbb.GetBufferPointer(), fbb.GetSize())),
                         "SaveCheckpoint '" + path + "'");
  return Status::Ok();
}

Status LoadCheckpoint(const std::string& path, Model& model, CheckpointInfo* info) {
  const std::string where = "LoadCheckpoint '" + path + "'";
  SINKRT_ASSIGN_OR_RETURN(const std::vector<uint8_t> bytes, ReadFileBytes(path));
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
  const std::string saved_network = ck->network() ? ck->network()->str() : "";
  if (ck->graph_hash() != model.network_hash())
    return FailedPrecondition(where + ": saved from network '" + saved_network + "' (graph hash " +
                              Hex(ck->graph_hash()) + "), the model's network '" + model.network_name() +
                              "' hashes to " + Hex(model.network_hash()) + ": a different network");

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
                      (s.optimizer_state ? "optimizer state" : "parameter") + "), so it would keep its initial value");
    const fb::CheckpointTensor* t = it->second;
    Shape shape;
    // The Verifier does not check 8-byte element alignment (google/flatbuffers#8397).
    if (t->shape() && t->shape()->size() > 0 && reinterpret_cast<uintptr_t>(t->shape()->data()) % alignof(int64_t) != 0)
      return InvalidArgument(where + ": tensor '" + s.name + "' has a misaligned shape vector");
    if (t->shape()) shape.assign(t->shape()->begin(), t->shape()->end());
    // Checkpoints hold whole tensors, as StateSpecs() gives them.
    const Shape& whole = s.shape;
    if (t->dtype() != s.dtype || shape != whole)
      return InvalidArgument(where + ": tensor '" + s.name + "' is " + Describe(t->dtype(), shape) +
                             ", the model's is " + Describe(s.dtype, whole));
    const size_t have = t->data() ? t->data()->size() : 0;
    const uint64_t need = static_cast<uint64_t>(NumElements(whole)) * DTypeSize(s.dtype);
    if (have != need)
      return InvalidArgument(where + ": tensor '" + s.name + "' holds " + std::to_string(have) +
                             " bytes, its shape needs " + std::to_string(need));
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
