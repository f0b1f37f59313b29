// AppendOptimizer for AdamWeightDecay and Lamb (their state, ops and, for
// Lamb, the AllReduce of a block's sums), weight decay and MindSpore's
// group parameters (which parameters decay, at which rate), and the
// validation of every new setting.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "sinkrt/host/autodiff.h"
#include "sinkrt/host/optimizer.h"
#include "support/test_models.h"

namespace sinkrt::host {
namespace {

// The MLP (fc1.weight, fc1.bias, fc2.weight, fc2.bias) after backward.
struct Trained {
  Graph g = testing::MakeMlp(4, {5, 3, 2});
  std::vector<ParamGrad> grads;
  size_t n = 0;
  Trained() {
    auto r = AppendBackward(g, g.loss());
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (r.ok()) grads = *r;
    n = g.ops().size();
  }
  const std::string& name(size_t i) const { return g.tensor(grads[i].param).name; }
};

TEST(OptimizerSpecs, FactoriesUseMindSporesDefaultsAndParseTheirNames) {
  const OptimizerSpec w = OptimizerSpec::AdamWeightDecay(1e-3f, 0.01f);
  EXPECT_EQ(w.kind, OptimizerKind::AdamWeightDecay);
  EXPECT_EQ(w.weight_decay, 0.01f);
  EXPECT_EQ(w.epsilon, 1e-6f);  // nn.AdamWeightDecay's eps
  const OptimizerSpec l = OptimizerSpec::Lamb(2e-3f, 0.0f, 0.8f, 0.99f, 1e-5f);
  EXPECT_EQ(l.kind, OptimizerKind::Lamb);
  EXPECT_EQ(l.beta1, 0.8f);
  EXPECT_EQ(l.epsilon, 1e-5f);
  EXPECT_EQ(ParseOptimizerKind("adamw").value(), OptimizerKind::AdamWeightDecay);
  EXPECT_EQ(ParseOptimizerKind("AdamWeightDecay").value(), OptimizerKind::AdamWeightDecay);
  EXPECT_EQ(ParseOptimizerKind("lamb").value(), OptimizerKind::Lamb);
  EXPECT_STREQ(OptimizerKindName(OptimizerKind::AdamWeightDecay), "adamw");
  EXPECT_STREQ(OptimizerKindName(OptimizerKind::Lamb), "lamb");
  EXPECT_EQ(MakeOptimizer("lamb", 0.1f, 0.9f).value(), OptimizerSpec::Lamb(0.1f));
}

// Without groups, MindSpore's decay_filter: no decay for names holding
// "beta" or "gamma". With groups, the first group that matches decides;
// the others keep the optimizer's rate and decay.
TEST(OptimizerSpecs, HyperForFollowsTheDefaultFilterAndTheFirstMatchingGroup) {
  OptimizerSpec s = OptimizerSpec::Momentum(0.1f, 0.9f);
  s.weight_decay = 1e-4f;
  EXPECT_EQ(HyperFor(s, "fc1.weight").weight_decay, 1e-4f);
  EXPECT_EQ(HyperFor(s, "fc1.bias").weight_decay, 1e-4f);
  EXPECT_EQ(HyperFor(s, "ln1.gamma").weight_decay, 0.0f);
  EXPECT_EQ(HyperFor(s, "ln1.beta").weight_decay, 0.0f);
  s.groups = {ParamGroup{.names = {"bias"}, .weight_decay = 0.0f, .learning_rate = 0.0f},
              ParamGroup{.names = {"fc2", "norm"}, .weight_decay = 0.5f, .learning_rate = 0.02f}};
  EXPECT_EQ(HyperFor(s, "fc1.weight").weight_decay, 1e-4f);
  EXPECT_EQ(HyperFor(s, "fc1.weight").learning_rate, 0.1f);
  EXPECT_EQ(HyperFor(s, "fc2.bias").weight_decay, 0.0f);  // the first group wins
  EXPECT_EQ(HyperFor(s, "fc2.bias").learning_rate, 0.1f);
  EXPECT_EQ(HyperFor(s, "fc2.weight").weight_decay, 0.5f);
  EXPECT_EQ(HyperFor(s, "fc2.weight").learning_rate, 0.02f);
  EXPECT_EQ(HyperFor(s, "ln1.gamma").weight_decay, 1e-4f);  // groups replace the default filter
  SetNoDecay(s, {"bias", "gamma"});
  ASSERT_EQ(s.groups.size(), 1u);
  EXPECT_EQ(HyperFor(s, "fc2.weight").weight_decay, 1e-4f);
  EXPECT_EQ(HyperFor(s, "fc2.bias").weight_decay, 0.0f);
}

TEST(OptimizerSpecs, GroupsAreValidatedByName) {
  auto message = [](const OptimizerSpec& s) { return ValidateOptimizer(s).message(); };
  OptimizerSpec s = OptimizerSpec::AdamWeightDecay(1e-3f, 0.01f);
  s.groups = {ParamGroup{}};
  EXPECT_EQ(message(s), "AdamWeightDecay: group 0: names must not be empty (which parameters it holds)");
  s.groups = {ParamGroup{.names = {"bias", ""}, .weight_decay = 0.0f, .learning_rate = 0.0f}};
  EXPECT_EQ(message(s), "AdamWeightDecay: group 0: a name filter is the empty string, which every parameter contains");
  s.groups = {ParamGroup{.names = {"bias"}, .weight_decay = -1.0f, .learning_rate = 0.0f}};
  EXPECT_EQ(message(s), "AdamWeightDecay: group 0: weight_decay must be >= 0, but got -1.000000");
  s.groups = {ParamGroup{.names = {"bias"}, .weight_decay = 0.0f, .learning_rate = -0.5f}};
  EXPECT_EQ(message(s), "AdamWeightDecay: group 0: learning_rate must be >= 0 (0: the optimizer's), but got -0.500000");
  EXPECT_EQ(message(OptimizerSpec::Lamb(0.1f, 0.0f, 1.0f)), "Lamb: beta1 must be in (0, 1), but got 1.000000");
  EXPECT_EQ(message(OptimizerSpec::Lamb(0.1f, -0.1f)), "Lamb: weight_decay must be >= 0, but got -0.100000");
  EXPECT_EQ(message(OptimizerSpec::AdamWeightDecay(0.1f, 0.0f, 0.9f, 0.999f, 0.0f)),
            "AdamWeightDecay: epsilon must be > 0, but got 0.000000");
}

// Each update op carries its parameter's group decay and rate (the
// attributes its kernel reads): Momentum here, L2 added to the gradient.
TEST(OptimizerGroups, EachUpdateCarriesItsParametersDecayAndRate) {
  Trained t;
  OptimizerSpec s = OptimizerSpec::Momentum(0.1f, 0.9f);
  s.weight_decay = 1e-3f;
  s.groups = {ParamGroup{.names = {"bias"}, .weight_decay = 0.0f, .learning_rate = 0.05f}};
  ASSERT_TRUE(AppendOptimizer(t.g, t.grads, s).ok()) << t.g.status().ToString();
  ASSERT_EQ(t.g.ops().size(), t.n + 4);
  for (size_t i = 0; i < 4; ++i) {
    const OpNode& op = t.g.ops()[t.n + i];
    const bool bias = t.name(i).find("bias") != std::string::npos;
    EXPECT_EQ(op.attrs.weight_decay, bias ? 0.0f : 1e-3f) << t.name(i);
    EXPECT_EQ(op.attrs.learning_rate, bias ? 0.05f : 0.1f) << t.name(i);
  }
}

TEST(OptimizerGroups, AdamWeightDecayKeepsMindSporesMomentNames) {
  Trained t;
  ASSERT_TRUE(AppendOptimizer(t.g, t.grads, OptimizerSpec::AdamWeightDecay(1e-3f, 0.01f)).ok());
  ASSERT_EQ(t.g.ops().size(), t.n + 4);  // no powers: no bias correction
  EXPECT_EQ(t.g.FindTensor("adam/powers"), kInvalidTensor);
  for (size_t i = 0; i < 4; ++i) {
    const TensorId m = t.g.FindTensor(t.name(i) + "/adam_m"), v = t.g.FindTensor(t.name(i) + "/adam_v");
    ASSERT_NE(m, kInvalidTensor);
    ASSERT_NE(v, kInvalidTensor);
    EXPECT_EQ(t.g.tensor(m).kind, TensorKind::OptState);
    const OpNode& op = t.g.ops()[t.n + i];
    EXPECT_EQ(op.op, OpCode::AdamWeightDecay);
    EXPECT_EQ(op.inputs, (std::vector<TensorId>{t.grads[i].param, t.grads[i].grad, m, v}));
    EXPECT_EQ(op.attrs.weight_decay, 0.01f);
    EXPECT_EQ(op.attrs.epsilon, 1e-6f);
  }
}

TEST(OptimizerGroups, LambIsNormsThenUpdateAndReducesABlocksSums) {
  Trained t;
  std::vector<NormGroup> groups(4);
  groups[2] = NormGroup{.ranks = {0, 2}, .position = 1};  // fc2.weight: a block on ranks 0 and 2
  ASSERT_TRUE(AppendOptimizer(t.g, t.grads, OptimizerSpec::Lamb(1e-3f, 0.01f), kInvalidTensor, {}, groups).ok())
      << t.g.status().ToString();
  const TensorId powers = t.g.FindTensor("lamb/powers");
  ASSERT_NE(powers, kInvalidTensor);
  EXPECT_EQ(t.g.ops()[t.n].op, OpCode::AdamPowers);
  size_t k = t.n + 1;
  for (size_t i = 0; i < 4; ++i) {
    SCOPED_TRACE(t.name(i));
    const TensorId m = t.g.FindTensor(t.name(i) + "/lamb_m"), v = t.g.FindTensor(t.name(i) + "/lamb_v");
    ASSERT_NE(m, kInvalidTensor);
    const OpNode& norms = t.g.ops()[k++];
    EXPECT_EQ(norms.op, OpCode::LambNorms);
    EXPECT_EQ(norms.inputs, (std::vector<TensorId>{t.grads[i].param, t.grads[i].grad, m, v, powers}));
    ASSERT_EQ(norms.outputs.size(), 1u);
    EXPECT_EQ(t.g.tensor(norms.outputs[0]).shape, (Shape{3}));
    TensorId sums = norms.outputs[0];
    if (i == 2) {
      const OpNode& reduce = t.g.ops()[k++];
      EXPECT_EQ(reduce.op, OpCode::AllReduce);
      EXPECT_EQ(reduce.inputs, (std::vector<TensorId>{sums}));
      EXPECT_EQ(reduce.attrs.group, (std::vector<uint32_t>{0, 2}));
      EXPECT_EQ(reduce.attrs.group_position, 1u);
      EXPECT_FALSE(reduce.attrs.mean);
      sums = reduce.outputs[0];
    }
    const OpNode& update = t.g.ops()[k++];
    EXPECT_EQ(update.op, OpCode::LambUpdate);
    EXPECT_EQ(update.inputs, (std::vector<TensorId>{t.grads[i].param, m, v, powers, sums}));
    EXPECT_TRUE(update.outputs.empty());
  }
  EXPECT_EQ(k, t.g.ops().size());
}

TEST(OptimizerGroups, MutatedInputsOfTheNewUpdates) {
  EXPECT_EQ(MutatedInputs(OpCode::AdamWeightDecay), (std::vector<size_t>{0, 2, 3}));
  EXPECT_EQ(MutatedInputs(OpCode::LambNorms), (std::vector<size_t>{2, 3}));
  EXPECT_EQ(MutatedInputs(OpCode::LambUpdate), (std::vector<size_t>{0}));
}

}  // namespace
}  // namespace sinkrt::host
