// Learning-rate schedules (docs/guide/lr_schedules.md): MindSpore's argument
// checks and messages, its dynamic_lr lists, and trained runs in which the
// device computes the rate from the optimizer step: the rate of every step
// (written for test/host/passes/check_lr_schedules.py, an independent
// float64 reimplementation of MindSpore's formulas), one sink of N equal to
// N sinks of 1, gradient accumulation counting optimizer steps, and an
// overflowed step that leaves the schedule where it was.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "sinkrt/device/in_process_device.h"
#include "sinkrt/host/callback.h"
#include "sinkrt/host/loss_scale.h"
#include "sinkrt/host/lr_schedule.h"
#include "sinkrt/host/model.h"
#include "sinkrt/host/optimizer.h"
#include "support/compare.h"
#include "support/in_process_world.h"
#include "support/model_fixtures.h"
#include "support/test_models.h"
#include "support/test_util.h"

namespace sinkrt {
namespace {

using host::LrSchedule;
using host::Model;
using host::OptimizerSpec;

// ---- MindSpore's checks and lists ------------------------------------------------

void ExpectInvalid(const Status& st, const std::string& message) {
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find(message), std::string::npos) << st.message();
}

TEST(LrScheduleValidate, MindSporesMessages) {
  using host::ValidateLrSchedule;
  ExpectInvalid(ValidateLrSchedule(LrSchedule::CosineDecay(-1.0, 0.1, 10)),
                "For 'CosineDecayLR', the 'min_lr' must be float and must >= 0, but got '-1.0' with type 'float'.");
  ExpectInvalid(ValidateLrSchedule(LrSchedule::CosineDecay(0.0, 0.1, 0)),
                "For 'CosineDecayLR', the 'decay_steps' must be int and must > 0, but got '0' with type 'int'.");
  ExpectInvalid(ValidateLrSchedule(LrSchedule::CosineDecay(0.2, 0.1, 10)),
                "For 'CosineDecayLR', the 'max_lr' must be greater than the 'min_lr', but got 'max_lr' value: 0.1, "
                "'min_lr' value: 0.2.");
  ExpectInvalid(ValidateLrSchedule(LrSchedule::WarmUp(0.1, 0)),
                "For 'WarmUpLR', the 'warmup_steps' must be int and must > 0, but got '0' with type 'int'.");
  ExpectInvalid(ValidateLrSchedule(LrSchedule::PolynomialDecay(0.1, 0.01, 10, 0.0)),
                "For 'PolynomialDecayLR', the 'power' must be float and must > 0, but got '0.0' with type 'float'.");
  ExpectInvalid(ValidateLrSchedule(LrSchedule::ExponentialDecay(0.1, -0.5, 10)),
                "For 'ExponentialDecayLR', the 'decay_rate' must be float and must > 0, but got '-0.5'");
  ExpectInvalid(ValidateLrSchedule(LrSchedule::InverseDecay(std::numeric_limits<double>::infinity(), 0.5, 10)),
                "For 'InverseDecayLR', the 'learning_rate' must be a legal value, but got 'inf'.");
  ExpectInvalid(ValidateLrSchedule(LrSchedule::Table({})), "the learning rate table is empty");
  EXPECT_TRUE(ValidateLrSchedule(LrSchedule::WarmupCosine(1e-3, 1e-5, 500, 1000)).ok());
  // Through the optimizer, which names itself: a schedule replaces the rate's check.
  OptimizerSpec opt = OptimizerSpec::Momentum(0.0f, 0.9f);
  opt.schedule = LrSchedule::NaturalExpDecay(0.1, 0.0, 4);
  ExpectInvalid(host::ValidateOptimizer(opt), "Momentum");
  ExpectInvalid(host::ValidateOptimizer(opt), "For 'NaturalExpDecayLR', the 'decay_rate' must be float and must > 0");
  opt.schedule.decay_rate = 0.9;
  EXPECT_TRUE(host::ValidateOptimizer(opt).ok());
}

void ExpectList(const Result<std::vector<double>>& got, const std::vector<double>& want) {
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_DOUBLE_EQ((*got)[i], want[i]) << "step " << i;
}

// The examples of MindSpore's dynamic_lr docstrings, with their printed values.
TEST(DynamicLr, MindSporesExamples) {
  ExpectList(host::PiecewiseConstantLr({2, 5, 10}, {0.1, 0.05, 0.01}),
             {0.1, 0.1, 0.05, 0.05, 0.05, 0.01, 0.01, 0.01, 0.01, 0.01});
  ExpectList(host::ExponentialDecayLr(0.1, 0.9, 6, 2, 1),
             {0.1, 0.1, 0.09000000000000001, 0.09000000000000001, 0.08100000000000002, 0.08100000000000002});
  ExpectList(host::NaturalExpDecayLr(0.1, 0.9, 6, 2, 2, true),
             {0.1, 0.1, 0.1, 0.1, 0.016529888822158657, 0.016529888822158657});
  ExpectList(host::InverseDecayLr(0.1, 0.5, 6, 1, 1, true),
             {0.1, 0.06666666666666667, 0.05, 0.04, 0.03333333333333333, 0.028571428571428574});
  ExpectList(host::CosineDecayLr(0.01, 0.1, 6, 2, 2), {0.1, 0.1, 0.05500000000000001, 0.05500000000000001, 0.01, 0.01});
  ExpectList(host::PolynomialDecayLr(0.1, 0.01, 6, 2, 2, 0.5),
             {0.1, 0.1, 0.07363961030678928, 0.07363961030678928, 0.01, 0.01});
  ExpectList(host::WarmupLr(0.1, 6, 2, 2), {0.0, 0.0, 0.05, 0.05, 0.1, 0.1});
  auto bad = host::PiecewiseConstantLr({2, 5}, {0.1});
  ExpectInvalid(bad.status(),
                "For 'piecewise_constant_lr', the size of 'milestone' must be same with the size of "
                "'learning_rates', but got 'milestone' size: 2, 'learning_rates' size: 1.");
  ExpectInvalid(host::PiecewiseConstantLr({5, 2}, {0.1, 0.2}).status(),
                "the value of milestone[1] must be greater than milestone[0]");
  ExpectInvalid(host::WarmupLr(0.1, 0, 2, 2).status(),
                "The 'total_step' must be int and must > 0, but got '0' with type 'int'.");
  ExpectInvalid(host::CosineDecayLr(0.1, 0.1, 6, 2, 2).status(),
                "For 'cosine_decay_lr', the 'max_lr' should be greater than the 'min_lr'");
}

// The --lr-schedule syntax (docs/guide/lr_schedules.md): --lr is the
// schedule's rate, the run's steps its default span.
TEST(LrScheduleParse, CommandLineSyntax) {
  using host::LrScheduleKind;
  using host::ParseLrSchedule;
  auto wc = ParseLrSchedule("cosine:warmup=500,min=1e-5", 1e-3, 3000);
  ASSERT_TRUE(wc.ok()) << wc.status().ToString();
  EXPECT_EQ(wc->kind, LrScheduleKind::WarmupCosine);
  EXPECT_EQ(wc->learning_rate, 1e-3);
  EXPECT_EQ(wc->end_learning_rate, 1e-5);
  EXPECT_EQ(wc->warmup_steps, 500);
  EXPECT_EQ(wc->decay_steps, 2500);  // the rest of the run
  auto cos = ParseLrSchedule("cosine", 0.1, 800);
  ASSERT_TRUE(cos.ok());
  EXPECT_EQ(cos->kind, LrScheduleKind::CosineDecay);
  EXPECT_EQ(cos->decay_steps, 800);
  auto poly = ParseLrSchedule("poly:end=1e-4,power=2,decay=100,update=1", 0.1, 800);
  ASSERT_TRUE(poly.ok());
  EXPECT_TRUE(poly->update_decay_steps);
  EXPECT_EQ(poly->power, 2.0);
  auto nat = ParseLrSchedule("natural_exp:rate=0.5,decay=10,stair=true", 0.1, 0);
  ASSERT_TRUE(nat.ok());
  EXPECT_EQ(nat->kind, LrScheduleKind::NaturalExpDecay);
  EXPECT_TRUE(nat->is_stair);
  auto pw = ParseLrSchedule("piecewise:milestones=2/5,rates=0.1/0.01", 0.1, 0);
  ASSERT_TRUE(pw.ok());
  EXPECT_EQ(pw->values, (std::vector<float>{0.1f, 0.1f, 0.01f, 0.01f, 0.01f}));
  EXPECT_FALSE(ParseLrSchedule("constant", 0.1, 10)->enabled());
  ExpectInvalid(ParseLrSchedule("cosine:warmpu=5", 0.1, 10).status(), "'cosine' has no key 'warmpu'");
  ExpectInvalid(ParseLrSchedule("exp:decay=10", 0.1, 10).status(), "'exp' needs rate=VALUE");
  ExpectInvalid(ParseLrSchedule("cosine:min=abc", 0.1, 10).status(), "min=abc is not a finite number");
  ExpectInvalid(ParseLrSchedule("step", 0.1, 10).status(), "unknown schedule 'step'");
  ExpectInvalid(ParseLrSchedule("cosine:warmup=10", 0.1, 10).status(), "leaves no step");
  ExpectInvalid(ParseLrSchedule("cosine", 0.1, 0).status(), "give decay=STEPS");
  ExpectInvalid(ParseLrSchedule("cosine:min=0.5", 0.1, 10).status(),
                "For 'CosineDecayLR', the 'max_lr' must be greater than the 'min_lr'");
}

// ---- trained runs ------------------------------------------------------------------

constexpr int64_t kBatch = 8;

// The rate each sink reported (CallbackParams::learning_rate).
struct RateRecorder : host::Callback {
  std::vector<double> rates;
  Status on_train_step_end(host::RunContext& ctx) override {
    rates.push_back(ctx.original_args().learning_rate);
    return Status::Ok();
  }
};

struct Trained {
  std::vector<double> rates;
  testing::NamedTensors state;
};

// Trains the small MLP for `epochs` epochs of `rows` samples, sunk with
// `sink_size` or step by step.
Trained Train(const OptimizerSpec& opt, int64_t rows, int epochs, bool sink, int sink_size, int accumulation = 1,
              const host::LossScaleManager& ls = host::LossScaleManager::None(),
              const testing::SyntheticData* data = nullptr) {
  Trained out;
  testing::InProcessWorld world(1);
  host::ModelOptions o;
  o.compile_cache = "";
  o.context.grad_accumulation_step = accumulation;
  o.loss_scale_manager = ls;
  auto m = Model::Create(testing::MakeMlp(kBatch, {16, 12, 4}), host::LossSpec::None(), opt, world.links, o);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  if (!m.ok()) return out;
  const testing::SyntheticData d = data ? *data : testing::MakeSyntheticData(rows, 16, 4, 11);
  RateRecorder rec;
  const Status st = (*m)->train(epochs, testing::MakeDataset(d, kBatch), {&rec}, sink, sink_size);
  EXPECT_TRUE(st.ok()) << st.ToString();
  out.rates = rec.rates;
  auto state = (*m)->ReadState();
  EXPECT_TRUE(state.ok()) << state.status().ToString();
  if (state.ok()) out.state = std::move(state).value();
  return out;
}

int32_t StepCount(const testing::NamedTensors& state) {
  for (const auto& [name, t] : state)
    if (name == "lr/step") return t.as<int32_t>()[0];
  ADD_FAILURE() << "no lr/step in the state";
  return -1;
}

// A schedule, and the same schedule as a Python call of the reference
// (check_lr_schedules.py), which the rates file starts with.
struct Case {
  std::string name;
  LrSchedule schedule;
  std::string python;
};

Case TableCase(const std::string& name, const Result<std::vector<double>>& r, const std::string& python) {
  EXPECT_TRUE(r.ok()) << name << ": " << r.status().ToString();
  return {name, LrSchedule::Table(r.ok() ? *r : std::vector<double>{}), python};
}

// Every schedule kind, with arguments that make 1,000 steps cross its
// interesting points (warmup's end, decay_steps, stairs, a table's end).
std::vector<Case> Cases() {
  return {
      {"warmup", LrSchedule::WarmUp(0.1, 300), "WarmUpLR(0.1, 300)"},
      {"cosine", LrSchedule::CosineDecay(1e-4, 0.1, 700), "CosineDecayLR(1e-4, 0.1, 700)"},
      {"warmup_cosine", LrSchedule::WarmupCosine(0.1, 1e-5, 250, 600), "WarmupCosine(0.1, 1e-5, 250, 600)"},
      {"polynomial", LrSchedule::PolynomialDecay(0.1, 0.001, 600, 2.0), "PolynomialDecayLR(0.1, 0.001, 600, 2.0)"},
      {"polynomial_update", LrSchedule::PolynomialDecay(0.1, 0.001, 300, 0.5, true),
       "PolynomialDecayLR(0.1, 0.001, 300, 0.5, True)"},
      {"exponential", LrSchedule::ExponentialDecay(0.1, 0.9, 100), "ExponentialDecayLR(0.1, 0.9, 100)"},
      {"exponential_stair", LrSchedule::ExponentialDecay(0.1, 0.9, 100, true),
       "ExponentialDecayLR(0.1, 0.9, 100, True)"},
      {"natural_exp", LrSchedule::NaturalExpDecay(0.1, 0.003, 100), "NaturalExpDecayLR(0.1, 0.003, 100)"},
      {"natural_exp_stair", LrSchedule::NaturalExpDecay(0.1, 0.003, 100, true),
       "NaturalExpDecayLR(0.1, 0.003, 100, True)"},
      {"inverse", LrSchedule::InverseDecay(0.1, 0.5, 100), "InverseDecayLR(0.1, 0.5, 100)"},
      {"inverse_stair", LrSchedule::InverseDecay(0.1, 0.5, 100, true), "InverseDecayLR(0.1, 0.5, 100, True)"},
      TableCase("piecewise_constant_lr", host::PiecewiseConstantLr({200, 500, 900}, {0.1, 0.05, 0.01}),
                "table(piecewise_constant_lr([200, 500, 900], [0.1, 0.05, 0.01]))"),
      TableCase("warmup_lr", host::WarmupLr(0.1, 1000, 50, 6), "table(warmup_lr(0.1, 1000, 50, 6))"),
      TableCase("cosine_decay_lr", host::CosineDecayLr(1e-4, 0.1, 1000, 50, 15),
                "table(cosine_decay_lr(1e-4, 0.1, 1000, 50, 15))"),
      TableCase("polynomial_decay_lr", host::PolynomialDecayLr(0.1, 0.001, 1000, 50, 12, 2.0, true),
                "table(polynomial_decay_lr(0.1, 0.001, 1000, 50, 12, 2.0, True))"),
      TableCase("exponential_decay_lr", host::ExponentialDecayLr(0.1, 0.9, 1000, 50, 3, true),
                "table(exponential_decay_lr(0.1, 0.9, 1000, 50, 3, True))"),
      TableCase("natural_exp_decay_lr", host::NaturalExpDecayLr(0.1, 0.05, 1000, 50, 2),
                "table(natural_exp_decay_lr(0.1, 0.05, 1000, 50, 2))"),
      TableCase("inverse_decay_lr", host::InverseDecayLr(0.1, 0.5, 1000, 50, 4),
                "table(inverse_decay_lr(0.1, 0.5, 1000, 50, 4))"),
      // Shorter than the run: the last rate from step 600 on.
      TableCase("short_table", host::PiecewiseConstantLr({300, 600}, {0.1, 0.02}),
                "table(piecewise_constant_lr([300, 600], [0.1, 0.02]))"),
  };
}

// 1,000 steps, one per sink, per schedule: the rate each step used, as the
// device reported it. With SINKRT_LR_SAMPLE_DIR set, each run's rates go
// to <dir>/<name>.txt (the schedule as a Python call on the first line)
// for the float64 reference, check_lr_schedules.py.
TEST(LrScheduleTrain, EveryStepsRateFromTheDevice) {
  constexpr int kSteps = 1000;
  const char* dir = std::getenv("SINKRT_LR_SAMPLE_DIR");
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.name);
    OptimizerSpec opt = OptimizerSpec::Sgd(0.01f);
    opt.schedule = c.schedule;
    const Trained r = Train(opt, kSteps * kBatch, 1, false, 1);
    ASSERT_EQ(r.rates.size(), static_cast<size_t>(kSteps));
    EXPECT_EQ(StepCount(r.state), kSteps);
    if (!dir) continue;
    std::ofstream f(std::string(dir) + "/" + c.name + ".txt");
    f << c.python << "\n";
    f.precision(9);
    for (double v : r.rates) f << v << "\n";
  }
}

OptimizerSpec ScheduledMomentum() {
  OptimizerSpec opt = OptimizerSpec::Momentum(0.0f, 0.9f);
  opt.schedule = LrSchedule::WarmupCosine(0.05, 1e-4, 10, 30);
  return opt;
}

// The rate depends on the optimizer step, never on where sinks end: one
// sink of 48 steps ends bitwise where 48 sinks of one step do, and 4 sinks
// of 12 report the rates of steps 11, 23, 35, 47 of the step-by-step run.
TEST(LrScheduleTrain, OneSinkOfNEqualsNSinksOfOne) {
  const OptimizerSpec opt = ScheduledMomentum();
  const Trained one = Train(opt, 48 * kBatch, 1, true, 48);
  const Trained steps = Train(opt, 48 * kBatch, 1, false, 1);
  const Trained four = Train(opt, 48 * kBatch, 4, true, 12);
  testing::ExpectSameTensors(one.state, steps.state);
  testing::ExpectSameTensors(four.state, steps.state);
  EXPECT_EQ(StepCount(one.state), 48);
  ASSERT_EQ(steps.rates.size(), 48u);
  ASSERT_EQ(four.rates.size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(four.rates[i], steps.rates[12 * i + 11]) << "sink " << i;
  ASSERT_EQ(one.rates.size(), 1u);
  EXPECT_EQ(one.rates[0], steps.rates[47]);
  // Warmup then decay: the rates are not all equal, so the schedule ran.
  EXPECT_LT(steps.rates[0], steps.rates[10]);
  EXPECT_GT(steps.rates[10], steps.rates[47]);
}

// Gradient accumulation: the counter counts optimizer steps, one per K
// micro-batches, so 12 steps of 3 micro-batches reach step 12 and use the
// rates of steps 0..11, as 12 plain steps do.
TEST(LrScheduleTrain, AccumulationCountsOptimizerSteps) {
  const OptimizerSpec opt = ScheduledMomentum();
  const Trained acc = Train(opt, 36 * kBatch, 1, false, 1, 3);
  const Trained plain = Train(opt, 12 * kBatch, 1, false, 1);
  EXPECT_EQ(StepCount(acc.state), 12);
  ASSERT_EQ(acc.rates.size(), 12u);
  EXPECT_EQ(acc.rates, plain.rates);
}

// Loss scaling: a batch holding an inf overflows; the optimizer skips that
// step and so does the schedule (MindSpore's optimizer, which advances
// global_step, does not run), so the run ends bitwise where the run without
// that batch does, its step counter included.
TEST(LrScheduleTrain, AnOverflowedStepDoesNotAdvanceTheSchedule) {
  constexpr int kSteps = 12, kOverflow = 5;
  testing::SyntheticData poisoned = testing::MakeSyntheticData(kSteps * kBatch, 16, 4, 5);
  poisoned.images[static_cast<size_t>(kOverflow * kBatch * poisoned.features)] = std::numeric_limits<float>::infinity();
  testing::SyntheticData clean = poisoned;
  clean.images.erase(clean.images.begin() + kOverflow * kBatch * clean.features,
                     clean.images.begin() + (kOverflow + 1) * kBatch * clean.features);
  clean.labels.erase(clean.labels.begin() + kOverflow * kBatch, clean.labels.begin() + (kOverflow + 1) * kBatch);
  const OptimizerSpec opt = ScheduledMomentum();
  const host::LossScaleManager ls = host::LossScaleManager::Fixed(1024.0f, true);
  const Trained got = Train(opt, 0, 1, true, kSteps, 1, ls, &poisoned);
  const Trained want = Train(opt, 0, 1, true, kSteps - 1, 1, ls, &clean);
  EXPECT_EQ(StepCount(got.state), kSteps - 1);
  // The loss scale's own counters differ by design (one run overflowed).
  auto without_scale = [](const testing::NamedTensors& state) {
    testing::NamedTensors out;
    for (const auto& entry : state)
      if (entry.first.rfind("loss_scale", 0) != 0) out.push_back(entry);
    return out;
  };
  testing::ExpectSameTensors(without_scale(got.state), without_scale(want.state));
  ASSERT_EQ(got.rates.size(), 1u);
  EXPECT_EQ(got.rates, want.rates);
}

}  // namespace
}  // namespace sinkrt
