// A Model's state (parameters and optimizer state, for checkpoints): the
// specs, reading it as whole tensors (merged from the ranks' slices or a
// pipeline's stages) and writing whole tensors back to every rank that
// holds a piece.
#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "host/src/model/model_impl.h"

namespace sinkrt::host {

namespace {

// A state buffer's whole tensor: its slice's global shape, else its own.
const Shape& WholeShape(const StateBuffer& s) { return s.slice ? s.slice->global_shape : s.shape; }

// A sharded model's state as whole tensors: each slice is read from the
// first rank that holds it (replicas hold equal bytes) and put in place.
Result<std::vector<std::pair<std::string, Tensor>>> MergedState(Model::Impl& m) {
  std::vector<std::pair<std::string, Tensor>> out;
  for (size_t i = 0; i < m.state.size(); ++i) {
    const StateBuffer& s0 = m.state[i];
    Tensor whole{s0.dtype, WholeShape(s0), {}};
    whole.data.assign(static_cast<size_t>(NumElements(whole.shape)) * DTypeSize(s0.dtype), 0);
    std::vector<std::vector<int64_t>> placed;
    for (uint32_t r = 0; r < m.devices.size(); ++r) {
      const std::vector<StateBuffer>& state = m.RankState(r);
      const StateBuffer* s = i < state.size() && state[i].name == s0.name ? &state[i] : nullptr;
      if (!s || WholeShape(*s) != whole.shape || s->dtype != s0.dtype)
        return Internal("Model.ReadState: rank " + std::to_string(r) + " holds tensor '" + s0.name +
                        "' differently from rank 0");
      const std::vector<int64_t> offset = s->slice ? s->slice->offset : std::vector<int64_t>(s->shape.size(), 0);
      if (std::find(placed.begin(), placed.end(), offset) != placed.end()) continue;
      SINKRT_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, m.devices[r]->ReadTensor(s->index),
                              "Model.ReadState: tensor '" + s->name + "' on rank " + std::to_string(r));
      if (bytes.size() != s->bytes)
        return Internal("Model.ReadState: tensor '" + s->name + "' came back with " + std::to_string(bytes.size()) +
                        " bytes, expected " + std::to_string(s->bytes));
      if (!s->slice) {
        whole.data = std::move(bytes);
        break;
      }
      PlaceBlock(whole.data.data(), bytes.data(), BlockOf(*s->slice, s->shape, DTypeSize(s->dtype)));
      placed.push_back(offset);
    }
    out.emplace_back(s0.name, std::move(whole));
  }
  return out;
}

// A pipeline's state as whole tensors, in stage order: each from the first
// rank that holds it, or put together from its stage's slices. A tensor
// several stages hold (Adam's powers) is equal on all: read once.
Result<std::vector<std::pair<std::string, Tensor>>> PipelineState(Model::Impl& m) {
  std::vector<std::pair<std::string, Tensor>> out;
  std::map<std::string, size_t> index;  // name -> its entry in `out`
  std::map<std::string, std::vector<std::vector<int64_t>>> placed;
  std::map<std::string, uint32_t> from;  // name -> the rank it was first read from
  const uint32_t per_stage = static_cast<uint32_t>(m.devices.size()) / static_cast<uint32_t>(m.pipeline_stages);
  for (const auto& [rank, s] : m.stage_state) {
    auto [it, fresh] = index.emplace(s.name, out.size());
    if (fresh) {
      from[s.name] = rank;
      Tensor whole{s.dtype, WholeShape(s), {}};
      if (s.slice) whole.data.assign(static_cast<size_t>(NumElements(whole.shape)) * DTypeSize(s.dtype), 0);
      out.emplace_back(s.name, std::move(whole));
    } else if (!s.slice || rank / per_stage != from[s.name] / per_stage) {
      continue;  // a replica's copy, or another stage's equal one
    }
    const std::vector<int64_t> offset = s.slice ? s.slice->offset : std::vector<int64_t>{};
    std::vector<std::vector<int64_t>>& done = placed[s.name];
    if (s.slice && std::find(done.begin(), done.end(), offset) != done.end()) continue;
    SINKRT_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, m.devices[rank]->ReadTensor(s.index),
                            "Model.ReadState: tensor '" + s.name + "' on rank " + std::to_string(rank));
    if (bytes.size() != s.bytes)
      return Internal("Model.ReadState: tensor '" + s.name + "' came back with " + std::to_string(bytes.size()) +
                      " bytes, expected " + std::to_string(s.bytes));
    Tensor& whole = out[it->second].second;
    if (!s.slice) {
      whole.data = std::move(bytes);
      continue;
    }
    PlaceBlock(whole.data.data(), bytes.data(), BlockOf(*s.slice, s.shape, DTypeSize(s.dtype)));
    done.push_back(offset);
  }
  return out;
}

}  // namespace

std::vector<Model::StateTensorSpec> Model::StateSpecs() const {
  std::vector<StateTensorSpec> out;
  auto add = [&](const StateBuffer& s) {
    out.push_back({.name = s.name,
                   .dtype = s.dtype,
                   .shape = WholeShape(s),
                   .optimizer_state = s.role == BufferRole::OptState,
                   .device_state = s.role == BufferRole::State});
  };
  // Pipeline stages: rank 0 holds only the first stage's tensors; the
  // model's state is every stage's (a tensor several stages hold, once).
  if (impl_->pipeline_stages > 1) {
    std::set<std::string> seen;
    for (const auto& [rank, s] : impl_->stage_state)
      if (seen.insert(s.name).second) add(s);
  } else {
    for (const StateBuffer& s : impl_->state) add(s);
  }
  return out;
}

Result<std::vector<std::pair<std::string, Tensor>>> Model::ReadState() {
  if (impl_->sharded || impl_->state_sliced) return MergedState(*impl_);
  if (impl_->pipeline_stages > 1) return PipelineState(*impl_);
  return ReadState(0);
}

Result<std::vector<std::pair<std::string, Tensor>>> Model::ReadState(uint32_t rank) {
  if (rank >= impl_->devices.size())
    return OutOfRange("Model.ReadState: rank " + std::to_string(rank) + " is outside the model's " +
                      std::to_string(impl_->devices.size()) + " devices");
  std::vector<std::pair<std::string, Tensor>> out;
  // A sharded rank's own slices; ReadState() merges them.
  // A pipeline rank holds its stage's tensors.
  const std::vector<StateBuffer> stage_state =
      impl_->pipeline_stages > 1 ? StateBuffers(impl_->streams[rank]) : std::vector<StateBuffer>{};
  const std::vector<StateBuffer>& state = impl_->sharded || impl_->state_sliced ? impl_->RankState(rank)
                                          : impl_->pipeline_stages > 1          ? stage_state
                                                                                : impl_->state;
  out.reserve(state.size());
  for (const StateBuffer& s : state) {
    SINKRT_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, impl_->devices[rank]->ReadTensor(s.index),
                            "Model.ReadState: tensor '" + s.name + "'");
    if (bytes.size() != s.bytes)
      return Internal("Model.ReadState: tensor '" + s.name + "' came back with " + std::to_string(bytes.size()) +
                      " bytes, expected " + std::to_string(s.bytes));
    out.emplace_back(s.name, Tensor{s.dtype, s.shape, std::move(bytes)});
  }
  return out;
}

namespace {

// The overflow count a written loss_scale/counters holds (Impl::
// overflow_steps_seen), if `state` writes one.
std::optional<int64_t> WrittenOverflowCount(const std::vector<std::pair<std::string, Tensor>>& state) {
  for (const auto& [name, t] : state)
    if (name == "loss_scale/counters" && t.dtype == DType::I32 && t.data.size() == 3 * sizeof(int32_t)) {
      int32_t c[3];
      std::memcpy(c, t.data.data(), sizeof c);
      return c[2];
    }
  return std::nullopt;
}

// Whole tensors, whatever the ranks hold: a checkpoint does not depend
// on the strategy. `t` must be state buffer `s`'s whole tensor.
Status CheckWholeTensor(const std::string& name, const Tensor& t, const StateBuffer& s) {
  const Shape& shape = WholeShape(s);
  if (t.dtype != s.dtype || t.shape != shape)
    return InvalidArgument("Model.WriteState: tensor '" + name + "' is " + DTypeName(t.dtype) + " " +
                           ShapeToString(t.shape) + ", the model's is " + DTypeName(s.dtype) + " " +
                           ShapeToString(shape));
  const uint64_t bytes = static_cast<uint64_t>(NumElements(shape)) * DTypeSize(s.dtype);
  if (t.data.size() != bytes)
    return InvalidArgument("Model.WriteState: tensor '" + name + "' holds " + std::to_string(t.data.size()) +
                           " bytes, its shape needs " + std::to_string(bytes));
  return Status::Ok();
}

}  // namespace

Status Model::WriteState(const std::vector<std::pair<std::string, Tensor>>& state) {
  SINKRT_RETURN_IF_ERROR(impl_->pipeline_stages > 1 ? WritePipelineState(state) : WriteRankState(state));
  if (const std::optional<int64_t> seen = WrittenOverflowCount(state)) impl_->overflow_steps_seen = *seen;
  return Status::Ok();
}

Status Model::WriteRankState(const std::vector<std::pair<std::string, Tensor>>& state) {
  std::map<std::string, const StateBuffer*> by_name;
  for (const StateBuffer& s : impl_->state) by_name[s.name] = &s;
  // Check everything before writing anything, so a bad entry leaves the
  // model as it was.
  std::vector<std::pair<const StateBuffer*, const Tensor*>> writes;
  for (const auto& [name, t] : state) {
    auto it = by_name.find(name);
    if (it == by_name.end())
      return NotFound("Model.WriteState: the model has no parameter or optimizer state '" + name + "'");
    const StateBuffer& s = *it->second;
    SINKRT_RETURN_IF_ERROR(CheckWholeTensor(name, t, s));
    writes.emplace_back(&s, &t);
  }
  for (size_t r = 0; r < impl_->devices.size(); ++r)
    for (const auto& [s0, t] : writes) {
      const StateBuffer* s = s0;
      std::vector<uint8_t> part;
      ConstBytes bytes = t->bytes();
      if (impl_->sharded || impl_->state_sliced) {
        // Rank r's buffer of that name (same table order on every rank).
        const std::vector<StateBuffer>& state = impl_->RankState(static_cast<uint32_t>(r));
        const size_t i = static_cast<size_t>(s0 - impl_->state.data());
        if (i >= state.size() || state[i].name != s0->name)
          return Internal("Model.WriteState: rank " + std::to_string(r) + " has no tensor '" + s0->name + "'");
        s = &state[i];
        if (s->slice) {
          part = ExtractBlock(t->data.data(), BlockOf(*s->slice, s->shape, DTypeSize(s->dtype)));
          bytes = part;
        }
      }
      SINKRT_RETURN_IF_ERROR(impl_->devices[r]->WriteTensor(s->index, bytes),
                             "Model.WriteState: tensor '" + s->name + "'" +
                                 (impl_->devices.size() > 1 ? " on rank " + std::to_string(r) : ""));
    }
  return Status::Ok();
}

// A pipeline's state: each tensor to every replica of the stage that holds
// it, all checked before anything is written.
Status Model::WritePipelineState(const std::vector<std::pair<std::string, Tensor>>& state) {
  Impl& m = *impl_;
  std::multimap<std::string, const std::pair<uint32_t, StateBuffer>*> by_name;
  for (const auto& entry : m.stage_state) by_name.emplace(entry.second.name, &entry);
  std::vector<std::pair<const std::pair<uint32_t, StateBuffer>*, const Tensor*>> writes;
  for (const auto& [name, t] : state) {
    auto [it, end] = by_name.equal_range(name);
    if (it == end) return NotFound("Model.WriteState: the model has no parameter or optimizer state '" + name + "'");
    for (auto holder = it; holder != end; ++holder) writes.emplace_back(holder->second, &t);
    const StateBuffer& s = it->second->second;
    SINKRT_RETURN_IF_ERROR(CheckWholeTensor(name, t, s));
  }
  // Data parallel: an entry stands for its stage's replicas too.
  const uint32_t per_stage = static_cast<uint32_t>(m.devices.size()) / static_cast<uint32_t>(m.pipeline_stages);
  const uint32_t copies = m.stage_sharded ? 1 : per_stage;
  for (const auto& [entry, t] : writes) {
    const StateBuffer& s = entry->second;
    std::vector<uint8_t> part;
    ConstBytes bytes = t->bytes();
    if (s.slice) {
      part = ExtractBlock(t->data.data(), BlockOf(*s.slice, s.shape, DTypeSize(s.dtype)));
      bytes = part;
    }
    for (uint32_t r = entry->first; r < entry->first + copies; ++r)
      SINKRT_RETURN_IF_ERROR(m.devices[r]->WriteTensor(s.index, bytes),
                             "Model.WriteState: tensor '" + s.name + "' on rank " + std::to_string(r));
  }
  return Status::Ok();
}

}  // namespace sinkrt::host
