// The loss-scale kernels (docs/guide/loss_scale.md): GradOverflow finds an inf or
// NaN anywhere in any gradient, LossScaleUpdate is MindSpore's rule, and
// the optimizer updates skip an overflowed step untouched or take the
// scale out of the gradient.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <vector>

#include "runtime/src/loss_scale_rule.h"
#include "support/kernel_runner.h"
#include "support/test_util.h"

namespace sinkrt::testing {
namespace {

using fb::OpCode;

KernelTensor Scalar(float v) {
  KernelTensor t(Shape{});
  t[0] = v;
  return t;
}

// The status GradOverflow writes for these gradients at scale 8.
std::vector<float> Status2(const std::vector<const KernelTensor*>& grads, bool check = true) {
  KernelTensor scale = Scalar(8.0f);
  KernelTensor status(Shape{2});
  KernelRunner op(OpCode::GradOverflow);
  op.In(scale);
  for (const KernelTensor* g : grads) op.In(*g);
  op.Out(status).LossScale(check, false, 2, 1);
  op.PrepareAndRun();
  return status.values();
}

TEST(LossScaleKernels, GradOverflowFindsAnyNonFiniteValueAnywhere) {
  const KernelTensor a = RandomTensor({7, 13}, 1), b = RandomTensor({1000}, 2), c = RandomTensor({3}, 3);
  EXPECT_EQ(Status2({&a, &b, &c}), (std::vector<float>{0.0f, 0.125f}));
  const float bad[] = {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                       std::numeric_limits<float>::quiet_NaN()};
  for (float v : bad)
    for (int64_t where : {int64_t{0}, int64_t{517}, int64_t{999}}) {
      KernelTensor poisoned = RandomTensor({1000}, 2);
      poisoned[where] = v;
      EXPECT_EQ(Status2({&a, &poisoned, &c})[0], 1.0f) << v << " at " << where;
    }
  // The largest finite value and subnormals are finite.
  KernelTensor edge = RandomTensor({4}, 4);
  edge[0] = std::numeric_limits<float>::max();
  edge[1] = -std::numeric_limits<float>::denorm_min();
  EXPECT_EQ(Status2({&edge})[0], 0.0f);
  // check false (FixedLossScaleManager without drop_overflow_update): never.
  KernelTensor nan = RandomTensor({4}, 5);
  nan[2] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(Status2({&nan}, false), (std::vector<float>{0.0f, 0.125f}));
}

TEST(LossScaleKernels, LossScaleUpdateFollowsMindSporesRule) {
  KernelTensor scale = Scalar(16.0f);
  KernelTensor counters(Shape{3}, DType::I32);
  std::memset(counters.bytes(), 0, 12);
  KernelTensor status(Shape{2});
  KernelRunner op(OpCode::LossScaleUpdate);
  op.In(scale).In(counters).In(status).LossScale(true, true, 2.0f, 3);
  SINKRT_ASSERT_OK(op.Prepare());
  float want = 16.0f;
  LossScaleCounters c;
  const bool pattern[] = {false, false, false, true, false, false, false, true, true};
  for (bool overflow : pattern) {
    status[0] = overflow ? 1.0f : 0.0f;
    SINKRT_ASSERT_OK(op.Run());
    DynamicLossScaleStep(2.0f, 3, overflow, &want, &c);
    EXPECT_EQ(scale[0], want);
    EXPECT_EQ(counters.i32()[0], c.steps);
    EXPECT_EQ(counters.i32()[1], c.last_overflow_iter);
    EXPECT_EQ(counters.i32()[2], c.overflow_steps);
  }
  EXPECT_EQ(c.overflow_steps, 3);
}

// The device's update never makes the scale inf: at 2^127 a clean window
// keeps it there (2^128 is inf), and an overflow then halves it as usual.
TEST(LossScaleKernels, LossScaleUpdateKeepsTheScaleFinite) {
  KernelTensor scale = Scalar(std::ldexp(1.0f, 126));
  KernelTensor counters(Shape{3}, DType::I32);
  std::memset(counters.bytes(), 0, 12);
  KernelTensor status(Shape{2});
  KernelRunner op(OpCode::LossScaleUpdate);
  op.In(scale).In(counters).In(status).LossScale(true, true, 2.0f, 1);
  SINKRT_ASSERT_OK(op.Prepare());
  const bool pattern[] = {false, false, false, true, false, false};
  const float want[] = {0x1p127f, 0x1p127f, 0x1p127f, 0x1p126f, 0x1p127f, 0x1p127f};
  for (size_t i = 0; i < std::size(pattern); ++i) {
    status[0] = pattern[i] ? 1.0f : 0.0f;
    SINKRT_ASSERT_OK(op.Run());
    EXPECT_EQ(scale[0], want[i]) << "step " << i + 1;
  }
  EXPECT_EQ(counters.i32()[2], 1);
}

TEST(LossScaleKernels, UpdatesSkipAnOverflowedStepAndUnscaleOtherwise) {
  const KernelTensor p0 = RandomTensor({64}, 7), g = RandomTensor({64}, 8);
  // The gradient scaled by 1024 and the status's 1/1024 give what the
  // unscaled gradient gives, bitwise (a power of two).
  KernelTensor scaled_g(Shape{64});
  for (int64_t i = 0; i < 64; ++i) scaled_g[i] = g[i] * 1024.0f;
  for (OpCode code : {OpCode::SgdUpdate, OpCode::MomentumUpdate, OpCode::AdamUpdate}) {
    for (bool overflow : {false, true}) {
      KernelTensor p(Shape{64}), ref_p(Shape{64}), s1(Shape{64}), s2(Shape{64}), r1(Shape{64}), r2(Shape{64});
      p.set(p0.values());
      ref_p.set(p0.values());
      KernelTensor powers(Shape{2}), ref_powers(Shape{2});
      powers.set({0.9f, 0.999f});
      ref_powers.set({0.9f, 0.999f});
      KernelTensor status(Shape{2});
      status.set({overflow ? 1.0f : 0.0f, 1.0f / 1024.0f});
      KernelRunner scaled(code), plain(code);
      scaled.In(p).In(scaled_g);
      plain.In(ref_p).In(g);
      if (code == OpCode::MomentumUpdate) {
        scaled.In(s1).Momentum(0.1f, 0.9f, false, 1e-3f);
        plain.In(r1).Momentum(0.1f, 0.9f, false, 1e-3f);
      } else if (code == OpCode::AdamUpdate) {
        scaled.In(s1).In(s2).In(powers).Adam(1e-2f, 0.9f, 0.999f, 1e-8f, 1e-3f);
        plain.In(r1).In(r2).In(ref_powers).Adam(1e-2f, 0.9f, 0.999f, 1e-8f, 1e-3f);
      } else {
        scaled.Sgd(0.1f, 1e-3f);
        plain.Sgd(0.1f, 1e-3f);
      }
      scaled.In(status);
      scaled.PrepareAndRun();
      if (overflow) {
        EXPECT_EQ(std::memcmp(p.bytes(), p0.bytes(), 64 * 4), 0) << fb::EnumNameOpCode(code);
        for (int64_t i = 0; i < 64; ++i) EXPECT_EQ(s1[i], 0.0f) << fb::EnumNameOpCode(code);
      } else {
        plain.PrepareAndRun();
        EXPECT_EQ(std::memcmp(p.bytes(), ref_p.bytes(), 64 * 4), 0) << fb::EnumNameOpCode(code);
        EXPECT_EQ(std::memcmp(s1.bytes(), r1.bytes(), 64 * 4), 0) << fb::EnumNameOpCode(code);
      }
    }
  }
  // AdamPowers advances only when the step is not skipped.
  for (bool overflow : {false, true}) {
    KernelTensor powers(Shape{2}), status(Shape{2});
    powers.set({1.0f, 1.0f});
    status.set({overflow ? 1.0f : 0.0f, 1.0f});
    KernelRunner op(OpCode::AdamPowers);
    op.In(powers).In(status).Adam(1e-3f, 0.9f, 0.999f, 1e-8f, 0);
    op.PrepareAndRun();
    EXPECT_EQ(powers[0], overflow ? 1.0f : 0.9f);
  }
}

TEST(LossScaleKernels, PrepareRefusesBadOperandsAndOptions) {
  KernelTensor scale = Scalar(8.0f), vector_scale(Shape{2}), g = RandomTensor({4}, 1), status(Shape{2}),
               wide_status(Shape{3});
  KernelTensor counters(Shape{3}, DType::I32), f32_counters(Shape{3});
  KernelRunner vec(OpCode::GradOverflow);
  vec.In(vector_scale).In(g).Out(status).LossScale(true, false, 2, 1);
  ExpectPrepareError(vec, "GradOverflow", {"input 0", "[] (the loss scale)"});
  KernelRunner out(OpCode::GradOverflow);
  out.In(scale).In(g).Out(wide_status).LossScale(true, false, 2, 1);
  ExpectPrepareError(out, "GradOverflow", {"output 0", "[2] (overflow, 1/loss_scale)"});
  KernelRunner cnt(OpCode::LossScaleUpdate);
  cnt.In(scale).In(f32_counters).In(status).LossScale(true, true, 2, 5);
  ExpectPrepareError(cnt, "LossScaleUpdate", {"input 1 has dtype f32, expected i32"});
  KernelRunner window(OpCode::LossScaleUpdate);
  window.In(scale).In(counters).In(status).LossScale(true, true, 2, 0);
  ExpectPrepareError(window, "LossScaleUpdate", {"scale_window is 0, expected > 0"});
  KernelTensor p = RandomTensor({4}, 2);
  KernelRunner sgd(OpCode::SgdUpdate);
  sgd.In(p).In(g).In(wide_status).Sgd(0.1f, 0);
  ExpectPrepareError(sgd, "SgdUpdate", {"input 2", "[2] (GradOverflow's status)"});
}

}  // namespace
}  // namespace sinkrt::testing
