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

#include "sinkrt/host/model.h"
#include "sinkrt/host/model_zoo.h"
#include "sinkrt/host/shard_strategies.h"
#include "support/compare.h"
#include "support/in_process_world.h"
#include "support/model_fixtures.h"
#include "support/test_models.h"
#include "support/test_util.h"

namespace sinkrt {
namespace {

using host::Dataset;
using host::LossSpec;
using host::Model;
using host::OptimizerSpec;
using host::ParallelMode;
using testing::LossRecorder;
using World = testing::InProcessWorld;

const std::vector<int64_t> kWidths = {64, 48, 48, 10};

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

struct RunSetup {
  OptimizerSpec optimizer;
  int devices = 1;
  int64_t batch = 32;  // per rank and micro-step
  int accumulate = 1;
  bool zero = false;
  bool sink = false;
  int sink_size = 1;
  int epochs = 1;
  int64_t samples = 32 * 100;
};

Dataset MlpData(int64_t samples, int64_t batch) {
  testing::SyntheticData d = testing::MakeSyntheticData(samples, kWidths[0], 10, 11);
  testing::RandomizeQuarterOfLabels(d);
  return Dataset::FromArrays({{"image", testing::ImagesTensor(d)}, {"label", testing::LabelsTensor(d)}})
      .Shuffle(3)
      .Batch(batch, true);
}

struct Trained {
  std::vector<double> losses;
  testing::NamedTensors state;
};

// The MLP under `s` (data parallel above one device); one loss per step
// (per sink when sunk), then the whole state.
Trained TrainMlp(const RunSetup& s) {
  World world(s.devices);
  host::ModelOptions o;
  o.compile_cache = "";
  o.context.grad_accumulation_step = s.accumulate;
  if (s.devices > 1) {
    o.context.mode = ParallelMode::DataParallel;
    o.context.device_num = s.devices;
    o.context.gradients_mean = true;
    o.context.enable_parallel_optimizer = s.zero;
    o.context.parallel_optimizer_config.threshold_kb = 0;
  }
  auto m = Model::Create(host::MakeMlpNetwork(s.batch, kWidths), LossSpec::SparseSoftmaxCrossEntropy(), s.optimizer,
                         world.links, o);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  if (!m.ok()) return {};
  LossRecorder rec;
  const Status st = (*m)->train(s.epochs, MlpData(s.samples, s.batch), {&rec}, s.sink, s.sink_size);
  EXPECT_TRUE(st.ok()) << st.ToString();
  Trained out{rec.losses, {}};
  auto state = (*m)->ReadState();
  EXPECT_TRUE(state.ok()) << state.status().ToString();
  if (state.ok()) out.state = std::move(state).value();
  return out;
}

double ExpectTracks(const Trained& got, const Trained& want, double rel, const std::string& what) {
  EXPECT_EQ(got.losses.size(), want.losses.size()) << what;
  const double worst = testing::WorstRelative(got.losses, want.losses);
  std::printf("[ info ] %s: worst relative loss difference %.2e over %zu steps\n", what.c_str(), worst,
              want.losses.size());
  ::testing::Test::RecordProperty(what, std::to_string(worst));
  EXPECT_LE(worst, rel) << what;
  if (!got.losses.empty()) {
    EXPECT_LT(got.losses.back(), got.losses.front()) << what << ": the loss falls";
  }
  return worst;
}

const std::vector<std::pair<const char*, OptimizerSpec>> kOptimizers = {{"AdamWeightDecay", AdamW()}, {"Lamb", Lamb()}};

// 2 ranks of 16 against one device of 32, 100 steps.
TEST(OptimizerComposition, DataParallelTracksOneDevice) {
  for (const auto& [name, opt] : kOptimizers) {
    const Trained one = TrainMlp({.optimizer = opt, .batch = 32});
    const Trained dp = TrainMlp({.optimizer = opt, .devices = 2, .batch = 16});
    ASSERT_EQ(one.losses.size(), 100u);
    ExpectTracks(dp, one, 1e-5, std::string(name) + " data parallel 2 ranks");
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
      ExpectTracks(TrainMlp(zero), TrainMlp(dp), 1e-5,
                   std::string(name) + " parallel optimizer " + std::to_string(ranks) + " ranks");
    }
  }
}

// 4 micro-batches of 8 against one batch of 32.
TEST(OptimizerComposition, GradientAccumulationTrainsAsTheLargerBatch) {
  for (const auto& [name, opt] : kOptimizers) {
    const Trained want = TrainMlp({.optimizer = opt, .batch = 32});
    const Trained got = TrainMlp({.optimizer = opt, .batch = 8, .accumulate = 4});
    ExpectTracks(got, want, 1e-5, std::string(name) + " accumulation 4x8");
    testing::ExpectSameTensors(got.state, want.state, 1e-5);
  }
}

// 40 steps as 8 sinks of 5 and as 40 sinks of 1: the same bits.
TEST(OptimizerComposition, OneSinkOfNIsNSinksOfOneBitwise) {
  for (const auto& [name, opt] : kOptimizers) {
    SCOPED_TRACE(name);
    const Trained five =
        TrainMlp({.optimizer = opt, .batch = 32, .sink = true, .sink_size = 5, .epochs = 8, .samples = 32 * 40});
    const Trained one =
        TrainMlp({.optimizer = opt, .batch = 32, .sink = true, .sink_size = 1, .epochs = 40, .samples = 32 * 40});
    ASSERT_EQ(five.losses.size(), 8u);
    ASSERT_EQ(one.losses.size(), 40u);
    for (size_t i = 0; i < 8; ++i) EXPECT_EQ(five.losses[i], one.losses[5 * i + 4]) << "sink " << i;
    testing::ExpectSameTensors(five.state, one.state);
  }
}

// The zoo ViT under a SEMI_AUTO preset (Megatron: the attention and MLP
// weights sliced), optionally with the parallel optimizer on top, against
// one device at the same global batch.
std::vector<double> VitLosses(const OptimizerSpec& opt, const std::string& preset, int n, bool zero, int steps) {
  constexpr int64_t kBatch = 8;
  const testing::SyntheticData d = testing::MakeSyntheticData(steps * kBatch, 784, 10, 9);
  host::Graph g = testing::MakeVit(kBatch);
  int64_t dp = 1;
  host::ModelOptions o;
  o.compile_cache = "";
  if (!preset.empty()) {
    auto p = host::PresetDataParallel(preset, n);
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    dp = p.ok() ? *p : 1;
    const Status st = host::ApplyShardStrategy(preset, g, n);
    EXPECT_TRUE(st.ok()) << st.ToString();
    o.context.mode = ParallelMode::SemiAutoParallel;
    o.context.device_num = n;
    o.context.gradients_mean = true;
    o.context.enable_parallel_optimizer = zero;
    o.context.parallel_optimizer_config.threshold_kb = 0;
  }
  World w(n);
  auto m = Model::Create(std::move(g), LossSpec::None(), opt, w.links, o);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  if (!m.ok()) return {};
  LossRecorder losses;
  const Status st = (*m)->train(1, testing::MakeDataset(d, kBatch / dp), {&losses}, false);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return losses.losses;
}

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
    const std::vector<double> one = VitLosses(opt, "", 1, false, kSteps);
    ASSERT_EQ(one.size(), static_cast<size_t>(kSteps));
    for (const Case c : {Case{"model", 2, false}, Case{"2x2", 4, false}, Case{"2x2", 4, true}}) {
      const std::string what = std::string(name) + " ViT " + c.preset + " on " + std::to_string(c.ranks) +
                               (c.zero ? " with the parallel optimizer" : "");
      ExpectTracks({VitLosses(opt, c.preset, c.ranks, c.zero, kSteps), {}}, {one, {}}, 1e-5, what);
    }
  }
}

}  // namespace
}  // namespace sinkrt
