// What the oneDNN kernels (MatMul, convolutions, pooling) share.
//
// prepare() builds the primitive once, with a user scratchpad, memory objects
// over the arena tensors and the execution argument array; run() is then one
// call to the oneDNN C API. The C++ execute() takes a std::unordered_map,
// which would allocate on every step. (oneDNN 2.6 still allocates inside
// dnnl_primitive_execute, 6–9 small blocks per call, building its own
// argument map; only a newer oneDNN can remove that.)
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <utility>
#include <vector>

#include "device/src/kernels/check.h"
#include "device/src/kernels/dnnl_runtime.h"
#include "device/src/kernels/parallel_range.h"

namespace sinkrt::device {

struct DnnlState : KernelState {
  dnnl::primitive primitive;
  std::vector<dnnl::memory> memories;      // own the handles in exec_args
  std::vector<dnnl_exec_arg_t> exec_args;  // built once, passed as is
  dnnl::memory scratchpad;                 // bound to RunContext::scratch in run
  int scratchpad_arg = -1;                 // index into exec_args, -1 if none
  void* bound_scratch = nullptr;
  // Small primitives run on the calling thread alone: waking a passively
  // waiting OpenMP worker costs ~50 µs here, more than their whole work.
  bool single_thread = false;
  // Where this primitive's scratchpad starts in RunContext::scratch: a part
  // of a split kernel runs beside the others and needs its own.
  uint64_t scratch_offset = 0;

  // Wraps `data` (an arena pointer) in a memory object described by `md`.
  void Bind(int arg, const dnnl::memory::desc& md, const dnnl::engine& engine, void* data);
  // Creates the primitive from `pd` and reserves its scratchpad (at
  // scratch_offset, which a split kernel sets first).
  void Finish(const dnnl::primitive_desc& pd, const dnnl::engine& engine, PrepareContext& ctx);
};

// A kernel split across the worker team: one single-threaded primitive per
// part, each over its own slice of the output, run at once (DnnlSplitRun).
struct DnnlSplitState : KernelState {
  std::vector<DnnlState> parts;
  std::vector<dnnl_status_t> status;  // per part, written by the part's thread
};

// oneDNN's name for a float dtype the oneDNN kernels take: f32 or bf16 (the
// dtype checks below have ruled out any other).
inline dnnl::memory::data_type DnnlType(DType dtype) {
  return dtype == DType::BF16 ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32;
}

// Dense row-major memory descriptor (nchw, oihw, ab, ...).
dnnl::memory::desc PlainDesc(const Shape& shape, dnnl::memory::data_type dt = dnnl::memory::data_type::f32);
inline dnnl::memory::desc PlainDesc(const Shape& shape, DType dtype) { return PlainDesc(shape, DnnlType(dtype)); }

// Mixed precision: the oneDNN kernels compute in f32 or bf16 (bf16 products
// accumulate in f32 inside oneDNN). These check the float operands:
//
// `o` is f32 or bf16 ("input 0 has dtype i32, expected f32 or bf16").
Status CheckFloatDType(const KernelArgs& args, Operand o);
// `o` has the dtype of `like` ("input 1 has dtype f32, expected bf16 (as
// input 0)"): oneDNN refuses mixed f32/bf16 sources, and a silent cast would
// hide a compiler bug.
Status CheckSameDType(const KernelArgs& args, Operand o, Operand like);
// An output that may be wider than its sources: f32 for f32 sources (the f32
// path is unchanged), f32 or bf16 for bf16 sources, which oneDNN accumulates
// in f32 and can store either way.
Status CheckResultDType(const KernelArgs& args, Operand o, DType sources);

// Attributes every primitive is created with: user scratchpad, and the ReLU
// post-op when `relu`.
dnnl::primitive_attr MakeAttr(bool relu);

// Checks the fusion fields of MatMul and Conv2D: a fused bias, if the task
// names one, is [channels], disjoint from the outputs, and f32 (or, with
// `sources` bf16, f32 or bf16, as CheckResultDType); the fused activation is
// None or Relu.
Status CheckFusion(const KernelArgs& args, int64_t channels, const char* channel_name, DType sources, bool* has_bias,
                   bool* relu);

// Fails unless the executor provided a DnnlRuntime.
Status RequireDnnl(const KernelArgs& args, const PrepareContext& ctx);

Status DnnlErrorStatus(const KernelArgs& args, const dnnl::error& e);
Status ExceptionStatus(const KernelArgs& args, const std::exception& e);

// Runs `build` (which creates oneDNN objects) and turns a dnnl::error or any
// other exception into a Status naming the op: no exception leaves prepare.
// Estimated floating-point work of a oneDNN kernel, from its shapes.
int64_t DnnlWorkEstimate(const KernelArgs& args);
// Below this much work a primitive is built and run with one thread.
inline constexpr int64_t kParallelWork = 8'000'000;

// Sets the calling thread's OpenMP team size for a scope.
class ScopedOmpThreads {
 public:
  explicit ScopedOmpThreads(int threads);
  ~ScopedOmpThreads();

 private:
  int previous_;
};

template <typename F>
Status CatchDnnl(const KernelArgs& args, F&& build) {
  try {
    // oneDNN sizes a primitive's thread team when it is created, so small
    // ones are created under a one-thread team (DnnlState::Finish records it).
    const bool small = DnnlWorkEstimate(args) < kParallelWork;
    ScopedOmpThreads team(small ? 1 : 0);
    return std::forward<F>(build)();
  } catch (const dnnl::error& e) {
    return DnnlErrorStatus(args, e);
  } catch (const std::exception& e) {
    return ExceptionStatus(args, e);
  }
}

// The run() of every oneDNN kernel: executes the prepared primitive.
Status DnnlRun(const KernelArgs& args, KernelState* state, RunContext& ctx);
// The run() of a DnnlSplitState: every part at once on the worker team.
Status DnnlSplitRun(const KernelArgs& args, KernelState* state, RunContext& ctx);

}  // namespace sinkrt::device
