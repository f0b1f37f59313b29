#include "host/src/job/stream_report.h"

#include <algorithm>
#include <string>
#include <utility>

#include "host/src/util/schema_enums.h"
#include "sinkrt/fb/task_stream_generated.h"

namespace sinkrt::host::job {
namespace {

bool IsPersistent(BufferRole role) {
  switch (role) {
    case BufferRole::Param:
    case BufferRole::Grad:
    case BufferRole::OptState:
    case BufferRole::Const:
    case BufferRole::Output:
    case BufferRole::State:
      return true;
    default:
      return false;
  }
}

size_t TaskCount(const fb::Program* p, const char* stream) {
  if (!p || !p->streams()) return 0;
  for (const fb::Stream* s : *p->streams())
    if (s->name() && s->name()->str() == stream && s->tasks()) return s->tasks()->size();
  return 0;
}

std::vector<std::string> Names(const std::vector<ColumnSpec>& columns) {
  std::vector<std::string> out;
  for (const ColumnSpec& c : columns) out.push_back(c.name);
  return out;
}

}  // namespace

std::vector<ColumnSpec> QueueColumns(const VerifiedStream& stream, std::string_view name) {
  std::vector<ColumnSpec> out;
  if (!stream.root()->queues()) return out;
  for (const fb::QueueSpec* q : *stream.root()->queues()) {
    if (!q->name() || q->name()->string_view() != name || !q->columns()) continue;
    for (const fb::QueueColumn* c : *q->columns()) {
      ColumnSpec col{.name = c->name() ? c->name()->str() : "", .dtype = FromFb(c->dtype()), .shape = {}};
      if (c->shape()) col.shape.assign(c->shape()->begin(), c->shape()->end());
      out.push_back(std::move(col));
    }
  }
  return out;
}

std::optional<StreamSlice> ReadSlice(const fb::Slice* s) {
  if (!s) return std::nullopt;
  StreamSlice out;
  if (s->global_shape()) out.global_shape.assign(s->global_shape()->begin(), s->global_shape()->end());
  if (s->offset()) out.offset.assign(s->offset()->begin(), s->offset()->end());
  if (s->device_matrix()) out.device_matrix.assign(s->device_matrix()->begin(), s->device_matrix()->end());
  if (s->tensor_map()) out.tensor_map.assign(s->tensor_map()->begin(), s->tensor_map()->end());
  if (s->partial()) out.partial.assign(s->partial()->begin(), s->partial()->end());
  return out;
}

std::vector<std::optional<StreamSlice>> QueueSlices(const VerifiedStream& stream, std::string_view name) {
  std::vector<std::optional<StreamSlice>> out;
  if (!stream.root()->queues()) return out;
  for (const fb::QueueSpec* q : *stream.root()->queues()) {
    if (!q->name() || q->name()->string_view() != name || !q->columns()) continue;
    for (const fb::QueueColumn* c : *q->columns()) out.push_back(ReadSlice(c->slice()));
  }
  return out;
}

CompiledStream CompiledStreamFrom(VerifiedStream stream) {
  CompiledStream out{
      .stream = std::move(stream), .report = {}, .graph_hash = 0, .input_columns = {}, .predict_columns = {}};
  const VerifiedStream& view = out.stream;
  const fb::TaskStream& ts = *view.root();
  out.graph_hash = ts.header()->graph_hash();
  CompileReport& r = out.report;
  r.arena_bytes = ts.arena_bytes();
  r.liveness_lower_bound = ts.liveness_lower_bound();
  const fb::Program* train = view.FindProgram(ProgramKind::TrainStep);
  r.train_tasks = TaskCount(train, "compute");
  r.comm_tasks = TaskCount(train, "comm");
  r.eval_tasks = TaskCount(view.FindProgram(ProgramKind::EvalStep), "compute");
  r.predict_tasks = TaskCount(view.FindProgram(ProgramKind::PredictStep), "compute");
  if (train && train->streams())
    for (const fb::Stream* s : *train->streams())
      for (const fb::Task* t : *s->tasks())
        if (t->body_type() == fb::TaskBody::KernelTask &&
            (t->body_as_KernelTask()->fused_bias() >= 0 ||
             t->body_as_KernelTask()->fused_activation() != fb::Activation::None))
          ++r.fused_kernels;
  for (const fb::Buffer* b : *ts.buffers()) {
    PlannedBuffer pb{.name = b->name() ? b->name()->str() : "",
                     .offset = b->offset(),
                     .bytes = b->bytes(),
                     .role = FromFb(b->role())};
    if (IsPersistent(FromFb(b->role()))) {
      // As the planner lays them: back to back, each aligned.
      const uint64_t a = ts.arena_alignment();
      r.persistent_bytes += (b->bytes() + a - 1) / a * a;
      pb.program = ProgramKind::Init;
    }
    r.buffers.push_back(std::move(pb));
  }
  r.activation_bytes = ArenaBytesOf(r.buffers, BufferRole::Activation);
  // One bucket per AllReduce of train_step's comm stream, in its order.
  if (train && train->streams())
    for (const fb::Stream* s : *train->streams()) {
      if (!s->name() || s->name()->str() != "comm") continue;
      for (const fb::Task* t : *s->tasks()) {
        if (t->body_type() != fb::TaskBody::AllReduceTask) continue;
        GradientBucket bucket;
        uint64_t end = 0;
        bool first = true;
        for (uint32_t index : *t->body_as_AllReduceTask()->buffers()) {
          const fb::Buffer* b = ts.buffers()->Get(index);
          bucket.gradients.push_back(b->name() ? b->name()->str() : "");
          if (first || b->offset() < bucket.offset) bucket.offset = b->offset();
          end = std::max(end, b->offset() + b->bytes());
          first = false;
        }
        bucket.bytes = end - bucket.offset;
        r.buckets.push_back(std::move(bucket));
      }
    }
  out.input_columns = Names(QueueColumns(view, "train"));
  out.predict_columns = Names(QueueColumns(view, "predict"));
  return out;
}

}  // namespace sinkrt::host::job
