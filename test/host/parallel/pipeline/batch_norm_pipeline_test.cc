// BatchNorm under pipeline stages (docs/guide/normalization.md): each
// micro-batch normalises with its own statistics and the moving statistics
// update once per micro-batch forward, in micro-batch order, as MindSpore's
// PipelineCell does (its construct calls the network once per micro-batch,
// in order). The one-device equivalent is gradient accumulation over the
// same micro-batches (grad_accumulation_step = micro_size, the micro-batch
// as the dataset's batch): 2 and 4 stages give its bits over 100 steps,
// losses, parameters and moving statistics. With two replicas a stage and
// SyncBatchNorm, a micro-batch's statistics cover both replicas' rows: one
// device accumulating micro-batches of both.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
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
Graph Network(int64_t batch, bool sync = false) {
  Graph g("bn_pipe");
  TensorId h = host::BatchNorm1d(g, "bn0", g.Input("x", {batch, kFeatures}), {.sync = sync});
  int64_t in = kFeatures;
  for (int i = 1; i <= 3; ++i) {
    const std::string n = "fc" + std::to_string(i);
    const TensorId w = g.Param(n + ".weight", {in, kHidden}, InitSpec::XavierUniform(10 + i));
    h = g.Relu(host::BatchNorm1d(g, "bn" + std::to_string(i), g.MatMul(h, w), {.sync = sync}));
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

// bn0's moving statistics after `updates` micro-batches of `rows` rows in
// order (it reads the data, so training does not change them): MindSpore's
// update once per micro-batch, in double.
std::vector<double> ReferenceBn0(int64_t updates, int64_t rows, bool variance) {
  const host::Tensor x = Features(updates * rows);
  const auto* xs = reinterpret_cast<const float*>(x.data.data());
  std::vector<double> moving(kFeatures, variance ? 1.0 : 0.0);
  for (int64_t b = 0; b < updates; ++b)
    for (int64_t f = 0; f < kFeatures; ++f) {
      double sum = 0, sq = 0;
      for (int64_t i = 0; i < rows; ++i) sum += xs[(b * rows + i) * kFeatures + f];
      const double mean = sum / static_cast<double>(rows);
      for (int64_t i = 0; i < rows; ++i) sq += std::pow(xs[(b * rows + i) * kFeatures + f] - mean, 2);
      moving[f] = 0.9 * moving[f] + 0.1 * (variance ? sq / static_cast<double>(rows - 1) : mean);
    }
  return moving;
}

struct Trained {
  std::vector<double> losses;
  std::vector<std::pair<std::string, host::Tensor>> state;
  double eval_loss = 0;  // on 64 samples after training
};

// eval after training: BatchNormInfer normalises with the moving
// statistics, whatever the batch, and leaves them alone.
double EvalLoss(Model& m, int64_t batch, const std::vector<std::pair<std::string, host::Tensor>>& trained) {
  auto r = m.eval(Data(64, batch));
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  auto after = m.ReadState();
  EXPECT_TRUE(after.ok() && after->size() == trained.size());
  for (size_t i = 0; after.ok() && i < after->size() && i < trained.size(); ++i)
    EXPECT_TRUE((*after)[i].second.data == trained[i].second.data) << "eval changed " << trained[i].first;
  return r.ok() ? r->loss : 0;
}

// One device, `micro` micro-batches of `rows` accumulated per step.
Trained OneDevice(int micro, int64_t rows) {
  device::InProcessDevice dev(testing::OneThreadOptions());
  host::ModelOptions o;
  o.compile_cache = "";
  o.context.grad_accumulation_step = micro;
  auto m = Model::Create(Network(rows), LossSpec::SparseSoftmaxCrossEntropy(), kOpt, dev, o);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  if (!m.ok()) return {};
  LossRecorder rec;
  const Status st = (*m)->train(1, Data(int64_t{kSteps} * micro * rows, rows), {&rec}, false);
  EXPECT_TRUE(st.ok()) << st.ToString();
  auto state = (*m)->ReadState();
  EXPECT_TRUE(state.ok()) << state.status().ToString();
  if (!state.ok()) return {rec.losses, {}, 0};
  return {rec.losses, *state, EvalLoss(**m, rows, *state)};
}

// `stages` stages of `replicas` in-process devices each, `micro`
// micro-batches of kMicroBatch rows per replica and step. A replica's
// dataset shard interleaves rows (Dataset::ShardBelowBatch), so micro-batch
// m of the replicas together is rows [m·R·b, (m+1)·R·b) of the step's.
Trained Pipelined(int stages, int micro, int replicas = 1, bool sync = false) {
  World world(stages * replicas);
  host::ModelOptions o;
  o.compile_cache = "";
  o.context.mode = host::ParallelMode::DataParallel;
  o.context.device_num = stages * replicas;
  o.context.gradients_mean = true;
  o.context.pipeline_stages = stages;
  o.micro_size = micro;
  auto m =
      Model::Create(Network(micro * kMicroBatch, sync), LossSpec::SparseSoftmaxCrossEntropy(), kOpt, world.links, o);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  if (!m.ok()) return {};
  LossRecorder rec;
  const Status st =
      (*m)->train(1, Data(int64_t{kSteps} * micro * replicas * kMicroBatch, micro * kMicroBatch), {&rec}, false);
  EXPECT_TRUE(st.ok()) << st.ToString();
  auto state = (*m)->ReadState();
  EXPECT_TRUE(state.ok()) << state.status().ToString();
  // Each stage holds its own BatchNorms' moving statistics: BatchNorms
  // on at least two stages. Under SyncBatchNorm a stage's replicas hold
  // the same bits (they normalised with the same reduced sums).
  int holding = 0;
  for (int stage = 0; stage < stages; ++stage) {
    auto first = (*m)->ReadState(static_cast<uint32_t>(stage * replicas));
    EXPECT_TRUE(first.ok()) << first.status().ToString();
    if (!first.ok()) continue;
    bool has = false;
    for (const auto& [name, t] : *first) has = has || name.find("moving_mean") != std::string::npos;
    holding += has ? 1 : 0;
    for (int r = 1; r < replicas && sync; ++r) {
      auto other = (*m)->ReadState(static_cast<uint32_t>(stage * replicas + r));
      EXPECT_TRUE(other.ok() && other->size() == first->size()) << "stage " << stage << " replica " << r;
      if (!other.ok() || other->size() != first->size()) continue;
      for (size_t i = 0; i < first->size(); ++i)
        EXPECT_TRUE((*other)[i].first == (*first)[i].first && (*other)[i].second.data == (*first)[i].second.data)
            << "stage " << stage << " replica " << r << ": " << (*first)[i].first;
    }
  }
  EXPECT_GE(holding, 2);
  if (!state.ok()) return {rec.losses, {}, 0};
  return {rec.losses, *state, EvalLoss(**m, micro * kMicroBatch, *state)};
}

// The worst relative difference of two states, name by name (every name of
// `want` in `got`, the same shapes).
double WorstStateDifference(const Trained& got, const Trained& want) {
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

const float* Values(const Trained& r, const std::string& name) {
  for (const auto& [n, t] : r.state)
    if (n == name) return reinterpret_cast<const float*>(t.data.data());
  ADD_FAILURE() << name << " missing";
  static const std::vector<float> zeros(kFeatures);
  return zeros.data();
}

// One stage a rank, bitwise: a stage runs its micro-batches' forwards in
// order (1F1B keeps the order), each its BatchNorm with that micro-batch's
// rows, and the gradients add up in the order accumulation adds them. With
// R replicas a stage and SyncBatchNorm, one device accumulating micro-batches
// of R·b rows, within 1e-5 (the replicas' sums add in another order).
void TrackAccumulation(int stages, int micro, int replicas = 1) {
  const int64_t rows = replicas * kMicroBatch;
  const Trained want = OneDevice(micro, rows);
  const Trained got = Pipelined(stages, micro, replicas, /*sync=*/replicas > 1);
  ASSERT_EQ(want.losses.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(got.losses.size(), want.losses.size());
  if (replicas == 1) {
    EXPECT_EQ(got.losses, want.losses);
    EXPECT_EQ(WorstStateDifference(got, want), 0.0);
  } else {
    double worst = 0;
    for (size_t i = 0; i < want.losses.size(); ++i)
      worst = std::max(worst, std::abs(got.losses[i] - want.losses[i]) / std::abs(want.losses[i]));
    const double state = WorstStateDifference(got, want);
    std::printf("[ info ] %d stages x %d replicas: worst relative loss %.2e, state %.2e over %d steps\n", stages,
                replicas, worst, state, kSteps);
    EXPECT_LT(worst, 1e-5);
    EXPECT_LT(state, 1e-5);
  }
  EXPECT_LT(want.losses.back(), want.losses.front());
  // eval: the moving statistics, not the batch's (the batches differ).
  EXPECT_NEAR(got.eval_loss, want.eval_loss, 1e-5 * want.eval_loss);
  // The moving statistics took kSteps·micro updates, one per micro-batch.
  const std::vector<double> mean = ReferenceBn0(int64_t{kSteps} * micro, rows, false);
  const std::vector<double> var = ReferenceBn0(int64_t{kSteps} * micro, rows, true);
  for (int64_t f = 0; f < kFeatures; ++f) {
    EXPECT_NEAR(Values(got, "bn0.moving_mean")[f], mean[f], 1e-5 * std::abs(mean[f]) + 1e-6) << f;
    EXPECT_NEAR(Values(got, "bn0.moving_variance")[f], var[f], 1e-5 * var[f]) << f;
  }
}

TEST(BatchNormPipeline, TwoStagesTrackOneDeviceAccumulatingTheMicroBatches) { TrackAccumulation(2, 4); }
TEST(BatchNormPipeline, FourStagesTrackOneDeviceAccumulatingTheMicroBatches) { TrackAccumulation(4, 8); }
TEST(BatchNormPipeline, TwoStagesOfTwoReplicasWithSyncBatchNormTrackOneDevice) { TrackAccumulation(2, 4, 2); }

// Without sync each replica normalises its own rows of a micro-batch: the
// replicas' moving statistics differ (data parallel's default), and the run
// is not the one device's above.
TEST(BatchNormPipeline, WithoutSyncEachReplicaNormalisesItsOwnRows) {
  const Trained synced = Pipelined(2, 4, 2, true), own = Pipelined(2, 4, 2, false);
  ASSERT_EQ(own.losses.size(), synced.losses.size());
  EXPECT_NE(own.losses, synced.losses);
}

// SyncBatchNorm in a semi_auto_parallel stage of several ranks is refused by
// name rather than left unreduced.
TEST(BatchNormPipeline, SyncBatchNormInASemiAutoStageIsRefusedByName) {
  World world(4);
  host::ModelOptions o;
  o.compile_cache = "";
  o.context.mode = host::ParallelMode::SemiAutoParallel;
  o.context.device_num = 4;
  o.context.pipeline_stages = 2;
  o.micro_size = 2;
  auto m = Model::Create(Network(2 * kMicroBatch, /*sync=*/true), LossSpec::SparseSoftmaxCrossEntropy(), kOpt,
                         world.links, o);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("SyncBatchNorm"), std::string::npos) << m.status().message();
  EXPECT_NE(m.status().message().find("semi_auto_parallel"), std::string::npos) << m.status().message();
}

}  // namespace
}  // namespace sinkrt
