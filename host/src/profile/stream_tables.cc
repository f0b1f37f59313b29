// The profiler's view of a rank's stream: what each task is called, what it
// moves, and the memory plan. Records carry only (program, stream, task);
// everything a trace or summary prints about a task comes from here.
#include <cmath>
#include <utility>

#include "host/src/profile/profile_data.h"
#include "host/src/util/fb_vectors.h"
#include "runtime/src/collective_kinds.h"
#include "runtime/src/schema_enums.h"
#include "runtime/src/stream_names.h"
#include "sinkrt/fb/task_stream_generated.h"
#include "sinkrt/runtime/dtype.h"

namespace sinkrt::host {
namespace {

uint64_t BufferBytes(const fb::TaskStream& root, uint32_t index) {
  const auto* buffers = root.buffers();
  return buffers && index < buffers->size() ? buffers->Get(index)->bytes() : 0;
}

uint64_t BuffersBytes(const fb::TaskStream& root, const flatbuffers::Vector<uint32_t>* indices) {
  uint64_t total = 0;
  if (indices)
    for (uint32_t i : *indices) total += BufferBytes(root, i);
  return total;
}

std::vector<uint32_t> GroupRanks(const fb::TaskStream& root, uint32_t group) {
  const auto* groups = root.groups();
  if (!groups || group >= groups->size() || !groups->Get(group)->ranks()) return {};
  const auto* ranks = groups->Get(group)->ranks();
  return std::vector<uint32_t>(ranks->begin(), ranks->end());
}

// A collective's bytes (what this rank puts in: the whole bucket for an
// AllReduce, the input or data buffer for the others) and its group.
void DescribeCollective(const fb::TaskStream& root, const fb::Task& task, TaskInfo* info) {
  uint32_t group = 0;
  switch (task.body_type()) {
    case fb::TaskBody::AllReduceTask: {
      const auto* t = task.body_as_AllReduceTask();
      group = t->group();
      info->bytes = BuffersBytes(root, t->buffers());
      break;
    }
    case fb::TaskBody::BroadcastTask: {
      const auto* t = task.body_as_BroadcastTask();
      group = t->group();
      info->bytes = BuffersBytes(root, t->buffers());
      break;
    }
    case fb::TaskBody::AllGatherTask: {
      const auto* t = task.body_as_AllGatherTask();
      group = t->group();
      info->bytes = BufferBytes(root, t->input());
      break;
    }
    case fb::TaskBody::ReduceScatterTask: {
      const auto* t = task.body_as_ReduceScatterTask();
      group = t->group();
      info->bytes = BufferBytes(root, t->input());
      break;
    }
    case fb::TaskBody::AllToAllTask: {
      const auto* t = task.body_as_AllToAllTask();
      group = t->group();
      info->bytes = BufferBytes(root, t->input());
      break;
    }
    case fb::TaskBody::SendTask: {
      const auto* t = task.body_as_SendTask();
      group = t->group();
      info->bytes = BufferBytes(root, t->buffer());
      break;
    }
    case fb::TaskBody::RecvTask: {
      const auto* t = task.body_as_RecvTask();
      group = t->group();
      info->bytes = BufferBytes(root, t->buffer());
      break;
    }
    default:
      return;
  }
  info->group = GroupRanks(root, group);
}

TaskInfo DescribeTask(const fb::TaskStream& root, const fb::Task& task) {
  TaskInfo info;
  if (task.name()) info.name = task.name()->str();
  if (task.body_type() == fb::TaskBody::KernelTask && task.body_as_KernelTask())
    info.op = std::string(OpCodeName(task.body_as_KernelTask()->op()));
  else
    info.op = std::string(TaskKindName(task.body_type()));
  info.get_next = task.body_type() == fb::TaskBody::GetNextTask;
  info.event_wait = task.body_type() == fb::TaskBody::EventWaitTask;
  info.collective = IsCollective(task.body_type());
  if (info.collective) DescribeCollective(root, task, &info);
  return info;
}

// The rule of device/src/prepare_program.cc, so the summary's bubble is the
// device's: an event a comm stream records right after a Send or Recv is a
// transfer's done (parallel/pipeline/pipeline_comm.h), and the compute stream waiting
// on one waits for a neighbour stage.
void MarkNeighbourWaits(const fb::Program& program, ProgramInfo* info) {
  const auto* streams = program.streams();
  if (!streams || streams->size() == 0) return;
  std::vector<bool> transfer_done(program.num_events(), false);
  for (uint32_t s = 1; s < streams->size(); ++s) {
    const auto* tasks = streams->Get(s)->tasks();
    if (!tasks) continue;
    bool after_transfer = false;
    for (const fb::Task* task : *tasks) {
      const fb::TaskBody kind = task->body_type();
      if (kind == fb::TaskBody::EventRecordTask) {
        const auto* record = task->body_as_EventRecordTask();
        if (after_transfer && record && record->event() < transfer_done.size()) transfer_done[record->event()] = true;
      } else {
        after_transfer = kind == fb::TaskBody::SendTask || kind == fb::TaskBody::RecvTask;
      }
    }
  }
  const auto* compute = streams->Get(0)->tasks();
  if (!compute) return;
  for (uint32_t t = 0; t < compute->size() && t < info->streams[0].size(); ++t) {
    const fb::Task* task = compute->Get(t);
    const auto* wait = task->body_as_EventWaitTask();
    if (wait && wait->event() < transfer_done.size()) info->streams[0][t].neighbour_wait = transfer_done[wait->event()];
  }
}

MemoryPlan DescribeMemory(const fb::TaskStream& root, int rank) {
  MemoryPlan plan;
  plan.rank = rank;
  plan.arena_bytes = root.arena_bytes();
  if (root.queues())
    for (const fb::QueueSpec* q : *root.queues()) {
      uint64_t batch_bytes = 0;
      if (q->columns())
        for (const fb::QueueColumn* c : *q->columns()) {
          int64_t n = NumElements(Longs(c->shape()));
          if (n > 0) batch_bytes += static_cast<uint64_t>(n) * DTypeSize(c->dtype());
        }
      plan.queue_bytes += batch_bytes * q->capacity();
    }
  // In the enum's order, so every rank lists its roles alike.
  uint64_t by_role[256] = {};
  if (root.buffers())
    for (const fb::Buffer* b : *root.buffers()) by_role[static_cast<uint8_t>(b->role())] += b->bytes();
  for (fb::BufferRole role : fb::EnumValuesBufferRole())
    if (by_role[static_cast<uint8_t>(role)] > 0)
      plan.by_role.emplace_back(std::string(BufferRoleName(role)), by_role[static_cast<uint8_t>(role)]);
  return plan;
}

}  // namespace

RankData DescribeRankStream(const VerifiedStream& stream, int rank) {
  RankData out;
  out.rank = rank;
  const fb::TaskStream& root = *stream.root();
  for (int p = 0; p < kProfilePrograms; ++p) {
    const fb::Program* program = stream.FindProgram(static_cast<ProgramKind>(p));
    if (!program) continue;
    ProgramInfo& info = out.programs[p];
    info.present = true;
    info.name = std::string(ProgramKindName(static_cast<ProgramKind>(p)));
    if (!program->streams()) continue;
    for (uint32_t s = 0; s < program->streams()->size() && s < 2; ++s) {
      const auto* tasks = program->streams()->Get(s)->tasks();
      if (!tasks) continue;
      for (const fb::Task* task : *tasks) info.streams[s].push_back(DescribeTask(root, *task));
    }
    MarkNeighbourWaits(*program, &info);
  }
  out.memory = DescribeMemory(root, rank);
  return out;
}

// The offset moves linearly with device time between the two samples (the
// devices' clocks drift against the host's at a steady rate over a run);
// outside them it holds the nearer sample's value, so a wild end sample
// cannot fling records far away.
int64_t ToHostNs(const RankData& rank, int64_t device_ns) {
  const ClockSample& a = rank.clock_start;
  const ClockSample& b = rank.clock_end;
  if (b.host_ns == 0) return device_ns - a.offset_ns;
  double a_device = static_cast<double>(a.host_ns) + static_cast<double>(a.offset_ns);
  double b_device = static_cast<double>(b.host_ns) + static_cast<double>(b.offset_ns);
  if (!(b_device > a_device)) return device_ns - a.offset_ns;
  double f = (static_cast<double>(device_ns) - a_device) / (b_device - a_device);
  f = f < 0 ? 0 : (f > 1 ? 1 : f);
  double delta = static_cast<double>(b.offset_ns) - static_cast<double>(a.offset_ns);
  return device_ns - (a.offset_ns + static_cast<int64_t>(std::llround(delta * f)));
}

const TaskInfo* FindTaskInfo(const RankData& rank, const ProfileRecord& record) {
  if (record.kind != ProfileRecordKind::kTask || record.program >= kProfilePrograms || record.stream >= 2)
    return nullptr;
  const std::vector<TaskInfo>& tasks = rank.programs[record.program].streams[record.stream];
  return record.task < tasks.size() ? &tasks[record.task] : nullptr;
}

}  // namespace sinkrt::host
