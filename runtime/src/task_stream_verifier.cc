#include "sinkrt/runtime/task_stream_verifier.h"

#include <algorithm>
#include <string>
#include <vector>

#include "runtime/src/collective_kinds.h"
#include "runtime/src/schema_enums.h"
#include "runtime/src/stream_names.h"
#include "sinkrt/fb/task_stream_generated.h"
#include "sinkrt/runtime/dtype.h"
#include "sinkrt/runtime/stream_format.h"

namespace sinkrt {
namespace {

// Semantic checks after the FlatBuffers Verifier: the Verifier proves every
// offset lands inside the buffer; these prove every index lands inside its
// table and every byte range inside the arena or the blob section, that
// every step can finish (each event wait is met by a record) and that each
// collective names a group this rank belongs to and buffers it can run on.
class Checker {
 public:
  Checker(const fb::TaskStream* s, std::span<const uint8_t> blobs, uint64_t supported_features)
      : s_(s), blobs_(blobs), supported_(supported_features) {}

  Status Run() {
    SINKRT_RETURN_IF_ERROR(CheckHeader());
    SINKRT_RETURN_IF_ERROR(CheckBuffers());
    SINKRT_RETURN_IF_ERROR(CheckInitializers());
    SINKRT_RETURN_IF_ERROR(CheckQueues());
    SINKRT_RETURN_IF_ERROR(CheckGroups());
    return CheckPrograms();
  }

 private:
  Status CheckHeader() {
    const fb::Header* h = s_->header();
    if (!h) return InvalidArgument("task stream has no header");
    if (h->format_major() != kFormatMajor)
      return InvalidArgument("task stream format " + std::to_string(h->format_major()) + "." +
                             std::to_string(h->format_minor()) + " is not supported (this device reads " +
                             std::to_string(kFormatMajor) + ".x)");
    if (uint64_t extra = h->requirements() & ~supported_)
      return Unimplemented("task stream requires feature bits 0x" + Hex(extra) + " that this device does not support");
    if (h->world_size() == 0 || h->rank() >= h->world_size())
      return InvalidArgument("header: rank " + std::to_string(h->rank()) + " is outside world size " +
                             std::to_string(h->world_size()));
    uint32_t a = s_->arena_alignment();
    if (a < 8 || a > 4096 || (a & (a - 1)) != 0)
      return InvalidArgument("arena alignment " + std::to_string(a) + " must be a power of two in [8, 4096]");
    if (s_->arena_bytes() > kMaxArenaBytes)
      return InvalidArgument("arena of " + std::to_string(s_->arena_bytes()) +
                             " bytes is larger than a device accepts");
    if (s_->blob_bytes() != blobs_.size())
      return InvalidArgument("blob section is " + std::to_string(blobs_.size()) + " bytes, header says " +
                             std::to_string(s_->blob_bytes()));
    return Status::Ok();
  }

  Status CheckShape(const std::string& what, fb::DType dtype, const flatbuffers::Vector<int64_t>* shape,
                    uint64_t* bytes_out) {
    if (DTypeSize(dtype) == 0) return InvalidArgument(what + ": invalid dtype " + std::to_string(int(dtype)));
    if (shape && shape->size() > 8)
      return InvalidArgument(what + ": rank " + std::to_string(shape->size()) + " exceeds 8");
    // FlatBuffers 2.0's Verifier checks a vector's length field for
    // alignment but not its 8-byte elements (google/flatbuffers#8397); a
    // crafted stream could make every later read of the shape misaligned.
    if (shape && shape->size() > 0 && reinterpret_cast<uintptr_t>(shape->data()) % alignof(int64_t) != 0)
      return InvalidArgument(what + ": shape vector is not 8-byte aligned");
    std::vector<int64_t> dims = shape ? std::vector<int64_t>(shape->begin(), shape->end()) : std::vector<int64_t>{};
    int64_t n = NumElements(dims);
    if (n < 0) return InvalidArgument(what + ": shape " + ShapeToString(dims) + " has a negative or huge dimension");
    uint64_t bytes = static_cast<uint64_t>(n) * DTypeSize(dtype);
    if (bytes / DTypeSize(dtype) != static_cast<uint64_t>(n))
      return InvalidArgument(what + ": shape " + ShapeToString(dims) + " overflows");
    *bytes_out = bytes;
    return Status::Ok();
  }

  // A sharded buffer's or column's slice: the host reads it to feed, merge
  // and show slices, so it must describe a real sub-block of a real layout.
  Status CheckSlice(const std::string& what, const flatbuffers::Vector<int64_t>* shape, const fb::Slice* sl) {
    if (!sl) return Status::Ok();
    const size_t rank = shape ? shape->size() : 0;
    auto aligned = [](const auto* v) {
      return !v || v->size() == 0 || reinterpret_cast<uintptr_t>(v->data()) % alignof(int64_t) == 0;
    };
    if (!aligned(sl->global_shape()) || !aligned(sl->offset()) || !aligned(sl->device_matrix()))
      return InvalidArgument(what + ": slice vectors are not 8-byte aligned");
    const size_t g = sl->global_shape() ? sl->global_shape()->size() : 0;
    const size_t o = sl->offset() ? sl->offset()->size() : 0;
    if (g != rank || o != rank)
      return InvalidArgument(what + ": its slice has a global shape of rank " + std::to_string(g) +
                             " and an offset of " + std::to_string(o) + " dims, the buffer has " +
                             std::to_string(rank));
    for (size_t d = 0; d < rank; ++d) {
      const int64_t whole = sl->global_shape()->Get(d), at = sl->offset()->Get(d), part = shape->Get(d);
      if (whole < 1 || at < 0 || part > whole || at > whole - part)
        return InvalidArgument(what + ": dim " + std::to_string(d) + " holds [" + std::to_string(at) + ", +" +
                               std::to_string(part) + ") of a global dim of " + std::to_string(whole));
    }
    const size_t axes = sl->device_matrix() ? sl->device_matrix()->size() : 0;
    if (axes > 8) return InvalidArgument(what + ": a device matrix of " + std::to_string(axes) + " axes (at most 8)");
    int64_t devices = 1;
    for (size_t a = 0; a < axes; ++a) {
      const int64_t n = sl->device_matrix()->Get(a);
      if (n < 1 || n > (int64_t{1} << 20) || devices > (int64_t{1} << 20))
        return InvalidArgument(what + ": device matrix extent " + std::to_string(n) + " is out of range");
      devices *= n;
    }
    const size_t maps = sl->tensor_map() ? sl->tensor_map()->size() : 0;
    if (maps != 0 && maps != rank)
      return InvalidArgument(what + ": a tensor map of " + std::to_string(maps) + " entries for " +
                             std::to_string(rank) + " dims");
    for (size_t d = 0; d < maps; ++d) {
      const int m = sl->tensor_map()->Get(d);
      if (m < -1 || m >= static_cast<int>(axes))
        return InvalidArgument(what + ": tensor map entry " + std::to_string(m) + " of dim " + std::to_string(d) +
                               " names no axis of a " + std::to_string(axes) + "-axis device matrix");
    }
    if (sl->partial())
      for (int a : *sl->partial())
        if (a < 0 || a >= static_cast<int>(axes))
          return InvalidArgument(what + ": partial axis " + std::to_string(a) + " is outside the device matrix");
    return Status::Ok();
  }

  Status CheckBuffers() {
    if (!s_->buffers()) return Status::Ok();
    const uint64_t arena = s_->arena_bytes();
    const uint32_t align = s_->arena_alignment();
    for (uint32_t i = 0; i < s_->buffers()->size(); ++i) {
      const fb::Buffer* b = s_->buffers()->Get(i);
      std::string what = "buffer " + std::to_string(i) + Named(b->name());
      uint64_t bytes = 0;
      SINKRT_RETURN_IF_ERROR(CheckShape(what, b->dtype(), b->shape(), &bytes));
      if (bytes != b->bytes())
        return InvalidArgument(what + ": shape " + ShapeString(b->shape()) + " of " + DTypeName(b->dtype()) +
                               " needs " + std::to_string(bytes) + " bytes, table says " + std::to_string(b->bytes()));
      if (b->offset() % align != 0)
        return InvalidArgument(what + ": offset " + std::to_string(b->offset()) +
                               " is not a multiple of the arena alignment " + std::to_string(align));
      if (b->offset() > arena || b->bytes() > arena - b->offset())
        return OutOfRange(what + ": bytes [" + std::to_string(b->offset()) + ", " +
                          std::to_string(b->offset() + b->bytes()) + ") lie outside the arena of " +
                          std::to_string(arena) + " bytes");
      if (uint8_t(b->role()) > uint8_t(fb::BufferRole::MAX))
        return InvalidArgument(what + ": unknown role " + std::to_string(int(b->role())));
      SINKRT_RETURN_IF_ERROR(CheckSlice(what, b->shape(), b->slice()));
    }
    return Status::Ok();
  }

  Status CheckBufferIndex(const std::string& where, uint32_t index) {
    uint32_t n = s_->buffers() ? s_->buffers()->size() : 0;
    if (index >= n)
      return OutOfRange(where + ": buffer index " + std::to_string(index) + " is outside the buffer table (" +
                        std::to_string(n) + " buffers)");
    return Status::Ok();
  }

  Status CheckIndices(const std::string& where, const flatbuffers::Vector<uint32_t>* v) {
    if (!v) return Status::Ok();
    for (uint32_t x : *v) SINKRT_RETURN_IF_ERROR(CheckBufferIndex(where, x));
    return Status::Ok();
  }

  Status CheckInitializers() {
    if (!s_->initializers()) return Status::Ok();
    for (uint32_t i = 0; i < s_->initializers()->size(); ++i) {
      const fb::Initializer* in = s_->initializers()->Get(i);
      std::string where = "initializer " + std::to_string(i);
      SINKRT_RETURN_IF_ERROR(CheckBufferIndex(where, in->buffer()));
      const fb::Init* d = in->init();
      if (!d) return InvalidArgument(where + ": missing init definition");
      const fb::Buffer* b = s_->buffers()->Get(in->buffer());
      where += " (buffer '" + Str(b->name()) + "')";
      if (uint8_t(d->kind()) > uint8_t(fb::InitKind::MAX))
        return InvalidArgument(where + ": unknown init kind " + std::to_string(int(d->kind())));
      if (d->kind() == fb::InitKind::Inline) {
        if (d->data_offset() > blobs_.size() || d->data_bytes() > blobs_.size() - d->data_offset())
          return OutOfRange(where + ": inline data [" + std::to_string(d->data_offset()) + ", +" +
                            std::to_string(d->data_bytes()) + ") lies outside the blob section of " +
                            std::to_string(blobs_.size()) + " bytes");
        if (d->data_bytes() != b->bytes())
          return InvalidArgument(where + ": inline data is " + std::to_string(d->data_bytes()) + " bytes, the buffer " +
                                 std::to_string(b->bytes()));
      }
    }
    return Status::Ok();
  }

  Status CheckQueues() {
    if (!s_->queues()) return Status::Ok();
    for (uint32_t q = 0; q < s_->queues()->size(); ++q) {
      const fb::QueueSpec* spec = s_->queues()->Get(q);
      std::string where = "queue " + std::to_string(q) + Named(spec->name());
      if (spec->capacity() < 1 || spec->capacity() > 4096)
        return InvalidArgument(where + ": capacity " + std::to_string(spec->capacity()) + " must be in [1, 4096]");
      if (!spec->columns() || spec->columns()->size() == 0) return InvalidArgument(where + ": has no columns");
      for (uint32_t c = 0; c < spec->columns()->size(); ++c) {
        const fb::QueueColumn* col = spec->columns()->Get(c);
        uint64_t bytes;
        const std::string what = where + " column " + std::to_string(c) + Named(col->name());
        SINKRT_RETURN_IF_ERROR(CheckShape(what, col->dtype(), col->shape(), &bytes));
        SINKRT_RETURN_IF_ERROR(CheckSlice(what, col->shape(), col->slice()));
      }
    }
    return Status::Ok();
  }

  Status CheckGroups() {
    if (!s_->groups()) return Status::Ok();
    uint32_t world = s_->header()->world_size();
    for (uint32_t g = 0; g < s_->groups()->size(); ++g) {
      const fb::CommGroup* grp = s_->groups()->Get(g);
      if (!grp->ranks()) continue;
      for (uint32_t r : *grp->ranks())
        if (r >= world)
          return OutOfRange("communicator group " + std::to_string(g) + Named(grp->name()) + ": rank " +
                            std::to_string(r) + " is outside world size " + std::to_string(world));
    }
    return Status::Ok();
  }

  Status CheckPrograms() {
    if (!s_->programs()) return Status::Ok();
    bool seen[4] = {false, false, false, false};
    for (uint32_t p = 0; p < s_->programs()->size(); ++p) {
      const fb::Program* prog = s_->programs()->Get(p);
      std::string pname = "program " + std::to_string(p) + Named(prog->name());
      if (uint8_t(prog->kind()) > uint8_t(fb::ProgramKind::MAX))
        return InvalidArgument(pname + ": unknown kind " + std::to_string(int(prog->kind())));
      if (seen[uint8_t(prog->kind())])
        return InvalidArgument(pname + ": a second " + std::string(ProgramKindName(prog->kind())) + " program");
      seen[uint8_t(prog->kind())] = true;
      if (prog->num_events() > 65536)
        return InvalidArgument(pname + ": " + std::to_string(prog->num_events()) + " events exceed 65536");
      SINKRT_RETURN_IF_ERROR(CheckIndices(pname + " reports", prog->reports()));
      SINKRT_RETURN_IF_ERROR(CheckAccumulators(pname, prog));
      if (!prog->streams()) continue;
      // A compute stream and a communication stream; more would need rules
      // the compiler and the device do not have yet.
      if (prog->streams()->size() > kMaxStreams)
        return InvalidArgument(pname + ": " + std::to_string(prog->streams()->size()) + " streams, at most " +
                               std::to_string(kMaxStreams) + " (compute and comm) are supported");
      for (uint32_t st = 0; st < prog->streams()->size(); ++st) {
        const fb::Stream* stream = prog->streams()->Get(st);
        if (!stream->tasks()) continue;
        for (uint32_t t = 0; t < stream->tasks()->size(); ++t) {
          const fb::Task* task = stream->tasks()->Get(t);
          std::string where =
              pname + " stream " + std::to_string(st) + " task " + std::to_string(t) + Named(task->name());
          SINKRT_RETURN_IF_ERROR(CheckTask(where, prog, task));
        }
      }
      SINKRT_RETURN_IF_ERROR(CheckEvents(pname, prog));
    }
    return Status::Ok();
  }

  // Format 1.4's accumulators: the device zeroes them when a sink starts,
  // so each must be a persistent Output buffer (never shared with another
  // tensor's bytes), listed once; and a MetricSum that adds into a buffer
  // the device would not zero would carry sums from one sink into the next.
  Status CheckAccumulators(const std::string& pname, const fb::Program* prog) {
    const auto* acc = prog->accumulators();
    SINKRT_RETURN_IF_ERROR(CheckIndices(pname + " accumulators", acc));
    std::vector<uint32_t> listed;
    if (acc)
      for (uint32_t b : *acc) {
        const fb::Buffer* buf = s_->buffers()->Get(b);
        if (buf->role() != fb::BufferRole::Output)
          return InvalidArgument(pname + ": accumulator buffer " + std::to_string(b) + Named(buf->name()) +
                                 " has role " + std::string(BufferRoleName(buf->role())) +
                                 ", an accumulator must be an Output buffer");
        if (std::find(listed.begin(), listed.end(), b) != listed.end())
          return InvalidArgument(pname + ": accumulator buffer " + std::to_string(b) + Named(buf->name()) +
                                 " is listed twice");
        listed.push_back(b);
      }
    if (!prog->streams()) return Status::Ok();
    for (const fb::Stream* stream : *prog->streams()) {
      if (!stream->tasks()) continue;
      for (const fb::Task* task : *stream->tasks()) {
        if (task->body_type() != fb::TaskBody::KernelTask || !task->body()) continue;
        const fb::KernelTask* k = task->body_as_KernelTask();
        if (k->op() != fb::OpCode::MetricSum || !k->outputs()) continue;
        for (uint32_t b : *k->outputs())
          if (std::find(listed.begin(), listed.end(), b) == listed.end())
            return InvalidArgument(pname + ": MetricSum task" + Named(task->name()) + " adds into buffer " +
                                   std::to_string(b) +
                                   ", which is not among the program's accumulators (it would never be zeroed)");
      }
    }
    return Status::Ok();
  }

  // Runs the program's streams the way a device does — a wait passes once
  // its event has been recorded in this step — and fails if some stream can
  // never get past a wait.
  Status CheckEvents(const std::string& pname, const fb::Program* prog) {
    const auto* streams = prog->streams();
    const uint32_t n = streams->size();
    auto tasks_of = [&](uint32_t st) {
      const auto* t = streams->Get(st)->tasks();
      return t ? t->size() : 0u;
    };
    auto event_of = [](const fb::Task* t) {
      return t->body_type() == fb::TaskBody::EventRecordTask ? t->body_as_EventRecordTask()->event()
                                                             : t->body_as_EventWaitTask()->event();
    };
    std::vector<uint32_t> next(n, 0);
    std::vector<bool> recorded(prog->num_events(), false);
    for (bool progress = true; progress;) {
      progress = false;
      for (uint32_t st = 0; st < n; ++st) {
        for (; next[st] < tasks_of(st); ++next[st], progress = true) {
          const fb::Task* t = streams->Get(st)->tasks()->Get(next[st]);
          if (t->body_type() == fb::TaskBody::EventWaitTask && !recorded[event_of(t)]) break;
          if (t->body_type() == fb::TaskBody::EventRecordTask) recorded[event_of(t)] = true;
        }
      }
    }
    // Of the blocked waits, name the root cause first: an event nobody
    // records, then one only its own stream records later, then a cycle.
    int worst_rank = -1;
    uint32_t worst = 0;
    for (uint32_t st = 0; st < n; ++st) {
      if (next[st] == tasks_of(st)) continue;
      const uint32_t e = event_of(streams->Get(st)->tasks()->Get(next[st]));
      bool elsewhere = false, later_here = false;
      for (uint32_t other = 0; other < n; ++other)
        for (uint32_t i = 0; i < tasks_of(other); ++i) {
          const fb::Task* t = streams->Get(other)->tasks()->Get(i);
          if (t->body_type() != fb::TaskBody::EventRecordTask || event_of(t) != e) continue;
          (other == st ? later_here : elsewhere) = true;
        }
      const int rank = elsewhere ? 0 : later_here ? 1 : 2;
      if (rank > worst_rank) {
        worst_rank = rank;
        worst = st;
      }
    }
    if (worst_rank < 0) return Status::Ok();
    static const char* const kWhy[] = {
        "whose record in another stream is never reached: the streams wait on each other",
        "that only a later task of the same stream records",
        "that no task of the program records",
    };
    const fb::Task* wait = streams->Get(worst)->tasks()->Get(next[worst]);
    return InvalidArgument(pname + " stream " + std::to_string(worst) + " task " + std::to_string(next[worst]) +
                           Named(wait->name()) + ": waits on event " + std::to_string(event_of(wait)) + " " +
                           kWhy[worst_rank] + " (the step would deadlock)");
  }

  Status CheckGroupIndex(const std::string& where, uint32_t group, const fb::CommGroup** out) {
    const uint32_t n = s_->groups() ? s_->groups()->size() : 0;
    if (group >= n)
      return OutOfRange(where + ": communicator group " + std::to_string(group) + " is outside the group table (" +
                        std::to_string(n) + " groups)");
    const fb::CommGroup* g = s_->groups()->Get(group);
    const uint32_t rank = s_->header()->rank();
    if (!g->ranks() || std::find(g->ranks()->begin(), g->ranks()->end(), rank) == g->ranks()->end())
      return InvalidArgument(where + ": this stream's rank " + std::to_string(rank) + " is not a member of group " +
                             std::to_string(group) + Named(g->name()));
    *out = g;
    return Status::Ok();
  }

  // A fused AllReduce or Broadcast runs in place on one byte range of the
  // arena, so its buffers must follow each other with nothing but alignment
  // padding between them, and share one dtype. This is the only place the
  // rule is checked: the device takes the range from the first buffer's
  // offset to the end of the last.
  Status CheckContiguous(const std::string& where, const std::string& kind,
                         const flatbuffers::Vector<uint32_t>* buffers) {
    if (!buffers || buffers->size() == 0) return InvalidArgument(where + ": " + kind + " of no buffers");
    SINKRT_RETURN_IF_ERROR(CheckIndices(where, buffers));
    const uint64_t align = s_->arena_alignment();
    const fb::Buffer* prev = s_->buffers()->Get(buffers->Get(0));
    for (uint32_t i = 1; i < buffers->size(); ++i) {
      const fb::Buffer* b = s_->buffers()->Get(buffers->Get(i));
      const uint64_t expected = (prev->offset() + prev->bytes() + align - 1) / align * align;
      if (b->offset() != expected)
        return InvalidArgument(where + ": buffer " + std::to_string(i) + Named(b->name()) + " is at offset " +
                               std::to_string(b->offset()) + ", not right after" + Named(prev->name()) + " (" +
                               std::to_string(expected) + "): an " + kind +
                               "'s buffers must be contiguous and ascending in the arena");
      if (b->dtype() != prev->dtype())
        return InvalidArgument(where + ": buffer " + std::to_string(i) + Named(b->name()) + " is " +
                               DTypeName(b->dtype()) + ", the others " + DTypeName(prev->dtype()) + ": an " + kind +
                               " works on one dtype");
      prev = b;
    }
    return Status::Ok();
  }

  Status CheckAllReduce(const std::string& where, const fb::AllReduceTask* t) {
    const fb::CommGroup* group = nullptr;
    SINKRT_RETURN_IF_ERROR(CheckGroupIndex(where, t->group(), &group));
    if (uint8_t(t->op()) > uint8_t(fb::ReduceOp::MAX))
      return InvalidArgument(where + ": unknown reduce op " + std::to_string(int(t->op())));
    return CheckContiguous(where, "AllReduce", t->buffers());
  }

  // The device exchanges equal blocks of `input` into `output`, one per
  // member, reading the one while writing the other.
  Status CheckAllToAll(const std::string& where, const fb::AllToAllTask* t) {
    const fb::CommGroup* group = nullptr;
    SINKRT_RETURN_IF_ERROR(CheckGroupIndex(where, t->group(), &group));
    SINKRT_RETURN_IF_ERROR(CheckBufferIndex(where + " input", t->input()));
    SINKRT_RETURN_IF_ERROR(CheckBufferIndex(where + " output", t->output()));
    const fb::Buffer* in = s_->buffers()->Get(t->input());
    const fb::Buffer* out = s_->buffers()->Get(t->output());
    const uint32_t members = group->ranks()->size();
    if (in->dtype() != out->dtype())
      return InvalidArgument(where + ": input" + Named(in->name()) + " is " + DTypeName(in->dtype()) + ", output" +
                             Named(out->name()) + " " + DTypeName(out->dtype()) + ": an AllToAll works on one dtype");
    if (in->bytes() != out->bytes())
      return InvalidArgument(where + ": input" + Named(in->name()) + " of " + std::to_string(in->bytes()) +
                             " bytes and output" + Named(out->name()) + " of " + std::to_string(out->bytes()) +
                             " bytes differ: an AllToAll's buffers are equal in size");
    const uint64_t elems = in->bytes() / DTypeSize(in->dtype());
    if (elems % members != 0)
      return InvalidArgument(where + ": input" + Named(in->name()) + " of " + std::to_string(elems) + " " +
                             DTypeName(in->dtype()) + " elements does not split into " + std::to_string(members) +
                             " equal blocks for group " + std::to_string(t->group()) + Named(group->name()));
    if (in->bytes() > 0 && in->offset() < out->offset() + out->bytes() && out->offset() < in->offset() + in->bytes())
      return InvalidArgument(where + ": input" + Named(in->name()) + " and output" + Named(out->name()) +
                             " overlap in the arena: an AllToAll reads one while it writes the other");
    return Status::Ok();
  }

  static bool IsBlocked(const flatbuffers::Vector<uint32_t>* inputs, const flatbuffers::Vector<uint32_t>* outputs) {
    return (inputs && inputs->size() > 0) || (outputs && outputs->size() > 0);
  }

  // A fused, blocked AllGather or ReduceScatter (its inputs/outputs lists).
  // The device packs block q of every pair into one chunk q of a single
  // ring, so each pair must split into `members` equal blocks: a
  // ReduceScatter's inputs[i] is members x outputs[i] (all of one dtype,
  // the ring reduces them as one array), an AllGather's outputs[i] is
  // members x inputs[i] (moved as bytes, so one dtype per pair is enough).
  // A device that ignored the lists would run a different collective on
  // the unused scalar fields, hence the requirement bit.
  Status CheckBlocked(const std::string& where, const std::string& kind, uint32_t group_index,
                      const fb::CommGroup* group, const flatbuffers::Vector<uint32_t>* inputs,
                      const flatbuffers::Vector<uint32_t>* outputs) {
    if (!(s_->header()->requirements() & kFeatureBlockedCollectives))
      return InvalidArgument(where + ": a blocked " + kind +
                             " (inputs/outputs lists) in a stream whose header does not require blocked collectives");
    const uint32_t ni = inputs ? inputs->size() : 0, no = outputs ? outputs->size() : 0;
    if (ni != no)
      return InvalidArgument(where + ": " + std::to_string(ni) + " inputs and " + std::to_string(no) +
                             " outputs: a blocked " + kind + " pairs every input with one output");
    const bool scatter = kind == "ReduceScatter";
    const uint64_t members = group->ranks()->size();
    const fb::Buffer* first = nullptr;
    for (uint32_t i = 0; i < ni; ++i) {
      SINKRT_RETURN_IF_ERROR(CheckBufferIndex(where + " input " + std::to_string(i), inputs->Get(i)));
      SINKRT_RETURN_IF_ERROR(CheckBufferIndex(where + " output " + std::to_string(i), outputs->Get(i)));
      const fb::Buffer* in = s_->buffers()->Get(inputs->Get(i));
      const fb::Buffer* out = s_->buffers()->Get(outputs->Get(i));
      const std::string in_name = "input " + std::to_string(i) + Named(in->name());
      const std::string out_name = "output " + std::to_string(i) + Named(out->name());
      if (!first) first = in;
      if (in->dtype() != out->dtype() || (scatter && in->dtype() != first->dtype()))
        return InvalidArgument(
            where + ": " + in_name + " is " + DTypeName(in->dtype()) + ", " + out_name + " " + DTypeName(out->dtype()) +
            (scatter && i > 0 ? ", input 0" + Named(first->name()) + " " + DTypeName(first->dtype()) : std::string()) +
            ": a blocked " + kind + " works on one dtype" + (scatter ? "" : " per pair"));
      const fb::Buffer* whole = scatter ? in : out;
      const fb::Buffer* block = scatter ? out : in;
      const std::string& whole_name = scatter ? in_name : out_name;
      const std::string& block_name = scatter ? out_name : in_name;
      const uint64_t elems = whole->bytes() / DTypeSize(whole->dtype());
      if (elems % members != 0)
        return InvalidArgument(where + ": " + whole_name + " of " + std::to_string(elems) + " " +
                               DTypeName(whole->dtype()) + " elements does not split into " + std::to_string(members) +
                               " equal blocks for group " + std::to_string(group_index) + Named(group->name()));
      if (whole->bytes() != members * block->bytes())
        return InvalidArgument(where + ": " + whole_name + " of " + std::to_string(whole->bytes()) + " bytes is not " +
                               std::to_string(members) + " x " + block_name + " of " + std::to_string(block->bytes()) +
                               " bytes");
    }
    return Status::Ok();
  }

  Status CheckCollective(const std::string& where, const fb::Task* task) {
    const std::string kind(TaskKindName(task->body_type()));
    if (!(supported_ & kFeatureCollectives))
      return Unimplemented(where + ": " + kind + " tasks are not supported by this device yet");
    if (!(s_->header()->requirements() & kFeatureCollectives))
      return InvalidArgument(where + ": a " + kind + " task in a stream whose header does not require collectives");
    const fb::CommGroup* group = nullptr;
    switch (task->body_type()) {
      case fb::TaskBody::AllReduceTask:
        return CheckAllReduce(where, task->body_as_AllReduceTask());
      case fb::TaskBody::BroadcastTask: {
        const fb::BroadcastTask* t = task->body_as_BroadcastTask();
        SINKRT_RETURN_IF_ERROR(CheckGroupIndex(where, t->group(), &group));
        if (std::find(group->ranks()->begin(), group->ranks()->end(), t->root()) == group->ranks()->end())
          return InvalidArgument(where + ": root rank " + std::to_string(t->root()) + " is not a member of group " +
                                 std::to_string(t->group()) + Named(group->name()));
        return CheckContiguous(where, "Broadcast", t->buffers());
      }
      case fb::TaskBody::AllGatherTask: {
        const fb::AllGatherTask* t = task->body_as_AllGatherTask();
        SINKRT_RETURN_IF_ERROR(CheckGroupIndex(where, t->group(), &group));
        if (IsBlocked(t->inputs(), t->outputs()))
          return CheckBlocked(where, "AllGather", t->group(), group, t->inputs(), t->outputs());
        SINKRT_RETURN_IF_ERROR(CheckBufferIndex(where + " input", t->input()));
        return CheckBufferIndex(where + " output", t->output());
      }
      case fb::TaskBody::ReduceScatterTask: {
        const fb::ReduceScatterTask* t = task->body_as_ReduceScatterTask();
        SINKRT_RETURN_IF_ERROR(CheckGroupIndex(where, t->group(), &group));
        if (IsBlocked(t->inputs(), t->outputs()))
          return CheckBlocked(where, "ReduceScatter", t->group(), group, t->inputs(), t->outputs());
        SINKRT_RETURN_IF_ERROR(CheckBufferIndex(where + " input", t->input()));
        return CheckBufferIndex(where + " output", t->output());
      }
      case fb::TaskBody::AllToAllTask:
        return CheckAllToAll(where, task->body_as_AllToAllTask());
      case fb::TaskBody::SendTask:
      case fb::TaskBody::RecvTask: {
        const bool send = task->body_type() == fb::TaskBody::SendTask;
        const uint32_t g = send ? task->body_as_SendTask()->group() : task->body_as_RecvTask()->group();
        const uint32_t peer = send ? task->body_as_SendTask()->peer() : task->body_as_RecvTask()->peer();
        const uint32_t buffer = send ? task->body_as_SendTask()->buffer() : task->body_as_RecvTask()->buffer();
        SINKRT_RETURN_IF_ERROR(CheckGroupIndex(where, g, &group));
        if (std::find(group->ranks()->begin(), group->ranks()->end(), peer) == group->ranks()->end())
          return InvalidArgument(where + ": peer rank " + std::to_string(peer) + " is not a member of group " +
                                 std::to_string(g) + Named(group->name()));
        return CheckBufferIndex(where, buffer);
      }
      default:
        return Internal(where + ": not a collective task");
    }
  }

  Status CheckTask(const std::string& where, const fb::Program* prog, const fb::Task* task) {
    // The Verifier accepts a union whose type is set but whose value is
    // absent; every accessor below would then return null.
    if (task->body_type() != fb::TaskBody::NONE && task->body() == nullptr)
      return InvalidArgument(where + ": " + std::string(TaskKindName(task->body_type())) +
                             " task has a type but no body");
    switch (task->body_type()) {
      case fb::TaskBody::KernelTask: {
        const fb::KernelTask* k = task->body_as_KernelTask();
        if (k->op() == fb::OpCode::Invalid || OpCodeName(k->op()) == "Unknown")
          return InvalidArgument(where + ": unknown op code " + std::to_string(int(k->op())));
        SINKRT_RETURN_IF_ERROR(CheckIndices(where + " input", k->inputs()));
        SINKRT_RETURN_IF_ERROR(CheckIndices(where + " output", k->outputs()));
        if (k->fused_bias() < -1) return OutOfRange(where + ": fused bias index " + std::to_string(k->fused_bias()));
        if (k->fused_bias() >= 0)
          SINKRT_RETURN_IF_ERROR(CheckBufferIndex(where + " fused bias", uint32_t(k->fused_bias())));
        return Status::Ok();
      }
      case fb::TaskBody::GetNextTask: {
        const fb::GetNextTask* g = task->body_as_GetNextTask();
        uint32_t nq = s_->queues() ? s_->queues()->size() : 0;
        if (g->queue() >= nq)
          return OutOfRange(where + ": queue index " + std::to_string(g->queue()) + " is outside the queue table (" +
                            std::to_string(nq) + " queues)");
        const fb::QueueSpec* spec = s_->queues()->Get(g->queue());
        uint32_t nout = g->outputs() ? g->outputs()->size() : 0;
        if (nout != spec->columns()->size())
          return InvalidArgument(where + ": writes " + std::to_string(nout) + " buffers, queue '" + Str(spec->name()) +
                                 "' has " + std::to_string(spec->columns()->size()) + " columns");
        SINKRT_RETURN_IF_ERROR(CheckIndices(where, g->outputs()));
        for (uint32_t c = 0; c < nout; ++c) {
          const fb::QueueColumn* col = spec->columns()->Get(c);
          const fb::Buffer* b = s_->buffers()->Get(g->outputs()->Get(c));
          if (col->dtype() != b->dtype() || ShapeString(col->shape()) != ShapeString(b->shape()))
            return InvalidArgument(where + ": column " + std::to_string(c) + Named(col->name()) + " is " +
                                   DTypeName(col->dtype()) + ShapeString(col->shape()) + " but buffer '" +
                                   Str(b->name()) + "' is " + DTypeName(b->dtype()) + ShapeString(b->shape()));
        }
        return Status::Ok();
      }
      case fb::TaskBody::EventRecordTask:
      case fb::TaskBody::EventWaitTask: {
        uint32_t e = task->body_type() == fb::TaskBody::EventRecordTask ? task->body_as_EventRecordTask()->event()
                                                                        : task->body_as_EventWaitTask()->event();
        if (e >= prog->num_events())
          return OutOfRange(where + ": event " + std::to_string(e) + " is outside the program's " +
                            std::to_string(prog->num_events()) + " events");
        return Status::Ok();
      }
      case fb::TaskBody::InitTask: {
        const fb::InitTask* in = task->body_as_InitTask();
        uint32_t n = s_->initializers() ? s_->initializers()->size() : 0;
        if (in->initializers())
          for (uint32_t i : *in->initializers())
            if (i >= n)
              return OutOfRange(where + ": initializer index " + std::to_string(i) + " is outside the table (" +
                                std::to_string(n) + " initializers)");
        return Status::Ok();
      }
      default:
        if (IsCollective(task->body_type())) return CheckCollective(where, task);
        return InvalidArgument(where + ": missing or unknown task body (type " +
                               std::to_string(int(task->body_type())) + ")");
    }
  }

  static std::string Str(const flatbuffers::String* s) { return s ? s->str() : std::string(); }
  static std::string Named(const flatbuffers::String* s) { return s && s->size() ? " '" + s->str() + "'" : ""; }
  static std::string ShapeString(const flatbuffers::Vector<int64_t>* v) {
    std::vector<int64_t> d = v ? std::vector<int64_t>(v->begin(), v->end()) : std::vector<int64_t>{};
    return ShapeToString(d);
  }
  static std::string Hex(uint64_t v) {
    char buf[20];
    std::snprintf(buf, sizeof buf, "%llx", static_cast<unsigned long long>(v));
    return buf;
  }

  static constexpr uint32_t kMaxStreams = 2;

  const fb::TaskStream* s_;
  std::span<const uint8_t> blobs_;
  uint64_t supported_;
};

}  // namespace

Result<VerifiedStream> VerifyTaskStream(std::vector<uint8_t> bytes, uint64_t supported_features) {
  // Shared before anything points into it: a vector's buffer stays put when
  // the vector moves, and nothing writes to it from here on.
  auto owned = std::make_shared<const std::vector<uint8_t>>(std::move(bytes));
  const std::span<const uint8_t> file(*owned);
  SINKRT_ASSIGN_OR_RETURN(StreamSections sections, SplitStream(file));
  if (sections.flatbuffer.size() < 8 ||
      !flatbuffers::BufferHasIdentifier(sections.flatbuffer.data(), fb::TaskStreamIdentifier())) {
    std::string got;
    if (sections.flatbuffer.size() >= 8)
      for (int i = 4; i < 8; ++i) {
        char c = static_cast<char>(sections.flatbuffer[i]);
        got += (c >= 32 && c < 127) ? std::string(1, c) : "\\x" + std::to_string(uint8_t(c));
      }
    return InvalidArgument("not a sinkrt task stream: file identifier is '" + got + "', expected '" +
                           fb::TaskStreamIdentifier() + "'");
  }
  flatbuffers::Verifier::Options opts;
  opts.max_depth = 32;
  opts.max_tables = 4'000'000;
  opts.check_alignment = true;
  // The Verifier asserts on buffers past its max_size, so the caller's cap
  // (kMaxStreamBytes, checked in SplitStream) must stay below FLATBUFFERS_MAX_BUFFER_SIZE.
  if (sections.flatbuffer.size() >= FLATBUFFERS_MAX_BUFFER_SIZE)
    return InvalidArgument("task stream FlatBuffer exceeds the 2 GiB FlatBuffers limit");
  // Verify from the size prefix: the builder aligned the buffer including
  // it, so alignment checks are only meaningful relative to the file start.
  flatbuffers::Verifier verifier(file.data(), 4 + sections.flatbuffer.size(), opts);
  if (!fb::VerifySizePrefixedTaskStreamBuffer(verifier))
    return InvalidArgument("task stream failed FlatBuffers verification (corrupt or truncated, " +
                           std::to_string(sections.flatbuffer.size()) + " bytes)");
  VerifiedStream view;
  view.root_ = fb::GetTaskStream(sections.flatbuffer.data());
  view.flatbuffer_ = sections.flatbuffer;
  view.blobs_ = sections.blobs;
  view.file_ = std::move(owned);
  SINKRT_RETURN_IF_ERROR(Checker(view.root_, view.blobs_, supported_features).Run());
  return view;
}

const fb::Program* VerifiedStream::FindProgram(ProgramKind kind) const {
  if (!root_->programs()) return nullptr;
  for (const fb::Program* p : *root_->programs())
    if (p->kind() == ToFb(kind)) return p;
  return nullptr;
}

int64_t VerifiedStream::FindBuffer(std::string_view name) const {
  if (!root_->buffers()) return -1;
  for (uint32_t i = 0; i < root_->buffers()->size(); ++i) {
    const flatbuffers::String* n = root_->buffers()->Get(i)->name();
    if (n && n->string_view() == name) return i;
  }
  return -1;
}

bool IsCollective(fb::TaskBody kind) {
  switch (kind) {
    case fb::TaskBody::AllReduceTask:
    case fb::TaskBody::AllGatherTask:
    case fb::TaskBody::ReduceScatterTask:
    case fb::TaskBody::BroadcastTask:
    case fb::TaskBody::SendTask:
    case fb::TaskBody::RecvTask:
    case fb::TaskBody::AllToAllTask:
      return true;
    default:
      return false;
  }
}

std::string_view OpCodeName(fb::OpCode op) {
  const char* n = fb::EnumNameOpCode(op);
  return (n && *n) ? std::string_view(n) : std::string_view("Unknown");
}

std::string_view BufferRoleName(fb::BufferRole role) {
  const char* n = fb::EnumNameBufferRole(role);
  return (n && *n) ? std::string_view(n) : std::string_view("Unknown");
}

std::string_view TaskKindName(fb::TaskBody kind) {
  const char* n = fb::EnumNameTaskBody(kind);
  return (n && *n) ? std::string_view(n) : std::string_view("Unknown");
}

std::string_view ProgramKindName(fb::ProgramKind kind) { return ProgramKindName(FromFb(kind)); }

}  // namespace sinkrt
