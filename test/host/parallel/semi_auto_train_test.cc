// SEMI_AUTO_PARALLEL end to end on worlds of in-process devices: each rank
// compiles its slice of the whole graph (host::Compile with
// ParallelMode::SemiAutoParallel), the collectives the layouts need run on
// the device, and the sharded step trains like one device with the same
// global batch, loss for loss.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include "sinkrt/host/compiler.h"
#include "support/rank_world.h"
#include "support/test_models.h"
#include "support/test_util.h"

namespace sinkrt {
namespace {

using host::Graph;

// testing::TanhMlp without dropout at batch 8, with `strategies` per op
// (empty: MindSpore's default).
constexpr int64_t kBatch = 8;

Graph Mlp(const testing::OpStrategies& strategies) { return testing::TanhMlp(kBatch, strategies); }

using Batch = testing::RowBatch;  // [kBatch, 32] images, [kBatch] labels

std::vector<Batch> MakeBatches(int n) {
  testing::SyntheticData d = testing::MakeSyntheticData(n * kBatch, 32, 10, 5);
  return testing::SplitBatches(d.images, d.labels, 32, n, kBatch);
}

host::CompileOptions Options(host::ParallelMode mode, uint32_t world, uint32_t rank, float lr = 0.1f,
                             const host::LrSchedule& schedule = {}) {
  host::CompileOptions o = testing::SgdRankOptions(mode, world, rank, lr);
  o.optimizer.schedule = schedule;
  return o;
}

// Rank r's rows of batch s: `rows` rows from row first_row(r).
testing::RankFeed Rows(const std::vector<Batch>& batches, int64_t rows, const std::function<int64_t(int)>& first_row) {
  return [&batches, rows, first_row](int r, int s) {
    const Batch& b = batches[s];
    return testing::RowColumns(b.images.data(), 32, b.labels.data(), first_row(r), rows);
  };
}

// Losses of one device training on the whole batches, one step per sink.
std::vector<double> SingleDevice(const std::vector<Batch>& batches, float lr = 0.1f,
                                 const host::LrSchedule& schedule = {}) {
  auto compile = [&](int) {
    return host::Compile(Mlp({}), Options(host::ParallelMode::StandAlone, 1, 0, lr, schedule));
  };
  return testing::TrainRanks(1, static_cast<int>(batches.size()), compile,
                             Rows(batches, kBatch, [](int) { return int64_t{0}; }))
      .at(0);
}

// The same on `world` ranks, each compiled for its rank from `graph`. Rank
// r reads `rows` rows of every batch from row first_row(r).
struct ShardedRun {
  std::vector<std::vector<double>> losses;  // per rank, per step
};

ShardedRun Sharded(const Graph& graph, int world, const std::vector<Batch>& batches, int64_t rows,
                   const std::function<int64_t(int)>& first_row, const host::LrSchedule& schedule = {}) {
  auto compile = [&](int r) {
    return host::Compile(graph, Options(host::ParallelMode::SemiAutoParallel, world, r, 0.1f, schedule));
  };
  return {testing::TrainRanks(world, static_cast<int>(batches.size()), compile, Rows(batches, rows, first_row))};
}

void ExpectTracks(const std::vector<double>& want, const ShardedRun& got, bool mean_over_ranks) {
  const size_t world = got.losses.size();
  for (size_t s = 0; s < want.size(); ++s) {
    double loss = 0;
    for (size_t r = 0; r < world; ++r) {
      ASSERT_EQ(got.losses[r].size(), want.size()) << "rank " << r;
      loss += got.losses[r][s];
    }
    loss = mean_over_ranks ? loss / static_cast<double>(world) : got.losses[0][s];
    EXPECT_NEAR(loss, want[s], 1e-5 * std::abs(want[s])) << "step " << s;
    if (std::getenv("SINKRT_TEST_VERBOSE")) std::printf("step %zu: %.7f %.7f\n", s, loss, want[s]);
  }
}

// Megatron's pair on 2 ranks: w1 by columns, w2 by rows, the batch whole.
TEST(SemiAutoTrain, MegatronMlpTracksOneDevice) {
  const std::vector<Batch> batches = MakeBatches(12);
  const std::vector<double> want = SingleDevice(batches);
  const Graph g = Mlp({{{1, 1}, {1, 2}}, {{1, 2}, {2}}, {{1, 2}}, {{1, 2}, {2, 1}}, {{1, 1}, {1}}, {{1, 1}, {1}}});
  const ShardedRun got = Sharded(g, 2, batches, kBatch, [](int) { return 0; });
  ExpectTracks(want, got, /*mean_over_ranks=*/false);
  // Both ranks compute the same loss.
  for (size_t s = 0; s < want.size(); ++s) EXPECT_EQ(got.losses[0][s], got.losses[1][s]);
}

// A learning-rate schedule (docs/guide/lr_schedules.md) on Megatron's
// pair: each rank computes the rate from its own counter beside its slices,
// and the run tracks one device with the same schedule.
TEST(SemiAutoTrain, ScheduledMegatronMlpTracksOneDevice) {
  const std::vector<Batch> batches = MakeBatches(12);
  const host::LrSchedule schedule = host::LrSchedule::WarmupCosine(0.1, 1e-3, 3, 8);
  const std::vector<double> want = SingleDevice(batches, 0.1f, schedule);
  const Graph g = Mlp({{{1, 1}, {1, 2}}, {{1, 2}, {2}}, {{1, 2}}, {{1, 2}, {2, 1}}, {{1, 1}, {1}}, {{1, 1}, {1}}});
  const ShardedRun got = Sharded(
      g, 2, batches, kBatch, [](int) { return 0; }, schedule);
  ExpectTracks(want, got, /*mean_over_ranks=*/false);
  // Without the schedule the losses differ from the third step on.
  const std::vector<double> fixed = SingleDevice(batches);
  EXPECT_NE(fixed[2], want[2]);
}

// Every op on its default strategy: data parallel. As under DATA_PARALLEL
// with gradients summed (gradients_mean false), two ranks on half batches
// step like one device on the whole batch at twice the learning rate, and
// the mean of their losses is its loss.
TEST(SemiAutoTrain, DefaultStrategiesTrainLikeDataParallel) {
  const std::vector<Batch> batches = MakeBatches(12);
  const std::vector<double> want = SingleDevice(batches, 0.2f);
  const ShardedRun got = Sharded(Mlp({}), 2, batches, kBatch / 2, [](int r) { return r * kBatch / 2; });
  ExpectTracks(want, got, /*mean_over_ranks=*/true);
}

// 2x2 on 4 ranks: data parallel across two groups of the Megatron layout.
// The batch's rows split along the device matrix's leftmost axis (ranks
// 0-1 and 2-3); each weight slice is summed over its data-parallel pair.
TEST(SemiAutoTrain, DataTimesModelOnFourRanks) {
  const std::vector<Batch> batches = MakeBatches(10);
  const std::vector<double> want = SingleDevice(batches, 0.2f);
  const Graph g = Mlp({{{2, 1}, {1, 2}}, {{2, 2}, {2}}, {{2, 2}}, {{2, 2}, {2, 1}}, {{2, 1}, {1}}, {{2, 1}, {2}}});
  const ShardedRun got = Sharded(g, 4, batches, kBatch / 2, [](int r) { return (r / 2) * kBatch / 2; });
  ExpectTracks(want, got, /*mean_over_ranks=*/true);
  for (size_t s = 0; s < want.size(); ++s) {
    EXPECT_EQ(got.losses[0][s], got.losses[1][s]);  // one data-parallel replica: the same loss
    EXPECT_EQ(got.losses[2][s], got.losses[3][s]);
  }
}

// Data parallel on 4 ranks, rows 2 each: lr × 4 on one device.
TEST(SemiAutoTrain, DefaultStrategiesOnFourRanks) {
  const std::vector<Batch> batches = MakeBatches(4);
  const std::vector<double> want = SingleDevice(batches, 0.4f);
  const ShardedRun got = Sharded(Mlp({}), 4, batches, kBatch / 4, [](int r) { return r * kBatch / 4; });
  ExpectTracks(want, got, true);
}

// 2x2 with only the first layer split by columns: the second MatMul gathers
// h in the forward (an AllGather), whose gradient is a local slice.
TEST(SemiAutoTrain, TwoByTwoFirstLayerSplit) {
  const std::vector<Batch> batches = MakeBatches(4);
  const std::vector<double> want = SingleDevice(batches, 0.2f);
  const Graph g = Mlp({{{2, 1}, {1, 2}}, {{2, 2}, {2}}, {{2, 2}}, {{2, 1}, {1, 1}}, {{2, 1}, {1}}, {{2, 1}, {2}}});
  const ShardedRun got = Sharded(g, 4, batches, kBatch / 2, [](int r) { return (r / 2) * kBatch / 2; });
  ExpectTracks(want, got, true);
}

// 2x2 with only the second layer split by rows: h is sliced (ShardSlice),
// so backward has an AllGather on the comm stream among the mirror
// buckets, and gradients written after it must not be reduced before.
TEST(SemiAutoTrain, TwoByTwoSecondLayerSplit) {
  const std::vector<Batch> batches = MakeBatches(4);
  const std::vector<double> want = SingleDevice(batches, 0.2f);
  const Graph g = Mlp({{{2, 1}, {1, 1}}, {{2, 1}, {1}}, {{2, 2}}, {{2, 2}, {2, 1}}, {{2, 1}, {1}}, {{2, 1}, {2}}});
  const ShardedRun got = Sharded(g, 4, batches, kBatch / 2, [](int r) { return (r / 2) * kBatch / 2; });
  ExpectTracks(want, got, true);
}

}  // namespace
}  // namespace sinkrt
