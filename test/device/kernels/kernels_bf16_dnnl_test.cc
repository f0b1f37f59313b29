// bf16 in the oneDNN-backed kernels (MatMul, BatchMatMul, Conv2D and its
// backprops, max and average pooling and their gradients), against the same
// kernels run in f32 on the same values.
//
// Inputs are rounded to bf16 first, so both runs see identical values and
// every product is exact in f32 (8-bit significands): the f32-output bf16 run
// then differs from the f32 run only by summation order (~1e-5 relative),
// and a bf16 output by one rounding of that (≤ 2^-8 relative, checked at
// 2^-7). Plus the dtype refusals and their messages.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "device/src/kernels/dnnl_kernel.h"
#include "runtime/src/bf16.h"
#include "support/kernel_runner.h"

namespace sinkrt::device {
namespace {

using namespace ::sinkrt::testing;
using fb::OpCode;
using Tensor = KernelTensor;

constexpr double kBf16Rtol = 1.0 / 128;  // 2^-7: one bf16 ulp, relative
constexpr double kF32Rtol = 1e-5;

// Uniform values in [lo, hi), rounded to bf16 but stored as f32.
Tensor Bf16Values(Shape shape, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  Tensor t = RandomTensor(std::move(shape), seed, lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t[i] = Bf16ToFloat(FloatToBf16(t[i]));
  return t;
}

// `f` (bf16-representable f32 values) as a bf16 tensor.
Tensor ToBf16(const Tensor& f) {
  Tensor h(f.shape(), DType::BF16);
  auto* p = reinterpret_cast<uint16_t*>(h.bytes());
  for (int64_t i = 0; i < f.numel(); ++i) {
    p[i] = FloatToBf16(f[i]);
    EXPECT_EQ(Bf16ToFloat(p[i]), f[i]) << "not a bf16 value at " << i;
  }
  return h;
}

// `f` converted to `dtype` (f32: a copy).
Tensor As(const Tensor& f, DType dtype) {
  if (dtype == DType::BF16) return ToBf16(f);
  Tensor c(f.shape());
  c.set(f.values());
  return c;
}

std::vector<float> Values(const Tensor& t) {
  if (t.dtype() == DType::F32) return t.values();
  std::vector<float> v(t.numel());
  const auto* p = reinterpret_cast<const uint16_t*>(t.bytes());
  for (int64_t i = 0; i < t.numel(); ++i) v[i] = Bf16ToFloat(p[i]);
  return v;
}

// `got` (bf16 or f32) against the f32 kernel's `want`: relative 2^-7 for
// bf16, 1e-5 for f32, plus 1e-6·max|want| for the summation-order
// difference, which does not shrink with a result that cancels to near zero.
void ExpectMatchesF32(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const double rtol = got.dtype() == DType::BF16 ? kBf16Rtol : kF32Rtol;
  const std::vector<float> g = Values(got), w = want.values();
  double scale = 0;
  for (float v : w) scale = std::max(scale, std::fabs(double(v)));
  int misses = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double err = std::fabs(double(g[i]) - w[i]);
    if (err <= rtol * std::fabs(double(w[i])) + 1e-6 * scale) continue;
    if (++misses <= 5) ADD_FAILURE() << what << ": [" << i << "] got " << g[i] << ", f32 " << w[i];
  }
  EXPECT_EQ(misses, 0) << what << ": " << misses << " of " << g.size() << " outside tolerance";
}

const char* Name(DType t) { return DTypeName(t); }

//===--- MatMul -------------------------------------------------------------===//

TEST(Bf16MatMulKernel, MatchesF32WithTransposesBiasAndRelu) {
  struct Dims {
    int64_t m, k, n;
  };
  for (const Dims d : {Dims{1, 1, 1}, Dims{3, 5, 4}, Dims{64, 33, 17}, Dims{16, 784, 10}}) {
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      const Tensor a = Bf16Values(ta ? Shape{d.k, d.m} : Shape{d.m, d.k}, 201);
      const Tensor b = Bf16Values(tb ? Shape{d.n, d.k} : Shape{d.k, d.n}, 202);
      const Tensor bias = Bf16Values({d.n}, 203);
      const Tensor a16 = ToBf16(a), b16 = ToBf16(b);
      // fuse: none, f32 bias, bf16 bias, f32 bias + relu, bf16 bias + relu.
      for (int fuse = 0; fuse < 5; ++fuse) {
        const bool has_bias = fuse >= 1, relu = fuse >= 3;
        const DType bias_dt = (fuse == 2 || fuse == 4) ? DType::BF16 : DType::F32;
        Tensor want({d.m, d.n});
        KernelRunner ref(OpCode::MatMul);
        ref.In(a).In(b).Out(want).MatMulOpts(ta, tb);
        if (has_bias) ref.Bias(bias);
        if (relu) ref.Relu();
        ref.PrepareAndRun();
        const Tensor bias_in = As(bias, bias_dt);
        for (DType out : {DType::BF16, DType::F32}) {
          Tensor y({d.m, d.n}, out);
          KernelRunner op(OpCode::MatMul);
          op.In(a16).In(b16).Out(y).MatMulOpts(ta, tb);
          if (has_bias) op.Bias(bias_in);
          if (relu) op.Relu();
          op.PrepareAndRun();
          ExpectMatchesF32(y, want,
                           "MatMul " + std::to_string(d.m) + "x" + std::to_string(d.k) + "x" + std::to_string(d.n) +
                               " t" + std::to_string(t) + " fuse" + std::to_string(fuse) + " -> " + Name(out));
        }
      }
    }
  }
}

TEST(Bf16MatMulKernel, RefusesMixedAndNonFloatDTypes) {
  const Tensor a({4, 8}), b({8, 3}), a16({4, 8}, DType::BF16), b16({8, 3}, DType::BF16);
  const Tensor ai({4, 8}, DType::I32), bias({3}), bias16({3}, DType::BF16), biasi({3}, DType::I32);
  Tensor y({4, 3}), y16({4, 3}, DType::BF16), yi({4, 3}, DType::I32);
  KernelRunner mixed(OpCode::MatMul);
  mixed.In(a16).In(b).Out(y).MatMulOpts(false, false);
  ExpectPrepareError(mixed, "MatMul", {"input 1 has dtype f32, expected bf16 (as input 0)"});
  KernelRunner mixed2(OpCode::MatMul);
  mixed2.In(a).In(b16).Out(y).MatMulOpts(false, false);
  ExpectPrepareError(mixed2, "MatMul", {"input 1 has dtype bf16, expected f32 (as input 0)"});
  KernelRunner i32(OpCode::MatMul);
  i32.In(ai).In(b).Out(y).MatMulOpts(false, false);
  ExpectPrepareError(i32, "MatMul", {"input 0 has dtype i32, expected f32 or bf16"});
  // f32 sources keep the f32 path: no narrowing output or bias.
  KernelRunner narrow(OpCode::MatMul);
  narrow.In(a).In(b).Out(y16).MatMulOpts(false, false);
  ExpectPrepareError(narrow, "MatMul", {"output 0 has dtype bf16, expected f32"});
  KernelRunner narrow_bias(OpCode::MatMul);
  narrow_bias.In(a).In(b).Out(y).MatMulOpts(false, false).Bias(bias16);
  ExpectPrepareError(narrow_bias, "MatMul", {"fused bias has dtype bf16, expected f32"});
  KernelRunner out_i32(OpCode::MatMul);
  out_i32.In(a16).In(b16).Out(yi).MatMulOpts(false, false);
  ExpectPrepareError(out_i32, "MatMul", {"output 0 has dtype i32, expected f32 or bf16"});
  KernelRunner bias_i32(OpCode::MatMul);
  bias_i32.In(a16).In(b16).Out(y16).MatMulOpts(false, false).Bias(biasi);
  ExpectPrepareError(bias_i32, "MatMul", {"fused bias has dtype i32, expected f32 or bf16"});
  // The accepted combinations prepare.
  KernelRunner ok(OpCode::MatMul);
  ok.In(a16).In(b16).Out(y).MatMulOpts(false, false).Bias(bias);
  EXPECT_TRUE(ok.Prepare().ok());
}

//===--- BatchMatMul ----------------------------------------------------------===//

TEST(Bf16BatchMatMulKernel, MatchesF32WithBroadcastBatchDims) {
  struct Case {
    Shape a, b;
    bool ta, tb;
  };
  const std::vector<Case> cases = {
      {{4, 16, 16}, {4, 16, 16}, false, false},    // f32 takes the hand kernel
      {{2, 3, 8, 16}, {16, 8}, false, false},      // b broadcast (missing dims)
      {{2, 1, 5, 7}, {1, 3, 7, 6}, false, false},  // both broadcast
      {{2, 1, 7, 5}, {3, 6, 7}, true, true},       // transposes, rank mismatch
      {{3, 64, 72}, {1, 72, 80}, false, false},    // f32 takes oneDNN
      {{2, 2, 40, 9}, {2, 1, 33, 40}, true, true},
  };
  uint32_t seed = 300;
  for (const Case& c : cases) {
    const Tensor a = Bf16Values(c.a, ++seed), b = Bf16Values(c.b, ++seed);
    const int rank = static_cast<int>(std::max(c.a.size(), c.b.size()));
    Shape ys(rank);
    for (int d = 0; d < rank - 2; ++d) {
      const int da = d - (rank - int(c.a.size())), db = d - (rank - int(c.b.size()));
      ys[d] = std::max(da >= 0 ? c.a[da] : 1, db >= 0 ? c.b[db] : 1);
    }
    ys[rank - 2] = c.ta ? c.a.back() : c.a[c.a.size() - 2];
    ys[rank - 1] = c.tb ? c.b[c.b.size() - 2] : c.b.back();
    Tensor want(ys);
    KernelRunner(OpCode::BatchMatMul).In(a).In(b).Out(want).MatMulOpts(c.ta, c.tb).PrepareAndRun();
    for (DType out : {DType::BF16, DType::F32}) {
      Tensor y(ys, out);
      KernelRunner(OpCode::BatchMatMul).In(ToBf16(a)).In(ToBf16(b)).Out(y).MatMulOpts(c.ta, c.tb).PrepareAndRun();
      ExpectMatchesF32(y, want,
                       "BatchMatMul " + ShapeToString(c.a) + (c.ta ? "T" : "") + " x " + ShapeToString(c.b) +
                           (c.tb ? "T" : "") + " -> " + Name(out));
    }
  }
}

TEST(Bf16BatchMatMulKernel, RefusesMixedAndNonFloatDTypes) {
  const Tensor a({2, 4, 8}), b16({2, 8, 3}, DType::BF16), a16({2, 4, 8}, DType::BF16);
  const Tensor ai({2, 4, 8}, DType::I32), bi({2, 8, 3}, DType::I32);
  const Tensor b({2, 8, 3});
  Tensor y({2, 4, 3}), y16({2, 4, 3}, DType::BF16);
  KernelRunner mixed(OpCode::BatchMatMul);
  mixed.In(a).In(b16).Out(y).MatMulOpts(false, false);
  ExpectPrepareError(mixed, "BatchMatMul", {"input 1 has dtype bf16, expected f32 (as input 0)"});
  KernelRunner i32(OpCode::BatchMatMul);
  i32.In(ai).In(bi).Out(y).MatMulOpts(false, false);
  ExpectPrepareError(i32, "BatchMatMul", {"input 0 has dtype i32, expected f32 or bf16"});
  KernelRunner narrow(OpCode::BatchMatMul);
  narrow.In(a).In(b).Out(y16).MatMulOpts(false, false);
  ExpectPrepareError(narrow, "BatchMatMul", {"output 0 has dtype bf16, expected f32"});
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
    {{2, 16, 10, 10}, {32, 16, 3, 3}, {1, 1, 1, 1, 1, 1, 1, 1}},
};

Shape ConvOut(const ConvCase& cc) {
  return RefConv2D(RefTensor(cc.x, std::vector<double>(NumElements(cc.x))),
                   RefTensor(cc.w, std::vector<double>(NumElements(cc.w))), ToRefWindow(cc.p))
      .shape;
}

TEST(Bf16ConvKernels, ForwardWithFusedBiasAndReluMatchesF32) {
  for (const ConvCase& cc : kConvCases) {
    const Tensor x = Bf16Values(cc.x, 401), w = Bf16Values(cc.w, 402);
    const Tensor bias = Bf16Values({cc.w[0]}, 403);
    const Tensor x16 = ToBf16(x), w16 = ToBf16(w);
    const Shape ys = ConvOut(cc);
    for (int fuse = 0; fuse < 5; ++fuse) {  // as in the MatMul test
      const bool has_bias = fuse >= 1, relu = fuse >= 3;
      const Tensor bias_in = As(bias, (fuse == 2 || fuse == 4) ? DType::BF16 : DType::F32);
      Tensor want(ys);
      KernelRunner ref(OpCode::Conv2D);
      ref.In(x).In(w).Out(want).Conv(cc.p);
      if (has_bias) ref.Bias(bias);
      if (relu) ref.Relu();
      ref.PrepareAndRun();
      for (DType out : {DType::BF16, DType::F32}) {
        Tensor y(ys, out);
        KernelRunner op(OpCode::Conv2D);
        op.In(x16).In(w16).Out(y).Conv(cc.p);
        if (has_bias) op.Bias(bias_in);
        if (relu) op.Relu();
        op.PrepareAndRun();
        ExpectMatchesF32(y, want,
                         "Conv2D " + ShapeToString(cc.x) + "*" + ShapeToString(cc.w) + " fuse" + std::to_string(fuse) +
                             " -> " + Name(out));
      }
    }
  }
}

TEST(Bf16ConvKernels, BackpropInputAndFilterMatchF32) {
  for (const ConvCase& cc : kConvCases) {
    const Tensor x = Bf16Values(cc.x, 411), w = Bf16Values(cc.w, 412);
    const Tensor dy = Bf16Values(ConvOut(cc), 413);
    Tensor want_dx(cc.x), want_dw(cc.w);
    KernelRunner(OpCode::Conv2DBackpropInput).In(dy).In(w).Out(want_dx).Conv(cc.p).PrepareAndRun();
    KernelRunner(OpCode::Conv2DBackpropFilter).In(dy).In(x).Out(want_dw).Conv(cc.p).PrepareAndRun();
    const Tensor x16 = ToBf16(x), w16 = ToBf16(w), dy16 = ToBf16(dy);
    for (DType out : {DType::BF16, DType::F32}) {
      Tensor dx(cc.x, out), dw(cc.w, out);
      KernelRunner(OpCode::Conv2DBackpropInput).In(dy16).In(w16).Out(dx).Conv(cc.p).PrepareAndRun();
      KernelRunner(OpCode::Conv2DBackpropFilter).In(dy16).In(x16).Out(dw).Conv(cc.p).PrepareAndRun();
      ExpectMatchesF32(dx, want_dx, "Conv2DBackpropInput " + ShapeToString(cc.x) + " -> " + Name(out));
      ExpectMatchesF32(dw, want_dw, "Conv2DBackpropFilter " + ShapeToString(cc.x) + " -> " + Name(out));
    }
  }
}

TEST(Bf16ConvKernels, RefusesMixedAndNonFloatDTypes) {
  const Tensor x({2, 3, 8, 8}), x16({2, 3, 8, 8}, DType::BF16), xi({2, 3, 8, 8}, DType::I32);
  const Tensor w({4, 3, 3, 3}), w16({4, 3, 3, 3}, DType::BF16), bias16({4}, DType::BF16);
  Tensor y({2, 4, 6, 6}), y16({2, 4, 6, 6}, DType::BF16), yi({2, 4, 6, 6}, DType::I32);
  KernelRunner mixed(OpCode::Conv2D);
  mixed.In(x16).In(w).Out(y).Conv({});
  ExpectPrepareError(mixed, "Conv2D", {"input 1 has dtype f32, expected bf16 (as input 0)"});
  KernelRunner i32(OpCode::Conv2D);
  i32.In(xi).In(w).Out(y).Conv({});
  ExpectPrepareError(i32, "Conv2D", {"input 0 has dtype i32, expected f32 or bf16"});
  KernelRunner narrow_bias(OpCode::Conv2D);
  narrow_bias.In(x).In(w).Out(y).Conv({}).Bias(bias16);
  ExpectPrepareError(narrow_bias, "Conv2D", {"fused bias has dtype bf16, expected f32"});
  KernelRunner out_i32(OpCode::Conv2D);
  out_i32.In(x16).In(w16).Out(yi).Conv({});
  ExpectPrepareError(out_i32, "Conv2D", {"output 0 has dtype i32, expected f32 or bf16"});
  Tensor dx({2, 3, 8, 8}), dw16({4, 3, 3, 3}, DType::BF16);
  KernelRunner bi(OpCode::Conv2DBackpropInput);
  bi.In(y16).In(w).Out(dx).Conv({});
  ExpectPrepareError(bi, "Conv2DBackpropInput", {"input 1 has dtype f32, expected bf16 (as input 0)"});
  KernelRunner bf(OpCode::Conv2DBackpropFilter);
  bf.In(y).In(x).Out(dw16).Conv({});
  ExpectPrepareError(bf, "Conv2DBackpropFilter", {"output 0 has dtype bf16, expected f32"});
}

//===--- Pooling --------------------------------------------------------------===//

struct PoolCase {
  Shape x;
  PoolParams p;
};
const std::vector<PoolCase> kPoolCases = {
    {{2, 3, 8, 8}, {2, 2, 2, 2, 0, 0, 0, 0}},
    {{1, 2, 7, 9}, {3, 3, 2, 2, 1, 1, 1, 1}},  // padding 1, overlapping windows
    {{2, 2, 6, 5}, {3, 2, 1, 2, 0, 2, 1, 0}},  // asymmetric padding
    {{1, 1, 5, 5}, {5, 5, 1, 1, 0, 0, 0, 0}},  // global
    {{2, 16, 8, 8}, {3, 3, 2, 2, 1, 1, 1, 1}},
};

Shape PoolOut(const PoolCase& pc) {
  return RefMaxPool2D(RefTensor(pc.x, std::vector<double>(NumElements(pc.x))), ToRefWindow(pc.p)).shape;
}

// Negative bf16 values, distinct within each H×W plane (a shuffle of
// -(1 + j/128), j < 128), so that no window has a tied maximum whose
// argmax two implementations could pick differently.
Tensor DistinctNegative(const Shape& shape, uint32_t seed) {
  Tensor t(shape);
  const int64_t plane = shape[2] * shape[3];
  EXPECT_LE(plane, 128);
  std::mt19937 rng(seed);
  std::vector<int> j(128);
  for (int64_t p = 0; p < t.numel() / plane; ++p) {
    std::iota(j.begin(), j.end(), 0);
    std::shuffle(j.begin(), j.end(), rng);
    for (int64_t i = 0; i < plane; ++i) t[p * plane + i] = -(1.0f + j[i] / 128.0f);
  }
  return t;
}

TEST(Bf16PoolKernels, MaxPoolForwardAndGradMatchF32) {
  for (const PoolCase& pc : kPoolCases) {
    const Tensor x = DistinctNegative(pc.x, 501);
    const Shape ys = PoolOut(pc);
    const Tensor dy = Bf16Values(ys, 502);
    const Shape ws_shape{4 * NumElements(ys)};
    Tensor want_y(ys), want_dx(pc.x), ws(ws_shape, DType::U8);
    KernelRunner(OpCode::MaxPool2D).In(x).Out(want_y).Out(ws).Pool(pc.p).PrepareAndRun();
    KernelRunner(OpCode::MaxPool2DGrad).In(dy).In(x).In(ws).Out(want_dx).Pool(pc.p).PrepareAndRun();
    const Tensor x16 = ToBf16(x);
    Tensor y(ys, DType::BF16), dx(pc.x, DType::BF16), ws16(ws_shape, DType::U8);
    KernelRunner(OpCode::MaxPool2D).In(x16).Out(y).Out(ws16).Pool(pc.p).PrepareAndRun();
    KernelRunner(OpCode::MaxPool2DGrad).In(ToBf16(dy)).In(x16).In(ws16).Out(dx).Pool(pc.p).PrepareAndRun();
    // The maximum is one of the inputs: exact.
    EXPECT_EQ(Values(y), want_y.values()) << "MaxPool2D " << ShapeToString(pc.x);
    ExpectMatchesF32(dx, want_dx, "MaxPool2DGrad " + ShapeToString(pc.x));
  }
}

TEST(Bf16PoolKernels, AvgPoolForwardAndGradMatchF32) {
  for (const PoolCase& pc : kPoolCases) {
    const Tensor x = Bf16Values(pc.x, 511);
    const Shape ys = PoolOut(pc);
    const Tensor dy = Bf16Values(ys, 512);
    Tensor want_y(ys), want_dx(pc.x);
    KernelRunner(OpCode::AvgPool2D).In(x).Out(want_y).Pool(pc.p).PrepareAndRun();
    KernelRunner(OpCode::AvgPool2DGrad).In(dy).Out(want_dx).Pool(pc.p).PrepareAndRun();
    Tensor y(ys, DType::BF16), dx(pc.x, DType::BF16);
    KernelRunner(OpCode::AvgPool2D).In(ToBf16(x)).Out(y).Pool(pc.p).PrepareAndRun();
    KernelRunner(OpCode::AvgPool2DGrad).In(ToBf16(dy)).Out(dx).Pool(pc.p).PrepareAndRun();
    ExpectMatchesF32(y, want_y, "AvgPool2D " + ShapeToString(pc.x));
    ExpectMatchesF32(dx, want_dx, "AvgPool2DGrad " + ShapeToString(pc.x));
  }
}

TEST(Bf16PoolKernels, RefusesMixedAndNonFloatDTypes) {
  const PoolParams p{2, 2, 2, 2, 0, 0, 0, 0};
  const Tensor x({1, 2, 8, 8}), x16({1, 2, 8, 8}, DType::BF16), xi({1, 2, 8, 8}, DType::I32);
  Tensor y({1, 2, 4, 4}), y16({1, 2, 4, 4}, DType::BF16), ws({128}, DType::U8);
  Tensor ws16({128}, DType::BF16);
  Tensor dx({1, 2, 8, 8}), dx16({1, 2, 8, 8}, DType::BF16);
  KernelRunner max(OpCode::MaxPool2D);
  max.In(x16).Out(y).Out(ws).Pool(p);
  ExpectPrepareError(max, "MaxPool2D", {"output 0 has dtype f32, expected bf16 (as input 0)"});
  KernelRunner max_ws(OpCode::MaxPool2D);
  max_ws.In(x16).Out(y16).Out(ws16).Pool(p);
  ExpectPrepareError(max_ws, "MaxPool2D", {"output 1 has dtype bf16, expected u8"});
  KernelRunner max_grad(OpCode::MaxPool2DGrad);
  max_grad.In(y16).In(x).In(ws).Out(dx16).Pool(p);
  ExpectPrepareError(max_grad, "MaxPool2DGrad", {"input 1 has dtype f32, expected bf16 (as input 0)"});
  KernelRunner avg(OpCode::AvgPool2D);
  avg.In(xi).Out(y).Pool(p);
  ExpectPrepareError(avg, "AvgPool2D", {"input 0 has dtype i32, expected f32 or bf16"});
  KernelRunner avg_grad(OpCode::AvgPool2DGrad);
  avg_grad.In(y16).Out(dx).Pool(p);
  ExpectPrepareError(avg_grad, "AvgPool2DGrad", {"output 0 has dtype f32, expected bf16 (as input 0)"});
}

//===--- Determinism ------------------------------------------------------------===//

// As KernelRules.RunsAreBitwiseDeterministic for f32: a prepared bf16 op run
// twice writes the same bits, including the reductions over the batch
// (filter gradient) and over overlapping windows (pool gradient).
TEST(Bf16KernelRules, RerunsAreBitwiseEqual) {
  const Tensor a = ToBf16(Bf16Values({64, 300}, 601)), b = ToBf16(Bf16Values({300, 70}, 602));
  const Tensor bias = ToBf16(Bf16Values({70}, 603));
  const Tensor x = ToBf16(Bf16Values({4, 3, 12, 12}, 604));
  const Tensor dy = ToBf16(Bf16Values({4, 8, 6, 6}, 605)), pdy = ToBf16(Bf16Values({4, 3, 6, 6}, 606));
  Tensor y({64, 70}, DType::BF16), dw({8, 3, 3, 3}), dx({4, 3, 12, 12}, DType::BF16);
  KernelRunner mm(OpCode::MatMul), bf(OpCode::Conv2DBackpropFilter), pool(OpCode::AvgPool2DGrad);
  mm.In(a).In(b).Out(y).MatMulOpts(false, false).Bias(bias).Relu();
  bf.In(dy).In(x).Out(dw).Conv({2, 2, 1, 1, 1, 1, 1, 1});
  pool.In(pdy).Out(dx).Pool({3, 3, 2, 2, 1, 1, 1, 1});
  for (KernelRunner* op : {&mm, &bf, &pool}) {
    ASSERT_TRUE(op->Prepare().ok());
    ASSERT_TRUE(op->Run().ok());
  }
  const std::vector<float> y1 = Values(y), dw1 = Values(dw), dx1 = Values(dx);
  for (KernelRunner* op : {&mm, &bf, &pool}) ASSERT_TRUE(op->Run().ok());
  EXPECT_EQ(Values(y), y1) << "MatMul";
  EXPECT_EQ(Values(dw), dw1) << "Conv2DBackpropFilter";
  EXPECT_EQ(Values(dx), dx1) << "AvgPool2DGrad";
}

//===--- oneDNN without bf16 ----------------------------------------------------===//

// What prepare reports when oneDNN has no bf16 primitive for this CPU (it
// answers unimplemented): this machine has one, so the error is made here.
TEST(Bf16DnnlErrors, UnimplementedBf16NamesTheCpuFeature) {
  const Tensor a16({4, 8}, DType::BF16), a({4, 8});
  KernelArgs args;
  args.inputs = {a16.ref()};
  const Status st = DnnlErrorStatus(args, dnnl::error(dnnl_unimplemented, "could not create"));
  EXPECT_EQ(st.code(), StatusCode::kUnimplemented);
  EXPECT_NE(st.message().find("bf16 needs a CPU with AVX512-BF16/AMX"), std::string::npos) << st.message();
  args.inputs = {a.ref()};
  const Status f32 = DnnlErrorStatus(args, dnnl::error(dnnl_unimplemented, "could not create"));
  EXPECT_EQ(f32.message().find("bf16"), std::string::npos) << f32.message();
}

// The same end to end, in a process whose oneDNN is capped at AVX2 (no bf16
// kernels): prepares a bf16 MatMul, prints the status and exits 0 if it was
// Unimplemented.
[[noreturn]] void PrepareBf16MatMulWithoutBf16Isa() {
  if (dnnl::set_max_cpu_isa(dnnl::cpu_isa::avx2) != dnnl::status::success) std::_Exit(2);
  const Tensor a({4, 8}, DType::BF16), b({8, 3}, DType::BF16);
  Tensor y({4, 3});
  KernelRunner op(OpCode::MatMul);
  op.In(a).In(b).Out(y).MatMulOpts(false, false);
  const Status st = op.Prepare();
  std::fprintf(stderr, "%s\n", st.ToString().c_str());
  std::_Exit(st.code() == StatusCode::kUnimplemented ? 0 : 1);
}

// The "threadsafe" death-test style runs the statement in a freshly executed
// copy of this binary, where oneDNN has not yet fixed its ISA, so the cap
// still takes.
TEST(Bf16DnnlErrors, PrepareWithoutBf16IsaNamesTheCpuFeature) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(PrepareBf16MatMulWithoutBf16Isa(), ::testing::ExitedWithCode(0),
              "MatMul: .*bf16 needs a CPU with AVX512-BF16/AMX");
}

}  // namespace
}  // namespace sinkrt::device
