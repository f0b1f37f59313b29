// The nn cells (sinkrt/host/nn.h): the ops each builds, its shapes, its
// parameter, and the errors that name the cell. Their values and gradients
// are GradientCheck's (Ops/GradientCheck.*Loss*).
#include "sinkrt/host/nn.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace sinkrt::host {
namespace {

void ExpectError(const Graph& g, const std::string& message) {
  EXPECT_FALSE(g.status().ok());
  EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(g.status().message(), message);
}

std::set<OpCode> OpsOf(const Graph& g) {
  std::set<OpCode> ops;
  for (const OpNode& op : g.ops()) ops.insert(op.op);
  return ops;
}

TEST(NnLosses, ReductionsGiveScalarsOrTheElementwiseShape) {
  Graph g;
  const TensorId x = g.Input("x", {8, 3});
  const TensorId y = g.Input("y", {3});
  const TensorId mean = MSELoss(g, x, y);
  const TensorId sum = L1Loss(g, x, y, Reduction::kSum);
  const TensorId none = MSELoss(g, x, y, Reduction::kNone);
  ASSERT_TRUE(g.status().ok()) << g.status().ToString();
  EXPECT_EQ(g.tensor(mean).shape, Shape{});
  EXPECT_EQ(g.tensor(sum).shape, Shape{});
  EXPECT_EQ(g.tensor(none).shape, (Shape{8, 3}));
  EXPECT_EQ(OpsOf(g),
            (std::set<OpCode>{OpCode::Sub, OpCode::Square, OpCode::Abs, OpCode::ReduceMean, OpCode::ReduceSum}));
  // The ops carry the cell's name scope.
  EXPECT_EQ(g.ops().front().name.rfind("MSELoss.", 0), 0u) << g.ops().front().name;
}

TEST(NnLosses, DenseSoftmaxCrossEntropyIsPerRow) {
  Graph g;
  const TensorId logits = g.Input("logits", {4, 10});
  const TensorId labels = g.Input("labels", {4, 10});
  const TensorId rows = SoftmaxCrossEntropyWithLogits(g, logits, labels);
  const TensorId mean = SoftmaxCrossEntropyWithLogits(g, logits, labels, Reduction::kMean);
  ASSERT_TRUE(g.status().ok()) << g.status().ToString();
  EXPECT_EQ(g.tensor(rows).shape, (Shape{4}));  // MindSpore's default: reduction='none'
  EXPECT_EQ(g.tensor(mean).shape, Shape{});
  EXPECT_TRUE(OpsOf(g).count(OpCode::LogSoftmax));
  // Two losses, two constants, no name clash.
  EXPECT_TRUE(g.valid(g.FindTensor("SoftmaxCrossEntropyWithLogits.minus_one")));
  EXPECT_TRUE(g.valid(g.FindTensor("SoftmaxCrossEntropyWithLogits.minus_one_1")));
}

TEST(NnLosses, BadOperandsNameTheCell) {
  Graph g1;
  MSELoss(g1, g1.Input("x", {2, 3}), g1.Input("y", {4}));
  ExpectError(g1,
              "MSELoss: logits and labels: operands could not be broadcast together with shapes [2,3] and [4] "
              "(3 vs 4 at broadcast axis 1)");
  Graph g2;
  L1Loss(g2, g2.Input("x", {2}), g2.Input("y", {2}, DType::I32));
  ExpectError(g2, "L1Loss: labels must be f32, got i32 [2] 'y'");
  Graph g3;
  SoftmaxCrossEntropyWithLogits(g3, g3.Input("x", {2, 5}), g3.Input("y", {2}));
  ExpectError(g3, "SoftmaxCrossEntropyWithLogits: labels must have the logits' shape [2,5] (sparse=False), got [2]");
  Graph g4;
  SoftmaxCrossEntropyWithLogits(g4, g4.Input("x", {10}), g4.Input("y", {10}));
  ExpectError(g4, "SoftmaxCrossEntropyWithLogits: logits must be [N,C], got [10]");
}

TEST(NnEmbedding, TableIsAParamNamedAsMindSporesWithItsDefaultInit) {
  Graph g;
  const TensorId ids = g.Input("ids", {2, 7}, DType::I32);
  const TensorId y = Embedding(g, ids, 100, 16, "tok", 5);
  ASSERT_TRUE(g.status().ok()) << g.status().ToString();
  EXPECT_EQ(g.tensor(y).shape, (Shape{2, 7, 16}));
  const TensorId table = g.FindTensor("tok.embedding_table");
  ASSERT_TRUE(g.valid(table));
  const TensorInfo& t = g.tensor(table);
  EXPECT_EQ(t.kind, TensorKind::Param);
  EXPECT_EQ(t.shape, (Shape{100, 16}));
  EXPECT_EQ(t.init.kind, InitKind::Normal);
  EXPECT_EQ(t.init.mean, 0.0f);
  EXPECT_EQ(t.init.stddev, 0.01f);
  EXPECT_EQ(t.init.seed, 5u);
  EXPECT_EQ(OpsOf(g), std::set<OpCode>{OpCode::Gather});

  Graph bad;
  Embedding(bad, bad.Input("ids", {3}, DType::I32), 0, 4);
  ExpectError(bad, "Embedding 'embedding': vocab_size and embedding_size must be positive, got 0 and 4");
}

}  // namespace
}  // namespace sinkrt::host
