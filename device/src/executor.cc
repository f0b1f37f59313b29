#include "sinkrt/device/executor.h"

#include <omp.h>

#include <atomic>
#include <chrono>
#include <string>
#include <vector>

#include "arena.h"
#include "data_queue.h"
#include "init/initializer.h"
#include "kernels/dnnl_runtime.h"
#include "kernels/kernel.h"
#include "sinkrt/runtime/dtype.h"

namespace sinkrt::device {
namespace {

inline int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

// A task resolved at load: the loop in Run only switches on `kind`.
struct PreparedTask {
  fb::TaskBody kind = fb::TaskBody::NONE;
  const fb::Task* def = nullptr;
  // Kernel
  const KernelImpl* kernel = nullptr;
  KernelArgs args;
  std::unique_ptr<KernelState> state;
  // GetNext
  DataQueue* queue = nullptr;
  std::vector<uint8_t*> dst;
  // Events
  uint32_t event = 0;
  // Init
  std::vector<uint32_t> initializers;
};

struct PreparedProgram {
  const fb::Program* def = nullptr;
  std::vector<PreparedTask> tasks;   // one stream (multi-stream arrives with collectives)
  std::vector<uint64_t> event_counts;
};

struct LoadedJob {
  StreamView view;
  DeviceOptions options;
  int threads = 1;
  PageBlock arena;
  PageBlock scratch;
  std::vector<std::unique_ptr<DataQueue>> queues;
  std::unique_ptr<DnnlRuntime> dnnl;
  static constexpr int kPrograms = static_cast<int>(fb::ProgramKind::MAX) + 1;
  PreparedProgram programs[kPrograms];  // by ProgramKind
  bool has_program[kPrograms] = {};
  RunContext run_ctx;
  std::atomic<bool> cancelled{false};
};

int AvailableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  return 1;
}

Executor::Executor() = default;
Executor::~Executor() {
  if (job_) CloseQueues();
}

namespace {

TensorRef MakeRef(const LoadedJob& job, uint32_t index) {
  const fb::Buffer* b = job.view.root->buffers()->Get(index);
  TensorRef r;
  r.data = job.arena.data() + b->offset();
  r.dtype = b->dtype();
  if (b->shape()) r.shape.assign(b->shape()->begin(), b->shape()->end());
  r.numel = NumElements(r.shape);
  return r;
}

std::string TaskLabel(const PreparedProgram& p, size_t t) {
  const fb::Task* task = p.tasks[t].def;
  std::string label = std::string(ProgramKindName(p.def->kind())) + " task " + std::to_string(t);
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
  if (!def->streams() || def->streams()->size() == 0) return Status::Ok();
  if (def->streams()->size() > 1)
    return Unimplemented("program " + pname + " has " + std::to_string(def->streams()->size()) +
                         " streams; this device runs one stream per program");
  const auto* tasks = def->streams()->Get(0)->tasks();
  size_t n = tasks ? tasks->size() : 0;
  out->tasks.resize(n);  // never resized again: kernels may keep pointers into args
  out->event_counts.assign(def->num_events(), 0);
  std::vector<bool> recorded(def->num_events(), false);
  for (size_t t = 0; t < n; ++t) {
    const fb::Task* task = tasks->Get(static_cast<uint32_t>(t));
    PreparedTask& pt = out->tasks[t];
    pt.kind = task->body_type();
    pt.def = task;
    switch (pt.kind) {
      case fb::TaskBody::KernelTask: {
        const fb::KernelTask* k = task->body_as_KernelTask();
        pt.kernel = FindKernel(k->op());
        if (!pt.kernel)
          return Unimplemented(TaskLabel(*out, t) + ": no kernel for op " + std::string(OpCodeName(k->op())));
        pt.args.task = k;
        if (k->inputs())
          for (uint32_t i : *k->inputs()) pt.args.inputs.push_back(MakeRef(job, i));
        if (k->outputs())
          for (uint32_t i : *k->outputs()) pt.args.outputs.push_back(MakeRef(job, i));
        if (k->fused_bias() >= 0) pt.args.fused_bias = MakeRef(job, static_cast<uint32_t>(k->fused_bias()));
        Status st = pt.kernel->prepare(pt.args, pctx, &pt.state);
        if (!st.ok()) return st.WithContext(TaskLabel(*out, t));
        break;
      }
      case fb::TaskBody::GetNextTask: {
        const fb::GetNextTask* g = task->body_as_GetNextTask();
        pt.queue = job.queues[g->queue()].get();
        for (uint32_t i : *g->outputs()) pt.dst.push_back(job.arena.data() + job.view.root->buffers()->Get(i)->offset());
        break;
      }
      case fb::TaskBody::EventRecordTask:
        pt.event = task->body_as_EventRecordTask()->event();
        recorded[pt.event] = true;
        break;
      case fb::TaskBody::EventWaitTask:
        pt.event = task->body_as_EventWaitTask()->event();
        // With one stream, a wait whose record comes later can never be met.
        if (!recorded[pt.event])
          return InvalidArgument(TaskLabel(*out, t) + ": waits on event " + std::to_string(pt.event) +
                                 " that no earlier task records (the step would deadlock)");
        break;
      case fb::TaskBody::InitTask:
        if (task->body_as_InitTask()->initializers())
          pt.initializers.assign(task->body_as_InitTask()->initializers()->begin(),
                                 task->body_as_InitTask()->initializers()->end());
        break;
      default:
        return Unimplemented(TaskLabel(*out, t) + ": task kind not supported by this device");
    }
  }
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<Executor>> Executor::Load(std::span<const uint8_t> stream, const DeviceOptions& options) {
  auto job = std::make_unique<LoadedJob>();
  SINKRT_ASSIGN_OR_RETURN(job->view, VerifyTaskStream(stream));
  job->options = options;
  int cores = AvailableCores();
  job->threads = options.threads > 0 && options.threads < cores ? options.threads : cores;
  const fb::TaskStream* root = job->view.root;

  SINKRT_ASSIGN_OR_RETURN(job->arena, PageBlock::Allocate(root->arena_bytes(), options.prefault));
  if (root->queues())
    for (const fb::QueueSpec* spec : *root->queues()) {
      auto q = std::make_unique<DataQueue>();
      SINKRT_RETURN_IF_ERROR(q->Init(*spec, options.prefault));
      job->queues.push_back(std::move(q));
    }

  try {
    job->dnnl = std::make_unique<DnnlRuntime>();
    job->dnnl->engine = dnnl::engine(dnnl::engine::kind::cpu, 0);
    job->dnnl->stream = dnnl::stream(job->dnnl->engine);
  } catch (const dnnl::error& e) {
    return Internal(std::string("cannot create the oneDNN CPU engine: ") + e.what());
  }

  PrepareContext pctx;
  pctx.dnnl = job->dnnl.get();
  if (root->programs())
    for (const fb::Program* p : *root->programs()) {
      auto k = static_cast<uint8_t>(p->kind());
      job->has_program[k] = true;
      SINKRT_RETURN_IF_ERROR(PrepareProgram(*job, p, pctx, &job->programs[k]));
    }
  SINKRT_ASSIGN_OR_RETURN(job->scratch, PageBlock::Allocate(pctx.scratch_bytes, options.prefault));
  job->run_ctx.dnnl = job->dnnl.get();
  job->run_ctx.scratch = job->scratch.data();

  // Start the OpenMP team now: its first parallel region allocates.
  omp_set_num_threads(job->threads);
#pragma omp parallel
  { (void)omp_get_thread_num(); }

  std::unique_ptr<Executor> ex(new Executor());
  ex->job_ = std::move(job);
  SINKRT_RETURN_IF_ERROR(ex->RunInit());
  return ex;
}

Status Executor::RunInit() {
  RunStats stats;
  if (!job_->has_program[static_cast<uint8_t>(ProgramKind::Init)]) return Status::Ok();
  return Run(ProgramKind::Init, 1, &stats);
}

Status Executor::Run(ProgramKind kind, uint32_t steps, RunStats* stats) {
  LoadedJob& job = *job_;
  auto k = static_cast<uint8_t>(kind);
  if (k >= LoadedJob::kPrograms || !job.has_program[k])
    return NotFound("the loaded task stream has no " + std::string(ProgramKindName(kind)) + " program");
  PreparedProgram& prog = job.programs[k];
  // The OpenMP thread count is per calling thread: set it on whichever
  // thread drives this sink.
  omp_set_num_threads(job.threads);
  const int64_t t_start = NowNs();
  const auto timeout = job.options.get_next_timeout;
  const fb::TaskStream* root = job.view.root;
  for (uint32_t step = 0; step < steps; ++step) {
    for (uint64_t& c : prog.event_counts) c = 0;
    for (size_t t = 0; t < prog.tasks.size(); ++t) {
      PreparedTask& pt = prog.tasks[t];
      switch (pt.kind) {
        case fb::TaskBody::KernelTask: {
          int64_t t0 = NowNs();
          Status st = pt.kernel->run(pt.args, pt.state.get(), job.run_ctx);
          stats->compute_ns += NowNs() - t0;
          if (!st.ok()) {
            stats->failed_task = static_cast<int32_t>(t);
            return st.WithContext(TaskLabel(prog, t) + " at step " + std::to_string(step + 1) + " of " +
                                  std::to_string(steps));
          }
          break;
        }
        case fb::TaskBody::GetNextTask: {
          int64_t t0 = NowNs();
          int64_t waited = 0;
          Status st = pt.queue->Pop(pt.dst, timeout, &waited);
          stats->queue_wait_ns += waited;
          stats->copy_ns += NowNs() - t0 - waited;
          if (!st.ok()) {
            stats->failed_task = static_cast<int32_t>(t);
            return st.WithContext(TaskLabel(prog, t) + " at step " + std::to_string(step + 1) + " of " +
                                  std::to_string(steps));
          }
          break;
        }
        case fb::TaskBody::EventRecordTask:
          ++prog.event_counts[pt.event];
          break;
        case fb::TaskBody::EventWaitTask:
          break;  // one stream: program order already satisfies it (checked at load)
        case fb::TaskBody::InitTask: {
          int64_t t0 = NowNs();
          for (uint32_t i : pt.initializers) {
            const fb::Initializer* in = root->initializers()->Get(i);
            TensorRef out = MakeRef(job, in->buffer());
            Status st = FillInitializer(*in->init(), out, job.view.blobs);
            if (!st.ok()) stats->failed_task = static_cast<int32_t>(t);
            if (!st.ok())
              return st.WithContext(TaskLabel(prog, t) + " initializer " + std::to_string(i) + " ('" +
                                    root->buffers()->Get(in->buffer())->name()->str() + "')");
          }
          stats->compute_ns += NowNs() - t0;
          break;
        }
        default:
          return Internal(TaskLabel(prog, t) + ": unprepared task kind");
      }
    }
    ++stats->steps;
    // A job being torn down (its host left) stops between steps.
    if (job.cancelled.load(std::memory_order_relaxed) && step + 1 < steps) {
      stats->wall_ns += NowNs() - t_start;
      return Aborted(std::string(ProgramKindName(kind)) + " cancelled after step " + std::to_string(step + 1) + " of " +
                     std::to_string(steps));
    }
  }
  stats->wall_ns += NowNs() - t_start;
  return Status::Ok();
}

const StreamView& Executor::view() const { return job_->view; }
uint32_t Executor::num_queues() const { return static_cast<uint32_t>(job_->queues.size()); }
DataQueue& Executor::queue(uint32_t index) { return *job_->queues[index]; }
uint64_t Executor::arena_bytes() const { return job_->arena.size(); }
uint64_t Executor::scratch_bytes() const { return job_->scratch.size(); }
int Executor::threads() const { return job_->threads; }

Status Executor::PushBatch(uint32_t queue, std::span<const ConstBytes> columns) {
  if (queue >= job_->queues.size())
    return OutOfRange("queue index " + std::to_string(queue) + " is outside the stream's " +
                      std::to_string(job_->queues.size()) + " queues");
  return job_->queues[queue]->Push(columns, job_->options.push_timeout);
}

Status Executor::ClearQueue(uint32_t queue) {
  if (queue >= job_->queues.size())
    return OutOfRange("queue index " + std::to_string(queue) + " is outside the stream's " +
                      std::to_string(job_->queues.size()) + " queues");
  job_->queues[queue]->Clear();
  return Status::Ok();
}

uint32_t Executor::queue_high_water_mark(uint32_t index) const { return job_->queues.at(index)->high_water_mark(); }

uint64_t Executor::queue_bytes() const {
  uint64_t n = 0;
  for (const auto& q : job_->queues) n += q->batch_bytes() * q->capacity();
  return n;
}

Result<std::span<uint8_t>> Executor::Buffer(uint32_t index) {
  const auto* buffers = job_->view.root->buffers();
  uint32_t n = buffers ? buffers->size() : 0;
  if (index >= n)
    return OutOfRange("buffer index " + std::to_string(index) + " is outside the buffer table (" + std::to_string(n) +
                      " buffers)");
  const fb::Buffer* b = buffers->Get(index);
  return std::span<uint8_t>(job_->arena.data() + b->offset(), b->bytes());
}

void Executor::CloseQueues() {
  for (auto& q : job_->queues) q->Close();
}

void Executor::Cancel() {
  job_->cancelled.store(true, std::memory_order_relaxed);
  CloseQueues();
}

}  // namespace sinkrt::device
