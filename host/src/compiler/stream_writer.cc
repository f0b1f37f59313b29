#include "host/src/compiler/stream_writer.h"

#include <algorithm>
#include <string>
#include <variant>

#include "host/src/graph/file/op_options.h"
#include "host/src/util/schema_enums.h"
#include "sinkrt/runtime/stream_format.h"
#include "sinkrt/runtime/version.h"

namespace sinkrt::host::compiler {
namespace {

namespace fbs = flatbuffers;

constexpr char kProducer[] = "sinkrt " SINKRT_VERSION_STRING;
constexpr char kTarget[] = "cpu";

uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

fbs::Offset<fbs::Vector<int64_t>> ShapeVector(fbs::FlatBufferBuilder& fbb, const Shape& shape) {
  return fbb.CreateVector(shape);
}

fbs::Offset<fb::Slice> WriteSlice(fbs::FlatBufferBuilder& fbb, const std::optional<SliceInfo>& s) {
  if (!s) return 0;
  auto whole = fbb.CreateVector(s->global_shape);
  auto offset = fbb.CreateVector(s->offset);
  auto matrix = fbb.CreateVector(s->device_matrix);
  auto map = fbb.CreateVector(s->tensor_map);
  auto partial = fbb.CreateVector(s->partial);
  return fb::CreateSlice(fbb, whole, offset, matrix, map, partial);
}

fbs::Offset<fb::Init> WriteInit(fbs::FlatBufferBuilder& fbb, const InitSpec& s, uint64_t data_offset) {
  const bool inline_data = s.kind == InitKind::Inline;
  // A slice of a sharded tensor (graph.h): the whole shape and its offset.
  auto whole = s.global_shape.empty() ? 0 : fbb.CreateVector(s.global_shape);
  auto offset = s.slice_offset.empty() ? 0 : fbb.CreateVector(s.slice_offset);
  return fb::CreateInit(fbb, ToFb(s.kind), s.value, s.low, s.high, s.mean, s.stddev, s.seed, s.fan_in, s.fan_out,
                        inline_data ? data_offset : 0, inline_data ? s.data.size() : 0, whole, offset);
}

bool IsCollective(const TaskDef& task) {
  return std::holds_alternative<AllReduceDef>(task.body) || std::holds_alternative<BroadcastDef>(task.body) ||
         std::holds_alternative<AllGatherDef>(task.body) || std::holds_alternative<ReduceScatterDef>(task.body) ||
         std::holds_alternative<AllToAllDef>(task.body) || std::holds_alternative<SendDef>(task.body) ||
         std::holds_alternative<RecvDef>(task.body);
}

// A fused, blocked AllGather or ReduceScatter (optimizer parallel's buckets).
bool IsBlocked(const TaskDef& task) {
  if (const auto* ag = std::get_if<AllGatherDef>(&task.body)) return !ag->inputs.empty();
  if (const auto* rs = std::get_if<ReduceScatterDef>(&task.body)) return !rs->inputs.empty();
  return false;
}

fbs::Offset<fb::Task> WriteTask(fbs::FlatBufferBuilder& fbb, const TaskDef& task) {
  fb::TaskBody type = fb::TaskBody::NONE;
  fbs::Offset<void> body;
  if (const auto* k = std::get_if<KernelDef>(&task.body)) {
    auto inputs = fbb.CreateVector(k->inputs);
    auto outputs = fbb.CreateVector(k->outputs);
    auto [options_type, options] = host::OpAttrsFor(fbb, k->op, k->attrs);
    type = fb::TaskBody::KernelTask;
    body = fb::CreateKernelTask(fbb, ToFb(k->op), inputs, outputs, options_type, options, k->fused_activation,
                                k->fused_bias)
               .Union();
  } else if (const auto* g = std::get_if<GetNextDef>(&task.body)) {
    type = fb::TaskBody::GetNextTask;
    body = fb::CreateGetNextTask(fbb, g->queue, fbb.CreateVector(g->outputs)).Union();
  } else if (const auto* i = std::get_if<InitTaskDef>(&task.body)) {
    type = fb::TaskBody::InitTask;
    body = fb::CreateInitTask(fbb, fbb.CreateVector(i->initializers)).Union();
  } else if (const auto* r = std::get_if<EventRecordDef>(&task.body)) {
    type = fb::TaskBody::EventRecordTask;
    body = fb::CreateEventRecordTask(fbb, r->event).Union();
  } else if (const auto* w = std::get_if<EventWaitDef>(&task.body)) {
    type = fb::TaskBody::EventWaitTask;
    body = fb::CreateEventWaitTask(fbb, w->event).Union();
  } else if (const auto* a = std::get_if<AllReduceDef>(&task.body)) {
    type = fb::TaskBody::AllReduceTask;
    body = fb::CreateAllReduceTask(fbb, a->group, a->op, fbb.CreateVector(a->buffers)).Union();
  } else if (const auto* b = std::get_if<BroadcastDef>(&task.body)) {
    type = fb::TaskBody::BroadcastTask;
    body = fb::CreateBroadcastTask(fbb, b->group, b->root, fbb.CreateVector(b->buffers)).Union();
  } else if (const auto* ag = std::get_if<AllGatherDef>(&task.body)) {
    type = fb::TaskBody::AllGatherTask;
    auto inputs = ag->inputs.empty() ? 0 : fbb.CreateVector(ag->inputs);
    auto outputs = ag->outputs.empty() ? 0 : fbb.CreateVector(ag->outputs);
    body = fb::CreateAllGatherTask(fbb, ag->group, ag->input, ag->output, inputs, outputs).Union();
  } else if (const auto* rs = std::get_if<ReduceScatterDef>(&task.body)) {
    type = fb::TaskBody::ReduceScatterTask;
    auto inputs = rs->inputs.empty() ? 0 : fbb.CreateVector(rs->inputs);
    auto outputs = rs->outputs.empty() ? 0 : fbb.CreateVector(rs->outputs);
    body = fb::CreateReduceScatterTask(fbb, rs->group, rs->op, rs->input, rs->output, inputs, outputs).Union();
  } else if (const auto* aa = std::get_if<AllToAllDef>(&task.body)) {
    type = fb::TaskBody::AllToAllTask;
    body = fb::CreateAllToAllTask(fbb, aa->group, aa->input, aa->output).Union();
  } else if (const auto* sd = std::get_if<SendDef>(&task.body)) {
    type = fb::TaskBody::SendTask;
    body = fb::CreateSendTask(fbb, sd->group, sd->peer, sd->buffer).Union();
  } else if (const auto* rv = std::get_if<RecvDef>(&task.body)) {
    type = fb::TaskBody::RecvTask;
    body = fb::CreateRecvTask(fbb, rv->group, rv->peer, rv->buffer).Union();
  }
  auto name = fbb.CreateString(task.name);
  return fb::CreateTask(fbb, type, body, name);
}

fbs::Offset<fb::Stream> WriteStream(fbs::FlatBufferBuilder& fbb, const char* name, const std::vector<TaskDef>& defs) {
  std::vector<fbs::Offset<fb::Task>> tasks;
  tasks.reserve(defs.size());
  for (const TaskDef& t : defs) tasks.push_back(WriteTask(fbb, t));
  auto stream_name = fbb.CreateString(name);
  auto tasks_vec = fbb.CreateVector(tasks);
  return fb::CreateStream(fbb, stream_name, tasks_vec);
}

}  // namespace

Result<std::vector<uint8_t>> WriteTaskStream(const LoweredStream& stream, const MemoryPlan& plan,
                                             const StreamHeaderInfo& header) {
  if (plan.offsets.size() != stream.buffers.size())
    return Internal("memory plan has " + std::to_string(plan.offsets.size()) + " offsets for " +
                    std::to_string(stream.buffers.size()) + " buffers");

  fbs::FlatBufferBuilder fbb(64 * 1024);
  fbb.ForceDefaults(false);

  // Blob section layout first: offsets are part of the initialisers.
  std::vector<uint64_t> blob_offsets(stream.initializers.size(), 0);
  uint64_t blob_bytes = 0;
  for (size_t i = 0; i < stream.initializers.size(); ++i) {
    const InitSpec& s = stream.initializers[i].init;
    if (s.kind != InitKind::Inline) continue;
    blob_offsets[i] = AlignUp(blob_bytes, kBlobAlignment);
    blob_bytes = blob_offsets[i] + s.data.size();
  }

  std::vector<fbs::Offset<fb::Buffer>> buffers;
  buffers.reserve(stream.buffers.size());
  for (size_t i = 0; i < stream.buffers.size(); ++i) {
    const BufferDef& b = stream.buffers[i];
    auto name = fbb.CreateString(b.name);
    auto shape = ShapeVector(fbb, b.shape);
    auto slice = WriteSlice(fbb, b.slice);
    buffers.push_back(fb::CreateBuffer(fbb, name, plan.offsets[i], b.bytes, ToFb(b.dtype), shape, ToFb(b.role), slice));
  }
  auto buffers_vec = fbb.CreateVector(buffers);

  std::vector<fbs::Offset<fb::Initializer>> inits;
  for (size_t i = 0; i < stream.initializers.size(); ++i) {
    const InitializerDef& d = stream.initializers[i];
    inits.push_back(fb::CreateInitializer(fbb, d.buffer, WriteInit(fbb, d.init, blob_offsets[i])));
  }
  auto inits_vec = fbb.CreateVector(inits);

  std::vector<fbs::Offset<fb::QueueSpec>> queues;
  for (const QueueDef& q : stream.queues) {
    std::vector<fbs::Offset<fb::QueueColumn>> columns;
    for (const QueueColumnDef& c : q.columns) {
      auto name = fbb.CreateString(c.name);
      auto shape = ShapeVector(fbb, c.shape);
      auto slice = WriteSlice(fbb, c.slice);
      columns.push_back(fb::CreateQueueColumn(fbb, name, ToFb(c.dtype), shape, slice));
    }
    auto name = fbb.CreateString(q.name);
    auto cols = fbb.CreateVector(columns);
    queues.push_back(fb::CreateQueueSpec(fbb, name, q.capacity, cols));
  }
  auto queues_vec = fbb.CreateVector(queues);

  // An older device must refuse a stream that communicates, not meet the
  // first collective task mid-step.
  uint64_t requirements = 0;
  std::vector<fbs::Offset<fb::Program>> programs;
  for (const ProgramDef& p : stream.programs) {
    std::vector<fbs::Offset<fb::Stream>> streams = {WriteStream(fbb, "compute", p.tasks)};
    if (!p.comm_tasks.empty()) streams.push_back(WriteStream(fbb, "comm", p.comm_tasks));
    for (const auto* tasks : {&p.tasks, &p.comm_tasks})
      if (std::any_of(tasks->begin(), tasks->end(), IsCollective)) requirements |= kFeatureCollectives;
    for (const auto* tasks : {&p.tasks, &p.comm_tasks})
      if (std::any_of(tasks->begin(), tasks->end(), IsBlocked)) requirements |= kFeatureBlockedCollectives;
    auto name = fbb.CreateString(p.name);
    auto streams_vec = fbb.CreateVector(streams);
    auto reports = fbb.CreateVector(p.reports);
    // Left out when empty, so programs without sums stay as they were.
    fbs::Offset<fbs::Vector<uint32_t>> accumulators = 0;
    if (!p.accumulators.empty()) accumulators = fbb.CreateVector(p.accumulators);
    programs.push_back(fb::CreateProgram(fbb, name, ToFb(p.kind), streams_vec, p.num_events, reports, accumulators));
  }
  auto programs_vec = fbb.CreateVector(programs);

  // Left out when empty, so a stand-alone stream stays as it was.
  fbs::Offset<fbs::Vector<fbs::Offset<fb::CommGroup>>> groups_vec = 0;
  if (!stream.groups.empty()) {
    std::vector<fbs::Offset<fb::CommGroup>> groups;
    for (const CommGroupDef& g : stream.groups) {
      auto name = fbb.CreateString(g.name);
      auto ranks = fbb.CreateVector(g.ranks);
      groups.push_back(fb::CreateCommGroup(fbb, name, ranks));
    }
    groups_vec = fbb.CreateVector(groups);
  }

  auto target = fbb.CreateString(kTarget);
  auto producer = fbb.CreateString(kProducer);
  auto hdr = fb::CreateHeader(fbb, kFormatMajor, kFormatMinor, header.rank, header.world_size, target,
                              header.graph_hash, requirements, producer);

  auto root =
      fb::CreateTaskStream(fbb, hdr, plan.arena_bytes, static_cast<uint32_t>(plan.alignment), plan.liveness_lower_bound,
                           buffers_vec, inits_vec, queues_vec, groups_vec, programs_vec, blob_bytes);
  fb::FinishSizePrefixedTaskStreamBuffer(fbb, root);

  const uint64_t fb_bytes = fbb.GetSize() - 4;
  std::vector<uint8_t> file(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
  if (blob_bytes > 0) {
    // A stream without blobs ends at the FlatBuffer: stream_format.h treats padding
    // with nothing after it as stray bytes.
    const uint64_t blob_at = BlobSectionOffset(fb_bytes);
    file.resize(blob_at + blob_bytes, 0);
    for (size_t i = 0; i < stream.initializers.size(); ++i) {
      const InitSpec& s = stream.initializers[i].init;
      if (s.kind != InitKind::Inline || s.data.empty()) continue;
      std::copy(s.data.begin(), s.data.end(), file.begin() + blob_at + blob_offsets[i]);
    }
  }
  if (file.size() > kMaxStreamBytes)
    return ResourceExhausted("task stream of " + std::to_string(file.size()) + " bytes exceeds the format's limit of " +
                             std::to_string(kMaxStreamBytes));
  return file;
}

}  // namespace sinkrt::host::compiler
