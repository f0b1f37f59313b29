// Whether splitting a memory-bound kernel across the worker team pays: the
// ViT's Transpose, broadcast Add/Mul, AddN, BiasAddGrad and LayerNormGrad
// (issue 21) on the ViT's shapes at batch 64 and 256, Gelu (split before
// them, as a control), and a same-shape Add
// over a range of sizes (where the split's threshold should sit), each run
// back to back on one thread (team:0) and split across a team of 2 whose
// worker polls 50 µs between parts, as a device's does (team:1).
//
//   team_split_bench [benchmark flags]
//     --benchmark_enable_random_interleaving=true interleaves the two.
#include <benchmark/benchmark.h>

#include <functional>
#include <string>
#include <vector>

#include "device/src/team/worker_team.h"
#include "support/kernel_runner.h"

namespace sinkrt {
namespace {

using fb::OpCode;
using testing::KernelRunner;
using testing::KernelTensor;
using testing::RandomTensor;

struct Case {
  std::string name;
  OpCode op;
  std::vector<Shape> inputs;
  std::vector<Shape> outputs;
  std::function<void(KernelRunner&)> configure;
};

// Case `i` at `batch` (the ViT: 16 tokens of 64, 4 heads of 16, MLP 128).
Case MakeCase(int i, int64_t b) {
  const int64_t t = b * 16;
  const auto axis1 = [](KernelRunner& r) { r.Axis(1); };
  switch (i) {
    case 0:  // patchify: [B,4,7,4,7] -> [B,4,4,7,7]
      return {"patchify_transpose", OpCode::Transpose, {{b, 4, 7, 4, 7}}, {{b, 4, 4, 7, 7}}, [](KernelRunner& r) {
                r.Perm({0, 1, 3, 2, 4});
              }};
    case 1:  // heads: [B,16,3,4,16] -> [3,B,4,16,16]
      return {"qkv_transpose", OpCode::Transpose, {{b, 16, 3, 4, 16}}, {{3, b, 4, 16, 16}}, [](KernelRunner& r) {
                r.Perm({2, 0, 3, 1, 4});
              }};
    case 2:  // merge heads: [B,4,16,16] -> [B,16,4,16]
      return {"merge_transpose", OpCode::Transpose, {{b, 4, 16, 16}}, {{b, 16, 4, 16}}, [](KernelRunner& r) {
                r.Perm({0, 2, 1, 3});
              }};
    case 3:
      return {"residual_add", OpCode::Add, {{b, 16, 64}, {b, 16, 64}}, {{b, 16, 64}}, nullptr};
    case 4:
      return {"pos_embed_add", OpCode::Add, {{b, 16, 64}, {16, 64}}, {{b, 16, 64}}, nullptr};
    case 5:
      return {"scale_mul", OpCode::Mul, {{b, 4, 16, 16}, {1}}, {{b, 4, 16, 16}}, nullptr};
    case 6:
      return {"addn", OpCode::AddN, {{b, 16, 64}, {b, 16, 64}}, {{b, 16, 64}}, nullptr};
    case 7:
      return {"fc1_bias_grad", OpCode::BiasAddGrad, {{t, 128}}, {{128}}, axis1};
    case 8:
      return {"qkv_bias_grad", OpCode::BiasAddGrad, {{t, 192}}, {{192}}, axis1};
    case 9:
      return {"layernorm_grad",
              OpCode::LayerNormGrad,
              {{t, 64}, {t, 64}, {64}, {t}, {t}},
              {{t, 64}, {64}, {64}},
              [](KernelRunner& r) { r.LayerNormEpsilon(1e-5f); }};
    case 10:  // split before this change: the control, same memory traffic as an Add
      return {"gelu", OpCode::Gelu, {{t, 128}}, {{t, 128}}, nullptr};
    default:  // a same-shape Add of `b` Ki elements
      return {"add_" + std::to_string(b) + "Ki", OpCode::Add, {{b * 1024}, {b * 1024}}, {{b * 1024}}, nullptr};
  }
}

// Arguments: case, batch (or Ki elements for the Add sweep), team 0/1.
void BM_Kernel(benchmark::State& state) {
  const Case c = MakeCase(static_cast<int>(state.range(0)), state.range(1));
  std::vector<KernelTensor> in, out;
  uint32_t seed = 1;
  // Statistics as a LayerNorm writes them: rstd positive.
  for (const Shape& s : c.inputs) in.push_back(RandomTensor(s, seed++, 0.5f, 1.5f));
  for (const Shape& s : c.outputs) out.emplace_back(s);
  device::WorkerTeam team(2, 50'000);
  KernelRunner r(c.op);
  for (const KernelTensor& t : in) r.In(t);
  for (const KernelTensor& t : out) r.Out(t);
  if (c.configure) c.configure(r);
  if (state.range(2) != 0) r.Team(&team);
  if (Status st = r.Prepare(); !st.ok()) {
    state.SkipWithError(st.ToString().c_str());
    return;
  }
  for (auto _ : state) {
    if (Status st = r.Run(); !st.ok()) {
      state.SkipWithError(st.ToString().c_str());
      return;
    }
  }
  state.SetLabel(c.name);
  int64_t bytes = 0;
  for (const KernelTensor& t : in) bytes += t.numel() * 4;
  for (const KernelTensor& t : out) bytes += t.numel() * 4;
  state.SetBytesProcessed(state.iterations() * bytes);
}

BENCHMARK(BM_Kernel)
    ->ArgNames({"case", "batch", "team"})
    ->ArgsProduct({{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, {64, 256}, {0, 1}})
    ->ArgsProduct({{11}, {16, 32, 64, 128, 256, 1024}, {0, 1}})
    ->Unit(benchmark::kMicrosecond)
    ->MinTime(0.2);

}  // namespace
}  // namespace sinkrt

BENCHMARK_MAIN();
