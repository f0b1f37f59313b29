// BatchNorm under SEMI_AUTO_PARALLEL on two in-process ranks
// (docs/guide/normalization.md): a channel split is exact (one device's
// losses), a batch split normalises each rank's rows with their own
// statistics (not one device's), and a sync batch split reduces the
// statistics over the ranks that split the batch (one device's again).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "sinkrt/host/compiler.h"
#include "support/rank_world.h"

namespace sinkrt {
namespace {

using host::Graph;
using host::InitSpec;
using host::TensorId;

constexpr int64_t kBatch = 8, kIn = 4, kChannels = 6, kClasses = 3;
constexpr int kSteps = 4;

enum class Split { None, Batch, Channels };

// x [8, 4] -> fc0 [4, 6] -> BatchNorm1d "bn" -> relu -> fc1 [6, 3] -> loss.
Graph Network(Split split, bool sync) {
  Graph g("bn_semi");
  const TensorId x = g.Input("x", {kBatch, kIn});
  const TensorId labels = g.Input("label", {kBatch}, DType::I32);
  const TensorId w0 = g.Param("fc0.weight", {kIn, kChannels}, InitSpec::XavierUniform(5));
  const TensorId w1 = g.Param("fc1.weight", {kChannels, kClasses}, InitSpec::XavierUniform(6));
  TensorId h = g.MatMul(x, w0);
  TensorId y = host::BatchNorm1d(g, "bn", h, {.sync = sync});
  TensorId logits = g.MatMul(g.Relu(y), w1);
  TensorId loss = g.SparseSoftmaxCrossEntropy(logits, labels);
  g.SetLoss(loss);
  if (split == Split::Batch) {
    g.Shard(h, {{2, 1}, {1, 1}});
    g.Shard(y, {{2, 1}, {1}, {1}, {1}, {1}});
    g.Shard(logits, {{2, 1}, {1, 1}});
    g.Shard(loss, {{2, 1}, {2}});
  } else if (split == Split::Channels) {
    g.Shard(h, {{1, 1}, {1, 2}});
    g.Shard(y, {{1, 2}, {2}, {2}, {2}, {2}});
    g.Shard(logits, {{1, 2}, {2, 1}});
    g.Shard(loss, {{1, 1}, {1}});
  }
  return g;
}

struct Data {
  std::vector<float> x;
  std::vector<int32_t> labels;
  Data() : x(kSteps * kBatch * kIn), labels(kSteps * kBatch) {
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (float& v : x) v = 1.0f + u(rng);
    for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int32_t>(i % kClasses);
  }
};

// Each rank's losses over kSteps steps; `rows` of the batch per rank,
// starting at first(rank).
std::vector<std::vector<double>> Train(const Graph& g, host::ParallelMode mode, int world, const Data& data,
                                       int64_t rows, int64_t (*first)(int)) {
  auto compile = [&](int r) {
    host::CompileOptions o;
    o.optimizer = host::OptimizerSpec::Sgd(0.1f);
    o.parallel_mode = mode;
    o.world_size = static_cast<uint32_t>(world);
    o.rank = static_cast<uint32_t>(r);
    o.gradients_mean = true;
    o.eval_program = false;
    return host::Compile(g, o);
  };
  auto feed = [&](int r, int s) {
    return testing::RowColumns(data.x.data(), kIn, data.labels.data(), s * kBatch + first(r), rows);
  };
  return testing::TrainRanks(world, kSteps, compile, feed, /*world_id=*/17);
}

int64_t Whole(int) { return 0; }
int64_t Half(int r) { return r * kBatch / 2; }

TEST(BatchNormSemiAuto, ChannelSplitAndSyncBatchSplitAreOneDeviceALocalBatchSplitIsNot) {
  const Data data;
  const auto one = Train(Network(Split::None, false), host::ParallelMode::StandAlone, 1, data, kBatch, Whole);
  const auto channels =
      Train(Network(Split::Channels, false), host::ParallelMode::SemiAutoParallel, 2, data, kBatch, Whole);
  const auto synced =
      Train(Network(Split::Batch, true), host::ParallelMode::SemiAutoParallel, 2, data, kBatch / 2, Half);
  const auto local =
      Train(Network(Split::Batch, false), host::ParallelMode::SemiAutoParallel, 2, data, kBatch / 2, Half);
  ASSERT_EQ(one[0].size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(channels[0].size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(synced[1].size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(local[1].size(), static_cast<size_t>(kSteps));
  double local_gap = 0;
  for (int s = 0; s < kSteps; ++s) {
    const double want = one[0][s];
    EXPECT_NEAR(channels[0][s], want, 1e-5 * std::abs(want)) << "channel split, step " << s;
    // A batch split's loss is partial: each rank holds its rows' mean.
    EXPECT_NEAR((synced[0][s] + synced[1][s]) / 2, want, 1e-5 * std::abs(want)) << "sync batch split, step " << s;
    local_gap = std::max(local_gap, std::abs((local[0][s] + local[1][s]) / 2 - want));
  }
  EXPECT_GT(local_gap, 1e-4) << "a local batch split normalises with each rank's rows: not one device's statistics";
}

}  // namespace
}  // namespace sinkrt
