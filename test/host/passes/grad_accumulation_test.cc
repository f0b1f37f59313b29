// Gradient accumulation (ParallelContext::grad_accumulation_step,
// docs/guide/grad_accumulation.md): K batches of b per optimizer step train
// exactly as one batch of K·b, stand-alone and data parallel, with one
// gradient reduction per step; eval reads single batches.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "sinkrt/device/in_process_device.h"
#include "sinkrt/fb/task_stream_generated.h"
#include "sinkrt/host/compiler.h"
#include "sinkrt/host/model.h"
#include "sinkrt/host/model_zoo.h"
#include "support/compare.h"
#include "support/in_process_world.h"
#include "support/model_fixtures.h"
#include "support/test_models.h"
#include "support/test_util.h"

namespace sinkrt {
namespace {

using host::Dataset;
using host::LossSpec;
using host::Model;
using host::OptimizerSpec;
using host::ParallelMode;
using testing::LossRecorder;
using testing::OneThreadOptions;
using World = testing::InProcessWorld;

const std::vector<int64_t> kWidths = {64, 48, 48, 10};

Dataset Data(int64_t samples, int64_t batch, bool vit = false) {
  testing::SyntheticData d = testing::MakeSyntheticData(samples, vit ? 784 : 64, 10, 11);
  testing::RandomizeQuarterOfLabels(d);
  return Dataset::FromArrays({{"image", testing::ImagesTensor(d)}, {"label", testing::LabelsTensor(d)}})
      .Shuffle(3)
      .Batch(batch, true);
}

host::Graph Network(int64_t batch, bool vit) {
  return vit ? host::MakeVitNetwork(batch) : host::MakeMlpNetwork(batch, kWidths);
}

OptimizerSpec Optimizer(bool vit) { return vit ? OptimizerSpec::Adam(1e-3f) : OptimizerSpec::Momentum(0.05f, 0.9f); }

struct Trained {
  std::vector<double> losses;
  std::vector<std::pair<std::string, host::Tensor>> state;
  host::EvalResult eval;
  uint64_t round_trips = 0;
};

// `epochs` epochs on `devices` in-process devices (data parallel above 1),
// K batches of `batch` per step: one step per launch (a loss per step), or
// sunk with sink_size 5.
Trained Train(int devices, int64_t batch, int k, int64_t samples, int epochs, bool vit = false, bool sink = false) {
  World world(devices);
  host::ModelOptions o;
  o.compile_cache = "";
  o.context.grad_accumulation_step = k;
  if (devices > 1) {
    o.context.mode = ParallelMode::DataParallel;
    o.context.device_num = devices;
    o.context.gradients_mean = true;
  }
  auto m = Model::Create(Network(batch, vit), LossSpec::SparseSoftmaxCrossEntropy(), Optimizer(vit), world.links, o);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  if (!m.ok()) return {};
  LossRecorder rec;
  Status st = (*m)->train(epochs, Data(samples, batch, vit), {&rec}, sink, 5);
  EXPECT_TRUE(st.ok()) << st.ToString();
  Trained out;
  out.losses = rec.losses;
  out.round_trips = (*m)->host_round_trips();
  auto state = (*m)->ReadState();
  EXPECT_TRUE(state.ok()) << state.status().ToString();
  if (state.ok()) out.state = std::move(state).value();
  auto eval = (*m)->eval(Data(64, batch, vit));
  EXPECT_TRUE(eval.ok()) << eval.status().ToString();
  if (eval.ok()) out.eval = *eval;
  return out;
}

// The losses within `rel` of each other, and the state's f32 tensors within
// `state_abs` element by element (support/compare.h).
void ExpectSameTraining(const Trained& got, const Trained& want, double rel, double state_abs) {
  const double worst = testing::WorstRelative(got.losses, want.losses);
  std::printf("[ info ] worst relative loss difference %.2e over %zu steps\n", worst, want.losses.size());
  EXPECT_LT(worst, rel);
  testing::ExpectSameTensors(got.state, want.state, state_abs);
}

// 4 batches of 8 per step against one batch of 32: 200 optimizer steps, a
// step being 4 batches (the dataset's 50 batches of 32 are 50 steps a pass).
TEST(GradAccumulation, FourBatchesOfEightTrainAsOneBatchOf32) {
  const Trained want = Train(1, 32, 1, 32 * 50, 4);
  const Trained got = Train(1, 8, 4, 32 * 50, 4);
  ASSERT_EQ(want.losses.size(), 200u);
  ExpectSameTraining(got, want, 1e-6, 1e-6);
  // eval reads batches of 8: the same model scores the same rows.
  EXPECT_EQ(got.eval.samples, want.eval.samples);
  EXPECT_NEAR(got.eval.loss, want.eval.loss, 1e-5 * want.eval.loss);
  EXPECT_NEAR(got.eval.accuracy, want.eval.accuracy, 1e-9);
}

// Sunk: sink_size counts optimizer steps (5 of 4 batches each), and a sink
// is one control round trip whatever K.
TEST(GradAccumulation, SinkSizeCountsOptimizerStepsInOneRoundTripPerSink) {
  const Trained want = Train(1, 32, 1, 32 * 50, 4, false, true);
  const Trained got = Train(1, 8, 4, 32 * 50, 4, false, true);
  ASSERT_EQ(want.losses.size(), 4u);  // one per sink: 4 epochs of sink_size 5
  ExpectSameTraining(got, want, 1e-6, 1e-6);
  EXPECT_EQ(got.round_trips, want.round_trips);
}

TEST(GradAccumulation, TwoDataParallelRanksOfFourBatchesTrainAsOneDevice) {
  const Trained want = Train(1, 64, 1, 64 * 40, 4);
  const Trained got = Train(2, 8, 4, 64 * 40, 4);
  ExpectSameTraining(got, want, 1e-6, 1e-6);
}

// Adam divides each gradient by its running RMS, so a parameter whose exact
// gradient is 0 (the attention's key bias: softmax ignores a shift) moves
// by rounding noise at full rate: its values agree to 1e-4, the rest's and
// every loss far closer.
TEST(GradAccumulation, VitWithAdamTrainsAsTheLargerBatch) {
  const Trained want = Train(1, 16, 1, 16 * 20, 2, true);
  const Trained got = Train(1, 4, 4, 16 * 20, 2, true);
  ExpectSameTraining(got, want, 1e-6, 1e-4);
}

// LeNet: convolutions and max pools (whose workspace is a second output)
// copied per micro-step too.
TEST(GradAccumulation, LeNetTrainsAsTheLargerBatch) {
  auto run = [](int64_t batch, int k) {
    const testing::SyntheticData d = testing::MakeSyntheticData(16 * 30, 784, 10, 17);
    device::InProcessDevice dev(OneThreadOptions());
    host::ModelOptions o;
    o.compile_cache = "";
    o.context.grad_accumulation_step = k;
    auto m = Model::Create(host::MakeLeNetNetwork(batch), LossSpec::SparseSoftmaxCrossEntropy(),
                           OptimizerSpec::Momentum(0.02f, 0.9f), dev, o);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    LossRecorder rec;
    if (m.ok()) {
      host::Tensor images = testing::ImagesTensor(d);
      images.shape = {d.size(), 1, 28, 28};
      Status st = (*m)->train(
          1, Dataset::FromArrays({{"image", images}, {"label", testing::LabelsTensor(d)}}).Batch(batch, true), {&rec},
          false);
      EXPECT_TRUE(st.ok()) << st.ToString();
    }
    return rec.losses;
  };
  const std::vector<double> want = run(16, 1), got = run(4, 4);
  ASSERT_EQ(want.size(), 30u);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6 * std::abs(want[i])) << "step " << i;
}

// What the stream holds: a train queue of K batches' columns, an eval queue
// of one, and per step one AllReduce per gradient bucket on the comm stream.
TEST(GradAccumulation, TheStreamReducesOncePerStepAndQueuesKBatches) {
  host::Graph g = Network(8, false);
  const host::TensorId label = g.Input("label", {8}, DType::I32);
  g.SetLoss(g.SparseSoftmaxCrossEntropy(g.outputs().front(), label));
  host::CompileOptions co;
  co.optimizer = Optimizer(false);
  co.parallel_mode = ParallelMode::DataParallel;
  co.world_size = 2;
  co.grad_accumulation = 4;
  auto one = host::Compile(g, [&] {
    host::CompileOptions c = co;
    c.grad_accumulation = 1;
    return c;
  }());
  auto c = host::Compile(g, co);
  SINKRT_ASSERT_OK(c);
  SINKRT_ASSERT_OK(one);
  EXPECT_EQ(c->input_columns, (std::vector<std::string>{"image", "label", "mb1/image", "mb1/label", "mb2/image",
                                                        "mb2/label", "mb3/image", "mb3/label"}));
  EXPECT_NE(c->graph_hash, one->graph_hash);
  const fb::TaskStream& ts = *c->stream.root();
  for (const fb::QueueSpec* q : *ts.queues()) {
    EXPECT_EQ(q->columns()->size(), q->name()->str() == "train" ? 8u : 2u) << q->name()->str();
  }
  int reductions = 0, accumulations = 0;
  for (const fb::Program* p : *ts.programs()) {
    if (p->kind() != fb::ProgramKind::TrainStep) continue;
    for (const fb::Stream* s : *p->streams())
      for (const fb::Task* t : *s->tasks()) {
        reductions += t->body_type() == fb::TaskBody::AllReduceTask;
        accumulations += t->name() && t->name()->str().find("/accumulate/") != std::string::npos;
      }
  }
  EXPECT_EQ(reductions, static_cast<int>(c->report.buckets.size()));
  EXPECT_EQ(reductions, static_cast<int>(one->report.buckets.size()));
  EXPECT_EQ(accumulations, 3 * 6);  // micro-steps 1..3, 6 gradients each
  // The activations of one micro-step are dead before the next: the arena
  // grows by the extra inputs and gradients, not 4x.
  EXPECT_LT(c->report.arena_bytes, 2 * one->report.arena_bytes);
}

TEST(GradAccumulation, RefusesWhatItCannotRunNamingWhy) {
  World world(2);
  host::ModelOptions o;
  o.compile_cache = "";
  o.context.grad_accumulation_step = 0;
  auto m =
      Model::Create(Network(8, false), LossSpec::SparseSoftmaxCrossEntropy(), Optimizer(false), *world.links[0], o);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("'grad_accumulation_step' must be in [1, 1024], but got 0"), std::string::npos)
      << m.status().message();

  o.context.grad_accumulation_step = 2;
  o.context.mode = ParallelMode::SemiAutoParallel;
  o.context.device_num = 2;
  m = Model::Create(Network(8, false), LossSpec::SparseSoftmaxCrossEntropy(), Optimizer(false), world.links, o);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("grad_accumulation_step 2 with parallel_mode semi_auto_parallel"),
            std::string::npos)
      << m.status().message();

  // A dataset of fewer batches than one step needs.
  host::ModelOptions k4;
  k4.compile_cache = "";
  k4.context.grad_accumulation_step = 4;
  device::InProcessDevice dev(OneThreadOptions());
  auto model = Model::Create(Network(8, false), LossSpec::SparseSoftmaxCrossEntropy(), Optimizer(false), dev, k4);
  SINKRT_ASSERT_OK(model);
  Status st = (*model)->train(1, Data(24, 8), {}, true);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("the dataset has 3 batches, fewer than grad_accumulation_step 4"), std::string::npos)
      << st.message();
}

}  // namespace
}  // namespace sinkrt
