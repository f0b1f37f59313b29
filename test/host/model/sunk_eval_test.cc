// Sunk eval (Model::eval with dataset_sink_mode; model/eval_sunk.h): the
// full batches of a pass run as one RunSink(EvalStep, N), the device summing
// the metrics, and the figures are the per-batch eval's to the bit. On one
// device, on pipeline stages, and what SEMI_AUTO_PARALLEL does (per batch).
// Data parallel through real daemons is in sinkd_world_test.cc.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "sinkrt/device/in_process_device.h"
#include "sinkrt/host/model.h"
#include "sinkrt/host/model_zoo.h"
#include "support/in_process_world.h"
#include "support/model_fixtures.h"
#include "support/test_models.h"
#include "support/test_util.h"

namespace sinkrt {
namespace {

using ::testing::HasSubstr;

using host::Dataset;
using host::EvalResult;
using host::LossSpec;
using host::Model;
using host::OptimizerSpec;
using testing::CountingDevice;
using World = testing::InProcessWorld;

constexpr int64_t kBatch = 8;
constexpr int64_t kFeatures = 16;
constexpr int kClasses = 4;

std::unique_ptr<Model> TrainedModel(DeviceLink& dev, int64_t batch = kBatch) {
  auto m = Model::Create(testing::MlpNetwork(batch, {kFeatures, 12, kClasses}), LossSpec::SparseSoftmaxCrossEntropy(),
                         OptimizerSpec::Momentum(0.05f, 0.9f), dev);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  if (!m.ok()) return nullptr;
  const testing::SyntheticData train = testing::MakeSyntheticData(6 * batch, kFeatures, kClasses, 3);
  Status st = (*m)->train(2, testing::MakeDataset(train, batch), {}, true);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return std::move(m).value();
}

// Bitwise: the sunk figures are the per-batch ones, not merely close.
void ExpectSameFigures(const EvalResult& sunk, const EvalResult& per_batch) {
  EXPECT_EQ(sunk.samples, per_batch.samples);
  EXPECT_EQ(sunk.loss, per_batch.loss);
  EXPECT_EQ(sunk.accuracy, per_batch.accuracy);
}

// Batch 12 too: a weight that is not a power of two, so loss x rows rounds
// differently from a sum of losses times rows, and only the same
// per-batch operations in the same order give the same bits.
TEST(SunkEval, OneSinkPerPassPlusThePartialBatchWithThePerBatchFigures) {
  for (int64_t batch : {kBatch, int64_t{12}}) {
    CountingDevice dev;
    auto model = TrainedModel(dev, batch);
    ASSERT_TRUE(model);
    // All full; full and a partial of 5 rows; one partial batch only; many.
    for (int64_t n : {6 * batch, 5 * batch + 5, int64_t{5}, 40 * batch + 3}) {
      SCOPED_TRACE("batch " + std::to_string(batch) + ", " + std::to_string(n) + " samples");
      const Dataset data = testing::MakeDataset(testing::MakeSyntheticData(n, kFeatures, kClasses, 99), batch, false);
      auto per_batch = model->eval(data, /*dataset_sink_mode=*/false);
      SINKRT_ASSERT_OK(per_batch);
      const size_t sinks_before = dev.sinks().size();
      auto sunk = model->eval(data, /*dataset_sink_mode=*/true);
      SINKRT_ASSERT_OK(sunk);
      ExpectSameFigures(*sunk, *per_batch);
      const int64_t full = n / batch;
      const bool partial = n % batch != 0;
      EXPECT_EQ(sunk->round_trips, (full > 0 ? 1u : 0u) + (partial ? 1u : 0u));
      EXPECT_EQ(per_batch->round_trips, static_cast<uint64_t>(full + (partial ? 1 : 0)));
      std::vector<CountingDevice::Sink> expected;
      if (full > 0) expected.push_back({ProgramKind::EvalStep, static_cast<uint32_t>(full)});
      if (partial) expected.push_back({ProgramKind::PredictStep, 1});
      EXPECT_EQ(std::vector<CountingDevice::Sink>(dev.sinks().begin() + sinks_before, dev.sinks().end()), expected);
    }
  }
}

// The sums start from zero in every sink: a second pass, and a per-batch
// eval between, see nothing of the previous one.
TEST(SunkEval, EverySinkStartsItsSumsFromZero) {
  device::InProcessDevice dev(testing::OneThreadOptions());
  auto model = TrainedModel(dev);
  ASSERT_TRUE(model);
  const Dataset a = testing::MakeDataset(testing::MakeSyntheticData(7 * kBatch, kFeatures, kClasses, 5), kBatch);
  const Dataset b = testing::MakeDataset(testing::MakeSyntheticData(3 * kBatch, kFeatures, kClasses, 6), kBatch);
  auto first = model->eval(a, true);
  SINKRT_ASSERT_OK(first);
  auto other = model->eval(b, true);
  SINKRT_ASSERT_OK(other);
  auto per_batch = model->eval(b, false);
  SINKRT_ASSERT_OK(per_batch);
  ExpectSameFigures(*other, *per_batch);
  auto again = model->eval(a, true);
  SINKRT_ASSERT_OK(again);
  ExpectSameFigures(*again, *first);
  // Training in between leaves the sums alone, and eval's figures follow
  // the new parameters.
  SINKRT_ASSERT_OK(model->train(1, a, {}, true));
  auto sunk = model->eval(b, true);
  auto want = model->eval(b, false);
  SINKRT_ASSERT_OK(sunk);
  SINKRT_ASSERT_OK(want);
  ExpectSameFigures(*sunk, *want);
}

// A partial batch inside the pass is refused, naming it, whichever mode.
TEST(SunkEval, PartialBatchInsideThePassIsRefusedNamingIt) {
  device::InProcessDevice dev(testing::OneThreadOptions());
  auto model = TrainedModel(dev);
  ASSERT_TRUE(model);
  // 2 passes of 2 batches (8 + 4 rows): batch 1 is short and not last.
  const Dataset data =
      testing::MakeDataset(testing::MakeSyntheticData(12, kFeatures, kClasses, 5), kBatch, false).Repeat(2);
  auto sunk = model->eval(data, true);
  ASSERT_FALSE(sunk.ok());
  EXPECT_EQ(sunk.status().code(), StatusCode::kInvalidArgument) << sunk.status().ToString();
  EXPECT_THAT(sunk.status().message(), HasSubstr("Model.eval")) << sunk.status().ToString();
  EXPECT_THAT(sunk.status().message(), HasSubstr("dataset batch 1")) << sunk.status().ToString();
  EXPECT_THAT(sunk.status().message(), HasSubstr("'image'")) << sunk.status().ToString();
  // The device is fine afterwards: its queue was cleared.
  const Dataset good = testing::MakeDataset(testing::MakeSyntheticData(16, kFeatures, kClasses, 5), kBatch);
  auto after = model->eval(good, true);
  SINKRT_ASSERT_OK(after);
  EXPECT_EQ(after->round_trips, 1u);
}

// A step that fails on the device (a label out of range) fails the sink,
// naming eval_step and the label; the feeder, which was ahead, is stopped
// and its batches dropped, so the next eval runs as if nothing happened.
TEST(SunkEval, DeviceFailureMidPassIsReportedAndLeavesNothingBehind) {
  device::InProcessDevice dev(testing::OneThreadOptions());
  auto model = TrainedModel(dev);
  ASSERT_TRUE(model);
  testing::SyntheticData bad = testing::MakeSyntheticData(40 * kBatch, kFeatures, kClasses, 5);
  bad.labels[2 * kBatch + 1] = 7;  // batch 2, row 1
  auto sunk = model->eval(testing::MakeDataset(bad, kBatch), true);
  ASSERT_FALSE(sunk.ok());
  EXPECT_THAT(sunk.status().message(), HasSubstr("eval_step")) << sunk.status().ToString();
  EXPECT_THAT(sunk.status().message(), HasSubstr("7")) << sunk.status().ToString();
  const Dataset good = testing::MakeDataset(testing::MakeSyntheticData(3 * kBatch, kFeatures, kClasses, 6), kBatch);
  auto after = model->eval(good, true);
  auto want = model->eval(good, false);
  SINKRT_ASSERT_OK(after);
  SINKRT_ASSERT_OK(want);
  ExpectSameFigures(*after, *want);
  EXPECT_EQ(after->round_trips, 1u);
}

// Pipeline stages: every stage runs the pass in one sink, the last one
// summing; a partial last batch goes zero-padded through eval_step after.
TEST(SunkEval, PipelineStagesRunThePassInOneSinkEach) {
  const std::vector<int64_t> widths = {64, 48, 48, 48, 10};
  World world(4);
  host::ModelOptions o;
  o.context.mode = host::ParallelMode::DataParallel;
  o.context.device_num = 4;
  o.context.gradients_mean = true;
  o.context.pipeline_stages = 2;
  o.micro_size = 4;
  auto m = Model::Create(host::MakeMlpNetwork(8, widths), LossSpec::SparseSoftmaxCrossEntropy(),
                         OptimizerSpec::Momentum(0.02f, 0.9f), world.links, o);
  SINKRT_ASSERT_OK(m);
  auto data = [](int64_t samples, int64_t batch, bool drop) {
    testing::SyntheticData d = testing::MakeSyntheticData(samples, 64, 10, 7);
    testing::RandomizeQuarterOfLabels(d);
    return Dataset::FromArrays({{"image", testing::ImagesTensor(d)}, {"label", testing::LabelsTensor(d)}})
        .Shuffle(5)
        .Batch(batch, drop);
  };
  SINKRT_ASSERT_OK((*m)->train(1, data(10 * 8, 8, true), {}, true));
  for (int64_t n : {int64_t{6 * 8}, int64_t{5 * 8 + 7}}) {
    SCOPED_TRACE(n);
    const Dataset test = data(n, 8, false);
    std::vector<uint64_t> before;
    for (auto& d : world.devices) before.push_back(d->control_round_trips());
    auto per_batch = (*m)->eval(test, false);
    SINKRT_ASSERT_OK(per_batch);
    auto sunk = (*m)->eval(test, true);
    SINKRT_ASSERT_OK(sunk);
    ExpectSameFigures(*sunk, *per_batch);
    EXPECT_EQ(sunk->samples, n);
    const uint64_t want = 1 + (n % 8 ? 1 : 0);
    EXPECT_EQ(sunk->round_trips, want);
    EXPECT_EQ(per_batch->round_trips, static_cast<uint64_t>((n + 7) / 8));
    // Replica 0's stages (ranks 0 and 2) ran the eval, each `want` sinks.
    for (uint32_t r : {0u, 2u})
      EXPECT_EQ(world.devices[r]->control_round_trips() - before[r], per_batch->round_trips + want) << "rank " << r;
  }
}

// SEMI_AUTO_PARALLEL eval stays per batch (eval_sunk.h says why): sink mode
// gives the same figures, one round trip per global batch (two dataset
// batches of 4 rows: the loss splits the batch over the 2 ranks).
TEST(SunkEval, SemiAutoParallelStaysPerBatch) {
  host::Graph g("mlp");
  const host::TensorId x = g.Input("image", {8, 32});
  const host::TensorId w1 = g.Param("w1", {32, 64}, host::InitSpec::HeUniform(11));
  const host::TensorId w2 = g.Param("w2", {64, 10}, host::InitSpec::XavierUniform(13));
  g.AddOutput(g.MatMul(g.Tanh(g.MatMul(x, w1)), w2));
  g.Shard(g.ops()[0].name, {{2, 1}, {1, 1}});  // the batch split over the 2 ranks
  g.Shard(g.ops()[2].name, {{2, 1}, {1, 1}});
  SINKRT_ASSERT_OK(g.status());
  World world(2);
  host::ModelOptions o;
  o.context.mode = host::ParallelMode::SemiAutoParallel;
  o.context.device_num = 2;
  o.compile_cache = "";
  auto m =
      Model::Create(g, LossSpec::SparseSoftmaxCrossEntropy(), OptimizerSpec::Momentum(0.05f, 0.9f), world.links, o);
  SINKRT_ASSERT_OK(m);
  testing::SyntheticData d = testing::MakeSyntheticData(5 * 8 + 3, 32, 10, 5);
  const Dataset test =
      Dataset::FromArrays({{"image", testing::ImagesTensor(d)}, {"label", testing::LabelsTensor(d)}}).Batch(4, false);
  auto per_batch = (*m)->eval(test, false);
  auto sunk = (*m)->eval(test, true);
  SINKRT_ASSERT_OK(per_batch);
  SINKRT_ASSERT_OK(sunk);
  ExpectSameFigures(*sunk, *per_batch);
  EXPECT_EQ(sunk->round_trips, 6u);
}

}  // namespace
}  // namespace sinkrt
