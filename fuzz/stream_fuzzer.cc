// libFuzzer target for the task-stream verifier (runtime/task_stream_verifier.h).
//
// The input is a .tstream file. sinkrt::VerifyTaskStream is the device's
// trust boundary: once it accepts a stream, device code indexes buffers,
// queues, initializers and events without checks. So for every accepted
// stream this target walks the whole view, reads every field, re-checks each
// promise the verifier makes (indices inside their tables, buffers inside
// the arena, shapes matching sizes, inline data inside the blob section) and
// reads the bytes those promises cover; ASan reports any read outside the
// file, and a broken promise aborts with a message (a finding).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "fuzz_support.h"
#include "runtime/src/schema_enums.h"
#include "runtime/src/stream_names.h"
#include "sinkrt/fb/task_stream_generated.h"
#include "sinkrt/runtime/dtype.h"
#include "sinkrt/runtime/stream_format.h"
#include "sinkrt/runtime/task_stream_verifier.h"

namespace {

using namespace sinkrt;

using fuzz::g_sink;

// A Toucher that knows the stream's structure.
class Walker : fuzz::Toucher {
 public:
  explicit Walker(const VerifiedStream& v) : v_(v), s_(v.root()), file_(v.bytes()) {}

  void Run() {
    FUZZ_CHECK(s_ != nullptr);
    // The sections lie inside the file.
    FUZZ_CHECK(v_.flatbuffer().data() == file_.data() + 4);
    FUZZ_CHECK(v_.flatbuffer().size() + 4 <= file_.size());
    if (!v_.blobs().empty()) {
      FUZZ_CHECK(v_.blobs().data() >= v_.flatbuffer().data() + v_.flatbuffer().size());
      FUZZ_CHECK(v_.blobs().data() + v_.blobs().size() == file_.data() + file_.size());
    }
    Header();
    Buffers();
    Initializers();
    Queues();
    Groups();
    Programs();
    g_sink = h;
  }

 private:
  uint32_t NumBuffers() const { return s_->buffers() ? s_->buffers()->size() : 0; }
  uint32_t NumQueues() const { return s_->queues() ? s_->queues()->size() : 0; }
  uint32_t NumInits() const { return s_->initializers() ? s_->initializers()->size() : 0; }

  // What device code does with a buffer index it was given: look the buffer
  // up and touch its bytes' range description.
  const fb::Buffer* BufferAt(uint32_t index) {
    FUZZ_CHECK(index < NumBuffers());
    const fb::Buffer* b = s_->buffers()->Get(index);
    FUZZ_CHECK(b != nullptr);
    Scalar(b->offset());
    Scalar(b->bytes());
    return b;
  }
  // A collective's group: it exists, has members, and this stream's rank is one.
  const fb::CommGroup* GroupAt(uint32_t index) {
    FUZZ_CHECK(s_->groups() && index < s_->groups()->size());
    const fb::CommGroup* g = s_->groups()->Get(index);
    FUZZ_CHECK(g != nullptr && g->ranks() && g->ranks()->size() > 0);
    FUZZ_CHECK(std::find(g->ranks()->begin(), g->ranks()->end(), s_->header()->rank()) != g->ranks()->end());
    return g;
  }
  void BufferIndices(const flatbuffers::Vector<uint32_t>* v) {
    if (!v) return;
    for (uint32_t i : *v) BufferAt(i);
  }

  static std::vector<int64_t> Dims(const flatbuffers::Vector<int64_t>* v) {
    return v ? std::vector<int64_t>(v->begin(), v->end()) : std::vector<int64_t>{};
  }
  // Bytes a shape of dtype needs; the verifier promises this fits.
  static uint64_t ShapeBytes(DType dtype, const flatbuffers::Vector<int64_t>* shape) {
    FUZZ_CHECK(DTypeSize(dtype) > 0);
    FUZZ_CHECK(!shape || shape->size() <= 8);
    int64_t n = NumElements(Dims(shape));
    FUZZ_CHECK(n >= 0);
    unsigned __int128 bytes = static_cast<unsigned __int128>(n) * DTypeSize(dtype);
    FUZZ_CHECK(bytes <= UINT64_MAX);
    return static_cast<uint64_t>(bytes);
  }

  void Header() {
    const fb::Header* h = s_->header();
    FUZZ_CHECK(h != nullptr);
    FUZZ_CHECK(h->format_major() == kFormatMajor);
    Scalar(h->format_minor());
    FUZZ_CHECK(h->world_size() > 0 && h->rank() < h->world_size());
    Str(h->target());
    Scalar(h->graph_hash());
    FUZZ_CHECK((h->requirements() & ~kSupportedFeatures) == 0);
    Str(h->producer());
    uint32_t a = s_->arena_alignment();
    FUZZ_CHECK(a >= 8 && a <= 4096 && (a & (a - 1)) == 0);
    FUZZ_CHECK(s_->arena_bytes() <= kMaxStreamBytes * 4);
    Scalar(s_->liveness_lower_bound());
    FUZZ_CHECK(s_->blob_bytes() == v_.blobs().size());
  }

  void Buffers() {
    const uint64_t arena = s_->arena_bytes();
    for (uint32_t i = 0; i < NumBuffers(); ++i) {
      const fb::Buffer* b = s_->buffers()->Get(i);
      FUZZ_CHECK(b != nullptr);
      Str(b->name());
      FUZZ_CHECK(ShapeBytes(FromFb(b->dtype()), b->shape()) == b->bytes());
      Vec(b->shape());
      FUZZ_CHECK(b->offset() % s_->arena_alignment() == 0);
      FUZZ_CHECK(b->offset() <= arena && b->bytes() <= arena - b->offset());
      FUZZ_CHECK(uint8_t(b->role()) <= uint8_t(fb::BufferRole::MAX));
      Scalar(BufferRoleName(b->role()).size());
      Scalar(std::strlen(DTypeName(b->dtype())));
      // Lookup by name finds this buffer or an earlier one of the same name.
      if (b->name()) {
        int64_t found = v_.FindBuffer(b->name()->string_view());
        FUZZ_CHECK(found >= 0 && found <= int64_t(i));
        FUZZ_CHECK(s_->buffers()->Get(uint32_t(found))->name()->string_view() == b->name()->string_view());
      }
    }
  }

  void Initializers() {
    for (uint32_t i = 0; i < NumInits(); ++i) {
      const fb::Initializer* in = s_->initializers()->Get(i);
      FUZZ_CHECK(in != nullptr);
      const fb::Buffer* b = BufferAt(in->buffer());
      const fb::Init* d = in->init();
      FUZZ_CHECK(d != nullptr);
      FUZZ_CHECK(uint8_t(d->kind()) <= uint8_t(fb::InitKind::MAX));
      Scalar(d->value());
      Scalar(d->low());
      Scalar(d->high());
      Scalar(d->mean());
      Scalar(d->stddev());
      Scalar(d->seed());
      Scalar(d->fan_in());
      Scalar(d->fan_out());
      if (d->kind() == fb::InitKind::Inline) {
        // The device copies these bytes into the buffer.
        FUZZ_CHECK(d->data_offset() <= v_.blobs().size());
        FUZZ_CHECK(d->data_bytes() <= v_.blobs().size() - d->data_offset());
        FUZZ_CHECK(d->data_bytes() == b->bytes());
        Bytes(v_.blobs().subspan(d->data_offset(), d->data_bytes()));
      }
    }
  }

  void Queues() {
    for (uint32_t q = 0; q < NumQueues(); ++q) {
      const fb::QueueSpec* spec = s_->queues()->Get(q);
      FUZZ_CHECK(spec != nullptr);
      Str(spec->name());
      FUZZ_CHECK(spec->capacity() >= 1 && spec->capacity() <= 4096);
      FUZZ_CHECK(spec->columns() && spec->columns()->size() > 0);
      for (uint32_t c = 0; c < spec->columns()->size(); ++c) {
        const fb::QueueColumn* col = spec->columns()->Get(c);
        FUZZ_CHECK(col != nullptr);
        Str(col->name());
        Scalar(ShapeBytes(FromFb(col->dtype()), col->shape()));
        Vec(col->shape());
      }
    }
  }

  void Groups() {
    if (!s_->groups()) return;
    for (uint32_t g = 0; g < s_->groups()->size(); ++g) {
      const fb::CommGroup* grp = s_->groups()->Get(g);
      FUZZ_CHECK(grp != nullptr);
      Str(grp->name());
      if (grp->ranks())
        for (uint32_t r : *grp->ranks()) FUZZ_CHECK(r < s_->header()->world_size());
    }
  }

  void Programs() {
    if (!s_->programs()) return;
    bool seen[4] = {false, false, false, false};
    for (uint32_t p = 0; p < s_->programs()->size(); ++p) {
      const fb::Program* prog = s_->programs()->Get(p);
      FUZZ_CHECK(prog != nullptr);
      Str(prog->name());
      FUZZ_CHECK(uint8_t(prog->kind()) <= uint8_t(fb::ProgramKind::MAX));
      FUZZ_CHECK(!seen[uint8_t(prog->kind())]);
      seen[uint8_t(prog->kind())] = true;
      FUZZ_CHECK(v_.FindProgram(FromFb(prog->kind())) == prog);
      Scalar(ProgramKindName(prog->kind()).size());
      FUZZ_CHECK(prog->num_events() <= 65536);
      BufferIndices(prog->reports());
      if (!prog->streams()) continue;
      for (uint32_t st = 0; st < prog->streams()->size(); ++st) {
        const fb::Stream* stream = prog->streams()->Get(st);
        FUZZ_CHECK(stream != nullptr);
        Str(stream->name());
        if (!stream->tasks()) continue;
        for (uint32_t t = 0; t < stream->tasks()->size(); ++t) {
          const fb::Task* task = stream->tasks()->Get(t);
          FUZZ_CHECK(task != nullptr);
          Str(task->name());
          Task(*prog, *task);
        }
      }
    }
    for (int k = 0; k < 4; ++k)
      if (!seen[k]) FUZZ_CHECK(v_.FindProgram(ProgramKind(k)) == nullptr);
  }

  // A collective over a group from one buffer into another.
  template <typename T>
  void GroupInputOutput(const T* t) {
    FUZZ_CHECK(t != nullptr);
    GroupAt(t->group());
    BufferAt(t->input());
    BufferAt(t->output());
  }

  // The window fields convolution and pooling options share.
  template <typename T>
  void StridesAndPads(const T& o) {
    Scalar(o.stride_h());
    Scalar(o.stride_w());
    Scalar(o.pad_top());
    Scalar(o.pad_bottom());
    Scalar(o.pad_left());
    Scalar(o.pad_right());
  }

  void Options(const fb::KernelTask& k) {
    Scalar(uint8_t(k.options_type()));
    // The options are optional: a kernel falls back to defaults without them.
    if (const auto* o = k.options_as_MatMulOptions()) {
      Scalar(o->transpose_a());
      Scalar(o->transpose_b());
    } else if (const auto* o = k.options_as_AxisOptions()) {
      Scalar(o->axis());
      Vec(o->axes());
      Scalar(o->keep_dims());
      Scalar(o->scale());
    } else if (const auto* o = k.options_as_Conv2DOptions()) {
      StridesAndPads(*o);
      Scalar(o->dilation_h());
      Scalar(o->dilation_w());
    } else if (const auto* o = k.options_as_Pool2DOptions()) {
      Scalar(o->kernel_h());
      Scalar(o->kernel_w());
      StridesAndPads(*o);
    } else if (const auto* o = k.options_as_FillOptions()) {
      Scalar(o->value());
    } else if (const auto* o = k.options_as_SgdOptions()) {
      Scalar(o->learning_rate());
      Scalar(o->weight_decay());
    } else if (const auto* o = k.options_as_MomentumOptions()) {
      Scalar(o->learning_rate());
      Scalar(o->momentum());
      Scalar(o->nesterov());
      Scalar(o->weight_decay());
    } else if (const auto* o = k.options_as_AdamOptions()) {
      Scalar(o->learning_rate());
      Scalar(o->beta1());
      Scalar(o->beta2());
      Scalar(o->epsilon());
      Scalar(o->weight_decay());
    }
  }

  void Task(const fb::Program& prog, const fb::Task& task) {
    Scalar(TaskKindName(task.body_type()).size());
    switch (task.body_type()) {
      case fb::TaskBody::KernelTask: {
        const fb::KernelTask* k = task.body_as_KernelTask();
        FUZZ_CHECK(k != nullptr);
        FUZZ_CHECK(k->op() != fb::OpCode::Invalid && OpCodeName(k->op()) != "Unknown");
        BufferIndices(k->inputs());
        BufferIndices(k->outputs());
        Options(*k);
        Scalar(uint8_t(k->fused_activation()));
        FUZZ_CHECK(k->fused_bias() >= -1);
        if (k->fused_bias() >= 0) BufferAt(uint32_t(k->fused_bias()));
        return;
      }
      case fb::TaskBody::GetNextTask: {
        const fb::GetNextTask* g = task.body_as_GetNextTask();
        FUZZ_CHECK(g != nullptr);
        FUZZ_CHECK(g->queue() < NumQueues());
        const fb::QueueSpec* spec = s_->queues()->Get(g->queue());
        uint32_t nout = g->outputs() ? g->outputs()->size() : 0;
        FUZZ_CHECK(spec->columns() && nout == spec->columns()->size());
        for (uint32_t c = 0; c < nout; ++c) {
          // The device copies column c of a batch straight into this buffer:
          // same dtype and shape, so the same byte count.
          const fb::QueueColumn* col = spec->columns()->Get(c);
          const fb::Buffer* b = BufferAt(g->outputs()->Get(c));
          FUZZ_CHECK(col->dtype() == b->dtype());
          FUZZ_CHECK(Dims(col->shape()) == Dims(b->shape()));
          FUZZ_CHECK(ShapeBytes(FromFb(col->dtype()), col->shape()) == b->bytes());
        }
        return;
      }
      case fb::TaskBody::EventRecordTask:
        FUZZ_CHECK(task.body_as_EventRecordTask() != nullptr);
        FUZZ_CHECK(task.body_as_EventRecordTask()->event() < prog.num_events());
        return;
      case fb::TaskBody::EventWaitTask:
        FUZZ_CHECK(task.body_as_EventWaitTask() != nullptr);
        FUZZ_CHECK(task.body_as_EventWaitTask()->event() < prog.num_events());
        return;
      case fb::TaskBody::InitTask: {
        const fb::InitTask* in = task.body_as_InitTask();
        FUZZ_CHECK(in != nullptr);
        if (in->initializers())
          for (uint32_t i : *in->initializers()) {
            FUZZ_CHECK(i < NumInits());
            BufferAt(s_->initializers()->Get(i)->buffer());
          }
        return;
      }
      case fb::TaskBody::AllReduceTask: {
        const fb::AllReduceTask* t = task.body_as_AllReduceTask();
        FUZZ_CHECK(t != nullptr);
        GroupAt(t->group());
        FUZZ_CHECK(uint8_t(t->op()) <= uint8_t(fb::ReduceOp::MAX));
        OneRange(t->buffers());
        return;
      }
      case fb::TaskBody::BroadcastTask: {
        const fb::BroadcastTask* t = task.body_as_BroadcastTask();
        FUZZ_CHECK(t != nullptr);
        const fb::CommGroup* g = GroupAt(t->group());
        FUZZ_CHECK(std::find(g->ranks()->begin(), g->ranks()->end(), t->root()) != g->ranks()->end());
        OneRange(t->buffers());
        return;
      }
      case fb::TaskBody::AllGatherTask:
        return GroupInputOutput(task.body_as_AllGatherTask());
      case fb::TaskBody::ReduceScatterTask:
        return GroupInputOutput(task.body_as_ReduceScatterTask());
      case fb::TaskBody::AllToAllTask:
        return GroupInputOutput(task.body_as_AllToAllTask());
      case fb::TaskBody::SendTask:
      case fb::TaskBody::RecvTask: {
        const bool send = task.body_type() == fb::TaskBody::SendTask;
        FUZZ_CHECK(send ? task.body_as_SendTask() != nullptr : task.body_as_RecvTask() != nullptr);
        const fb::CommGroup* g = GroupAt(send ? task.body_as_SendTask()->group() : task.body_as_RecvTask()->group());
        const uint32_t peer = send ? task.body_as_SendTask()->peer() : task.body_as_RecvTask()->peer();
        FUZZ_CHECK(std::find(g->ranks()->begin(), g->ranks()->end(), peer) != g->ranks()->end());
        BufferAt(send ? task.body_as_SendTask()->buffer() : task.body_as_RecvTask()->buffer());
        return;
      }
      default:
        // A task without a known body.
        FUZZ_CHECK(false && "VerifyTaskStream accepted a task this device cannot run");
    }
  }

  // A fused AllReduce or Broadcast runs in place on one range: its buffers
  // are contiguous, ascending and of one dtype.
  void OneRange(const flatbuffers::Vector<uint32_t>* buffers) {
    FUZZ_CHECK(buffers && buffers->size() > 0);
    const fb::Buffer* first = BufferAt(buffers->Get(0));
    const fb::Buffer* prev = first;
    for (uint32_t i = 1; i < buffers->size(); ++i) {
      const fb::Buffer* b = BufferAt(buffers->Get(i));
      FUZZ_CHECK(b->offset() >= prev->offset() + prev->bytes());
      FUZZ_CHECK(b->offset() - (prev->offset() + prev->bytes()) < s_->arena_alignment());
      FUZZ_CHECK(b->dtype() == first->dtype());
      prev = b;
    }
    FUZZ_CHECK(prev->offset() + prev->bytes() <= s_->arena_bytes());
  }

  const VerifiedStream& v_;
  const fb::TaskStream* s_;
  std::span<const uint8_t> file_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A task stream is read into an aligned buffer (file_io), and the Verifier
  // checks alignment; the heap copy is also exactly `size` bytes, so ASan
  // reports any read past the file.
  std::vector<uint8_t> file(data, data + size);
  FUZZ_CHECK(size == 0 || reinterpret_cast<uintptr_t>(file.data()) % 8 == 0);
  // The stream takes the vector over: moved, its buffer stays where it is.
  Result<VerifiedStream> view = VerifyTaskStream(std::move(file));
  if (!view.ok()) {
    FUZZ_CHECK(!view.status().message().empty());
    return 0;
  }
  FUZZ_CHECK(view->bytes().size() == size);
  Walker(view.value()).Run();
  return 0;
}
