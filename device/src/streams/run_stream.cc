// One stream's tasks for one step: the executor's inner loop.
#include "device/src/init/initializer.h"
#include "device/src/loaded_job.h"
#include "device/src/team/worker_team.h"
#include "runtime/src/clock.h"
#include "runtime/src/collective_kinds.h"
#include "runtime/src/schema_enums.h"

namespace sinkrt::device {
namespace {

Status RunCollective(Communicator& comm, PreparedTask& pt) {
  switch (pt.kind) {
    case fb::TaskBody::AllReduceTask:
      return comm.AllReduce(pt.data, pt.dtype, pt.op, pt.group);
    case fb::TaskBody::BroadcastTask:
      return comm.Broadcast(pt.data, pt.peer, pt.group);
    case fb::TaskBody::AllGatherTask:
      if (!pt.outs.empty()) return comm.AllGatherBlocked(pt.ins, pt.outs, pt.group);
      return comm.AllGather(pt.data, pt.out, pt.group);
    case fb::TaskBody::ReduceScatterTask:
      if (!pt.outs.empty()) return comm.ReduceScatterBlocked(pt.ins, pt.outs, pt.dtype, pt.op, pt.group);
      return comm.ReduceScatter(pt.data, pt.out, pt.dtype, pt.op, pt.group);
    case fb::TaskBody::AllToAllTask:
      return comm.AllToAll(pt.data, pt.out, pt.group);
    case fb::TaskBody::SendTask:
      return comm.Send(pt.data, pt.peer);
    case fb::TaskBody::RecvTask:
      return comm.Recv(pt.data, pt.peer);
    default:
      return Internal("not a collective");
  }
}

}  // namespace

Status RunStreamStep(LoadedJob& job, PreparedProgram& prog, int s, uint32_t step, uint32_t steps, StreamCounters* c) {
  const fb::TaskStream* root = job.stream.root();
  std::vector<PreparedTask>& tasks = prog.streams[s];
  // Profiling: one branch per task when the step is not recorded.
  ProfileRing* ring = prog.recording ? &job.profile.rings[s] : nullptr;
  auto record = [&](size_t t, int64_t begin, int64_t end, int64_t wait = 0, uint32_t depth = 0) {
    ProfileRecord r;
    r.begin_ns = begin + job.profile.clock_offset_ns;
    r.end_ns = end + job.profile.clock_offset_ns;
    r.wait_ns = wait;
    r.step = prog.profile_step;
    r.task = static_cast<uint32_t>(t);
    r.depth = depth;
    r.stream = static_cast<uint8_t>(s);
    r.program = static_cast<uint8_t>(prog.def->kind());
    ring->Push(r);
  };
  PositionWriter pos(job.positions.cells[s], prog.def->kind(), step + 1, tasks.size());
  auto fail = [&](size_t t, const Status& st) {
    pos.Failed(t);
    c->failed_task = static_cast<int32_t>(t);
    return st.WithContext(TaskLabel(prog, s, t) + " at step " + std::to_string(step + 1) + " of " +
                          std::to_string(steps));
  };
  for (size_t t = 0; t < tasks.size(); ++t) {
    PreparedTask& pt = tasks[t];
    switch (pt.kind) {
      case fb::TaskBody::KernelTask: {
        int64_t t0 = NowNs();
        pos.Enter(t, StreamState::kKernel, t0);
        Status st = pt.kernel->run(pt.args, pt.state.get(), s == 0 ? job.run_ctx : job.side_run_ctx);
        const int64_t dt = NowNs() - t0;
        c->compute_ns += dt;
        pt.ns += dt;
        if (ring) record(t, t0, t0 + dt);
        if (!st.ok()) return fail(t, st);
        break;
      }
      case fb::TaskBody::GetNextTask: {
        const uint32_t depth = ring ? pt.queue->size() : 0;
        int64_t t0 = NowNs();
        pos.Enter(t, StreamState::kGetNext, t0);
        int64_t waited = 0;
        Status st = pt.queue->Pop(pt.dst, job.options.get_next_timeout, &waited, s == 0 ? job.team.get() : nullptr);
        const int64_t dt = NowNs() - t0;
        c->queue_wait_ns += waited;
        c->copy_ns += dt - waited;
        pt.ns += dt;
        if (ring) record(t, t0, t0 + dt, waited, depth);
        if (!st.ok()) return fail(t, st);
        break;
      }
      case fb::TaskBody::EventRecordTask:
        prog.events->Record(pt.event);
        if (ring) {
          const int64_t now = NowNs();
          record(t, now, now);
        }
        break;
      case fb::TaskBody::EventWaitTask: {
        int64_t t0 = NowNs();
        pos.Enter(t, StreamState::kEventWait, t0);
        bool met = prog.events->Wait(pt.event);
        const int64_t dt = NowNs() - t0;
        (pt.waits_on_neighbour ? c->bubble_ns : c->event_wait_ns) += dt;
        pt.ns += dt;
        if (ring) record(t, t0, t0 + dt);
        if (!met) return fail(t, Aborted("the other stream of this step failed"));
        break;
      }
      case fb::TaskBody::InitTask: {
        int64_t t0 = NowNs();
        pos.Enter(t, StreamState::kKernel, t0);
        for (uint32_t i : pt.initializers) {
          const fb::Initializer* in = root->initializers()->Get(i);
          const fb::Buffer* b = root->buffers()->Get(in->buffer());
          TensorRef out;
          out.data = job.arena.data() + b->offset();
          out.dtype = FromFb(b->dtype());
          if (b->shape()) out.shape.assign(b->shape()->begin(), b->shape()->end());
          out.numel = NumElements(out.shape);
          Status st = FillInitializer(*in->init(), out, job.stream.blobs());
          if (!st.ok())
            return fail(t, st.WithContext("initializer " + std::to_string(i) + " ('" + b->name()->str() + "')"));
        }
        const int64_t dt = NowNs() - t0;
        c->compute_ns += dt;
        pt.ns += dt;
        if (ring) record(t, t0, t0 + dt);
        break;
      }
      default: {
        if (!IsCollective(pt.kind)) return Internal(TaskLabel(prog, s, t) + ": unprepared task kind");
        int64_t t0 = NowNs();
        pos.Enter(t, StreamState::kCollective, t0);
        Status st = RunCollective(*job.comm, pt);
        const int64_t dt = NowNs() - t0;
        c->comm_ns += dt;
        pt.ns += dt;
        if (ring) record(t, t0, t0 + dt);
        if (!st.ok()) return fail(t, st);
        break;
      }
    }
  }
  pos.Done();
  return Status::Ok();
}

}  // namespace sinkrt::device
