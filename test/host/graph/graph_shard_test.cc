// Graph::Shard: strategies attached to ops by output or by name, every
// structural error in MindSpore's words, and what strategies do to the graph
// hash.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "sinkrt/host/compiler.h"
#include "sinkrt/host/graph.h"

namespace sinkrt::host {
namespace {

using Strategy = std::vector<std::vector<int64_t>>;

// Two scoped linears: ops fc1.matmul, fc1.relu, fc2.matmul and the loss.
struct Tiny {
  Graph g{"tiny"};
  TensorId x, w1, h1, h, w2, logits;
  Tiny() {
    x = g.Input("x", {8, 16});
    const TensorId label = g.Input("label", {8}, DType::I32);
    {
      NameScope s(g, "fc1");
      w1 = g.Param("fc1.w", {16, 32}, InitSpec::HeUniform(1));
      h1 = g.MatMul(x, w1);
      h = g.Relu(h1);
    }
    {
      NameScope s(g, "fc2");
      w2 = g.Param("fc2.w", {32, 10}, InitSpec::HeUniform(2));
      logits = g.MatMul(h, w2);
    }
    g.SetLoss(g.SparseSoftmaxCrossEntropy(logits, label));
    g.AddOutput(logits);
  }
  const Strategy& StrategyOf(const std::string& op) const { return g.ops().at(g.FindOp(op)).strategy; }
};

void ExpectError(const Graph& g, const std::string& message) {
  ASSERT_FALSE(g.status().ok());
  EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(g.status().message(), message);
}

TEST(GraphShardTest, ShardByOutputSetsTheProducerAndChains) {
  Tiny t;
  ASSERT_TRUE(t.g.status().ok()) << t.g.status().message();
  EXPECT_TRUE(t.StrategyOf("fc1.matmul").empty());
  EXPECT_EQ(t.g.Shard(t.h1, {{2, 1}, {1, 4}}), t.h1);
  EXPECT_TRUE(t.g.status().ok()) << t.g.status().message();
  EXPECT_EQ(t.StrategyOf("fc1.matmul"), (Strategy{{2, 1}, {1, 4}}));
  EXPECT_TRUE(t.StrategyOf("fc2.matmul").empty());

  // Inline, as a model reads.
  Graph g;
  const TensorId x = g.Input("x", {4, 6});
  const TensorId y = g.Shard(g.Relu(x), {{2, 3}});
  ASSERT_TRUE(g.status().ok()) << g.status().message();
  EXPECT_EQ(g.ops().at(g.producer(y)).strategy, (Strategy{{2, 3}}));
}

TEST(GraphShardTest, ShardByNameAndFindOp) {
  Tiny t;
  EXPECT_EQ(t.g.FindOp("fc2.matmul"), t.g.producer(t.logits));
  EXPECT_EQ(t.g.FindOp("fc3.matmul"), -1);
  t.g.Shard("fc2.matmul", {{1, 4}, {4, 1}});
  t.g.Shard("fc1.relu", {{2, 2}});
  ASSERT_TRUE(t.g.status().ok()) << t.g.status().message();
  EXPECT_EQ(t.StrategyOf("fc2.matmul"), (Strategy{{1, 4}, {4, 1}}));
  EXPECT_EQ(t.StrategyOf("fc1.relu"), (Strategy{{2, 2}}));
  // A second Shard replaces the first; an empty one takes it away.
  t.g.Shard("fc2.matmul", {{2, 1}, {1, 1}});
  EXPECT_EQ(t.StrategyOf("fc2.matmul"), (Strategy{{2, 1}, {1, 1}}));
  t.g.Shard("fc2.matmul", {});
  ASSERT_TRUE(t.g.status().ok()) << t.g.status().message();
  EXPECT_TRUE(t.StrategyOf("fc2.matmul").empty());
}

// Every output of a multi-output op names the same op; a scalar input's
// entry is empty.
TEST(GraphShardTest, MultiOutputOpsAndScalarInputs) {
  Graph g;
  const TensorId x = g.Input("x", {4, 6});
  const std::vector<TensorId> parts = g.Split(x, 1, {2, 4});
  g.Shard(parts[1], {{4, 1}});
  const TensorId s = g.Const("s", {}, InitSpec::Constant(2.0f));
  const TensorId y = g.Shard(g.Mul(parts[0], s), {{2, 1}, {}});
  ASSERT_TRUE(g.status().ok()) << g.status().message();
  EXPECT_EQ(g.ops().at(g.producer(parts[0])).strategy, (Strategy{{4, 1}}));
  EXPECT_EQ(g.ops().at(g.producer(y)).strategy, (Strategy{{2, 1}, {}}));
}

// A copy of the graph (what Compile and Model take) keeps the strategies.
TEST(GraphShardTest, CopiesKeepStrategies) {
  Tiny t;
  t.g.Shard(t.h1, {{2, 1}, {1, 4}});
  const Graph copy = t.g;
  EXPECT_EQ(copy.ops().at(copy.FindOp("fc1.matmul")).strategy, (Strategy{{2, 1}, {1, 4}}));
}

// -- errors ----------------------------------------------------------------

TEST(GraphShardErrorTest, WrongNumberOfEntries) {
  Tiny t;
  t.g.Shard(t.h1, {{2, 1}});
  ExpectError(t.g, "fc1.matmul: The strategy is ((2, 1),), strategy size: 1 is not equal to inputs size: 2");
  EXPECT_TRUE(t.StrategyOf("fc1.matmul").empty());
}

TEST(GraphShardErrorTest, WrongEntryLength) {
  Tiny t;
  t.g.Shard("fc1.matmul", {{2, 1}, {1}});
  ExpectError(t.g,
              "fc1.matmul: The strategy is ((2, 1), (1,)), strategy len: 1 is not equal to inputs len: 2, index: 1");
  EXPECT_TRUE(t.StrategyOf("fc1.matmul").empty());
}

TEST(GraphShardErrorTest, ValueBelowOne) {
  Tiny t;
  t.g.Shard(t.logits, {{2, 0}, {1, 1}});
  ExpectError(t.g,
              "fc2.matmul: The strategy is ((2, 0), (1, 1)), the value of strategy must be larger than 0, but get 0");
  Tiny n;
  n.g.Shard(n.h, {{-2, 1}});
  ExpectError(n.g, "fc1.relu: The strategy is ((-2, 1),), the value of strategy must be larger than 0, but get -2");
}

TEST(GraphShardErrorTest, ALeafHasNoOp) {
  Tiny t;
  EXPECT_EQ(t.g.Shard(t.w1, {{1, 4}}), kInvalidTensor);
  ExpectError(t.g,
              "Shard: tensor 'fc1.w' is not the output of an op (Inputs, Params and Consts are leaves); shard "
              "the op that reads it");
  Tiny i;
  i.g.Shard(i.x, {{2, 1}});
  ExpectError(i.g,
              "Shard: tensor 'x' is not the output of an op (Inputs, Params and Consts are leaves); shard the "
              "op that reads it");
}

TEST(GraphShardErrorTest, NotATensorOfTheGraph) {
  Tiny t;
  EXPECT_EQ(t.g.Shard(TensorId{999}, {{1}}), kInvalidTensor);
  ExpectError(t.g, "Shard: tensor id 999 is not a tensor of this graph");
}

TEST(GraphShardErrorTest, UnknownOpName) {
  Tiny t;
  t.g.Shard("fc3.matmul", {{2, 1}, {1, 4}});
  ExpectError(t.g, "Shard: the graph 'tiny' has no op 'fc3.matmul'");
}

// Errors are sticky, as every builder's: later calls change nothing.
TEST(GraphShardErrorTest, LaterCallsAreNoOps) {
  Tiny t;
  t.g.Shard("nope", {{1}});
  EXPECT_EQ(t.g.Shard(t.h1, {{2, 1}, {1, 4}}), kInvalidTensor);
  t.g.Shard("fc2.matmul", {{2, 1}, {1, 4}});
  EXPECT_TRUE(t.StrategyOf("fc1.matmul").empty());
  EXPECT_TRUE(t.StrategyOf("fc2.matmul").empty());
  ExpectError(t.g, "Shard: the graph 'tiny' has no op 'nope'");
}

// -- the graph hash ----------------------------------------------------------

// Tiny's hash as main computed it before strategies existed: a graph
// without strategies keeps its hash (and so its streams and cache keys).
constexpr uint64_t kTinyHash = 0x2041c0f3fa18b7d7ull;

TEST(GraphShardHashTest, NoStrategyKeepsTheHashItHadBefore) {
  Tiny t;
  ASSERT_TRUE(t.g.status().ok()) << t.g.status().message();
  EXPECT_EQ(GraphHash(t.g), kTinyHash);
  EXPECT_EQ(GraphHashWithoutStrategies(t.g), kTinyHash);
}

TEST(GraphShardHashTest, AStrategyChangesTheHash) {
  Tiny a, b, c;
  a.g.Shard("fc1.matmul", {{2, 1}, {1, 4}});
  b.g.Shard("fc1.matmul", {{2, 1}, {1, 2}});
  c.g.Shard("fc2.matmul", {{2, 1}, {1, 4}});
  const uint64_t ha = GraphHash(a.g), hb = GraphHash(b.g), hc = GraphHash(c.g);
  EXPECT_NE(ha, kTinyHash);
  EXPECT_NE(ha, hb);
  EXPECT_NE(ha, hc);
  EXPECT_NE(hb, hc);
  // Equal strategies hash equal; the network itself is unchanged.
  Tiny a2;
  a2.g.Shard(a2.h1, {{2, 1}, {1, 4}});
  EXPECT_EQ(GraphHash(a2.g), ha);
  for (const Graph* g : {&a.g, &b.g, &c.g}) EXPECT_EQ(GraphHashWithoutStrategies(*g), kTinyHash);
  // Taking the strategy away gives the old hash back.
  a.g.Shard("fc1.matmul", {});
  EXPECT_EQ(GraphHash(a.g), kTinyHash);
}

}  // namespace
}  // namespace sinkrt::host
