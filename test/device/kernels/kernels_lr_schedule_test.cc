// LrSchedule, StepAdvance and the update ops' lr_input (docs/guide/lr_schedules.md):
// the rate of each schedule kind at chosen steps against the formula in
// double, the table's clamp past its end, the counter's skip on an
// overflowed step, an update reading its rate from the tensor exactly as
// from its options, and the load-time checks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numbers>
#include <vector>

#include "support/kernel_runner.h"

namespace sinkrt::device {
namespace {

using namespace ::sinkrt::testing;
using fb::OpCode;
using Tensor = KernelTensor;

Tensor Step(int32_t v) {
  Tensor t(Shape{1}, DType::I32);
  t.i32()[0] = v;
  return t;
}

struct Args {
  fb::LrScheduleKind kind;
  double lr = 0, end = 0, rate = 0;
  int64_t decay = 0, warmup = 0;
  double power = 0;
  bool stair = false, update = false;
  std::vector<float> values = {};
};

// The f32 rate LrSchedule computes at `step`.
float RateAt(const Args& a, int32_t step) {
  Tensor s = Step(step), lr(Shape{1});
  KernelRunner op(OpCode::LrSchedule);
  auto values = a.values.empty() ? 0 : op.fbb().CreateVector(a.values);
  op.In(s).Out(lr).Options(fb::OpOptions::LrScheduleOptions,
                           fb::CreateLrScheduleOptions(op.fbb(), a.kind, a.lr, a.end, a.rate, a.decay, a.warmup,
                                                       a.power, a.stair, a.update, values)
                               .Union());
  op.PrepareAndRun();
  return lr[0];
}

void ExpectRate(const Args& a, int32_t step, double want) {
  EXPECT_EQ(RateAt(a, step), static_cast<float>(want)) << fb::EnumNameLrScheduleKind(a.kind) << " step " << step;
}

TEST(LrScheduleKernel, EveryKindAtChosenSteps) {
  const double pi = std::numbers::pi;
  const Args warm{.kind = fb::LrScheduleKind::WarmUp, .lr = 0.1, .warmup = 4};
  ExpectRate(warm, 0, 0.0);
  ExpectRate(warm, 3, 0.1 * 3 / 4);
  ExpectRate(warm, 9, 0.1);
  const Args cos{.kind = fb::LrScheduleKind::CosineDecay, .lr = 0.1, .end = 0.01, .decay = 4};
  ExpectRate(cos, 2, 0.01 + 0.5 * (0.1 - 0.01) * (1 + std::cos(pi * 2 / 4)));
  ExpectRate(cos, 7, 0.01);  // past decay_steps: min(step, decay_steps)
  const Args wc{.kind = fb::LrScheduleKind::WarmupCosine, .lr = 0.1, .end = 0.001, .decay = 10, .warmup = 5};
  ExpectRate(wc, 2, 0.1 * 2 / 5);
  ExpectRate(wc, 5, 0.1);
  ExpectRate(wc, 8, 0.001 + 0.5 * (0.1 - 0.001) * (1 + std::cos(pi * 3 / 10)));
  const Args poly{.kind = fb::LrScheduleKind::PolynomialDecay, .lr = 0.1, .end = 0.01, .decay = 4, .power = 0.5};
  ExpectRate(poly, 2, (0.1 - 0.01) * std::pow(1 - 2.0 / 4, 0.5) + 0.01);
  ExpectRate(poly, 6, 0.01);
  Args cyc = poly;
  cyc.update = true;  // decay_steps · max(ceil(step / decay_steps), 1)
  ExpectRate(cyc, 0, 0.1);
  ExpectRate(cyc, 6, (0.1 - 0.01) * std::pow(1 - 6.0 / 8, 0.5) + 0.01);
  const Args ex{.kind = fb::LrScheduleKind::ExponentialDecay, .lr = 0.1, .rate = 0.9, .decay = 4};
  ExpectRate(ex, 2, 0.1 * std::pow(0.9, 0.5));
  Args ex_stair = ex;
  ex_stair.stair = true;
  ExpectRate(ex_stair, 7, 0.1 * 0.9);
  // NaturalExpDecayLR's construct(): e^(−rate · step), not step/decay_steps.
  const Args nat{.kind = fb::LrScheduleKind::NaturalExpDecay, .lr = 0.1, .rate = 0.9, .decay = 4};
  ExpectRate(nat, 2, 0.1 * std::exp(-0.9 * 2));
  Args nat_stair = nat;
  nat_stair.stair = true;
  ExpectRate(nat_stair, 6, 0.1 * std::exp(-0.9 * 4));
  const Args inv{.kind = fb::LrScheduleKind::InverseDecay, .lr = 0.1, .rate = 0.5, .decay = 4, .stair = true};
  ExpectRate(inv, 9, 0.1 / (1 + 0.5 * 2));
}

// A table keeps its last value past the end (MindSpore's Gather would
// read out of range there), and a negative count reads as step 0.
TEST(LrScheduleKernel, TableClampsAtBothEnds) {
  const Args table{.kind = fb::LrScheduleKind::Table, .values = {0.5f, 0.25f, 0.125f}};
  EXPECT_EQ(RateAt(table, 0), 0.5f);
  EXPECT_EQ(RateAt(table, 2), 0.125f);
  EXPECT_EQ(RateAt(table, 1000), 0.125f);
  EXPECT_EQ(RateAt(table, -3), 0.5f);
}

TEST(LrScheduleKernel, StepAdvancesUnlessTheStepOverflowed) {
  Tensor step = Step(41);
  KernelRunner plain(OpCode::StepAdvance);
  plain.In(step);
  ASSERT_TRUE(plain.Prepare().ok());
  ASSERT_TRUE(plain.Run().ok());
  ASSERT_TRUE(plain.Run().ok());
  EXPECT_EQ(step.i32()[0], 43);
  for (bool overflow : {false, true}) {
    Tensor s = Step(7), status(Shape{2});
    status.set({overflow ? 1.0f : 0.0f, 0.5f});
    KernelRunner op(OpCode::StepAdvance);
    op.In(s).In(status).PrepareAndRun();
    EXPECT_EQ(s.i32()[0], overflow ? 7 : 8);
  }
  Tensor top = Step(INT32_MAX);
  KernelRunner sat(OpCode::StepAdvance);
  sat.In(top).PrepareAndRun();
  EXPECT_EQ(top.i32()[0], INT32_MAX);
}

// lr_input: the same update as with the rate in the options, bitwise, for
// SGD, Momentum, Adam, AdamWeightDecay and LambUpdate, with and without the
// loss-scale status after it.
TEST(LrScheduleKernel, UpdatesReadTheRateTensorAsTheirOptions) {
  const float lr = 0.0375f;
  Tensor rate(Shape{1});
  rate.set({lr});
  for (bool scaled : {false, true}) {
    Tensor status(Shape{2});
    status.set({0.0f, 0.5f});
    auto run = [&](OpCode code, bool from_tensor, std::vector<Tensor>& t) {
      KernelRunner op(code);
      for (Tensor& x : t) op.In(x);
      if (from_tensor) op.In(rate);
      if (scaled) op.In(status);
      auto& b = op.fbb();
      const float opt_lr = from_tensor ? 0.0f : lr;
      if (code == OpCode::SgdUpdate)
        op.Options(fb::OpOptions::SgdOptions, fb::CreateSgdOptions(b, opt_lr, 1e-3f, from_tensor).Union());
      if (code == OpCode::MomentumUpdate)
        op.Options(fb::OpOptions::MomentumOptions,
                   fb::CreateMomentumOptions(b, opt_lr, 0.9f, true, 1e-3f, from_tensor).Union());
      if (code == OpCode::AdamUpdate || code == OpCode::AdamWeightDecay || code == OpCode::LambUpdate)
        op.Options(fb::OpOptions::AdamOptions,
                   fb::CreateAdamOptions(b, opt_lr, 0.9f, 0.999f, 1e-8f, 1e-3f, from_tensor).Union());
      op.PrepareAndRun();
    };
    for (OpCode code :
         {OpCode::SgdUpdate, OpCode::MomentumUpdate, OpCode::AdamUpdate, OpCode::AdamWeightDecay, OpCode::LambUpdate}) {
      const bool moments = code != OpCode::SgdUpdate && code != OpCode::MomentumUpdate;
      const bool powers = code == OpCode::AdamUpdate || code == OpCode::LambUpdate;
      // The [37] operands: param, grad, state (Lamb's update: param, m, v).
      const size_t count = code == OpCode::SgdUpdate                                      ? 2
                           : code == OpCode::MomentumUpdate || code == OpCode::LambUpdate ? 3
                                                                                          : 4;
      // Two equal sets of operands (built, not copied: a copy's bytes may
      // sit at another alignment offset in its storage).
      auto operands = [&] {
        std::vector<Tensor> t;
        for (size_t i = 0; i < count; ++i) {
          t.push_back(RandomTensor({37}, 90u + static_cast<uint32_t>(i)));
          if (moments && i == count - 1)
            for (int64_t k = 0; k < 37; ++k) t.back()[k] = std::fabs(t.back()[k]);  // v >= 0
        }
        if (powers) {
          t.emplace_back(Shape{2});
          t.back().set({0.9f, 0.999f});
        }
        if (code == OpCode::LambUpdate) {  // LambNorms' sums: a trust ratio of 2/3
          t.emplace_back(Shape{3});
          t.back().set({4.0f, 1.0f, 9.0f});
        }
        return t;
      };
      std::vector<Tensor> a = operands(), b = operands();
      run(code, false, a);
      run(code, true, b);
      for (size_t i = 0; i < count; ++i)
        EXPECT_EQ(std::memcmp(a[i].bytes(), b[i].bytes(), 37 * sizeof(float)), 0)
            << fb::EnumNameOpCode(code) << " input " << i << (scaled ? " scaled" : "");
    }
  }
}

TEST(LrScheduleKernel, PrepareRefusesBadOperandsAndOptions) {
  Tensor f32_step(Shape{1}), step = Step(0), lr(Shape{1}), wide(Shape{2});
  KernelRunner dtype(OpCode::LrSchedule);
  dtype.In(f32_step).Out(lr).Options(
      fb::OpOptions::LrScheduleOptions,
      fb::CreateLrScheduleOptions(dtype.fbb(), fb::LrScheduleKind::WarmUp, 0.1, 0, 0, 0, 4).Union());
  ExpectPrepareError(dtype, "LrSchedule", {"input 0 has dtype f32, expected i32"});
  KernelRunner decay(OpCode::LrSchedule);
  decay.In(step).Out(lr).Options(
      fb::OpOptions::LrScheduleOptions,
      fb::CreateLrScheduleOptions(decay.fbb(), fb::LrScheduleKind::CosineDecay, 0.1, 0, 0, 0).Union());
  ExpectPrepareError(decay, "LrSchedule", {"decay_steps is 0, expected > 0"});
  KernelRunner empty(OpCode::LrSchedule);
  empty.In(step).Out(lr).Options(fb::OpOptions::LrScheduleOptions,
                                 fb::CreateLrScheduleOptions(empty.fbb(), fb::LrScheduleKind::Table).Union());
  ExpectPrepareError(empty, "LrSchedule", {"the rate table is empty"});
  Tensor p({4}), g({4});
  KernelRunner sgd(OpCode::SgdUpdate);
  sgd.In(p).In(g).In(wide).Options(fb::OpOptions::SgdOptions, fb::CreateSgdOptions(sgd.fbb(), 0, 0, true).Union());
  ExpectPrepareError(sgd, "SgdUpdate", {"input 2 has shape [2], expected [1]"});
}

}  // namespace
}  // namespace sinkrt::device
