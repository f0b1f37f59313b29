// The gradient-rule registry (host/src/autodiff/grad_rule.h): every rule is
// registered for one op code once, and the registered ops are exactly the
// differentiable ones (the ops docs/reference/ops.md gives a gradient). The rules'
// behaviour is checked by autodiff_test.cc and gradient_check_test.cc.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <span>
#include <string>

#include "host/src/autodiff/grad_rule.h"
#include "host/src/util/schema_enums.h"

namespace sinkrt::host::autodiff_internal {
namespace {

std::vector<std::span<const GradRule>> Families() {
  return {MatMulConvGradRules(), ElementwiseGradRules(), ShapeGradRules(), CommGradRules()};
}

TEST(GradRules, EveryOpIsRegisteredOnceWithARule) {
  std::map<OpCode, int> count;
  for (std::span<const GradRule> family : Families())
    for (const GradRule& rule : family) {
      ++count[rule.op];
      EXPECT_NE(rule.fn, nullptr) << OpCodeName(rule.op);
    }
  for (const auto& [op, n] : count) EXPECT_EQ(n, 1) << OpCodeName(op) << " is registered " << n << " times";
}

TEST(GradRules, TheRegisteredOpsAreTheDifferentiableOnes) {
  const std::set<OpCode> differentiable = {OpCode::MatMul,        OpCode::BiasAdd,    OpCode::Add,
                                           OpCode::Sub,           OpCode::Mul,        OpCode::Relu,
                                           OpCode::Gelu,          OpCode::Tanh,       OpCode::Sigmoid,
                                           OpCode::Neg,           OpCode::Exp,        OpCode::Log,
                                           OpCode::Sqrt,          OpCode::Rsqrt,      OpCode::Square,
                                           OpCode::Abs,           OpCode::Div,        OpCode::Maximum,
                                           OpCode::Minimum,       OpCode::Pow,        OpCode::Erf,
                                           OpCode::GeluErf,       OpCode::BatchNorm,  OpCode::Dropout,
                                           OpCode::ReduceMax,     OpCode::Select,     OpCode::CausalMask,
                                           OpCode::Softmax,       OpCode::LogSoftmax, OpCode::SparseSoftmaxCrossEntropy,
                                           OpCode::ReduceSum,     OpCode::ReduceMean, OpCode::Reshape,
                                           OpCode::Flatten,       OpCode::Copy,       OpCode::AddN,
                                           OpCode::Conv2D,        OpCode::MaxPool2D,  OpCode::AvgPool2D,
                                           OpCode::BroadcastTo,   OpCode::SumToShape, OpCode::LayerNorm,
                                           OpCode::Gather,        OpCode::Pad,        OpCode::Cast,
                                           OpCode::BatchMatMul,   OpCode::Transpose,  OpCode::Concat,
                                           OpCode::Split,         OpCode::AllReduce,  OpCode::AllGather,
                                           OpCode::ReduceScatter, OpCode::AllToAll,   OpCode::ShardSlice,
                                           OpCode::GradAllReduce};
  for (int i = static_cast<int>(OpCode::Invalid); i <= static_cast<int>(kOpCodeMax); ++i) {
    const OpCode op = static_cast<OpCode>(i);
    EXPECT_EQ(HasGradRule(op), differentiable.count(op) == 1) << OpCodeName(op);
  }
}

// Only Split's rule runs without a gradient of output 0 (any of its
// outputs may carry one).
TEST(GradRules, OnlySplitReadsEveryOutput) {
  for (std::span<const GradRule> family : Families())
    for (const GradRule& rule : family)
      EXPECT_EQ(rule.reads_every_output, rule.op == OpCode::Split) << OpCodeName(rule.op);
}

}  // namespace
}  // namespace sinkrt::host::autodiff_internal
