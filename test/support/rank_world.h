// Training on a world of in-process devices through the low-level API,
// as the SEMI_AUTO, dropout and BatchNorm parallel tests do: every rank
// joins the world, compiles its own stream (host::Compile for its rank),
// and at each step pushes its columns and runs one TrainStep sink.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "sinkrt/host/compiler.h"
#include "sinkrt/runtime/device_link.h"

namespace sinkrt::testing {

// Rank r's stream.
using RankCompile = std::function<Result<host::CompiledStream>(int rank)>;
// Rank r's columns of step s, one queue entry; they must stay valid until
// the step's PushBatch returns.
using RankFeed = std::function<std::vector<ConstBytes>(int rank, int step)>;

// Per rank, per step: the loss each of `world` one-thread devices reports
// over `steps` steps. A world of one runs alone; larger ones join world
// `world_id`. A rank that fails adds a test failure naming it and stops.
std::vector<std::vector<double>> TrainRanks(int world, int steps, const RankCompile& compile, const RankFeed& feed,
                                            uint64_t world_id = 9);

// Per op, the strategy host::Graph::Shard gives it (empty: the default).
using OpStrategies = std::vector<std::vector<std::vector<int64_t>>>;

// The small network of the SEMI_AUTO tests: x "image" [batch, 32] -> MatMul
// w1 [32, 64] + b1 -> Tanh -> Dropout(p, seed 5) -> MatMul w2 [64, 10] + b2
// -> sparse softmax cross-entropy against "label" [batch], `strategies`
// per op. p 0 builds no Dropout op. `rows` > 1: the dropout reads the
// activations as [batch·rows, 64/rows] (as a ViT's [B·T, D]).
host::Graph TanhMlp(int64_t batch, const OpStrategies& strategies, float p = 0.0f, int64_t rows = 1);

// SGD at `lr` for rank `rank` of `world` ranks in `mode`, training only
// (no eval program): the options these tests compile each rank with.
host::CompileOptions SgdRankOptions(host::ParallelMode mode, uint32_t world, uint32_t rank, float lr);

// One step's rows: f32 features [batch, width] and i32 labels [batch].
struct RowBatch {
  std::vector<float> images;
  std::vector<int32_t> labels;
};

// `n` consecutive batches of `batch` rows of a dataset.
std::vector<RowBatch> SplitBatches(const std::vector<float>& images, const std::vector<int32_t>& labels, int64_t width,
                                   int n, int64_t batch);

// Rows [row, row + rows) of a dataset held as f32 features [N, features]
// and i32 labels [N]: the two columns of an (image, label) queue.
std::vector<ConstBytes> RowColumns(const float* features, int64_t width, const int32_t* labels, int64_t row,
                                   int64_t rows);

}  // namespace sinkrt::testing
