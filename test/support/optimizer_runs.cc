#include "support/optimizer_runs.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <utility>

#include "sinkrt/host/model.h"
#include "sinkrt/host/model_zoo.h"
#include "sinkrt/host/shard_strategies.h"
#include "support/in_process_world.h"
#include "support/model_fixtures.h"
#include "support/test_models.h"

namespace sinkrt::testing {
namespace {

host::Dataset MlpData(int64_t samples, int64_t batch) {
  SyntheticData d = MakeSyntheticData(samples, kCompositionWidths[0], 10, 11);
  RandomizeQuarterOfLabels(d);
  return host::Dataset::FromArrays({{"image", ImagesTensor(d)}, {"label", LabelsTensor(d)}})
      .Shuffle(3)
      .Batch(batch, true);
}

}  // namespace

TrainedRun TrainCompositionMlp(const RunSetup& s) {
  InProcessWorld world(s.devices);
  host::ModelOptions o;
  o.compile_cache = "";
  o.context.grad_accumulation_step = s.accumulate;
  o.loss_scale_manager = s.loss_scale;
  if (s.devices > 1) {
    o.context.mode = host::ParallelMode::DataParallel;
    o.context.device_num = s.devices;
    o.context.gradients_mean = true;
    o.context.enable_parallel_optimizer = s.zero;
    o.context.parallel_optimizer_config.threshold_kb = 0;
  }
  auto m = host::Model::Create(host::MakeMlpNetwork(s.batch, kCompositionWidths),
                               host::LossSpec::SparseSoftmaxCrossEntropy(), s.optimizer, world.links, o);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  if (!m.ok()) return {};
  LossRecorder rec;
  const host::Dataset data = s.data ? MakeDataset(*s.data, s.batch) : MlpData(s.samples, s.batch);
  const Status st = (*m)->train(s.epochs, data, {&rec}, s.sink, s.sink_size);
  EXPECT_TRUE(st.ok()) << st.ToString();
  TrainedRun out{rec.losses, {}};
  auto state = (*m)->ReadState();
  EXPECT_TRUE(state.ok()) << state.status().ToString();
  if (state.ok()) out.state = std::move(state).value();
  return out;
}

std::vector<double> TrainCompositionVit(const host::OptimizerSpec& opt, const std::string& preset, int n, bool zero,
                                        int steps) {
  constexpr int64_t kBatch = 8;
  const SyntheticData d = MakeSyntheticData(steps * kBatch, 784, 10, 9);
  host::Graph g = MakeVit(kBatch);
  int64_t dp = 1;
  host::ModelOptions o;
  o.compile_cache = "";
  if (!preset.empty()) {
    auto p = host::PresetDataParallel(preset, n);
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    dp = p.ok() ? *p : 1;
    const Status st = host::ApplyShardStrategy(preset, g, n);
    EXPECT_TRUE(st.ok()) << st.ToString();
    o.context.mode = host::ParallelMode::SemiAutoParallel;
    o.context.device_num = n;
    o.context.gradients_mean = true;
    o.context.enable_parallel_optimizer = zero;
    o.context.parallel_optimizer_config.threshold_kb = 0;
  }
  InProcessWorld w(n);
  auto m = host::Model::Create(std::move(g), host::LossSpec::None(), opt, w.links, o);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  if (!m.ok()) return {};
  LossRecorder losses;
  const Status st = (*m)->train(1, MakeDataset(d, kBatch / dp), {&losses}, false);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return losses.losses;
}

double ExpectLossesTrack(const TrainedRun& got, const TrainedRun& want, double rel, const std::string& what) {
  EXPECT_EQ(got.losses.size(), want.losses.size()) << what;
  const double worst = WorstRelative(got.losses, want.losses);
  std::printf("[ info ] %s: worst relative loss difference %.2e over %zu steps\n", what.c_str(), worst,
              want.losses.size());
  ::testing::Test::RecordProperty(what, std::to_string(worst));
  EXPECT_LE(worst, rel) << what;
  if (!got.losses.empty()) {
    EXPECT_LT(got.losses.back(), got.losses.front()) << what << ": the loss falls";
  }
  return worst;
}

void ExpectAccumulationTracksTheLargerBatch(const host::OptimizerSpec& opt, const std::string& what) {
  const TrainedRun want = TrainCompositionMlp({.optimizer = opt, .batch = 32});
  const TrainedRun got = TrainCompositionMlp({.optimizer = opt, .batch = 8, .accumulate = 4});
  ExpectLossesTrack(got, want, 1e-5, what + " accumulation 4x8");
  ExpectSameTensors(got.state, want.state, 1e-5);
}

void ExpectOneSinkOfNIsNSinksOfOne(const host::OptimizerSpec& opt) {
  const TrainedRun five = TrainCompositionMlp(
      {.optimizer = opt, .batch = 32, .sink = true, .sink_size = 5, .epochs = 8, .samples = 32 * 40});
  const TrainedRun one = TrainCompositionMlp(
      {.optimizer = opt, .batch = 32, .sink = true, .sink_size = 1, .epochs = 40, .samples = 32 * 40});
  ASSERT_EQ(five.losses.size(), 8u);
  ASSERT_EQ(one.losses.size(), 40u);
  for (size_t i = 0; i < 8; ++i) EXPECT_EQ(five.losses[i], one.losses[5 * i + 4]) << "sink " << i;
  ExpectSameTensors(five.state, one.state);
}

}  // namespace sinkrt::testing
