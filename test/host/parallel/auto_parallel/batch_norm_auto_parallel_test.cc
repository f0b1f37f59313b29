// BatchNorm under AUTO_PARALLEL (docs/guide/normalization.md): the search
// plans a conv + BatchNorm net with a batch split or a channel split, and
// the run tracks one device at the same global batch over 100 steps (1e-5
// relative, moving statistics included). A batch split makes the op
// SyncBatchNorm over the ranks that split it, as MindSpore's BatchNormInfo
// does: the plan never changes what the step computes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "host/src/job/stream_report.h"
#include "sinkrt/device/in_process_device.h"
#include "sinkrt/host/auto_parallel.h"
#include "sinkrt/host/compiled_job.h"
#include "sinkrt/host/compiler.h"
#include "sinkrt/host/model.h"
#include "support/in_process_world.h"
#include "support/test_util.h"

namespace sinkrt {
namespace {

using host::Dataset;
using host::Graph;
using host::InitSpec;
using host::Model;
using host::ParallelMode;
using host::TensorId;
using testing::LossRecorder;
using World = testing::InProcessWorld;

#ifdef SINKRT_SOURCE_DIR
const std::string kCalibration = std::string(SINKRT_SOURCE_DIR) + "/test/data/calibration_fixed.json";
#else
const std::string kCalibration = "";
#endif

constexpr int64_t kSide = 6, kClasses = 3;
constexpr int kSteps = 100;

// The net's shape: with 3 channels and a batch of 32 the search splits
// BatchNorm's batch, with 4 channels and a batch of 8 its channels (the
// fixed calibration's prices).
struct Shape {
  int64_t global_batch, channels;
};
constexpr Shape kSplitsBatch{32, 3}, kSplitsChannels{8, 4};

// image [B, 2, 6, 6] -> conv [C, 2, 3, 3] pad 1 -> BatchNorm2d "bn" -> relu
// -> flatten -> fc [C·36, 3].
Graph Network(Shape shape, int64_t batch, bool sync) {
  Graph g("conv_bn");
  const TensorId x = g.Input("image", {batch, 2, kSide, kSide});
  const TensorId w = g.Param("conv.weight", {shape.channels, 2, 3, 3}, InitSpec::HeUniform(3));
  const TensorId h = g.Relu(host::BatchNorm2d(g, "bn", g.Conv2D(x, w, 1, 1), {.sync = sync}));
  const int64_t features = shape.channels * kSide * kSide;
  const TensorId flat = g.Reshape(h, {batch, features});
  g.AddOutput(g.MatMul(flat, g.Param("fc.weight", {features, kClasses}, InitSpec::XavierUniform(4))));
  return g;
}

Dataset Data(Shape shape, int64_t batch) {
  const int64_t samples = int64_t{kSteps} * shape.global_batch, features = 2 * kSide * kSide;
  std::mt19937 rng(31);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  host::Tensor x = host::Tensor::Zeros(DType::F32, {samples, 2, kSide, kSide});
  host::Tensor l = host::Tensor::Zeros(DType::I32, {samples});
  auto* xs = reinterpret_cast<float*>(x.data.data());
  auto* ls = reinterpret_cast<int32_t*>(l.data.data());
  for (int64_t i = 0; i < samples; ++i) {
    const int32_t rule = static_cast<int32_t>((i * 5 + i / 3) % kClasses);
    for (int64_t f = 0; f < features; ++f)
      xs[i * features + f] = 1.0f + u(rng) + 0.7f * static_cast<float>(rule == (f / 12) % kClasses);
    // A third of the labels at random: the loss stays well above 0.
    ls[i] = u(rng) < -0.33f ? static_cast<int32_t>(rng() % kClasses) : rule;
  }
  return Dataset::FromArrays({{"image", x}, {"label", l}}).Batch(batch, true);
}

// The rows of the train queue rank 0 reads: one data-parallel group's batch.
int64_t GroupBatch(const Model& m) {
  const std::vector<host::ColumnSpec> cols = host::job::QueueColumns(m.compiled().stream, "train");
  return cols.empty() || cols[0].shape.empty() ? 0 : cols[0].shape[0];
}

struct Trained {
  std::vector<double> losses;
  std::vector<std::pair<std::string, host::Tensor>> state;
  int64_t group_batch = 0;
  host::OpPlanChoice bn;  // the plan's choice for the BatchNorm
};

// One device, or AUTO_PARALLEL on `devices` ranks (gradients_mean: the
// same learning rate as one device), at the global batch.
Trained Train(Shape shape, int devices, bool sync = false) {
  host::ModelOptions o;
  o.compile_cache = "";
  if (devices > 1) {
    o.context.mode = ParallelMode::AutoParallel;
    o.context.device_num = devices;
    o.context.gradients_mean = true;
    o.context.calibration_file = kCalibration;
  }
  World w(devices);
  auto m = Model::Create(Network(shape, shape.global_batch, sync), host::LossSpec::SparseSoftmaxCrossEntropy(),
                         host::OptimizerSpec::Momentum(0.05f, 0.9f), w.links, o);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  if (!m.ok()) return {};
  Trained r;
  if (const host::AutoParallelPlan* plan = (*m)->auto_parallel_plan())
    for (const host::OpPlanChoice& c : plan->ops)
      if (c.op == "bn.batchnorm") r.bn = c;
  r.group_batch = GroupBatch(**m);
  EXPECT_GT(r.group_batch, 0);
  if (r.group_batch < 1) return r;
  LossRecorder rec;
  const Status st = (*m)->train(1, Data(shape, r.group_batch), {&rec}, false);
  EXPECT_TRUE(st.ok()) << st.ToString();
  r.losses = rec.losses;
  auto state = (*m)->ReadState();
  EXPECT_TRUE(state.ok()) << state.status().ToString();
  if (state.ok()) r.state = *state;
  return r;
}

double WorstRelative(const Trained& got, const Trained& want) {
  double worst = 0;
  for (size_t i = 0; i < want.losses.size() && i < got.losses.size(); ++i)
    worst = std::max(worst, std::abs(got.losses[i] - want.losses[i]) / std::abs(want.losses[i]));
  return worst;
}

double WorstState(const Trained& got, const Trained& want) {
  double worst = 0;
  for (const auto& [name, t] : want.state) {
    const auto it = std::find_if(got.state.begin(), got.state.end(), [&](const auto& e) { return e.first == name; });
    if (it == got.state.end() || it->second.data.size() != t.data.size()) {
      ADD_FAILURE() << name << " missing or of another size";
      continue;
    }
    const auto* a = reinterpret_cast<const float*>(t.data.data());
    const auto* b = reinterpret_cast<const float*>(it->second.data.data());
    for (size_t i = 0; i < t.data.size() / sizeof(float); ++i)
      worst = std::max(worst, std::abs(static_cast<double>(a[i]) - b[i]) / std::max(1.0, std::abs(double{a[i]})));
  }
  return worst;
}

void ExpectTracks(const Trained& got, const Trained& one) {
  ASSERT_EQ(one.losses.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(got.losses.size(), one.losses.size());
  const double loss = WorstRelative(got, one), state = WorstState(got, one);
  std::printf("[ info ] group batch %lld: worst relative loss %.2e, state %.2e over %d steps\n",
              static_cast<long long>(got.group_batch), loss, state, kSteps);
  EXPECT_LT(loss, 1e-5);
  EXPECT_LT(state, 1e-5);
  EXPECT_LT(one.losses.back(), one.losses.front());
}

// The search splits the batch: the plan makes the BatchNorm sync over the
// two ranks (without it each rank normalised its 16 rows and the losses
// were 29 % off one device's), and prices its AllReduces.
TEST(BatchNormAutoParallel, ABatchSplitRunsAsSyncBatchNormAndTracksOneDevice) {
  const Trained got = Train(kSplitsBatch, 2);
  ASSERT_EQ(got.bn.strategy.size(), 5u);
  ASSERT_EQ(got.bn.strategy[0], (std::vector<int64_t>{2, 1, 1, 1})) << "the search no longer splits the batch";
  EXPECT_EQ(got.group_batch, kSplitsBatch.global_batch / 2);
  EXPECT_GT(got.bn.communication_s, 0) << "a split batch's statistics are reduced";
  ExpectTracks(got, Train(kSplitsBatch, 1));
  // The user's SyncBatchNorm under AUTO: the same plan, the same bits.
  const Trained sync = Train(kSplitsBatch, 2, /*sync=*/true);
  EXPECT_EQ(sync.bn.strategy, got.bn.strategy);
  EXPECT_EQ(sync.losses, got.losses);
}

// The search splits the channels: each rank owns its channels' statistics,
// exact without communication.
TEST(BatchNormAutoParallel, AChannelSplitTracksOneDevice) {
  const Trained got = Train(kSplitsChannels, 2);
  ASSERT_EQ(got.bn.strategy.size(), 5u);
  ASSERT_EQ(got.bn.strategy[0], (std::vector<int64_t>{1, 2, 1, 1})) << "the search no longer splits the channels";
  EXPECT_EQ(got.bn.communication_s, 0);
  ExpectTracks(got, Train(kSplitsChannels, 1));
}

// The plan's strategies compiled by hand under SEMI_AUTO_PARALLEL (what a
// saved strategy file gives) need the BatchNorm marked sync, as
// auto_parallel.md says: then every rank's stream is the AUTO compile's,
// byte for byte; without it a rank's differs (no reduction).
TEST(BatchNormAutoParallel, TheSavedStrategiesWithSyncBatchNormCompileTheSameBytes) {
  Graph g = Network(kSplitsBatch, kSplitsBatch.global_batch, false);
  const TensorId labels = g.Input("label", {kSplitsBatch.global_batch}, DType::I32);
  g.SetLoss(g.SparseSoftmaxCrossEntropy(g.outputs().at(0), labels));
  host::CompileOptions o;
  o.optimizer = host::OptimizerSpec::Momentum(0.05f, 0.9f);
  o.world_size = 2;
  o.parallel_mode = ParallelMode::AutoParallel;
  o.calibration = kCalibration;
  Graph planned = g;
  SINKRT_ASSERT_OK(host::PlanAutoParallel(planned, host::AutoParallelOptionsFor(o)));
  Graph by_hand = g, unsynced = g;
  for (size_t i = 0; i < g.ops().size(); ++i)
    if (!planned.ops()[i].strategy.empty()) {
      by_hand.Shard(g.ops()[i].name, planned.ops()[i].strategy);
      unsynced.Shard(g.ops()[i].name, planned.ops()[i].strategy);
    }
  EXPECT_GT(by_hand.SetSyncBatchNorm(true), 0u);
  host::CompileOptions semi = o;
  semi.parallel_mode = ParallelMode::SemiAutoParallel;
  for (uint32_t r = 0; r < 2; ++r) {
    o.rank = semi.rank = r;
    auto searched = host::Compile(g, o);
    auto synced = host::Compile(by_hand, semi);
    auto plain = host::Compile(unsynced, semi);
    SINKRT_ASSERT_OK(searched);
    SINKRT_ASSERT_OK(synced);
    SINKRT_ASSERT_OK(plain);
    const auto a = searched->stream.bytes(), b = synced->stream.bytes(), c = plain->stream.bytes();
    EXPECT_TRUE(std::equal(a.begin(), a.end(), b.begin(), b.end())) << "rank " << r;
    EXPECT_FALSE(std::equal(a.begin(), a.end(), c.begin(), c.end())) << "rank " << r;
  }
}

}  // namespace
}  // namespace sinkrt
