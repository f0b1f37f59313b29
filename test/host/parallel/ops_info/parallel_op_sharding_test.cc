// Sharding rules of the forward ops (host/src/parallel/ops_info/op_sharding.h):
// device matrices and layouts as MindSpore derives them, and every invalid
// strategy refused with MindSpore's message naming the op and the strategy.
#include <gtest/gtest.h>

#include "host/src/parallel/ops_info/op_sharding.h"

namespace sinkrt::host::parallel {
namespace {

const OpNode& Last(const Graph& g) { return g.ops().back(); }

std::string ErrorOf(const Graph& g, const Strategy& s, int64_t devices) {
  Result<OpSharding> r = ShardOp(g, Last(g), s, devices);
  return r.ok() ? "ok" : r.status().message();
}

Graph MatMulGraph(bool transpose_b = false) {
  Graph g;
  const TensorId x = g.Input("x", {64, 64});
  const TensorId w = g.Param("w", {64, 64}, InitSpec::Zeros());
  g.MatMul(x, w, false, transpose_b);
  return g;
}

TEST(OpShardingTest, StrategyPrintsAsMindSporeDoes) {
  EXPECT_EQ(StrategyToString({{2, 4}, {4, 1}}), "((2, 4), (4, 1))");
  EXPECT_EQ(StrategyToString({{2, 4}}), "((2, 4),)");
  EXPECT_EQ(StrategyToString({{8}}), "((8,),)");
}

// The worked example: ((2,1),(1,4)) on 8 devices.
TEST(OpShardingTest, MatMulDeviceMatrixAndMaps) {
  const Graph g = MatMulGraph();
  Result<OpSharding> r = ShardOp(g, Last(g), {{2, 1}, {1, 4}}, 8);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->device_matrix, (DeviceMatrix{2, 1, 4}));
  EXPECT_EQ(r->inputs[0].tensor_map, (std::vector<int>{2, 1}));
  EXPECT_EQ(r->inputs[1].tensor_map, (std::vector<int>{1, 0}));
  EXPECT_EQ(r->outputs[0].tensor_map, (std::vector<int>{2, 0}));
  EXPECT_TRUE(r->outputs[0].partial.empty());
  EXPECT_EQ(SliceShape(r->outputs[0]), (Shape{32, 16}));
}

// A split contracted dim leaves the output partial along its axis.
TEST(OpShardingTest, SplitReductionLeavesThePartialAxis) {
  const Graph g = MatMulGraph();
  Result<OpSharding> r = ShardOp(g, Last(g), {{2, 2}, {2, 2}}, 8);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->outputs[0].partial, (std::vector<int>{1}));
  EXPECT_FALSE(r->outputs[0].partial_mean);
  // Megatron's row-parallel pair on 4: x split on K, w on its rows.
  Result<OpSharding> row = ShardOp(g, Last(g), {{1, 4}, {4, 1}}, 4);
  ASSERT_TRUE(row.ok());
  EXPECT_EQ(row->device_matrix, (DeviceMatrix{1, 4, 1}));
  EXPECT_EQ(row->outputs[0].partial, (std::vector<int>{1}));
}

// Fewer devices than the stage: the repeated factor goes on the right.
TEST(OpShardingTest, RepeatedCalculation) {
  const Graph g = MatMulGraph();
  Result<OpSharding> r = ShardOp(g, Last(g), {{2, 1}, {1, 1}}, 8);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->device_matrix, (DeviceMatrix{2, 1, 1, 4}));
  EXPECT_EQ(r->inputs[0].tensor_map, (std::vector<int>{3, 2}));
  EXPECT_EQ(r->outputs[0].tensor_map, (std::vector<int>{3, 1}));
  EXPECT_EQ(ReplicaAxes(r->outputs[0]), (std::vector<int>{0, 2}));
}

TEST(OpShardingTest, RefusesInvalidStrategiesWithMindSporesMessages) {
  const Graph g = MatMulGraph();
  const std::string op = Last(g).name;
  EXPECT_EQ(ErrorOf(g, {{2, 1}}, 8),
            op + ": The strategy is ((2, 1),), strategy size: 1 is not equal to inputs size: 2");
  EXPECT_EQ(ErrorOf(g, {{2, 1}, {1}}, 8),
            op + ": The strategy is ((2, 1), (1,)), strategy len: 1 is not equal to inputs len: 2, index: 1");
  EXPECT_EQ(ErrorOf(g, {{0, 1}, {1, 1}}, 8),
            op + ": The strategy is ((0, 1), (1, 1)), the value of strategy must be larger than 0, but get 0");
  EXPECT_EQ(ErrorOf(g, {{3, 1}, {1, 1}}, 8),
            op + ": The strategy is ((3, 1), (1, 1)), the value of strategy must be the power of 2, but get 3");
  EXPECT_EQ(ErrorOf(g, {{4, 1}, {1, 4}}, 8),
            op + ": The strategy is ((4, 1), (1, 4)), it requires 16 devices, but the device number of this stage "
                 "is 8, it can not be divisible by 16");
  EXPECT_EQ(ErrorOf(g, {{2, 2}, {1, 2}}, 8),
            op + ": Can not do this operator in the strategy: ((2, 2), (1, 2)), the transpose_b is false, the shard "
                 "num of first input's column is 2, but the shard num of second input's row is 1");
  // On 6 devices (not a power of two) a 3 passes that check, but 64 rows do not split 3 ways.
  EXPECT_EQ(ErrorOf(g, {{3, 1}, {1, 1}}, 6),
            op + ": The strategy is ((3, 1), (1, 1)), shape [64,64] cannot be divisible by strategy value 3");
  EXPECT_EQ(ErrorOf(g, {{2, 1}, {1, 1}}, 6), "ok");
}

TEST(OpShardingTest, BroadcastAndBias) {
  Graph g;
  const TensorId x = g.Input("x", {8, 16});
  const TensorId b = g.Param("b", {16}, InitSpec::Zeros());
  g.Add(x, b);
  EXPECT_EQ(ErrorOf(g, {{2, 2}, {2}}, 4), "ok");
  EXPECT_NE(ErrorOf(g, {{2, 2}, {1}}, 4)
                .find("strategies of relevant dimensions are not equal: input 0 dim 1 is "
                      "split 2 ways, input 1 dim 0 1 ways"),
            std::string::npos);
  Result<OpSharding> r = ShardOp(g, Last(g), {{4, 1}, {1}}, 4);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->inputs[1].tensor_map, (std::vector<int>{0}));  // the bias's dim follows x's columns
  EXPECT_EQ(ReplicaAxes(r->inputs[1]), (std::vector<int>{1}));
}

TEST(OpShardingTest, AxesAnOpCannotSplit) {
  Graph g;
  const TensorId x = g.Input("x", {8, 4, 16});
  g.Softmax(x, -1);
  EXPECT_NE(ErrorOf(g, {{1, 1, 2}}, 2)
                .find("dim 2 of input 0 cannot be split (it normalises over that axis), "
                      "but get 2"),
            std::string::npos);
  EXPECT_EQ(ErrorOf(g, {{2, 1, 1}}, 2), "ok");
  const TensorId gamma = g.Param("gamma", {16}, InitSpec::Constant(1));
  const TensorId beta = g.Param("beta", {16}, InitSpec::Zeros());
  g.LayerNorm(x, gamma, beta);
  EXPECT_NE(ErrorOf(g, {{1, 2, 1}, {1}, {1}}, 2).find("mean and rstd flatten the leading dims"), std::string::npos);
  Result<OpSharding> r = ShardOp(g, Last(g), {{2, 1, 1}, {1}, {1}}, 2);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(SliceShape(r->outputs[1]), (Shape{16}));  // 32 rows of mean, 16 per rank
}

// ReduceMax over a split axis would need a max over the group; the
// collectives only sum, so the split is refused, never summed. CausalMask
// splits its leading dims only.
TEST(OpShardingTest, ReduceMaxAndCausalMaskKeepTheirAxesWhole) {
  Graph g;
  const TensorId x = g.Input("x", {8, 4, 16});
  g.ReduceMax(x, {2});
  EXPECT_NE(ErrorOf(g, {{1, 1, 2}}, 2)
                .find("dim 2 of input 0 cannot be split (a split reduced axis needs a max over the group, and the "
                      "collectives only sum), but get 2"),
            std::string::npos);
  EXPECT_EQ(ErrorOf(g, {{2, 2, 1}}, 4), "ok");
  g.CausalMask(x, -1e4f);
  EXPECT_NE(ErrorOf(g, {{1, 2, 1}}, 2).find("the causal mask places its diagonal by position in the last two dims"),
            std::string::npos);
  EXPECT_EQ(ErrorOf(g, {{2, 1, 1}}, 2), "ok");
}

// OneHot splits its index dims, never the depth; Pad splits the axes it
// leaves alone, never a padded one.
TEST(OpShardingTest, OneHotAndPadKeepTheirAxesWhole) {
  Graph g;
  const TensorId x = g.Input("x", {8, 4, 16});
  g.Pad(x, {{0, 0}, {1, 1}, {0, 0}}, host::PadMode::Symmetric);
  EXPECT_NE(ErrorOf(g, {{1, 2, 1}}, 2).find("a padded axis needs its borders in one block"), std::string::npos);
  EXPECT_EQ(ErrorOf(g, {{2, 1, 2}}, 4), "ok");
  Graph h;
  h.OneHot(h.Input("ids", {8, 4}, DType::I32), 6);
  EXPECT_EQ(ErrorOf(h, {{2, 2}}, 4), "ok");
}

TEST(OpShardingTest, LossIsAPendingMeanOverTheBatch) {
  Graph g;
  const TensorId logits = g.Input("logits", {8, 10});
  const TensorId labels = g.Input("labels", {8}, DType::I32);
  g.SparseSoftmaxCrossEntropy(logits, labels);
  Result<OpSharding> r = ShardOp(g, Last(g), {{4, 1}, {4}}, 4);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->outputs[0].partial, (std::vector<int>{1}));
  EXPECT_TRUE(r->outputs[0].partial_mean);
  EXPECT_NE(ErrorOf(g, {{1, 2}, {1}}, 2).find("cannot be split (the loss normalises over the classes)"),
            std::string::npos);
}

TEST(OpShardingTest, BatchMatMulSplitsHeads) {
  Graph g;
  const TensorId q = g.Input("q", {8, 4, 16, 16});
  const TensorId k = g.Input("k", {8, 4, 16, 16});
  g.BatchMatMul(q, k, false, true);
  Result<OpSharding> r = ShardOp(g, Last(g), {{2, 2, 1, 1}, {2, 2, 1, 1}}, 4);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->device_matrix, (DeviceMatrix{2, 2, 1, 1, 1}));
  EXPECT_EQ(SliceShape(r->outputs[0]), (Shape{4, 2, 16, 16}));
  EXPECT_TRUE(r->outputs[0].partial.empty());
}

TEST(OpShardingTest, DefaultIsDataParallel) {
  const Graph g = MatMulGraph();
  EXPECT_EQ(DefaultStrategy(g, Last(g), 4), (Strategy{{4, 1}, {1, 1}}));
  EXPECT_EQ(DefaultStrategy(g, Last(g), 3), (Strategy{{1, 1}, {1, 1}}));  // 64 rows do not split 3 ways
  Graph e;
  const TensorId table = e.Param("table", {100, 8}, InitSpec::Zeros());
  const TensorId idx = e.Input("idx", {16, 4}, DType::I32);
  e.Gather(table, idx);
  EXPECT_EQ(DefaultStrategy(e, Last(e), 4), (Strategy{{1, 1}, {4, 1}}));
}

}  // namespace
}  // namespace sinkrt::host::parallel
