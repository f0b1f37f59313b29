// Softmax, LogSoftmax, SparseSoftmaxCrossEntropy (and their gradients) and
// ArgMaxAccuracy against the float64 reference ops, plus their load-time
// validation and the loss's run-time label check.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "support/kernel_runner.h"
#include "support/reference_ops.h"

namespace sinkrt::device {
namespace {

using namespace ::sinkrt::testing;
using fb::OpCode;
using Tensor = KernelTensor;

//===--- Softmax ------------------------------------------------------------===//

struct AxisCase {
  Shape shape;
  int axis;
};
const std::vector<AxisCase> kAxisCases = {
    {{4, 10}, 1}, {{2, 5, 3, 4}, 1}, {{6, 3}, 0}, {{7}, 0}, {{3, 1000}, 1}, {{2, 3, 4}, 2},
};

TEST(SoftmaxKernels, ForwardMatchesReferenceOnEveryAxis) {
  for (bool log : {false, true}) {
    for (const AxisCase& c : kAxisCases) {
      Tensor x = RandomTensor(c.shape, 7, -20.0f, 20.0f);
      x[0] = 80.0f;  // would overflow exp without the max subtracted
      Tensor y(c.shape);
      KernelRunner op(log ? OpCode::LogSoftmax : OpCode::Softmax);
      op.In(x).Out(y).Axis(c.axis).PrepareAndRun();
      ExpectClose(
          y, log ? RefLogSoftmax(ToRef(x), c.axis) : RefSoftmax(ToRef(x), c.axis), 2e-5, 1e-7,
          std::string(log ? "LogSoftmax " : "Softmax ") + ShapeToString(c.shape) + " axis " + std::to_string(c.axis));
    }
  }
}

TEST(SoftmaxKernels, GradientsMatchContract) {
  for (bool log : {false, true}) {
    for (const AxisCase& c : kAxisCases) {
      const Tensor x = RandomTensor(c.shape, 8, -3.0f, 3.0f), dy = RandomTensor(c.shape, 9);
      Tensor y(c.shape), dx(c.shape);
      KernelRunner(log ? OpCode::LogSoftmax : OpCode::Softmax).In(x).Out(y).Axis(c.axis).PrepareAndRun();
      KernelRunner(log ? OpCode::LogSoftmaxGrad : OpCode::SoftmaxGrad)
          .In(dy)
          .In(y)
          .Out(dx)
          .Axis(c.axis)
          .PrepareAndRun();
      // dx = y·(dy − Σ dy·y)  or  dx = dy − exp(y)·Σ dy, along the axis.
      const Shape& s = c.shape;
      int64_t outer = 1, inner = 1;
      for (int d = 0; d < c.axis; ++d) outer *= s[d];
      for (size_t d = c.axis + 1; d < s.size(); ++d) inner *= s[d];
      std::vector<double> want(x.numel());
      for (int64_t o = 0; o < outer; ++o) {
        for (int64_t i = 0; i < inner; ++i) {
          auto at = [&](int64_t a) { return (o * s[c.axis] + a) * inner + i; };
          double acc = 0;
          for (int64_t a = 0; a < s[c.axis]; ++a) acc += log ? dy[at(a)] : dy[at(a)] * y[at(a)];
          for (int64_t a = 0; a < s[c.axis]; ++a) {
            want[at(a)] = log ? dy[at(a)] - std::exp(double(y[at(a)])) * acc : y[at(a)] * (dy[at(a)] - acc);
          }
        }
      }
      ExpectClose(dx, want, 1e-5, 1e-6, std::string(log ? "LogSoftmaxGrad " : "SoftmaxGrad ") + ShapeToString(s));
    }
  }
}

TEST(SoftmaxKernels, ScratchOnlyForInnerAxes) {
  const Tensor x = RandomTensor({2, 5, 3}, 1);
  Tensor y({2, 5, 3});
  KernelRunner last(OpCode::Softmax);
  last.In(x).Out(y).Axis(2).PrepareAndRun();
  EXPECT_EQ(last.scratch_bytes(), 0u);
  KernelRunner middle(OpCode::Softmax);
  middle.In(x).Out(y).Axis(1).PrepareAndRun();
  EXPECT_EQ(middle.scratch_bytes(), 2 * 3 * sizeof(float));
}

TEST(SoftmaxKernels, PrepareRejectsBadAxis) {
  const Tensor x({2, 5});
  Tensor y({2, 5});
  KernelRunner neg(OpCode::Softmax);
  neg.In(x).Out(y).Axis(-1);
  ExpectPrepareError(neg, "Softmax", {"axis -1 is out of range [0, 2)", "normalised"});
  KernelRunner big(OpCode::LogSoftmax);
  big.In(x).Out(y).Axis(2);
  ExpectPrepareError(big, "LogSoftmax", {"axis 2 is out of range"});
  KernelRunner none(OpCode::Softmax);
  none.In(x).Out(y);
  ExpectPrepareError(none, "Softmax", {"options missing, expected AxisOptions, got NONE"});
  KernelRunner wrong(OpCode::SoftmaxGrad);
  wrong.In(x).In(x).Out(y).MatMulOpts(false, false);
  ExpectPrepareError(wrong, "SoftmaxGrad", {"expected AxisOptions, got MatMulOptions"});
}

//===--- Loss ---------------------------------------------------------------===//

TEST(LossKernels, SparseSoftmaxCrossEntropyAndGrad) {
  for (const Shape& s : {Shape{1, 1}, Shape{4, 10}, Shape{64, 10}, Shape{3, 1000}}) {
    const int64_t n = s[0], c = s[1];
    const Tensor logits = RandomTensor(s, 11, -5.0f, 5.0f);
    std::vector<int32_t> lv(n);
    for (int64_t r = 0; r < n; ++r) lv[r] = static_cast<int32_t>((r * 7 + 3) % c);
    const Tensor labels = Labels(lv);
    Tensor loss(Shape{});
    KernelRunner(OpCode::SparseSoftmaxCrossEntropy).In(logits).In(labels).Out(loss).PrepareAndRun();
    ExpectClose(loss, RefSparseSoftmaxCrossEntropy(ToRef(logits), lv), 1e-5, 1e-6, "loss " + ShapeToString(s));

    Tensor dloss(Shape{});
    dloss[0] = 0.5f;
    Tensor dlogits(s);
    KernelRunner(OpCode::SparseSoftmaxCrossEntropyGrad).In(logits).In(labels).In(dloss).Out(dlogits).PrepareAndRun();
    // d(mean loss)/d logits = (softmax - onehot(label)) * dloss / N.
    const std::vector<double> logp = RefLogSoftmax(ToRef(logits), 1).data;
    std::vector<double> wg(n * c);
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t j = 0; j < c; ++j) {
        wg[r * c + j] = (std::exp(logp[r * c + j]) - (j == lv[r] ? 1.0 : 0.0)) * 0.5 / n;
      }
    }
    ExpectClose(dlogits, wg, 1e-5, 1e-8, "loss grad " + ShapeToString(s));
  }
}

TEST(LossKernels, LabelOutOfRangeFailsTheStepNamingRowAndValue) {
  const Tensor logits = RandomTensor({3, 5}, 1);
  const Tensor labels = Labels({0, 5, 1});
  Tensor loss(Shape{});
  KernelRunner op(OpCode::SparseSoftmaxCrossEntropy);
  op.In(logits).In(labels).Out(loss);
  ASSERT_TRUE(op.Prepare().ok());
  Status st = op.Run();
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "SparseSoftmaxCrossEntropy: label 5 in row 1 is outside [0, 5)");

  const Tensor negative = Labels({0, 1, -2});
  Tensor dloss(Shape{}), dlogits({3, 5});
  KernelRunner grad(OpCode::SparseSoftmaxCrossEntropyGrad);
  grad.In(logits).In(negative).In(dloss).Out(dlogits);
  ASSERT_TRUE(grad.Prepare().ok());
  st = grad.Run();
  EXPECT_NE(st.message().find("label -2 in row 2"), std::string::npos) << st.message();
}

TEST(LossKernels, PrepareRejectsBadOperands) {
  const Tensor logits = RandomTensor({3, 5}, 1), labels = Labels({0, 1});
  Tensor loss(Shape{});
  KernelRunner op(OpCode::SparseSoftmaxCrossEntropy);
  op.In(logits).In(labels).Out(loss);
  ExpectPrepareError(op, "SparseSoftmaxCrossEntropy", {"input 1 has shape [2], expected [N=3] for [3,5] logits"});
  const Tensor float_labels({3});
  KernelRunner dt(OpCode::SparseSoftmaxCrossEntropy);
  dt.In(logits).In(float_labels).Out(loss);
  ExpectPrepareError(dt, "SparseSoftmaxCrossEntropy", {"input 1 has dtype f32, expected i32"});
  Tensor vec_loss({1});
  KernelRunner out(OpCode::SparseSoftmaxCrossEntropy);
  out.In(logits).In(Labels({0, 1, 2})).Out(vec_loss);
  ExpectPrepareError(out, "SparseSoftmaxCrossEntropy", {"output 0 has shape [1], expected []"});
}

//===--- Accuracy -----------------------------------------------------------===//

TEST(AccuracyKernels, CountsArgMaxHitsFirstOnTies) {
  Tensor logits({4, 3});
  logits.set({0.1f, 0.9f, 0.0f,                // argmax 1
              2.0f, 2.0f, 1.0f,                // tie: first, 0
              -1.0f, -3.0f, -0.5f,             // argmax 2
              0.0f, 0.0f, 0.0f});              // tie: 0
  const Tensor labels = Labels({1, 1, 2, 7});  // hit, miss (tie goes to 0), hit, out of range
  Tensor count(Shape{});
  KernelRunner(OpCode::ArgMaxAccuracy).In(logits).In(labels).Out(count).PrepareAndRun();
  EXPECT_EQ(count[0], 2.0f);
  Tensor bad({2});
  KernelRunner op(OpCode::ArgMaxAccuracy);
  op.In(logits).In(labels).Out(bad);
  ExpectPrepareError(op, "ArgMaxAccuracy", {"output 0 has shape [2], expected []"});
}

}  // namespace
}  // namespace sinkrt::device
