// Gradient clipping by global norm's kernels (docs/guide/clipping.md):
// SumSquares against a float64 sum, ClipByGlobalNorm against MindSpore's
// clip_by_global_norm formula for norms above and below clip_norm, with
// and without a loss-scale status, an overflowed step left unclipped, and
// the checks made at load.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "support/kernel_runner.h"

namespace sinkrt::device {
namespace {

using namespace ::sinkrt::testing;
using fb::OpCode;
using Tensor = KernelTensor;

double Squares(const Tensor& t) {
  double s = 0;
  for (int64_t i = 0; i < t.numel(); ++i) s += static_cast<double>(t[i]) * t[i];
  return s;
}

TEST(SumSquaresKernel, SumsEverySquareOfEveryInputInDouble) {
  // Odd sizes: the four partial sums and the tail.
  const Tensor a = RandomTensor({7, 13}, 3), b = RandomTensor({5}, 4, -100.0f, 100.0f), c = RandomTensor({1}, 5);
  Tensor sum({1});
  KernelRunner(OpCode::SumSquares).In(a).In(b).In(c).Out(sum).PrepareAndRun();
  const double want = Squares(a) + Squares(b) + Squares(c);
  EXPECT_EQ(sum[0], static_cast<float>(want));  // one rounding, of the f64 sum
}

// MindSpore: x · clip / max(‖g‖, clip), in double here.
double Factor(double sum_of_squares, double clip) { return clip / std::max(std::sqrt(sum_of_squares), clip); }

TEST(ClipByGlobalNormKernel, FactorIsClipOverTheNormAboveItAndOneBelow) {
  for (const float clip : {0.5f, 100.0f}) {  // the norm is ~8: clipped, then not
    Tensor s1({1}), s2({1}), status({2});
    s1[0] = 40.0f;
    s2[0] = 24.0f;
    KernelRunner(OpCode::ClipByGlobalNorm).In(s1).In(s2).Out(status).FillValue(clip).PrepareAndRun();
    EXPECT_EQ(status[0], 0.0f);
    EXPECT_NEAR(status[1], Factor(64.0, clip), 1e-7) << "clip " << clip;
    if (clip > 8) {
      EXPECT_EQ(status[1], 1.0f);
    }
  }
}

// Under loss scaling the sums are of scaled gradients: the norm is the
// unscaled one, and the factor keeps 1/scale so the update unscales too.
TEST(ClipByGlobalNormKernel, TakesTheLossScaleOutOfTheNormAndKeepsItInTheFactor) {
  Tensor sum({1}), in({2}), out({2});
  const double scale = 1024;
  sum[0] = static_cast<float>(9.0 * scale * scale);  // unscaled norm 3
  in[0] = 0.0f;
  in[1] = static_cast<float>(1 / scale);
  KernelRunner(OpCode::ClipByGlobalNorm).In(sum).In(in).Out(out).FillValue(1.0f).PrepareAndRun();
  EXPECT_EQ(out[0], 0.0f);
  const double want = (1 / scale) * (1.0 / 3.0);
  EXPECT_NEAR(out[1], want, want * 1e-6);
}

TEST(ClipByGlobalNormKernel, AnOverflowedStepKeepsItsStatusAndClipsNothing) {
  Tensor sum({1}), in({2}), out({2});
  sum[0] = std::numeric_limits<float>::infinity();
  in[0] = 1.0f;
  in[1] = 0.25f;
  KernelRunner(OpCode::ClipByGlobalNorm).In(sum).In(in).Out(out).FillValue(1.0f).PrepareAndRun();
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], 0.25f);
}

// The updates read the factor as they read 1/scale: an SgdUpdate after
// ClipByGlobalNorm steps by lr · g · clip / ‖g‖.
TEST(ClipByGlobalNormKernel, AnUpdateReadingItsStatusStepsWithTheClippedGradient) {
  const Tensor g = RandomTensor({4, 9}, 8);
  Tensor p = RandomTensor({4, 9}, 9), sum({1}), status({2});
  const std::vector<float> before = p.values();
  KernelRunner(OpCode::SumSquares).In(g).Out(sum).PrepareAndRun();
  KernelRunner(OpCode::ClipByGlobalNorm).In(sum).Out(status).FillValue(0.3f).PrepareAndRun();
  KernelRunner(OpCode::SgdUpdate).In(p).In(g).In(status).Sgd(0.1f, 0.0f).PrepareAndRun();
  const double factor = Factor(Squares(g), 0.3);
  ASSERT_LT(factor, 0.5);
  std::vector<double> want(before.size());
  for (size_t i = 0; i < want.size(); ++i) want[i] = before[i] - 0.1 * g[static_cast<int64_t>(i)] * factor;
  ExpectClose(p, want, 1e-6, 1e-7, "clipped SGD step");
}

TEST(ClipKernels, LoadTimeChecksNameWhatIsWrong) {
  Tensor s({1}), status({2}), wide({3}), i32({1}, DType::I32);
  {
    KernelRunner op(OpCode::ClipByGlobalNorm);
    op.In(s).Out(status).FillValue(-1.0f);
    ExpectPrepareError(op, "ClipByGlobalNorm", {"clip_norm is -1", "expected a finite value > 0"});
  }
  {
    KernelRunner op(OpCode::ClipByGlobalNorm);
    op.In(s).Out(status).FillValue(std::nanf(""));
    ExpectPrepareError(op, "ClipByGlobalNorm", {"clip_norm is nan"});
  }
  {
    KernelRunner op(OpCode::ClipByGlobalNorm);
    op.In(wide).Out(status).FillValue(1.0f);
    ExpectPrepareError(op, "ClipByGlobalNorm", {"input 0", "[1] (a sum of squares)"});
  }
  {
    KernelRunner op(OpCode::ClipByGlobalNorm);
    op.In(status).Out(status).FillValue(1.0f);
    ExpectPrepareError(op, "ClipByGlobalNorm", {"at least one sum of squares"});
  }
  {
    KernelRunner op(OpCode::SumSquares);
    op.In(i32).Out(s);
    ExpectPrepareError(op, "SumSquares", {"input 0"});
  }
  {
    KernelRunner op(OpCode::SumSquares);
    op.In(s).Out(status);
    ExpectPrepareError(op, "SumSquares", {"output 0", "[1] (the sum of squares)"});
  }
}

}  // namespace
}  // namespace sinkrt::device
