// AdamWeightDecay and Lamb (with weight decay and a no-decay group) in
// every mode that trains: data parallel against one device at the global
// batch, the parallel optimizer against data parallel (Lamb's norms
// all-reduced over a parameter's blocks), SEMI_AUTO presets against one
// device (Lamb's norms all-reduced over a sliced parameter's slices),
// gradient accumulation against the larger batch, and one sink of N
// against N sinks of 1, bitwise. In-process devices; sinkd processes in
// integration/sinkd_world_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "sinkrt/host/optimizer.h"
#include "support/compare.h"
#include "support/optimizer_runs.h"

namespace sinkrt {
namespace {

using host::OptimizerSpec;
using testing::ExpectLossesTrack;
using testing::RunSetup;
using testing::TrainCompositionMlp;
using Trained = testing::TrainedRun;

// The recipe the issue names: decay on the weights, none on the biases.
OptimizerSpec AdamW() {
  OptimizerSpec s = OptimizerSpec::AdamWeightDecay(2e-3f, 0.01f);
  host::SetNoDecay(s, {"bias", "beta", "gamma"});
  return s;
}
OptimizerSpec Lamb() {
  OptimizerSpec s = OptimizerSpec::Lamb(2e-3f, 0.01f);
  host::SetNoDecay(s, {"bias", "beta", "gamma"});
  return s;
}

const std::vector<std::pair<const char*, OptimizerSpec>> kOptimizers = {{"AdamWeightDecay", AdamW()}, {"Lamb", Lamb()}};

// 2 ranks of 16 against one device of 32, 100 steps.
TEST(OptimizerComposition, DataParallelTracksOneDevice) {
  for (const auto& [name, opt] : kOptimizers) {
    const Trained one = TrainCompositionMlp({.optimizer = opt, .batch = 32});
    const Trained dp = TrainCompositionMlp({.optimizer = opt, .devices = 2, .batch = 16});
    ASSERT_EQ(one.losses.size(), 100u);
    ExpectLossesTrack(dp, one, 1e-5, std::string(name) + " data parallel 2 ranks");
    testing::ExpectSameTensors(dp.state, one.state, 1e-4);
  }
}

// ZeRO: each rank updates a block of every weight; Lamb's trust ratio is
// the whole weight's (the blocks' sums all-reduced).
TEST(OptimizerComposition, ParallelOptimizerTracksDataParallel) {
  for (const auto& [name, opt] : kOptimizers) {
    for (int ranks : {2, 4}) {
      const RunSetup dp{.optimizer = opt, .devices = ranks, .batch = 8};
      RunSetup zero = dp;
      zero.zero = true;
      ExpectLossesTrack(TrainCompositionMlp(zero), TrainCompositionMlp(dp), 1e-5,
                        std::string(name) + " parallel optimizer " + std::to_string(ranks) + " ranks");
    }
  }
}

// 4 micro-batches of 8 against one batch of 32.
TEST(OptimizerComposition, GradientAccumulationTrainsAsTheLargerBatch) {
  for (const auto& [name, opt] : kOptimizers) testing::ExpectAccumulationTracksTheLargerBatch(opt, std::string(name));
}

// 40 steps as 8 sinks of 5 and as 40 sinks of 1: the same bits.
TEST(OptimizerComposition, OneSinkOfNIsNSinksOfOneBitwise) {
  for (const auto& [name, opt] : kOptimizers) {
    SCOPED_TRACE(name);
    testing::ExpectOneSinkOfNIsNSinksOfOne(opt);
  }
}

// The zoo ViT under a SEMI_AUTO preset (Megatron: the attention and MLP
// weights sliced), optionally with the parallel optimizer on top, against
// one device at the same global batch.
TEST(OptimizerComposition, SemiAutoVitPresetsTrackOneDevice) {
  constexpr int kSteps = 60;
  struct Case {
    const char* preset;
    int ranks;
    bool zero;
  };
  // AdamWeightDecay corrects no bias, so its first steps are √(1−β₂)/(1−β₁)
  // ≈ 3x Adam's at one rate: at 5e-4 it moves as Adam at 1.6e-3 early on,
  // where semi_auto_model_test's Adam (1e-3) keeps the presets within 1e-5
  // (measured at 2e-3, 6x Adam's early step: float32's summation-order noise
  // grew to 2e-4 relative in 60 steps).
  OptimizerSpec adamw = AdamW();
  adamw.learning_rate = 5e-4f;
  for (const auto& [name, opt] : {std::pair<const char*, OptimizerSpec>{"AdamWeightDecay", adamw}, {"Lamb", Lamb()}}) {
    const std::vector<double> one = testing::TrainCompositionVit(opt, "", 1, false, kSteps);
    ASSERT_EQ(one.size(), static_cast<size_t>(kSteps));
    for (const Case c : {Case{"model", 2, false}, Case{"2x2", 4, false}, Case{"2x2", 4, true}}) {
      const std::string what = std::string(name) + " ViT " + c.preset + " on " + std::to_string(c.ranks) +
                               (c.zero ? " with the parallel optimizer" : "");
      ExpectLossesTrack({testing::TrainCompositionVit(opt, c.preset, c.ranks, c.zero, kSteps), {}}, {one, {}}, 1e-5,
                        what);
    }
  }
}

}  // namespace
}  // namespace sinkrt
