// Elementwise, activation and copy kernels (Add/Sub/Mul/AddN, Relu/Gelu/
// Tanh/Sigmoid/Neg and their gradients, Reshape/Flatten/Copy/Fill) against
// the float64 reference ops, plus their load-time validation. Each kernel
// runs through test/support/kernel_runner.h as the executor runs it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "support/kernel_runner.h"
#include "support/reference_ops.h"

namespace sinkrt::device {
namespace {

using namespace ::sinkrt::testing;
using fb::OpCode;
using Tensor = KernelTensor;

//===--- Elementwise --------------------------------------------------------===//

struct BinaryCase {
  Shape a, b;
};

TEST(ElementwiseKernels, AddSubMulBroadcastLikeNumPy) {
  const std::vector<BinaryCase> cases = {
      {{3, 4}, {3, 4}}, {{2, 3, 4}, {4}},
      {{4}, {2, 3, 4}}, {{2, 1, 4}, {3, 1}},
      {{}, {5, 6}},     {{5, 6}, {}},
      {{1}, {3}},       {{2, 3, 4, 5}, {1, 3, 1, 1}},
      {{7, 1}, {1, 9}}, {{2, 3, 4, 5}, {2, 1, 4, 1}},
      {{64, 10}, {10}}, {{1, 1}, {1}},
  };
  // The float64 reference rounded to float is the correctly rounded f32
  // result (53 >= 2 * 24 + 2 bits), so the kernels must match it bit for bit.
  struct Kind {
    OpCode op;
    RefTensor (*ref)(const RefTensor&, const RefTensor&);
  };
  const Kind kinds[] = {{OpCode::Add, RefAdd}, {OpCode::Sub, RefSub}, {OpCode::Mul, RefMul}};
  uint32_t seed = 1;
  for (const auto& c : cases) {
    for (const Kind& k : kinds) {
      const Tensor a = RandomTensor(c.a, seed++), b = RandomTensor(c.b, seed++);
      const RefTensor want = k.ref(ToRef(a), ToRef(b));
      Tensor y(want.shape);
      KernelRunner op(k.op);
      op.In(a).In(b).Out(y).PrepareAndRun();
      ExpectBitwise(y, want,
                    std::string(fb::EnumNameOpCode(k.op)) + " " + ShapeToString(c.a) + " " + ShapeToString(c.b));
    }
  }
}

TEST(ElementwiseKernels, AddRunsInPlace) {
  Tensor a = RandomTensor({4, 6}, 1);
  const Tensor b = RandomTensor({6}, 2);
  const RefTensor want = RefAdd(ToRef(a), ToRef(b));
  KernelRunner op(OpCode::Add);
  op.In(a).In(b).Out(a).PrepareAndRun();
  ExpectBitwise(a, want, "Add in place");
}

TEST(ElementwiseKernels, PrepareRejectsBadOperands) {
  const Tensor a = RandomTensor({2, 3}, 1), b = RandomTensor({4}, 2), y({2, 3}), yi({2, 3}, DType::I32);
  {
    KernelRunner op(OpCode::Add);
    op.In(a).In(b).Out(y);
    ExpectPrepareError(op, "Add", {"input 0 [2,3]", "input 1 [4]", "do not broadcast"});
  }
  {
    const Tensor wrong({3, 2});
    KernelRunner op(OpCode::Sub);
    op.In(a).In(a).Out(wrong);
    ExpectPrepareError(op, "Sub", {"output 0 has shape [3,2]", "expected [2,3]"});
  }
  {
    KernelRunner op(OpCode::Mul);
    op.In(a).In(a).Out(yi);
    ExpectPrepareError(op, "Mul", {"output 0 has dtype i32, expected f32"});
  }
  {
    KernelRunner op(OpCode::Add);
    op.In(a).Out(y);
    ExpectPrepareError(op, "Add", {"takes 2 inputs and 1 outputs, got 1 and 1"});
  }
  {
    KernelRunner op(OpCode::Add);
    op.In(a).In(a).Out(y).Axis(0);
    ExpectPrepareError(op, "Add", {"takes no options, got AxisOptions"});
  }
  {
    KernelRunner op(OpCode::Add);
    op.In(a).In(a).Out(y).Relu();
    ExpectPrepareError(op, "Add", {"does not take a fused bias or activation"});
  }
  {
    // Output starts one element into input 0: a broken memory plan.
    const Tensor big({8});
    TensorRef shifted = View(big, {2, 3});
    shifted.data = big.f32() + 1;
    KernelRunner op(OpCode::Add);
    op.In(View(big, {2, 3})).In(a).Out(shifted);
    ExpectPrepareError(op, "Add", {"output 0 overlaps input 0"});
  }
}

TEST(ElementwiseKernels, AddNSumsInOrderAndAllowsInPlace) {
  for (int n : {2, 3, 5}) {
    std::vector<Tensor> xs;
    for (int i = 0; i < n; ++i) xs.push_back(RandomTensor({3, 700}, 10 + i));
    std::vector<float> want(xs[0].numel());
    for (int64_t j = 0; j < xs[0].numel(); ++j) {
      float s = xs[0][j] + xs[1][j];
      for (int i = 2; i < n; ++i) s += xs[i][j];
      want[j] = s;
    }
    Tensor y({3, 700});
    KernelRunner op(OpCode::AddN);
    for (const Tensor& x : xs) op.In(x);
    op.Out(y).PrepareAndRun();
    ExpectBitwise(y, want, "AddN of " + std::to_string(n));
    // Writing into the last input must not disturb the sum.
    KernelRunner in_place(OpCode::AddN);
    for (const Tensor& x : xs) in_place.In(x);
    in_place.Out(xs.back()).PrepareAndRun();
    ExpectBitwise(xs.back(), want, "AddN in place");
  }
  const Tensor a({2}), b({3}), y({2});
  KernelRunner op(OpCode::AddN);
  op.In(a).In(b).Out(y);
  ExpectPrepareError(op, "AddN", {"input 1 has shape [3], expected [2]"});
  KernelRunner one(OpCode::AddN);
  one.In(a).Out(y);
  ExpectPrepareError(one, "AddN", {"at least 2 inputs"});
}

//===--- Activations --------------------------------------------------------===//

TEST(ActivationKernels, ForwardMatchesReference) {
  struct Case {
    OpCode op;
    RefTensor (*ref)(const RefTensor&);
  };
  const Case cases[] = {
      {OpCode::Relu, RefRelu},       {OpCode::Gelu, RefGelu}, {OpCode::Tanh, RefTanh},
      {OpCode::Sigmoid, RefSigmoid}, {OpCode::Neg, RefNeg},
  };
  for (const Case& c : cases) {
    for (const Shape& s : {Shape{}, Shape{17}, Shape{3, 5, 7}}) {
      Tensor x = RandomTensor(s, 3, -6.0f, 6.0f);
      if (x.numel() > 2) x[0] = -100.0f, x[1] = 100.0f;  // saturation, no overflow
      Tensor y(s);
      KernelRunner op(c.op);
      op.In(x).Out(y).PrepareAndRun();
      ExpectClose(y, c.ref(ToRef(x)), 2e-6, 1e-7, fb::EnumNameOpCode(c.op));
    }
  }
}

TEST(ActivationKernels, ReluPropagatesNaNAndRunsInPlace) {
  Tensor x({3});
  x.set({-1.0f, std::numeric_limits<float>::quiet_NaN(), 2.0f});
  KernelRunner op(OpCode::Relu);
  op.In(x).Out(x).PrepareAndRun();
  EXPECT_EQ(x[0], 0.0f);
  EXPECT_TRUE(std::isnan(x[1]));
  EXPECT_EQ(x[2], 2.0f);
}

TEST(ActivationKernels, GradientsMatchContract) {
  const Tensor x = RandomTensor({4, 33}, 5, -4.0f, 4.0f), dy = RandomTensor({4, 33}, 6);
  // Forward outputs the gradients take.
  Tensor relu_y({4, 33}), tanh_y({4, 33}), sig_y({4, 33});
  KernelRunner(OpCode::Relu).In(x).Out(relu_y).PrepareAndRun();
  KernelRunner(OpCode::Tanh).In(x).Out(tanh_y).PrepareAndRun();
  KernelRunner(OpCode::Sigmoid).In(x).Out(sig_y).PrepareAndRun();
  const int64_t n = x.numel();
  {
    Tensor dx({4, 33});
    KernelRunner(OpCode::ReluGrad).In(dy).In(relu_y).Out(dx).PrepareAndRun();
    std::vector<double> want(n);
    for (int64_t i = 0; i < n; ++i) want[i] = relu_y[i] > 0 ? dy[i] : 0.0;
    ExpectClose(dx, want, 0, 0, "ReluGrad");
  }
  {
    Tensor dx({4, 33});
    KernelRunner(OpCode::TanhGrad).In(dy).In(tanh_y).Out(dx).PrepareAndRun();
    std::vector<double> want(n);
    for (int64_t i = 0; i < n; ++i) want[i] = dy[i] * (1.0 - double(tanh_y[i]) * tanh_y[i]);
    ExpectClose(dx, want, 1e-6, 1e-7, "TanhGrad");
  }
  {
    Tensor dx({4, 33});
    KernelRunner(OpCode::SigmoidGrad).In(dy).In(sig_y).Out(dx).PrepareAndRun();
    std::vector<double> want(n);
    for (int64_t i = 0; i < n; ++i) want[i] = dy[i] * double(sig_y[i]) * (1.0 - sig_y[i]);
    ExpectClose(dx, want, 1e-6, 1e-7, "SigmoidGrad");
  }
  {
    // GeluGrad takes the forward input; check it against a central
    // difference of the tanh-approximation Gelu.
    Tensor dx({4, 33});
    KernelRunner(OpCode::GeluGrad).In(dy).In(x).Out(dx).PrepareAndRun();
    const double h = 1e-5;
    RefTensor lo = ToRef(x), hi = ToRef(x);
    for (double& v : lo.data) v -= h;
    for (double& v : hi.data) v += h;
    const std::vector<double> up = RefGelu(hi).data, down = RefGelu(lo).data;
    std::vector<double> want(n);
    for (int64_t i = 0; i < n; ++i) want[i] = dy[i] * (up[i] - down[i]) / (2 * h);
    ExpectClose(dx, want, 1e-5, 1e-6, "GeluGrad");
  }
  const Tensor other = RandomTensor({4, 32}, 1);
  Tensor dx({4, 33});
  KernelRunner op(OpCode::ReluGrad);
  op.In(dy).In(other).Out(dx);
  ExpectPrepareError(op, "ReluGrad", {"input 1 has shape [4,32], expected [4,33] like input 0"});
}

//===--- Copy and Fill ------------------------------------------------------===//

TEST(CopyKernels, ReshapeFlattenCopyMoveBytes) {
  for (OpCode code : {OpCode::Reshape, OpCode::Flatten, OpCode::Copy}) {
    const Tensor x = RandomTensor({2, 3, 4}, 61);
    Tensor y({2, 12});
    KernelRunner(code).In(x).Out(y).PrepareAndRun();
    ExpectBitwise(y, x.values(), fb::EnumNameOpCode(code));
  }
  // Flatten's output shape is fixed: [N, ...] -> [N, prod(...)], [N] -> [N, 1].
  const Tensor v = RandomTensor({5}, 63);
  Tensor v1({5, 1});
  KernelRunner(OpCode::Flatten).In(v).Out(v1).PrepareAndRun();
  ExpectBitwise(v1, v.values(), "Flatten [5]");
  const Tensor x4 = RandomTensor({2, 3, 4}, 64);
  Tensor flat_wrong({4, 6});
  KernelRunner flat(OpCode::Flatten);
  flat.In(x4).Out(flat_wrong);
  ExpectPrepareError(flat, "Flatten",
                     {"output 0 has shape [4,6], expected [2,12] ([N, prod(...)] of input 0 [2,3,4])"});
  Tensor reshaped({4, 6});
  KernelRunner(OpCode::Reshape).In(x4).Out(reshaped).PrepareAndRun();
  ExpectBitwise(reshaped, x4.values(), "Reshape [2,3,4] -> [4,6]");
  // Labels copy as bytes too.
  const Tensor l = Labels({1, 2, 3});
  Tensor l2({3}, DType::I32);
  KernelRunner(OpCode::Copy).In(l).Out(l2).PrepareAndRun();
  EXPECT_EQ(std::memcmp(l.i32(), l2.i32(), 12), 0);
  // Shared memory: nothing to do, nothing to break.
  Tensor x = RandomTensor({6}, 62);
  const std::vector<float> before = x.values();
  KernelRunner(OpCode::Reshape).In(x).Out(View(x, {2, 3})).PrepareAndRun();
  ExpectBitwise(x, before, "Reshape in place");

  Tensor wrong({5});
  KernelRunner count(OpCode::Reshape);
  count.In(x).Out(wrong);
  ExpectPrepareError(count, "Reshape", {"output 0 has shape [5] (5 elements), expected 6 elements"});
  Tensor wrong_type({6}, DType::I32);
  KernelRunner type(OpCode::Flatten);
  type.In(x).Out(wrong_type);
  ExpectPrepareError(type, "Flatten", {"output 0 has dtype i32, expected f32"});
}

TEST(CopyKernels, FillWritesTheValue) {
  Tensor y({3, 3});
  KernelRunner(OpCode::Fill).Out(y).FillValue(1.5f).PrepareAndRun();
  for (int64_t i = 0; i < y.numel(); ++i) EXPECT_EQ(y[i], 1.5f);
  KernelRunner missing(OpCode::Fill);
  missing.Out(y);
  ExpectPrepareError(missing, "Fill", {"expected FillOptions"});
}

}  // namespace
}  // namespace sinkrt::device
