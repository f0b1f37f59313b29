// The broadcasting math kernels (Div, Maximum, Minimum, Pow), Erf and exact
// GELU (GeluErf), and their gradient helpers, against float64 reference
// ops (test/support/reference_ops.h) and at their IEEE edges (MindSpore's:
// inf and NaN, no error).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numbers>
#include <string>
#include <vector>

#include "support/kernel_runner.h"
#include "support/reference_ops.h"

namespace sinkrt::device {
namespace {

using namespace ::sinkrt::testing;
using fb::OpCode;
using Tensor = KernelTensor;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

struct BinaryCase {
  OpCode op;
  RefTensor (*ref)(const RefTensor&, const RefTensor&);
  float a_lo, a_hi, b_lo, b_hi;  // inside each op's domain
};

const BinaryCase kBinary[] = {
    {OpCode::Div, RefDiv, -10.0f, 10.0f, 0.5f, 4.0f},
    {OpCode::Maximum, RefMaximum, -1.0f, 1.0f, -1.0f, 1.0f},
    {OpCode::Minimum, RefMinimum, -1.0f, 1.0f, -1.0f, 1.0f},
    {OpCode::Pow, RefPow, 0.1f, 3.0f, -2.0f, 2.0f},
};

// Same shapes, a scalar, a row vector, a column, and both sides broadcast.
const std::pair<Shape, Shape> kShapes[] = {
    {{17}, {17}},        {{3, 5, 7}, {}},     {{}, {4, 9}},           {{64, 129}, {129}},
    {{3, 5, 7}, {5, 1}}, {{4, 1, 6}, {3, 1}}, {{2, 3, 4}, {2, 3, 4}},
};

TEST(BinaryMathKernels, ForwardMatchesFloat64Reference) {
  for (const BinaryCase& c : kBinary) {
    for (const auto& [sa, sb] : kShapes) {
      const Tensor a = RandomTensor(sa, 11, c.a_lo, c.a_hi);
      const Tensor b = RandomTensor(sb, 12, c.b_lo, c.b_hi);
      const RefTensor want = c.ref(ToRef(a), ToRef(b));
      Tensor y(want.shape);
      KernelRunner(c.op).In(a).In(b).Out(y).PrepareAndRun();
      // Within 2 ulp of the exact result of the float inputs.
      ExpectClose(y, want, 2.5e-7, 0, fb::EnumNameOpCode(c.op));
    }
  }
}

TEST(BinaryMathKernels, RunInPlace) {
  for (const BinaryCase& c : kBinary) {
    Tensor a = RandomTensor({5, 9}, 13, c.a_lo, c.a_hi);
    const Tensor b = RandomTensor({9}, 14, c.b_lo, c.b_hi);
    const RefTensor want = c.ref(ToRef(a), ToRef(b));
    KernelRunner(c.op).In(a).In(b).Out(a).PrepareAndRun();
    ExpectClose(a, want, 2.5e-7, 0, std::string(fb::EnumNameOpCode(c.op)) + " in place");
  }
}

// op(a[i], b[i]) for the pairs given; the results as floats.
std::vector<float> RunPairs(OpCode op, const std::vector<float>& a, const std::vector<float>& b) {
  const int64_t n = static_cast<int64_t>(a.size());
  Tensor ta({n}), tb({n}), y({n});
  ta.set(a);
  tb.set(b);
  KernelRunner(op).In(ta).In(tb).Out(y).PrepareAndRun();
  return y.values();
}

// Bitwise for the signed values (inf, -inf, 0, -0), isnan for NaN.
void ExpectValues(const std::string& what, const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << what << " [" << i << "] = " << got[i];
    } else {
      EXPECT_EQ(got[i], want[i]) << what << " [" << i << "]";
      EXPECT_EQ(std::signbit(got[i]), std::signbit(want[i])) << what << " [" << i << "]";
    }
  }
}

TEST(BinaryMathKernels, EdgesFollowIeeeAndMindSpore) {
  ExpectValues("Div", RunPairs(OpCode::Div, {1, -1, 0, 6, kInf, 1}, {0, 0, 0, -3, kInf, kInf}),
               {kInf, -kInf, kNaN, -2, kNaN, 0});
  // ops.maximum / ops.minimum: a NaN on either side gives NaN.
  ExpectValues("Maximum", RunPairs(OpCode::Maximum, {1, 2, kNaN, 3, -kInf}, {2, 2, 1, kNaN, -5}),
               {2, 2, kNaN, kNaN, -5});
  ExpectValues("Minimum", RunPairs(OpCode::Minimum, {1, 2, kNaN, 3, kInf}, {2, 2, 1, kNaN, 5}), {1, 2, kNaN, kNaN, 5});
  ExpectValues("Pow", RunPairs(OpCode::Pow, {2, -2, -2, 0, 0, 4, 1}, {10, 3, 0.5f, -1, 0, 0.5f, kNaN}),
               {1024, -8, kNaN, kInf, 1, 2, 1});
}

// MindSpore's MaximumGrad/MinimumGrad: all of dy to the chosen operand, half
// to each at a tie. The mask of a is (a, b) -> 1, 1/2 or 0.
TEST(BinaryMathKernels, GradMasksSplitTiesInHalves) {
  ExpectValues("MaximumGradMask", RunPairs(OpCode::MaximumGradMask, {3, 1, 2, -0.0f}, {1, 3, 2, 0}),
               {1, 0, 0.5f, 0.5f});
  ExpectValues("MinimumGradMask", RunPairs(OpCode::MinimumGradMask, {3, 1, 2, -0.0f}, {1, 3, 2, 0}),
               {0, 1, 0.5f, 0.5f});
  // Broadcast as the forward op: a [2, 3] against b [3].
  Tensor a({2, 3}), b({3}), y({2, 3});
  a.set({1, 5, 2, 4, 4, 0});
  b.set({4, 4, 4});
  KernelRunner(OpCode::MaximumGradMask).In(a).In(b).Out(y).PrepareAndRun();
  ExpectValues("MaximumGradMask broadcast", y.values(), {0, 1, 0, 0.5f, 0.5f, 0});
}

// d x^e / dx = e x^(e-1); the exponent's gradient reads log(x), 0 for x < 0.
TEST(BinaryMathKernels, PowGradientHelpers) {
  const Tensor x = RandomTensor({6, 11}, 15, 0.1f, 3.0f);
  const Tensor e = RandomTensor({11}, 16, -2.0f, 2.0f);
  Tensor base({6, 11});
  KernelRunner(OpCode::PowGradBase).In(x).In(e).Out(base).PrepareAndRun();
  const RefTensor rx = ToRef(x), re = ToRef(e);
  const RefTensor e_minus_1 = RefAdd(re, RefTensor{{}, {-1.0}});
  ExpectClose(base, RefMul(re, RefPow(rx, e_minus_1)), 1e-6, 0, "PowGradBase");

  Tensor in({5}), log({5});
  in.set({-2, -0.0f, 0, 1, 8});
  KernelRunner(OpCode::PowGradLog).In(in).Out(log).PrepareAndRun();
  ExpectValues("PowGradLog", log.values(), {0, -kInf, -kInf, 0, std::log(8.0f)});
}

TEST(ErfKernels, ForwardMatchesFloat64Reference) {
  for (const Shape& s : {Shape{}, Shape{17}, Shape{64, 129}}) {
    const Tensor x = RandomTensor(s, 17, -5.0f, 5.0f);
    Tensor y(s), g(s);
    KernelRunner(OpCode::Erf).In(x).Out(y).PrepareAndRun();
    ExpectClose(y, RefErf(ToRef(x)), 5e-7, 1e-7, "Erf");
    KernelRunner(OpCode::GeluErf).In(x).Out(g).PrepareAndRun();
    ExpectClose(g, RefGeluErf(ToRef(x)), 1e-6, 1e-7, "GeluErf");
  }
  Tensor x({5}), y({5});
  x.set({0, kInf, -kInf, kNaN, -0.0f});
  KernelRunner(OpCode::Erf).In(x).Out(y).PrepareAndRun();
  ExpectValues("Erf edges", y.values(), {0, 1, -1, kNaN, -0.0f});
}

// The exact derivatives, in float64: erf' = 2/sqrt(pi) e^(-x^2); GELU's
// Phi(x) + x phi(x).
TEST(ErfKernels, GradientsMatchFloat64Derivatives) {
  const Tensor x = RandomTensor({7, 33}, 18, -4.0f, 4.0f);
  const Tensor dy = RandomTensor({7, 33}, 19);
  Tensor erf_dx({7, 33}), gelu_dx({7, 33});
  KernelRunner(OpCode::ErfGrad).In(dy).In(x).Out(erf_dx).PrepareAndRun();
  KernelRunner(OpCode::GeluErfGrad).In(dy).In(x).Out(gelu_dx).PrepareAndRun();
  std::vector<double> want_erf, want_gelu;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double v = x[i], d = dy[i];
    want_erf.push_back(d * 2.0 / std::sqrt(std::numbers::pi) * std::exp(-v * v));
    const double cdf = 0.5 * (1.0 + std::erf(v / std::numbers::sqrt2));
    const double pdf = std::exp(-0.5 * v * v) / std::sqrt(2.0 * std::numbers::pi);
    want_gelu.push_back(d * (cdf + v * pdf));
  }
  ExpectClose(erf_dx, want_erf, 1e-6, 1e-7, "ErfGrad");
  ExpectClose(gelu_dx, want_gelu, 1e-6, 1e-7, "GeluErfGrad");
}

TEST(BinaryMathKernels, RejectShapesThatDoNotBroadcast) {
  for (OpCode op : {OpCode::Div, OpCode::Maximum, OpCode::Minimum, OpCode::Pow, OpCode::MaximumGradMask,
                    OpCode::MinimumGradMask, OpCode::PowGradBase}) {
    const Tensor a({2, 3}), b({2});
    Tensor y({2, 3});
    KernelRunner k(op);
    k.In(a).In(b).Out(y);
    EXPECT_FALSE(k.Prepare().ok()) << fb::EnumNameOpCode(op);
  }
}

}  // namespace
}  // namespace sinkrt::device
