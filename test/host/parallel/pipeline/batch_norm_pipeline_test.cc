// BatchNorm under pipeline stages (docs/guide/normalization.md): each
// micro-batch normalises with its own statistics and the moving statistics
// update once per micro-batch forward, in micro-batch order, as MindSpore's
// PipelineCell does (its construct calls the network once per micro-batch,
// in order). The one-device equivalent is gradient accumulation over the
// same micro-batches (grad_accumulation_step = micro_size, the micro-batch
// as the dataset's batch): 2 and 4 stages give its bits over 100 steps,
// losses, parameters and moving statistics.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "sinkrt/device/in_process_device.h"
#include "sinkrt/host/model.h"
#include "support/in_process_world.h"
#include "support/test_util.h"

namespace sinkrt {
namespace {

using host::Dataset;
using host::Graph;
using host::InitSpec;
using host::LossSpec;
using host::Model;
using host::OptimizerSpec;
using host::TensorId;
using testing::LossRecorder;
using World = testing::InProcessWorld;

constexpr int64_t kFeatures = 12, kHidden = 16, kClasses = 4, kMicroBatch = 4;
constexpr int kSteps = 100;
const OptimizerSpec kOpt = OptimizerSpec::Momentum(0.05f, 0.9f);

// x [B, 12] -> bn0 -> fc1 -> bn1 -> relu -> fc2 -> bn2 -> relu -> fc3 ->
// bn3 -> relu -> fc4: a BatchNorm in every stage of 2 or 4.
Graph Network(int64_t batch) {
  Graph g("bn_pipe");
  TensorId h = host::BatchNorm1d(g, "bn0", g.Input("x", {batch, kFeatures}));
  int64_t in = kFeatures;
  for (int i = 1; i <= 3; ++i) {
    const std::string n = "fc" + std::to_string(i);
    const TensorId w = g.Param(n + ".weight", {in, kHidden}, InitSpec::XavierUniform(10 + i));
    h = g.Relu(host::BatchNorm1d(g, "bn" + std::to_string(i), g.MatMul(h, w)));
    in = kHidden;
  }
  g.AddOutput(g.MatMul(h, g.Param("fc4.weight", {kHidden, kClasses}, InitSpec::XavierUniform(20))));
  return g;
}

// Features far from mean 0 / variance 1 per column; labels from a rule.
host::Tensor Features(int64_t samples) {
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  host::Tensor x = host::Tensor::Zeros(DType::F32, {samples, kFeatures});
  auto* xs = reinterpret_cast<float*>(x.data.data());
  for (int64_t i = 0; i < samples; ++i)
    for (int64_t f = 0; f < kFeatures; ++f)
      xs[i * kFeatures + f] = 0.8f * static_cast<float>(f) + (0.5f + 0.2f * static_cast<float>(f)) * u(rng) +
                              0.6f * static_cast<float>(i % kClasses) * ((f % 3) ? 1.0f : -1.0f);
  return x;
}

Dataset Data(int64_t samples, int64_t batch) {
  host::Tensor l = host::Tensor::Zeros(DType::I32, {samples});
  auto* ls = reinterpret_cast<int32_t*>(l.data.data());
  for (int64_t i = 0; i < samples; ++i) ls[i] = static_cast<int32_t>(i % kClasses);
  return Dataset::FromArrays({{"x", Features(samples)}, {"label", l}}).Batch(batch, true);
}

// bn0's moving statistics after `updates` micro-batches of kMicroBatch rows
// in order (it reads the data, so training does not change them): MindSpore's
// update once per micro-batch, in double.
std::vector<double> ReferenceBn0(int64_t updates, bool variance) {
  const host::Tensor x = Features(updates * kMicroBatch);
  const auto* xs = reinterpret_cast<const float*>(x.data.data());
  std::vector<double> moving(kFeatures, variance ? 1.0 : 0.0);
  for (int64_t b = 0; b < updates; ++b)
    for (int64_t f = 0; f < kFeatures; ++f) {
      double sum = 0, sq = 0;
      for (int64_t i = 0; i < kMicroBatch; ++i) sum += xs[(b * kMicroBatch + i) * kFeatures + f];
      const double mean = sum / kMicroBatch;
      for (int64_t i = 0; i < kMicroBatch; ++i) sq += std::pow(xs[(b * kMicroBatch + i) * kFeatures + f] - mean, 2);
      moving[f] = 0.9 * moving[f] + 0.1 * (variance ? sq / (kMicroBatch - 1) : mean);
    }
  return moving;
}

struct Run {
  std::vector<double> losses;
  std::vector<std::pair<std::string, host::Tensor>> state;
};

// One device, `micro` micro-batches of kMicroBatch accumulated per step.
Run OneDevice(int micro) {
  device::InProcessDevice dev(testing::OneThreadOptions());
  host::ModelOptions o;
  o.compile_cache = "";
  o.context.grad_accumulation_step = micro;
  auto m = Model::Create(Network(kMicroBatch), LossSpec::SparseSoftmaxCrossEntropy(), kOpt, dev, o);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  if (!m.ok()) return {};
  LossRecorder rec;
  const Status st = (*m)->train(1, Data(int64_t{kSteps} * micro * kMicroBatch, kMicroBatch), {&rec}, false);
  EXPECT_TRUE(st.ok()) << st.ToString();
  auto state = (*m)->ReadState();
  EXPECT_TRUE(state.ok()) << state.status().ToString();
  return {rec.losses, state.ok() ? *state : decltype(Run::state){}};
}

// `stages` stages on as many in-process devices, `micro` micro-batches of
// kMicroBatch per step.
Run Pipelined(int stages, int micro) {
  World world(stages);
  host::ModelOptions o;
  o.compile_cache = "";
  o.context.mode = host::ParallelMode::DataParallel;
  o.context.device_num = stages;
  o.context.gradients_mean = true;
  o.context.pipeline_stages = stages;
  o.micro_size = micro;
  auto m = Model::Create(Network(micro * kMicroBatch), LossSpec::SparseSoftmaxCrossEntropy(), kOpt, world.links, o);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  if (!m.ok()) return {};
  LossRecorder rec;
  const Status st = (*m)->train(1, Data(int64_t{kSteps} * micro * kMicroBatch, micro * kMicroBatch), {&rec}, false);
  EXPECT_TRUE(st.ok()) << st.ToString();
  auto state = (*m)->ReadState();
  EXPECT_TRUE(state.ok()) << state.status().ToString();
  // Each stage holds its own BatchNorms' moving statistics: BatchNorms
  // on at least two stages.
  int holding = 0;
  for (int r = 0; r < stages; ++r) {
    auto mine = (*m)->ReadState(r);
    EXPECT_TRUE(mine.ok()) << mine.status().ToString();
    if (!mine.ok()) continue;
    bool has = false;
    for (const auto& [name, t] : *mine) has = has || name.find("moving_mean") != std::string::npos;
    holding += has ? 1 : 0;
  }
  EXPECT_GE(holding, 2);
  return {rec.losses, state.ok() ? *state : decltype(Run::state){}};
}

// The worst relative difference of two states, name by name (every name of
// `want` in `got`, the same shapes).
double WorstStateDifference(const Run& got, const Run& want) {
  EXPECT_EQ(got.state.size(), want.state.size());
  double worst = 0;
  for (const auto& [name, t] : want.state) {
    const auto it = std::find_if(got.state.begin(), got.state.end(), [&](const auto& e) { return e.first == name; });
    if (it == got.state.end()) {
      ADD_FAILURE() << name << " missing";
      continue;
    }
    EXPECT_EQ(it->second.shape, t.shape) << name;
    const auto* a = reinterpret_cast<const float*>(t.data.data());
    const auto* b = reinterpret_cast<const float*>(it->second.data.data());
    for (size_t i = 0; i < t.data.size() / sizeof(float); ++i)
      worst = std::max(worst, std::abs(static_cast<double>(a[i]) - b[i]) / std::max(1.0, std::abs(double{a[i]})));
  }
  return worst;
}

const float* Values(const Run& r, const std::string& name) {
  for (const auto& [n, t] : r.state)
    if (n == name) return reinterpret_cast<const float*>(t.data.data());
  ADD_FAILURE() << name << " missing";
  static const std::vector<float> zeros(kFeatures);
  return zeros.data();
}

// Bitwise: a stage runs its micro-batches' forwards in order (1F1B keeps
// the order), each its BatchNorm with that micro-batch's rows, and the
// gradients add up in the order accumulation adds them.
void TrackAccumulation(int stages, int micro) {
  const Run want = OneDevice(micro);
  const Run got = Pipelined(stages, micro);
  ASSERT_EQ(want.losses.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(got.losses.size(), want.losses.size());
  EXPECT_EQ(got.losses, want.losses);
  EXPECT_EQ(WorstStateDifference(got, want), 0.0);
  EXPECT_LT(want.losses.back(), want.losses.front());
  // The moving statistics took kSteps·micro updates, one per micro-batch.
  const std::vector<double> mean = ReferenceBn0(int64_t{kSteps} * micro, false);
  const std::vector<double> var = ReferenceBn0(int64_t{kSteps} * micro, true);
  for (int64_t f = 0; f < kFeatures; ++f) {
    EXPECT_NEAR(Values(got, "bn0.moving_mean")[f], mean[f], 1e-5 * std::abs(mean[f]) + 1e-6) << f;
    EXPECT_NEAR(Values(got, "bn0.moving_variance")[f], var[f], 1e-5 * var[f]) << f;
  }
}

TEST(BatchNormPipeline, TwoStagesTrackOneDeviceAccumulatingTheMicroBatches) { TrackAccumulation(2, 4); }
TEST(BatchNormPipeline, FourStagesTrackOneDeviceAccumulatingTheMicroBatches) { TrackAccumulation(4, 8); }

}  // namespace
}  // namespace sinkrt
