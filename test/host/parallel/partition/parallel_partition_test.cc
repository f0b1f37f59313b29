// Rank-local forward graphs from a partition plan (host/src/parallel/
// partition.h): slice shapes, the communication ops each redistribution
// becomes, GradAllReduce in front of column-parallel inputs, and parameter
// slices marked for initialisation.
#include <gtest/gtest.h>

#include <map>

#include "host/src/parallel/partition/partition.h"

namespace sinkrt::host::parallel {
namespace {

std::map<OpCode, int> CountOps(const Graph& g) {
  std::map<OpCode, int> n;
  for (const OpNode& op : g.ops()) ++n[op.op];
  return n;
}

// x [16,32] -> MatMul w1 [32,64] -> Tanh -> MatMul w2 [64,10] -> loss.
struct Mlp {
  Graph g;
  TensorId x, labels, w1, w2;
  Mlp() {
    x = g.Input("x", {16, 32});
    labels = g.Input("labels", {16}, DType::I32);
    w1 = g.Param("w1", {32, 64}, InitSpec::HeUniform(3));
    w2 = g.Param("w2", {64, 10}, InitSpec::HeUniform(4));
    const TensorId h = g.Tanh(g.MatMul(x, w1));
    g.SetLoss(g.SparseSoftmaxCrossEntropy(g.MatMul(h, w2), labels));
  }
};

TEST(PartitionTest, MegatronPairOnFourRanks) {
  Mlp m;
  const std::vector<Strategy> s = {{{1, 1}, {1, 4}}, {{1, 4}}, {{1, 4}, {4, 1}}, {{1, 1}, {1}}};
  Result<PartitionPlan> plan = PlanPartition(m.g, s, {.device_num = 4});
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  for (int64_t r = 0; r < 4; ++r) {
    Result<LocalGraph> lg = PartitionForRank(m.g, *plan, r);
    ASSERT_TRUE(lg.ok()) << lg.status().ToString();
    const Graph& l = lg->graph;
    ASSERT_TRUE(l.status().ok()) << l.status().ToString();
    EXPECT_EQ(l.tensor(lg->local_of[m.w1]).shape, (Shape{32, 16}));
    EXPECT_EQ(l.tensor(lg->local_of[m.w2]).shape, (Shape{16, 10}));
    EXPECT_EQ(l.tensor(lg->local_of[m.x]).shape, (Shape{16, 32}));
    std::map<OpCode, int> n = CountOps(l);
    EXPECT_EQ(n[OpCode::AllReduce], 1);      // w2's partial output, before the loss
    EXPECT_EQ(n[OpCode::GradAllReduce], 0);  // x is data
    EXPECT_EQ(n[OpCode::AllGather] + n[OpCode::ReduceScatter] + n[OpCode::ShardSlice], 0);
    for (const OpNode& op : l.ops()) {
      if (op.op != OpCode::AllReduce) continue;
      EXPECT_EQ(op.attrs.group, (std::vector<uint32_t>{0, 1, 2, 3}));
      EXPECT_EQ(op.attrs.group_position, static_cast<uint32_t>(r));
    }
    // w1's slice is its columns [16r, 16r+16) of the whole [32,64].
    const InitSpec& init = l.tensor(lg->local_of[m.w1]).init;
    EXPECT_EQ(init.global_shape, (Shape{32, 64}));
    EXPECT_EQ(init.slice_offset, (std::vector<int64_t>{0, 16 * r}));
    ASSERT_EQ(lg->parameters.size(), 2u);
    EXPECT_EQ(lg->parameters[0].mirror_group, (std::vector<uint32_t>{static_cast<uint32_t>(r)}));
  }
}

TEST(PartitionTest, DataParallelSlicesTheBatchAndMirrorsEveryWeight) {
  Mlp m;
  Result<PartitionPlan> plan = PlanPartition(m.g, {}, {.device_num = 2});
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  Result<LocalGraph> lg = PartitionForRank(m.g, *plan, 1);
  ASSERT_TRUE(lg.ok()) << lg.status().ToString();
  const Graph& l = lg->graph;
  EXPECT_EQ(l.tensor(lg->local_of[m.x]).shape, (Shape{8, 32}));
  EXPECT_EQ(l.tensor(lg->local_of[m.labels]).shape, (Shape{8}));
  EXPECT_TRUE(l.tensor(lg->local_of[m.w1]).init.global_shape.empty());                  // whole
  for (const OpNode& op : l.ops()) EXPECT_LT(static_cast<int>(op.op), 100) << op.name;  // no communication
  EXPECT_EQ(lg->parameters[0].mirror_group, (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(lg->parameters[1].mirror_group, (std::vector<uint32_t>{0, 1}));
}

// A column-parallel MatMul after an activation gets Megatron's f, and a
// split that a consumer does not want is gathered along its dim.
TEST(PartitionTest, GradAllReduceAndGatherAlongADim) {
  Graph g;
  const TensorId x = g.Input("x", {8, 16});
  const TensorId w0 = g.Param("w0", {16, 16}, InitSpec::Zeros());
  const TensorId w1 = g.Param("w1", {16, 32}, InitSpec::Zeros());
  const TensorId h = g.Tanh(g.MatMul(x, w0));
  const TensorId y = g.MatMul(h, w1);  // [8,32], columns split
  g.Softmax(y, 0);                     // its strategy ((1, 1),) wants y whole
  const std::vector<Strategy> s = {{{1, 1}, {1, 1}}, {{1, 1}}, {{1, 1}, {1, 2}}, {{1, 1}}};
  Result<PartitionPlan> plan = PlanPartition(g, s, {.device_num = 2});
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  Result<LocalGraph> lg = PartitionForRank(g, *plan, 0);
  ASSERT_TRUE(lg.ok()) << lg.status().ToString();
  std::map<OpCode, int> n = CountOps(lg->graph);
  EXPECT_EQ(n[OpCode::GradAllReduce], 1);
  EXPECT_EQ(n[OpCode::AllGather], 1);  // y's columns for the Softmax, gathered on dim 1
  EXPECT_EQ(n[OpCode::Transpose], 1);  // the gathered blocks moved to dim 1
  EXPECT_EQ(lg->graph.tensor(lg->local_of[y]).shape, (Shape{8, 16}));
  (void)h;
}

}  // namespace
}  // namespace sinkrt::host::parallel
