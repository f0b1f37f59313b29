// SEMI_AUTO_PARALLEL inside pipeline stages (docs/design/pipeline.md): each
// stage's ops partitioned over its device_num / S ranks with their shard
// strategies, the boundaries sent whole. Through Model on in-process
// devices, against one device at the same batch: the losses, the state,
// a checkpoint's round trip and eval.
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
#include "sinkrt/host/shard_strategies.h"
#include "support/compare.h"
#include "support/in_process_world.h"
#include "support/model_fixtures.h"
#include "support/test_models.h"
#include "support/test_util.h"

namespace sinkrt {
namespace {

using host::Dataset;
using host::Graph;
using host::LossSpec;
using host::Model;
using host::OptimizerSpec;
using host::ParallelMode;
using host::Tensor;
using testing::LossRecorder;
using testing::OneThreadOptions;
using World = testing::InProcessWorld;

constexpr int64_t kBatch = 16;
const std::vector<int64_t> kWidths = {64, 48, 48, 48, 48, 48, 10};

// The network with its loss, so that a preset can shard it.
Graph Network(bool vit) {
  Graph g = vit ? host::MakeVitNetwork(kBatch) : host::MakeMlpNetwork(kBatch, kWidths);
  const host::TensorId label = g.Input("label", {kBatch}, DType::I32);
  g.SetLoss(g.SparseSoftmaxCrossEntropy(g.outputs().front(), label));
  return g;
}

Dataset Data(int64_t batches, bool vit) {
  testing::SyntheticData d = testing::MakeSyntheticData(batches * kBatch, vit ? 784 : 64, 10, 7);
  testing::RandomizeQuarterOfLabels(d);
  return Dataset::FromArrays({{"image", testing::ImagesTensor(d)}, {"label", testing::LabelsTensor(d)}})
      .Shuffle(5)
      .Batch(kBatch, true);
}

OptimizerSpec Optimizer(bool vit) { return vit ? OptimizerSpec::Adam(1e-3f) : OptimizerSpec::Momentum(0.02f, 0.9f); }

host::ModelOptions SemiStages(int devices, int stages, int micro) {
  host::ModelOptions o;
  o.compile_cache = "";
  o.context.mode = ParallelMode::SemiAutoParallel;
  o.context.device_num = devices;
  o.context.gradients_mean = true;
  o.context.pipeline_stages = stages;
  o.micro_size = micro;
  return o;
}

struct TrainRun {
  std::vector<double> losses;
  std::vector<std::pair<std::string, Tensor>> state;
  host::EvalResult eval;
};

// `steps` steps, one per launch, then the state and an eval of 4 batches.
TrainRun Train(std::unique_ptr<Model>& m, bool vit, int64_t steps) {
  TrainRun out;
  LossRecorder rec;
  Status st = m->train(1, Data(steps, vit), {&rec}, false);
  EXPECT_TRUE(st.ok()) << st.ToString();
  out.losses = rec.losses;
  auto state = m->ReadState();
  EXPECT_TRUE(state.ok()) << state.status().ToString();
  if (state.ok()) out.state = std::move(state).value();
  auto eval = m->eval(Data(4, vit));
  EXPECT_TRUE(eval.ok()) << eval.status().ToString();
  if (eval.ok()) out.eval = *eval;
  return out;
}

TrainRun OneDevice(bool vit, int64_t steps) {
  device::InProcessDevice dev(OneThreadOptions());
  host::ModelOptions o;
  o.compile_cache = "";
  auto m = Model::Create(Network(vit), LossSpec::None(), Optimizer(vit), dev, o);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  if (!m.ok()) return {};
  return Train(*m, vit, steps);
}

Result<std::unique_ptr<Model>> Staged(World& world, bool vit, const std::string& preset, int stages, int micro) {
  const int devices = static_cast<int>(world.links.size());
  Graph g = Network(vit);
  SINKRT_RETURN_IF_ERROR(host::ApplyShardStrategy(preset, g, devices / stages));
  return Model::Create(std::move(g), LossSpec::None(), Optimizer(vit), world.links, SemiStages(devices, stages, micro));
}

double WorstState(const std::vector<std::pair<std::string, Tensor>>& got,
                  const std::vector<std::pair<std::string, Tensor>>& want) {
  EXPECT_EQ(got.size(), want.size());
  double worst = 0;
  for (const auto& [name, t] : want) {
    const auto it = std::find_if(got.begin(), got.end(), [&](const auto& e) { return e.first == name; });
    if (it == got.end()) {
      ADD_FAILURE() << "the pipeline's state has no '" << name << "'";
      continue;
    }
    EXPECT_EQ(it->second.shape, t.shape) << name;
    if (it->second.data.size() != t.data.size() || t.dtype != DType::F32) continue;
    const auto* x = reinterpret_cast<const float*>(t.data.data());
    const auto* y = reinterpret_cast<const float*>(it->second.data.data());
    for (size_t i = 0; i < t.data.size() / sizeof(float); ++i)
      worst = std::max(worst, static_cast<double>(std::abs(x[i] - y[i])));
  }
  return worst;
}

void TracksOneDevice(bool vit, const std::string& preset, int devices, int stages, int micro) {
  constexpr int64_t kSteps = 200;
  const TrainRun want = OneDevice(vit, kSteps);
  ASSERT_EQ(want.losses.size(), static_cast<size_t>(kSteps));
  World world(devices);
  auto m = Staged(world, vit, preset, stages, micro);
  SINKRT_ASSERT_OK(m);
  const TrainRun got = Train(*m, vit, kSteps);
  const double worst = testing::WorstRelative(got.losses, want.losses);
  std::printf("[ info ] %s %s, %d stages of %d ranks, M=%d: worst relative loss difference %.2e over %lld steps\n",
              vit ? "ViT" : "MLP", preset.c_str(), stages, devices / stages, micro, worst,
              static_cast<long long>(kSteps));
  EXPECT_LT(worst, 1e-5);
  EXPECT_LT(got.losses.back(), got.losses.front());
  // Merged from the stages' slices: one device's names, shapes and values.
  EXPECT_LT(WorstState(got.state, want.state), vit ? 1e-3 : 1e-4);
  EXPECT_NEAR(got.eval.loss, want.eval.loss, 1e-4 * std::abs(want.eval.loss));
  EXPECT_EQ(got.eval.accuracy, want.eval.accuracy);
}

// 200 steps: every loss within 1e-5 relative of one device's, the merged
// state and eval too. `data` splits each stage's rows; `model` its layers
// Megatron's way (MLP: a pair may straddle the stages' cut); 2x2 both.
TEST(PipelineSemiAuto, MlpDataPresetInTwoStagesOfTwoTracksOneDevice) { TracksOneDevice(false, "data", 4, 2, 4); }
TEST(PipelineSemiAuto, MlpModelPresetInTwoStagesOfTwoTracksOneDevice) { TracksOneDevice(false, "model", 4, 2, 4); }
TEST(PipelineSemiAuto, Mlp2x2PresetInTwoStagesOfFourTracksOneDevice) { TracksOneDevice(false, "2x2", 8, 2, 4); }
TEST(PipelineSemiAuto, MlpDataPresetInFourStagesOfTwoEightMicroBatchesTracksOneDevice) {
  TracksOneDevice(false, "data", 8, 4, 8);
}
TEST(PipelineSemiAuto, VitDataPresetInTwoStagesOfTwoTracksOneDevice) { TracksOneDevice(true, "data", 4, 2, 4); }
TEST(PipelineSemiAuto, VitModelPresetInTwoStagesOfTwoTracksOneDevice) { TracksOneDevice(true, "model", 4, 2, 4); }

// A checkpoint is whole tensors: written into a pipeline whose stages hold
// slices, it reads back the same.
TEST(PipelineSemiAuto, StateRoundTripsThroughTheStagesSlices) {
  World world(4);
  auto m = Staged(world, false, "model", 2, 4);
  SINKRT_ASSERT_OK(m);
  auto state = (*m)->ReadState();
  SINKRT_ASSERT_OK(state);
  for (auto& [name, t] : *state) {
    auto* f = reinterpret_cast<float*>(t.data.data());
    for (size_t i = 0; i < t.data.size() / sizeof(float); ++i) f[i] = static_cast<float>(i % 97) * 0.01f - 0.3f;
  }
  SINKRT_ASSERT_OK((*m)->WriteState(*state));
  auto back = (*m)->ReadState();
  SINKRT_ASSERT_OK(back);
  ASSERT_EQ(back->size(), state->size());
  for (size_t i = 0; i < state->size(); ++i) {
    EXPECT_EQ((*back)[i].first, (*state)[i].first);
    EXPECT_EQ((*back)[i].second.data, (*state)[i].second.data) << (*state)[i].first;
  }
  // A tensor of the wrong shape is refused before anything is written.
  std::vector<std::pair<std::string, Tensor>> bad = {(*state)[0]};
  bad[0].second.shape.push_back(1);
  Status st = (*m)->WriteState(bad);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find((*state)[0].first), std::string::npos) << st.message();
}

// What compile writes for a stage's rank: its slices of the stage's
// parameters, and its collectives on the comm stream beside the transfers.
TEST(PipelineSemiAuto, StageStreamsHoldSlicesAndCarryCollectivesOnTheCommStream) {
  Graph g = Network(false);
  SINKRT_ASSERT_OK(host::ApplyShardStrategy("model", g, 2));
  host::CompileOptions co;
  co.parallel_mode = ParallelMode::SemiAutoParallel;
  co.world_size = 4;
  co.optimizer = Optimizer(false);
  co.pipeline = {.stages = 2, .micro_size = 4, .scheduler = "1f1b", .stage_of = {}};
  for (uint32_t r = 0; r < 4; ++r) {
    co.rank = r;
    auto c = host::Compile(g, co);
    SINKRT_ASSERT_OK(c);
    EXPECT_EQ(c->report.pipeline_stage, static_cast<int>(r / 2));
    const fb::TaskStream& ts = *c->stream.root();
    int sliced = 0;
    for (const fb::Buffer* b : *ts.buffers())
      if (b->role() == fb::BufferRole::Param && b->slice() &&
          !std::equal(b->shape()->begin(), b->shape()->end(), b->slice()->global_shape()->begin(),
                      b->slice()->global_shape()->end())) {
        ++sliced;
        // Rank r holds block r % 2 of a split parameter.
        int64_t offset = 0;
        for (int64_t o : *b->slice()->offset()) offset += o;
        if (r % 2 == 0)
          EXPECT_EQ(offset, 0) << b->name()->str();
        else
          EXPECT_GT(offset, 0) << b->name()->str();
      }
    EXPECT_GT(sliced, 0) << "rank " << r;
    int gathers = 0, transfers = 0;
    for (const fb::Program* p : *ts.programs()) {
      if (p->kind() != fb::ProgramKind::TrainStep) continue;
      ASSERT_EQ(p->streams()->size(), 2u);
      for (const fb::Task* t : *p->streams()->Get(1)->tasks()) {
        gathers += t->body_type() == fb::TaskBody::AllGatherTask;
        transfers += t->body_type() == fb::TaskBody::SendTask || t->body_type() == fb::TaskBody::RecvTask;
      }
      for (const fb::Task* t : *p->streams()->Get(0)->tasks())
        EXPECT_NE(t->body_type(), fb::TaskBody::AllGatherTask) << t->name()->str() << " on the compute stream";
    }
    EXPECT_GT(gathers, 0) << "rank " << r;
    EXPECT_EQ(transfers, 2 * 4) << "rank " << r;  // one activation and its gradient per micro-batch
  }
}

TEST(PipelineSemiAuto, AutoParallelAndDatasetStrategyAreRefusedByName) {
  World world(4);
  host::ModelOptions o = SemiStages(4, 2, 4);
  o.context.mode = ParallelMode::AutoParallel;
  auto m = Model::Create(Network(false), LossSpec::None(), Optimizer(false), world.links, o);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("pipeline_stages 2 with parallel_mode auto_parallel"), std::string::npos)
      << m.status().message();
  o = SemiStages(4, 2, 4);
  o.context.dataset_strategy = {{2, 1}, {2}};
  m = Model::Create(Network(false), LossSpec::None(), Optimizer(false), world.links, o);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("dataset_strategy"), std::string::npos) << m.status().message();
}

}  // namespace
}  // namespace sinkrt
