// The frame shared by the hand-built collective task streams
// (blocked_stream.h, alltoall_stream.h): one train_step program whose
// compute stream records event 0 and whose comm stream waits for it, then
// runs the given collective tasks in order.
#pragma once

#include <flatbuffers/flatbuffers.h>

#include <cstdint>
#include <vector>

#include "sinkrt/fb/task_stream_generated.h"
#include "sinkrt/runtime/stream_format.h"

namespace sinkrt::testing {

// Finishes `fbb` into a size-prefixed task stream of rank `rank` of `world`
// with these buffers (an arena of `arena` bytes), groups and collective
// tasks; returns its bytes.
inline std::vector<uint8_t> FinishCommTaskStream(flatbuffers::FlatBufferBuilder& fbb, uint32_t rank, uint32_t world,
                                                 uint64_t arena, uint64_t requirements,
                                                 const std::vector<flatbuffers::Offset<fb::Buffer>>& bufs,
                                                 const std::vector<flatbuffers::Offset<fb::CommGroup>>& groups,
                                                 const std::vector<flatbuffers::Offset<fb::Task>>& collectives) {
  std::vector<flatbuffers::Offset<fb::Task>> compute = {fb::CreateTask(
      fbb, fb::TaskBody::EventRecordTask, fb::CreateEventRecordTask(fbb, 0).Union(), fbb.CreateString("ready"))};
  std::vector<flatbuffers::Offset<fb::Task>> comm = {fb::CreateTask(
      fbb, fb::TaskBody::EventWaitTask, fb::CreateEventWaitTask(fbb, 0).Union(), fbb.CreateString("wait"))};
  comm.insert(comm.end(), collectives.begin(), collectives.end());
  std::vector<flatbuffers::Offset<fb::Stream>> streams = {fb::CreateStreamDirect(fbb, "compute", &compute),
                                                          fb::CreateStreamDirect(fbb, "comm", &comm)};
  std::vector<flatbuffers::Offset<fb::Program>> programs = {
      fb::CreateProgramDirect(fbb, "train_step", fb::ProgramKind::TrainStep, &streams, 1)};
  auto header = fb::CreateHeaderDirect(fbb, kFormatMajor, kFormatMinor, rank, world, "cpu", 0, requirements);
  auto buf_vec = fbb.CreateVector(bufs);
  auto group_vec = fbb.CreateVector(groups);
  auto prog_vec = fbb.CreateVector(programs);
  fb::TaskStreamBuilder root(fbb);
  root.add_header(header);
  root.add_arena_bytes(arena);
  root.add_buffers(buf_vec);
  root.add_groups(group_vec);
  root.add_programs(prog_vec);
  fb::FinishSizePrefixedTaskStreamBuffer(fbb, root.Finish());
  return std::vector<uint8_t>(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
}

}  // namespace sinkrt::testing
