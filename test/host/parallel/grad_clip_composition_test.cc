// Gradient clipping by global norm (docs/guide/clipping.md) in every mode
// that trains, each against the run it must equal: data parallel against
// one device at the global batch (the norm of the reduced gradients), the
// parallel optimizer against data parallel (the blocks' sums all-reduced),
// loss scaling against the unscaled run (the norm after unscaling), an
// overflowed step skipped, gradient accumulation against the larger batch
// (the norm of the accumulated gradient), SEMI_AUTO presets against one
// device (each slice's sum reduced over its group, a replicated parameter
// counted once), one sink of N against N sinks of 1, and sharded pipeline
// stages refused by name. In-process devices, the setup of
// support/optimizer_runs.h.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "sinkrt/host/compiler.h"
#include "sinkrt/host/optimizer.h"
#include "support/compare.h"
#include "support/optimizer_runs.h"
#include "support/test_models.h"

namespace sinkrt {
namespace {

using host::OptimizerSpec;
using testing::ExpectLossesTrack;
using testing::RunSetup;
using testing::TrainCompositionMlp;
using Trained = testing::TrainedRun;

// Clip norms well below the MLP's early global norms (about 1 to 3), so
// that every mode clips for most of the run.
constexpr float kClip = 0.25f;

OptimizerSpec Clipped(OptimizerSpec s, float clip = kClip) {
  s.clip_grad_norm = clip;
  return s;
}

const std::vector<std::pair<const char*, OptimizerSpec>> kOptimizers = {
    {"Momentum", Clipped(OptimizerSpec::Momentum(0.05f, 0.9f))},
    {"AdamWeightDecay", Clipped(OptimizerSpec::AdamWeightDecay(2e-3f, 0.01f))}};

// How far clipping moved the run: the worst relative loss difference from
// the same run unclipped. The comparisons below mean something only if
// this is far above their tolerance.
double ClippingEffect(const RunSetup& s) {
  RunSetup plain = s;
  plain.optimizer.clip_grad_norm = 0;
  return testing::WorstRelative(TrainCompositionMlp(s).losses, TrainCompositionMlp(plain).losses);
}

TEST(GradClipComposition, ClippingChangesTheRun) {
  for (const auto& [name, opt] : kOptimizers) EXPECT_GT(ClippingEffect({.optimizer = opt, .batch = 32}), 1e-2) << name;
}

// 2 ranks of 16 against one device of 32, 100 steps: the norm is taken
// after the gradient AllReduce (and its mean), so it is one device's.
TEST(GradClipComposition, DataParallelTracksOneDevice) {
  for (const auto& [name, opt] : kOptimizers) {
    const Trained one = TrainCompositionMlp({.optimizer = opt, .batch = 32});
    ASSERT_EQ(one.losses.size(), 100u);
    for (int ranks : {2, 4}) {
      const Trained dp = TrainCompositionMlp({.optimizer = opt, .devices = ranks, .batch = 32 / ranks});
      ExpectLossesTrack(dp, one, 1e-5, std::string(name) + " clipped, data parallel " + std::to_string(ranks));
      testing::ExpectSameTensors(dp.state, one.state, 1e-4);
    }
  }
}

// ZeRO: each rank holds a block of every gradient; the blocks' sums of
// squares are all-reduced over the replicas, so every rank clips by the
// whole norm, as data parallel does.
TEST(GradClipComposition, ParallelOptimizerTracksDataParallel) {
  for (const auto& [name, opt] : kOptimizers) {
    for (int ranks : {2, 4}) {
      const RunSetup dp{.optimizer = opt, .devices = ranks, .batch = 8};
      RunSetup zero = dp;
      zero.zero = true;
      const Trained z = TrainCompositionMlp(zero), d = TrainCompositionMlp(dp);
      ExpectLossesTrack(z, d, 1e-5, std::string(name) + " clipped, parallel optimizer " + std::to_string(ranks));
      testing::ExpectSameTensors(z.state, d.state, 1e-4);
    }
  }
}

// Fixed and dynamic loss scales: the norm is the unscaled gradients', the
// update unscales as before, and the run is the unscaled one.
TEST(GradClipComposition, LossScaledRunEqualsTheUnscaledOne) {
  for (const auto& [name, opt] : kOptimizers) {
    const Trained plain = TrainCompositionMlp({.optimizer = opt, .batch = 32});
    for (const host::LossScaleManager& ls :
         {host::LossScaleManager::Fixed(1024.0f, true), host::LossScaleManager::Dynamic(65536.0f, 2.0f, 50)}) {
      const std::string what = std::string(name) + " clipped, " + host::LossScaleManagerText(ls);
      const Trained scaled = TrainCompositionMlp({.optimizer = opt, .batch = 32, .loss_scale = ls});
      ExpectLossesTrack(scaled, plain, 1e-5, what);
    }
  }
}

// Loss scaling on top of the parallel optimizer: each rank checks and
// sums its blocks, the ranks agree on the overflow flag and on the norm,
// and the run is plain data parallel's, unscaled.
TEST(GradClipComposition, LossScaledParallelOptimizerTracksDataParallel) {
  for (const auto& [name, opt] : kOptimizers) {
    const Trained dp = TrainCompositionMlp({.optimizer = opt, .devices = 2, .batch = 8});
    const Trained zero = TrainCompositionMlp({.optimizer = opt,
                                              .devices = 2,
                                              .batch = 8,
                                              .zero = true,
                                              .loss_scale = host::LossScaleManager::Dynamic(65536.0f, 2.0f, 50)});
    ExpectLossesTrack(zero, dp, 1e-5, std::string(name) + " clipped, loss-scaled parallel optimizer 2");
  }
}

// A batch holding an inf overflows: that step clips nothing and skips the
// update, so the run ends bitwise where the run without that batch does
// (but for the loss scale's own counters).
TEST(GradClipComposition, AnOverflowedStepIsSkipped) {
  constexpr int64_t kBatch = 32, kSteps = 12, kOverflow = 5;
  const int64_t features = testing::kCompositionWidths[0];
  testing::SyntheticData poisoned = testing::MakeSyntheticData(kSteps * kBatch, features, 10, 5);
  poisoned.images[static_cast<size_t>(kOverflow * kBatch * features)] = std::numeric_limits<float>::infinity();
  testing::SyntheticData clean = poisoned;
  clean.images.erase(clean.images.begin() + kOverflow * kBatch * features,
                     clean.images.begin() + (kOverflow + 1) * kBatch * features);
  clean.labels.erase(clean.labels.begin() + kOverflow * kBatch, clean.labels.begin() + (kOverflow + 1) * kBatch);
  const host::LossScaleManager ls = host::LossScaleManager::Fixed(1024.0f, true);
  const OptimizerSpec opt = kOptimizers[0].second;
  const Trained got = TrainCompositionMlp({.optimizer = opt, .batch = kBatch, .loss_scale = ls, .data = &poisoned});
  const Trained want = TrainCompositionMlp({.optimizer = opt, .batch = kBatch, .loss_scale = ls, .data = &clean});
  ASSERT_EQ(got.losses.size(), static_cast<size_t>(kSteps));
  // The loss scale counted the overflow: (steps, last_overflow_iter, overflow_steps).
  auto overflows = [](const testing::NamedTensors& state) {
    for (const auto& [name, t] : state)
      if (name == "loss_scale/counters") return t.as<int32_t>()[2];
    ADD_FAILURE() << "no loss_scale/counters in the state";
    return -1;
  };
  EXPECT_EQ(overflows(got.state), 1);
  EXPECT_EQ(overflows(want.state), 0);
  auto without_scale = [](const testing::NamedTensors& state) {
    testing::NamedTensors out;
    for (const auto& entry : state)
      if (entry.first.rfind("loss_scale", 0) != 0) out.push_back(entry);
    return out;
  };
  testing::ExpectSameTensors(without_scale(got.state), without_scale(want.state));
}

// 4 micro-batches of 8 against one batch of 32: the norm is the
// accumulated gradient's, taken after the last micro-step.
TEST(GradClipComposition, GradientAccumulationTrainsAsTheLargerBatch) {
  for (const auto& [name, opt] : kOptimizers)
    testing::ExpectAccumulationTracksTheLargerBatch(opt, std::string(name) + " clipped,");
}

// 40 steps as 8 sinks of 5 and as 40 sinks of 1: the same bits.
TEST(GradClipComposition, OneSinkOfNIsNSinksOfOneBitwise) {
  for (const auto& [name, opt] : kOptimizers) {
    SCOPED_TRACE(name);
    testing::ExpectOneSinkOfNIsNSinksOfOne(opt);
  }
}

// The zoo ViT under Megatron presets: the attention and MLP weights are
// sliced (their sums of squares all-reduced over the ranks of the other
// slices), the LayerNorms, biases of the row-split layers and the
// embeddings replicated (counted once, on each rank, never summed over
// ranks); with the parallel optimizer on top every rank holds a block of
// each slice. 60 steps against one device at the same global batch.
TEST(GradClipComposition, SemiAutoVitPresetsTrackOneDevice) {
  constexpr int kSteps = 60;
  const OptimizerSpec adam = Clipped(OptimizerSpec::Adam(1e-3f), 0.5f);
  const std::vector<double> one = testing::TrainCompositionVit(adam, "", 1, false, kSteps);
  ASSERT_EQ(one.size(), static_cast<size_t>(kSteps));
  OptimizerSpec plain = adam;
  plain.clip_grad_norm = 0;
  EXPECT_GT(testing::WorstRelative(testing::TrainCompositionVit(plain, "", 1, false, kSteps), one), 1e-3)
      << "clip_norm 0.5 does not clip the ViT";
  struct Case {
    const char* preset;
    int ranks;
    bool zero;
  };
  for (const Case c : {Case{"model", 2, false}, Case{"2x2", 4, false}, Case{"2x2", 4, true}}) {
    const std::string what = std::string("Adam clipped, ViT ") + c.preset + " on " + std::to_string(c.ranks) +
                             (c.zero ? " with the parallel optimizer" : "");
    ExpectLossesTrack({testing::TrainCompositionVit(adam, c.preset, c.ranks, c.zero, kSteps), {}}, {one, {}}, 1e-5,
                      what);
  }
}

// Pipeline stages clip under data parallel (pipeline/parallel_pipeline_train_test.cc);
// a semi_auto_parallel stage's slices would need their groups' sums on top
// of the stages': refused, by name.
TEST(GradClipComposition, SemiAutoPipelineStagesAreRefusedByName) {
  host::CompileOptions o;
  o.optimizer = Clipped(OptimizerSpec::Momentum(0.05f, 0.9f));
  o.parallel_mode = host::ParallelMode::SemiAutoParallel;
  o.world_size = 2;
  o.rank = 0;
  o.pipeline.stages = 2;
  o.pipeline.micro_size = 2;
  auto cs = host::Compile(testing::MakeMlp(8, {16, 12, 4}), o);
  ASSERT_FALSE(cs.ok());
  EXPECT_EQ(cs.status().code(), StatusCode::kUnimplemented) << cs.status().ToString();
  EXPECT_NE(cs.status().message().find("gradient clipping by global norm"), std::string::npos) << cs.status().message();
  EXPECT_NE(cs.status().message().find("pipeline stages under semi_auto_parallel"), std::string::npos)
      << cs.status().message();
}

}  // namespace
}  // namespace sinkrt
