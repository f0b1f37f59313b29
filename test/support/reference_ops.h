// Float64 reference ops: the forward of every differentiable op (for the
// gradient checks) and the ops and gradients the kernel tests compare the
// device kernels against (test/kernels_*_test.cc).
//
// Deliberately naive (nested loops, no blocking, no shared code with the
// device kernels or the host's shape inference) so that an error in either
// cannot hide in both. Semantics follow docs/reference/ops.md. Misuse (mismatched
// shapes) throws std::invalid_argument: this is test code, and GoogleTest
// reports the exception as a failure of the test that made it.
#pragma once

#include <cstdint>
#include <vector>

#include "sinkrt/runtime/dtype.h"

namespace sinkrt::testing {

struct RefTensor {
  Shape shape;
  std::vector<double> data;  // row-major

  RefTensor() = default;
  RefTensor(Shape s, std::vector<double> d);  // checks data.size() against the shape
  static RefTensor Zeros(Shape s);
  int64_t size() const { return static_cast<int64_t>(data.size()); }
};

// a [M,K] (or [K,M] with transpose_a) · b [K,N] (or [N,K] with transpose_b).
RefTensor RefMatMul(const RefTensor& a, const RefTensor& b, bool transpose_a, bool transpose_b);
// bias [C] added along `axis` of x.
RefTensor RefBiasAdd(const RefTensor& x, const RefTensor& bias, int axis);
// NumPy broadcasting.
RefTensor RefAdd(const RefTensor& a, const RefTensor& b);
RefTensor RefSub(const RefTensor& a, const RefTensor& b);
RefTensor RefMul(const RefTensor& a, const RefTensor& b);
RefTensor RefDiv(const RefTensor& a, const RefTensor& b);
RefTensor RefMaximum(const RefTensor& a, const RefTensor& b);  // NaN where either is
RefTensor RefMinimum(const RefTensor& a, const RefTensor& b);
RefTensor RefPow(const RefTensor& a, const RefTensor& b);

RefTensor RefRelu(const RefTensor& x);
RefTensor RefGelu(const RefTensor& x);     // tanh approximation
RefTensor RefGeluErf(const RefTensor& x);  // exact: x/2 (1 + erf(x / sqrt 2))
RefTensor RefErf(const RefTensor& x);
RefTensor RefTanh(const RefTensor& x);
RefTensor RefSigmoid(const RefTensor& x);
RefTensor RefNeg(const RefTensor& x);
// Unary math, IEEE at the domain edges (log(0) = -inf, sqrt(-1) = NaN).
RefTensor RefExp(const RefTensor& x);
RefTensor RefLog(const RefTensor& x);
RefTensor RefSqrt(const RefTensor& x);
RefTensor RefRsqrt(const RefTensor& x);
RefTensor RefSquare(const RefTensor& x);
RefTensor RefAbs(const RefTensor& x);
RefTensor RefSoftmax(const RefTensor& x, int axis);
RefTensor RefLogSoftmax(const RefTensor& x, int axis);
// Scalar: mean over rows of -log softmax(logits)[n, labels[n]].
RefTensor RefSparseSoftmaxCrossEntropy(const RefTensor& logits, const std::vector<int32_t>& labels);

// axes may be negative; empty reduces every axis.
RefTensor RefReduceSum(const RefTensor& x, std::vector<int> axes, bool keep_dims);
RefTensor RefReduceMean(const RefTensor& x, std::vector<int> axes, bool keep_dims);
// Max over axes (empty: all); NaN if any reduced element is; -inf if none.
RefTensor RefReduceMax(const RefTensor& x, std::vector<int> axes, bool keep_dims);
// cond != 0 ? x : y (NaN counts as true), the three broadcast together.
RefTensor RefSelect(const RefTensor& cond, const RefTensor& x, const RefTensor& y);
// x [..., T, S] with (i, j) of the last two dims set to `fill` where j > i + S - T.
RefTensor RefCausalMask(const RefTensor& x, double fill);
// One dim may be -1.
RefTensor RefReshape(const RefTensor& x, Shape shape);
RefTensor RefFlatten(const RefTensor& x);  // [N, ...] -> [N, prod(...)]
// scale * x broadcast (NumPy rules, right-aligned) to `shape`; x's rank must
// not exceed the shape's.
RefTensor RefBroadcastTo(const RefTensor& x, const Shape& shape, double scale = 1.0);
// The inverse of broadcasting: sums x into `shape`, which broadcasts to x.
RefTensor RefSumToShape(const RefTensor& x, const Shape& shape);

struct RefWindow {
  int kernel_h = 1, kernel_w = 1;  // pools only; convolutions take it from w
  int stride_h = 1, stride_w = 1;
  int pad_top = 0, pad_bottom = 0, pad_left = 0, pad_right = 0;
  int dilation_h = 1, dilation_w = 1;  // convolutions only

  static RefWindow Square(int kernel, int stride, int pad);
};

// x [N,C,H,W], w [O,C,KH,KW] -> [N,O,OH,OW].
RefTensor RefConv2D(const RefTensor& x, const RefTensor& w, const RefWindow& win);
// Padding never wins the max, nor counts in the average.
RefTensor RefMaxPool2D(const RefTensor& x, const RefWindow& win);
RefTensor RefAvgPool2D(const RefTensor& x, const RefWindow& win);

// Gradients of the windowed ops (docs/reference/ops.md), straight from the forward's
// taps: dx of a convolution of an `x_shape` input, dw of a `w_shape` filter.
RefTensor RefConv2DBackpropInput(const RefTensor& dy, const RefTensor& w, const Shape& x_shape, const RefWindow& win);
RefTensor RefConv2DBackpropFilter(const RefTensor& dy, const RefTensor& x, const Shape& w_shape, const RefWindow& win);
// dy flows to the first maximum of each window (ties: the earliest element).
RefTensor RefMaxPool2DGrad(const RefTensor& dy, const RefTensor& x, const RefWindow& win);
// dy spreads evenly over each window's in-bounds elements.
RefTensor RefAvgPool2DGrad(const RefTensor& dy, const Shape& x_shape, const RefWindow& win);

// LayerNorm over the last axis of x [..., D]: (x − mean)·rstd·gamma + beta,
// rstd = 1/√(var + epsilon), biased variance. `mean` and `rstd` (when given)
// receive the per-row statistics, shape [rows].
RefTensor RefLayerNorm(const RefTensor& x, const RefTensor& gamma, const RefTensor& beta, double epsilon,
                       RefTensor* mean = nullptr, RefTensor* rstd = nullptr);
struct RefLayerNormGrads {
  RefTensor dx, dgamma, dbeta;
};
// The gradients of RefLayerNorm at x for output gradient dy.
RefLayerNormGrads RefLayerNormGrad(const RefTensor& dy, const RefTensor& x, const RefTensor& gamma, double epsilon);
// BatchNorm in training over channel axis 1 of x [N, C, ...]: per channel
// the mean and biased variance over N and the spatial dims,
// y = (x − mean)/√(var + epsilon)·gamma + beta. The moving statistics
// become momentum·moving + (1 − momentum)·batch, the variance's batch value
// unbiased (M/(M − 1), M the elements per channel).
struct RefBatchNormOut {
  RefTensor y, mean, rstd, moving_mean, moving_variance;
};
RefBatchNormOut RefBatchNormTrain(const RefTensor& x, const RefTensor& gamma, const RefTensor& beta,
                                  const RefTensor& moving_mean, const RefTensor& moving_variance, double epsilon,
                                  double momentum);
// BatchNorm in eval: y = (x − moving_mean)/√(moving_variance + epsilon)·gamma + beta.
RefTensor RefBatchNormInfer(const RefTensor& x, const RefTensor& gamma, const RefTensor& beta,
                            const RefTensor& moving_mean, const RefTensor& moving_variance, double epsilon);
struct RefBatchNormGrads {
  RefTensor dx, dgamma, dbeta;
};
// The gradients of RefBatchNormTrain's y at x for output gradient dy.
RefBatchNormGrads RefBatchNormGrad(const RefTensor& dy, const RefTensor& x, const RefTensor& gamma, double epsilon);
// Rows of table [V, ...] at `indices` (any shape `indices_shape`):
// [indices_shape..., table dims after 0].
RefTensor RefGather(const RefTensor& table, const std::vector<int32_t>& indices, const Shape& indices_shape);
// The zero table of `table_shape` with each dy row added at its index.
RefTensor RefGatherGrad(const RefTensor& dy, const std::vector<int32_t>& indices, const Shape& table_shape);
// OneHot: indices [I...] -> [I...] with a new axis of `depth` at `axis`
// (-1: last); on where the position equals the index, off elsewhere (an
// index outside [0, depth) gives all off).
RefTensor RefOneHot(const std::vector<int32_t>& indices, const Shape& indices_shape, int64_t depth, double on,
                    double off, int axis);
// Pad: `paddings` (before, after) per axis; mode 0 constant (`value`), 1
// reflect (edge not repeated), 2 symmetric (edge repeated).
RefTensor RefPad(const RefTensor& x, const std::vector<int64_t>& paddings, int mode, double value);
// Pad's gradient: every x element sums the dy elements that read it.
RefTensor RefPadGrad(const RefTensor& dy, const Shape& x_shape, const std::vector<int64_t>& paddings, int mode);
// The bf16 value nearest to float `x` (ties to even), as a double; overflow
// gives ±inf and NaN stays NaN. Written with frexp/nearbyint, not bit tricks.
double RefRoundToBf16(double x);

// Σ y·r over every element: the scalar loss a gradient check differentiates.
double RefWeightedSum(const RefTensor& y, const RefTensor& r);

}  // namespace sinkrt::testing
