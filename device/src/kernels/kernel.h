// Kernel interface: plain functions over arena pointers.
//
// Like TFLM's registrations, a kernel is a pair of function pointers.
// prepare() runs once at load: it checks every shape, dtype and option of
// the task against the op's contract (the stream is only partly trusted) and
// builds any state, such as oneDNN primitives with fused post-ops. run()
// executes blind inside the sink: no checks, no allocation, no syscalls.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "sinkrt/fb/task_stream_generated.h"
#include "sinkrt/runtime/dtype.h"
#include "sinkrt/runtime/status.h"

namespace sinkrt::device {

struct TensorRef {
  void* data = nullptr;
  DType dtype = DType::Invalid;
  Shape shape;
  int64_t numel = 0;

  float* f32() const { return static_cast<float*>(data); }
  int32_t* i32() const { return static_cast<int32_t*>(data); }
  int64_t dim(int i) const { return shape[i < 0 ? shape.size() + i : i]; }
  int rank() const { return static_cast<int>(shape.size()); }
};

// Everything a kernel reads, resolved at load from the task and the arena.
struct KernelArgs {
  const fb::KernelTask* task = nullptr;  // op, options, fused activation
  std::vector<TensorRef> inputs;
  std::vector<TensorRef> outputs;
  TensorRef fused_bias;  // data == nullptr when none
};

// Per-kernel state built by prepare (oneDNN primitives and memory objects).
struct KernelState {
  virtual ~KernelState() = default;
};

struct DnnlRuntime;  // engine + stream, one per device (dnnl_runtime.h)
class WorkerTeam;    // the compute threads a kernel may split across (team/worker_team.h)

struct PrepareContext {
  DnnlRuntime* dnnl = nullptr;
  // Raised by prepare to the largest scratch any kernel needs; the executor
  // allocates (and pre-faults) that much once, after every prepare.
  uint64_t scratch_bytes = 0;
  // Threads a kernel may split its work across (RunContext::team's size):
  // a kernel that splits decides its parts here, once, from the shapes.
  int team_size = 1;
};

struct RunContext {
  DnnlRuntime* dnnl = nullptr;
  uint8_t* scratch = nullptr;  // scratch_bytes, shared by the kernels of one stream
  // The compute stream's team (nullptr on a stream that must not split,
  // such as the comm stream); parts run at once, so a part that needs
  // scratch takes its own slice of it.
  WorkerTeam* team = nullptr;
};

struct KernelImpl {
  // Checks args against the op's contract; errors name the op, the operand
  // and what mismatched. May set *state.
  Status (*prepare)(const KernelArgs& args, PrepareContext& ctx, std::unique_ptr<KernelState>* state);
  // Data-dependent failures only (a label out of range); shapes were checked.
  Status (*run)(const KernelArgs& args, KernelState* state, RunContext& ctx);
};

// The kernel for `op`, or nullptr if this device does not implement it.
const KernelImpl* FindKernel(fb::OpCode op);

}  // namespace sinkrt::device
