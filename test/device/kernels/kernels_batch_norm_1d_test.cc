// BatchNorm1d's [N, C] layout in the BatchNorm kernels (device/src/kernels/
// batch_norm.cc): the channels are a row's columns, summed along rows in
// float chunks of 32 rows and runs of 256 channels. Shapes with a partial
// last chunk and a partial last run against the float64 reference
// (forward, moving statistics, gradient, SyncBatchNorm's sums), channels
// far from zero, and the bits whatever the team's size.
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

constexpr float kEps = 1e-5f, kMomentum = 0.9f;

// 77 rows: 2 chunks of 32 and 13; 300 channels: a run of 256 and one of 44.
const std::vector<Shape> kShapes = {{77, 300}, {33, 257}, {5, 600}, {256, 512}};

Tensor Clone(const Tensor& t) {
  Tensor c(t.shape());
  c.set(t.values());
  return c;
}

struct Outputs {
  Tensor y, mean, rstd, mm, mv, dx, dgamma, dbeta;
};

// BatchNorm then BatchNormGrad on x (moving statistics from `mm`, `mv`).
Outputs TrainAndGrad(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& mm, const Tensor& mv,
                     const Tensor& dy, WorkerTeam* team = nullptr) {
  const Shape s = x.shape();
  const Shape c = {s[1]};
  Outputs r{Tensor(s), Tensor(c), Tensor(c), Clone(mm), Clone(mv), Tensor(s), Tensor(c), Tensor(c)};
  KernelRunner(OpCode::BatchNorm)
      .In(x)
      .In(gamma)
      .In(beta)
      .In(r.mm)
      .In(r.mv)
      .Out(r.y)
      .Out(r.mean)
      .Out(r.rstd)
      .BatchNormOpts(kEps, kMomentum)
      .Team(team)
      .PrepareAndRun();
  KernelRunner(OpCode::BatchNormGrad)
      .In(dy)
      .In(x)
      .In(gamma)
      .In(r.mean)
      .In(r.rstd)
      .Out(r.dx)
      .Out(r.dgamma)
      .Out(r.dbeta)
      .BatchNormOpts(kEps, kMomentum)
      .Team(team)
      .PrepareAndRun();
  return r;
}

// Each channel's values at `offset` ± `spread`; the statistics, and with
// `outputs` y and the gradients too.
void ExpectMatchesReference(const Shape& s, float offset, float spread, uint32_t seed, bool outputs = true) {
  const int64_t c = s[1];
  const Tensor x = RandomTensor(s, seed, offset - spread, offset + spread);
  const Tensor gamma = RandomTensor({c}, seed + 1, 0.5f, 1.5f), beta = RandomTensor({c}, seed + 2, -0.5f, 0.5f);
  const Tensor mm = RandomTensor({c}, seed + 3, -0.2f, 0.2f), mv = RandomTensor({c}, seed + 4, 0.5f, 2.0f);
  const Tensor dy = RandomTensor(s, seed + 5);
  const Outputs r = TrainAndGrad(x, gamma, beta, mm, mv, dy);
  const RefBatchNormOut want =
      RefBatchNormTrain(ToRef(x), ToRef(gamma), ToRef(beta), ToRef(mm), ToRef(mv), kEps, kMomentum);
  const RefBatchNormGrads grad = RefBatchNormGrad(ToRef(dy), ToRef(x), ToRef(gamma), kEps);
  const std::string what = ShapeToString(s) + " at " + std::to_string(offset);
  // The mean to 1e-6 of the spread, whatever the offset.
  ExpectClose(r.mean, want.mean, 1e-7, 1e-6 * spread, what + " mean");
  ExpectClose(r.rstd, want.rstd, 1e-5, 0, what + " rstd");
  ExpectClose(r.mm, want.moving_mean, 1e-6, 1e-6, what + " moving_mean");
  ExpectClose(r.mv, want.moving_variance, 1e-5, 1e-6, what + " moving_variance");
  if (!outputs) return;
  ExpectClose(r.y, want.y, 1e-5, 1e-5, what + " y");
  ExpectClose(r.dx, grad.dx, 1e-4, 1e-5, what + " dx");
  ExpectClose(r.dgamma, grad.dgamma, 1e-5, 1e-5, what + " dgamma");
  ExpectClose(r.dbeta, grad.dbeta, 1e-5, 1e-5, what + " dbeta");
}

TEST(BatchNorm1dKernels, RowsAndRunsMatchFloat64Reference) {
  for (const Shape& s : kShapes) ExpectMatchesReference(s, 3.0f, 1.0f, 61);
}

// Channels at 1000 ± 1: the sums are taken about row 0, so float chunks of
// 32 rows near 32000 do not swamp the deviations, and the statistics keep
// 1e-6 of the spread. (y and dx read x − mean in float, whose rounding at
// 1000 is 6e-5 whatever the sums: they are not compared here.)
TEST(BatchNorm1dKernels, ChannelsFarFromZeroKeepTheirStatistics) {
  ExpectMatchesReference({77, 300}, 1000.0f, 1.0f, 71, /*outputs=*/false);
}

// BatchNormStats (SyncBatchNorm's local sums about a shift) and
// BatchNormGradStats in the [N, C] layout.
TEST(BatchNorm1dKernels, SyncBatchNormSumsMatchFloat64) {
  const Shape s{77, 300};
  const Tensor x = RandomTensor(s, 81, 2.0f, 4.0f), shift = RandomTensor({300}, 82, 2.5f, 3.5f);
  Tensor sums({2, 300});
  KernelRunner(OpCode::BatchNormStats).In(x).In(shift).Out(sums).BatchNormOpts(kEps, kMomentum).PrepareAndRun();
  std::vector<double> want(600, 0.0);
  for (int64_t n = 0; n < s[0]; ++n)
    for (int64_t c = 0; c < s[1]; ++c) {
      const double d = static_cast<double>(x.f32()[n * s[1] + c]) - shift.f32()[c];
      want[c] += d;
      want[300 + c] += d * d;
    }
  ExpectClose(sums, want, 1e-5, 1e-5, "BatchNormStats");

  const Tensor dy = RandomTensor(s, 83), mean = RandomTensor({300}, 84, 2.5f, 3.5f);
  const Tensor rstd = RandomTensor({300}, 85, 0.5f, 2.0f);
  Tensor grad_sums({2, 300});
  KernelRunner(OpCode::BatchNormGradStats)
      .In(dy)
      .In(x)
      .In(mean)
      .In(rstd)
      .Out(grad_sums)
      .BatchNormOpts(kEps, kMomentum)
      .PrepareAndRun();
  std::fill(want.begin(), want.end(), 0.0);
  for (int64_t n = 0; n < s[0]; ++n)
    for (int64_t c = 0; c < s[1]; ++c) {
      const double g = dy.f32()[n * s[1] + c];
      want[c] += g;
      want[300 + c] += g * (static_cast<double>(x.f32()[n * s[1] + c]) - mean.f32()[c]) * rstd.f32()[c];
    }
  ExpectClose(grad_sums, want, 1e-5, 1e-5, "BatchNormGradStats");
}

TEST(BatchNorm1dKernels, BitsDoNotDependOnTheTeamSize) {
  const Shape s{77, 600};
  const Tensor x = RandomTensor(s, 91, 2.0f, 4.0f), dy = RandomTensor(s, 92);
  const Tensor gamma = RandomTensor({600}, 93, 0.5f, 1.5f), beta = RandomTensor({600}, 94);
  const Tensor mm = RandomTensor({600}, 95), mv = RandomTensor({600}, 96, 0.5f, 2.0f);
  std::vector<std::vector<float>> runs;
  for (int threads : {1, 2, 3}) {
    WorkerTeam team(threads, 0);
    const Outputs r = TrainAndGrad(x, gamma, beta, mm, mv, dy, &team);
    std::vector<float> all;
    for (const Tensor* t : {&r.y, &r.mm, &r.mv, &r.dx, &r.dgamma, &r.dbeta}) {
      const std::vector<float> v = t->values();
      all.insert(all.end(), v.begin(), v.end());
    }
    runs.push_back(std::move(all));
  }
  EXPECT_EQ(runs[0], runs[1]);
  EXPECT_EQ(runs[0], runs[2]);
}

}  // namespace
}  // namespace sinkrt::device
