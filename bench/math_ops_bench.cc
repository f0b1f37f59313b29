// The elementwise math kernels of issue 41 (Div, Maximum, Minimum, Pow,
// Erf, GeluErf and their gradient kernels, and Exp, Log, Sqrt, Rsqrt,
// Square, Abs; OneHot, Pad and PadGrad) against this machine's memory bandwidth, measured in the
// same run: a memcpy of the same bytes (read one stream, write one) and a
// STREAM-style "add" of plain loops (read two, write one), on one thread,
// the kernels as a device's single-thread task runs them.
//
// Every row reports bytes/s (the kernel's operands once each: inputs read,
// output written); a kernel's fraction of the machine is its bytes/s over
// the copy row's of the same size (or the add row's for two-input ones).
//
//   math_ops_bench [benchmark flags]
//     --benchmark_filter=BM_Op/... picks kernels; the sizes are Ki floats.
#include <benchmark/benchmark.h>

#include <cstring>
#include <string>
#include <vector>

#include "support/kernel_runner.h"

namespace sinkrt {
namespace {

using fb::OpCode;
using testing::KernelRunner;
using testing::KernelTensor;
using testing::RandomTensor;

struct Op {
  OpCode op;
  int inputs;
  float lo, hi;  // inside the op's domain (Log, Sqrt, Rsqrt, Pow's base)
};

const Op kOps[] = {
    {OpCode::Div, 2, 0.5f, 2.0f},    {OpCode::Maximum, 2, -1.0f, 1.0f},   {OpCode::Minimum, 2, -1.0f, 1.0f},
    {OpCode::Pow, 2, 0.5f, 2.0f},    {OpCode::MaximumGradMask, 2, -1, 1}, {OpCode::PowGradBase, 2, 0.5f, 2.0f},
    {OpCode::Erf, 1, -3.0f, 3.0f},   {OpCode::GeluErf, 1, -3.0f, 3.0f},   {OpCode::ErfGrad, 2, -3.0f, 3.0f},
    {OpCode::GeluErfGrad, 2, -3, 3}, {OpCode::Exp, 1, -3.0f, 3.0f},       {OpCode::Log, 1, 0.5f, 2.0f},
    {OpCode::Sqrt, 1, 0.5f, 2.0f},   {OpCode::Rsqrt, 1, 0.5f, 2.0f},      {OpCode::Square, 1, -1.0f, 1.0f},
    {OpCode::Abs, 1, -1.0f, 1.0f},   {OpCode::Add, 2, -1.0f, 1.0f},       {OpCode::Mul, 2, -1.0f, 1.0f},
};

// Arguments: op index, Ki floats per operand.
void BM_Op(benchmark::State& state) {
  const Op& o = kOps[state.range(0)];
  const Shape shape{state.range(1) * 1024};
  std::vector<KernelTensor> in;
  for (int i = 0; i < o.inputs; ++i) in.push_back(RandomTensor(shape, 1 + i, o.lo, o.hi));
  KernelTensor out(shape);
  KernelRunner r(o.op);
  for (const KernelTensor& t : in) r.In(t);
  r.Out(out);
  if (Status st = r.Prepare(); !st.ok()) {
    state.SkipWithError(st.ToString().c_str());
    return;
  }
  for (auto _ : state) {
    if (Status st = r.Run(); !st.ok()) {
      state.SkipWithError(st.ToString().c_str());
      return;
    }
    benchmark::ClobberMemory();
  }
  state.SetLabel(fb::EnumNameOpCode(o.op));
  state.SetBytesProcessed(state.iterations() * (o.inputs + 1) * shape[0] * 4);
}

// OneHot: i32 indices [Ki * 1024 / depth] -> f32 [.., depth] (Ki floats
// out); bytes: the indices read and the output written. Depth 16 and 1024
// (a label set and a vocabulary). Ids cover [0, depth] (one past: off only).
void BM_OneHot(benchmark::State& state) {
  const int64_t depth = state.range(0), n = state.range(1) * 1024, rows = n / depth;
  KernelTensor idx(Shape{rows}, DType::I32), out(Shape{rows, depth});
  for (int64_t i = 0; i < rows; ++i) idx.i32()[i] = static_cast<int32_t>((i * 7919) % (depth + 1));
  KernelRunner r(OpCode::OneHot);
  r.Options(fb::OpOptions::OneHotOptions, fb::CreateOneHotOptions(r.fbb(), depth, 1.0f, 0.0f, -1).Union());
  r.In(idx).Out(out);
  if (Status st = r.Prepare(); !st.ok()) {
    state.SkipWithError(st.ToString().c_str());
    return;
  }
  for (auto _ : state) {
    (void)r.Run();
    benchmark::ClobberMemory();
  }
  state.SetLabel("OneHot depth " + std::to_string(depth));
  state.SetBytesProcessed(state.iterations() * (rows * 4 + n * 4));
}

// Pad (op 0) and PadGrad (op 1) in a mode (0 constant, 1 reflect, 2
// symmetric) of rows of 252 floats by 2 on each side (a 28x28-style image
// row border, as Conv padding): [Ki * 4, 252] <-> [Ki * 4, 256] (Ki floats
// padded); bytes: x read and y written (or dy read and dx written).
void BM_Pad(benchmark::State& state) {
  const bool grad = state.range(0) == 1;
  const auto mode = static_cast<fb::PadMode>(state.range(1));
  const int64_t rows = state.range(2) * 4;
  KernelTensor small = RandomTensor(Shape{rows, 252}, 3), big = RandomTensor(Shape{rows, 256}, 4);
  KernelRunner r(grad ? OpCode::PadGrad : OpCode::Pad);
  std::vector<int64_t> paddings = {0, 0, 2, 2};
  r.Options(fb::OpOptions::PadOptions, fb::CreatePadOptionsDirect(r.fbb(), &paddings, mode, 0.0f).Union());
  if (grad) {
    r.In(big).Out(small);
  } else {
    r.In(small).Out(big);
  }
  if (Status st = r.Prepare(); !st.ok()) {
    state.SkipWithError(st.ToString().c_str());
    return;
  }
  for (auto _ : state) {
    (void)r.Run();
    benchmark::ClobberMemory();
  }
  state.SetLabel(std::string(grad ? "PadGrad " : "Pad ") + fb::EnumNamePadMode(mode));
  state.SetBytesProcessed(state.iterations() * rows * (252 + 256) * 4);
}

// memcpy of one operand's bytes: read one, write one (the unary kernels' traffic).
void BM_Copy(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0)) * 1024;
  std::vector<float> a(n, 1.0f), b(n);
  for (auto _ : state) {
    std::memcpy(b.data(), a.data(), n * sizeof(float));
    benchmark::ClobberMemory();
  }
  state.SetLabel("memcpy");
  state.SetBytesProcessed(state.iterations() * 2 * static_cast<int64_t>(n) * 4);
}

// STREAM's add: c = a + b, read two, write one (the binary kernels' traffic).
void BM_StreamAdd(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0)) * 1024;
  std::vector<float> a(n, 1.0f), b(n, 2.0f), c(n);
  for (auto _ : state) {
    const float* __restrict pa = a.data();
    const float* __restrict pb = b.data();
    float* __restrict pc = c.data();
    for (size_t i = 0; i < n; ++i) pc[i] = pa[i] + pb[i];
    benchmark::ClobberMemory();
  }
  state.SetLabel("stream add");
  state.SetBytesProcessed(state.iterations() * 3 * static_cast<int64_t>(n) * 4);
}

// 64 Ki floats (256 KiB an operand: in L2) and 4 Mi floats (16 MiB: DRAM).
BENCHMARK(BM_Copy)->ArgName("Ki")->Arg(64)->Arg(4096)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_StreamAdd)->ArgName("Ki")->Arg(64)->Arg(4096)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Op)
    ->ArgNames({"op", "Ki"})
    ->ArgsProduct({benchmark::CreateDenseRange(0, static_cast<int64_t>(std::size(kOps)) - 1, 1), {64, 4096}})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_OneHot)->ArgNames({"depth", "Ki"})->ArgsProduct({{16, 1024}, {64, 4096}})->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Pad)
    ->ArgNames({"grad", "mode", "Ki"})
    ->ArgsProduct({{0, 1}, {0, 1, 2}, {64, 4096}})
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace sinkrt

BENCHMARK_MAIN();
