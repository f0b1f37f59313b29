// The unary math kernels (Exp, Log, Sqrt, Rsqrt, Square, Abs) and AbsGrad
// against the float64 reference ops (test/support/reference_ops.h), and
// their IEEE results at the domain edges (MindSpore's: inf and NaN, no
// error).
#include <gtest/gtest.h>

#include <cmath>
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

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

struct UnaryCase {
  OpCode op;
  RefTensor (*ref)(const RefTensor&);
  float lo, hi;  // the inputs drawn: inside each op's domain
};

const UnaryCase kCases[] = {
    {OpCode::Exp, RefExp, -20.0f, 20.0f},     {OpCode::Log, RefLog, 1e-3f, 1e3f},
    {OpCode::Sqrt, RefSqrt, 0.0f, 1e3f},      {OpCode::Rsqrt, RefRsqrt, 1e-3f, 1e3f},
    {OpCode::Square, RefSquare, -1e3f, 1e3f}, {OpCode::Abs, RefAbs, -1e3f, 1e3f},
};

TEST(UnaryMathKernels, ForwardMatchesFloat64Reference) {
  for (const UnaryCase& c : kCases) {
    for (const Shape& s : {Shape{}, Shape{17}, Shape{3, 5, 7}, Shape{64, 129}}) {
      const Tensor x = RandomTensor(s, 7, c.lo, c.hi);
      Tensor y(s);
      KernelRunner(c.op).In(x).Out(y).PrepareAndRun();
      // Within 2 ulp of the exact result of the float input.
      ExpectClose(y, c.ref(ToRef(x)), 2.5e-7, 0, fb::EnumNameOpCode(c.op));
    }
  }
}

TEST(UnaryMathKernels, RunInPlace) {
  for (const UnaryCase& c : kCases) {
    Tensor x = RandomTensor({5, 9}, 8, c.lo, c.hi);
    const RefTensor want = c.ref(ToRef(x));
    KernelRunner(c.op).In(x).Out(x).PrepareAndRun();
    ExpectClose(x, want, 2.5e-7, 0, std::string(fb::EnumNameOpCode(c.op)) + " in place");
  }
}

// One op over `in`; the results as floats.
std::vector<float> RunOn(OpCode op, const std::vector<float>& in) {
  Tensor x({static_cast<int64_t>(in.size())}), y({static_cast<int64_t>(in.size())});
  x.set(in);
  KernelRunner(op).In(x).Out(y).PrepareAndRun();
  return y.values();
}

// Bitwise for the signed values (inf, -inf, 0, -0), isnan for NaN.
void ExpectEdges(OpCode op, const std::vector<float>& in, const std::vector<float>& want) {
  const std::vector<float> got = RunOn(op, in);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const std::string what = std::string(fb::EnumNameOpCode(op)) + "(" + std::to_string(in[i]) + ")";
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << what << " = " << got[i];
    } else {
      EXPECT_EQ(got[i], want[i]) << what;
      EXPECT_EQ(std::signbit(got[i]), std::signbit(want[i])) << what;
    }
  }
}

TEST(UnaryMathKernels, DomainEdgesFollowIeee) {
  ExpectEdges(OpCode::Exp, {0.0f, -kInf, kInf, 100.0f, -200.0f, kNaN}, {1.0f, 0.0f, kInf, kInf, 0.0f, kNaN});
  ExpectEdges(OpCode::Log, {1.0f, 0.0f, -0.0f, -1.0f, kInf, -kInf, kNaN}, {0.0f, -kInf, -kInf, kNaN, kInf, kNaN, kNaN});
  ExpectEdges(OpCode::Sqrt, {0.0f, -0.0f, 4.0f, -1.0f, kInf, -kInf, kNaN}, {0.0f, -0.0f, 2.0f, kNaN, kInf, kNaN, kNaN});
  ExpectEdges(OpCode::Rsqrt, {0.0f, -0.0f, 4.0f, -1.0f, kInf, kNaN}, {kInf, -kInf, 0.5f, kNaN, 0.0f, kNaN});
  ExpectEdges(OpCode::Square, {-3.0f, -0.0f, 1e20f, -kInf, kNaN}, {9.0f, 0.0f, kInf, kInf, kNaN});
  ExpectEdges(OpCode::Abs, {-3.0f, -0.0f, 2.0f, -kInf, kNaN}, {3.0f, 0.0f, 2.0f, kInf, kNaN});
}

// dx = dy · sign(x), 0 where x is ±0 (MindSpore's AbsGrad), NaN for NaN.
TEST(UnaryMathKernels, AbsGradIsDyTimesSignOfX) {
  Tensor x = RandomTensor({4, 33}, 9, -3.0f, 3.0f);
  const Tensor dy = RandomTensor({4, 33}, 10);
  x[0] = 0.0f, x[1] = -0.0f, x[2] = kNaN;
  Tensor dx({4, 33});
  KernelRunner(OpCode::AbsGrad).In(dy).In(x).Out(dx).PrepareAndRun();
  for (int64_t i = 0; i < x.numel(); ++i) {
    if (std::isnan(x[i])) {
      EXPECT_TRUE(std::isnan(dx[i])) << i;
      continue;
    }
    const float want = x[i] > 0.0f ? dy[i] : x[i] < 0.0f ? -dy[i] : 0.0f;
    EXPECT_EQ(dx[i], want) << "at " << i << ", x = " << x[i];
  }
}

TEST(UnaryMathKernels, RejectMismatchedShapes) {
  for (const UnaryCase& c : kCases) {
    const Tensor x({2, 3});
    Tensor y({3, 2});
    KernelRunner op(c.op);
    op.In(x).Out(y);
    EXPECT_FALSE(op.Prepare().ok()) << fb::EnumNameOpCode(c.op);
  }
}

}  // namespace
}  // namespace sinkrt::device
