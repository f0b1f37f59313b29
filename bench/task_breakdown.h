// Where a training step goes, per op class and per task, from the
// executor's per-task timing (Executor::TaskTimes): what vit_bench and
// train_step_bench report as counters and, with --tasks, print.
#pragma once

#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "device/src/executor.h"

namespace sinkrt {

// The op classes of the breakdown. "attention" is the attention's own
// products and softmax (its Linear layers count as matmul); "copy" is data
// movement (the patchify and head split/merge Transposes, Split, Concat,
// materialised Reshapes); "other" is the loss, GetNext and the rest.
enum Class { kMatmul, kAttention, kLayerNorm, kElementwise, kCopy, kOptimizer, kOther, kClasses };
constexpr std::array<const char*, kClasses> kClassNames = {"matmul", "attention", "layernorm", "elementwise",
                                                           "copy",   "optimizer", "other"};

inline Class ClassOf(std::string_view op) {
  if (op == "MatMul") return kMatmul;
  if (op == "BatchMatMul" || op == "Softmax" || op == "SoftmaxGrad") return kAttention;
  if (op == "LayerNorm" || op == "LayerNormGrad") return kLayerNorm;
  if (op == "Transpose" || op == "Split" || op == "Concat" || op == "Reshape" || op == "Copy" || op == "Flatten" ||
      op == "Gather" || op == "GatherGrad")
    return kCopy;
  if (op == "SgdUpdate" || op == "MomentumUpdate" || op == "AdamUpdate" || op == "AdamPowers" || op == "LrSchedule" ||
      op == "StepAdvance" || op == "AdamWeightDecay" || op == "LambNorms" || op == "LambUpdate" || op == "SumSquares" ||
      op == "ClipByGlobalNorm")
    return kOptimizer;
  if (op == "Gelu" || op == "GeluGrad" || op == "Relu" || op == "ReluGrad" || op == "Tanh" || op == "TanhGrad" ||
      op == "Sigmoid" || op == "SigmoidGrad" || op == "Add" || op == "Sub" || op == "Mul" || op == "Neg" ||
      op == "BiasAdd" || op == "BiasAddGrad" || op == "SumToShape" || op == "BroadcastTo" || op == "AddN" ||
      op == "ReduceSum" || op == "ReduceMean" || op == "Fill" || op == "Cast")
    return kElementwise;
  return kOther;
}

inline void PrintTasks(const char* model, const std::vector<device::TaskTime>& times, double steps,
                       const benchmark::State& state) {
  std::vector<device::TaskTime> sorted = times;
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.ns > b.ns; });
  std::fprintf(stderr, "\n%s train tasks, batch %ld, %ld thread(s): ms per step\n", model,
               static_cast<long>(state.range(0)), static_cast<long>(state.range(1)));
  for (const device::TaskTime& t : sorted)
    std::fprintf(stderr, "  %8.4f  %-12s %-14s %.*s\n", t.ns / 1e6 / steps, kClassNames[ClassOf(t.op)],
                 std::string(t.op).c_str(), static_cast<int>(t.name.size()), t.name.data());
}

// ms per step per op class as counters ("matmul_ms", ...).
inline void SetClassCounters(benchmark::State& state, const std::vector<device::TaskTime>& times, double steps) {
  std::array<double, kClasses> class_ms{};
  for (const device::TaskTime& t : times) class_ms[ClassOf(t.op)] += t.ns / 1e6 / steps;
  for (int c = 0; c < kClasses; ++c) state.counters[std::string(kClassNames[c]) + "_ms"] = class_ms[c];
}

// Takes --tasks out of argv (the rest are Google Benchmark's flags);
// returns whether it was there.
inline bool TakeTasksFlag(int* argc, char** argv) {
  bool found = false;
  int kept = 1;
  for (int i = 1; i < *argc; ++i) {
    if (std::string_view(argv[i]) == "--tasks")
      found = true;
    else
      argv[kept++] = argv[i];
  }
  *argc = kept;
  return found;
}

}  // namespace sinkrt
