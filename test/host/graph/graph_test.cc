// Graph builder: shape inference, attribute normalisation, naming and the
// sticky error path of every op.
#include "sinkrt/host/graph.h"

#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <string>

#include "support/test_models.h"

namespace sinkrt::host {
namespace {

Shape ShapeOf(const Graph& g, TensorId t) { return g.tensor(t).shape; }

const OpNode& ProducerOf(const Graph& g, TensorId t) { return g.ops().at(static_cast<size_t>(g.producer(t))); }

// The first error, with the graph left as it was before the failing call.
void ExpectError(const Graph& g, const std::string& message) {
  EXPECT_FALSE(g.status().ok());
  EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(g.status().message(), message);
}

// -- InitSpec, MutatedInputs, BroadcastShapes -----------------------------

TEST(InitSpecTest, FactoriesFillTheirFields) {
  EXPECT_EQ(InitSpec::Zeros().kind, InitKind::Zeros);
  InitSpec c = InitSpec::Constant(2.5f);
  EXPECT_EQ(c.kind, InitKind::Constant);
  EXPECT_EQ(c.value, 2.5f);
  InitSpec u = InitSpec::Uniform(-1.0f, 3.0f, 7);
  EXPECT_EQ(u.kind, InitKind::Uniform);
  EXPECT_EQ(u.low, -1.0f);
  EXPECT_EQ(u.high, 3.0f);
  EXPECT_EQ(u.seed, 7u);
  InitSpec n = InitSpec::Normal(0.5f, 0.1f, 9);
  EXPECT_EQ(n.kind, InitKind::Normal);
  EXPECT_EQ(n.mean, 0.5f);
  EXPECT_EQ(n.stddev, 0.1f);
  EXPECT_EQ(n.seed, 9u);
  EXPECT_EQ(InitSpec::XavierUniform(1).kind, InitKind::XavierUniform);
  EXPECT_EQ(InitSpec::XavierNormal(2).kind, InitKind::XavierNormal);
  EXPECT_EQ(InitSpec::HeUniform(3).kind, InitKind::HeUniform);
  EXPECT_EQ(InitSpec::HeNormal(4).kind, InitKind::HeNormal);
  EXPECT_EQ(InitSpec::HeNormal(4).seed, 4u);
  EXPECT_EQ(InitSpec::HeUniform(3).fan_in, 0);  // derived by the compiler

  InitSpec in = InitSpec::Inline({1.0f, -2.0f, 0.25f});
  EXPECT_EQ(in.kind, InitKind::Inline);
  ASSERT_EQ(in.data.size(), 12u);
  float back[3];
  std::memcpy(back, in.data.data(), sizeof(back));
  EXPECT_EQ(back[0], 1.0f);
  EXPECT_EQ(back[1], -2.0f);
  EXPECT_EQ(back[2], 0.25f);
}

TEST(MutatedInputsTest, OptimizerUpdatesOnly) {
  EXPECT_EQ(MutatedInputs(OpCode::SgdUpdate), (std::vector<size_t>{0}));
  EXPECT_EQ(MutatedInputs(OpCode::MomentumUpdate), (std::vector<size_t>{0, 2}));
  EXPECT_EQ(MutatedInputs(OpCode::AdamUpdate), (std::vector<size_t>{0, 2, 3}));
  EXPECT_EQ(MutatedInputs(OpCode::AdamPowers), (std::vector<size_t>{0}));
  for (OpCode op : {OpCode::MatMul, OpCode::AddN, OpCode::Copy, OpCode::Fill, OpCode::MaxPool2D})
    EXPECT_TRUE(MutatedInputs(op).empty()) << OpCodeName(op);
}

TEST(BroadcastShapesTest, NumPyRules) {
  auto bs = [](Shape a, Shape b) {
    Result<Shape> r = BroadcastShapes(a, b);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? r.value() : Shape{-99};
  };
  EXPECT_EQ(bs({2, 3}, {2, 3}), (Shape{2, 3}));
  EXPECT_EQ(bs({2, 3}, {3}), (Shape{2, 3}));
  EXPECT_EQ(bs({3}, {2, 3}), (Shape{2, 3}));
  EXPECT_EQ(bs({2, 3}, {}), (Shape{2, 3}));
  EXPECT_EQ(bs({}, {}), (Shape{}));
  EXPECT_EQ(bs({2, 1, 4}, {3, 1}), (Shape{2, 3, 4}));
  EXPECT_EQ(bs({1, 3}, {2, 1}), (Shape{2, 3}));
  EXPECT_EQ(bs({5, 1, 1}, {1, 6, 7}), (Shape{5, 6, 7}));
  EXPECT_EQ(bs({0, 3}, {1, 3}), (Shape{0, 3}));

  Result<Shape> bad = BroadcastShapes({2, 3}, {4});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(),
            "operands could not be broadcast together with shapes [2,3] and [4] "
            "(3 vs 4 at broadcast axis 1)");
  EXPECT_FALSE(BroadcastShapes({2, 3, 4}, {3, 3, 4}).ok());
}

// -- leaves ------------------------------------------------------------------

TEST(GraphLeafTest, KindsDtypesAndInitialisers) {
  Graph g("leaves");
  EXPECT_EQ(g.name(), "leaves");
  TensorId x = g.Input("image", {8, 4});
  TensorId y = g.Input("label", {8}, DType::I32);
  TensorId w = g.Param("w", {4, 2}, InitSpec::HeUniform(3));
  TensorId c = g.Const("c", {2}, InitSpec::Inline({1.0f, 2.0f}));
  ASSERT_TRUE(g.status().ok()) << g.status().ToString();
  EXPECT_EQ(g.tensors().size(), 4u);
  EXPECT_EQ(g.tensor(x).kind, TensorKind::Input);
  EXPECT_EQ(g.tensor(x).dtype, DType::F32);
  EXPECT_EQ(g.tensor(x).init.kind, InitKind::None);
  EXPECT_EQ(g.tensor(y).dtype, DType::I32);
  EXPECT_EQ(g.tensor(w).kind, TensorKind::Param);
  EXPECT_EQ(g.tensor(w).init.kind, InitKind::HeUniform);
  EXPECT_EQ(g.tensor(w).init.seed, 3u);
  EXPECT_EQ(g.tensor(c).kind, TensorKind::Const);
  EXPECT_EQ(g.tensor(c).init.data.size(), 8u);
  EXPECT_EQ(g.FindTensor("w"), w);
  EXPECT_EQ(g.FindTensor("nope"), kInvalidTensor);
  EXPECT_EQ(g.producer(w), -1);
  EXPECT_EQ(g.producer(kInvalidTensor), -1);
  EXPECT_TRUE(g.ops().empty());
  EXPECT_EQ(g.loss(), kInvalidTensor);
}

TEST(GraphLeafTest, DuplicateNameIsAnError) {
  Graph g;
  g.Input("x", {2});
  EXPECT_EQ(g.Param("x", {2}, InitSpec::Zeros()), kInvalidTensor);
  ExpectError(g, "Param 'x': name is already used by Input tensor 0");
}

TEST(GraphLeafTest, DuplicateInputName) {
  Graph g;
  g.Input("image", {2, 3});
  EXPECT_EQ(g.Input("image", {2, 3}), kInvalidTensor);
  ExpectError(g, "Input 'image': name is already used by Input tensor 0");
}

TEST(GraphLeafTest, DuplicateConstName) {
  Graph g;
  g.Param("p", {2}, InitSpec::Zeros());
  g.Const("p", {2}, InitSpec::Zeros());
  ExpectError(g, "Const 'p': name is already used by Param tensor 0");
}

TEST(GraphLeafTest, EmptyName) {
  Graph g;
  EXPECT_EQ(g.Param("", {2}, InitSpec::Zeros()), kInvalidTensor);
  ExpectError(g, "Param: name must not be empty");
}

TEST(GraphLeafTest, NonPositiveDimension) {
  Graph g;
  g.Input("x", {64, 0});
  ExpectError(g, "Input 'x': shape [64,0] must have positive dimensions");
  Graph g2;
  g2.Param("w", {-1, 3}, InitSpec::Zeros());
  ExpectError(g2, "Param 'w': shape [-1,3] must have positive dimensions");
}

TEST(GraphLeafTest, InputDtype) {
  Graph g;
  g.Input("x", {2}, DType::U8);
  ExpectError(g, "Input 'x': dtype must be f32 (features) or i32 (labels), got u8");
}

TEST(GraphLeafTest, InlineSizeMustMatchShape) {
  Graph g;
  g.Const("c", {2, 2}, InitSpec::Inline({1, 2, 3}));
  ExpectError(g, "Const 'c': Inline initialiser has 3 values, shape [2,2] needs 4");
}

TEST(GraphLeafTest, BadRandomInitialisers) {
  Graph g;
  g.Param("u", {2}, InitSpec::Uniform(1.0f, -1.0f, 0));
  ExpectError(g, "Param 'u': Uniform initialiser needs low <= high, got [1.000000, -1.000000)");
  Graph g2;
  g2.Param("n", {2}, InitSpec::Normal(0.0f, -0.5f, 0));
  ExpectError(g2, "Param 'n': Normal initialiser needs stddev >= 0, got -0.500000");
  Graph g3;
  InitSpec none;
  none.kind = InitKind::None;
  g3.Param("p", {2}, none);
  ExpectError(g3, "Param 'p': needs an initialiser (InitSpec::Zeros(), HeUniform(), ...)");
}

// -- naming and the sticky status ----------------------------------------------

TEST(GraphNamingTest, OpsAndTensorsHaveUniqueNames) {
  Graph g = testing::MakeLeNet(4);
  ASSERT_TRUE(g.status().ok()) << g.status().ToString();
  std::set<std::string> ops, tensors;
  for (const OpNode& op : g.ops()) EXPECT_TRUE(ops.insert(op.name).second) << op.name;
  for (const TensorInfo& t : g.tensors()) EXPECT_TRUE(tensors.insert(t.name).second) << t.name;
  // An op's first output carries the op's name.
  for (const OpNode& op : g.ops()) EXPECT_EQ(g.tensor(op.outputs[0]).name, op.name);
}

TEST(GraphNamingTest, GeneratedNamesFollowTheOpAndSkipTakenOnes) {
  Graph g;
  TensorId x = g.Input("x", {2, 3});
  g.Param("relu_0", {1}, InitSpec::Zeros());  // the name the next Relu would get
  TensorId r = g.Relu(x);
  TensorId m = g.MatMul(r, g.Param("w", {3, 4}, InitSpec::Zeros()));
  ASSERT_TRUE(g.status().ok()) << g.status().ToString();
  EXPECT_EQ(g.ops()[0].name, "relu_1");
  EXPECT_EQ(g.tensor(r).name, "relu_1");
  EXPECT_EQ(g.ops()[1].name, "matmul_2");
  EXPECT_EQ(g.tensor(m).name, "matmul_2");
}

TEST(GraphNamingTest, ParamMayNotTakeAnOpOutputName) {
  Graph g;
  TensorId x = g.Input("x", {2});
  g.Relu(x);
  g.Param("relu_0", {2}, InitSpec::Zeros());
  ExpectError(g, "Param 'relu_0': name is already used by Intermediate tensor 1");
}

TEST(GraphStatusTest, FirstErrorIsStickyAndLaterCallsReturnInvalid) {
  Graph g;
  TensorId x = g.Input("x", {64, 512});
  TensorId w = g.Param("w", {256, 10}, InitSpec::Zeros());
  EXPECT_EQ(g.MatMul(x, w), kInvalidTensor);
  const std::string first = "MatMul 'matmul_0': inner dimensions differ: a is [64,512] (K=512), b is [256,10] (K=256)";
  ExpectError(g, first);
  const size_t tensors = g.tensors().size();
  // Later calls, valid or not, do nothing and keep the first message.
  EXPECT_EQ(g.Relu(x), kInvalidTensor);
  EXPECT_EQ(g.Input("y", {3}), kInvalidTensor);
  EXPECT_EQ(g.Param("x", {3}, InitSpec::Zeros()), kInvalidTensor);
  EXPECT_EQ(g.Softmax(x, 7), kInvalidTensor);
  EXPECT_EQ(g.AddTensor(TensorInfo{}), kInvalidTensor);
  std::vector<TensorId> outs = g.AddOp(OpCode::Relu, {x}, OpAttrs{}, {{{64, 512}, DType::F32}});
  EXPECT_EQ(outs, (std::vector<TensorId>{kInvalidTensor}));
  g.SetLoss(x);
  g.AddOutput(x);
  g.Fail(Internal("second"));
  ExpectError(g, first);
  EXPECT_TRUE(g.ops().empty());
  EXPECT_EQ(g.tensors().size(), tensors);
  EXPECT_EQ(g.loss(), kInvalidTensor);
  EXPECT_TRUE(g.outputs().empty());
}

TEST(GraphStatusTest, ForeignTensorId) {
  Graph g;
  TensorId x = g.Input("x", {2, 2});
  EXPECT_EQ(g.Add(x, 42), kInvalidTensor);
  ExpectError(g, "Add 'add_0': b is not a tensor of this graph (id 42)");
}

// -- MatMul ----------------------------------------------------------------------

TEST(MatMulTest, ShapesForEveryTransposeCombination) {
  Graph g;
  TensorId a = g.Input("a", {4, 3});  // [M,K] or, transposed, [K,M] with K=4
  TensorId b = g.Param("b", {3, 5}, InitSpec::Zeros());
  TensorId bt = g.Param("bt", {5, 3}, InitSpec::Zeros());
  TensorId b4 = g.Param("b4", {4, 5}, InitSpec::Zeros());
  TensorId b4t = g.Param("b4t", {5, 4}, InitSpec::Zeros());
  TensorId nn = g.MatMul(a, b);
  TensorId nt = g.MatMul(a, bt, false, true);
  TensorId tn = g.MatMul(a, b4, true, false);
  TensorId tt = g.MatMul(a, b4t, true, true);
  ASSERT_TRUE(g.status().ok()) << g.status().ToString();
  EXPECT_EQ(ShapeOf(g, nn), (Shape{4, 5}));
  EXPECT_EQ(ShapeOf(g, nt), (Shape{4, 5}));
  EXPECT_EQ(ShapeOf(g, tn), (Shape{3, 5}));
  EXPECT_EQ(ShapeOf(g, tt), (Shape{3, 5}));
  const OpNode& op = ProducerOf(g, tt);
  EXPECT_EQ(op.op, OpCode::MatMul);
  EXPECT_EQ(op.inputs, (std::vector<TensorId>{a, b4t}));
  EXPECT_TRUE(op.attrs.transpose_a);
  EXPECT_TRUE(op.attrs.transpose_b);
  EXPECT_FALSE(ProducerOf(g, nt).attrs.transpose_a);
  EXPECT_TRUE(ProducerOf(g, nt).attrs.transpose_b);
}

TEST(MatMulTest, InnerDimensionMismatchNamesBothShapes) {
  Graph g;
  TensorId a = g.Input("a", {64, 512});
  TensorId b = g.Param("b", {10, 256}, InitSpec::Zeros());
  g.MatMul(a, b, false, true);
  ExpectError(g,
              "MatMul 'matmul_0': inner dimensions differ: a is [64,512] (K=512), "
              "b is [10,256] transposed (K=256)");
}

TEST(MatMulTest, RankAndDtype) {
  Graph g;
  g.MatMul(g.Input("a", {2, 3, 4}), g.Param("b", {4, 2}, InitSpec::Zeros()));
  ExpectError(g, "MatMul 'matmul_0': a must be 2-D, got [2,3,4]");
  Graph g2;
  g2.MatMul(g2.Input("a", {2, 3}), g2.Param("b", {3}, InitSpec::Zeros()));
  ExpectError(g2, "MatMul 'matmul_0': b must be 2-D, got [3]");
  Graph g3;
  g3.MatMul(g3.Input("a", {2, 3}, DType::I32), g3.Param("b", {3, 1}, InitSpec::Zeros()));
  ExpectError(g3, "MatMul 'matmul_0': a must be f32, got i32 [2,3] 'a'");
}

// -- BiasAdd -------------------------------------------------------------------------

TEST(BiasAddTest, ChannelAxis) {
  Graph g;
  TensorId m = g.Input("m", {8, 10});
  TensorId f = g.Input("f", {8, 6, 5, 5});
  TensorId s = g.Input("s", {8, 6, 7});
  TensorId b10 = g.Param("b10", {10}, InitSpec::Zeros());
  TensorId b6 = g.Param("b6", {6}, InitSpec::Zeros());
  TensorId ym = g.BiasAdd(m, b10);
  TensorId yf = g.BiasAdd(f, b6);
  TensorId ys = g.BiasAdd(s, b6);
  ASSERT_TRUE(g.status().ok()) << g.status().ToString();
  EXPECT_EQ(ShapeOf(g, ym), (Shape{8, 10}));
  EXPECT_EQ(ShapeOf(g, yf), (Shape{8, 6, 5, 5}));
  EXPECT_EQ(ShapeOf(g, ys), (Shape{8, 6, 7}));
  EXPECT_EQ(ProducerOf(g, ym).attrs.axis, 1);
  EXPECT_EQ(ProducerOf(g, yf).attrs.axis, 1);
  EXPECT_EQ(ProducerOf(g, ys).attrs.axis, 1);
}

TEST(BiasAddTest, Errors) {
  Graph g;
  g.BiasAdd(g.Input("x", {64, 256}), g.Param("b", {10}, InitSpec::Zeros()));
  ExpectError(g,
              "BiasAdd 'biasadd_0': bias must be [C] = [256] for x [64,256] "
              "(channel axis 1), got [10]");
  Graph g2;
  g2.BiasAdd(g2.Input("x", {8, 6, 5, 5}), g2.Param("b", {5}, InitSpec::Zeros()));
  ExpectError(g2,
              "BiasAdd 'biasadd_0': bias must be [C] = [6] for x [8,6,5,5] "
              "(channel axis 1), got [5]");
  Graph g3;
  g3.BiasAdd(g3.Input("x", {6}), g3.Param("b", {6}, InitSpec::Zeros()));
  ExpectError(g3, "BiasAdd 'biasadd_0': x must have rank >= 2 ([N,C] or NCHW), got [6]");
  Graph g4;
  g4.BiasAdd(g4.Input("x", {2, 6}), g4.Param("b", {1, 6}, InitSpec::Zeros()));
  ExpectError(g4,
              "BiasAdd 'biasadd_0': bias must be [C] = [6] for x [2,6] "
              "(channel axis 1), got [1,6]");
}

// -- elementwise -----------------------------------------------------------------------

TEST(ElementwiseTest, BroadcastingShapes) {
  Graph g;
  TensorId a = g.Input("a", {4, 1, 3});
  TensorId b = g.Param("b", {5, 1}, InitSpec::Zeros());
  TensorId s = g.Const("s", {1}, InitSpec::Constant(2));
  TensorId add = g.Add(a, b);
  TensorId sub = g.Sub(b, a);
  TensorId mul = g.Mul(a, s);
  ASSERT_TRUE(g.status().ok()) << g.status().ToString();
  EXPECT_EQ(ShapeOf(g, add), (Shape{4, 5, 3}));
  EXPECT_EQ(ShapeOf(g, sub), (Shape{4, 5, 3}));
  EXPECT_EQ(ShapeOf(g, mul), (Shape{4, 1, 3}));
  EXPECT_EQ(ProducerOf(g, add).op, OpCode::Add);
  EXPECT_EQ(ProducerOf(g, sub).op, OpCode::Sub);
  EXPECT_EQ(ProducerOf(g, sub).inputs, (std::vector<TensorId>{b, a}));
  EXPECT_EQ(ProducerOf(g, mul).op, OpCode::Mul);
  const std::pair<TensorId, OpCode> math[] = {{g.Div(a, b), OpCode::Div},
                                              {g.Maximum(b, a), OpCode::Maximum},
                                              {g.Minimum(a, s), OpCode::Minimum},
                                              {g.Pow(s, a), OpCode::Pow}};
  ASSERT_TRUE(g.status().ok()) << g.status().ToString();
  for (auto [y, op] : math) EXPECT_EQ(ProducerOf(g, y).op, op);
  EXPECT_EQ(ShapeOf(g, math[0].first), (Shape{4, 5, 3}));
  EXPECT_EQ(ShapeOf(g, math[1].first), (Shape{4, 5, 3}));
  EXPECT_EQ(ShapeOf(g, math[2].first), (Shape{4, 1, 3}));
  EXPECT_EQ(ShapeOf(g, math[3].first), (Shape{4, 1, 3}));
  Graph g2;
  g2.Pow(g2.Input("a", {2, 3}), g2.Input("b", {4}));
  ExpectError(g2,
              "Pow 'pow_0': operands could not be broadcast together with shapes [2,3] "
              "and [4] (3 vs 4 at broadcast axis 1)");
}

TEST(MaskingTest, ReduceMaxSelectAndCausalMaskShapes) {
  Graph g;
  const TensorId x = g.Input("x", {2, 3, 4});
  const TensorId m = g.ReduceMax(x, {-1, 0});
  const TensorId mk = g.ReduceMax(x, {1}, true);
  const TensorId all = g.ReduceMax(x);
  const TensorId cond = g.Const("cond", {3, 1}, InitSpec::Inline({1, 0, 2}));
  const TensorId sel = g.Select(cond, x, g.Input("y", {4}));
  const TensorId cm = g.CausalMask(x, -1e4f);
  ASSERT_TRUE(g.status().ok()) << g.status().ToString();
  EXPECT_EQ(ShapeOf(g, m), (Shape{3}));
  EXPECT_EQ(ProducerOf(g, m).attrs.axes, (std::vector<int>{0, 2}));
  EXPECT_EQ(ShapeOf(g, mk), (Shape{2, 1, 4}));
  EXPECT_EQ(ShapeOf(g, all), (Shape{}));
  EXPECT_EQ(ProducerOf(g, sel).op, OpCode::Select);
  EXPECT_EQ(ShapeOf(g, sel), (Shape{2, 3, 4}));
  EXPECT_EQ(ProducerOf(g, cm).op, OpCode::CausalMask);
  EXPECT_EQ(ProducerOf(g, cm).attrs.value, -1e4f);
  EXPECT_EQ(ShapeOf(g, cm), (Shape{2, 3, 4}));
}

TEST(MaskingTest, BadOperandsNameTheProblem) {
  Graph g;
  g.Select(g.Input("c", {3}, DType::I32), g.Input("x", {3}), g.Input("y", {3}));
  ExpectError(g, "Select 'select_0': cond must be f32, got i32 [3] 'c'");
  Graph g2;
  g2.Select(g2.Input("c", {2}), g2.Input("x", {3}), g2.Input("y", {3}));
  ExpectError(g2,
              "Select 'select_0': operands could not be broadcast together with shapes [2] and [3] (2 vs 3 at "
              "broadcast axis 0)");
  Graph g3;
  g3.CausalMask(g3.Input("s", {5}), 0.0f);
  ExpectError(g3, "CausalMask 'causal_mask_0': scores must have rank >= 2 ([..., T, S]), got [5]");
  Graph g4;
  g4.ReduceMax(g4.Input("x", {2, 3}), {2});
  ExpectError(g4, "ReduceMax 'reducemax_0': axis 2 is out of range for x [2,3] (valid: [-2, 2))");
}

TEST(OneHotPadTest, ShapesAndAttributes) {
  Graph g;
  const TensorId ids = g.Input("ids", {2, 3}, DType::I32);
  const TensorId last = g.OneHot(ids, 7);
  const TensorId mid = g.OneHot(ids, 4, 2.0f, -1.0f, 1);
  const TensorId first = g.OneHot(ids, 5, 1.0f, 0.0f, 0);
  const TensorId x = g.Input("x", {3, 4});
  const TensorId pc = g.Pad(x, {{1, 2}, {0, 3}}, PadMode::Constant, 7.0f);
  const TensorId pr = g.Pad(x, {{2, 2}, {3, 0}}, PadMode::Reflect, 7.0f);
  const TensorId ps = g.Pad(x, {{3, 3}, {4, 4}}, PadMode::Symmetric);
  ASSERT_TRUE(g.status().ok()) << g.status().ToString();
  EXPECT_EQ(ShapeOf(g, last), (Shape{2, 3, 7}));
  EXPECT_EQ(ShapeOf(g, mid), (Shape{2, 4, 3}));
  EXPECT_EQ(ShapeOf(g, first), (Shape{5, 2, 3}));
  EXPECT_EQ(ProducerOf(g, mid).attrs.on_value, 2.0f);
  EXPECT_EQ(ProducerOf(g, mid).attrs.off_value, -1.0f);
  EXPECT_EQ(ProducerOf(g, mid).attrs.one_hot_axis, 1);
  EXPECT_EQ(ShapeOf(g, pc), (Shape{6, 7}));
  EXPECT_EQ(ProducerOf(g, pc).attrs.paddings, (std::vector<int64_t>{1, 2, 0, 3}));
  EXPECT_EQ(ProducerOf(g, pc).attrs.value, 7.0f);
  EXPECT_EQ(ShapeOf(g, pr), (Shape{7, 7}));
  EXPECT_EQ(ProducerOf(g, pr).attrs.value, 0.0f);  // the value is the constant mode's only
  EXPECT_EQ(ShapeOf(g, ps), (Shape{9, 12}));
  EXPECT_EQ(ProducerOf(g, ps).attrs.pad_mode, PadMode::Symmetric);
}

TEST(OneHotPadTest, BadOperandsNameTheProblem) {
  Graph g;
  g.OneHot(g.Input("f", {3}), 4);
  ExpectError(g, "OneHot 'one_hot_0': indices must be i32, got f32 [3] 'f'");
  Graph g2;
  g2.OneHot(g2.Input("i", {3}, DType::I32), -1);
  ExpectError(g2, "OneHot 'one_hot_0': depth must be >= 0, got -1");
  Graph g3;
  g3.OneHot(g3.Input("i", {3}, DType::I32), 4, 1.0f, 0.0f, 2);
  ExpectError(g3, "OneHot 'one_hot_0': axis must be in [-1, 1] for indices [3], got 2");
  Graph g4;
  g4.Pad(g4.Input("x", {3, 4}), {{1, 1}});
  ExpectError(g4, "Pad 'pad_0': paddings has 1 (before, after) pairs, expected one per axis of x [3,4]");
  Graph g5;
  g5.Pad(g5.Input("x", {3, 4}), {{0, 0}, {4, 0}}, PadMode::Reflect);
  ExpectError(g5, "Pad 'pad_0': paddings (4, 0) of axis 1 (extent 4) must be in [0, 3] in mode reflect");
  Graph g6;
  g6.Pad(g6.Input("x", {3, 4}), {{4, 0}, {0, 0}}, PadMode::Symmetric);
  ExpectError(g6, "Pad 'pad_0': paddings (4, 0) of axis 0 (extent 3) must be in [0, 3] in mode symmetric");
  Graph g7;
  g7.Pad(g7.Input("x", {3}), {{-1, 0}});
  ExpectError(g7, "Pad 'pad_0': paddings (-1, 0) of axis 0 (extent 3) must be in [0, 2147483647] in mode constant");
  Graph g8;
  g8.Pad(g8.Input("x", {}), {});
  ExpectError(g8, "Pad 'pad_0': x must have rank 1 to 8, got []");
}

TEST(ElementwiseTest, IncompatibleShapes) {
  Graph g;
  g.Sub(g.Input("a", {2, 3}), g.Input("b", {4}));
  ExpectError(g,
              "Sub 'sub_0': operands could not be broadcast together with shapes [2,3] "
              "and [4] (3 vs 4 at broadcast axis 1)");
  Graph g2;
  g2.Mul(g2.Input("a", {2, 3}), g2.Input("b", {2}, DType::I32));
  ExpectError(g2, "Mul 'mul_0': b must be f32, got i32 [2] 'b'");
}

TEST(ElementwiseTest, UnaryKeepsShape) {
  Graph g;
  TensorId x = g.Input("x", {3, 7});
  const std::pair<TensorId, OpCode> ys[] = {
      {g.Relu(x), OpCode::Relu},       {g.Gelu(x), OpCode::Gelu},   {g.Tanh(x), OpCode::Tanh},
      {g.Sigmoid(x), OpCode::Sigmoid}, {g.Exp(x), OpCode::Exp},     {g.Log(x), OpCode::Log},
      {g.Sqrt(x), OpCode::Sqrt},       {g.Rsqrt(x), OpCode::Rsqrt}, {g.Square(x), OpCode::Square},
      {g.Abs(x), OpCode::Abs},         {g.Erf(x), OpCode::Erf},     {g.Gelu(x, false), OpCode::GeluErf},
      {g.Gelu(x, true), OpCode::Gelu}};
  TensorId scalar = g.Relu(g.Param("s", {1}, InitSpec::Zeros()));
  ASSERT_TRUE(g.status().ok()) << g.status().ToString();
  for (auto [y, op] : ys) {
    EXPECT_EQ(ShapeOf(g, y), (Shape{3, 7}));
    EXPECT_EQ(ProducerOf(g, y).op, op);
    EXPECT_EQ(ProducerOf(g, y).inputs, (std::vector<TensorId>{x}));
  }
  EXPECT_EQ(ShapeOf(g, scalar), (Shape{1}));
  Graph g2;
  g2.Tanh(g2.Input("l", {3}, DType::I32));
  ExpectError(g2, "Tanh 'tanh_0': x must be f32, got i32 [3] 'l'");
  Graph g3;
  g3.Rsqrt(g3.Input("l", {3}, DType::I32));
  ExpectError(g3, "Rsqrt 'rsqrt_0': x must be f32, got i32 [3] 'l'");
}

// -- softmax and losses ---------------------------------------------------------------

TEST(SoftmaxTest, AxisIsNormalised) {
  Graph g;
  TensorId x = g.Input("x", {2, 3, 4});
  TensorId a = g.Softmax(x);
  TensorId b = g.Softmax(x, 1);
  TensorId c = g.LogSoftmax(x, -3);
  ASSERT_TRUE(g.status().ok()) << g.status().ToString();
  EXPECT_EQ(ProducerOf(g, a).attrs.axis, 2);
  EXPECT_EQ(ProducerOf(g, b).attrs.axis, 1);
  EXPECT_EQ(ProducerOf(g, c).attrs.axis, 0);
  EXPECT_EQ(ProducerOf(g, c).op, OpCode::LogSoftmax);
  EXPECT_EQ(ShapeOf(g, c), (Shape{2, 3, 4}));
}

TEST(SoftmaxTest, AxisOutOfRange) {
  Graph g;
  g.Softmax(g.Input("x", {2, 3}), 2);
  ExpectError(g, "Softmax 'softmax_0': axis 2 is out of range for x [2,3] (valid: [-2, 2))");
  Graph g2;
  g2.LogSoftmax(g2.Input("x", {2, 3}), -3);
  ExpectError(g2,
              "LogSoftmax 'logsoftmax_0': axis -3 is out of range for x [2,3] "
              "(valid: [-2, 2))");
}

TEST(LossTest, SparseSoftmaxCrossEntropyIsAScalar) {
  Graph g;
  TensorId logits = g.Input("logits", {8, 10});
  TensorId labels = g.Input("labels", {8}, DType::I32);
  TensorId loss = g.SparseSoftmaxCrossEntropy(logits, labels);
  TensorId acc = g.ArgMaxAccuracy(logits, labels);
  ASSERT_TRUE(g.status().ok()) << g.status().ToString();
  EXPECT_EQ(ShapeOf(g, loss), Shape{});
  EXPECT_EQ(g.tensor(loss).dtype, DType::F32);
  EXPECT_EQ(ProducerOf(g, loss).inputs, (std::vector<TensorId>{logits, labels}));
  EXPECT_EQ(ShapeOf(g, acc), Shape{});
  EXPECT_EQ(g.tensor(acc).dtype, DType::F32);
  EXPECT_EQ(ProducerOf(g, acc).op, OpCode::ArgMaxAccuracy);
  g.SetLoss(loss);
  g.AddOutput(logits);
  g.AddOutput(logits);
  EXPECT_EQ(g.loss(), loss);
  EXPECT_EQ(g.outputs(), (std::vector<TensorId>{logits}));
}

TEST(LossTest, LabelErrors) {
  Graph g;
  g.SparseSoftmaxCrossEntropy(g.Input("logits", {8, 10}), g.Input("labels", {8}));
  ExpectError(g,
              "SparseSoftmaxCrossEntropy 'sparsesoftmaxcrossentropy_0': labels must be "
              "i32, got f32 [8] 'labels'");
  Graph g2;
  g2.SparseSoftmaxCrossEntropy(g2.Input("logits", {8, 10}), g2.Input("labels", {4}, DType::I32));
  ExpectError(g2,
              "SparseSoftmaxCrossEntropy 'sparsesoftmaxcrossentropy_0': labels must be "
              "[N] = [8] for logits [8,10], got [4]");
  Graph g3;
  g3.ArgMaxAccuracy(g3.Input("logits", {8, 2, 5}), g3.Input("labels", {8}, DType::I32));
  ExpectError(g3, "ArgMaxAccuracy 'argmaxaccuracy_0': logits must be [N,C], got [8,2,5]");
}

TEST(LossTest, SetLossNeedsAScalar) {
  Graph g;
  TensorId x = g.Input("x", {64, 10});
  g.SetLoss(x);
  EXPECT_EQ(g.status().message(), "SetLoss: loss must be an f32 scalar (shape []), got f32 [64,10] 'x'");
  EXPECT_EQ(g.loss(), kInvalidTensor);
  Graph g2;
  g2.SetLoss(5);
  EXPECT_EQ(g2.status().message(), "SetLoss: loss is not a tensor of this graph (id 5)");
  Graph g3;
  g3.AddOutput(3);
  EXPECT_EQ(g3.status().message(), "AddOutput: not a tensor of this graph (id 3)");
}

// -- BatchNorm ---------------------------------------------------------------------------------

TEST(BatchNormTest, LayersCreateMindSporesParametersAndState) {
  Graph g;
  TensorId x = g.Input("x", {4, 3, 5, 5});
  TensorId y = BatchNorm2d(g, "bn1", x, {.eps = 1e-3f, .momentum = 0.8f});
  TensorId z = BatchNorm1d(g, "bn2", g.Input("v", {4, 7}));
  ASSERT_TRUE(g.status().ok()) << g.status().ToString();
  EXPECT_EQ(ShapeOf(g, y), (Shape{4, 3, 5, 5}));
  EXPECT_EQ(ShapeOf(g, z), (Shape{4, 7}));
  const struct {
    const char* name;
    TensorKind kind;
    InitKind init;
    float value;
  } want[] = {{"bn1.gamma", TensorKind::Param, InitKind::Constant, 1.0f},
              {"bn1.beta", TensorKind::Param, InitKind::Zeros, 0.0f},
              {"bn1.moving_mean", TensorKind::State, InitKind::Zeros, 0.0f},
              {"bn1.moving_variance", TensorKind::State, InitKind::Constant, 1.0f}};
  for (const auto& w : want) {
    const TensorInfo& t = g.tensor(g.FindTensor(w.name));
    EXPECT_EQ(t.kind, w.kind) << w.name;
    EXPECT_EQ(t.shape, (Shape{3})) << w.name;
    EXPECT_EQ(t.init.kind, w.init) << w.name;
    EXPECT_EQ(t.init.value, w.value) << w.name;
  }
  const OpNode& op = ProducerOf(g, y);
  EXPECT_EQ(op.op, OpCode::BatchNorm);
  EXPECT_EQ(op.name, "bn1.batchnorm");
  ASSERT_EQ(op.outputs.size(), 3u);
  EXPECT_EQ(ShapeOf(g, op.outputs[1]), (Shape{3}));
  EXPECT_EQ(op.attrs.layer_norm_epsilon, 1e-3f);
  EXPECT_EQ(op.attrs.bn_momentum, 0.8f);
  EXPECT_FALSE(op.attrs.bn_sync);
  EXPECT_EQ(MutatedInputs(OpCode::BatchNorm), (std::vector<size_t>{3, 4}));
  EXPECT_EQ(g.SetSyncBatchNorm(true), 2u);
  EXPECT_TRUE(ProducerOf(g, y).attrs.bn_sync);
}

TEST(BatchNormTest, BadOperandsNameTheField) {
  Graph g;
  TensorId x = g.Input("x", {4, 3});
  TensorId p3 = g.Param("p3", {3}, InitSpec::Zeros());
  g.BatchNorm(x, p3, p3, p3, g.State("mv", {3}, InitSpec::Zeros()));
  ExpectError(g, "BatchNorm 'batchnorm_0': moving_mean must be a State tensor (Graph::State), got 'p3'");
  Graph g2;
  TensorId x2 = g2.Input("x", {4, 3});
  TensorId s4 = g2.State("s4", {4}, InitSpec::Zeros());
  TensorId q = g2.Param("q", {3}, InitSpec::Zeros());
  g2.BatchNorm(x2, q, q, s4, s4);
  ExpectError(g2, "BatchNorm 'batchnorm_0': moving_mean must be [C] = [3] for x [4,3] (channels on axis 1), got [4]");
  Graph g3;
  TensorId s3 = g3.State("s3", {3}, InitSpec::Zeros());
  TensorId q3 = g3.Param("q", {3}, InitSpec::Zeros());
  g3.BatchNorm(g3.Input("x", {4, 3}), q3, q3, s3, s3, {.momentum = 1.5f});
  ExpectError(g3, "BatchNorm 'batchnorm_0': the 'momentum' must be in range [0, 1], but got 1.500000");
  Graph g4;
  BatchNorm2d(g4, "bn", g4.Input("x", {4, 3}));
  ExpectError(g4, "For 'BatchNorm2d', the input must be [N, C, H, W], got [4,3]");
}

// -- LayerNorm, Gather, Cast ------------------------------------------------------------------

TEST(LayerNormTest, ReturnsYWithMeanAndRstdPerRow) {
  Graph g;
  TensorId x = g.Input("x", {4, 16, 8});
  TensorId gamma = g.Param("gamma", {8}, InitSpec::Constant(1.0f));
  TensorId beta = g.Param("beta", {8}, InitSpec::Zeros());
  TensorId y = g.LayerNorm(x, gamma, beta);
  TensorId y2 = g.LayerNorm(y, gamma, beta, 1e-6f);
  ASSERT_TRUE(g.status().ok()) << g.status().ToString();
  EXPECT_EQ(ShapeOf(g, y), (Shape{4, 16, 8}));
  const OpNode& op = ProducerOf(g, y);
  EXPECT_EQ(op.op, OpCode::LayerNorm);
  EXPECT_EQ(op.inputs, (std::vector<TensorId>{x, gamma, beta}));
  ASSERT_EQ(op.outputs.size(), 3u);
  EXPECT_EQ(op.outputs[0], y);
  EXPECT_EQ(ShapeOf(g, op.outputs[1]), (Shape{64}));
  EXPECT_EQ(ShapeOf(g, op.outputs[2]), (Shape{64}));
  EXPECT_EQ(op.attrs.layer_norm_epsilon, 1e-5f);
  EXPECT_EQ(op.attrs.epsilon, 1e-8f);  // Adam's, untouched
  EXPECT_EQ(ProducerOf(g, y2).attrs.layer_norm_epsilon, 1e-6f);
}

TEST(LayerNormTest, MismatchedGammaOrBetaNamesTheField) {
  Graph g;
  g.LayerNorm(g.Input("x", {4, 8}), g.Param("gamma", {4}, InitSpec::Zeros()), g.Param("beta", {8}, InitSpec::Zeros()));
  ExpectError(g,
              "LayerNorm 'layernorm_0': gamma must be [D] = [8] for x [4,8] (normalised over its last axis), "
              "got [4]");
  Graph g2;
  g2.LayerNorm(g2.Input("x", {4, 8}), g2.Param("gamma", {8}, InitSpec::Zeros()),
               g2.Param("beta", {1, 8}, InitSpec::Zeros()));
  ExpectError(g2,
              "LayerNorm 'layernorm_0': beta must be [D] = [8] for x [4,8] (normalised over its last axis), "
              "got [1,8]");
  Graph g3;
  TensorId p = g3.Param("p", {8}, InitSpec::Zeros());
  g3.LayerNorm(g3.Input("x", {4, 8}), p, p, 0.0f);
  ExpectError(g3, "LayerNorm 'layernorm_0': epsilon must be a positive finite number, got 0.000000");
  Graph g4;
  TensorId q = g4.Param("q", {8}, InitSpec::Zeros());
  g4.LayerNorm(g4.Input("x", {4, 8}), g4.Input("gamma", {8}, DType::I32), q);
  ExpectError(g4, "LayerNorm 'layernorm_0': gamma must be f32, got i32 [8] 'gamma'");
}

TEST(GatherTest, RowsOfTheTableAtTheIndices) {
  Graph g;
  TensorId table = g.Param("embedding", {100, 16}, InitSpec::Normal(0, 1, 1));
  TensorId ids = g.Input("ids", {8, 5}, DType::I32);
  TensorId y = g.Gather(table, ids);
  ASSERT_TRUE(g.status().ok()) << g.status().ToString();
  EXPECT_EQ(ShapeOf(g, y), (Shape{8, 5, 16}));
  EXPECT_EQ(ProducerOf(g, y).op, OpCode::Gather);
  EXPECT_EQ(ProducerOf(g, y).inputs, (std::vector<TensorId>{table, ids}));
  TensorId v = g.Gather(g.Param("vec", {7}, InitSpec::Zeros()), ids);
  EXPECT_EQ(ShapeOf(g, v), (Shape{8, 5}));
}

TEST(GatherTest, FloatIndicesAreRefusedNamingTheField) {
  Graph g;
  g.Gather(g.Param("embedding", {100, 16}, InitSpec::Zeros()), g.Input("ids", {8}));
  ExpectError(g, "Gather 'gather_0': indices must be i32, got f32 [8] 'ids'");
  Graph g2;
  g2.Gather(g2.Const("scalar", {}, InitSpec::Zeros()), g2.Input("ids", {8}, DType::I32));
  ExpectError(g2, "Gather 'gather_0': table must be [V, ...] (rank >= 1), got a scalar []");
}

TEST(CastTest, F32AndBf16BothWays) {
  Graph g;
  TensorId x = g.Input("x", {2, 3});
  TensorId h = g.Cast(x, DType::BF16);
  TensorId r = g.Reshape(h, {3, 2});  // byte copies move bf16 too
  TensorId back = g.Cast(r, DType::F32);
  TensorId same = g.Cast(back, DType::F32);
  ASSERT_TRUE(g.status().ok()) << g.status().ToString();
  EXPECT_EQ(g.tensor(h).dtype, DType::BF16);
  EXPECT_EQ(g.tensor(r).dtype, DType::BF16);
  EXPECT_EQ(g.tensor(back).dtype, DType::F32);
  EXPECT_EQ(ShapeOf(g, back), (Shape{3, 2}));
  EXPECT_EQ(ProducerOf(g, h).attrs.cast_to, DType::BF16);
  EXPECT_EQ(ProducerOf(g, same).attrs.cast_to, DType::F32);
}

TEST(CastTest, OtherDtypesAndBf16IntoOtherOpsAreRefused) {
  Graph g;
  g.Cast(g.Input("x", {2}), DType::I32);
  ExpectError(g, "Cast 'cast_0': to must be f32 or bf16, got i32");
  Graph g2;
  g2.Cast(g2.Input("ids", {2}, DType::I32), DType::F32);
  ExpectError(g2, "Cast 'cast_0': x must be f32 or bf16, got i32 [2] 'ids'");
  Graph g3;
  g3.Relu(g3.Cast(g3.Input("x", {2}), DType::BF16));
  ExpectError(g3, "Relu 'relu_1': x must be f32, got bf16 [2] 'cast_0'");
  Graph g4;
  TensorId p = g4.Param("p", {2}, InitSpec::Zeros());
  g4.LayerNorm(g4.Cast(g4.Input("x", {2}), DType::BF16), p, p);
  ExpectError(g4, "LayerNorm 'layernorm_1': x must be f32, got bf16 [2] 'cast_0'");
}

// -- reductions and reshapes ------------------------------------------------------------------

TEST(ReduceTest, AxesNormalisedSortedDeduplicated) {
  Graph g;
  TensorId x = g.Input("x", {2, 3, 4});
  TensorId s = g.ReduceSum(x, {-1, 0, 2});
  TensorId k = g.ReduceMean(x, {1}, true);
  TensorId all = g.ReduceMean(x);
  TensorId all_keep = g.ReduceSum(x, {}, true);
  ASSERT_TRUE(g.status().ok()) << g.status().ToString();
  EXPECT_EQ(ProducerOf(g, s).attrs.axes, (std::vector<int>{0, 2}));
  EXPECT_FALSE(ProducerOf(g, s).attrs.keep_dims);
  EXPECT_EQ(ShapeOf(g, s), (Shape{3}));
  EXPECT_EQ(ProducerOf(g, k).op, OpCode::ReduceMean);
  EXPECT_TRUE(ProducerOf(g, k).attrs.keep_dims);
  EXPECT_EQ(ShapeOf(g, k), (Shape{2, 1, 4}));
  EXPECT_TRUE(ProducerOf(g, all).attrs.axes.empty());
  EXPECT_EQ(ShapeOf(g, all), Shape{});
  EXPECT_EQ(ShapeOf(g, all_keep), (Shape{1, 1, 1}));
}

TEST(ReduceTest, AxisOutOfRange) {
  Graph g;
  g.ReduceSum(g.Input("x", {2, 3}), {0, 3});
  ExpectError(g, "ReduceSum 'reducesum_0': axis 3 is out of range for x [2,3] (valid: [-2, 2))");
}

TEST(ReshapeTest, InfersOneDimension) {
  Graph g;
  TensorId x = g.Input("x", {4, 6});
  TensorId r = g.Reshape(x, {-1, 3, 2});
  TensorId same = g.Reshape(x, {24});
  TensorId labels = g.Reshape(g.Input("l", {4, 2}, DType::I32), {8});
  ASSERT_TRUE(g.status().ok()) << g.status().ToString();
  EXPECT_EQ(ShapeOf(g, r), (Shape{4, 3, 2}));
  EXPECT_EQ(ShapeOf(g, same), (Shape{24}));
  EXPECT_EQ(g.tensor(labels).dtype, DType::I32);
  EXPECT_EQ(ProducerOf(g, r).op, OpCode::Reshape);
}

TEST(ReshapeTest, Errors) {
  Graph g;
  g.Reshape(g.Input("x", {2, 3}), {-1, -1});
  ExpectError(g, "Reshape 'reshape_0': shape [-1,-1] has more than one -1");
  Graph g2;
  g2.Reshape(g2.Input("x", {2, 3}), {4, 2});
  ExpectError(g2,
              "Reshape 'reshape_0': cannot reshape x [2,3] (6 elements) into [4,2] "
              "(8 elements)");
  Graph g3;
  g3.Reshape(g3.Input("x", {2, 3}), {4, -1});
  ExpectError(g3,
              "Reshape 'reshape_0': cannot reshape x [2,3] (6 elements) into [4,-1]: "
              "6 is not a multiple of 4");
  Graph g4;
  g4.Reshape(g4.Input("x", {2, 3}), {0, 6});
  ExpectError(g4, "Reshape 'reshape_0': shape [0,6] must have positive dimensions (or one -1)");
}

TEST(FlattenTest, KeepsTheBatch) {
  Graph g;
  TensorId f = g.Flatten(g.Input("x", {8, 16, 5, 5}));
  TensorId v = g.Flatten(g.Input("v", {8}));
  ASSERT_TRUE(g.status().ok()) << g.status().ToString();
  EXPECT_EQ(ShapeOf(g, f), (Shape{8, 400}));
  EXPECT_EQ(ShapeOf(g, v), (Shape{8, 1}));
  EXPECT_EQ(ProducerOf(g, f).op, OpCode::Flatten);
  Graph g2;
  g2.Flatten(g2.ReduceSum(g2.Input("x", {3})));
  ExpectError(g2, "Flatten 'flatten_1': x must be [N, ...], got a scalar []");
}

// -- convolution and pooling ---------------------------------------------------------------------

TEST(Conv2DTest, OutputSizes) {
  Graph g;
  TensorId x = g.Input("x", {2, 3, 28, 28});
  TensorId w5 = g.Param("w5", {6, 3, 5, 5}, InitSpec::Zeros());
  TensorId same = g.Conv2D(x, w5, 1, 2);
  TensorId valid = g.Conv2D(x, w5);
  TensorId strided = g.Conv2D(x, w5, 2, 0);  // (28-5)/2+1 = 12
  OpAttrs a;
  a.stride_h = 2;
  a.stride_w = 3;
  a.pad_top = 1;
  a.pad_bottom = 0;
  a.pad_left = 2;
  a.pad_right = 1;
  a.dilation_h = 2;
  a.dilation_w = 1;
  a.kernel_h = 9;  // pooling field: not copied onto a convolution
  TensorId explicit_ = g.Conv2D(x, w5, a);
  ASSERT_TRUE(g.status().ok()) << g.status().ToString();
  EXPECT_EQ(ShapeOf(g, same), (Shape{2, 6, 28, 28}));
  EXPECT_EQ(ShapeOf(g, valid), (Shape{2, 6, 24, 24}));
  EXPECT_EQ(ShapeOf(g, strided), (Shape{2, 6, 12, 12}));
  // OH = (28 + 1 + 0 - 2*4 - 1)/2 + 1 = 11; OW = (28 + 2 + 1 - 4 - 1)/3 + 1 = 9.
  EXPECT_EQ(ShapeOf(g, explicit_), (Shape{2, 6, 11, 9}));
  const OpAttrs& stored = ProducerOf(g, explicit_).attrs;
  EXPECT_EQ(stored.stride_h, 2);
  EXPECT_EQ(stored.stride_w, 3);
  EXPECT_EQ(stored.pad_top, 1);
  EXPECT_EQ(stored.pad_bottom, 0);
  EXPECT_EQ(stored.pad_left, 2);
  EXPECT_EQ(stored.pad_right, 1);
  EXPECT_EQ(stored.dilation_h, 2);
  EXPECT_EQ(stored.dilation_w, 1);
  EXPECT_EQ(stored.kernel_h, 1);
  EXPECT_EQ(ProducerOf(g, same).attrs.pad_left, 2);
  EXPECT_EQ(ProducerOf(g, same).inputs, (std::vector<TensorId>{x, w5}));
}

TEST(Conv2DTest, Errors) {
  Graph g;
  g.Conv2D(g.Input("x", {2, 3, 8, 8}), g.Param("w", {6, 1, 3, 3}, InitSpec::Zeros()));
  ExpectError(g, "Conv2D 'conv2d_0': x [2,3,8,8] has C=3 channels but w [6,1,3,3] expects 1");
  Graph g2;
  g2.Conv2D(g2.Input("x", {3, 8, 8}), g2.Param("w", {6, 3, 3, 3}, InitSpec::Zeros()));
  ExpectError(g2, "Conv2D 'conv2d_0': x must be 4-D NCHW, got [3,8,8]");
  Graph g3;
  g3.Conv2D(g3.Input("x", {1, 3, 8, 8}), g3.Param("w", {6, 3, 3}, InitSpec::Zeros()));
  ExpectError(g3, "Conv2D 'conv2d_0': w must be 4-D OIHW, got [6,3,3]");
  Graph g4;
  g4.Conv2D(g4.Input("x", {1, 3, 8, 8}), g4.Param("w", {6, 3, 3, 3}, InitSpec::Zeros()), 0);
  ExpectError(g4, "Conv2D 'conv2d_0': strides must be >= 1, got (0, 0)");
  Graph g5;
  g5.Conv2D(g5.Input("x", {1, 3, 8, 8}), g5.Param("w", {6, 3, 3, 3}, InitSpec::Zeros()), 1, -1);
  ExpectError(g5, "Conv2D 'conv2d_0': pads must be >= 0, got (-1, -1, -1, -1)");
  Graph g6;
  g6.Conv2D(g6.Input("x", {1, 3, 4, 4}), g6.Param("w", {6, 3, 5, 5}, InitSpec::Zeros()));
  ExpectError(g6,
              "Conv2D 'conv2d_0': kernel [5,5] (dilated [5,5]) is larger than the padded "
              "input [4,4]");
  Graph g7;
  OpAttrs d;
  d.dilation_w = 0;
  g7.Conv2D(g7.Input("x", {1, 3, 8, 8}), g7.Param("w", {6, 3, 3, 3}, InitSpec::Zeros()), d);
  ExpectError(g7, "Conv2D 'conv2d_0': dilations must be >= 1, got (1, 0)");
}

TEST(PoolTest, MaxPoolHasAWorkspace) {
  Graph g;
  TensorId x = g.Input("x", {2, 6, 28, 28});
  TensorId y = g.MaxPool2D(x, 2, 2);
  ASSERT_TRUE(g.status().ok()) << g.status().ToString();
  EXPECT_EQ(ShapeOf(g, y), (Shape{2, 6, 14, 14}));
  const OpNode& op = ProducerOf(g, y);
  EXPECT_EQ(op.op, OpCode::MaxPool2D);
  ASSERT_EQ(op.outputs.size(), 2u);
  EXPECT_EQ(op.outputs[0], y);
  const TensorInfo& ws = g.tensor(op.outputs[1]);
  EXPECT_EQ(ws.dtype, DType::U8);
  EXPECT_EQ(ws.shape, (Shape{4 * 2 * 6 * 14 * 14}));
  EXPECT_EQ(ws.name, op.name + ":1");
  EXPECT_EQ(g.producer(op.outputs[1]), g.producer(y));
  EXPECT_EQ(op.attrs.kernel_h, 2);
  EXPECT_EQ(op.attrs.kernel_w, 2);
  EXPECT_EQ(op.attrs.stride_h, 2);
  EXPECT_EQ(op.attrs.stride_w, 2);
  EXPECT_EQ(op.attrs.pad_top, 0);
}

TEST(PoolTest, AvgPoolAndPadding) {
  Graph g;
  TensorId x = g.Input("x", {1, 3, 7, 7});
  TensorId a = g.AvgPool2D(x, 3, 2, 1);  // (7 + 2 - 3)/2 + 1 = 4
  TensorId m = g.MaxPool2D(x, 3, 1);     // 5
  ASSERT_TRUE(g.status().ok()) << g.status().ToString();
  EXPECT_EQ(ShapeOf(g, a), (Shape{1, 3, 4, 4}));
  EXPECT_EQ(ProducerOf(g, a).outputs.size(), 1u);
  EXPECT_EQ(ProducerOf(g, a).attrs.pad_right, 1);
  EXPECT_EQ(ShapeOf(g, m), (Shape{1, 3, 5, 5}));
}

TEST(PoolTest, Errors) {
  Graph g;
  g.MaxPool2D(g.Input("x", {1, 3, 8, 8}), 2, 2, 2);
  ExpectError(g, "MaxPool2D 'maxpool2d_0': pad must be in [0, kernel/2], got pad 2 for kernel 2");
  Graph g2;
  g2.AvgPool2D(g2.Input("x", {1, 3, 2, 2}), 3, 1);
  ExpectError(g2, "AvgPool2D 'avgpool2d_0': kernel 3 is larger than the padded input [2,2]");
  Graph g3;
  g3.MaxPool2D(g3.Input("x", {3, 8, 8}), 2, 2);
  ExpectError(g3, "MaxPool2D 'maxpool2d_0': x must be 4-D NCHW, got [3,8,8]");
  Graph g4;
  g4.AvgPool2D(g4.Input("x", {1, 3, 8, 8}), 2, 0);
  ExpectError(g4,
              "AvgPool2D 'avgpool2d_0': kernel and stride must be >= 1, got kernel 2, "
              "stride 0");
}

// -- low level ---------------------------------------------------------------------------------

TEST(LowLevelTest, AddOpWithoutOutputs) {
  Graph g;
  TensorId p = g.Param("p", {3}, InitSpec::Zeros());
  TensorId grad = g.AddTensor(TensorInfo{"p/grad", DType::F32, {3}, TensorKind::Grad, {}});
  std::vector<TensorId> none = g.AddOp(OpCode::SgdUpdate, {p, grad}, OpAttrs{}, {});
  ASSERT_TRUE(g.status().ok()) << g.status().ToString();
  EXPECT_TRUE(none.empty());
  ASSERT_EQ(g.ops().size(), 1u);
  EXPECT_EQ(g.ops()[0].name, "sgdupdate_0");
  EXPECT_TRUE(g.ops()[0].outputs.empty());
  EXPECT_EQ(g.producer(p), -1);
}

TEST(LowLevelTest, AddOpNamesAndOutputs) {
  Graph g;
  TensorId x = g.Input("x", {2, 2});
  std::vector<TensorId> outs =
      g.AddOp(OpCode::MaxPool2D, {x}, OpAttrs{}, {{{2, 2}, DType::F32}, {{16}, DType::U8}}, "my_pool");
  ASSERT_TRUE(g.status().ok()) << g.status().ToString();
  ASSERT_EQ(outs.size(), 2u);
  EXPECT_EQ(g.tensor(outs[0]).name, "my_pool");
  EXPECT_EQ(g.tensor(outs[1]).name, "my_pool:1");
  EXPECT_EQ(g.tensor(outs[0]).kind, TensorKind::Intermediate);
  EXPECT_EQ(g.producer(outs[1]), 0);
  g.AddOp(OpCode::Relu, {x}, OpAttrs{}, {{{2, 2}, DType::F32}}, "my_pool");
  ExpectError(g, "op name 'my_pool' is already used");
}

TEST(LowLevelTest, AddOpRejectsBadInputsAndOutputs) {
  Graph g;
  g.AddOp(OpCode::Relu, {7}, OpAttrs{}, {{{2}, DType::F32}});
  ExpectError(g, "Relu 'relu_0': input 0 is not a tensor of this graph (id 7)");
  Graph g2;
  TensorId x = g2.Input("x", {2});
  g2.AddOp(OpCode::Relu, {x}, OpAttrs{}, {{{-2}, DType::F32}});
  ExpectError(g2, "Relu 'relu_0': output 0 has an invalid dtype or shape [-2]");
  EXPECT_EQ(g2.tensors().size(), 1u);
}

TEST(LowLevelTest, AddTensorChecksNames) {
  Graph g;
  TensorId a = g.AddTensor(TensorInfo{"", DType::F32, {2}, TensorKind::Intermediate, {}});
  EXPECT_EQ(g.tensor(a).name, "t_0");
  g.AddTensor(TensorInfo{"t_0", DType::F32, {2}, TensorKind::Intermediate, {}});
  ExpectError(g, "tensor name 't_0' is already used by Intermediate tensor 0");
}

TEST(LowLevelTest, AddOpIntoWritesExistingTensorsOnce) {
  Graph g;
  TensorId p = g.Param("p", {3}, InitSpec::Zeros());
  TensorId grad = g.AddTensor(TensorInfo{"p/grad", DType::F32, {3}, TensorKind::Grad, {}});
  g.AddOpInto(OpCode::Copy, {p}, OpAttrs{}, {grad}, "copy_p");
  ASSERT_TRUE(g.status().ok()) << g.status().ToString();
  EXPECT_EQ(g.producer(grad), 0);
  EXPECT_EQ(g.ops()[0].outputs, (std::vector<TensorId>{grad}));
  g.AddOpInto(OpCode::Copy, {p}, OpAttrs{}, {grad});
  ExpectError(g, "Copy 'copy_0': output 0 'p/grad' is already written by op 'copy_p'");

  Graph g2;
  TensorId q = g2.Param("q", {3}, InitSpec::Zeros());
  g2.AddOpInto(OpCode::Fill, {}, OpAttrs{}, {q});
  ExpectError(g2, "Fill 'fill_0': output 0 is Param tensor 'q', which no op may write");
}

TEST(LowLevelTest, AddOpIntoRejectsUnknownAndRepeatedOutputs) {
  Graph g;
  TensorId x = g.Input("x", {3});
  g.AddOpInto(OpCode::Relu, {x}, OpAttrs{}, {99});
  ExpectError(g, "Relu 'relu_0': output 0 is not a tensor of this graph (id 99)");
  Graph g2;
  TensorId y = g2.Input("y", {3});
  TensorId t = g2.AddTensor(TensorInfo{"t", DType::F32, {3}, TensorKind::Intermediate, {}});
  g2.AddOpInto(OpCode::Copy, {y}, OpAttrs{}, {t, t});
  ExpectError(g2, "Copy 'copy_0': tensor 't' is listed twice as an output");
  EXPECT_EQ(g2.producer(t), -1);
}

TEST(LowLevelTest, CopiesKeepNameBookkeeping) {
  Graph g = testing::MakeMlp(2, {3, 2});
  Graph copy = g;
  EXPECT_EQ(copy.FindTensor("fc1.weight"), g.FindTensor("fc1.weight"));
  TensorId r = copy.Relu(copy.FindTensor("image"));
  ASSERT_TRUE(copy.status().ok()) << copy.status().ToString();
  std::set<std::string> names;
  for (const OpNode& op : copy.ops()) EXPECT_TRUE(names.insert(op.name).second) << op.name;
  EXPECT_EQ(g.FindTensor(copy.tensor(r).name), kInvalidTensor);  // the original is untouched
  copy.Param("fc1.bias", {2}, InitSpec::Zeros());
  ExpectError(copy,
              "Param 'fc1.bias': name is already used by Param tensor " + std::to_string(g.FindTensor("fc1.bias")));
  EXPECT_TRUE(g.status().ok());
}

// -- BatchMatMul, Transpose, Concat, Split -----------------------------------------

TEST(BatchMatMulTest, BroadcastBatchDimsAndTransposes) {
  Graph g;
  TensorId a = g.Input("a", {2, 1, 4, 3});
  TensorId b = g.Param("b", {5, 3, 6}, InitSpec::Zeros());
  TensorId bt = g.Param("bt", {6, 3}, InitSpec::Zeros());
  TensorId y = g.BatchMatMul(a, b);                // [2,1] x [5] batch -> [2,5]
  TensorId yt = g.BatchMatMul(a, bt, true, true);  // op(a) [3,4] (K=4), op(b) [3,6] (K=3)
  ASSERT_FALSE(g.status().ok());
  EXPECT_EQ(ShapeOf(g, y), (Shape{2, 5, 4, 6}));
  EXPECT_EQ(yt, kInvalidTensor);
  ExpectError(g,
              "BatchMatMul 'batchmatmul_1': inner dimensions differ: a is [2,1,4,3] transposed (K=4), "
              "b is [6,3] transposed (K=3)");
  Graph g2;
  TensorId x = g2.Input("x", {8, 4, 16, 16});
  TensorId q = g2.BatchMatMul(x, x, false, true);
  ASSERT_TRUE(g2.status().ok()) << g2.status().ToString();
  EXPECT_EQ(ShapeOf(g2, q), (Shape{8, 4, 16, 16}));
  EXPECT_TRUE(ProducerOf(g2, q).attrs.transpose_b);
  EXPECT_FALSE(ProducerOf(g2, q).attrs.transpose_a);
}

TEST(BatchMatMulTest, Errors) {
  Graph g;
  g.BatchMatMul(g.Input("a", {4, 2, 3}), g.Param("b", {4, 5, 2}, InitSpec::Zeros()));
  ExpectError(g, "BatchMatMul 'batchmatmul_0': inner dimensions differ: a is [4,2,3] (K=3), b is [4,5,2] (K=5)");
  Graph g2;
  g2.BatchMatMul(g2.Input("a", {4, 2, 3}), g2.Param("b", {3, 3, 2}, InitSpec::Zeros()));
  ExpectError(g2,
              "BatchMatMul 'batchmatmul_0': batch dimensions of a [4,2,3] and b [3,3,2] do not broadcast: "
              "operands could not be broadcast together with shapes [4] and [3] (4 vs 3 at broadcast axis 0)");
  Graph g3;
  g3.BatchMatMul(g3.Input("a", {3}), g3.Param("b", {3, 2}, InitSpec::Zeros()));
  ExpectError(g3, "BatchMatMul 'batchmatmul_0': a must have rank 2 to 8 ([..., rows, cols]), got [3]");
}

TEST(TransposeTest, PermutesAndNormalises) {
  Graph g;
  TensorId x = g.Input("x", {2, 3, 4, 5});
  TensorId y = g.Transpose(x, {2, 0, -1, 1});
  ASSERT_TRUE(g.status().ok()) << g.status().ToString();
  EXPECT_EQ(ShapeOf(g, y), (Shape{4, 2, 5, 3}));
  EXPECT_EQ(ProducerOf(g, y).attrs.perm, (std::vector<int>{2, 0, 3, 1}));
}

TEST(TransposeTest, InvalidPermutationNamesTheOpAndPerm) {
  Graph g;
  g.Transpose(g.Input("x", {2, 3, 4}), {1, 0});
  ExpectError(g, "Transpose 'transpose_0': perm [1,0] has 2 entries, x [2,3,4] has rank 3");
  Graph g2;
  g2.Transpose(g2.Input("x", {2, 3, 4}), {0, 2, 0});
  ExpectError(g2, "Transpose 'transpose_0': perm [0,2,0] is not a permutation: axis 0 appears twice");
  Graph g3;
  g3.Transpose(g3.Input("x", {2, 3, 4}), {0, 3, 1});
  ExpectError(g3, "Transpose 'transpose_0': perm [0,3,1]: entry 1 (3) is out of range for x [2,3,4] (valid: [-3, 3))");
  Graph g4;
  g4.Transpose(g4.Input("x", {1, 1, 1, 1, 1, 1, 2}), {0, 1, 2, 3, 4, 5, 6});
  ExpectError(g4, "Transpose 'transpose_0': x [1,1,1,1,1,1,2] has rank 7, at most 6 is supported");
}

TEST(ConcatSplitTest, Shapes) {
  Graph g;
  TensorId a = g.Input("a", {2, 3, 4});
  TensorId b = g.Param("b", {2, 5, 4}, InitSpec::Zeros());
  TensorId c = g.Concat({a, b, a}, -2);
  ASSERT_TRUE(g.status().ok()) << g.status().ToString();
  EXPECT_EQ(ShapeOf(g, c), (Shape{2, 11, 4}));
  EXPECT_EQ(ProducerOf(g, c).attrs.axis, 1);
  std::vector<TensorId> parts = g.Split(c, -1, {1, 3});
  ASSERT_TRUE(g.status().ok()) << g.status().ToString();
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(ShapeOf(g, parts[0]), (Shape{2, 11, 1}));
  EXPECT_EQ(ShapeOf(g, parts[1]), (Shape{2, 11, 3}));
  const OpNode& split = ProducerOf(g, parts[1]);
  EXPECT_EQ(split.outputs, parts);
  EXPECT_EQ(split.attrs.axis, 2);
  EXPECT_EQ(split.attrs.sizes, (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(g.tensor(parts[1]).name, split.name + ":1");
}

TEST(ConcatSplitTest, Errors) {
  Graph g;
  g.Concat({g.Input("a", {2, 3}), g.Input("b", {3, 3})}, 1);
  ExpectError(g, "Concat 'concat_0': input 1 [3,3] does not match input 0 [2,3]: every dim but axis 1 must be equal");
  Graph g2;
  g2.Concat({g2.Input("a", {2, 3}), g2.Input("b", {2, 3, 1})}, 0);
  ExpectError(g2,
              "Concat 'concat_0': input 1 [2,3,1] does not match input 0 [2,3]: every dim but axis 0 must be equal");
  Graph g3;
  g3.Concat({g3.Input("a", {2, 3})}, 2);
  ExpectError(g3, "Concat 'concat_0': axis 2 is out of range for input 0 [2,3] (valid: [-2, 2))");
  Graph g4;
  g4.Concat({}, 0);
  ExpectError(g4, "Concat 'concat_0': needs at least one input");

  Graph s;
  std::vector<TensorId> out = s.Split(s.Input("x", {4, 6}), 1, {2, 3});
  ExpectError(s, "Split 'split_0': sizes [2,3] do not sum to 6, the extent of axis 1 of x [4,6]");
  EXPECT_EQ(out, (std::vector<TensorId>{kInvalidTensor, kInvalidTensor}));
  Graph s2;
  s2.Split(s2.Input("x", {4, 6}), 0, {4, 0});
  ExpectError(s2, "Split 'split_0': sizes [4,0]: entry 1 is 0, every output needs at least 1");
  Graph s3;
  s3.Split(s3.Input("x", {4, 6}), 0, {});
  ExpectError(s3, "Split 'split_0': sizes is empty: Split makes one output per entry");
}

// -- whole models -----------------------------------------------------------------------------

TEST(NameScopeTest, OpsInAScopeAreNamedAfterItAndScopesNest) {
  Graph g;
  TensorId x = g.Input("x", {2, 4});
  TensorId w = g.Param("block0.attn.qkv.weight", {4, 4}, InitSpec::Zeros());
  TensorId y, z, after;
  {
    NameScope block(g, "block0");
    {
      NameScope qkv(g, "attn.qkv");
      EXPECT_EQ(g.name_scope(), "block0.attn.qkv");
      y = g.MatMul(x, w);
      z = g.MatMul(y, w);  // a clash: the counter only then
    }
    EXPECT_EQ(g.name_scope(), "block0");
  }
  EXPECT_EQ(g.name_scope(), "");
  after = g.MatMul(z, w);
  ASSERT_TRUE(g.status().ok()) << g.status().ToString();
  EXPECT_EQ(g.ops()[g.producer(y)].name, "block0.attn.qkv.matmul");
  EXPECT_EQ(g.tensor(y).name, "block0.attn.qkv.matmul");
  EXPECT_TRUE(g.ops()[g.producer(z)].name.starts_with("block0.attn.qkv.matmul_"));
  EXPECT_TRUE(g.ops()[g.producer(after)].name.starts_with("matmul_"));  // unscoped as before
}

TEST(NameScopeTest, APopWithoutAPushIsAnError) {
  Graph g;
  g.PopNameScope();
  EXPECT_NE(g.status().message().find("PopNameScope without a PushNameScope"), std::string::npos);
}

TEST(ModelTest, MlpShapes) {
  Graph g = testing::MakeMlp(64);
  ASSERT_TRUE(g.status().ok()) << g.status().ToString();
  EXPECT_EQ(g.ops().size(), 9u);  // 3 × (MatMul, BiasAdd) + 2 Relu + loss
  ASSERT_EQ(g.outputs().size(), 1u);
  EXPECT_EQ(ShapeOf(g, g.outputs()[0]), (Shape{64, 10}));
  EXPECT_EQ(ShapeOf(g, g.loss()), Shape{});
}

TEST(ModelTest, LeNetShapes) {
  Graph g = testing::MakeLeNet(8);
  ASSERT_TRUE(g.status().ok()) << g.status().ToString();
  std::vector<Shape> conv, flat;
  for (const OpNode& op : g.ops()) {
    if (op.op == OpCode::MaxPool2D) conv.push_back(ShapeOf(g, op.outputs[0]));
    if (op.op == OpCode::Flatten) flat.push_back(ShapeOf(g, op.outputs[0]));
  }
  EXPECT_EQ(conv, (std::vector<Shape>{{8, 6, 14, 14}, {8, 16, 5, 5}}));
  EXPECT_EQ(flat, (std::vector<Shape>{{8, 400}}));
  EXPECT_EQ(ShapeOf(g, g.outputs()[0]), (Shape{8, 10}));
}

}  // namespace
}  // namespace sinkrt::host
