// The oneDNN-backed kernels: MatMul, Conv2D and its two backprops, max and
// average pooling and their gradients, each with fused bias/ReLU where the
// op takes them, against the float64 reference ops; plus their load-time
// validation.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "support/kernel_runner.h"
#include "support/reference_ops.h"

namespace sinkrt::device {
namespace {

using namespace ::sinkrt::testing;
using fb::OpCode;
using Tensor = KernelTensor;

//===--- MatMul -------------------------------------------------------------===//

TEST(MatMulKernel, TransposesBiasAndReluMatchReference) {
  struct Dims {
    int64_t m, k, n;
  };
  for (const Dims d : {Dims{1, 1, 1}, Dims{3, 5, 4}, Dims{64, 33, 17}, Dims{16, 784, 10}}) {
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      for (int fuse = 0; fuse < 3; ++fuse) {  // none, bias, bias + relu
        const Tensor a = RandomTensor(ta ? Shape{d.k, d.m} : Shape{d.m, d.k}, 91);
        const Tensor b = RandomTensor(tb ? Shape{d.n, d.k} : Shape{d.k, d.n}, 92);
        const Tensor bias = RandomTensor({d.n}, 93);
        Tensor y({d.m, d.n});
        KernelRunner op(OpCode::MatMul);
        op.In(a).In(b).Out(y).MatMulOpts(ta, tb);
        if (fuse >= 1) op.Bias(bias);
        if (fuse == 2) op.Relu();
        op.PrepareAndRun();
        RefTensor want = RefMatMul(ToRef(a), ToRef(b), ta, tb);
        if (fuse >= 1) want = RefBiasAdd(want, ToRef(bias), 1);
        if (fuse == 2) want = RefRelu(want);
        ExpectClose(y, want, 1e-4, 1e-5,
                    "MatMul " + std::to_string(d.m) + "x" + std::to_string(d.k) + "x" + std::to_string(d.n) + " t" +
                        std::to_string(t) + " fuse" + std::to_string(fuse));
      }
    }
  }
}

TEST(MatMulKernel, PrepareNamesTheMismatch) {
  const Tensor a({64, 256}), b({784, 512}), b_ok({256, 10}), bias({11});
  Tensor y({64, 512}), y10({64, 10});
  KernelRunner op(OpCode::MatMul);
  op.In(a).In(b).Out(y).MatMulOpts(false, false);
  ExpectPrepareError(op, "MatMul", {"input 1 has shape [784,512], expected [K=256, N] for a [64,256] input 0"});
  KernelRunner tb(OpCode::MatMul);
  tb.In(a).In(b_ok).Out(y10).MatMulOpts(false, true);
  ExpectPrepareError(tb, "MatMul", {"expected [N, K=256] (transpose_b)"});
  KernelRunner out(OpCode::MatMul);
  out.In(a).In(b_ok).Out(y).MatMulOpts(false, false);
  ExpectPrepareError(out, "MatMul", {"output 0 has shape [64,512], expected [M=64, N=10]"});
  KernelRunner fb_bias(OpCode::MatMul);
  fb_bias.In(a).In(b_ok).Out(y10).MatMulOpts(false, false).Bias(bias);
  ExpectPrepareError(fb_bias, "MatMul", {"fused bias has shape [11], expected [N=10]"});
  const Tensor a3({2, 3, 4});
  KernelRunner rank(OpCode::MatMul);
  rank.In(a3).In(b_ok).Out(y10).MatMulOpts(false, false);
  ExpectPrepareError(rank, "MatMul", {"input 0 has shape [2,3,4], expected 2-D [M, K]"});
  KernelRunner no_opts(OpCode::MatMul);
  no_opts.In(a).In(b_ok).Out(y10);
  ExpectPrepareError(no_opts, "MatMul", {"expected MatMulOptions"});
  KernelRunner no_dnnl(OpCode::MatMul);
  no_dnnl.In(a).In(b_ok).Out(y10).MatMulOpts(false, false).NoDnnl();
  ExpectPrepareError(no_dnnl, "MatMul", {"no oneDNN runtime"}, StatusCode::kFailedPrecondition);
}

//===--- Convolution ----------------------------------------------------------===//

struct ConvCase {
  Shape x, w;
  ConvParams p;
};
const std::vector<ConvCase> kConvCases = {
    {{2, 3, 7, 7}, {4, 3, 3, 3}, {1, 1, 1, 1, 1, 1, 1, 1}},
    {{2, 3, 8, 9}, {5, 3, 3, 3}, {2, 2, 1, 1, 1, 1, 1, 1}},    // stride 2, pad 1
    {{1, 2, 9, 8}, {3, 2, 3, 2}, {2, 1, 0, 1, 1, 0, 1, 1}},    // asymmetric pads
    {{1, 2, 9, 9}, {2, 2, 3, 3}, {1, 1, 2, 2, 2, 2, 2, 2}},    // dilation 2
    {{3, 4, 5, 5}, {6, 4, 1, 1}, {1, 1, 0, 0, 0, 0, 1, 1}},    // 1x1
    {{2, 1, 28, 28}, {6, 1, 5, 5}, {1, 1, 2, 2, 2, 2, 1, 1}},  // LeNet conv1
};

TEST(ConvKernels, ForwardWithFusedBiasAndRelu) {
  for (const ConvCase& cc : kConvCases) {
    for (int fuse = 0; fuse < 3; ++fuse) {
      const Tensor x = RandomTensor(cc.x, 101), w = RandomTensor(cc.w, 102), bias = RandomTensor({cc.w[0]}, 103);
      RefTensor want = RefConv2D(ToRef(x), ToRef(w), ToRefWindow(cc.p));
      Tensor y(want.shape);
      KernelRunner op(OpCode::Conv2D);
      op.In(x).In(w).Out(y).Conv(cc.p);
      if (fuse >= 1) op.Bias(bias);
      if (fuse == 2) op.Relu();
      op.PrepareAndRun();
      if (fuse >= 1) want = RefBiasAdd(want, ToRef(bias), 1);
      if (fuse == 2) want = RefRelu(want);
      ExpectClose(y, want, 1e-4, 1e-5, "Conv2D " + ShapeToString(cc.x) + " fuse" + std::to_string(fuse));
    }
  }
}

TEST(ConvKernels, BackpropInputAndFilter) {
  for (const ConvCase& cc : kConvCases) {
    const RefWindow win = ToRefWindow(cc.p);
    const Tensor x = RandomTensor(cc.x, 111), w = RandomTensor(cc.w, 112);
    const Tensor dy = RandomTensor(RefConv2D(ToRef(x), ToRef(w), win).shape, 113);
    Tensor dx(cc.x), dw(cc.w);
    KernelRunner(OpCode::Conv2DBackpropInput).In(dy).In(w).Out(dx).Conv(cc.p).PrepareAndRun();
    KernelRunner(OpCode::Conv2DBackpropFilter).In(dy).In(x).Out(dw).Conv(cc.p).PrepareAndRun();
    ExpectClose(dx, RefConv2DBackpropInput(ToRef(dy), ToRef(w), cc.x, win), 1e-4, 1e-5,
                "Conv2DBackpropInput " + ShapeToString(cc.x));
    ExpectClose(dw, RefConv2DBackpropFilter(ToRef(dy), ToRef(x), cc.w, win), 1e-4, 1e-4,
                "Conv2DBackpropFilter " + ShapeToString(cc.x));
  }
}

TEST(ConvKernels, PrepareNamesTheMismatch) {
  const Tensor x({2, 3, 8, 8}), w({4, 2, 3, 3}), w_ok({4, 3, 3, 3}), bias({5});
  Tensor y({2, 4, 6, 6}), y_bad({2, 4, 8, 8});
  KernelRunner chans(OpCode::Conv2D);
  chans.In(x).In(w).Out(y).Conv({});
  ExpectPrepareError(chans, "Conv2D",
                     {"input 1 has shape [4,2,3,3], expected [O, C=3, KH, KW] for a [2,3,8,8] input 0"});
  KernelRunner out(OpCode::Conv2D);
  out.In(x).In(w_ok).Out(y_bad).Conv({});
  ExpectPrepareError(out, "Conv2D", {"output 0 has shape [2,4,8,8], expected [N=2, O=4, OH=6, OW=6]"});
  KernelRunner stride(OpCode::Conv2D);
  stride.In(x).In(w_ok).Out(y).Conv({0, 1});
  ExpectPrepareError(stride, "Conv2D", {"strides (0, 1) must be ≥ 1"});
  KernelRunner b(OpCode::Conv2D);
  b.In(x).In(w_ok).Out(y).Conv({}).Bias(bias);
  ExpectPrepareError(b, "Conv2D", {"fused bias has shape [5], expected [O=4]"});
  Tensor dx({2, 3, 9, 9});
  KernelRunner bi(OpCode::Conv2DBackpropInput);
  bi.In(y).In(w_ok).Out(dx).Conv({});
  ExpectPrepareError(bi, "Conv2DBackpropInput", {"input 0 has shape [2,4,6,6], expected [N=2, O=4, OH=7, OW=7]"});
  KernelRunner bf_fuse(OpCode::Conv2DBackpropFilter);
  Tensor dw({4, 3, 3, 3});
  bf_fuse.In(y).In(x).Out(dw).Conv({}).Relu();
  ExpectPrepareError(bf_fuse, "Conv2DBackpropFilter", {"does not take a fused bias or activation"});
}

//===--- Pooling --------------------------------------------------------------===//

struct PoolCase {
  Shape x;
  PoolParams p;
};
const std::vector<PoolCase> kPoolCases = {
    {{2, 3, 8, 8}, {2, 2, 2, 2, 0, 0, 0, 0}},
    {{1, 2, 7, 9}, {3, 3, 2, 2, 1, 1, 1, 1}},  // padding 1
    {{2, 2, 6, 5}, {3, 2, 1, 2, 0, 2, 1, 0}},  // asymmetric padding
    {{1, 1, 5, 5}, {5, 5, 1, 1, 0, 0, 0, 0}},  // global
};

TEST(PoolKernels, MaxPoolForwardAndGradThroughWorkspace) {
  for (const PoolCase& pc : kPoolCases) {
    const RefWindow win = ToRefWindow(pc.p);
    // Negative inputs: a padded zero must never win the max.
    const Tensor x = RandomTensor(pc.x, 121, -2.0f, -1.0f);
    const RefTensor want_y = RefMaxPool2D(ToRef(x), win);
    Tensor y(want_y.shape), ws({4 * NumElements(want_y.shape)}, DType::U8);
    KernelRunner(OpCode::MaxPool2D).In(x).Out(y).Out(ws).Pool(pc.p).PrepareAndRun();
    const Tensor dy = RandomTensor(y.shape(), 122);
    Tensor dx(pc.x);
    KernelRunner(OpCode::MaxPool2DGrad).In(dy).In(x).In(ws).Out(dx).Pool(pc.p).PrepareAndRun();
    ExpectClose(y, want_y, 0, 0, "MaxPool2D " + ShapeToString(pc.x));
    ExpectClose(dx, RefMaxPool2DGrad(ToRef(dy), ToRef(x), win), 1e-6, 1e-6, "MaxPool2DGrad " + ShapeToString(pc.x));
  }
}

TEST(PoolKernels, AvgPoolExcludesPadding) {
  for (const PoolCase& pc : kPoolCases) {
    const RefWindow win = ToRefWindow(pc.p);
    const Tensor x = RandomTensor(pc.x, 131);
    const RefTensor want_y = RefAvgPool2D(ToRef(x), win);
    Tensor y(want_y.shape);
    KernelRunner(OpCode::AvgPool2D).In(x).Out(y).Pool(pc.p).PrepareAndRun();
    const Tensor dy = RandomTensor(y.shape(), 132);
    Tensor dx(pc.x);
    KernelRunner(OpCode::AvgPool2DGrad).In(dy).Out(dx).Pool(pc.p).PrepareAndRun();
    ExpectClose(y, want_y, 1e-5, 1e-6, "AvgPool2D " + ShapeToString(pc.x));
    ExpectClose(dx, RefAvgPool2DGrad(ToRef(dy), pc.x, win), 1e-5, 1e-6, "AvgPool2DGrad " + ShapeToString(pc.x));
  }
}

TEST(PoolKernels, PrepareChecksWorkspaceAndGeometry) {
  const Tensor x({1, 2, 8, 8});
  Tensor y({1, 2, 4, 4}), ws({128}, DType::U8), ws_f32({128}), ws_small({64}, DType::U8);
  const PoolParams p{2, 2, 2, 2, 0, 0, 0, 0};
  KernelRunner type(OpCode::MaxPool2D);
  type.In(x).Out(y).Out(ws_f32).Pool(p);
  ExpectPrepareError(type, "MaxPool2D", {"output 1 has dtype f32, expected u8"});
  KernelRunner small(OpCode::MaxPool2D);
  small.In(x).Out(y).Out(ws_small).Pool(p);
  ExpectPrepareError(small, "MaxPool2D", {"output 1 has shape [64], expected [128] (4 bytes per element of y)"});
  KernelRunner pad(OpCode::AvgPool2D);
  pad.In(x).Out(y).Pool({2, 2, 2, 2, 2, 0, 0, 0});
  ExpectPrepareError(pad, "AvgPool2D", {"smaller than the kernel"});
  Tensor y_bad({1, 2, 3, 3});
  KernelRunner out(OpCode::AvgPool2D);
  out.In(x).Out(y_bad).Pool(p);
  ExpectPrepareError(out, "AvgPool2D", {"output 0 has shape [1,2,3,3], expected [N=1, C=2, OH=4, OW=4]"});
  Tensor dx({1, 2, 8, 8});
  const Tensor x_bad({1, 2, 8, 9});
  KernelRunner grad(OpCode::MaxPool2DGrad);
  grad.In(y).In(x_bad).In(ws).Out(dx).Pool(p);
  ExpectPrepareError(grad, "MaxPool2DGrad", {"input 1 has shape [1,2,8,9], expected [1,2,8,8] like output 0"});
  KernelRunner ok(OpCode::MaxPool2D);
  ok.In(x).Out(y).Out(ws).Pool(p);
  EXPECT_TRUE(ok.Prepare().ok());
}

}  // namespace
}  // namespace sinkrt::device
