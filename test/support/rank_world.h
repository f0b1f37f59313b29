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

// Rows [row, row + rows) of a dataset held as f32 features [N, features]
// and i32 labels [N]: the two columns of an (image, label) queue.
std::vector<ConstBytes> RowColumns(const float* features, int64_t width, const int32_t* labels, int64_t row,
                                   int64_t rows);

}  // namespace sinkrt::testing
