// The partition plan (host/src/parallel/partition/partition_plan.h): layouts on every
// tensor, the redistributions between ops, gradient-partial axes and
// mirror groups, for data-parallel and Megatron-style strategies.
#include <gtest/gtest.h>

#include "host/src/parallel/partition/partition_plan.h"

namespace sinkrt::host::parallel {
namespace {

int CountSteps(const PartitionPlan& p, RedistKind kind) {
  int n = 0;
  for (const OpPlan& op : p.ops)
    for (const InputPlan& in : op.inputs)
      for (const RedistStep& s : in.redistribution.steps) n += s.kind == kind;
  return n;
}

int CountAllSteps(const PartitionPlan& p) {
  int n = 0;
  for (const OpPlan& op : p.ops)
    for (const InputPlan& in : op.inputs) n += static_cast<int>(in.redistribution.steps.size());
  return n;
}

// x [16,32] -> MatMul w1 [32,64] -> Relu -> MatMul w2 [64,10] -> loss.
struct Mlp {
  Graph g;
  TensorId x, labels, w1, w2, h, y;
  size_t mm1 = 0, relu = 1, mm2 = 2, loss = 3;
  Mlp() {
    x = g.Input("x", {16, 32});
    labels = g.Input("labels", {16}, DType::I32);
    w1 = g.Param("w1", {32, 64}, InitSpec::Zeros());
    w2 = g.Param("w2", {64, 10}, InitSpec::Zeros());
    h = g.Relu(g.MatMul(x, w1));
    y = g.MatMul(h, w2);
    g.SetLoss(g.SparseSoftmaxCrossEntropy(y, labels));
  }
};

TEST(PartitionPlanTest, DefaultStrategiesAreDataParallel) {
  Mlp m;
  Result<PartitionPlan> p = PlanPartition(m.g, {}, {.device_num = 4});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(CountAllSteps(*p), 0);  // the batch split flows through every op
  EXPECT_EQ(SliceShape(p->layouts[m.x]), (Shape{4, 32}));
  EXPECT_EQ(SliceShape(p->layouts[m.labels]), (Shape{4}));
  EXPECT_EQ(SliceShape(p->layouts[m.w1]), (Shape{32, 64}));  // whole on every rank
  // Every weight's gradient is a sum over the batch's axis: its mirror group.
  EXPECT_EQ(p->mirror_axes[m.w1].size(), 1u);
  EXPECT_EQ(p->mirror_axes[m.w2].size(), 1u);
  const TensorLayout& loss = p->layouts[m.g.loss()];
  EXPECT_TRUE(loss.partial_mean);
  // No activation gradient is partial under data parallel.
  for (const OpPlan& op : p->ops)
    for (const InputPlan& in : op.inputs) EXPECT_TRUE(in.grad_partial_axes.empty());
}

// Megatron's pair on 4 ranks: w1 split by columns, w2 by rows, the batch
// whole: one AllReduce (of w2's partial output, for the loss) and no other
// communication in the forward.
TEST(PartitionPlanTest, MegatronPairNeedsOneAllReduce) {
  Mlp m;
  std::vector<Strategy> s(m.g.ops().size());
  s[m.mm1] = {{1, 1}, {1, 4}};
  s[m.relu] = {{1, 4}};
  s[m.mm2] = {{1, 4}, {4, 1}};
  s[m.loss] = {{1, 1}, {1}};
  Result<PartitionPlan> p = PlanPartition(m.g, s, {.device_num = 4});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(CountAllSteps(*p), 1);
  EXPECT_EQ(CountSteps(*p, RedistKind::AllReduce), 1);
  const RedistStep& ar = p->ops[m.loss].inputs[0].redistribution.steps.at(0);
  EXPECT_EQ(ar.group_size, 4);
  EXPECT_EQ(ar.in_bytes, 16 * 10 * 4);
  EXPECT_EQ(SliceShape(p->layouts[m.w1]), (Shape{32, 16}));
  EXPECT_EQ(SliceShape(p->layouts[m.w2]), (Shape{16, 10}));
  EXPECT_EQ(SliceShape(p->layouts[m.x]), (Shape{16, 32}));  // the loss does not split the batch
  EXPECT_TRUE(p->mirror_axes[m.w1].empty());
  EXPECT_TRUE(p->mirror_axes[m.w2].empty());
  // x feeds a column-parallel MatMul: its gradient would be partial, but it
  // is data. h feeds a row-parallel one, which indexes all its split loops.
  EXPECT_TRUE(p->ops[m.mm1].inputs[0].grad_partial_axes.empty());
  EXPECT_TRUE(p->ops[m.mm2].inputs[0].grad_partial_axes.empty());
}

// A column-parallel MatMul after an activation: its input's gradient is
// partial along the column axis (Megatron's f).
TEST(PartitionPlanTest, ColumnParallelInputGetsAPartialGradient) {
  Graph g;
  const TensorId x = g.Input("x", {8, 16});
  const TensorId w0 = g.Param("w0", {16, 16}, InitSpec::Zeros());
  const TensorId w1 = g.Param("w1", {16, 32}, InitSpec::Zeros());
  const TensorId h = g.Tanh(g.MatMul(x, w0));
  g.MatMul(h, w1);
  std::vector<Strategy> s = {{{1, 1}, {1, 1}}, {{1, 1}}, {{1, 1}, {1, 2}}};
  Result<PartitionPlan> p = PlanPartition(g, s, {.device_num = 2});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->ops[2].inputs[0].grad_partial_axes, (std::vector<int>{0}));
  EXPECT_EQ(CountAllSteps(*p), 0);
  (void)h;
}

TEST(PartitionPlanTest, SharedParameterNeedsOneLayout) {
  Graph g;
  const TensorId x = g.Input("x", {8, 16});
  const TensorId w = g.Param("w", {16, 16}, InitSpec::Zeros());
  const TensorId h = g.MatMul(x, w);
  g.MatMul(h, w);
  const std::string first = g.ops()[0].name, second = g.ops()[1].name;
  std::vector<Strategy> s = {{{1, 1}, {1, 2}}, {{1, 2}, {2, 1}}};
  Result<PartitionPlan> p = PlanPartition(g, s, {.device_num = 2});
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("parameter w is used by " + first), std::string::npos) << p.status().message();
  EXPECT_NE(p.status().message().find("and by " + second), std::string::npos);
  EXPECT_NE(p.status().message().find("must get the same layout"), std::string::npos);
  // The same layout twice is fine.
  std::vector<Strategy> same = {{{1, 1}, {1, 2}}, {{1, 1}, {1, 2}}};
  EXPECT_TRUE(PlanPartition(g, same, {.device_num = 2}).ok());
}

// Reshape carries a batch split to the output dim holding the same blocks;
// a split it cannot carry is gathered first.
TEST(PartitionPlanTest, ReshapeCarriesSplits) {
  Graph g;
  const TensorId x = g.Input("x", {8, 784});
  const TensorId labels = g.Input("labels", {8}, DType::I32);
  const TensorId r = g.Reshape(x, {8, 4, 7, 4, 7});
  const TensorId t = g.Reshape(g.Transpose(r, {0, 1, 3, 2, 4}), {128, 49});
  const TensorId w = g.Param("w", {49, 10}, InitSpec::Zeros());
  const TensorId y = g.ReduceMean(g.Reshape(g.MatMul(t, w), {8, 16, 10}), {1});
  g.SetLoss(g.SparseSoftmaxCrossEntropy(y, labels));
  Result<PartitionPlan> p = PlanPartition(g, {}, {.device_num = 2});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(CountAllSteps(*p), 0);
  EXPECT_EQ(SliceShape(p->layouts[r]), (Shape{4, 4, 7, 4, 7}));
  EXPECT_EQ(SliceShape(p->layouts[t]), (Shape{64, 49}));
  // Split x's columns instead: [8,784] -> [8,4,7,4,7] cannot carry a split
  // of 784 two ways onto 4 (the dims before differ), so it is gathered.
  Graph h;
  const TensorId a = h.Input("a", {8, 8});
  const TensorId b = h.Tanh(a);
  h.Reshape(b, {64});
  Result<PartitionPlan> q = PlanPartition(h, std::vector<Strategy>{{{1, 2}}}, {.device_num = 2});
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  ASSERT_EQ(q->ops[1].inputs[0].redistribution.steps.size(), 1u);
  EXPECT_EQ(q->ops[1].inputs[0].redistribution.steps[0].kind, RedistKind::AllGather);
}

}  // namespace
}  // namespace sinkrt::host::parallel
