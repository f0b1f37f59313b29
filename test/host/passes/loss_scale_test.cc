// Loss scaling (docs/guide/loss_scale.md): MindSpore's update rules, and sunk
// runs in which an overflowed step is skipped on the device, leaving the
// parameters and the optimizer state exactly as if the batch had never
// been there, on one device and on two data-parallel ranks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "host/src/util/py_repr.h"
#include "runtime/src/loss_scale_rule.h"
#include "sinkrt/device/in_process_device.h"
#include "sinkrt/fb/task_stream_generated.h"
#include "sinkrt/host/callback.h"
#include "sinkrt/host/callbacks.h"
#include "sinkrt/host/compiler.h"
#include "sinkrt/host/loss_scale.h"
#include "sinkrt/host/model.h"
#include "support/compare.h"
#include "support/in_process_world.h"
#include "support/model_fixtures.h"
#include "support/test_models.h"
#include "support/test_util.h"

namespace sinkrt {
namespace {

using host::LossScaleManager;
using host::LossSpec;
using host::Model;
using host::OptimizerSpec;
using host::ParallelMode;
using testing::OneThreadOptions;

// ---- MindSpore's rules (DynamicLossScaleUpdateCell) -------------------------

struct Schedule {
  std::vector<float> scales;  // after each step
  LossScaleCounters counters;
};

Schedule RunDynamic(float init, float factor, int32_t window, const std::vector<bool>& overflow) {
  Schedule s;
  float scale = init;
  for (bool o : overflow) {
    DynamicLossScaleStep(factor, window, o, &scale, &s.counters);
    s.scales.push_back(scale);
  }
  return s;
}

// cur_iter starts at 1 and last_overflow_iter at 0, so the first increase
// comes at the window-th step, and then every window steps.
TEST(LossScaleRule, DynamicGrowsEveryWindowStepsWithoutOverflow) {
  const Schedule s = RunDynamic(8, 2, 3, std::vector<bool>(9, false));
  const std::vector<float> want = {8, 8, 16, 16, 16, 32, 32, 32, 64};
  EXPECT_EQ(s.scales, want);
  EXPECT_EQ(s.counters.steps, 9);
  EXPECT_EQ(s.counters.last_overflow_iter, 9);
  EXPECT_EQ(s.counters.overflow_steps, 0);
}

// An overflow divides the scale and restarts the window from that step.
TEST(LossScaleRule, DynamicOverflowHalvesAndRestartsTheWindow) {
  const Schedule s = RunDynamic(8, 2, 3, {false, false, false, true, false, false, false, false});
  const std::vector<float> want = {8, 8, 16, 8, 8, 8, 16, 16};
  EXPECT_EQ(s.scales, want);
  EXPECT_EQ(s.counters.overflow_steps, 1);
  EXPECT_EQ(s.counters.last_overflow_iter, 7);
}

// An overflow on the step the window would grow the scale wins; the scale
// never falls below 1.
TEST(LossScaleRule, DynamicOverflowWinsAndTheScaleStopsAtOne) {
  const Schedule s = RunDynamic(4, 2, 2, {false, true, true, true, true, false, false});
  const std::vector<float> want = {4, 2, 1, 1, 1, 1, 2};
  EXPECT_EQ(s.scales, want);
  EXPECT_EQ(s.counters.overflow_steps, 4);
  const Schedule odd = RunDynamic(3, 4, 1000, {true, true});
  EXPECT_EQ(odd.scales, (std::vector<float>{1, 1}));
}

// The scale stays finite (mindspore.amp.DynamicLossScaler keeps it when
// scale x factor is not finite): it stops at the largest power of two
// below FLT_MAX instead of becoming inf, which inf / factor never leaves.
TEST(LossScaleRule, DynamicNeverGrowsToInfinity) {
  const float top = std::ldexp(1.0f, 127);
  const Schedule s = RunDynamic(std::ldexp(1.0f, 125), 2, 1, {false, false, false, false, true, false, false});
  const std::vector<float> want = {std::ldexp(1.0f, 126), top, top, top, std::ldexp(1.0f, 126), top, top};
  EXPECT_EQ(s.scales, want);
  EXPECT_EQ(s.counters.overflow_steps, 1);
  // A factor below 1 grows the scale on overflow: it stops short of inf too.
  const Schedule shrink = RunDynamic(std::numeric_limits<float>::max(), 0.5f, 1000, {true, true});
  for (float v : shrink.scales) EXPECT_EQ(v, std::numeric_limits<float>::max());
  // A factor that overflows at once keeps the scale where it was.
  const Schedule huge = RunDynamic(8, 1e30f, 1, {false, false, false});
  const std::vector<float> want_huge = {8e30f, 8e30f, 8e30f};
  EXPECT_EQ(huge.scales, want_huge);
}

TEST(LossScaleRule, FixedCountsOnly) {
  LossScaleCounters c;
  for (bool o : {false, true, false, true}) FixedLossScaleStep(o, &c);
  EXPECT_EQ(c.steps, 4);
  EXPECT_EQ(c.overflow_steps, 2);
  EXPECT_EQ(c.last_overflow_iter, 0);
}

TEST(LossScaleManager, ParsesAndChecksLikeMindSpore) {
  auto fixed = host::ParseLossScaleManager("fixed");
  SINKRT_ASSERT_OK(fixed);
  EXPECT_EQ(fixed->kind, LossScaleManager::Kind::Fixed);
  EXPECT_EQ(fixed->loss_scale, 128.0f);
  EXPECT_TRUE(fixed->drop_overflow_update);
  auto keep = host::ParseLossScaleManager("fixed:1024:false");
  SINKRT_ASSERT_OK(keep);
  EXPECT_EQ(keep->loss_scale, 1024.0f);
  EXPECT_FALSE(keep->checks_overflow());
  auto dyn = host::ParseLossScaleManager("dynamic");
  SINKRT_ASSERT_OK(dyn);
  EXPECT_EQ(dyn->loss_scale, 16777216.0f);
  EXPECT_EQ(dyn->scale_factor, 2.0f);
  EXPECT_EQ(dyn->scale_window, 2000);
  auto custom = host::ParseLossScaleManager("dynamic:65536:4:100");
  SINKRT_ASSERT_OK(custom);
  EXPECT_EQ(host::LossScaleManagerText(*custom),
            "DynamicLossScaleManager(init_loss_scale=65536, scale_factor=4, scale_window=100)");
  auto none = host::ParseLossScaleManager("none");
  SINKRT_ASSERT_OK(none);
  EXPECT_FALSE(none->enabled());
  const std::pair<const char*, const char*> bad[] = {
      {"fixed:0.5", "'loss_scale' must be >= 1, but got 0.5"},
      {"dynamic:0", "'init_loss_scale' must be >= 1, but got 0"},
      {"dynamic:8:0", "'scale_factor' must be > 0, but got 0"},
      {"dynamic:8:2:0", "'scale_window' must be a positive int, but got 0"},
      {"dynamic:8:2:1.5", "scale_window must be an integer"},
      {"fixed:8:maybe", "drop_overflow_update must be true or false"},
      {"fixed:abc", "loss_scale 'abc' is not a finite number"},
      {"static", "is not a loss scale manager"},
  };
  for (const auto& [text, want] : bad) {
    auto r = host::ParseLossScaleManager(text);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_NE(r.status().message().find(want), std::string::npos) << text << ": " << r.status().message();
  }
}

// ---- sunk runs ---------------------------------------------------------------

constexpr int64_t kBatch = 16;
constexpr int kSteps = 12;
constexpr int kOverflowBatch = 5;  // 0-based: the sixth step

// A callback that keeps what each sink reported.
struct ScaleRecorder : host::Callback {
  std::vector<double> losses, scales;
  std::vector<int64_t> overflows;
  Status on_train_step_end(host::RunContext& ctx) override {
    const host::CallbackParams& p = ctx.original_args();
    losses.push_back(p.net_outputs);
    scales.push_back(p.loss_scale);
    overflows.push_back(p.overflow_steps);
    return Status::Ok();
  }
};

struct Trained {
  ScaleRecorder rec;
  std::vector<std::pair<std::string, host::Tensor>> state;
};

// The data of `steps` global batches of `batch` x `ranks`; with
// `poison`, the first value of the first row of global batch
// kOverflowBatch is +inf (rank 0's share under data parallel).
testing::SyntheticData Data(int64_t rows, bool poison) {
  testing::SyntheticData d = testing::MakeSyntheticData(rows, 16, 4, 5);
  if (poison)
    d.images[static_cast<size_t>(kOverflowBatch * (rows / kSteps) * d.features)] =
        std::numeric_limits<float>::infinity();
  return d;
}

// `d` without global batch kOverflowBatch.
testing::SyntheticData Without(testing::SyntheticData d, int64_t global_batch) {
  const auto row0 = static_cast<std::ptrdiff_t>(kOverflowBatch * global_batch);
  d.images.erase(d.images.begin() + row0 * d.features, d.images.begin() + (row0 + global_batch) * d.features);
  d.labels.erase(d.labels.begin() + row0, d.labels.begin() + row0 + global_batch);
  return d;
}

// `accumulation` batches per optimizer step (gradient accumulation;
// sink_size counts optimizer steps).
Trained Train(const testing::SyntheticData& d, const OptimizerSpec& opt, const LossScaleManager& ls, int ranks,
              bool sink, int sink_size, int accumulation = 1, host::AmpLevel amp = host::AmpLevel::O0) {
  Trained out;
  testing::InProcessWorld world(ranks);
  host::ModelOptions o;
  o.compile_cache = "";
  o.loss_scale_manager = ls;
  o.amp_level = amp;
  o.context.grad_accumulation_step = accumulation;
  if (ranks > 1) {
    o.context.mode = ParallelMode::DataParallel;
    o.context.device_num = ranks;
    o.context.gradients_mean = true;
  }
  auto m = Model::Create(testing::MakeMlp(kBatch, {16, 12, 4}), LossSpec::None(), opt, world.links, o);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  if (!m.ok()) return out;
  // Sink mode: an epoch is one sink of sink_size steps (MindSpore's
  // semantics), so the epochs cover the data once; non-sink: one epoch.
  const int rows_per_step = static_cast<int>(kBatch) * ranks * accumulation;
  const int epochs = sink ? static_cast<int>(d.size()) / rows_per_step / sink_size : 1;
  Status st = (*m)->train(epochs, testing::MakeDataset(d, kBatch), {&out.rec}, sink, sink_size);
  EXPECT_TRUE(st.ok()) << st.ToString();
  auto state = (*m)->ReadState();
  EXPECT_TRUE(state.ok()) << state.status().ToString();
  if (state.ok()) out.state = std::move(state).value();
  return out;
}

// The state less the loss scale's own (its scale and counters differ from
// an unscaled run's by design).
testing::NamedTensors WithoutLossScale(const testing::NamedTensors& state) {
  testing::NamedTensors out;
  for (const auto& entry : state)
    if (entry.first.rfind("loss_scale", 0) != 0) out.push_back(entry);
  return out;
}

// Every parameter and optimizer state bitwise equal (the loss scale's own
// state aside), compared by support/compare.h.
void ExpectSameParams(const Trained& got, const Trained& want, const std::string& what) {
  SCOPED_TRACE(what);
  const testing::NamedTensors want_params = WithoutLossScale(want.state);
  EXPECT_GT(want_params.size(), 6u);
  testing::ExpectSameTensors(WithoutLossScale(got.state), want_params);
}

// A power-of-two scale is exact in binary: with no overflow the run is
// bitwise the unscaled one, losses and state.
TEST(LossScaleTrain, APowerOfTwoScaleTrainsBitwiseAsWithout) {
  const testing::SyntheticData d = Data(kSteps * kBatch, false);
  const OptimizerSpec opt = OptimizerSpec::Momentum(0.05f, 0.9f);
  const Trained plain = Train(d, opt, LossScaleManager::None(), 1, true, 4);
  const Trained scaled = Train(d, opt, LossScaleManager::Fixed(1024.0f), 1, true, 4);
  ASSERT_EQ(plain.rec.losses.size(), static_cast<size_t>(kSteps / 4));
  ASSERT_EQ(scaled.rec.losses.size(), plain.rec.losses.size());
  for (size_t i = 0; i < plain.rec.losses.size(); ++i) {
    EXPECT_EQ(scaled.rec.losses[i], plain.rec.losses[i]) << "sink " << i;
    EXPECT_EQ(scaled.rec.scales[i], 1024.0);
    EXPECT_EQ(scaled.rec.overflows[i], 0);
  }
  ExpectSameParams(scaled, plain, "fixed 1024");
}

// A batch holding an inf: its gradients are NaN, the device skips that
// update (the optimizer's state and Adam's step count included) and halves
// the scale. Everything then is bitwise what training without that batch
// gives, for Momentum, Adam, AdamWeightDecay and Lamb, in sink and non-sink
// mode.
TEST(LossScaleTrain, AnOverflowedStepIsSkippedAsIfTheBatchWereNotThere) {
  const testing::SyntheticData poisoned = Data(kSteps * kBatch, true);
  const testing::SyntheticData clean = Without(poisoned, kBatch);
  for (const OptimizerSpec& opt : {OptimizerSpec::Momentum(0.05f, 0.9f), OptimizerSpec::Adam(1e-2f),
                                   OptimizerSpec::AdamWeightDecay(1e-2f, 0.01f), OptimizerSpec::Lamb(1e-2f, 0.01f)}) {
    const LossScaleManager ls = LossScaleManager::Dynamic(1024.0f, 2.0f, 4);
    const Trained want = Train(clean, opt, ls, 1, true, kSteps - 1);
    for (bool sink : {true, false}) {
      const Trained got = Train(poisoned, opt, ls, 1, sink, kSteps);
      ExpectSameParams(got, want, std::string(sink ? "sink " : "non-sink ") + host::OptimizerKindName(opt.kind));
      // The schedule: MindSpore's rule over the same overflow pattern.
      std::vector<bool> overflow(kSteps, false);
      overflow[kOverflowBatch] = true;
      const Schedule s = RunDynamic(1024.0f, 2.0f, 4, overflow);
      if (sink) {
        ASSERT_EQ(got.rec.scales.size(), 1u);
        EXPECT_EQ(got.rec.scales[0], s.scales.back());
        EXPECT_EQ(got.rec.overflows[0], 1);
      } else {
        ASSERT_EQ(got.rec.scales.size(), static_cast<size_t>(kSteps));
        for (int i = 0; i < kSteps; ++i) {
          EXPECT_EQ(got.rec.scales[i], s.scales[i]) << "step " << i + 1;
          EXPECT_EQ(got.rec.overflows[i], i == kOverflowBatch ? 1 : 0) << "step " << i + 1;
        }
      }
    }
  }
}

// amp O2 (bf16 compute, f32 master weights and optimizer state) with the
// decoupled-decay optimizers: the overflowed step is skipped as well, so
// the run is bitwise the one without that batch.
TEST(LossScaleTrain, AtO2AdamWeightDecayAndLambSkipAnOverflowedStep) {
  const testing::SyntheticData poisoned = Data(kSteps * kBatch, true);
  const testing::SyntheticData clean = Without(poisoned, kBatch);
  for (const OptimizerSpec& opt : {OptimizerSpec::AdamWeightDecay(1e-2f, 0.01f), OptimizerSpec::Lamb(1e-2f, 0.01f)}) {
    const LossScaleManager ls = LossScaleManager::Dynamic(1024.0f, 2.0f, 4);
    const Trained want = Train(clean, opt, ls, 1, true, kSteps - 1, 1, host::AmpLevel::O2);
    const Trained got = Train(poisoned, opt, ls, 1, true, kSteps, 1, host::AmpLevel::O2);
    ExpectSameParams(got, want, std::string("O2 ") + host::OptimizerKindName(opt.kind));
    ASSERT_EQ(got.rec.overflows.size(), 1u);
    EXPECT_EQ(got.rec.overflows[0], 1);
  }
}

// Only rank 0's share of one global batch overflows. The ranks check the
// same reduced gradients, so both skip (Model checks that they counted the
// same overflows) and both end as the data-parallel run without it.
TEST(LossScaleTrain, DataParallelRanksAgreeOnTheOverflow) {
  const testing::SyntheticData poisoned = Data(kSteps * 2 * kBatch, true);
  const testing::SyntheticData clean = Without(poisoned, 2 * kBatch);
  const OptimizerSpec opt = OptimizerSpec::Momentum(0.05f, 0.9f);
  const LossScaleManager ls = LossScaleManager::Dynamic(256.0f, 2.0f, 3);
  const Trained want = Train(clean, opt, ls, 2, true, kSteps - 1);
  const Trained got = Train(poisoned, opt, ls, 2, true, kSteps);
  ExpectSameParams(got, want, "data parallel");
  ASSERT_EQ(got.rec.overflows.size(), 1u);
  EXPECT_EQ(got.rec.overflows[0], 1);
}

// SEMI_AUTO_PARALLEL (Megatron's pair on 2 ranks): each rank checks the
// gradients it holds (different slices) and the ranks take the max of
// their flags, an AllReduce in the stream; the poisoned step is skipped
// everywhere, bitwise as if its batch had not been there.
host::Graph MegatronMlp(int64_t batch) {
  host::Graph g("mlp");
  const host::TensorId x = g.Input("image", {batch, 16});
  const host::TensorId w1 = g.Param("w1", {16, 32}, host::InitSpec::HeUniform(11));
  const host::TensorId b1 = g.Param("b1", {32}, host::InitSpec::Zeros());
  const host::TensorId w2 = g.Param("w2", {32, 4}, host::InitSpec::XavierUniform(13));
  const host::TensorId b2 = g.Param("b2", {4}, host::InitSpec::Zeros());
  g.AddOutput(g.BiasAdd(g.MatMul(g.Tanh(g.BiasAdd(g.MatMul(x, w1), b1)), w2), b2));
  const std::vector<std::vector<std::vector<int64_t>>> s = {
      {{1, 1}, {1, 2}}, {{1, 2}, {2}}, {{1, 2}}, {{1, 2}, {2, 1}}, {{1, 1}, {1}}};
  for (size_t i = 0; i < s.size(); ++i) g.Shard(g.ops()[i].name, s[i]);
  return g;
}

Trained TrainSemi(const testing::SyntheticData& d, const LossScaleManager& ls, int sink_size) {
  Trained out;
  testing::InProcessWorld world(2);
  host::ModelOptions o;
  o.compile_cache = "";
  o.loss_scale_manager = ls;
  o.context.mode = ParallelMode::SemiAutoParallel;
  o.context.device_num = 2;
  o.context.full_batch = true;
  auto m = Model::Create(MegatronMlp(kBatch), LossSpec::SparseSoftmaxCrossEntropy(),
                         OptimizerSpec::Momentum(0.05f, 0.9f), world.links, o);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  if (!m.ok()) return out;
  Status st = (*m)->train(static_cast<int>(d.size() / kBatch / sink_size), testing::MakeDataset(d, kBatch), {&out.rec},
                          true, sink_size);
  EXPECT_TRUE(st.ok()) << st.ToString();
  auto state = (*m)->ReadState();
  EXPECT_TRUE(state.ok()) << state.status().ToString();
  if (state.ok()) out.state = std::move(state).value();
  return out;
}

TEST(LossScaleTrain, SemiAutoRanksAgreeOnTheOverflow) {
  const testing::SyntheticData poisoned = Data(kSteps * kBatch, true);
  const testing::SyntheticData clean = Without(poisoned, kBatch);
  const LossScaleManager ls = LossScaleManager::Dynamic(256.0f, 2.0f, 3);
  const Trained want = TrainSemi(clean, ls, kSteps - 1);
  const Trained got = TrainSemi(poisoned, ls, kSteps);
  ExpectSameParams(got, want, "semi-auto");
  ASSERT_EQ(got.rec.overflows.size(), 1u);
  EXPECT_EQ(got.rec.overflows[0], 1);
  // The stream reduces the flags with a max over both ranks.
  host::CompileOptions co;
  co.optimizer = OptimizerSpec::Momentum(0.05f, 0.9f);
  co.parallel_mode = ParallelMode::SemiAutoParallel;
  co.world_size = 2;
  co.full_batch = true;
  co.loss_scale = ls;
  host::Graph g = MegatronMlp(kBatch);
  g.SetLoss(g.SparseSoftmaxCrossEntropy(g.outputs().front(), g.Input("label", {kBatch}, DType::I32)));
  auto cs = host::Compile(g, co);
  SINKRT_ASSERT_OK(cs);
  bool found = false;
  for (const fb::Program* p : *cs->stream.root()->programs())
    for (const fb::Stream* s : *p->streams())
      for (const fb::Task* t : *s->tasks())
        if (t->body_type() == fb::TaskBody::AllReduceTask && t->body_as_AllReduceTask()->op() == fb::ReduceOp::Max)
          found = true;
  EXPECT_TRUE(found) << "no AllReduce Max of the overflow status";
}

// Gradient accumulation (docs/guide/grad_accumulation.md): the K batches'
// summed gradients are checked and unscaled once per optimizer step, and a
// power-of-two scale trains bitwise as the unscaled accumulated run, on one
// device and on two data-parallel ranks, with the scale and its counters
// reported every sink.
TEST(LossScaleTrain, WithGradientAccumulationTrainsBitwiseAsWithout) {
  const testing::SyntheticData d = Data(kSteps * 2 * kBatch, false);
  const OptimizerSpec opt = OptimizerSpec::Momentum(0.05f, 0.9f);
  for (int ranks : {1, 2}) {
    // 2 x kSteps batches: kSteps optimizer steps on one rank, half on two.
    const int steps = kSteps / ranks;
    const Trained plain = Train(d, opt, LossScaleManager::None(), ranks, true, 3, 2);
    ASSERT_EQ(plain.rec.losses.size(), static_cast<size_t>(steps / 3)) << ranks;
    for (const LossScaleManager& ls : {LossScaleManager::Fixed(128.0f), LossScaleManager::Dynamic(1024.0f, 2.0f, 2)}) {
      const std::string what = host::LossScaleManagerText(ls) + " on " + std::to_string(ranks) + " rank(s)";
      const Trained scaled = Train(d, opt, ls, ranks, true, 3, 2);
      ASSERT_EQ(scaled.rec.losses.size(), plain.rec.losses.size()) << what;
      for (size_t i = 0; i < plain.rec.losses.size(); ++i) {
        EXPECT_EQ(scaled.rec.losses[i], plain.rec.losses[i]) << what << ", sink " << i;
        EXPECT_EQ(scaled.rec.overflows[i], 0) << what << ", sink " << i;
      }
      // The schedule counts optimizer steps, not batches.
      const Schedule want = RunDynamic(1024.0f, 2.0f, 2, std::vector<bool>(static_cast<size_t>(steps), false));
      for (size_t i = 0; i < scaled.rec.scales.size(); ++i)
        EXPECT_EQ(scaled.rec.scales[i], ls.kind == LossScaleManager::Kind::Dynamic ? want.scales[3 * i + 2] : 128.0f)
            << what << ", sink " << i;
      ExpectSameParams(scaled, plain, what);
    }
  }
}

// An inf in the second batch of an optimizer step poisons that step's
// accumulated gradients: the whole step is skipped, bitwise as if both of
// its batches had not been there.
TEST(LossScaleTrain, WithGradientAccumulationAnOverflowSkipsTheWholeStep) {
  const testing::SyntheticData poisoned = Data(kSteps * kBatch, true);  // batch 5: the 2nd of step 3
  testing::SyntheticData clean = poisoned;
  const auto row0 = static_cast<std::ptrdiff_t>((kOverflowBatch - 1) * kBatch);
  clean.images.erase(clean.images.begin() + row0 * clean.features,
                     clean.images.begin() + (row0 + 2 * kBatch) * clean.features);
  clean.labels.erase(clean.labels.begin() + row0, clean.labels.begin() + row0 + 2 * kBatch);
  const OptimizerSpec opt = OptimizerSpec::Momentum(0.05f, 0.9f);
  const LossScaleManager ls = LossScaleManager::Fixed(64.0f);
  const Trained want = Train(clean, opt, ls, 1, true, kSteps / 2 - 1, 2);
  const Trained got = Train(poisoned, opt, ls, 1, true, kSteps / 2, 2);
  ExpectSameParams(got, want, "accumulated step with an inf");
  ASSERT_EQ(got.rec.overflows.size(), 1u);
  EXPECT_EQ(got.rec.overflows[0], 1);
}

// A scale that would grow past FLT_MAX stays at 2^127 (and every step is
// applied) instead of becoming inf and skipping every later step: 2^120
// doubled every step reaches 2^127 after 7 steps, inf at the 8th before.
TEST(LossScaleTrain, DynamicScaleStaysFiniteAndStepsKeepApplying) {
  const testing::SyntheticData d = Data(kSteps * kBatch, false);
  const Trained got = Train(d, OptimizerSpec::Momentum(0.05f, 0.9f),
                            LossScaleManager::Dynamic(std::ldexp(1.0f, 120), 2.0f, 1), 1, false, kSteps);
  ASSERT_EQ(got.rec.scales.size(), static_cast<size_t>(kSteps));
  std::vector<bool> overflow;
  for (int64_t o : got.rec.overflows) overflow.push_back(o != 0);
  const Schedule s = RunDynamic(std::ldexp(1.0f, 120), 2.0f, 1, overflow);
  for (int i = 0; i < kSteps; ++i) {
    EXPECT_TRUE(std::isfinite(got.rec.scales[i])) << "step " << i + 1;
    EXPECT_EQ(got.rec.scales[i], s.scales[i]) << "step " << i + 1;
    EXPECT_EQ(got.rec.overflows[i], 0) << "step " << i + 1 << ": these gradients are far below FLT_MAX / 2^127";
  }
  EXPECT_EQ(got.rec.scales.back(), std::ldexp(1.0, 127));
}

// A skipped step is never silent: LossScaleMonitor prints the epoch's
// count. The count is the run's own: a second train() of the same model,
// and one after WriteState (a resume) of counters holding earlier
// overflows, report only their own sinks' skipped steps.
TEST(LossScaleTrain, LossScaleMonitorSaysHowManyStepsWereSkipped) {
  const testing::SyntheticData poisoned = Data(kSteps * kBatch, true);
  const testing::SyntheticData clean = Data(kSteps * kBatch, false);
  device::InProcessDevice dev(OneThreadOptions());
  host::ModelOptions o;
  o.compile_cache = "";
  o.loss_scale_manager = LossScaleManager::Dynamic(1024.0f, 2.0f, 4);
  auto m = Model::Create(testing::MakeMlp(kBatch, {16, 12, 4}), LossSpec::None(), OptimizerSpec::Momentum(0.05f, 0.9f),
                         dev, o);
  SINKRT_ASSERT_OK(m);
  std::ostringstream out;
  host::LossScaleMonitor monitor(out);
  ScaleRecorder rec;
  SINKRT_ASSERT_OK((*m)->train(1, testing::MakeDataset(poisoned, kBatch), {&monitor, &rec}, true, kSteps));
  std::vector<bool> overflow(kSteps, false);
  overflow[kOverflowBatch] = true;
  const Schedule s = RunDynamic(1024.0f, 2.0f, 4, overflow);
  EXPECT_EQ(out.str(), "epoch: 1: 1 of 12 steps overflowed, its update skipped (loss scale " +
                           host::PyFloatRepr(s.scales.back()) + ")\n");
  // Again on clean data: nothing skipped, nothing said.
  out.str("");
  SINKRT_ASSERT_OK((*m)->train(1, testing::MakeDataset(clean, kBatch), {&monitor, &rec}, true, kSteps));
  EXPECT_EQ(out.str(), "");
  ASSERT_EQ(rec.overflows.size(), 2u);
  EXPECT_EQ(rec.overflows[1], 0) << "the first run's overflow counted again";
  // A state whose counters hold 5 earlier overflows, as a checkpoint would.
  auto state = (*m)->ReadState();
  SINKRT_ASSERT_OK(state);
  for (auto& [name, t] : *state)
    if (name == "loss_scale/counters") reinterpret_cast<int32_t*>(t.data.data())[2] = 5;
  SINKRT_ASSERT_OK((*m)->WriteState(*state));
  SINKRT_ASSERT_OK((*m)->train(1, testing::MakeDataset(poisoned, kBatch), {&monitor, &rec}, true, kSteps));
  ASSERT_EQ(rec.overflows.size(), 3u);
  EXPECT_EQ(rec.overflows[2], 1);
  EXPECT_NE(out.str().find("epoch: 1: 1 of 12 steps overflowed"), std::string::npos) << out.str();
}

// FixedLossScaleManager(drop_overflow_update=False): no check, the step
// updates with whatever the gradients hold (MindSpore's behaviour).
TEST(LossScaleTrain, FixedWithoutDropUpdatesEveryStep) {
  const testing::SyntheticData poisoned = Data(kSteps * kBatch, true);
  const Trained got =
      Train(poisoned, OptimizerSpec::Momentum(0.05f, 0.9f), LossScaleManager::Fixed(8.0f, false), 1, true, kSteps);
  ASSERT_EQ(got.rec.overflows.size(), 1u);
  EXPECT_EQ(got.rec.overflows[0], 0);
  bool nan = false;
  for (const auto& [name, t] : got.state)
    if (name == "fc1.weight")
      for (size_t i = 0; i < t.data.size() / 4; ++i)
        nan = nan || std::isnan(reinterpret_cast<const float*>(t.data.data())[i]);
  EXPECT_TRUE(nan) << "the NaN gradients were applied";
}

TEST(LossScaleCompile, RefusedWhereNotSupported) {
  host::CompileOptions co;
  co.optimizer = OptimizerSpec::Sgd(0.1f);
  co.loss_scale = LossScaleManager::Dynamic();
  co.parallel_mode = ParallelMode::DataParallel;
  co.world_size = 2;
  co.pipeline = {.stages = 2, .micro_size = 2, .scheduler = "1f1b", .stage_of = {}};
  auto r = host::Compile(testing::MakeMlp(8, {16, 12, 4}), co);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("loss scaling with pipeline stages is not supported yet"), std::string::npos)
      << r.status().message();
  co.pipeline = {};
  co.parallel_mode = ParallelMode::StandAlone;
  co.world_size = 1;
  co.loss_scale = LossScaleManager::Fixed(0.5f);
  r = host::Compile(testing::MakeMlp(8, {16, 12, 4}), co);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'loss_scale' must be >= 1"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace sinkrt
