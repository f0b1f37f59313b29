// Hand-built task streams whose comm stream runs AllToAllTasks (the
// verifier and device tests of the task, and sinkdump's).
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

struct BufferSpec {
  std::string name;
  DType dtype;
  Shape shape;
};

struct ExchangeSpec {
  uint32_t group = 0;
  uint32_t input = 0, output = 1;
};

// Rank `rank` of a world of `world` (at least 4): the group table is the
// world, {0,2} and {1,3}; buffers follow each other 64-byte aligned (or all
// start at offset 0 with `alias`); train_step's compute stream records
// event 0, and its comm stream waits for it and runs one AllToAllTask per
// exchange, named "exchange<i>".
inline std::vector<uint8_t> AllToAllStream(uint32_t rank, uint32_t world, const std::vector<BufferSpec>& buffers,
                                           const std::vector<ExchangeSpec>& exchanges, bool alias = false,
                                           uint64_t requirements = kFeatureCollectives) {
  flatbuffers::FlatBufferBuilder fbb;
  std::vector<flatbuffers::Offset<fb::Buffer>> bufs;
  uint64_t arena = 0;
  for (const BufferSpec& b : buffers) {
    const uint64_t bytes = static_cast<uint64_t>(NumElements(b.shape)) * DTypeSize(b.dtype);
    bufs.push_back(fb::CreateBuffer(fbb, fbb.CreateString(b.name), alias ? 0 : arena, bytes, ToFb(b.dtype),
                                    fbb.CreateVector(b.shape), fb::BufferRole::Activation));
    arena = alias ? std::max(arena, (bytes + 63) / 64 * 64) : arena + (bytes + 63) / 64 * 64;
  }
  std::vector<uint32_t> all(world);
  for (uint32_t r = 0; r < world; ++r) all[r] = r;
  const std::vector<uint32_t> even{0, 2}, odd{1, 3};
  std::vector<flatbuffers::Offset<fb::CommGroup>> groups = {fb::CreateCommGroupDirect(fbb, "world", &all),
                                                            fb::CreateCommGroupDirect(fbb, "even", &even),
                                                            fb::CreateCommGroupDirect(fbb, "odd", &odd)};
  std::vector<flatbuffers::Offset<fb::Task>> comm;
  for (size_t i = 0; i < exchanges.size(); ++i) {
    const ExchangeSpec& e = exchanges[i];
    comm.push_back(fb::CreateTask(fbb, fb::TaskBody::AllToAllTask,
                                  fb::CreateAllToAllTask(fbb, e.group, e.input, e.output).Union(),
                                  fbb.CreateString("exchange" + std::to_string(i))));
  }
  return FinishCommTaskStream(fbb, rank, world, arena, requirements, bufs, groups, comm);
}

}  // namespace sinkrt::testing
