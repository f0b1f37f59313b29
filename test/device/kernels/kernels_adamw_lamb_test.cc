// AdamWeightDecay and Lamb (LambNorms, LambUpdate) over several steps
// against MindSpore's formulas in double (nn.AdamWeightDecay, nn.Lamb),
// the trust ratio's zero-norm rules and clip, the norms of a parameter
// split in blocks (the parallel optimizer's and sharding's case), loss
// scaling, and their load-time validation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "support/kernel_runner.h"

namespace sinkrt::device {
namespace {

using namespace ::sinkrt::testing;
using fb::OpCode;
using Tensor = KernelTensor;

std::vector<double> Doubles(const Tensor& t) {
  std::vector<double> out(t.numel());
  for (int64_t i = 0; i < t.numel(); ++i) out[i] = t[i];
  return out;
}

// MindSpore's AdamWeightDecay, one step in double.
void AdamWeightDecayStep(std::vector<double>& p, std::vector<double>& m, std::vector<double>& v, const Tensor& g,
                         double lr, double b1, double b2, double eps, double wd) {
  for (size_t i = 0; i < p.size(); ++i) {
    m[i] = b1 * m[i] + (1 - b1) * g[i];
    v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
    p[i] -= lr * (m[i] / (std::sqrt(v[i]) + eps) + wd * p[i]);
  }
}

TEST(AdamWeightDecayKernel, TracksMindSporesFormulaOverSteps) {
  const float lr = 0.01f, b1 = 0.9f, b2 = 0.999f, eps = 1e-6f, wd = 0.05f;
  Tensor p = RandomTensor({6, 40}, 11), m({6, 40}), v({6, 40});
  std::vector<double> wp = Doubles(p), wm(p.numel(), 0), wv(p.numel(), 0);
  KernelRunner op(OpCode::AdamWeightDecay);
  Tensor g({6, 40});
  op.In(p).In(g).In(m).In(v).Adam(lr, b1, b2, eps, wd);
  ASSERT_TRUE(op.Prepare().ok());
  for (int step = 0; step < 5; ++step) {
    g.set(RandomTensor({6, 40}, 20 + step).values());
    ASSERT_TRUE(op.Run().ok());
    AdamWeightDecayStep(wp, wm, wv, g, lr, b1, b2, eps, wd);
  }
  ExpectClose(p, wp, 1e-5, 1e-6, "AdamWeightDecay param");
  ExpectClose(m, wm, 1e-5, 1e-7, "AdamWeightDecay m");
  ExpectClose(v, wv, 1e-4, 1e-9, "AdamWeightDecay v");
}

// The decay is decoupled: it shrinks the parameter by lr·wd·param whatever
// the gradient, where Adam's L2 decay would pass through m/√v (a zero
// gradient and zero moments give an update of exactly lr·wd·param here).
TEST(AdamWeightDecayKernel, DecayIsAddedToTheUpdateNotTheGradient) {
  Tensor p({3}), g({3}), m({3}), v({3});
  p.set({2.0f, -4.0f, 0.5f});
  KernelRunner(OpCode::AdamWeightDecay).In(p).In(g).In(m).In(v).Adam(0.1f, 0.9f, 0.999f, 1e-6f, 0.5f).PrepareAndRun();
  ExpectClose(p, {2.0 * 0.95, -4.0 * 0.95, 0.5 * 0.95}, 1e-7, 0, "decoupled decay");
  for (int i = 0; i < 3; ++i) EXPECT_EQ(m[i], 0.0f);
}

struct LambRef {
  std::vector<double> p, m, v;
};

// MindSpore's Lamb (nn.Lamb's _update_run_op), one step t >= 1 in double.
void LambStep(LambRef& r, const Tensor& g, int t, double lr, double b1, double b2, double eps, double wd) {
  const size_t n = r.p.size();
  std::vector<double> mm(n), vv(n);
  double w2 = 0, g2 = 0, h2 = 0;
  for (size_t i = 0; i < n; ++i) {
    r.m[i] = b1 * r.m[i] + (1 - b1) * g[i];
    r.v[i] = b2 * r.v[i] + (1 - b2) * g[i] * g[i];
    mm[i] = r.m[i] / (1 - std::pow(b1, t));
    vv[i] = r.v[i] / (1 - std::pow(b2, t));
    const double hat = mm[i] / std::sqrt(vv[i] + eps) + wd * r.p[i];
    w2 += r.p[i] * r.p[i];
    g2 += static_cast<double>(g[i]) * g[i];
    h2 += hat * hat;
  }
  const double w_norm = std::sqrt(w2), g_norm = std::sqrt(g2), h_norm = std::sqrt(h2);
  double trust = w_norm > 0 ? (g_norm > 0 ? w_norm / h_norm : 1.0) : 1.0;
  trust = std::clamp(trust, 0.0, 10.0);
  for (size_t i = 0; i < n; ++i) r.p[i] -= trust * lr * (mm[i] / (std::sqrt(vv[i]) + eps) + wd * r.p[i]);
}

// Runs AdamPowers, LambNorms, LambUpdate for `steps` steps on p.
struct LambOps {
  Tensor powers{Shape{2}}, sums{Shape{3}};
  KernelRunner pw{OpCode::AdamPowers}, norms{OpCode::LambNorms}, update{OpCode::LambUpdate};
  LambOps(Tensor& p, Tensor& g, Tensor& m, Tensor& v, float lr, float eps, float wd) {
    powers.set({1.0f, 1.0f});
    pw.In(powers).Adam(lr, 0.9f, 0.999f, eps, wd);
    norms.In(p).In(g).In(m).In(v).In(powers).Out(sums).Adam(lr, 0.9f, 0.999f, eps, wd);
    update.In(p).In(m).In(v).In(powers).In(sums).Adam(lr, 0.9f, 0.999f, eps, wd);
    EXPECT_TRUE(pw.Prepare().ok());
    EXPECT_TRUE(norms.Prepare().ok());
    EXPECT_TRUE(update.Prepare().ok());
  }
  void Step() {
    ASSERT_TRUE(pw.Run().ok());
    ASSERT_TRUE(norms.Run().ok());
    ASSERT_TRUE(update.Run().ok());
  }
};

TEST(LambKernels, TrackMindSporesFormulaOverSteps) {
  const float lr = 0.02f, eps = 1e-6f;
  for (float wd : {0.0f, 0.01f}) {
    Tensor p = RandomTensor({8, 30}, 31), g({8, 30}), m({8, 30}), v({8, 30});
    LambRef ref{Doubles(p), std::vector<double>(p.numel(), 0), std::vector<double>(p.numel(), 0)};
    LambOps ops(p, g, m, v, lr, eps, wd);
    for (int t = 1; t <= 5; ++t) {
      g.set(RandomTensor({8, 30}, 40 + t, -0.1f, 0.1f).values());
      ops.Step();
      LambStep(ref, g, t, lr, 0.9, 0.999, eps, wd);
    }
    ExpectClose(p, ref.p, 1e-5, 1e-6, wd > 0 ? "Lamb param (decay)" : "Lamb param");
    ExpectClose(m, ref.m, 1e-5, 1e-7, "Lamb m");
    ExpectClose(v, ref.v, 1e-4, 1e-9, "Lamb v");
  }
}

// ‖w‖ = 0 or ‖g‖ = 0: a trust ratio of 1; a large ratio is clipped to 10.
TEST(LambKernels, TrustRatioZeroNormRulesAndClip) {
  const float lr = 0.1f, eps = 1e-6f;
  struct Case {
    const char* what;
    float w, g;
  };
  for (const Case c :
       {Case{"zero weight", 0.0f, 0.5f}, Case{"zero gradient", 3.0f, 0.0f}, Case{"clipped at 10", 1000.0f, 0.5f}}) {
    Tensor p({4}), g({4}), m({4}), v({4});
    p.set(std::vector<float>(4, c.w));
    g.set(std::vector<float>(4, c.g));
    LambRef ref{Doubles(p), std::vector<double>(4, 0), std::vector<double>(4, 0)};
    LambOps ops(p, g, m, v, lr, eps, 0.0f);
    ops.Step();
    LambStep(ref, g, 1, lr, 0.9, 0.999, eps, 0.0);
    ExpectClose(p, ref.p, 1e-6, 1e-6, c.what);
  }
  // The clipped case moved by exactly 10·lr·(m̂/(√v̂+ε)) ≈ 10·lr.
  Tensor p({4}), g({4}), m({4}), v({4});
  p.set(std::vector<float>(4, 1000.0f));
  g.set(std::vector<float>(4, 0.5f));
  LambOps ops(p, g, m, v, lr, eps, 0.0f);
  ops.Step();
  EXPECT_NEAR(p[0], 1000.0f - 10 * lr, 1e-3);
}

// A parameter updated as two blocks whose sums are added (what the
// AllReduce between the halves does) steps as the whole parameter does.
TEST(LambKernels, BlocksWithSummedNormsStepAsTheWholeParameter) {
  const float lr = 0.05f, eps = 1e-6f, wd = 0.01f;
  const Tensor p0 = RandomTensor({6, 10}, 51), g0 = RandomTensor({6, 10}, 52);
  Tensor p({6, 10}), g({6, 10}), m({6, 10}), v({6, 10});
  p.set(p0.values());
  g.set(g0.values());
  LambOps whole(p, g, m, v, lr, eps, wd);
  whole.Step();

  std::vector<Tensor> bp, bg, bm, bv, bs;
  for (int b = 0; b < 2; ++b) {
    bp.emplace_back(Shape{3, 10});
    bg.emplace_back(Shape{3, 10});
    bm.emplace_back(Shape{3, 10});
    bv.emplace_back(Shape{3, 10});
    bs.emplace_back(Shape{3});
    std::memcpy(bp[b].f32(), p0.f32() + 30 * b, 30 * sizeof(float));
    std::memcpy(bg[b].f32(), g0.f32() + 30 * b, 30 * sizeof(float));
  }
  Tensor powers({2}), total({3});
  powers.set({0.9f, 0.999f});
  for (int b = 0; b < 2; ++b)
    KernelRunner(OpCode::LambNorms)
        .In(bp[b])
        .In(bg[b])
        .In(bm[b])
        .In(bv[b])
        .In(powers)
        .Out(bs[b])
        .Adam(lr, 0.9f, 0.999f, eps, wd)
        .PrepareAndRun();
  for (int k = 0; k < 3; ++k) total[k] = bs[0][k] + bs[1][k];
  for (int b = 0; b < 2; ++b) {
    KernelRunner(OpCode::LambUpdate)
        .In(bp[b])
        .In(bm[b])
        .In(bv[b])
        .In(powers)
        .In(total)
        .Adam(lr, 0.9f, 0.999f, eps, wd)
        .PrepareAndRun();
    for (int64_t i = 0; i < 30; ++i) EXPECT_NEAR(bp[b][i], p[30 * b + i], 1e-6) << "block " << b << " element " << i;
  }
}

// The status as the last input: an overflowed step changes nothing (LambNorms
// writes zero sums); otherwise a gradient scaled by 1024 with 1/1024 in the
// status steps bitwise as the unscaled one.
TEST(AdamWeightDecayAndLamb, SkipAnOverflowedStepAndUnscaleOtherwise) {
  const Tensor p0 = RandomTensor({64}, 61), g = RandomTensor({64}, 62);
  Tensor scaled_g({64});
  for (int64_t i = 0; i < 64; ++i) scaled_g[i] = g[i] * 1024.0f;
  for (bool overflow : {false, true}) {
    Tensor status({2});
    status.set({overflow ? 1.0f : 0.0f, 1.0f / 1024.0f});
    Tensor p({64}), m({64}), v({64}), rp({64}), rm({64}), rv({64});
    p.set(p0.values());
    rp.set(p0.values());
    KernelRunner(OpCode::AdamWeightDecay)
        .In(p)
        .In(scaled_g)
        .In(m)
        .In(v)
        .In(status)
        .Adam(0.01f, 0.9f, 0.999f, 1e-6f, 0.1f)
        .PrepareAndRun();
    if (!overflow)
      KernelRunner(OpCode::AdamWeightDecay)
          .In(rp)
          .In(g)
          .In(rm)
          .In(rv)
          .Adam(0.01f, 0.9f, 0.999f, 1e-6f, 0.1f)
          .PrepareAndRun();
    EXPECT_EQ(std::memcmp(p.bytes(), rp.bytes(), 64 * 4), 0) << "AdamWeightDecay, overflow " << overflow;
    EXPECT_EQ(std::memcmp(v.bytes(), rv.bytes(), 64 * 4), 0) << "AdamWeightDecay v, overflow " << overflow;

    Tensor lp({64}), lm({64}), lv({64}), sums({3}), powers({2});
    lp.set(p0.values());
    powers.set({0.9f, 0.999f});
    sums.set({7.0f, 7.0f, 7.0f});
    KernelRunner norms(OpCode::LambNorms), update(OpCode::LambUpdate);
    norms.In(lp).In(scaled_g).In(lm).In(lv).In(powers).In(status).Out(sums).Adam(0.01f, 0.9f, 0.999f, 1e-6f, 0.1f);
    norms.PrepareAndRun();
    update.In(lp).In(lm).In(lv).In(powers).In(sums).In(status).Adam(0.01f, 0.9f, 0.999f, 1e-6f, 0.1f);
    update.PrepareAndRun();
    if (overflow) {
      EXPECT_EQ(std::memcmp(lp.bytes(), p0.bytes(), 64 * 4), 0);
      for (int k = 0; k < 3; ++k) EXPECT_EQ(sums[k], 0.0f);
      for (int64_t i = 0; i < 64; ++i) EXPECT_EQ(lm[i], 0.0f);
    } else {
      Tensor up({64}), um({64}), uv({64}), usums({3});
      up.set(p0.values());
      KernelRunner(OpCode::LambNorms)
          .In(up)
          .In(g)
          .In(um)
          .In(uv)
          .In(powers)
          .Out(usums)
          .Adam(0.01f, 0.9f, 0.999f, 1e-6f, 0.1f)
          .PrepareAndRun();
      KernelRunner(OpCode::LambUpdate)
          .In(up)
          .In(um)
          .In(uv)
          .In(powers)
          .In(usums)
          .Adam(0.01f, 0.9f, 0.999f, 1e-6f, 0.1f)
          .PrepareAndRun();
      EXPECT_EQ(std::memcmp(lp.bytes(), up.bytes(), 64 * 4), 0);
    }
  }
}

TEST(AdamWeightDecayAndLamb, PrepareRefusesBadOperandsAndOptions) {
  Tensor p({4}), g({4}), m({4}), v({4}), powers({2}), sums({3}), short_v({3}), wide_sums({4});
  KernelRunner beta(OpCode::AdamWeightDecay);
  beta.In(p).In(g).In(m).In(v).Adam(0.1f, 0.9f, 1.5f, 1e-6f, 0);
  ExpectPrepareError(beta, "AdamWeightDecay", {"beta2 is 1.500000, expected [0, 1)"});
  KernelRunner shape(OpCode::AdamWeightDecay);
  shape.In(p).In(g).In(m).In(short_v).Adam(0.1f, 0.9f, 0.999f, 1e-6f, 0);
  ExpectPrepareError(shape, "AdamWeightDecay", {"input 3 has shape [3], expected [4] like input 0"});
  KernelRunner out(OpCode::LambNorms);
  out.In(p).In(g).In(m).In(v).In(powers).Out(wide_sums).Adam(0.1f, 0.9f, 0.999f, 1e-6f, 0);
  ExpectPrepareError(out, "LambNorms", {"output 0", "[3] (sums of w², g², ĝ²)"});
  KernelRunner in(OpCode::LambUpdate);
  in.In(p).In(m).In(v).In(powers).In(wide_sums).Adam(0.1f, 0.9f, 0.999f, 1e-6f, 0);
  ExpectPrepareError(in, "LambUpdate", {"input 4", "[3] (LambNorms' sums)"});
  KernelRunner alias(OpCode::LambUpdate);
  alias.In(p).In(m).In(m).In(powers).In(sums).Adam(0.1f, 0.9f, 0.999f, 1e-6f, 0);
  ExpectPrepareError(alias, "LambUpdate", {"overlaps"});
}

}  // namespace
}  // namespace sinkrt::device
