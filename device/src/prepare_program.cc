// Load-time resolution of a program's tasks: kernels prepared (oneDNN
// primitives created), queues and arena pointers looked up, collectives'
// byte ranges and groups checked, so nothing is looked up while a sink runs.
#include <string>

#include "device/src/loaded_job.h"
#include "runtime/src/collective_kinds.h"
#include "runtime/src/schema_enums.h"
#include "runtime/src/stream_names.h"
#include "sinkrt/runtime/collective_use.h"
#include "sinkrt/runtime/dtype.h"

namespace sinkrt::device {
namespace {

TensorRef MakeRef(const LoadedJob& job, uint32_t index) {
  const fb::Buffer* b = job.stream.root()->buffers()->Get(index);
  TensorRef r;
  r.data = job.arena.data() + b->offset();
  r.dtype = FromFb(b->dtype());
  if (b->shape()) r.shape.assign(b->shape()->begin(), b->shape()->end());
  r.numel = NumElements(r.shape);
  return r;
}

const fb::Buffer* BufferDef(const LoadedJob& job, uint32_t index) { return job.stream.root()->buffers()->Get(index); }

std::span<uint8_t> Bytes(const LoadedJob& job, uint32_t index) {
  const fb::Buffer* b = BufferDef(job, index);
  return {job.arena.data() + b->offset(), b->bytes()};
}

// The arena range of a fused collective's `buffers` and their dtype. The
// verifier has checked that they are contiguous, ascending and of one dtype
// (VerifyTaskStream); the padding between them is reduced along with them
// and never read.
void Region(const LoadedJob& job, const flatbuffers::Vector<uint32_t>* buffers, std::span<uint8_t>* region,
            DType* dtype) {
  const fb::Buffer* first = BufferDef(job, buffers->Get(0));
  const fb::Buffer* last = BufferDef(job, buffers->Get(buffers->size() - 1));
  *dtype = FromFb(first->dtype());
  *region = {job.arena.data() + first->offset(), last->offset() + last->bytes() - first->offset()};
}

Status PrepareGroup(const LoadedJob& job, uint32_t index, const std::string& where, Group* group) {
  const auto* groups = job.stream.root()->groups();
  if (!groups || index >= groups->size())
    return OutOfRange(where + ": communicator group " + std::to_string(index) + " does not exist");
  const fb::CommGroup* g = groups->Get(index);
  group->ranks.assign(g->ranks()->begin(), g->ranks()->end());
  if (!job.comm) return FailedPrecondition(where + ": the stream has collectives but the device joined no world");
  bool member = false;
  for (uint32_t r : group->ranks) {
    if (r >= job.comm->size())
      return OutOfRange(where + ": group '" + (g->name() ? g->name()->str() : "") + "' names rank " +
                        std::to_string(r) + " of a world of " + std::to_string(job.comm->size()));
    member |= r == job.comm->rank();
  }
  if (!member)
    return InvalidArgument(where + ": this device (rank " + std::to_string(job.comm->rank()) +
                           ") is not a member of group '" + (g->name() ? g->name()->str() : "") + "'");
  return Status::Ok();
}

bool Blocked(const flatbuffers::Vector<uint32_t>* outputs) { return outputs && outputs->size() > 0; }

// A blocked AllGather's or ReduceScatter's pairs (the verifier has checked
// their lengths, dtypes and sizes), and the working copy its ring needs,
// reserved now so that no step allocates it. `scatter`: the inputs are
// members x the outputs (else the other way round).
Status PrepareBlocked(LoadedJob& job, const flatbuffers::Vector<uint32_t>* inputs,
                      const flatbuffers::Vector<uint32_t>* outputs, bool scatter, const std::string& where,
                      PreparedTask* pt) {
  const size_t members = pt->group.ranks.size();
  size_t chunk = 0;
  for (uint32_t i = 0; i < outputs->size(); ++i) {
    pt->ins.push_back(Bytes(job, inputs->Get(i)));
    pt->outs.push_back(Bytes(job, outputs->Get(i)));
    const size_t whole = scatter ? pt->ins.back().size() : pt->outs.back().size();
    const size_t block = scatter ? pt->outs.back().size() : pt->ins.back().size();
    if (whole != block * members)
      return InvalidArgument(where + ": pair " + std::to_string(i) + " of " + std::to_string(whole) + " and " +
                             std::to_string(block) + " bytes is not " + std::to_string(members) + " equal blocks");
    chunk += block;
  }
  pt->dtype = FromFb(BufferDef(job, inputs->Get(0))->dtype());
  if (members > 1) job.comm->ReserveScratch(members * chunk);
  return Status::Ok();
}

Status PrepareCollective(LoadedJob& job, const fb::Task* task, const std::string& where, PreparedTask* pt) {
  switch (task->body_type()) {
    case fb::TaskBody::AllReduceTask: {
      auto* t = task->body_as_AllReduceTask();
      pt->op = t->op();
      SINKRT_RETURN_IF_ERROR(PrepareGroup(job, t->group(), where, &pt->group));
      Region(job, t->buffers(), &pt->data, &pt->dtype);
      return Status::Ok();
    }
    case fb::TaskBody::BroadcastTask: {
      auto* t = task->body_as_BroadcastTask();
      pt->peer = t->root();
      SINKRT_RETURN_IF_ERROR(PrepareGroup(job, t->group(), where, &pt->group));
      if (std::find(pt->group.ranks.begin(), pt->group.ranks.end(), pt->peer) == pt->group.ranks.end())
        return InvalidArgument(where + ": broadcast root " + std::to_string(pt->peer) + " is not in its group");
      Region(job, t->buffers(), &pt->data, &pt->dtype);
      return Status::Ok();
    }
    case fb::TaskBody::AllGatherTask: {
      auto* t = task->body_as_AllGatherTask();
      SINKRT_RETURN_IF_ERROR(PrepareGroup(job, t->group(), where, &pt->group));
      if (Blocked(t->outputs())) return PrepareBlocked(job, t->inputs(), t->outputs(), false, where, pt);
      pt->data = Bytes(job, t->input());
      pt->out = Bytes(job, t->output());
      pt->dtype = FromFb(BufferDef(job, t->input())->dtype());
      if (pt->out.size() != pt->data.size() * pt->group.ranks.size())
        return InvalidArgument(where + ": output of " + std::to_string(pt->out.size()) + " bytes is not " +
                               std::to_string(pt->group.ranks.size()) + " x the input's " +
                               std::to_string(pt->data.size()));
      return Status::Ok();
    }
    case fb::TaskBody::ReduceScatterTask: {
      auto* t = task->body_as_ReduceScatterTask();
      pt->op = t->op();
      SINKRT_RETURN_IF_ERROR(PrepareGroup(job, t->group(), where, &pt->group));
      if (Blocked(t->outputs())) return PrepareBlocked(job, t->inputs(), t->outputs(), true, where, pt);
      pt->data = Bytes(job, t->input());
      pt->out = Bytes(job, t->output());
      pt->dtype = FromFb(BufferDef(job, t->input())->dtype());
      if (pt->data.size() != pt->out.size() * pt->group.ranks.size())
        return InvalidArgument(where + ": input of " + std::to_string(pt->data.size()) + " bytes is not " +
                               std::to_string(pt->group.ranks.size()) + " x the output's " +
                               std::to_string(pt->out.size()));
      if (pt->group.ranks.size() > 1) job.comm->ReserveScratch(pt->data.size());
      return Status::Ok();
    }
    case fb::TaskBody::AllToAllTask: {
      auto* t = task->body_as_AllToAllTask();
      SINKRT_RETURN_IF_ERROR(PrepareGroup(job, t->group(), where, &pt->group));
      pt->data = Bytes(job, t->input());
      pt->out = Bytes(job, t->output());
      pt->dtype = FromFb(BufferDef(job, t->input())->dtype());
      if (pt->data.size() != pt->out.size() || pt->data.size() % pt->group.ranks.size() != 0)
        return InvalidArgument(where + ": input of " + std::to_string(pt->data.size()) + " bytes and output of " +
                               std::to_string(pt->out.size()) + " bytes are not equal blocks for " +
                               std::to_string(pt->group.ranks.size()) + " members");
      return Status::Ok();
    }
    case fb::TaskBody::SendTask:
    case fb::TaskBody::RecvTask: {
      bool send = task->body_type() == fb::TaskBody::SendTask;
      uint32_t group = send ? task->body_as_SendTask()->group() : task->body_as_RecvTask()->group();
      pt->peer = send ? task->body_as_SendTask()->peer() : task->body_as_RecvTask()->peer();
      uint32_t buffer = send ? task->body_as_SendTask()->buffer() : task->body_as_RecvTask()->buffer();
      SINKRT_RETURN_IF_ERROR(PrepareGroup(job, group, where, &pt->group));
      if (pt->peer >= job.comm->size() || pt->peer == job.comm->rank())
        return InvalidArgument(where + ": peer " + std::to_string(pt->peer) + " is not another rank of the world");
      pt->data = Bytes(job, buffer);
      return Status::Ok();
    }
    default:
      return Internal(where + ": not a collective");
  }
}

// Whether the rendezvous connected every peer this collective's schedules
// talk to: a stream that runs what its JoinWorld did not list is refused
// here, naming the pair, rather than failing in the middle of a sink.
Status CheckLinks(const LoadedJob& job, const PreparedTask& pt) {
  const uint32_t use = CollectiveUseOf(pt.kind);
  if (use != kUsesSendRecv) return job.comm->CheckLinks(pt.group, use);
  const uint32_t self = job.comm->rank();
  return job.comm->CheckLinks(Group{{std::min(self, pt.peer), std::max(self, pt.peer)}}, use);
}

}  // namespace

std::string TaskLabel(const PreparedProgram& p, int stream, size_t t) {
  const fb::Task* task = p.streams[stream][t].def;
  std::string label = std::string(ProgramKindName(p.def->kind()));
  if (p.num_streams > 1) label += stream == 0 ? " compute stream" : " comm stream";
  label += " task " + std::to_string(t);
  if (task->name() && task->name()->size()) label += " '" + task->name()->str() + "'";
  if (task->body_type() == fb::TaskBody::KernelTask)
    label += " (" + std::string(OpCodeName(task->body_as_KernelTask()->op())) + ")";
  else
    label += " (" + std::string(TaskKindName(task->body_type())) + ")";
  return label;
}

Status PrepareProgram(LoadedJob& job, const fb::Program* def, PrepareContext& pctx, PreparedProgram* out) {
  out->def = def;
  std::string pname(ProgramKindName(def->kind()));
  SINKRT_RETURN_IF_ERROR(PrepareAccumulators(job, def, out));
  if (!def->streams() || def->streams()->size() == 0) return Status::Ok();
  if (def->streams()->size() > kMaxStreams)
    return Unimplemented("program " + pname + " has " + std::to_string(def->streams()->size()) +
                         " streams; this device runs at most " + std::to_string(kMaxStreams) +
                         " (compute and communication)");
  out->num_streams = static_cast<int>(def->streams()->size());
  out->events->counts.assign(def->num_events(), 0);
  std::vector<bool> recorded(def->num_events(), false);
  // The done events of point-to-point transfers: what a comm stream records
  // right after a Send or Recv (parallel/pipeline_comm.h). The compute
  // stream waiting on one waits for a neighbour stage, which DeviceTiming
  // reports as bubble rather than as communication not hidden.
  std::vector<bool> transfer_done(def->num_events(), false);
  // Records of every stream, for the cross-stream wait check below.
  for (int s = 0; s < out->num_streams; ++s) {
    const auto* tasks = def->streams()->Get(s)->tasks();
    if (!tasks) continue;
    bool after_transfer = false;
    for (const fb::Task* task : *tasks) {
      const fb::TaskBody kind = task->body_type();
      if (kind == fb::TaskBody::EventRecordTask) {
        const uint32_t e = task->body_as_EventRecordTask()->event();
        recorded[e] = true;
        if (s > 0 && after_transfer) transfer_done[e] = true;
      } else {
        after_transfer = kind == fb::TaskBody::SendTask || kind == fb::TaskBody::RecvTask;
      }
    }
  }
  for (int s = 0; s < out->num_streams; ++s) {
    const auto* tasks = def->streams()->Get(s)->tasks();
    size_t n = tasks ? tasks->size() : 0;
    out->streams[s].resize(n);  // never resized again: kernels may keep pointers into args
    std::vector<bool> recorded_before(def->num_events(), false);
    for (size_t t = 0; t < n; ++t) {
      const fb::Task* task = tasks->Get(static_cast<uint32_t>(t));
      PreparedTask& pt = out->streams[s][t];
      pt.kind = task->body_type();
      pt.def = task;
      switch (pt.kind) {
        case fb::TaskBody::KernelTask: {
          const fb::KernelTask* k = task->body_as_KernelTask();
          pt.kernel = FindKernel(k->op());
          if (!pt.kernel)
            return Unimplemented(TaskLabel(*out, s, t) + ": no kernel for op " + std::string(OpCodeName(k->op())));
          pt.args.task = k;
          if (k->inputs())
            for (uint32_t i : *k->inputs()) pt.args.inputs.push_back(MakeRef(job, i));
          if (k->outputs())
            for (uint32_t i : *k->outputs()) pt.args.outputs.push_back(MakeRef(job, i));
          if (k->fused_bias() >= 0) pt.args.fused_bias = MakeRef(job, static_cast<uint32_t>(k->fused_bias()));
          // Only the compute stream's kernels split across the team
          // (LoadedJob::side_run_ctx).
          PrepareContext stream_ctx = pctx;
          if (s != 0) stream_ctx.team_size = 1;
          const Status st = pt.kernel->prepare(pt.args, stream_ctx, &pt.state);
          pctx.scratch_bytes = stream_ctx.scratch_bytes;
          SINKRT_RETURN_IF_ERROR(st, TaskLabel(*out, s, t));
          break;
        }
        case fb::TaskBody::GetNextTask: {
          const fb::GetNextTask* g = task->body_as_GetNextTask();
          pt.queue = job.queues[g->queue()].get();
          for (uint32_t i : *g->outputs()) pt.dst.push_back(job.arena.data() + BufferDef(job, i)->offset());
          break;
        }
        case fb::TaskBody::EventRecordTask:
          pt.event = task->body_as_EventRecordTask()->event();
          recorded_before[pt.event] = true;
          break;
        case fb::TaskBody::EventWaitTask:
          pt.event = task->body_as_EventWaitTask()->event();
          // A wait no task records, or (with one stream) records only later,
          // can never be met: the step would deadlock.
          if (!recorded[pt.event] || (out->num_streams == 1 && !recorded_before[pt.event]))
            return InvalidArgument(TaskLabel(*out, s, t) + ": waits on event " + std::to_string(pt.event) +
                                   " that no earlier task records (the step would deadlock)");
          pt.waits_on_neighbour = s == 0 && transfer_done[pt.event];
          break;
        case fb::TaskBody::InitTask:
          if (task->body_as_InitTask()->initializers())
            pt.initializers.assign(task->body_as_InitTask()->initializers()->begin(),
                                   task->body_as_InitTask()->initializers()->end());
          break;
        default:
          if (IsCollective(pt.kind)) {
            SINKRT_RETURN_IF_ERROR(PrepareCollective(job, task, TaskLabel(*out, s, t), &pt));
            SINKRT_RETURN_IF_ERROR(CheckLinks(job, pt), TaskLabel(*out, s, t));
            break;
          }
          return Unimplemented(TaskLabel(*out, s, t) + ": task kind not supported by this device");
      }
    }
  }
  return Status::Ok();
}

}  // namespace sinkrt::device
