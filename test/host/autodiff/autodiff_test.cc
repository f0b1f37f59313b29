// Autodiff (the backward ops each forward op produces, accumulation, pruning,
// Grad tensors) and the optimizer pass (state tensors and update ops).
// Numerical gradient checks run through the whole pipeline elsewhere.
#include "sinkrt/host/autodiff.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "sinkrt/host/optimizer.h"
#include "support/test_models.h"

namespace sinkrt::host {
namespace {

std::vector<std::string> Codes(const Graph& g, size_t from) {
  std::vector<std::string> v;
  for (size_t i = from; i < g.ops().size(); ++i) v.push_back(OpCodeName(g.ops()[i].op));
  return v;
}

const OpNode& Writer(const Graph& g, TensorId t) {
  const int64_t p = g.producer(t);
  EXPECT_GE(p, 0) << g.tensor(t).name;
  return g.ops().at(static_cast<size_t>(p));
}

TensorId GradOf(const Graph& g, const std::string& param) { return g.FindTensor(param + "/grad"); }

// Every tensor an op writes is written by exactly that one op; every Grad
// tensor is named after its parameter, has its shape, and is written once.
void ExpectWellFormed(const Graph& g, const std::vector<ParamGrad>& grads) {
  ASSERT_TRUE(g.status().ok()) << g.status().ToString();
  std::map<TensorId, int> writes;
  for (const OpNode& op : g.ops())
    for (TensorId t : op.outputs) ++writes[t];
  for (auto [t, n] : writes) EXPECT_EQ(n, 1) << g.tensor(t).name;
  size_t grad_tensors = 0;
  for (const TensorInfo& t : g.tensors()) grad_tensors += t.kind == TensorKind::Grad;
  EXPECT_EQ(grad_tensors, grads.size());
  for (const ParamGrad& pg : grads) {
    const TensorInfo& p = g.tensor(pg.param);
    const TensorInfo& gr = g.tensor(pg.grad);
    EXPECT_EQ(p.kind, TensorKind::Param);
    EXPECT_EQ(gr.kind, TensorKind::Grad);
    EXPECT_EQ(gr.name, p.name + "/grad");
    EXPECT_EQ(gr.shape, p.shape);
    EXPECT_EQ(gr.dtype, DType::F32);
    EXPECT_EQ(writes[pg.grad], 1) << gr.name;
  }
}

std::vector<ParamGrad> Backward(Graph& g) {
  Result<std::vector<ParamGrad>> r = AppendBackward(g, g.loss());
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) return {};
  ExpectWellFormed(g, r.value());
  return r.value();
}

// -- the MLP, op by op ------------------------------------------------------------------

TEST(AutodiffMlpTest, ExpectedBackwardOps) {
  Graph g = testing::MakeMlp(4, {5, 3, 2});
  ASSERT_TRUE(g.status().ok()) << g.status().ToString();
  const std::vector<OpNode> forward = g.ops();
  const TensorId x = g.FindTensor("image"), labels = g.FindTensor("label");
  const TensorId w1 = g.FindTensor("fc1.weight"), b1 = g.FindTensor("fc1.bias");
  const TensorId w2 = g.FindTensor("fc2.weight"), b2 = g.FindTensor("fc2.bias");
  const TensorId h = forward[2].outputs[0];       // relu
  const TensorId logits = forward[4].outputs[0];  // second biasadd

  std::vector<ParamGrad> grads = Backward(g);
  ASSERT_EQ(grads.size(), 4u);
  EXPECT_EQ(grads[0].param, w1);
  EXPECT_EQ(grads[1].param, b1);
  EXPECT_EQ(grads[2].param, w2);
  EXPECT_EQ(grads[3].param, b2);
  for (const ParamGrad& pg : grads) EXPECT_EQ(pg.grad, GradOf(g, g.tensor(pg.param).name));

  // The forward ops are untouched.
  ASSERT_GE(g.ops().size(), forward.size());
  for (size_t i = 0; i < forward.size(); ++i) {
    EXPECT_EQ(g.ops()[i].name, forward[i].name);
    EXPECT_EQ(g.ops()[i].inputs, forward[i].inputs);
    EXPECT_EQ(g.ops()[i].outputs, forward[i].outputs);
  }

  const size_t n = forward.size();
  EXPECT_EQ(Codes(g, n), (std::vector<std::string>{"Fill", "SparseSoftmaxCrossEntropyGrad", "BiasAddGrad", "MatMul",
                                                   "MatMul", "ReluGrad", "BiasAddGrad", "MatMul"}));
  const auto& ops = g.ops();
  // d(loss)/d(loss) = 1, a scalar.
  EXPECT_EQ(ops[n].attrs.value, 1.0f);
  EXPECT_TRUE(ops[n].inputs.empty());
  const TensorId seed = ops[n].outputs[0];
  EXPECT_EQ(g.tensor(seed).shape, Shape{});
  // (softmax(logits) - onehot) · dloss / N
  EXPECT_EQ(ops[n + 1].inputs, (std::vector<TensorId>{logits, labels, seed}));
  const TensorId dlogits = ops[n + 1].outputs[0];
  EXPECT_EQ(g.tensor(dlogits).shape, (Shape{4, 2}));
  // fc2: bias, then weight = hᵀ·dy, then dh = dy·w2ᵀ.
  EXPECT_EQ(ops[n + 2].inputs, (std::vector<TensorId>{dlogits}));
  EXPECT_EQ(ops[n + 2].outputs[0], GradOf(g, "fc2.bias"));
  EXPECT_EQ(ops[n + 2].attrs.axis, 1);
  EXPECT_EQ(ops[n + 3].inputs, (std::vector<TensorId>{h, dlogits}));
  EXPECT_TRUE(ops[n + 3].attrs.transpose_a);
  EXPECT_FALSE(ops[n + 3].attrs.transpose_b);
  EXPECT_EQ(ops[n + 3].outputs[0], GradOf(g, "fc2.weight"));
  EXPECT_EQ(ops[n + 4].inputs, (std::vector<TensorId>{dlogits, w2}));
  EXPECT_FALSE(ops[n + 4].attrs.transpose_a);
  EXPECT_TRUE(ops[n + 4].attrs.transpose_b);
  const TensorId dh = ops[n + 4].outputs[0];
  EXPECT_EQ(g.tensor(dh).shape, (Shape{4, 3}));
  // ReLU reads its output.
  EXPECT_EQ(ops[n + 5].inputs, (std::vector<TensorId>{dh, h}));
  const TensorId dr = ops[n + 5].outputs[0];
  EXPECT_EQ(ops[n + 6].inputs, (std::vector<TensorId>{dr}));
  EXPECT_EQ(ops[n + 6].outputs[0], GradOf(g, "fc1.bias"));
  // fc1: only the weight; the image is an Input.
  EXPECT_EQ(ops[n + 7].inputs, (std::vector<TensorId>{x, dr}));
  EXPECT_TRUE(ops[n + 7].attrs.transpose_a);
  EXPECT_EQ(ops[n + 7].outputs[0], GradOf(g, "fc1.weight"));
  // Intermediate gradients are plain intermediates named after their op.
  EXPECT_EQ(g.tensor(dh).kind, TensorKind::Intermediate);
  EXPECT_EQ(ops[n + 4].name, forward[3].name + "/grad_a");
  EXPECT_EQ(ops[n + 3].name, forward[3].name + "/grad_b");
}

TEST(AutodiffMlpTest, NoGradientsForInputsOrLabels) {
  Graph g = testing::MakeMlp(8);
  const size_t n = g.ops().size();
  std::vector<ParamGrad> grads = Backward(g);
  EXPECT_EQ(grads.size(), 6u);
  EXPECT_EQ(GradOf(g, "label"), kInvalidTensor);
  EXPECT_EQ(GradOf(g, "image"), kInvalidTensor);
  for (size_t i = n; i < g.ops().size(); ++i) {
    for (TensorId t : g.ops()[i].outputs) {
      EXPECT_EQ(g.tensor(t).dtype, DType::F32);
      EXPECT_NE(g.tensor(t).shape, (Shape{8})) << "a label-shaped gradient: " << g.tensor(t).name;
    }
  }
  // The first layer's input gradient (dy·w1ᵀ into the image) is never computed.
  size_t matmuls = 0;
  for (size_t i = n; i < g.ops().size(); ++i) matmuls += g.ops()[i].op == OpCode::MatMul;
  EXPECT_EQ(matmuls, 5u);
}

TEST(AutodiffMlpTest, LeNet) {
  Graph g = testing::MakeLeNet(2);
  const size_t n = g.ops().size();
  std::vector<ParamGrad> grads = Backward(g);
  EXPECT_EQ(grads.size(), 10u);
  std::map<std::string, int> count;
  for (const std::string& c : Codes(g, n)) ++count[c];
  EXPECT_EQ(count["Conv2DBackpropFilter"], 2);
  EXPECT_EQ(count["Conv2DBackpropInput"], 1);  // conv1 reads the image
  EXPECT_EQ(count["MaxPool2DGrad"], 2);
  EXPECT_EQ(count["Reshape"], 1);  // Flatten's gradient
  EXPECT_EQ(count["BiasAddGrad"], 5);
  EXPECT_EQ(count["ReluGrad"], 4);
  EXPECT_EQ(count["AddN"], 0);
  EXPECT_EQ(count["Copy"], 0);
}

// -- accumulation and aliasing ----------------------------------------------------------------

TEST(AutodiffAccumulateTest, ParamUsedTwiceIsSummedByAnAddNThatWritesItsGrad) {
  Graph g;
  TensorId x = g.Input("x", {2, 3});
  TensorId w = g.Param("w", {3, 3}, InitSpec::HeUniform(1));
  TensorId h = g.MatMul(x, w);
  g.SetLoss(g.ReduceSum(g.MatMul(h, w)));
  const size_t n = g.ops().size();
  std::vector<ParamGrad> grads = Backward(g);
  ASSERT_EQ(grads.size(), 1u);
  EXPECT_EQ(Codes(g, n), (std::vector<std::string>{"Fill", "BroadcastTo", "MatMul", "MatMul", "MatMul", "AddN"}));
  const OpNode& addn = Writer(g, grads[0].grad);
  EXPECT_EQ(addn.op, OpCode::AddN);
  EXPECT_EQ(addn.name, "w/grad");
  ASSERT_EQ(addn.inputs.size(), 2u);
  // hᵀ·dy from the second MatMul, then xᵀ·dh from the first.
  EXPECT_EQ(Writer(g, addn.inputs[0]).inputs[0], h);
  EXPECT_EQ(Writer(g, addn.inputs[1]).inputs[0], x);
  for (TensorId t : addn.inputs) EXPECT_EQ(g.tensor(t).kind, TensorKind::Intermediate);
}

TEST(AutodiffAccumulateTest, IntermediateUsedTwiceIsSummedBeforeItsRule) {
  Graph g;
  TensorId x = g.Input("x", {2, 3});
  TensorId w = g.Param("w", {3, 4}, InitSpec::HeUniform(1));
  TensorId h = g.Relu(g.MatMul(x, w));
  TensorId a = g.ReduceSum(g.Tanh(h));
  TensorId b = g.ReduceSum(g.Sigmoid(h));
  g.SetLoss(g.Add(a, b));
  const size_t n = g.ops().size();
  std::vector<ParamGrad> grads = Backward(g);
  ASSERT_EQ(grads.size(), 1u);
  EXPECT_EQ(Codes(g, n), (std::vector<std::string>{"Fill", "BroadcastTo", "SigmoidGrad", "BroadcastTo", "TanhGrad",
                                                   "AddN", "ReluGrad", "MatMul"}));
  const OpNode& addn = g.ops()[n + 5];
  EXPECT_EQ(addn.name, g.tensor(h).name + "/grad_sum");
  EXPECT_EQ(addn.inputs, (std::vector<TensorId>{g.ops()[n + 2].outputs[0], g.ops()[n + 4].outputs[0]}));
  EXPECT_EQ(g.ops()[n + 6].inputs, (std::vector<TensorId>{addn.outputs[0], h}));
}

TEST(AutodiffAccumulateTest, SameTensorTwiceInOneOp) {
  Graph g;
  TensorId p = g.Param("p", {3}, InitSpec::Uniform(-1, 1, 2));
  g.SetLoss(g.ReduceSum(g.Mul(p, p)));
  const size_t n = g.ops().size();
  std::vector<ParamGrad> grads = Backward(g);
  EXPECT_EQ(Codes(g, n), (std::vector<std::string>{"Fill", "BroadcastTo", "Mul", "Mul", "AddN"}));
  EXPECT_EQ(Writer(g, grads[0].grad).op, OpCode::AddN);
}

TEST(AutodiffAliasTest, SharedGradientIsCopiedIntoEachGradTensor) {
  Graph g;
  TensorId p = g.Param("p", {2, 3}, InitSpec::Zeros());
  TensorId q = g.Param("q", {2, 3}, InitSpec::Zeros());
  g.SetLoss(g.ReduceSum(g.Add(p, q)));
  const size_t n = g.ops().size();
  std::vector<ParamGrad> grads = Backward(g);
  ASSERT_EQ(grads.size(), 2u);
  EXPECT_EQ(Codes(g, n), (std::vector<std::string>{"Fill", "BroadcastTo", "Copy", "Copy"}));
  const TensorId dy = g.ops()[n + 1].outputs[0];
  EXPECT_EQ(Writer(g, grads[0].grad).op, OpCode::Copy);
  EXPECT_EQ(Writer(g, grads[0].grad).inputs, (std::vector<TensorId>{dy}));
  EXPECT_EQ(Writer(g, grads[0].grad).name, "p/grad");
  EXPECT_EQ(Writer(g, grads[1].grad).inputs, (std::vector<TensorId>{dy}));
}

TEST(AutodiffAliasTest, BiasAddInputGradientSharedWithBiasAddGrad) {
  Graph g;
  TensorId x = g.Param("x", {2, 3}, InitSpec::Zeros());
  TensorId b = g.Param("b", {3}, InitSpec::Zeros());
  g.SetLoss(g.ReduceSum(g.BiasAdd(x, b)));
  const size_t n = g.ops().size();
  std::vector<ParamGrad> grads = Backward(g);
  // The Copy goes right after the value it copies, before the bias gradient.
  EXPECT_EQ(Codes(g, n), (std::vector<std::string>{"Fill", "BroadcastTo", "Copy", "BiasAddGrad"}));
  EXPECT_EQ(Writer(g, GradOf(g, "x")).op, OpCode::Copy);
  EXPECT_EQ(Writer(g, GradOf(g, "b")).op, OpCode::BiasAddGrad);
  (void)x;
  (void)b;
  (void)grads;
}

TEST(AutodiffAliasTest, UnsharedAliasBecomesTheGradTensor) {
  Graph g;
  TensorId p = g.Param("p", {2, 3}, InitSpec::Zeros());
  g.SetLoss(g.ReduceSum(g.AddOp(OpCode::Copy, {p}, OpAttrs{}, {{{2, 3}, DType::F32}})[0]));
  const size_t n = g.ops().size();
  std::vector<ParamGrad> grads = Backward(g);
  EXPECT_EQ(Codes(g, n), (std::vector<std::string>{"Fill", "BroadcastTo"}));
  EXPECT_EQ(Writer(g, grads[0].grad).op, OpCode::BroadcastTo);
}

TEST(AutodiffAliasTest, LossIsAParameter) {
  Graph g;
  TensorId p = g.Param("p", {}, InitSpec::Constant(3));
  g.SetLoss(p);
  std::vector<ParamGrad> grads = Backward(g);
  ASSERT_EQ(grads.size(), 1u);
  EXPECT_EQ(Codes(g, 0), (std::vector<std::string>{"Fill"}));
  EXPECT_EQ(g.ops()[0].outputs[0], grads[0].grad);
}

// -- pruning --------------------------------------------------------------------------------

TEST(AutodiffPruneTest, ConstAndInputBranchesGetNoGradients) {
  Graph g;
  TensorId x = g.Input("x", {2, 3});
  TensorId w = g.Param("w", {3, 4}, InitSpec::Zeros());
  TensorId c = g.Const("c", {3, 4}, InitSpec::Constant(1));
  TensorId unused = g.Param("unused", {4}, InitSpec::Zeros());
  TensorId metric_w = g.Param("metric_w", {4, 5}, InitSpec::Zeros());
  TensorId y = g.Add(g.MatMul(x, w), g.MatMul(x, c));
  g.ArgMaxAccuracy(g.MatMul(y, metric_w), g.Input("labels", {2}, DType::I32));
  g.SetLoss(g.ReduceSum(y));
  const size_t n = g.ops().size();
  std::vector<ParamGrad> grads = Backward(g);
  ASSERT_EQ(grads.size(), 1u);
  EXPECT_EQ(grads[0].param, w);
  EXPECT_EQ(Codes(g, n), (std::vector<std::string>{"Fill", "BroadcastTo", "MatMul"}));
  EXPECT_EQ(GradOf(g, "c"), kInvalidTensor);
  EXPECT_EQ(GradOf(g, "unused"), kInvalidTensor);
  EXPECT_EQ(GradOf(g, "metric_w"), kInvalidTensor);
  (void)unused;
  (void)metric_w;
}

TEST(AutodiffPruneTest, LossWithoutParametersHasNoBackward) {
  Graph g;
  TensorId x = g.Input("x", {2, 3});
  g.Param("w", {3}, InitSpec::Zeros());
  g.SetLoss(g.ReduceMean(x));
  const size_t n = g.ops().size();
  std::vector<ParamGrad> grads = Backward(g);
  EXPECT_TRUE(grads.empty());
  EXPECT_EQ(g.ops().size(), n);
}

// -- one rule per op ---------------------------------------------------------------------------

// loss = ReduceSum(f(params)); returns the ops after the forward graph, which
// always start with the seed and the ReduceSum gradient.
struct RuleCase {
  Graph g;
  size_t n = 0;
  std::vector<ParamGrad> grads;
  TensorId y = kInvalidTensor;

  void Finish(TensorId out) {
    y = out;
    g.SetLoss(g.ReduceSum(out));
    ASSERT_TRUE(g.status().ok()) << g.status().ToString();
    n = g.ops().size();
    grads = Backward(g);
  }
  std::vector<std::string> After() const {  // past Fill and the ReduceSum gradient
    std::vector<std::string> c = Codes(g, n);
    EXPECT_GE(c.size(), 2u);
    EXPECT_EQ(c[0], "Fill");
    EXPECT_EQ(c[1], "BroadcastTo");
    return std::vector<std::string>(c.begin() + 2, c.end());
  }
  TensorId dy() const { return g.ops()[n + 1].outputs[0]; }
  const OpNode& op(size_t i) const { return g.ops()[n + 2 + i]; }
  const OpNode& grad_writer(const std::string& param) const { return Writer(g, GradOf(g, param)); }
};

TEST(GradRuleTest, ActivationsReadOutputOrInput) {
  const std::pair<OpCode, const char*> cases[] = {{OpCode::Relu, "ReluGrad"},
                                                  {OpCode::Gelu, "GeluGrad"},
                                                  {OpCode::Tanh, "TanhGrad"},
                                                  {OpCode::Sigmoid, "SigmoidGrad"}};
  for (auto [code, grad] : cases) {
    RuleCase c;
    TensorId p = c.g.Param("p", {2, 3}, InitSpec::Zeros());
    TensorId y = code == OpCode::Relu   ? c.g.Relu(p)
                 : code == OpCode::Gelu ? c.g.Gelu(p)
                 : code == OpCode::Tanh ? c.g.Tanh(p)
                                        : c.g.Sigmoid(p);
    c.Finish(y);
    EXPECT_EQ(c.After(), (std::vector<std::string>{grad}));
    // GeLU's derivative needs the input; the others are cheaper from the output.
    const TensorId second = code == OpCode::Gelu ? p : y;
    EXPECT_EQ(c.op(0).inputs, (std::vector<TensorId>{c.dy(), second})) << grad;
    EXPECT_EQ(c.op(0).outputs[0], c.grads[0].grad);
  }
}

TEST(GradRuleTest, SoftmaxAndLogSoftmaxKeepTheAxis) {
  RuleCase c;
  TensorId p = c.g.Param("p", {2, 3}, InitSpec::Zeros());
  TensorId s = c.g.Softmax(p, 0);
  c.Finish(c.g.LogSoftmax(s));
  EXPECT_EQ(c.After(), (std::vector<std::string>{"LogSoftmaxGrad", "SoftmaxGrad"}));
  EXPECT_EQ(c.op(0).attrs.axis, 1);
  EXPECT_EQ(c.op(0).inputs, (std::vector<TensorId>{c.dy(), c.y}));
  EXPECT_EQ(c.op(1).attrs.axis, 0);
  EXPECT_EQ(c.op(1).inputs, (std::vector<TensorId>{c.op(0).outputs[0], s}));
  (void)p;
}

TEST(GradRuleTest, NegNegates) {
  RuleCase c;
  TensorId p = c.g.Param("p", {3}, InitSpec::Zeros());
  c.Finish(c.g.AddOp(OpCode::Neg, {p}, OpAttrs{}, {{{3}, DType::F32}})[0]);
  EXPECT_EQ(c.After(), (std::vector<std::string>{"Neg"}));
  EXPECT_EQ(c.op(0).inputs, (std::vector<TensorId>{c.dy()}));
}

struct MatMulCase {
  bool ta, tb;
  Shape a, b;
  // Expected gradient ops: inputs (by name "a", "b", "dy") and transpose flags.
  std::vector<std::string> db_in;
  bool db_ta, db_tb;
  std::vector<std::string> da_in;
  bool da_ta, da_tb;
};

TEST(GradRuleTest, MatMulAllTransposeCombinations) {
  // y = op(a)·op(b) with M=2, K=3, N=4.
  const MatMulCase cases[] = {
      {false, false, {2, 3}, {3, 4}, {"a", "dy"}, true, false, {"dy", "b"}, false, true},
      {false, true, {2, 3}, {4, 3}, {"dy", "a"}, true, false, {"dy", "b"}, false, false},
      {true, false, {3, 2}, {3, 4}, {"a", "dy"}, false, false, {"b", "dy"}, false, true},
      {true, true, {3, 2}, {4, 3}, {"dy", "a"}, true, true, {"b", "dy"}, true, true},
  };
  for (const MatMulCase& mc : cases) {
    SCOPED_TRACE(std::string("transpose_a=") + (mc.ta ? "1" : "0") + " transpose_b=" + (mc.tb ? "1" : "0"));
    RuleCase c;
    TensorId a = c.g.Param("a", mc.a, InitSpec::Zeros());
    TensorId b = c.g.Param("b", mc.b, InitSpec::Zeros());
    c.Finish(c.g.MatMul(a, b, mc.ta, mc.tb));
    EXPECT_EQ(c.g.tensor(c.y).shape, (Shape{2, 4}));
    // The weight-like second operand first.
    EXPECT_EQ(c.After(), (std::vector<std::string>{"MatMul", "MatMul"}));
    std::map<std::string, TensorId> id{{"a", a}, {"b", b}, {"dy", c.dy()}};
    const OpNode& db = c.grad_writer("b");
    const OpNode& da = c.grad_writer("a");
    EXPECT_EQ(&db, &c.op(0));
    EXPECT_EQ(db.inputs, (std::vector<TensorId>{id[mc.db_in[0]], id[mc.db_in[1]]}));
    EXPECT_EQ(db.attrs.transpose_a, mc.db_ta);
    EXPECT_EQ(db.attrs.transpose_b, mc.db_tb);
    EXPECT_EQ(da.inputs, (std::vector<TensorId>{id[mc.da_in[0]], id[mc.da_in[1]]}));
    EXPECT_EQ(da.attrs.transpose_a, mc.da_ta);
    EXPECT_EQ(da.attrs.transpose_b, mc.da_tb);
  }
}

TEST(GradRuleTest, BiasAddOnFeatureMaps) {
  RuleCase c;
  TensorId x = c.g.Input("x", {2, 3, 4, 4});
  TensorId b = c.g.Param("b", {3}, InitSpec::Zeros());
  c.Finish(c.g.BiasAdd(x, b));
  EXPECT_EQ(c.After(), (std::vector<std::string>{"BiasAddGrad"}));
  EXPECT_EQ(c.op(0).attrs.axis, 1);
  EXPECT_EQ(c.op(0).inputs, (std::vector<TensorId>{c.dy()}));
  EXPECT_EQ(c.op(0).outputs[0], GradOf(c.g, "b"));
}

TEST(GradRuleTest, AddSumsBroadcastAxesBack) {
  RuleCase c;
  TensorId a = c.g.Param("a", {2, 1}, InitSpec::Zeros());
  TensorId b = c.g.Param("b", {1, 3}, InitSpec::Zeros());
  c.Finish(c.g.Add(a, b));
  EXPECT_EQ(c.After(), (std::vector<std::string>{"SumToShape", "SumToShape"}));
  EXPECT_EQ(c.op(0).inputs, (std::vector<TensorId>{c.dy()}));
  EXPECT_EQ(c.op(0).outputs[0], GradOf(c.g, "a"));
  EXPECT_EQ(c.op(1).outputs[0], GradOf(c.g, "b"));
  EXPECT_EQ(c.g.tensor(GradOf(c.g, "b")).shape, (Shape{1, 3}));
}

TEST(GradRuleTest, SubNegatesTheSecondOperand) {
  RuleCase c;
  TensorId a = c.g.Param("a", {2, 3}, InitSpec::Zeros());
  TensorId b = c.g.Param("b", {3}, InitSpec::Zeros());
  c.Finish(c.g.Sub(a, b));
  // a's gradient is dy itself, shared with b's SumToShape: copied.
  EXPECT_EQ(c.After(), (std::vector<std::string>{"Copy", "SumToShape", "Neg"}));
  EXPECT_EQ(c.grad_writer("a").inputs, (std::vector<TensorId>{c.dy()}));
  EXPECT_EQ(c.op(1).inputs, (std::vector<TensorId>{c.dy()}));
  EXPECT_EQ(c.g.tensor(c.op(1).outputs[0]).shape, (Shape{3}));
  EXPECT_EQ(c.op(2).inputs, (std::vector<TensorId>{c.op(1).outputs[0]}));
  EXPECT_EQ(c.op(2).outputs[0], GradOf(c.g, "b"));
  (void)a;
  (void)b;
}

TEST(GradRuleTest, MulUsesTheOtherOperand) {
  RuleCase c;
  TensorId a = c.g.Param("a", {2, 3}, InitSpec::Zeros());
  TensorId b = c.g.Param("b", {3}, InitSpec::Zeros());
  c.Finish(c.g.Mul(a, b));
  EXPECT_EQ(c.After(), (std::vector<std::string>{"Mul", "Mul", "SumToShape"}));
  EXPECT_EQ(c.op(0).inputs, (std::vector<TensorId>{c.dy(), b}));
  EXPECT_EQ(c.op(0).outputs[0], GradOf(c.g, "a"));
  EXPECT_EQ(c.op(1).inputs, (std::vector<TensorId>{c.dy(), a}));
  EXPECT_EQ(c.g.tensor(c.op(1).outputs[0]).shape, (Shape{2, 3}));
  EXPECT_EQ(c.op(2).inputs, (std::vector<TensorId>{c.op(1).outputs[0]}));
  EXPECT_EQ(c.op(2).outputs[0], GradOf(c.g, "b"));
}

TEST(GradRuleTest, SparseSoftmaxCrossEntropy) {
  Graph g;
  TensorId logits = g.Param("logits", {4, 3}, InitSpec::Zeros());
  TensorId labels = g.Input("labels", {4}, DType::I32);
  g.SetLoss(g.SparseSoftmaxCrossEntropy(logits, labels));
  const size_t n = g.ops().size();
  std::vector<ParamGrad> grads = Backward(g);
  EXPECT_EQ(Codes(g, n), (std::vector<std::string>{"Fill", "SparseSoftmaxCrossEntropyGrad"}));
  EXPECT_EQ(g.ops()[n + 1].inputs, (std::vector<TensorId>{logits, labels, g.ops()[n].outputs[0]}));
  EXPECT_EQ(g.ops()[n + 1].outputs[0], grads[0].grad);
}

TEST(GradRuleTest, ReduceSumOverAMiddleAxisReshapesFirst) {
  RuleCase c;
  TensorId p = c.g.Param("p", {2, 3, 4}, InitSpec::Zeros());
  c.Finish(c.g.ReduceSum(p, {1}));
  EXPECT_EQ(c.After(), (std::vector<std::string>{"Reshape", "BroadcastTo"}));
  EXPECT_EQ(c.g.tensor(c.op(0).outputs[0]).shape, (Shape{2, 1, 4}));
  EXPECT_EQ(c.op(1).attrs.scale, 1.0f);
  EXPECT_EQ(c.op(1).outputs[0], c.grads[0].grad);
}

TEST(GradRuleTest, ReduceMeanScalesByTheCount) {
  {
    RuleCase c;  // leading axis: NumPy broadcasting needs no reshape
    TensorId p = c.g.Param("p", {2, 3}, InitSpec::Zeros());
    c.Finish(c.g.ReduceMean(p, {0}));
    EXPECT_EQ(c.After(), (std::vector<std::string>{"BroadcastTo"}));
    EXPECT_EQ(c.op(0).attrs.scale, 0.5f);
    EXPECT_EQ(c.op(0).inputs, (std::vector<TensorId>{c.dy()}));
  }
  {
    RuleCase c;  // keep_dims: already the right rank
    TensorId p = c.g.Param("p", {2, 3, 4}, InitSpec::Zeros());
    c.Finish(c.g.ReduceMean(p, {1}, true));
    EXPECT_EQ(c.After(), (std::vector<std::string>{"BroadcastTo"}));
    EXPECT_FLOAT_EQ(c.op(0).attrs.scale, 1.0f / 3.0f);
    EXPECT_EQ(c.g.tensor(c.op(0).outputs[0]).shape, (Shape{2, 3, 4}));
  }
  {
    Graph g;  // the loss itself is a mean over everything
    TensorId p = g.Param("p", {2, 3}, InitSpec::Zeros());
    g.SetLoss(g.ReduceMean(p));
    const size_t n = g.ops().size();
    std::vector<ParamGrad> grads = Backward(g);
    EXPECT_EQ(Codes(g, n), (std::vector<std::string>{"Fill", "BroadcastTo"}));
    EXPECT_FLOAT_EQ(g.ops()[n + 1].attrs.scale, 1.0f / 6.0f);
    EXPECT_EQ(g.ops()[n + 1].outputs[0], grads[0].grad);
  }
}

TEST(GradRuleTest, ReshapeAndFlattenReshapeBack) {
  RuleCase c;
  TensorId p = c.g.Param("p", {2, 3, 4}, InitSpec::Zeros());
  c.Finish(c.g.Reshape(c.g.Flatten(p), {4, 6}));
  EXPECT_EQ(c.After(), (std::vector<std::string>{"Reshape", "Reshape"}));
  EXPECT_EQ(c.g.tensor(c.op(0).outputs[0]).shape, (Shape{2, 12}));
  EXPECT_EQ(c.g.tensor(c.op(1).outputs[0]).shape, (Shape{2, 3, 4}));
  EXPECT_EQ(c.op(1).outputs[0], c.grads[0].grad);
}

TEST(GradRuleTest, Conv2DFilterThenInputWithTheSameOptions) {
  RuleCase c;
  TensorId x = c.g.Param("x", {2, 3, 8, 8}, InitSpec::Zeros());
  TensorId w = c.g.Param("w", {4, 3, 3, 3}, InitSpec::Zeros());
  OpAttrs a;
  a.stride_h = 2;
  a.pad_top = a.pad_left = 1;
  a.dilation_w = 2;
  c.Finish(c.g.Conv2D(x, w, a));
  EXPECT_EQ(c.After(), (std::vector<std::string>{"Conv2DBackpropFilter", "Conv2DBackpropInput"}));
  EXPECT_EQ(c.op(0).inputs, (std::vector<TensorId>{c.dy(), x}));
  EXPECT_EQ(c.op(0).outputs[0], GradOf(c.g, "w"));
  EXPECT_EQ(c.op(1).inputs, (std::vector<TensorId>{c.dy(), w}));
  EXPECT_EQ(c.op(1).outputs[0], GradOf(c.g, "x"));
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(c.op(i).attrs.stride_h, 2);
    EXPECT_EQ(c.op(i).attrs.stride_w, 1);
    EXPECT_EQ(c.op(i).attrs.pad_top, 1);
    EXPECT_EQ(c.op(i).attrs.pad_bottom, 0);
    EXPECT_EQ(c.op(i).attrs.pad_left, 1);
    EXPECT_EQ(c.op(i).attrs.dilation_w, 2);
  }
}

TEST(GradRuleTest, Conv2DOnAnInputComputesOnlyTheFilter) {
  RuleCase c;
  TensorId x = c.g.Input("x", {2, 3, 8, 8});
  TensorId w = c.g.Param("w", {4, 3, 3, 3}, InitSpec::Zeros());
  c.Finish(c.g.Conv2D(x, w, 1, 1));
  EXPECT_EQ(c.After(), (std::vector<std::string>{"Conv2DBackpropFilter"}));
}

TEST(GradRuleTest, PoolsUseTheirWorkspaceOrNothing) {
  {
    RuleCase c;
    TensorId p = c.g.Param("p", {1, 2, 4, 4}, InitSpec::Zeros());
    c.Finish(c.g.MaxPool2D(p, 2, 2));
    const OpNode& pool = c.g.ops()[0];
    EXPECT_EQ(c.After(), (std::vector<std::string>{"MaxPool2DGrad"}));
    EXPECT_EQ(c.op(0).inputs, (std::vector<TensorId>{c.dy(), p, pool.outputs[1]}));
    EXPECT_EQ(c.op(0).attrs.kernel_h, 2);
    EXPECT_EQ(c.op(0).attrs.stride_w, 2);
    EXPECT_EQ(c.op(0).outputs[0], c.grads[0].grad);
    EXPECT_EQ(GradOf(c.g, pool.name + ":1"), kInvalidTensor);
  }
  {
    RuleCase c;
    TensorId p = c.g.Param("p", {1, 2, 5, 5}, InitSpec::Zeros());
    c.Finish(c.g.AvgPool2D(p, 3, 2, 1));
    EXPECT_EQ(c.After(), (std::vector<std::string>{"AvgPool2DGrad"}));
    EXPECT_EQ(c.op(0).inputs, (std::vector<TensorId>{c.dy()}));
    EXPECT_EQ(c.op(0).attrs.kernel_w, 3);
    EXPECT_EQ(c.op(0).attrs.pad_bottom, 1);
    EXPECT_EQ(c.g.tensor(c.op(0).outputs[0]).shape, (Shape{1, 2, 5, 5}));
    (void)p;
  }
}

TEST(GradRuleTest, AddNBroadcastToAndSumToShape) {
  {
    RuleCase c;
    TensorId p = c.g.Param("p", {3}, InitSpec::Zeros());
    TensorId q = c.g.Param("q", {3}, InitSpec::Zeros());
    c.Finish(c.g.AddOp(OpCode::AddN, {p, q}, OpAttrs{}, {{{3}, DType::F32}})[0]);
    EXPECT_EQ(c.After(), (std::vector<std::string>{"Copy", "Copy"}));
  }
  {
    RuleCase c;
    TensorId p = c.g.Param("p", {3}, InitSpec::Zeros());
    OpAttrs twice;
    twice.scale = 2.0f;
    c.Finish(c.g.AddOp(OpCode::BroadcastTo, {p}, twice, {{{2, 3}, DType::F32}})[0]);
    EXPECT_EQ(c.After(), (std::vector<std::string>{"SumToShape", "BroadcastTo"}));
    EXPECT_EQ(c.op(1).attrs.scale, 2.0f);
    EXPECT_EQ(c.g.tensor(c.op(0).outputs[0]).shape, (Shape{3}));
    EXPECT_EQ(c.op(1).outputs[0], c.grads[0].grad);
  }
  {
    RuleCase c;
    TensorId p = c.g.Param("p", {2, 3}, InitSpec::Zeros());
    c.Finish(c.g.AddOp(OpCode::SumToShape, {p}, OpAttrs{}, {{{3}, DType::F32}})[0]);
    EXPECT_EQ(c.After(), (std::vector<std::string>{"BroadcastTo"}));
    EXPECT_EQ(c.op(0).attrs.scale, 1.0f);
    EXPECT_EQ(c.g.tensor(c.op(0).outputs[0]).shape, (Shape{2, 3}));
  }
}

// -- errors ------------------------------------------------------------------------------------

TEST(AutodiffErrorTest, LossMustBeSetAndScalar) {
  Graph g = testing::MakeMlp(2, {3, 2});
  Result<std::vector<ParamGrad>> none = AppendBackward(g, kInvalidTensor);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(none.status().message(), "AppendBackward: the graph has no loss; call SetLoss first");

  const TensorId logits = g.outputs()[0];
  Result<std::vector<ParamGrad>> vec = AppendBackward(g, logits);
  ASSERT_FALSE(vec.ok());
  EXPECT_EQ(vec.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(vec.status().message(),
            "AppendBackward: loss '" + g.tensor(logits).name + "' must be an f32 scalar (shape []), got f32 [2,2]");

  Result<std::vector<ParamGrad>> foreign = AppendBackward(g, 1000);
  ASSERT_FALSE(foreign.ok());
  EXPECT_EQ(foreign.status().message(), "AppendBackward: loss is not a tensor of graph 'mlp' (id 1000)");
  EXPECT_EQ(g.ops().size(), 3u);  // nothing appended
}

TEST(AutodiffErrorTest, FailedGraphAndSecondPass) {
  Graph bad;
  bad.Input("x", {2, 0});
  Result<std::vector<ParamGrad>> r = AppendBackward(bad, 0);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), bad.status().message());

  Graph g = testing::MakeMlp(2, {3, 2});
  ASSERT_TRUE(AppendBackward(g, g.loss()).ok());
  Result<std::vector<ParamGrad>> again = AppendBackward(g, g.loss());
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(again.status().message(),
            "AppendBackward: graph 'mlp' already has a backward pass "
            "(Grad tensor 'fc1.bias/grad')");
}

TEST(AutodiffErrorTest, OpWithoutARule) {
  Graph g;
  TensorId p = g.Param("p", {3}, InitSpec::Zeros());
  TensorId r = g.AddOp(OpCode::ReluGrad, {p, p}, OpAttrs{}, {{{3}, DType::F32}})[0];
  TensorId loss = g.ReduceSum(r);
  g.SetLoss(loss);
  Result<std::vector<ParamGrad>> res = AppendBackward(g, loss);
  ASSERT_FALSE(res.ok());
  EXPECT_EQ(res.status().code(), StatusCode::kUnimplemented);
  EXPECT_EQ(res.status().message(),
            "AppendBackward: no gradient rule for op 'relugrad_0' (ReluGrad), which the loss "
            "'reducesum_1' depends on");
}

// -- optimizer pass ------------------------------------------------------------------------------

struct Trained {
  Graph g = testing::MakeMlp(4, {5, 3, 2});
  std::vector<ParamGrad> grads;
  size_t n = 0;
  Trained() {
    grads = Backward(g);
    n = g.ops().size();
  }
};

TEST(OptimizerTest, SpecFactoriesAndParse) {
  OptimizerSpec s = OptimizerSpec::Sgd(0.5f);
  EXPECT_EQ(s.kind, OptimizerKind::SGD);
  EXPECT_EQ(s.learning_rate, 0.5f);
  OptimizerSpec m = OptimizerSpec::Momentum(0.1f, 0.8f, true);
  EXPECT_EQ(m.kind, OptimizerKind::Momentum);
  EXPECT_EQ(m.momentum, 0.8f);
  EXPECT_TRUE(m.nesterov);
  OptimizerSpec a = OptimizerSpec::Adam(1e-3f, 0.8f, 0.99f, 1e-6f);
  EXPECT_EQ(a.kind, OptimizerKind::Adam);
  EXPECT_EQ(a.beta1, 0.8f);
  EXPECT_EQ(a.beta2, 0.99f);
  EXPECT_EQ(a.epsilon, 1e-6f);

  EXPECT_EQ(ParseOptimizerKind("sgd").value(), OptimizerKind::SGD);
  EXPECT_EQ(ParseOptimizerKind("momentum").value(), OptimizerKind::Momentum);
  EXPECT_EQ(ParseOptimizerKind("adam").value(), OptimizerKind::Adam);
  EXPECT_EQ(ParseOptimizerKind("Adam").value(), OptimizerKind::Adam);
  Result<OptimizerKind> bad = ParseOptimizerKind("adagrad");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(),
            "unknown optimizer 'adagrad'; valid names are 'sgd', 'momentum', 'adam', 'adamw' and 'lamb'");
}

TEST(OptimizerTest, Sgd) {
  Trained t;
  OptimizerSpec spec = OptimizerSpec::Sgd(0.1f);
  spec.weight_decay = 1e-4f;
  const size_t tensors = t.g.tensors().size();
  ASSERT_TRUE(AppendOptimizer(t.g, t.grads, spec).ok()) << t.g.status().ToString();
  EXPECT_EQ(t.g.tensors().size(), tensors);  // no state
  ASSERT_EQ(t.g.ops().size(), t.n + 4);
  for (size_t i = 0; i < 4; ++i) {
    const OpNode& op = t.g.ops()[t.n + i];
    EXPECT_EQ(op.op, OpCode::SgdUpdate);
    EXPECT_EQ(op.inputs, (std::vector<TensorId>{t.grads[i].param, t.grads[i].grad}));
    EXPECT_TRUE(op.outputs.empty());
    EXPECT_EQ(op.attrs.learning_rate, 0.1f);
    EXPECT_EQ(op.attrs.weight_decay, 1e-4f);
  }
}

TEST(OptimizerTest, MomentumAddsOneAccumulatorPerParam) {
  Trained t;
  ASSERT_TRUE(AppendOptimizer(t.g, t.grads, OptimizerSpec::Momentum(0.05f, 0.9f, true)).ok());
  ASSERT_EQ(t.g.ops().size(), t.n + 4);
  for (size_t i = 0; i < 4; ++i) {
    const TensorInfo& p = t.g.tensor(t.grads[i].param);
    const TensorId accum = t.g.FindTensor(p.name + "/momentum");
    ASSERT_NE(accum, kInvalidTensor) << p.name;
    EXPECT_EQ(t.g.tensor(accum).kind, TensorKind::OptState);
    EXPECT_EQ(t.g.tensor(accum).init.kind, InitKind::Zeros);
    EXPECT_EQ(t.g.tensor(accum).shape, p.shape);
    const OpNode& op = t.g.ops()[t.n + i];
    EXPECT_EQ(op.op, OpCode::MomentumUpdate);
    EXPECT_EQ(op.inputs, (std::vector<TensorId>{t.grads[i].param, t.grads[i].grad, accum}));
    EXPECT_TRUE(op.outputs.empty());
    EXPECT_EQ(op.attrs.learning_rate, 0.05f);
    EXPECT_EQ(op.attrs.momentum, 0.9f);
    EXPECT_TRUE(op.attrs.nesterov);
  }
}

TEST(OptimizerTest, AdamAdvancesPowersBeforeTheUpdates) {
  Trained t;
  ASSERT_TRUE(AppendOptimizer(t.g, t.grads, OptimizerSpec::Adam(1e-3f, 0.8f, 0.99f, 1e-7f)).ok());
  const TensorId powers = t.g.FindTensor("adam/powers");
  ASSERT_NE(powers, kInvalidTensor);
  EXPECT_EQ(t.g.tensor(powers).kind, TensorKind::OptState);
  EXPECT_EQ(t.g.tensor(powers).shape, (Shape{2}));
  EXPECT_EQ(t.g.tensor(powers).init.kind, InitKind::Constant);
  EXPECT_EQ(t.g.tensor(powers).init.value, 1.0f);
  ASSERT_EQ(t.g.ops().size(), t.n + 5);
  const OpNode& adv = t.g.ops()[t.n];
  EXPECT_EQ(adv.op, OpCode::AdamPowers);
  EXPECT_EQ(adv.inputs, (std::vector<TensorId>{powers}));
  EXPECT_TRUE(adv.outputs.empty());
  EXPECT_EQ(adv.attrs.beta1, 0.8f);
  EXPECT_EQ(adv.attrs.beta2, 0.99f);
  for (size_t i = 0; i < 4; ++i) {
    const TensorInfo& p = t.g.tensor(t.grads[i].param);
    const TensorId m = t.g.FindTensor(p.name + "/adam_m");
    const TensorId v = t.g.FindTensor(p.name + "/adam_v");
    ASSERT_NE(m, kInvalidTensor);
    ASSERT_NE(v, kInvalidTensor);
    for (TensorId s : {m, v}) {
      EXPECT_EQ(t.g.tensor(s).kind, TensorKind::OptState);
      EXPECT_EQ(t.g.tensor(s).init.kind, InitKind::Zeros);
      EXPECT_EQ(t.g.tensor(s).shape, p.shape);
    }
    const OpNode& op = t.g.ops()[t.n + 1 + i];
    EXPECT_EQ(op.op, OpCode::AdamUpdate);
    EXPECT_EQ(op.inputs, (std::vector<TensorId>{t.grads[i].param, t.grads[i].grad, m, v, powers}));
    EXPECT_TRUE(op.outputs.empty());
    EXPECT_EQ(op.attrs.learning_rate, 1e-3f);
    EXPECT_EQ(op.attrs.beta1, 0.8f);
    EXPECT_EQ(op.attrs.beta2, 0.99f);
    EXPECT_EQ(op.attrs.epsilon, 1e-7f);
  }
}

TEST(OptimizerTest, BadSpecsAndGradients) {
  Trained t;
  const size_t ops = t.g.ops().size();
  auto message = [&](const OptimizerSpec& s, const std::vector<ParamGrad>& grads) {
    Status st = AppendOptimizer(t.g, grads, s);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    return st.message();
  };
  EXPECT_EQ(message(OptimizerSpec::Sgd(-1.0f), t.grads),
            "AppendOptimizer: SGD: learning_rate must be > 0, but got -1.000000");
  EXPECT_EQ(message(OptimizerSpec::Momentum(0.1f, -0.5f), t.grads),
            "AppendOptimizer: Momentum: momentum must be >= 0, but got -0.500000");
  EXPECT_EQ(message(OptimizerSpec::Adam(0.1f, 1.0f), t.grads),
            "AppendOptimizer: Adam: beta1 must be in (0, 1), but got 1.000000");
  EXPECT_EQ(message(OptimizerSpec::Adam(0.1f, 0.9f, 0.0f), t.grads),
            "AppendOptimizer: Adam: beta2 must be in (0, 1), but got 0.000000");
  EXPECT_EQ(message(OptimizerSpec::Adam(0.1f, 0.9f, 0.999f, 0.0f), t.grads),
            "AppendOptimizer: Adam: epsilon must be > 0, but got 0.000000");
  EXPECT_EQ(message(OptimizerSpec::Sgd(0.1f), {}), "AppendOptimizer: Optimizer got an empty parameter list");
  EXPECT_EQ(message(OptimizerSpec::Sgd(0.1f), {{t.grads[0].param, t.grads[0].param}}),
            "AppendOptimizer: the gradient of 'fc1.weight' is not a Grad tensor (run "
            "AppendBackward first)");
  EXPECT_EQ(message(OptimizerSpec::Sgd(0.1f), {t.grads[1], t.grads[1]}), "AppendOptimizer: 'fc1.bias' is listed twice");
  EXPECT_EQ(message(OptimizerSpec::Sgd(0.1f), {{t.grads[0].param, t.grads[1].grad}}),
            "AppendOptimizer: gradient 'fc1.bias/grad' [3] does not match 'fc1.weight' [5,3]");
  EXPECT_EQ(message(OptimizerSpec::Sgd(0.1f), {{t.grads[0].grad, t.grads[0].grad}}),
            "AppendOptimizer: tensor " + std::to_string(t.grads[0].grad) + " is not a Param of graph 'mlp'");
  OptimizerSpec wd = OptimizerSpec::Sgd(0.1f);
  wd.weight_decay = -1;
  EXPECT_EQ(message(wd, t.grads), "AppendOptimizer: SGD: weight_decay must be >= 0, but got -1.000000");
  EXPECT_EQ(t.g.ops().size(), ops);  // nothing appended
  EXPECT_TRUE(t.g.status().ok());
}

TEST(OptimizerTest, StateNameClashIsReported) {
  Graph g;
  TensorId p = g.Param("p", {2}, InitSpec::Zeros());
  g.Param("p/momentum", {2}, InitSpec::Zeros());
  g.SetLoss(g.ReduceSum(p));
  std::vector<ParamGrad> grads = Backward(g);
  Status st = AppendOptimizer(g, grads, OptimizerSpec::Momentum(0.1f, 0.9f));
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(st.message(), "AppendOptimizer: tensor name 'p/momentum' is already used by Param tensor 1");
}

TEST(OptimizerTest, FullPipelineOnLeNet) {
  Graph g = testing::MakeLeNet(2);
  std::vector<ParamGrad> grads = Backward(g);
  ASSERT_TRUE(AppendOptimizer(g, grads, OptimizerSpec::Adam(1e-3f)).ok()) << g.status().ToString();
  size_t updates = 0, states = 0;
  for (const OpNode& op : g.ops()) updates += op.op == OpCode::AdamUpdate;
  for (const TensorInfo& t : g.tensors()) states += t.kind == TensorKind::OptState;
  EXPECT_EQ(updates, 10u);
  EXPECT_EQ(states, 21u);  // powers + m and v per parameter
}

}  // namespace
}  // namespace sinkrt::host
