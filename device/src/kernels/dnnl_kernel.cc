#include "device/src/kernels/dnnl_kernel.h"

#include <oneapi/dnnl/dnnl_debug.h>

#include <omp.h>

#include <algorithm>
#include <string>

#include "device/src/team/worker_team.h"

namespace sinkrt::device {

void DnnlState::Bind(int arg, const dnnl::memory::desc& md, const dnnl::engine& engine, void* data) {
  memories.emplace_back(md, engine, data);
  exec_args.push_back({arg, memories.back().get()});
}

void DnnlState::Finish(const dnnl::primitive_desc& pd, const dnnl::engine& engine, PrepareContext& ctx) {
  primitive = dnnl::primitive(pd);
  single_thread = omp_get_max_threads() == 1;
  const dnnl::memory::desc md = pd.scratchpad_desc();
  const uint64_t bytes = md.get_size();
  if (bytes == 0) return;
  // No buffer yet: run() points it at the executor's scratch block.
  scratchpad = dnnl::memory(md, engine, DNNL_MEMORY_NONE);
  scratchpad_arg = static_cast<int>(exec_args.size());
  exec_args.push_back({DNNL_ARG_SCRATCHPAD, scratchpad.get()});
  ctx.scratch_bytes = std::max(ctx.scratch_bytes, scratch_offset + bytes);
}

dnnl::memory::desc PlainDesc(const Shape& shape, dnnl::memory::data_type dt) {
  dnnl::memory::dims dims(shape.begin(), shape.end());
  dnnl::memory::dims strides(shape.size());
  int64_t stride = 1;
  for (size_t k = shape.size(); k-- > 0;) {
    strides[k] = stride;
    stride *= shape[k];
  }
  return dnnl::memory::desc(dims, dt, strides);
}

dnnl::primitive_attr MakeAttr(bool relu) {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (relu) {
    dnnl::post_ops ops;
    ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
    attr.set_post_ops(ops);
  }
  return attr;
}

Status CheckFloatDType(const KernelArgs& args, Operand o) {
  const DType t = Get(args, o).dtype;
  if (t == DType::F32 || t == DType::BF16) return Status::Ok();
  return OpError(args, o.Name() + " has dtype " + DTypeName(t) + ", expected f32 or bf16");
}

Status CheckSameDType(const KernelArgs& args, Operand o, Operand like) {
  const DType t = Get(args, o).dtype, want = Get(args, like).dtype;
  if (t == want) return Status::Ok();
  return OpError(
      args, o.Name() + " has dtype " + DTypeName(t) + ", expected " + DTypeName(want) + " (as " + like.Name() + ")");
}

namespace {

// CheckResultDType for any tensor, named `name`.
Status CheckResult(const KernelArgs& args, const TensorRef& t, const std::string& name, DType sources) {
  if (t.dtype == DType::F32 || (sources == DType::BF16 && t.dtype == DType::BF16)) {
    return Status::Ok();
  }
  return OpError(args, name + " has dtype " + DTypeName(t.dtype) + ", expected " +
                           (sources == DType::BF16 ? "f32 or bf16" : "f32"));
}

}  // namespace

Status CheckResultDType(const KernelArgs& args, Operand o, DType sources) {
  return CheckResult(args, Get(args, o), o.Name(), sources);
}

Status CheckFusion(const KernelArgs& args, int64_t channels, const char* channel_name, DType sources, bool* has_bias,
                   bool* relu) {
  const fb::Activation act = args.task->fused_activation();
  if (act != fb::Activation::None && act != fb::Activation::Relu) {
    return OpError(args,
                   "fused activation " + std::to_string(static_cast<int>(act)) + " is not supported (None or Relu)");
  }
  *relu = act == fb::Activation::Relu;
  const TensorRef& bias = args.fused_bias;
  *has_bias = args.task->fused_bias() >= 0;
  if (*has_bias != (bias.data != nullptr)) {
    return OpError(args, "the task's fused_bias (" + std::to_string(args.task->fused_bias()) +
                             ") and the resolved bias tensor disagree");
  }
  if (!*has_bias) return Status::Ok();
  SINKRT_RETURN_IF_ERROR(CheckResult(args, bias, "fused bias", sources));
  if (bias.shape != Shape{channels}) {
    return OpError(args, "fused bias has shape " + ShapeToString(bias.shape) + ", expected [" + channel_name + "=" +
                             std::to_string(channels) + "]");
  }
  for (size_t i = 0; i < args.outputs.size(); ++i) {
    if (Overlaps(bias, args.outputs[i])) {
      return OpError(args, "fused bias overlaps " + Out(static_cast<int>(i)).Name() + " in the arena");
    }
  }
  return Status::Ok();
}

Status RequireDnnl(const KernelArgs& args, const PrepareContext& ctx) {
  if (ctx.dnnl != nullptr) return Status::Ok();
  return FailedPrecondition(std::string(OpName(args)) + ": no oneDNN runtime on this device");
}

namespace {

bool AnyBf16(const KernelArgs& args) {
  auto bf16 = [](const TensorRef& t) { return t.dtype == DType::BF16; };
  return std::any_of(args.inputs.begin(), args.inputs.end(), bf16) ||
         std::any_of(args.outputs.begin(), args.outputs.end(), bf16) ||
         (args.fused_bias.data != nullptr && bf16(args.fused_bias));
}

}  // namespace

Status DnnlErrorStatus(const KernelArgs& args, const dnnl::error& e) {
  std::string message = std::string(OpName(args)) + ": oneDNN: " + e.what() + " (" + dnnl_status2str(e.status) + ")";
  // oneDNN has no bf16 kernels without native bf16 support (it reports
  // unimplemented): say what the operator needs rather than leave them to
  // guess.
  if (e.status == dnnl_unimplemented && AnyBf16(args)) {
    message += "; bf16 needs a CPU with AVX512-BF16/AMX";
  }
  switch (e.status) {
    case dnnl_unimplemented:
      return Unimplemented(message);
    case dnnl_invalid_arguments:
      return InvalidArgument(message);
    case dnnl_out_of_memory:
      return ResourceExhausted(message);
    default:
      return Internal(message);
  }
}

Status ExceptionStatus(const KernelArgs& args, const std::exception& e) {
  return Internal(std::string(OpName(args)) + ": " + e.what());
}

ScopedOmpThreads::ScopedOmpThreads(int threads) : previous_(omp_get_max_threads()) {
  if (threads > 0) omp_set_num_threads(threads);
}
ScopedOmpThreads::~ScopedOmpThreads() { omp_set_num_threads(previous_); }

int64_t DnnlWorkEstimate(const KernelArgs& args) {
  if (args.inputs.empty() || args.outputs.empty()) return 0;
  const TensorRef& y = args.outputs[0];
  switch (args.task->op()) {
    case fb::OpCode::MatMul: {
      // y [M,N]; K is the dimension of a not shared with y.
      const TensorRef& a = args.inputs[0];
      if (a.rank() != 2 || y.rank() != 2) return 0;
      const int64_t k = a.numel / std::max<int64_t>(y.dim(0), 1);
      return 2 * y.numel * k;
    }
    case fb::OpCode::BatchMatMul: {
      // y [..., M, N]; K is whichever of a's last two dims is not M.
      const TensorRef& a = args.inputs[0];
      if (a.rank() < 2 || y.rank() < 2) return 0;
      const int64_t m = y.dim(-2);
      const int64_t k = a.dim(-1) == m ? a.dim(-2) : a.dim(-1);
      return 2 * y.numel * k;
    }
    case fb::OpCode::Conv2D:
    case fb::OpCode::Conv2DBackpropInput:
    case fb::OpCode::Conv2DBackpropFilter: {
      // Every conv pass does 2·numel(conv output)·C·KH·KW flops; the conv
      // output is y forward and dy (input 0) backward; C·KH·KW is the
      // weight's numel / O.
      const TensorRef& conv_out = args.task->op() == fb::OpCode::Conv2D ? y : args.inputs[0];
      const TensorRef& w = args.task->op() == fb::OpCode::Conv2D                ? args.inputs[1]
                           : args.task->op() == fb::OpCode::Conv2DBackpropInput ? args.inputs[1]
                                                                                : y;
      if (w.rank() != 4 || w.dim(0) == 0) return 0;
      return 2 * conv_out.numel * (w.numel / w.dim(0));
    }
    default:
      // Pooling is memory-bound: a few operations per input element.
      return 4 * args.inputs[0].numel;
  }
}

namespace {

// Executes one prepared primitive on `stream`, its scratchpad bound to
// `scratch` + its offset.
dnnl_status_t Execute(DnnlState& s, const dnnl::stream& stream, uint8_t* scratch) {
  uint8_t* mine = scratch + s.scratch_offset;
  if (s.scratchpad_arg >= 0 && s.bound_scratch != mine) {
    dnnl_status_t st = dnnl_memory_set_data_handle(s.scratchpad.get(), mine);
    if (st != dnnl_success) return st;
    s.bound_scratch = mine;
  }
  dnnl_status_t st =
      dnnl_primitive_execute(s.primitive.get(), stream.get(), static_cast<int>(s.exec_args.size()), s.exec_args.data());
  if (st == dnnl_success) st = dnnl_stream_wait(stream.get());
  return st;
}

Status ExecutionError(const KernelArgs& args, dnnl_status_t st) {
  return Internal(std::string(OpName(args)) + ": oneDNN execution failed (" + dnnl_status2str(st) + ")");
}

}  // namespace

Status DnnlRun(const KernelArgs& args, KernelState* state, RunContext& ctx) {
  auto& s = *static_cast<DnnlState*>(state);
  const int team = s.single_thread ? omp_get_max_threads() : 0;
  if (s.single_thread) omp_set_num_threads(1);
  const dnnl_status_t st = Execute(s, ctx.dnnl->stream, ctx.scratch);
  if (s.single_thread) omp_set_num_threads(team);
  if (st != dnnl_success) return ExecutionError(args, st);
  return Status::Ok();
}

Status DnnlSplitRun(const KernelArgs& args, KernelState* state, RunContext& ctx) {
  auto& s = *static_cast<DnnlSplitState*>(state);
  const int parts = static_cast<int>(s.parts.size());
  // Unsplit (no team, or a small product): the primitive as it was built,
  // on OpenMP's team if it was built for one.
  if (parts == 1) return DnnlRun(args, &s.parts[0], ctx);
  // Part 0 runs here, on the compute thread: one OpenMP thread for it too
  // (the workers are set so for good).
  const int team = omp_get_max_threads();
  omp_set_num_threads(1);
  auto part = [&](int p) { s.status[p] = Execute(s.parts[p], ctx.dnnl->StreamOf(p), ctx.scratch); };
  if (ctx.team) {
    ctx.team->Run(parts, part);
  } else {
    for (int p = 0; p < parts; ++p) part(p);  // a stream without the team: the same parts, in turn
  }
  omp_set_num_threads(team);
  for (dnnl_status_t st : s.status)
    if (st != dnnl_success) return ExecutionError(args, st);
  return Status::Ok();
}

}  // namespace sinkrt::device
