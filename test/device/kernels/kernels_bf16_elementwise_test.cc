// bf16 in the non-oneDNN kernels (mixed precision): elementwise, activation,
// broadcast/bias/reduction, byte-moving, softmax and layer-norm ops.
//
// Every case runs the kernel twice on the same values, which are exactly
// representable in bf16: once with f32 operands and once with bf16 ones
// (statistics such as LayerNorm's mean and rstd stay f32). The kernels
// compute bf16 in f32 and round once per stored element, and every sum adds
// in f32 in the float kernel's order (templated sums, or the f32 code run
// on staged f32 copies), so EVERY bf16 output here is compared BITWISE with
// FloatToBf16 of the f32 kernel's output, reductions included: none needs
// the 1-ulp allowance. f32-only outputs must equal the f32 run's bits.
// The refusals of mixed f32/bf16 operands are checked with their messages.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "runtime/src/bf16.h"
#include "support/kernel_runner.h"

namespace sinkrt::device {
namespace {

using namespace ::sinkrt::testing;
using fb::OpCode;
using Tensor = KernelTensor;

//===--- Harness ------------------------------------------------------------===//

// Uniform values in [lo, hi) rounded to bf16 (so exactly representable),
// held in an f32 tensor; fixed seed.
Tensor Bf16Values(Shape shape, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  Tensor t = RandomTensor(std::move(shape), seed, lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t[i] = Bf16ToFloat(FloatToBf16(t[i]));
  return t;
}

uint16_t* Bits(const Tensor& t) { return reinterpret_cast<uint16_t*>(t.bytes()); }

// The bf16 copy of an f32 tensor of bf16-representable values (exact).
Tensor ToBf16(const Tensor& f) {
  Tensor h(f.shape(), DType::BF16);
  for (int64_t i = 0; i < f.numel(); ++i) {
    Bits(h)[i] = FloatToBf16(f[i]);
    EXPECT_EQ(std::bit_cast<uint32_t>(Bf16ToFloat(Bits(h)[i])), std::bit_cast<uint32_t>(f[i]))
        << "test input " << i << " (" << f[i] << ") is not a bf16 value";
  }
  return h;
}

// got (bf16) must be FloatToBf16(want[i]) bit for bit.
void ExpectRoundedBitwise(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.dtype(), DType::BF16) << what;
  ASSERT_EQ(got.numel(), want.numel()) << what;
  int reported = 0;
  for (int64_t i = 0; i < want.numel() && reported < 5; ++i) {
    const uint16_t w = FloatToBf16(want[i]);
    if (Bits(got)[i] != w) {
      ADD_FAILURE() << what << ": element " << i << " is bf16 0x" << std::hex << Bits(got)[i] << " ("
                    << Bf16ToFloat(Bits(got)[i]) << "), expected 0x" << w << " (" << Bf16ToFloat(w) << ", f32 "
                    << want[i] << ")" << std::dec;
      ++reported;
    }
  }
}

struct In {
  const Tensor* t;
  bool f32_only = false;  // stays f32 in the bf16 run (statistics)
};
struct Out {
  Shape shape;
  bool f32_only = false;
};

// Runs `op` with f32 operands and again with bf16 ones (but the f32-only),
// `options` setting the same options on both, and checks every output.
void ExpectBf16MatchesF32(OpCode op, const std::vector<In>& ins, const std::vector<Out>& outs,
                          const std::function<void(KernelRunner&)>& options, const std::string& what) {
  SCOPED_TRACE(std::string(fb::EnumNameOpCode(op)) + " " + what);
  std::vector<Tensor> f_out, h_in, h_out;
  f_out.reserve(outs.size());
  h_in.reserve(ins.size());
  h_out.reserve(outs.size());
  KernelRunner f(op), h(op);
  for (const In& i : ins) {
    f.In(*i.t);
    h_in.push_back(i.f32_only ? Tensor(i.t->shape()) : ToBf16(*i.t));
    if (i.f32_only) std::memcpy(h_in.back().bytes(), i.t->bytes(), i.t->numel() * sizeof(float));
    h.In(h_in.back());
  }
  for (const Out& o : outs) {
    f_out.emplace_back(o.shape);
    h_out.emplace_back(o.shape, o.f32_only ? DType::F32 : DType::BF16);
    // Garbage first: the kernels overwrite, they do not accumulate.
    std::memset(f_out.back().bytes(), 0x5a, f_out.back().numel() * sizeof(float));
    std::memset(h_out.back().bytes(), 0x5a, h_out.back().numel() * DTypeSize(h_out.back().dtype()));
    f.Out(f_out.back());
    h.Out(h_out.back());
  }
  if (options) {
    options(f);
    options(h);
  }
  f.PrepareAndRun();
  h.PrepareAndRun();
  for (size_t k = 0; k < outs.size(); ++k) {
    const std::string name = what + " output " + std::to_string(k);
    if (outs[k].f32_only) {
      ExpectBitwise(h_out[k], f_out[k].values(), name);
    } else {
      ExpectRoundedBitwise(h_out[k], f_out[k], name);
    }
  }
}

std::vector<In> Ins(std::initializer_list<const Tensor*> ts) {
  std::vector<In> v;
  for (const Tensor* t : ts) v.push_back({t});
  return v;
}

//===--- Elementwise --------------------------------------------------------===//

TEST(Bf16Kernels, AddSubMulBroadcastMatchF32Rounded) {
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{3, 4}, {3, 4}},
      {{2, 3, 4}, {4}},
      {{4}, {2, 3, 4}},
      {{2, 1, 4}, {3, 1}},
      {{}, {5, 6}},
      {{5, 6}, {}},
      {{2, 3, 4, 5}, {1, 3, 1, 1}},
      {{7, 1}, {1, 9}},
      {{64, 100}, {100}},
      {{1, 1}, {1}},
  };
  uint32_t seed = 1;
  for (const auto& [sa, sb] : cases) {
    const Tensor a = Bf16Values(sa, seed++, -4.0f, 4.0f), b = Bf16Values(sb, seed++, -4.0f, 4.0f);
    Shape y;
    {
      const size_t r = std::max(sa.size(), sb.size());
      y.assign(r, 1);
      for (size_t i = 0; i < r; ++i) {
        const int64_t da = i < r - sa.size() ? 1 : sa[i - (r - sa.size())];
        const int64_t db = i < r - sb.size() ? 1 : sb[i - (r - sb.size())];
        y[i] = da == 1 ? db : da;
      }
    }
    // Pow's negative bases give NaN, whose bits are compared too.
    for (OpCode op : {OpCode::Add, OpCode::Sub, OpCode::Mul, OpCode::Div, OpCode::Maximum, OpCode::Minimum, OpCode::Pow,
                      OpCode::MaximumGradMask, OpCode::MinimumGradMask, OpCode::PowGradBase}) {
      ExpectBf16MatchesF32(op, Ins({&a, &b}), {{y}}, nullptr, ShapeToString(sa) + " " + ShapeToString(sb));
    }
  }
}

// y is exactly input 0 (the compiler's in-place plan), for Add, Relu and AddN.
TEST(Bf16Kernels, ElementwiseRunsInPlace) {
  const Tensor a = Bf16Values({4, 600}, 11, -2.0f, 2.0f), b = Bf16Values({600}, 12, -2.0f, 2.0f);
  const Tensor c = Bf16Values({4, 600}, 13, -2.0f, 2.0f);
  {
    Tensor want({4, 600});
    KernelRunner(OpCode::Add).In(a).In(b).Out(want).PrepareAndRun();
    Tensor h = ToBf16(a);
    const Tensor hb = ToBf16(b);
    KernelRunner(OpCode::Add).In(h).In(hb).Out(h).PrepareAndRun();
    ExpectRoundedBitwise(h, want, "Add in place");
  }
  {
    Tensor want({4, 600});
    KernelRunner(OpCode::Relu).In(a).Out(want).PrepareAndRun();
    Tensor h = ToBf16(a);
    KernelRunner(OpCode::Relu).In(h).Out(h).PrepareAndRun();
    ExpectRoundedBitwise(h, want, "Relu in place");
  }
  {
    // AddN's output is its second input: chunked, every input of a chunk is
    // read before that chunk of y is written.
    Tensor want({4, 600});
    KernelRunner(OpCode::AddN).In(a).In(c).In(a).Out(want).PrepareAndRun();
    const Tensor ha = ToBf16(a);
    Tensor hc = ToBf16(c);
    KernelRunner(OpCode::AddN).In(ha).In(hc).In(ha).Out(hc).PrepareAndRun();
    ExpectRoundedBitwise(hc, want, "AddN in place");
  }
}

// f32 accumulation: with 2, 3 and 5 inputs over more than one 512-element
// chunk, the bf16 sum is the rounded f32 sum ((a0 + a1) + a2) + ... (same
// order, so bitwise).
TEST(Bf16Kernels, AddNAccumulatesInF32) {
  for (int n : {2, 3, 5}) {
    std::vector<Tensor> xs;
    xs.reserve(n);
    for (int i = 0; i < n; ++i) xs.push_back(Bf16Values({3, 700}, 20 + i, -8.0f, 8.0f));
    std::vector<In> ins;
    for (const Tensor& x : xs) ins.push_back({&x});
    ExpectBf16MatchesF32(OpCode::AddN, ins, {{{3, 700}}}, nullptr, std::to_string(n) + " inputs");
  }
  // 64 addends of 2^-9 to 1: rounding to bf16 after each add would drop
  // every one (1 + 2^-9 is below half of bf16's 2^-7 step at 1); the f32
  // accumulator keeps them, 1 + 64·2^-9 = 1.125, a bf16 value.
  const int kAddends = 64;
  std::vector<Tensor> hs;
  hs.reserve(kAddends + 1);
  Tensor one({2});
  one.set({1.0f, -1.0f});
  hs.push_back(ToBf16(one));
  Tensor tiny({2});
  tiny.set({1.0f / 512.0f, 1.0f / 512.0f});
  for (int i = 0; i < kAddends; ++i) hs.push_back(ToBf16(tiny));
  Tensor sum({2}, DType::BF16);
  KernelRunner op(OpCode::AddN);
  for (const Tensor& h : hs) op.In(h);
  op.Out(sum).PrepareAndRun();
  EXPECT_EQ(Bf16ToFloat(Bits(sum)[0]), 1.125f);
  EXPECT_EQ(Bf16ToFloat(Bits(sum)[1]), -0.875f);
}

//===--- Activations --------------------------------------------------------===//

TEST(Bf16Kernels, ActivationsMatchF32Rounded) {
  Tensor x = Bf16Values({5, 301}, 31, -6.0f, 6.0f);
  // Edge values: zeros of both signs, ±inf, NaN, large and tiny.
  const float edge[] = {0.0f,
                        -0.0f,
                        std::numeric_limits<float>::infinity(),
                        -std::numeric_limits<float>::infinity(),
                        std::numeric_limits<float>::quiet_NaN(),
                        3.0e38f,
                        -3.0e38f,
                        1.0e-30f,
                        -20.0f,
                        20.0f,
                        0.25f,
                        -0.25f};
  for (size_t i = 0; i < std::size(edge); ++i) x[static_cast<int64_t>(i)] = Bf16ToFloat(FloatToBf16(edge[i]));
  for (OpCode op :
       {OpCode::Relu, OpCode::Gelu, OpCode::Tanh, OpCode::Sigmoid, OpCode::Neg, OpCode::Exp, OpCode::Log, OpCode::Sqrt,
        OpCode::Rsqrt, OpCode::Square, OpCode::Abs, OpCode::Erf, OpCode::GeluErf, OpCode::PowGradLog}) {
    ExpectBf16MatchesF32(op, Ins({&x}), {{x.shape()}}, nullptr, "[5,301]");
  }
}

TEST(Bf16Kernels, ActivationGradientsMatchF32Rounded) {
  const Tensor dy = Bf16Values({7, 129}, 41, -2.0f, 2.0f);
  const Tensor x = Bf16Values({7, 129}, 42, -5.0f, 5.0f);  // Relu/Gelu: the forward input
  const Tensor t = Bf16Values({7, 129}, 43, -1.0f, 1.0f);  // Tanh: the forward output
  const Tensor s = Bf16Values({7, 129}, 44, 0.0f, 1.0f);   // Sigmoid: the forward output
  ExpectBf16MatchesF32(OpCode::ReluGrad, Ins({&dy, &x}), {{x.shape()}}, nullptr, "");
  ExpectBf16MatchesF32(OpCode::GeluGrad, Ins({&dy, &x}), {{x.shape()}}, nullptr, "");
  ExpectBf16MatchesF32(OpCode::TanhGrad, Ins({&dy, &t}), {{x.shape()}}, nullptr, "");
  ExpectBf16MatchesF32(OpCode::SigmoidGrad, Ins({&dy, &s}), {{x.shape()}}, nullptr, "");
  ExpectBf16MatchesF32(OpCode::AbsGrad, Ins({&dy, &x}), {{x.shape()}}, nullptr, "");
  ExpectBf16MatchesF32(OpCode::ErfGrad, Ins({&dy, &x}), {{x.shape()}}, nullptr, "");
  ExpectBf16MatchesF32(OpCode::GeluErfGrad, Ins({&dy, &x}), {{x.shape()}}, nullptr, "");
}

//===--- Broadcasts, biases and reductions ----------------------------------===//

TEST(Bf16Kernels, BiasAddAndGradMatchF32Rounded) {
  // [N,C], NCHW and a long batch (BiasAddGrad's column sums in pairwise
  // blocks of 128 rows, two column blocks).
  for (const Shape& shape : {Shape{8, 5}, Shape{2, 3, 4, 5}, Shape{4, 7, 9}, Shape{1000, 70}, Shape{3, 1, 2, 2}}) {
    const int64_t c = shape[1];
    const Tensor x = Bf16Values(shape, 51, -3.0f, 3.0f), bias = Bf16Values({c}, 52);
    auto axis = [](KernelRunner& k) { k.Axis(1); };
    ExpectBf16MatchesF32(OpCode::BiasAdd, Ins({&x, &bias}), {{shape}}, axis, ShapeToString(shape));
    ExpectBf16MatchesF32(OpCode::BiasAddGrad, Ins({&x}), {{{c}}}, axis, ShapeToString(shape));
  }
}

TEST(Bf16Kernels, ReduceSumAndMeanMatchF32Rounded) {
  struct Case {
    Shape x;
    std::vector<int32_t> axes;
    bool keep;
  };
  const std::vector<Case> cases = {
      {{2, 3, 4}, {1}, false}, {{2, 3, 4}, {0, 2}, true}, {{2, 3, 4}, {}, false},
      {{5, 7}, {0}, true},     {{5, 7}, {1}, false},      {{3000}, {0}, false},  // pairwise over leaves
      {{4, 1000}, {1}, false}, {{300, 70}, {0}, false},   {{2, 3}, {}, true},
  };
  uint32_t seed = 60;
  for (const Case& c : cases) {
    const Tensor x = Bf16Values(c.x, seed++, -2.0f, 2.0f);
    Shape y;
    for (int d = 0; d < static_cast<int>(c.x.size()); ++d) {
      const bool reduced = c.axes.empty() || std::find(c.axes.begin(), c.axes.end(), d) != c.axes.end();
      if (!reduced) {
        y.push_back(c.x[d]);
      } else if (c.keep) {
        y.push_back(1);
      }
    }
    auto opts = [&](KernelRunner& k) { k.Axes(c.axes, c.keep); };
    for (OpCode op : {OpCode::ReduceSum, OpCode::ReduceMean}) {
      ExpectBf16MatchesF32(op, Ins({&x}), {{y}}, opts, ShapeToString(c.x));
    }
  }
  // Reducing nothing (size-1 axes) is a scaled copy.
  const Tensor x = Bf16Values({3, 1, 4}, 70);
  ExpectBf16MatchesF32(
      OpCode::ReduceMean, Ins({&x}), {{{3, 4}}}, [](KernelRunner& k) { k.Axes({1}, false); }, "size-1 axis");
}

TEST(Bf16Kernels, SumToShapeAndBroadcastToMatchF32Rounded) {
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{4}, {2, 3, 4}}, {{3, 1}, {2, 3, 5}},       {{}, {3, 3}},         {{2, 2}, {2, 2}},
      {{1, 1}, {2, 3}}, {{2, 1, 4}, {3, 2, 5, 4}}, {{1, 64}, {500, 64}},
  };
  uint32_t seed = 80;
  for (const auto& [small, big] : cases) {
    const Tensor dy = Bf16Values(big, seed++, -2.0f, 2.0f), x = Bf16Values(small, seed++, -2.0f, 2.0f);
    const std::string what = ShapeToString(small) + " " + ShapeToString(big);
    ExpectBf16MatchesF32(OpCode::SumToShape, Ins({&dy}), {{small}}, nullptr, what);
    ExpectBf16MatchesF32(
        OpCode::BroadcastTo, Ins({&x}), {{big}}, [](KernelRunner& k) { k.Scale(0.3f); }, what);
  }
}

TEST(Bf16Kernels, FillRoundsTheValueOnce) {
  for (float v : {1.5f, 0.1f, -3.0e38f, 1.0f + 1.0f / 256.0f /* a tie: rounds to even, 1.0 */}) {
    Tensor h({3, 5}, DType::BF16);
    KernelRunner(OpCode::Fill).Out(h).FillValue(v).PrepareAndRun();
    for (int64_t i = 0; i < h.numel(); ++i) ASSERT_EQ(Bits(h)[i], FloatToBf16(v)) << v;
  }
  Tensor h({2}, DType::BF16);
  KernelRunner(OpCode::Fill).Out(h).FillValue(1.0f + 1.0f / 256.0f).PrepareAndRun();
  EXPECT_EQ(Bf16ToFloat(Bits(h)[0]), 1.0f);
}

//===--- Byte moves ---------------------------------------------------------===//

TEST(Bf16Kernels, CopyReshapeFlattenConcatSplitShardSliceMoveBf16) {
  const Tensor a = Bf16Values({4, 6, 5}, 91), b = Bf16Values({4, 2, 5}, 92);
  ExpectBf16MatchesF32(OpCode::Copy, Ins({&a}), {{{4, 6, 5}}}, nullptr, "");
  ExpectBf16MatchesF32(OpCode::Reshape, Ins({&a}), {{{24, 5}}}, nullptr, "");
  ExpectBf16MatchesF32(OpCode::Flatten, Ins({&a}), {{{4, 30}}}, nullptr, "");
  for (int axis : {0, 1, 2}) {
    Shape whole = a.shape();
    whole[axis] *= 2;
    ExpectBf16MatchesF32(
        OpCode::Concat, Ins({&a, &a}), {{whole}}, [&](KernelRunner& k) { k.Axis(axis); },
        "axis " + std::to_string(axis));
  }
  ExpectBf16MatchesF32(
      OpCode::Concat, Ins({&a, &b}), {{{4, 8, 5}}}, [](KernelRunner& k) { k.Axis(1); }, "uneven");
  ExpectBf16MatchesF32(
      OpCode::Split, Ins({&a}), {{{4, 1, 5}}, {{4, 5, 5}}},
      [](KernelRunner& k) {
        k.SplitOpts(1, {1, 5});
      },
      "axis 1");
  ExpectBf16MatchesF32(
      OpCode::Split, Ins({&a}), {{{4, 6, 2}}, {{4, 6, 3}}},
      [](KernelRunner& k) {
        k.SplitOpts(2, {2, 3});
      },
      "axis 2");
  for (uint32_t pos = 0; pos < 3; ++pos) {
    ExpectBf16MatchesF32(
        OpCode::ShardSlice, Ins({&a}), {{{4, 2, 5}}},
        [&](KernelRunner& k) {
          k.CommOpts(1, pos, {0, 1, 2});
        },
        "position " + std::to_string(pos));
  }
  // A bf16 Copy onto its own buffer (a view) leaves it as it is.
  Tensor h = ToBf16(a);
  KernelRunner(OpCode::Copy).In(h).Out(View(h, {120})).PrepareAndRun();
  ExpectRoundedBitwise(h, a, "Copy onto itself");
}

//===--- Softmax ------------------------------------------------------------===//

TEST(Bf16Kernels, SoftmaxAndLogSoftmaxMatchF32Rounded) {
  struct Case {
    Shape s;
    int axis;
  };
  // Last axis: short and long rows, more rows than one staged block
  // (4096 floats), a row longer than a block; inner axes (strided).
  const std::vector<Case> cases = {{{4, 10}, 1},   {{300, 40}, 1}, {{2, 5000}, 1},  {{3, 1}, 1},
                                   {{2, 3, 4}, 0}, {{2, 3, 4}, 1}, {{3, 70, 5}, 1}, {{6}, 0}};
  uint32_t seed = 100;
  for (const Case& c : cases) {
    const Tensor x = Bf16Values(c.s, seed++, -8.0f, 8.0f);
    const Tensor dy = Bf16Values(c.s, seed++, -1.0f, 1.0f);
    auto axis = [&](KernelRunner& k) { k.Axis(c.axis); };
    const std::string what = ShapeToString(c.s) + " axis " + std::to_string(c.axis);
    for (OpCode op : {OpCode::Softmax, OpCode::LogSoftmax}) {
      ExpectBf16MatchesF32(op, Ins({&x}), {{c.s}}, axis, what);
    }
    // The gradients take dy and the forward output y (a bf16 value).
    Tensor y(c.s), logy(c.s);
    KernelRunner(OpCode::Softmax).In(x).Out(y).Axis(c.axis).PrepareAndRun();
    KernelRunner(OpCode::LogSoftmax).In(x).Out(logy).Axis(c.axis).PrepareAndRun();
    for (int64_t i = 0; i < y.numel(); ++i) {
      y[i] = Bf16ToFloat(FloatToBf16(y[i]));
      logy[i] = Bf16ToFloat(FloatToBf16(logy[i]));
    }
    ExpectBf16MatchesF32(OpCode::SoftmaxGrad, Ins({&dy, &y}), {{c.s}}, axis, what);
    ExpectBf16MatchesF32(OpCode::LogSoftmaxGrad, Ins({&dy, &logy}), {{c.s}}, axis, what);
  }
}

//===--- LayerNorm ----------------------------------------------------------===//

Shape RowsOf(const Shape& x) {
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < x.size(); ++i) rows *= x[i];
  return {rows};
}

// mean and rstd are f32 outputs of the forward and f32 inputs of the
// gradient. Shapes: D = 1, short rows, more rows than one column leaf (128)
// and than one staged block, a row longer than a block (D = 5000).
TEST(Bf16Kernels, LayerNormAndGradMatchF32Rounded) {
  const std::vector<Shape> shapes = {{4, 8}, {5}, {3, 1}, {2, 3, 64}, {300, 70}, {257, 33}, {3, 5000}};
  uint32_t seed = 120;
  for (const Shape& s : shapes) {
    const int64_t d = s.back();
    const Tensor x = Bf16Values(s, seed++, -2.0f, 2.0f), dy = Bf16Values(s, seed++);
    const Tensor gamma = Bf16Values({d}, seed++, 0.5f, 1.5f), beta = Bf16Values({d}, seed++);
    auto eps = [](KernelRunner& k) { k.LayerNormEpsilon(1e-5f); };
    const std::string what = ShapeToString(s);
    ExpectBf16MatchesF32(OpCode::LayerNorm, Ins({&x, &gamma, &beta}), {{s}, {RowsOf(s), true}, {RowsOf(s), true}}, eps,
                         what);
    Tensor y(s), mean(RowsOf(s)), rstd(RowsOf(s));
    KernelRunner(OpCode::LayerNorm)
        .In(x)
        .In(gamma)
        .In(beta)
        .Out(y)
        .Out(mean)
        .Out(rstd)
        .LayerNormEpsilon(1e-5f)
        .PrepareAndRun();
    ExpectBf16MatchesF32(OpCode::LayerNormGrad, {{&dy}, {&x}, {&gamma}, {&mean, true}, {&rstd, true}},
                         {{s}, {{d}}, {{d}}}, eps, what);
  }
}

//===--- Refusals -----------------------------------------------------------===//

TEST(Bf16Kernels, MixedDTypesAreRefusedAtLoad) {
  const Tensor f({2, 3}), h({2, 3}, DType::BF16), i32({2, 3}, DType::I32);
  const Tensor hc({3}, DType::BF16), fc({3});
  Tensor yf({2, 3}), yh({2, 3}, DType::BF16);
  {
    KernelRunner op(OpCode::Add);
    op.In(h).In(f).Out(yh);
    ExpectPrepareError(op, "Add", {"input 1 has dtype f32, expected bf16 (as input 0)"});
  }
  {
    KernelRunner op(OpCode::Mul);
    op.In(f).In(f).Out(yh);
    ExpectPrepareError(op, "Mul", {"output 0 has dtype bf16, expected f32 (as input 0)"});
  }
  {
    KernelRunner op(OpCode::Sub);
    op.In(i32).In(i32).Out(yf);
    ExpectPrepareError(op, "Sub", {"input 0 has dtype i32, expected f32 or bf16"});
  }
  {
    KernelRunner op(OpCode::AddN);
    op.In(h).In(h).In(f).Out(yh);
    ExpectPrepareError(op, "AddN", {"input 2 has dtype f32, expected bf16 (as input 0)"});
  }
  {
    KernelRunner op(OpCode::Gelu);
    op.In(h).Out(yf);
    ExpectPrepareError(op, "Gelu", {"output 0 has dtype f32, expected bf16 (as input 0)"});
  }
  {
    KernelRunner op(OpCode::ReluGrad);
    op.In(h).In(f).Out(yh);
    ExpectPrepareError(op, "ReluGrad", {"input 1 has dtype f32, expected bf16 (as input 0)"});
  }
  {
    KernelRunner op(OpCode::BiasAdd);
    op.In(h).In(fc).Out(yh).Axis(1);
    ExpectPrepareError(op, "BiasAdd", {"input 1 has dtype f32, expected bf16 (as input 0)"});
  }
  {
    Tensor db({3});
    KernelRunner op(OpCode::BiasAddGrad);
    op.In(h).Out(db).Axis(1);
    ExpectPrepareError(op, "BiasAddGrad", {"output 0 has dtype f32, expected bf16 (as input 0)"});
  }
  {
    Tensor s(Shape{}, DType::BF16);
    KernelRunner op(OpCode::ReduceSum);
    op.In(f).Out(s).Axes({}, false);
    ExpectPrepareError(op, "ReduceSum", {"output 0 has dtype bf16, expected f32 (as input 0)"});
  }
  {
    Tensor s({3});
    KernelRunner op(OpCode::SumToShape);
    op.In(h).Out(s);
    ExpectPrepareError(op, "SumToShape", {"output 0 has dtype f32, expected bf16 (as input 0)"});
  }
  {
    KernelRunner op(OpCode::BroadcastTo);
    op.In(hc).Out(yf).Scale(1.0f);
    ExpectPrepareError(op, "BroadcastTo", {"output 0 has dtype f32, expected bf16 (as input 0)"});
  }
  {
    Tensor yi({2, 3}, DType::I32);
    KernelRunner op(OpCode::Fill);
    op.Out(yi).FillValue(1.0f);
    ExpectPrepareError(op, "Fill", {"output 0 has dtype i32, expected f32 or bf16"});
  }
  {
    KernelRunner op(OpCode::Copy);
    op.In(h).Out(yf);
    ExpectPrepareError(op, "Copy", {"output 0 has dtype f32, expected bf16"});
  }
  {
    Tensor whole({4, 3}, DType::BF16);
    KernelRunner op(OpCode::Concat);
    op.In(h).In(f).Out(whole).Axis(0);
    ExpectPrepareError(op, "Concat", {"input 1 has dtype f32, expected bf16"});
  }
  {
    Tensor l({2, 1}, DType::BF16), r({2, 2});
    KernelRunner op(OpCode::Split);
    op.In(h).Out(l).Out(r).SplitOpts(1, {1, 2});
    ExpectPrepareError(op, "Split", {"output 1 has dtype f32, expected bf16"});
  }
  {
    Tensor part({2, 1});
    KernelRunner op(OpCode::ShardSlice);
    op.In(h).Out(part).CommOpts(1, 0, {0, 1, 2});
    ExpectPrepareError(op, "ShardSlice", {"output 0 has dtype f32, expected bf16"});
  }
  {
    KernelRunner op(OpCode::Softmax);
    op.In(h).Out(yf).Axis(1);
    ExpectPrepareError(op, "Softmax", {"output 0 has dtype f32, expected bf16 (as input 0)"});
  }
  {
    KernelRunner op(OpCode::LogSoftmaxGrad);
    op.In(f).In(h).Out(yf).Axis(1);
    ExpectPrepareError(op, "LogSoftmaxGrad", {"input 1 has dtype bf16, expected f32 (as input 0)"});
  }
  {
    // The loss stays f32: bf16 logits are refused.
    const Tensor labels = Labels({0, 1});
    Tensor loss(Shape{});
    KernelRunner op(OpCode::SparseSoftmaxCrossEntropy);
    op.In(h).In(labels).Out(loss);
    ExpectPrepareError(op, "SparseSoftmaxCrossEntropy", {"input 0 has dtype bf16, expected f32"});
  }
  // LayerNorm: x, gamma, beta, y one dtype; mean and rstd f32 whatever it is.
  const Tensor g({3}, DType::BF16), gf({3});
  Tensor mean({2}), rstd({2}), mean_h({2}, DType::BF16);
  {
    KernelRunner op(OpCode::LayerNorm);
    op.In(h).In(g).In(gf).Out(yh).Out(mean).Out(rstd).LayerNormEpsilon(1e-5f);
    ExpectPrepareError(op, "LayerNorm", {"input 2 has dtype f32, expected bf16 (as input 0)"});
  }
  {
    KernelRunner op(OpCode::LayerNorm);
    op.In(h).In(g).In(g).Out(yh).Out(mean_h).Out(rstd).LayerNormEpsilon(1e-5f);
    ExpectPrepareError(op, "LayerNorm", {"output 1 has dtype bf16, expected f32"});
  }
  {
    Tensor dx({2, 3}, DType::BF16), dg({3}, DType::BF16), db({3});
    KernelRunner op(OpCode::LayerNormGrad);
    op.In(h).In(h).In(g).In(mean).In(rstd).Out(dx).Out(dg).Out(db).LayerNormEpsilon(1e-5f);
    ExpectPrepareError(op, "LayerNormGrad", {"output 2 has dtype f32, expected bf16 (as input 0)"});
  }
  {
    Tensor dx({2, 3}, DType::BF16), dg({3}, DType::BF16), db({3}, DType::BF16);
    KernelRunner op(OpCode::LayerNormGrad);
    op.In(h).In(h).In(g).In(mean_h).In(rstd).Out(dx).Out(dg).Out(db).LayerNormEpsilon(1e-5f);
    ExpectPrepareError(op, "LayerNormGrad", {"input 3 has dtype bf16, expected f32"});
  }
}

}  // namespace
}  // namespace sinkrt::device
