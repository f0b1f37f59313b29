// Dropout under parallel training tracks one device (docs/guide/dropout.md):
// the mask of an element is keyed by its index in the global tensor, so a
// data-parallel rank (fed rows r, r + n, ... as Dataset::ShardBelowBatch
// does), a model-parallel shard and a micro-batch each draw exactly the
// bits one device draws for the same rows. Worlds of
// in-process devices, each rank compiling its own stream; losses within
// 1e-5 relative of one device's (the sum order of the reductions differs),
// over 100 steps. Without the global index every rank would draw the rows
// 0.. mask and the losses would differ at the first step by far more.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "sinkrt/host/compiler.h"
#include "support/rank_world.h"
#include "support/test_models.h"
#include "support/test_util.h"

namespace sinkrt {
namespace {

using host::Graph;
using host::ParallelMode;

constexpr int64_t kBatch = 8;
constexpr int kSteps = 100;
constexpr float kP = 0.3f;

using Strategies = testing::OpStrategies;

// The tanh MLP (testing::TanhMlp) with Dropout(0.3) on its hidden layer;
// `p` 0: the same network without dropout; `rows` > 1: the dropout reads
// the activations as [B·rows, 64/rows].
Graph Mlp(int64_t batch, const Strategies& strategies, float p = kP, int64_t rows = 1) {
  return testing::TanhMlp(batch, strategies, p, rows);
}

using Batch = testing::RowBatch;  // [kBatch, 32] images, [kBatch] labels

std::vector<Batch> MakeBatches(int n) {
  testing::SyntheticData d = testing::MakeSyntheticData(n * kBatch, 32, 10, 5);
  testing::RandomizeQuarterOfLabels(d);
  return testing::SplitBatches(d.images, d.labels, 32, n, kBatch);
}

host::CompileOptions Options(ParallelMode mode, uint32_t world, uint32_t rank, float lr) {
  return testing::SgdRankOptions(mode, world, rank, lr);
}

// Data-parallel rank r of n: rows r, r + n, r + 2n, ... (Dataset::ShardBelowBatch).
Batch Interleaved(const Batch& b, int r, int n) {
  Batch out;
  for (int64_t row = r; row < static_cast<int64_t>(b.labels.size()); row += n) {
    out.images.insert(out.images.end(), b.images.begin() + row * 32, b.images.begin() + (row + 1) * 32);
    out.labels.push_back(b.labels[row]);
  }
  return out;
}

// A rank's rows as one queue entry's columns; under accumulation `micro`
// batches of `rows` each, one after another.
std::vector<ConstBytes> Columns(const Batch& b, int64_t rows, int micro) {
  std::vector<ConstBytes> cols;
  for (int m = 0; m < micro; ++m) {
    const int64_t at = m * rows;
    cols.emplace_back(reinterpret_cast<const uint8_t*>(b.images.data() + at * 32), rows * 32 * sizeof(float));
    cols.emplace_back(reinterpret_cast<const uint8_t*>(b.labels.data() + at), rows * sizeof(int32_t));
  }
  return cols;
}

// Per rank, per step: the loss each of `world` ranks reports, rank r
// compiled by `compile(r)` and fed `rows_of(r, batch)` (`rows` rows a
// micro-batch).
std::vector<std::vector<double>> Train(int world, const std::vector<Batch>& batches, int64_t rows,
                                       const testing::RankCompile& compile,
                                       const std::function<Batch(int, const Batch&)>& rows_of, int micro = 1) {
  std::vector<std::vector<Batch>> fed(world);  // kept until every rank has pushed it
  for (int r = 0; r < world; ++r)
    for (const Batch& whole : batches) fed[r].push_back(rows_of(r, whole));
  return testing::TrainRanks(world, static_cast<int>(batches.size()), compile,
                             [&](int r, int s) { return Columns(fed[r][s], rows, micro); });
}

std::vector<double> OneDevice(const std::vector<Batch>& batches, float lr, float p = kP, int64_t rows = 1) {
  const Graph g = Mlp(kBatch, {}, p, rows);
  return Train(
             1, batches, kBatch, [&](int) { return host::Compile(g, Options(ParallelMode::StandAlone, 1, 0, lr)); },
             [](int, const Batch& b) { return b; })
      .at(0);
}

// The worst relative difference of the ranks' loss (their mean, or rank
// 0's) from one device's, step by step; fails above 1e-5.
double ExpectTracks(const std::vector<double>& want, const std::vector<std::vector<double>>& got, bool mean) {
  double worst = 0;
  for (size_t s = 0; s < want.size(); ++s) {
    double loss = 0;
    for (const auto& rank : got) {
      if (rank.size() != want.size()) {
        ADD_FAILURE() << "a rank ran " << rank.size() << " steps, expected " << want.size();
        return INFINITY;
      }
      loss += rank[s];
    }
    loss = mean ? loss / static_cast<double>(got.size()) : got[0][s];
    const double rel = std::abs(loss - want[s]) / std::abs(want[s]);
    worst = std::max(worst, rel);
    EXPECT_LE(rel, 1e-5) << "step " << s << ": " << loss << " against one device's " << want[s];
    if (std::getenv("SINKRT_TEST_VERBOSE")) std::printf("step %zu: %.8f %.8f\n", s, loss, want[s]);
  }
  ::testing::Test::RecordProperty("worst_relative_loss_difference", std::to_string(worst));
  std::printf("worst relative loss difference over %zu steps: %.3g\n", want.size(), worst);
  return worst;
}

// Dropout changes the run at all: the reference without it differs.
void ExpectDropoutMatters(const std::vector<Batch>& batches, float lr, const std::vector<double>& with) {
  const std::vector<double> without = OneDevice(batches, lr, 0.0f);
  EXPECT_GT(std::abs(without[0] - with[0]), 1e-3 * std::abs(without[0]));
}

TEST(DropoutParallel, DataParallelRanksTrackOneDevice) {
  const std::vector<Batch> batches = MakeBatches(kSteps);
  // Gradients summed over 2 ranks on half batches: one device at twice the rate.
  const std::vector<double> want = OneDevice(batches, 0.2f);
  ExpectDropoutMatters(batches, 0.2f, want);
  const Graph half = Mlp(kBatch / 2, {});
  const auto got = Train(
      2, batches, kBatch / 2,
      [&](int r) { return host::Compile(half, Options(ParallelMode::DataParallel, 2, r, 0.1f)); },
      [](int r, const Batch& b) { return Interleaved(b, r, 2); });
  ExpectTracks(want, got, /*mean=*/true);
}

// The dropout's input as [B·4, 16]: each rank's sample keeps its 4 rows.
TEST(DropoutParallel, DataParallelRanksTrackOneDeviceWithSeveralRowsPerSample) {
  const std::vector<Batch> batches = MakeBatches(kSteps);
  const std::vector<double> want = OneDevice(batches, 0.2f, kP, 4);
  const Graph half = Mlp(kBatch / 2, {}, kP, 4);
  const auto got = Train(
      2, batches, kBatch / 2,
      [&](int r) { return host::Compile(half, Options(ParallelMode::DataParallel, 2, r, 0.1f)); },
      [](int r, const Batch& b) { return Interleaved(b, r, 2); });
  ExpectTracks(want, got, /*mean=*/true);
}

// Megatron's pair on 2 ranks: the dropout's input [8, 64] is split by
// columns, each rank holding one half of every row.
TEST(DropoutParallel, SemiAutoShardedActivationTracksOneDevice) {
  const std::vector<Batch> batches = MakeBatches(kSteps);
  const std::vector<double> want = OneDevice(batches, 0.1f);
  const Graph g = Mlp(
      kBatch, {{{1, 1}, {1, 2}}, {{1, 2}, {2}}, {{1, 2}}, {{1, 2}}, {{1, 2}, {2, 1}}, {{1, 1}, {1}}, {{1, 1}, {1}}});
  const auto got = Train(
      2, batches, kBatch, [&](int r) { return host::Compile(g, Options(ParallelMode::SemiAutoParallel, 2, r, 0.1f)); },
      [](int, const Batch& b) { return b; });
  ExpectTracks(want, got, /*mean=*/false);
}

// 2 x 2 on 4 ranks: the dropout's input split along both dims. The batch's
// 2 data-parallel groups are fed as Model feeds them (group k = r / 2:
// rows k, k + 2, ..., Dataset::ShardBelowBatch), and the compiler places
// each rank's block of the layout at those rows.
TEST(DropoutParallel, SemiAutoDataTimesModelTracksOneDevice) {
  const std::vector<Batch> batches = MakeBatches(kSteps);
  const std::vector<double> want = OneDevice(batches, 0.2f);
  const Graph g = Mlp(
      kBatch, {{{2, 1}, {1, 2}}, {{2, 2}, {2}}, {{2, 2}}, {{2, 2}}, {{2, 2}, {2, 1}}, {{2, 1}, {1}}, {{2, 1}, {2}}});
  const auto got = Train(
      4, batches, kBatch / 2,
      [&](int r) { return host::Compile(g, Options(ParallelMode::SemiAutoParallel, 4, r, 0.1f)); },
      [](int r, const Batch& b) { return Interleaved(b, r / 2, 2); });
  ExpectTracks(want, got, /*mean=*/true);
}

// A layout that gathers the split batch before the dropout (its input
// [8, 64] split by columns only, while the image is split in 2 groups)
// holds both groups' rows: as Model feeds them, samples 0, 2, 4, 6 and then
// 1, 3, 5, 7, which no one offset and row stride place. The compiler draws
// the dropout in one piece a group (Split, a Dropout each, Concat), each
// placed at its group's samples.
TEST(DropoutParallel, SemiAutoLayoutThatGathersTheSplitBatchTracksOneDevice) {
  const std::vector<Batch> batches = MakeBatches(kSteps);
  const std::vector<double> want = OneDevice(batches, 0.2f);
  const Graph g = Mlp(
      kBatch, {{{2, 1}, {1, 2}}, {{2, 2}, {2}}, {{2, 2}}, {{1, 2}}, {{2, 2}, {2, 1}}, {{2, 1}, {1}}, {{2, 1}, {2}}});
  const auto got = Train(
      4, batches, kBatch / 2,
      [&](int r) { return host::Compile(g, Options(ParallelMode::SemiAutoParallel, 4, r, 0.1f)); },
      [](int r, const Batch& b) { return Interleaved(b, r / 2, 2); });
  ExpectTracks(want, got, /*mean=*/true);
}

// A layout that cuts a sample's rows apart: the dropout reads [B·4, 16]
// (4 rows a sample) split in 4 along dim 0 at batch 2, 2 rows a rank, while
// the image is split in 2 groups. Whose rows a rank holds then depends on
// how the samples' rows interleave, which no placement states: the
// compiler refuses, naming the op, rather than draw another device's masks.
TEST(DropoutParallel, SemiAutoRefusesALayoutThatSplitsASamplesRows) {
  const Graph g = Mlp(
      2, {{{2, 1}, {1, 1}}, {{2, 1}, {1}}, {{2, 1}}, {}, {{4, 1}}, {}, {{2, 1}, {1, 1}}, {{2, 1}, {1}}, {{2, 1}, {2}}},
      kP, 4);
  const auto cs = host::Compile(g, Options(ParallelMode::SemiAutoParallel, 4, 1, 0.1f));
  ASSERT_FALSE(cs.ok());
  const std::string message = cs.status().ToString();
  EXPECT_NE(message.find("Dropout '"), std::string::npos) << message;
  EXPECT_NE(message.find("is split in 2 data-parallel groups"), std::string::npos) << message;
  EXPECT_NE(message.find("splits dim 0 inside a sample's rows is not supported"), std::string::npos) << message;
}

// Gradient accumulation: 2 micro-batches of 4 rows draw the masks of one
// step of 8 (micro-batch 1's rows follow micro-batch 0's).
TEST(DropoutParallel, AccumulationTracksOneStepOfTheWholeBatch) {
  const std::vector<Batch> batches = MakeBatches(kSteps);
  const std::vector<double> want = OneDevice(batches, 0.1f);
  const Graph half = Mlp(kBatch / 2, {});
  host::CompileOptions o = Options(ParallelMode::StandAlone, 1, 0, 0.1f);
  o.grad_accumulation = 2;
  const auto got = Train(
      1, batches, kBatch / 2, [&](int) { return host::Compile(half, o); }, [](int, const Batch& b) { return b; },
      /*micro=*/2);
  ExpectTracks(want, got, /*mean=*/false);
}

}  // namespace
}  // namespace sinkrt
