// The BatchNorm kernels (BatchNorm, BatchNormInfer, BatchNormStats,
// BatchNormGrad, BatchNormGradStats) against the float64 reference
// (test/support/reference_ops.h): the training forward with its in-place
// update of the moving statistics, eval, the gradient, SyncBatchNorm's
// split into sums that two halves of a batch add up to the whole batch's
// result, and the bits not depending on the team's size.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "device/src/team/worker_team.h"
#include "support/kernel_runner.h"
#include "support/reference_ops.h"

namespace sinkrt::device {
namespace {

using namespace ::sinkrt::testing;
using fb::OpCode;
using Tensor = KernelTensor;

constexpr float kEps = 1e-5f;
constexpr float kMomentum = 0.9f;

// [N, C] (BatchNorm1d), [N, C, H, W] (BatchNorm2d, planes of 1 to 97
// elements, some not a multiple of the 16 lanes), and many channels (more
// than one coefficient block of 64).
const std::vector<Shape> kShapes = {{8, 5}, {64, 130}, {4, 3, 5, 7}, {3, 16, 1, 1}, {3, 70, 2, 3}, {5, 4, 9, 11}};

// A copy with its own storage (a KernelTensor copied as a value would keep
// its bytes at the old allocation's alignment offset).
Tensor Clone(const Tensor& t) {
  Tensor c(t.shape());
  c.set(t.values());
  return c;
}

struct Operands {
  Tensor x, gamma, beta, mm, mv;
};

Operands MakeOperands(const Shape& s, uint32_t seed) {
  const int64_t c = s[1];
  // An offset mean (3) over a unit spread: the two-pass statistics must hold.
  return {RandomTensor(s, seed, 2.0f, 4.0f), RandomTensor({c}, seed + 1, 0.5f, 1.5f),
          RandomTensor({c}, seed + 2, -0.5f, 0.5f), RandomTensor({c}, seed + 3, -0.2f, 0.2f),
          RandomTensor({c}, seed + 4, 0.5f, 2.0f)};
}

TEST(BatchNormKernels, TrainingForwardMatchesFloat64ReferenceAndUpdatesTheMovingStatistics) {
  for (const Shape& s : kShapes) {
    Operands o = MakeOperands(s, 11);
    const RefBatchNormOut want =
        RefBatchNormTrain(ToRef(o.x), ToRef(o.gamma), ToRef(o.beta), ToRef(o.mm), ToRef(o.mv), kEps, kMomentum);
    Tensor y(s), mean({s[1]}), rstd({s[1]});
    KernelRunner(OpCode::BatchNorm)
        .In(o.x)
        .In(o.gamma)
        .In(o.beta)
        .In(o.mm)
        .In(o.mv)
        .Out(y)
        .Out(mean)
        .Out(rstd)
        .BatchNormOpts(kEps, kMomentum)
        .PrepareAndRun();
    const std::string what = ShapeToString(s);
    ExpectClose(y, want.y, 1e-5, 1e-5, what + " y");
    ExpectClose(mean, want.mean, 1e-6, 1e-6, what + " mean");
    ExpectClose(rstd, want.rstd, 1e-5, 0, what + " rstd");
    ExpectClose(o.mm, want.moving_mean, 1e-6, 1e-6, what + " moving_mean (in place)");
    ExpectClose(o.mv, want.moving_variance, 1e-5, 1e-6, what + " moving_variance (in place, unbiased)");
  }
}

TEST(BatchNormKernels, InferenceNormalisesWithTheMovingStatistics) {
  for (const Shape& s : kShapes) {
    const Operands o = MakeOperands(s, 21);
    Tensor y(s);
    KernelRunner(OpCode::BatchNormInfer)
        .In(o.x)
        .In(o.gamma)
        .In(o.beta)
        .In(o.mm)
        .In(o.mv)
        .Out(y)
        .BatchNormOpts(kEps, kMomentum)
        .PrepareAndRun();
    ExpectClose(y, RefBatchNormInfer(ToRef(o.x), ToRef(o.gamma), ToRef(o.beta), ToRef(o.mm), ToRef(o.mv), kEps), 1e-5,
                1e-5, ShapeToString(s));
  }
}

// Runs BatchNorm's forward for the mean and rstd, then BatchNormGrad.
void RunGrad(const Operands& o, const Tensor& dy, Tensor& dx, Tensor& dgamma, Tensor& dbeta) {
  const Shape& s = o.x.shape();
  Tensor y(s), mean({s[1]}), rstd({s[1]}), mm = Clone(o.mm), mv = Clone(o.mv);
  KernelRunner(OpCode::BatchNorm)
      .In(o.x)
      .In(o.gamma)
      .In(o.beta)
      .In(mm)
      .In(mv)
      .Out(y)
      .Out(mean)
      .Out(rstd)
      .BatchNormOpts(kEps, kMomentum)
      .PrepareAndRun();
  KernelRunner(OpCode::BatchNormGrad)
      .In(dy)
      .In(o.x)
      .In(o.gamma)
      .In(mean)
      .In(rstd)
      .Out(dx)
      .Out(dgamma)
      .Out(dbeta)
      .BatchNormOpts(kEps, kMomentum)
      .PrepareAndRun();
}

TEST(BatchNormKernels, GradientMatchesFloat64Reference) {
  for (const Shape& s : kShapes) {
    const Operands o = MakeOperands(s, 31);
    const Tensor dy = RandomTensor(s, 35);
    Tensor dx(s), dgamma({s[1]}), dbeta({s[1]});
    RunGrad(o, dy, dx, dgamma, dbeta);
    const RefBatchNormGrads want = RefBatchNormGrad(ToRef(dy), ToRef(o.x), ToRef(o.gamma), kEps);
    const std::string what = ShapeToString(s);
    ExpectClose(dx, want.dx, 1e-4, 1e-5, what + " dx");
    ExpectClose(dgamma, want.dgamma, 1e-5, 1e-5, what + " dgamma");
    ExpectClose(dbeta, want.dbeta, 1e-5, 1e-5, what + " dbeta");
  }
}

// Rows [r0, r1) of x as a tensor of their own.
Tensor Rows(const Tensor& x, int64_t r0, int64_t r1) {
  Shape s = x.shape();
  const int64_t row = x.numel() / s[0];
  s[0] = r1 - r0;
  Tensor out(s);
  out.set(std::vector<float>(x.f32() + r0 * row, x.f32() + r1 * row));
  return out;
}

// SyncBatchNorm on two ranks, without the network: each half of the batch
// takes its BatchNormStats about the moving mean, the two are added (what
// the AllReduce does), and each half's BatchNorm with the sums gives the
// whole batch's result for its rows, the same moving statistics on both,
// and the same dx through BatchNormGradStats and the group's sums.
TEST(BatchNormKernels, TwoHalvesWithTheGroupsSumsEqualTheWholeBatch) {
  for (const Shape& s : {Shape{8, 6}, Shape{4, 5, 3, 3}}) {
    const Operands o = MakeOperands(s, 41);
    const int64_t c = s[1], half = s[0] / 2;
    const RefBatchNormOut whole =
        RefBatchNormTrain(ToRef(o.x), ToRef(o.gamma), ToRef(o.beta), ToRef(o.mm), ToRef(o.mv), kEps, kMomentum);
    const Tensor dy = RandomTensor(s, 45);
    const RefBatchNormGrads whole_grad = RefBatchNormGrad(ToRef(dy), ToRef(o.x), ToRef(o.gamma), kEps);
    const Tensor parts[2] = {Rows(o.x, 0, half), Rows(o.x, half, s[0])};
    const Tensor dys[2] = {Rows(dy, 0, half), Rows(dy, half, s[0])};
    Tensor sums({2, c}), grad_sums({2, c});
    std::vector<Tensor> local;
    for (const Tensor& p : parts) {
      local.emplace_back(Shape{2, c});
      KernelRunner(OpCode::BatchNormStats)
          .In(p)
          .In(o.mm)
          .Out(local.back())
          .BatchNormOpts(kEps, kMomentum)
          .PrepareAndRun();
    }
    for (int64_t i = 0; i < 2 * c; ++i) sums[i] = local[0][i] + local[1][i];
    Tensor mean[2] = {Tensor({c}), Tensor({c})}, rstd[2] = {Tensor({c}), Tensor({c})};
    for (int r = 0; r < 2; ++r) {
      Tensor y(parts[r].shape()), mm = Clone(o.mm), mv = Clone(o.mv);
      KernelRunner(OpCode::BatchNorm)
          .In(parts[r])
          .In(o.gamma)
          .In(o.beta)
          .In(mm)
          .In(mv)
          .In(sums)
          .Out(y)
          .Out(mean[r])
          .Out(rstd[r])
          .BatchNormOpts(kEps, kMomentum, 2)
          .PrepareAndRun();
      const int64_t row = o.x.numel() / s[0];
      const RefTensor want_y(parts[r].shape(), std::vector<double>(whole.y.data.begin() + r * half * row,
                                                                   whole.y.data.begin() + (r + 1) * half * row));
      ExpectClose(y, want_y, 1e-5, 1e-5, "rank " + std::to_string(r) + " y");
      ExpectClose(mm, whole.moving_mean, 1e-6, 1e-6, "moving_mean");
      ExpectClose(mv, whole.moving_variance, 1e-5, 1e-6, "moving_variance");
      Tensor g({2, c});
      KernelRunner(OpCode::BatchNormGradStats)
          .In(dys[r])
          .In(parts[r])
          .In(mean[r])
          .In(rstd[r])
          .Out(g)
          .BatchNormOpts(kEps, kMomentum)
          .PrepareAndRun();
      for (int64_t i = 0; i < 2 * c; ++i) grad_sums[i] += g[i];
    }
    for (int r = 0; r < 2; ++r) {
      Tensor dx(parts[r].shape()), dgamma({c}), dbeta({c});
      KernelRunner(OpCode::BatchNormGrad)
          .In(dys[r])
          .In(parts[r])
          .In(o.gamma)
          .In(mean[r])
          .In(rstd[r])
          .In(grad_sums)
          .Out(dx)
          .Out(dgamma)
          .Out(dbeta)
          .BatchNormOpts(kEps, kMomentum, 2)
          .PrepareAndRun();
      const int64_t row = o.x.numel() / s[0];
      const RefTensor want_dx(parts[r].shape(), std::vector<double>(whole_grad.dx.data.begin() + r * half * row,
                                                                    whole_grad.dx.data.begin() + (r + 1) * half * row));
      ExpectClose(dx, want_dx, 1e-4, 1e-5, "rank " + std::to_string(r) + " dx");
    }
  }
}

TEST(BatchNormKernels, BitsDoNotDependOnTheTeamSize) {
  const Shape s{16, 24, 16, 16};
  const Operands o = MakeOperands(s, 51);
  const Tensor dy = RandomTensor(s, 55);
  std::vector<std::vector<float>> runs;
  for (int threads : {1, 2, 3}) {
    WorkerTeam team(threads, 0);
    Tensor y(s), mean({s[1]}), rstd({s[1]}), mm = Clone(o.mm), mv = Clone(o.mv), dx(s), dg({s[1]}), db({s[1]});
    KernelRunner(OpCode::BatchNorm)
        .In(o.x)
        .In(o.gamma)
        .In(o.beta)
        .In(mm)
        .In(mv)
        .Out(y)
        .Out(mean)
        .Out(rstd)
        .BatchNormOpts(kEps, kMomentum)
        .Team(&team)
        .PrepareAndRun();
    KernelRunner(OpCode::BatchNormGrad)
        .In(dy)
        .In(o.x)
        .In(o.gamma)
        .In(mean)
        .In(rstd)
        .Out(dx)
        .Out(dg)
        .Out(db)
        .BatchNormOpts(kEps, kMomentum)
        .Team(&team)
        .PrepareAndRun();
    std::vector<float> all = y.values();
    for (const Tensor* t : {&mm, &mv, &dx, &dg, &db}) {
      const std::vector<float> v = t->values();
      all.insert(all.end(), v.begin(), v.end());
    }
    runs.push_back(std::move(all));
  }
  EXPECT_EQ(runs[0], runs[1]);
  EXPECT_EQ(runs[0], runs[2]);
}

TEST(BatchNormKernels, PrepareRefusesBadOperands) {
  const Operands o = MakeOperands({4, 3}, 61);
  Tensor y({4, 3}), mean({3}), rstd({3}), wrong({4});
  KernelRunner bad_channels(OpCode::BatchNorm);
  bad_channels.In(o.x).In(o.gamma).In(o.beta).In(o.mm).In(wrong).Out(y).Out(mean).Out(rstd).BatchNormOpts(kEps, 0.9f);
  ExpectPrepareError(bad_channels, "BatchNorm", {"input 4", "[C=3]"});
  const Operands one = MakeOperands({1, 3}, 62);
  Tensor y1({1, 3});
  KernelRunner single(OpCode::BatchNorm);
  single.In(one.x).In(one.gamma).In(one.beta).In(one.mm).In(one.mv).Out(y1).Out(mean).Out(rstd).BatchNormOpts(kEps,
                                                                                                              0.9f);
  ExpectPrepareError(single, "BatchNorm", {"more than 1 value per channel"});
  KernelRunner bad_momentum(OpCode::BatchNorm);
  bad_momentum.In(o.x).In(o.gamma).In(o.beta).In(o.mm).In(o.mv).Out(y).Out(mean).Out(rstd).BatchNormOpts(kEps, 1.5f);
  ExpectPrepareError(bad_momentum, "BatchNorm", {"momentum"});
}

}  // namespace
}  // namespace sinkrt::device
