// Training throughput of issue 15's ViT (host::MakeVitNetwork, Adam 1e-3)
// on one in-process device: batch 64 and 256, 1 and 2 threads, a feeder
// thread pushing batches beside the sink (bench/fed_sink.h).
// Besides samples/s, each run reports where the step goes, in ms per step
// per op class, from the executor's per-task timing (Executor::TaskTimes).
//
//   vit_bench [--tasks] [benchmark flags]
//
// --tasks also prints every train task's ms per step (after each
// benchmark), longest first.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <string_view>
#include <utility>
#include <vector>

#include "sinkrt/device/executor.h"
#include "sinkrt/device/in_process_device.h"
#include "sinkrt/host/compiler.h"
#include "sinkrt/host/model_zoo.h"
#include "fed_sink.h"
#include "support/test_models.h"

namespace sinkrt {
namespace {

bool g_print_tasks = false;

// The op classes of the breakdown. "attention" is the attention's own
// products and softmax (its Linear layers count as matmul); "copy" is data
// movement (the patchify and head split/merge Transposes, Split, Concat,
// materialised Reshapes); "other" is the loss, GetNext and the rest.
enum Class { kMatmul, kAttention, kLayerNorm, kElementwise, kCopy, kOptimizer, kOther, kClasses };
constexpr std::array<const char*, kClasses> kClassNames = {"matmul",  "attention", "layernorm", "elementwise",
                                                           "copy",    "optimizer", "other"};

Class ClassOf(std::string_view op) {
  if (op == "MatMul") return kMatmul;
  if (op == "BatchMatMul" || op == "Softmax" || op == "SoftmaxGrad") return kAttention;
  if (op == "LayerNorm" || op == "LayerNormGrad") return kLayerNorm;
  if (op == "Transpose" || op == "Split" || op == "Concat" || op == "Reshape" || op == "Copy" || op == "Flatten" ||
      op == "Gather" || op == "GatherGrad")
    return kCopy;
  if (op == "SgdUpdate" || op == "MomentumUpdate" || op == "AdamUpdate" || op == "AdamPowers") return kOptimizer;
  if (op == "Gelu" || op == "GeluGrad" || op == "Relu" || op == "ReluGrad" || op == "Tanh" || op == "TanhGrad" ||
      op == "Sigmoid" || op == "SigmoidGrad" || op == "Add" || op == "Sub" || op == "Mul" || op == "Neg" ||
      op == "BiasAdd" || op == "BiasAddGrad" || op == "SumToShape" || op == "BroadcastTo" || op == "AddN" ||
      op == "ReduceSum" || op == "ReduceMean" || op == "Fill" || op == "Cast")
    return kElementwise;
  return kOther;
}

// The zoo network with the loss Model would append (as test/support's
// MakeMlp does for the MLP).
host::Graph VitWithLoss(int64_t batch) {
  host::Graph g = host::MakeVitNetwork(batch, 1);
  if (!g.status().ok() || g.outputs().empty()) return g;
  const host::TensorId logits = g.outputs().front();
  const host::TensorId label = g.Input("label", {batch}, DType::I32);
  g.SetLoss(g.SparseSoftmaxCrossEntropy(logits, label));
  return g;
}

// Compiles and loads the ViT; with `recompute`, every layer recomputed
// (Graph::Recompute("all"), docs/recompute.md). Sets the arena's and the
// activations' MiB as counters.
Status LoadVit(device::InProcessDevice& dev, int64_t batch, benchmark::State& state, bool recompute = false) {
  host::CompileOptions o;
  o.optimizer = host::OptimizerSpec::Adam(1e-3f);
  host::Graph g = VitWithLoss(batch);
  if (recompute) g.Recompute("all");
  SINKRT_ASSIGN_OR_RETURN(host::CompiledStream cs, host::Compile(g, o));
  state.counters["arena_MiB"] = static_cast<double>(cs.report.arena_bytes) / (1 << 20);
  state.counters["activation_MiB"] = static_cast<double>(cs.report.activation_bytes) / (1 << 20);
  return dev.Load(cs.stream).status();
}

void PrintTasks(const std::vector<device::TaskTime>& times, double steps, const benchmark::State& state) {
  std::vector<device::TaskTime> sorted = times;
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.ns > b.ns; });
  std::fprintf(stderr, "\nViT train tasks, batch %ld, %ld thread(s): ms per step\n", static_cast<long>(state.range(0)),
               static_cast<long>(state.range(1)));
  for (const device::TaskTime& t : sorted)
    std::fprintf(stderr, "  %8.4f  %-12s %-14s %.*s\n", t.ns / 1e6 / steps, kClassNames[ClassOf(t.op)],
                 std::string(t.op).c_str(), static_cast<int>(t.name.size()), t.name.data());
}

// Arguments: batch, threads.
void RunVitTrain(benchmark::State& state, bool recompute) {
  const int64_t batch = state.range(0);
  device::DeviceOptions opts = device::DeviceOptions::FromEnvironment();
  opts.threads = static_cast<int>(state.range(1));
  const uint32_t steps = 16;
  device::InProcessDevice dev(opts);
  if (Status st = LoadVit(dev, batch, state, recompute); !st.ok()) {
    state.SkipWithError(st.ToString().c_str());
    return;
  }
  const auto data = testing::MakeSyntheticData(batch * 8, 784, 10, 1);
  const double n = RunTimedSinks(state, dev, data, batch, steps).steps;
  if (n == 0) return;
  const std::vector<device::TaskTime> times = dev.executor()->TaskTimes(ProgramKind::TrainStep);
  std::array<double, kClasses> class_ms{};
  for (const device::TaskTime& t : times) class_ms[ClassOf(t.op)] += t.ns / 1e6 / n;
  for (int c = 0; c < kClasses; ++c) state.counters[std::string(kClassNames[c]) + "_ms"] = class_ms[c];
  if (g_print_tasks) PrintTasks(times, n, state);
}

void BM_VitTrain(benchmark::State& state) { RunVitTrain(state, false); }
// Recomputation (issue 20): arguments batch, threads, recompute 0/1.
void BM_VitRecompute(benchmark::State& state) { RunVitTrain(state, state.range(2) != 0); }

BENCHMARK(BM_VitTrain)
    ->ArgNames({"batch", "threads"})
    ->Args({64, 1})
    ->Args({64, 2})
    ->Args({256, 1})
    ->Args({256, 2})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(2.0);
// Recomputation (issue 20): memory saved against step time added, the
// same ViT with and without every layer recomputed.
BENCHMARK(BM_VitRecompute)
    ->ArgNames({"batch", "threads", "recompute"})
    ->ArgsProduct({{64, 256}, {1}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(2.0);

}  // namespace
}  // namespace sinkrt

int main(int argc, char** argv) {
  // Our flag first; the rest are Google Benchmark's.
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--tasks") == 0)
      sinkrt::g_print_tasks = true;
    else
      argv[kept++] = argv[i];
  }
  argc = kept;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
