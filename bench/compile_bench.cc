// Compile time and stream size: the host's whole pipeline (training graph,
// autodiff, optimizer, lowering with fusion, memory planning, writing) for
// MLPs of 10, 100 and 1000 layers of width 256 and for LeNet, batch 64.
// Target (issue 6): 1000 layers in under one second on this machine.
//
//   BM_Compile/mlp/L         Compile() of a stand-alone stream
//   BM_CompileDepth/L        Compile() of a narrow (16 wide, batch 8) MLP of
//                            L = 1k..16k layers: compile time against
//                            depth, with Google Benchmark's fitted
//                            complexity (issue 39: the memory planner
//                            made it quadratic; now O(N))
//   BM_CompileDataParallel/L CompileJob() of a 2-rank data-parallel job
//                            (fusion buckets, the comm stream; two streams)
//   BM_SerializeGraph/L, BM_ParseGraph/L
//                            the graph file of the same MLP: write, read back
//   BM_CompileSemiAutoVit/B  Compile() of rank 0's stream of a B-block ViT
//                            (the zoo ViT at B blocks, batch 64) under
//                            SEMI_AUTO_PARALLEL on 4 ranks, the `model`
//                            preset (Megatron's layout, attention by
//                            heads); issue 16's target: 48 blocks in
//                            under 2 s
//
// Counters: stream_bytes, tasks (train_step compute), arena_bytes, and for
// graph files file_bytes.
#include <benchmark/benchmark.h>

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "sinkrt/fb/task_stream_generated.h"
#include "sinkrt/host/compiled_job.h"
#include "sinkrt/host/compiler.h"
#include "sinkrt/host/graph_file.h"
#include "sinkrt/host/model_zoo.h"
#include "sinkrt/host/shard_strategies.h"
#include "sinkrt/runtime/task_stream_verifier.h"
#include "support/test_models.h"

namespace sinkrt {
namespace {

constexpr int64_t kBatch = 64;

// 784 -> 256 x (layers - 1) -> 10: `layers` dense layers.
std::vector<int64_t> Widths(int layers) {
  std::vector<int64_t> w = {784};
  for (int i = 0; i + 1 < layers; ++i) w.push_back(256);
  w.push_back(10);
  return w;
}

host::CompileOptions Options() {
  host::CompileOptions o;
  o.optimizer = host::OptimizerSpec::Momentum(0.01f, 0.9f);
  o.predict_program = true;
  return o;
}

void Report(benchmark::State& state, const host::CompiledStream& s) {
  state.counters["stream_bytes"] = static_cast<double>(s.stream.bytes().size());
  state.counters["tasks"] = static_cast<double>(s.report.train_tasks);
  state.counters["arena_bytes"] = static_cast<double>(s.report.arena_bytes);
}

void CompileLoop(benchmark::State& state, const host::Graph& g) {
  std::optional<host::CompiledStream> last;
  for (auto _ : state) {
    auto s = host::Compile(g, Options());
    if (!s.ok()) {
      state.SkipWithError(s.status().ToString().c_str());
      return;
    }
    last = std::move(s).value();
  }
  if (last) Report(state, *last);
}

void BM_CompileMlp(benchmark::State& state) {
  CompileLoop(state, testing::MakeMlp(kBatch, Widths(static_cast<int>(state.range(0)))));
}
BENCHMARK(BM_CompileMlp)->Name("BM_Compile/mlp")->Arg(10)->Arg(100)->Arg(1000)->Unit(benchmark::kMillisecond);

// Deep and narrow, so that depth, not arithmetic, is what grows.
void BM_CompileDepth(benchmark::State& state) {
  const int layers = static_cast<int>(state.range(0));
  const host::Graph g = testing::MakeMlp(8, std::vector<int64_t>(static_cast<size_t>(layers) + 1, 16));
  CompileLoop(state, g);
  state.SetComplexityN(layers);
}
BENCHMARK(BM_CompileDepth)
    ->RangeMultiplier(2)
    ->Range(1 << 10, 1 << 14)
    ->Complexity(benchmark::oN)
    ->Unit(benchmark::kMillisecond);

void BM_CompileLeNet(benchmark::State& state) { CompileLoop(state, testing::MakeLeNet(kBatch)); }
BENCHMARK(BM_CompileLeNet)->Name("BM_Compile/lenet")->Unit(benchmark::kMillisecond);

void BM_CompileDataParallel(benchmark::State& state) {
  const host::Graph g = testing::MakeMlp(kBatch, Widths(static_cast<int>(state.range(0))));
  host::CompileOptions o = Options();
  o.world_size = 2;
  o.parallel_mode = host::ParallelMode::DataParallel;
  o.gradients_mean = true;
  host::CompiledJob last;
  for (auto _ : state) {
    auto job = host::CompileJob(g, o);
    if (!job.ok()) {
      state.SkipWithError(job.status().ToString().c_str());
      return;
    }
    last = std::move(job).value();
  }
  Report(state, last.ranks[0]);
  state.counters["buckets"] = static_cast<double>(last.ranks[0].report.buckets.size());
}
BENCHMARK(BM_CompileDataParallel)->Arg(10)->Arg(100)->Arg(1000)->Unit(benchmark::kMillisecond);

void BM_SerializeGraph(benchmark::State& state) {
  const host::Graph g = testing::MakeMlp(kBatch, Widths(static_cast<int>(state.range(0))));
  size_t bytes = 0;
  for (auto _ : state) {
    auto file = host::SerializeGraph(g);
    if (!file.ok()) {
      state.SkipWithError(file.status().ToString().c_str());
      return;
    }
    bytes = file->size();
  }
  state.counters["file_bytes"] = static_cast<double>(bytes);
}
BENCHMARK(BM_SerializeGraph)->Arg(10)->Arg(1000)->Unit(benchmark::kMillisecond);

void BM_ParseGraph(benchmark::State& state) {
  const auto file = host::SerializeGraph(testing::MakeMlp(kBatch, Widths(static_cast<int>(state.range(0)))));
  if (!file.ok()) {
    state.SkipWithError(file.status().ToString().c_str());
    return;
  }
  for (auto _ : state) {
    auto g = host::ParseGraph(*file, "bench");
    if (!g.ok()) {
      state.SkipWithError(g.status().ToString().c_str());
      return;
    }
    benchmark::DoNotOptimize(g->graph.ops().size());
  }
  state.counters["file_bytes"] = static_cast<double>(file->size());
}
BENCHMARK(BM_ParseGraph)->Arg(10)->Arg(1000)->Unit(benchmark::kMillisecond);

// -- SEMI_AUTO_PARALLEL: a deep ViT on 4 ranks ----------------------------------

constexpr int kRanks = 4;

// The zoo ViT's recipe with `blocks` blocks and its loss, in the `model`
// preset (Megatron's layout: qkv and fc1 by columns, proj and fc2 by rows,
// attention by heads; the rest whole) on kRanks ranks.
host::Graph MakeShardedVit(int blocks, int64_t batch) {
  host::VitConfig config;
  config.blocks = blocks;
  host::Graph g = host::MakeVitNetwork(batch, 1, config);
  const host::TensorId labels = g.Input("label", {batch}, DType::I32);
  g.SetLoss(g.SparseSoftmaxCrossEntropy(g.outputs().front(), labels));
  if (Status st = host::ApplyShardStrategy("model", g, kRanks); !st.ok()) g.Fail(st);
  return g;
}

void BM_CompileSemiAutoVit(benchmark::State& state) {
  const host::Graph g = MakeShardedVit(static_cast<int>(state.range(0)), kBatch);
  if (!g.status().ok()) {
    state.SkipWithError(g.status().ToString().c_str());
    return;
  }
  host::CompileOptions o;
  o.optimizer = host::OptimizerSpec::Adam(1e-3f);
  o.parallel_mode = host::ParallelMode::SemiAutoParallel;
  o.world_size = kRanks;
  o.rank = 0;
  std::optional<host::CompiledStream> last;
  for (auto _ : state) {
    auto s = host::Compile(g, o);
    if (!s.ok()) {
      state.SkipWithError(s.status().ToString().c_str());
      return;
    }
    last = std::move(s).value();
  }
  if (!last) return;
  Report(state, *last);
  state.counters["forward_ops"] = static_cast<double>(g.ops().size());
  // The layout took: rank 0 holds a quarter of fc1's columns (64 of 256).
  const int64_t fc1 = last->stream.FindBuffer("block0.mlp.fc1.weight");
  if (fc1 >= 0 && last->stream.root()->buffers()->Get(static_cast<uint32_t>(fc1))->shape())
    state.counters["fc1_slice_cols"] =
        static_cast<double>(last->stream.root()->buffers()->Get(static_cast<uint32_t>(fc1))->shape()->Get(1));
}
BENCHMARK(BM_CompileSemiAutoVit)->Arg(2)->Arg(12)->Arg(48)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace sinkrt

BENCHMARK_MAIN();
