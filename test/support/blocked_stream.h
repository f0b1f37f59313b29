// Hand-built task streams whose comm stream runs blocked (fused)
// ReduceScatterTasks and AllGatherTasks: the verifier's and the device's
// tests of the inputs/outputs lists.
#pragma once

#include <flatbuffers/flatbuffers.h>

#include <algorithm>
#include <string>
#include <vector>

#include "runtime/src/schema_enums.h"
#include "sinkrt/fb/task_stream_generated.h"
#include "sinkrt/runtime/dtype.h"
#include "sinkrt/runtime/stream_format.h"
#include "support/comm_task_stream.h"

namespace sinkrt::testing {

struct BlockedBuffer {
  std::string name;
  DType dtype;
  Shape shape;
  // A view: lies `view_offset` bytes into the earlier buffer `view_of`
  // (a shard that is a block of its whole) instead of after the others.
  int32_t view_of = -1;
  uint64_t view_offset = 0;
};

struct BlockedTask {
  bool scatter = true;  // a ReduceScatterTask, else an AllGatherTask
  uint32_t group = 0;
  fb::ReduceOp op = fb::ReduceOp::Sum;
  std::vector<uint32_t> inputs, outputs;
};

inline constexpr uint64_t kBlockedRequirements = kFeatureCollectives | kFeatureBlockedCollectives;

// Rank `rank` of a world of `world`: the group table is the world alone;
// buffers follow each other 64-byte aligned unless they are views;
// train_step's compute stream records event 0, and its comm stream waits
// for it and runs the tasks in order, named "bucket<i>".
inline std::vector<uint8_t> BlockedStream(uint32_t rank, uint32_t world, const std::vector<BlockedBuffer>& buffers,
                                          const std::vector<BlockedTask>& tasks,
                                          uint64_t requirements = kBlockedRequirements) {
  flatbuffers::FlatBufferBuilder fbb;
  std::vector<flatbuffers::Offset<fb::Buffer>> bufs;
  std::vector<uint64_t> offsets;
  uint64_t arena = 0;
  for (const BlockedBuffer& b : buffers) {
    const uint64_t bytes = static_cast<uint64_t>(NumElements(b.shape)) * DTypeSize(b.dtype);
    const uint64_t offset = b.view_of >= 0 ? offsets[b.view_of] + b.view_offset : arena;
    offsets.push_back(offset);
    bufs.push_back(fb::CreateBuffer(fbb, fbb.CreateString(b.name), offset, bytes, ToFb(b.dtype),
                                    fbb.CreateVector(b.shape), fb::BufferRole::Activation));
    arena = std::max(arena, offset + (bytes + 63) / 64 * 64);
  }
  std::vector<uint32_t> all(world);
  for (uint32_t r = 0; r < world; ++r) all[r] = r;
  std::vector<flatbuffers::Offset<fb::CommGroup>> groups = {fb::CreateCommGroupDirect(fbb, "world", &all)};
  std::vector<flatbuffers::Offset<fb::Task>> comm;
  for (size_t i = 0; i < tasks.size(); ++i) {
    const BlockedTask& t = tasks[i];
    const std::vector<uint32_t>* in = t.inputs.empty() ? nullptr : &t.inputs;
    const std::vector<uint32_t>* out = t.outputs.empty() ? nullptr : &t.outputs;
    const auto name = fbb.CreateString("bucket" + std::to_string(i));
    if (t.scatter)
      comm.push_back(fb::CreateTask(fbb, fb::TaskBody::ReduceScatterTask,
                                    fb::CreateReduceScatterTaskDirect(fbb, t.group, t.op, 0, 0, in, out).Union(),
                                    name));
    else
      comm.push_back(fb::CreateTask(fbb, fb::TaskBody::AllGatherTask,
                                    fb::CreateAllGatherTaskDirect(fbb, t.group, 0, 0, in, out).Union(), name));
  }
  return FinishCommTaskStream(fbb, rank, world, arena, requirements, bufs, groups, comm);
}

}  // namespace sinkrt::testing
