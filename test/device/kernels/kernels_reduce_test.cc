// Reductions and broadcasts (ReduceSum/Mean, SumToShape, BroadcastTo,
// BiasAdd and BiasAddGrad) against the float64 reference ops, plus their
// load-time validation.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "support/kernel_runner.h"
#include "support/reference_ops.h"

namespace sinkrt::device {
namespace {

using namespace ::sinkrt::testing;
using fb::OpCode;
using Tensor = KernelTensor;

//===--- Reductions and broadcasts --------------------------------------------===//

TEST(ReduceKernels, ReduceSumAndMeanOverAxes) {
  struct Case {
    Shape shape;
    std::vector<int32_t> axes;
  };
  const std::vector<Case> cases = {
      {{3, 4, 5}, {}},     {{3, 4, 5}, {0}},       {{3, 4, 5}, {1}},          {{3, 4, 5}, {2}}, {{3, 4, 5}, {0, 2}},
      {{3, 4, 5}, {1, 2}}, {{2, 3, 4, 5}, {1, 3}}, {{2, 3, 4, 5}, {0, 1, 3}}, {{}, {}},         {{6, 1, 7}, {1}},
      {{300, 513}, {0}},   {{5, 1}, {0, 1}},
  };
  for (bool mean : {false, true}) {
    for (bool keep : {false, true}) {
      for (const Case& c : cases) {
        const Tensor x = RandomTensor(c.shape, 21);
        const std::vector<int> axes(c.axes.begin(), c.axes.end());
        const RefTensor want = mean ? RefReduceMean(ToRef(x), axes, keep) : RefReduceSum(ToRef(x), axes, keep);
        Tensor y(want.shape);
        KernelRunner op(mean ? OpCode::ReduceMean : OpCode::ReduceSum);
        op.In(x).Out(y).Axes(c.axes, keep).PrepareAndRun();
        ExpectClose(y, want, 1e-5, 1e-5, std::string(mean ? "ReduceMean " : "ReduceSum ") + ShapeToString(c.shape));
      }
    }
  }
}

TEST(ReduceKernels, LongSumsStayAccurate) {
  // 2^21 values in [0, 1): a naive float loop drifts by ~1e-4 relative here.
  const Tensor x = RandomTensor({1 << 21}, 3, 0.0f, 1.0f);
  Tensor y(Shape{});
  KernelRunner(OpCode::ReduceSum).In(x).Out(y).Axes({}, false).PrepareAndRun();
  const double want = RefReduceSum(ToRef(x), {}, false).data[0];
  EXPECT_NEAR(y[0], want, want * 1e-6);
  // Column sums over many rows (a bias gradient over a big batch).
  const Tensor dy = RandomTensor({200000, 3}, 4, 0.0f, 1.0f);
  Tensor db({3});
  KernelRunner(OpCode::BiasAddGrad).In(dy).Out(db).Axis(1).PrepareAndRun();
  const std::vector<double> w = RefSumToShape(ToRef(dy), {3}).data;
  for (int j = 0; j < 3; ++j) EXPECT_NEAR(db[j], w[j], w[j] * 1e-6);
}

TEST(ReduceKernels, PrepareRejectsBadAxes) {
  const Tensor x({3, 4, 5});
  Tensor y({3});
  KernelRunner unsorted(OpCode::ReduceSum);
  unsorted.In(x).Out(y).Axes({2, 1}, false);
  ExpectPrepareError(unsorted, "ReduceSum", {"axes must be sorted and distinct, got 1 after 2"});
  KernelRunner range(OpCode::ReduceMean);
  range.In(x).Out(y).Axes({1, 3}, false);
  ExpectPrepareError(range, "ReduceMean", {"axis 3 is out of range [0, 3)"});
  KernelRunner keep(OpCode::ReduceSum);
  keep.In(x).Out(y).Axes({1, 2}, true);
  ExpectPrepareError(keep, "ReduceSum", {"output 0 has shape [3], expected [3,1,1]"});
}

TEST(ReduceKernels, SumToShapeInvertsBroadcasting) {
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{2, 3, 4}, {4}}, {{2, 3, 4}, {3, 1}}, {{2, 3, 4}, {1, 3, 1}},    {{2, 3, 4}, {2, 1, 4}}, {{2, 3, 4}, {}},
      {{5, 6}, {5, 6}}, {{64, 512}, {512}},  {{2, 3, 4, 5}, {3, 1, 1}}, {{7, 1, 9}, {1, 9}},    {{4, 6}, {1, 1}},
  };
  for (const auto& [dy_shape, dx_shape] : cases) {
    const Tensor dy = RandomTensor(dy_shape, 31);
    Tensor dx(dx_shape);
    KernelRunner(OpCode::SumToShape).In(dy).Out(dx).PrepareAndRun();
    ExpectClose(dx, RefSumToShape(ToRef(dy), dx_shape), 1e-5, 1e-5,
                "SumToShape " + ShapeToString(dy_shape) + " -> " + ShapeToString(dx_shape));
  }
  const Tensor dy({2, 3});
  Tensor dx({4});
  KernelRunner op(OpCode::SumToShape);
  op.In(dy).Out(dx);
  ExpectPrepareError(op, "SumToShape", {"output 0 has shape [4]", "broadcasts to input 0's [2,3]"});
}

TEST(ReduceKernels, BroadcastToScales) {
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{4}, {2, 3, 4}}, {{3, 1}, {2, 3, 5}},       {{}, {3, 3}}, {{2, 2}, {2, 2}}, {{1}, {4}},
      {{1, 1}, {2, 3}}, {{2, 1, 4}, {3, 2, 5, 4}},
  };
  for (const auto& [xs, ys] : cases) {
    const Tensor x = RandomTensor(xs, 41);
    Tensor y(ys);
    KernelRunner(OpCode::BroadcastTo).In(x).Out(y).Scale(0.25f).PrepareAndRun();
    ExpectBitwise(y, RefBroadcastTo(ToRef(x), ys, 0.25),
                  "BroadcastTo " + ShapeToString(xs) + " -> " + ShapeToString(ys));
  }
  const Tensor x({3});
  Tensor y({2, 4});
  KernelRunner op(OpCode::BroadcastTo);
  op.In(x).Out(y).Scale(1.0f);
  ExpectPrepareError(op, "BroadcastTo", {"input 0 has shape [3]", "output 0's [2,4]"});
  const Tensor x2({1, 1});
  Tensor y4({4});
  KernelRunner higher(OpCode::BroadcastTo);  // NumPy never drops leading dims either
  higher.In(x2).Out(y4).Scale(1.0f);
  ExpectPrepareError(higher, "BroadcastTo", {"input 0 has shape [1,1]", "output 0's [4]"});
}

TEST(ReduceKernels, BiasAddAndGradAlongTheChannelAxis) {
  // The channel axis is always 1: [N,C], [N,C,L], NCHW.
  for (const Shape& shape : {Shape{8, 5}, Shape{2, 3, 4, 5}, Shape{4, 7, 9}, Shape{1, 6}, Shape{3, 1, 2, 2}}) {
    const int axis = 1;
    const int64_t c = shape[axis];
    const Tensor x = RandomTensor(shape, 51), bias = RandomTensor({c}, 52);
    Tensor y(shape);
    KernelRunner(OpCode::BiasAdd).In(x).In(bias).Out(y).Axis(axis).PrepareAndRun();
    ExpectBitwise(y, RefBiasAdd(ToRef(x), ToRef(bias), axis), "BiasAdd " + ShapeToString(shape));

    Tensor db({c});
    KernelRunner(OpCode::BiasAddGrad).In(x).Out(db).Axis(axis).PrepareAndRun();
    std::vector<int> other_axes;  // every axis but the channel axis
    for (int d = 0; d < static_cast<int>(shape.size()); ++d)
      if (d != axis) other_axes.push_back(d);
    ExpectClose(db, RefReduceSum(ToRef(x), other_axes, false), 1e-5, 1e-5, "BiasAddGrad " + ShapeToString(shape));
  }
  const Tensor x({4, 5}), bias({4});
  Tensor y({4, 5});
  KernelRunner op(OpCode::BiasAdd);
  op.In(x).In(bias).Out(y).Axis(1);
  ExpectPrepareError(op, "BiasAdd", {"input 1 has shape [4], expected [C=5] (axis 1 of input 0 [4,5])"});
  Tensor db({4});
  KernelRunner grad(OpCode::BiasAddGrad);
  grad.In(x).Out(db).Axis(1);
  ExpectPrepareError(grad, "BiasAddGrad", {"output 0 has shape [4], expected [C=5]"});
  KernelRunner axis0(OpCode::BiasAdd);
  axis0.In(x).In(bias).Out(y).Axis(0);
  ExpectPrepareError(axis0, "BiasAdd", {"axis is 0, expected 1 (the channel axis of [N, C, ...])"});
  const Tensor v({5});
  Tensor dv({5});
  KernelRunner rank1(OpCode::BiasAddGrad);
  rank1.In(v).Out(dv).Axis(1);
  ExpectPrepareError(rank1, "BiasAddGrad", {"input 0 has shape [5], expected rank >= 2"});
}

}  // namespace
}  // namespace sinkrt::device
