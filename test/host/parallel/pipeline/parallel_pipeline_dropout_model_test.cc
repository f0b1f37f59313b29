// Model with pipeline stages and dropout (docs/guide/dropout.md): the zoo's
// ViT with nn.Dropout(0.1) at its five places, trained through Model on a
// world of in-process devices (Model feeds a stage's replicas interleaved
// rows, Dataset::ShardBelowBatch), tracks one device with the global batch
// within 1e-5 relative over 100 steps: every micro-batch and replica draws
// the masks of its rows of the global batch, in the attention's
// [B, H, T, T] probabilities and the [B·T, D] activations alike.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "sinkrt/device/in_process_device.h"
#include "sinkrt/host/model.h"
#include "sinkrt/host/model_zoo.h"
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

constexpr int64_t kGlobal = 16;
constexpr int kSteps = 100;

Dataset Data(int64_t batch) {
  testing::SyntheticData d = testing::MakeSyntheticData(kSteps * kGlobal, 784, 10, 7);
  testing::RandomizeQuarterOfLabels(d);
  return Dataset::FromArrays({{"image", testing::ImagesTensor(d)}, {"label", testing::LabelsTensor(d)}})
      .Shuffle(5)
      .Batch(batch, true);
}

host::Graph Vit(int64_t batch, float dropout) { return host::MakeVitNetwork(batch, 1, {.dropout = dropout}); }

std::vector<double> OneDevice(float dropout) {
  device::InProcessDevice dev(testing::OneThreadOptions());
  auto m = Model::Create(Vit(kGlobal, dropout), LossSpec::SparseSoftmaxCrossEntropy(), OptimizerSpec::Adam(1e-3f), dev);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  if (!m.ok()) return {};
  testing::LossRecorder losses;
  EXPECT_TRUE((*m)->train(1, Data(kGlobal), {&losses}, false).ok());
  return losses.losses;
}

std::vector<double> Pipelined(int devices, int stages, int micro) {
  const int64_t replicas = devices / stages;
  testing::InProcessWorld world(devices);
  host::ModelOptions o;
  o.context.mode = host::ParallelMode::DataParallel;
  o.context.device_num = devices;
  o.context.gradients_mean = true;
  o.context.pipeline_stages = stages;
  o.micro_size = micro;
  auto m = Model::Create(Vit(kGlobal / replicas, 0.1f), LossSpec::SparseSoftmaxCrossEntropy(),
                         OptimizerSpec::Adam(1e-3f), world.links, o);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  if (!m.ok()) return {};
  testing::LossRecorder losses;
  const Status st = (*m)->train(1, Data(kGlobal / replicas), {&losses}, false);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return losses.losses;
}

void ExpectTracks(const std::vector<double>& want, const std::vector<double>& got) {
  ASSERT_EQ(want.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(got.size(), want.size());
  double worst = 0;
  for (size_t s = 0; s < want.size(); ++s) {
    const double rel = std::abs(got[s] - want[s]) / std::abs(want[s]);
    worst = std::max(worst, rel);
    EXPECT_LE(rel, 1e-5) << "step " << s << ": " << got[s] << " against one device's " << want[s];
  }
  ::testing::Test::RecordProperty("worst_relative_loss_difference", std::to_string(worst));
  std::printf("worst relative loss difference over %zu steps: %.3g\n", want.size(), worst);
}

TEST(PipelineDropoutModel, VitTwoStagesTrackOneDevice) {
  const std::vector<double> want = OneDevice(0.1f);
  const std::vector<double> without = OneDevice(0.0f);
  ASSERT_FALSE(without.empty());
  EXPECT_GT(std::abs(without[0] - want[0]), 1e-4 * std::abs(want[0]));  // dropout matters
  ExpectTracks(want, Pipelined(2, 2, 4));
}

TEST(PipelineDropoutModel, VitTwoReplicasTimesTwoStagesTrackOneDevice) {
  ExpectTracks(OneDevice(0.1f), Pipelined(4, 2, 4));
}

// Eval (MindSpore's nn.Dropout outside set_train) runs the pipeline's
// forward without dropout: the pipelined ViT with dropout 0.1 scores what
// one device without dropout scores from the same initial parameters (the
// seeds), a partial last batch included.
TEST(PipelineDropoutModel, EvalRunsWithoutDropout) {
  device::InProcessDevice dev(testing::OneThreadOptions());
  auto one = Model::Create(Vit(kGlobal, 0.0f), LossSpec::SparseSoftmaxCrossEntropy(), OptimizerSpec::Adam(1e-3f), dev);
  SINKRT_ASSERT_OK(one);
  testing::InProcessWorld world(2);
  host::ModelOptions o;
  o.context.mode = host::ParallelMode::DataParallel;
  o.context.device_num = 2;
  o.context.gradients_mean = true;
  o.context.pipeline_stages = 2;
  o.micro_size = 4;
  auto m = Model::Create(Vit(kGlobal, 0.1f), LossSpec::SparseSoftmaxCrossEntropy(), OptimizerSpec::Adam(1e-3f),
                         world.links, o);
  SINKRT_ASSERT_OK(m);
  testing::SyntheticData d = testing::MakeSyntheticData(3 * kGlobal + 5, 784, 10, 9);
  const Dataset test = Dataset::FromArrays({{"image", testing::ImagesTensor(d)}, {"label", testing::LabelsTensor(d)}})
                           .Batch(kGlobal, false);
  auto want = (*one)->eval(test);
  auto got = (*m)->eval(test);
  SINKRT_ASSERT_OK(want);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->samples, want->samples);
  EXPECT_NEAR(got->loss, want->loss, 1e-5 * want->loss);
  EXPECT_DOUBLE_EQ(got->accuracy, want->accuracy);
}

}  // namespace
}  // namespace sinkrt
