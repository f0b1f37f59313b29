// Optimizer update kernels (SgdUpdate, MomentumUpdate, AdamPowers,
// AdamUpdate) over several steps against their update rules in double, plus
// their load-time validation.
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

//===--- Optimizer updates ----------------------------------------------------===//

TEST(OptimizerKernels, SgdUpdate) {
  Tensor p = RandomTensor({5, 7}, 71);
  const Tensor g = RandomTensor({5, 7}, 72);
  std::vector<double> want(p.numel());
  for (int64_t i = 0; i < p.numel(); ++i) want[i] = p[i] - 0.1 * (g[i] + 0.01 * p[i]);
  KernelRunner(OpCode::SgdUpdate).In(p).In(g).Sgd(0.1f, 0.01f).PrepareAndRun();
  ExpectClose(p, want, 1e-6, 1e-7, "SgdUpdate");
}

TEST(OptimizerKernels, MomentumUpdateOverSteps) {
  for (bool nesterov : {false, true}) {
    Tensor p = RandomTensor({300}, 73), acc({300});
    const Tensor g = RandomTensor({300}, 74);
    std::vector<double> wp(p.numel()), wa(p.numel(), 0.0);
    for (int64_t i = 0; i < p.numel(); ++i) wp[i] = p[i];
    KernelRunner op(OpCode::MomentumUpdate);
    op.In(p).In(g).In(acc).Momentum(0.05f, 0.9f, nesterov, 1e-3f);
    ASSERT_TRUE(op.Prepare().ok());
    for (int step = 0; step < 3; ++step) {
      ASSERT_TRUE(op.Run().ok());
      for (int64_t i = 0; i < p.numel(); ++i) {
        const double gg = g[i] + 1e-3 * wp[i];
        wa[i] = 0.9 * wa[i] + gg;
        wp[i] -= nesterov ? 0.05 * (gg + 0.9 * wa[i]) : 0.05 * wa[i];
      }
    }
    ExpectClose(p, wp, 1e-5, 1e-6, nesterov ? "Nesterov param" : "Momentum param");
    ExpectClose(acc, wa, 1e-5, 1e-6, "Momentum accum");
  }
}

TEST(OptimizerKernels, AdamPowersThenAdamUpdate) {
  const float lr = 0.01f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.1f;
  Tensor p = RandomTensor({4, 50}, 75), m({4, 50}), v({4, 50}), powers({2});
  powers.set({1.0f, 1.0f});
  std::vector<double> wp(p.numel()), wm(p.numel(), 0), wv(p.numel(), 0);
  for (int64_t i = 0; i < p.numel(); ++i) wp[i] = p[i];
  double pw1 = 1, pw2 = 1;
  KernelRunner pw(OpCode::AdamPowers);
  pw.In(powers).Adam(lr, b1, b2, eps, wd);
  ASSERT_TRUE(pw.Prepare().ok());
  std::vector<Tensor> grads;
  for (int step = 0; step < 3; ++step) grads.push_back(RandomTensor({4, 50}, 80 + step));
  for (int step = 0; step < 3; ++step) {
    KernelRunner up(OpCode::AdamUpdate);
    up.In(p).In(grads[step]).In(m).In(v).In(powers).Adam(lr, b1, b2, eps, wd);
    ASSERT_TRUE(pw.Run().ok());
    up.PrepareAndRun();
    pw1 *= b1, pw2 *= b2;
    const double lr_t = lr * std::sqrt(1 - pw2) / (1 - pw1);
    for (int64_t i = 0; i < p.numel(); ++i) {
      const double g = grads[step][i] + wd * wp[i];
      wm[i] = b1 * wm[i] + (1 - b1) * g;
      wv[i] = b2 * wv[i] + (1 - b2) * g * g;
      wp[i] -= lr_t * wm[i] / (std::sqrt(wv[i]) + eps);
    }
  }
  ExpectClose(powers, {pw1, pw2}, 1e-6, 0, "AdamPowers");
  ExpectClose(p, wp, 1e-5, 1e-6, "Adam param");
  ExpectClose(m, wm, 1e-5, 1e-7, "Adam m");
  ExpectClose(v, wv, 1e-4, 1e-9, "Adam v");
}

TEST(OptimizerKernels, PrepareRejectsBadOptionsAndOperands) {
  Tensor p({4}), g({4}), m({4}), v({4}), powers({2}), short_g({3});
  KernelRunner beta(OpCode::AdamUpdate);
  beta.In(p).In(g).In(m).In(v).In(powers).Adam(0.1f, 1.0f, 0.999f, 1e-8f, 0);
  ExpectPrepareError(beta, "AdamUpdate", {"beta1 is 1.000000, expected [0, 1)"});
  KernelRunner eps(OpCode::AdamPowers);
  eps.In(powers).Adam(0.1f, 0.9f, 0.999f, 0.0f, 0);
  ExpectPrepareError(eps, "AdamPowers", {"epsilon", "expected a finite value > 0"});
  KernelRunner pw(OpCode::AdamUpdate);
  pw.In(p).In(g).In(m).In(v).In(p).Adam(0.1f, 0.9f, 0.999f, 1e-8f, 0);
  ExpectPrepareError(pw, "AdamUpdate", {"input 4 has shape [4], expected [2] (beta1^t, beta2^t)"});
  KernelRunner shape(OpCode::SgdUpdate);
  shape.In(p).In(short_g).Sgd(0.1f, 0);
  ExpectPrepareError(shape, "SgdUpdate", {"input 1 has shape [3], expected [4] like input 0"});
  KernelRunner same(OpCode::MomentumUpdate);
  same.In(p).In(g).In(p).Momentum(0.1f, 0.9f, false, 0);
  ExpectPrepareError(same, "MomentumUpdate", {"input 2 overlaps input 0"});
  KernelRunner opts(OpCode::SgdUpdate);
  opts.In(p).In(g).Momentum(0.1f, 0.9f, false, 0);
  ExpectPrepareError(opts, "SgdUpdate", {"expected SgdOptions, got MomentumOptions"});
  KernelRunner nan(OpCode::SgdUpdate);
  nan.In(p).In(g).Sgd(std::numeric_limits<float>::quiet_NaN(), 0);
  ExpectPrepareError(nan, "SgdUpdate", {"learning_rate", "finite"});
}

}  // namespace
}  // namespace sinkrt::device
