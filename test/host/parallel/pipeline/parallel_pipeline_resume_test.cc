// Checkpoints and pipeline stages (docs/design/pipeline.md, docs/guide/checkpoints.md):
// LoadCheckpoint sets every stage's parameters and optimizer state, not
// only what rank 0 (the first stage) holds, under data_parallel and
// semi_auto_parallel stages; a checkpoint a pipeline wrote resumes it
// bitwise; and a checkpoint that lacks a later stage's tensor is refused,
// naming it, instead of leaving that tensor at its initial value.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "runtime/src/file_io.h"
#include "runtime/src/schema_enums.h"
#include "sinkrt/device/in_process_device.h"
#include "sinkrt/fb/checkpoint_generated.h"
#include "sinkrt/host/callbacks.h"
#include "sinkrt/host/model.h"
#include "sinkrt/host/model_zoo.h"
#include "sinkrt/host/shard_strategies.h"
#include "support/in_process_world.h"
#include "support/model_fixtures.h"
#include "support/test_models.h"
#include "support/test_util.h"

namespace sinkrt {
namespace {

namespace fs = std::filesystem;
using host::Dataset;
using host::Graph;
using host::LossSpec;
using host::Model;
using host::OptimizerSpec;
using host::ParallelMode;
using State = std::vector<std::pair<std::string, host::Tensor>>;
using testing::OneThreadOptions;
using World = testing::InProcessWorld;

constexpr int64_t kBatch = 16;
const std::vector<int64_t> kWidths = {64, 48, 48, 48, 48, 48, 10};
const OptimizerSpec kOpt = OptimizerSpec::Momentum(0.02f, 0.9f);

Graph Network() {
  Graph g = host::MakeMlpNetwork(kBatch, kWidths);
  const host::TensorId label = g.Input("label", {kBatch}, DType::I32);
  g.SetLoss(g.SparseSoftmaxCrossEntropy(g.outputs().front(), label));
  return g;
}

Dataset Data(int64_t batches) {
  testing::SyntheticData d = testing::MakeSyntheticData(batches * kBatch, 64, 10, 7);
  testing::RandomizeQuarterOfLabels(d);
  return Dataset::FromArrays({{"image", testing::ImagesTensor(d)}, {"label", testing::LabelsTensor(d)}})
      .Shuffle(5)
      .Batch(kBatch, true);
}

// `devices` ranks in `stages` stages: data-parallel replicas (each with a
// batch of kBatch), or with `preset` the stage's ops sharded
// (semi_auto_parallel) by it.
Result<std::unique_ptr<Model>> Staged(World& world, int stages, const std::string& preset = "") {
  const int devices = static_cast<int>(world.links.size());
  host::ModelOptions o;
  o.compile_cache = "";
  o.context.mode = preset.empty() ? ParallelMode::DataParallel : ParallelMode::SemiAutoParallel;
  o.context.device_num = devices;
  o.context.gradients_mean = true;
  o.context.pipeline_stages = stages;
  o.micro_size = 4;
  Graph g = Network();
  if (!preset.empty()) SINKRT_RETURN_IF_ERROR(host::ApplyShardStrategy(preset, g, devices / stages));
  return Model::Create(std::move(g), LossSpec::None(), kOpt, world.links, o);
}

class PipelineResume : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("sinkrt_pipeline_resume_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  // One device trained 3 steps (so that momentum is not zero), saved to
  // one.ckpt; its state and an eval of 4 batches are the reference.
  void SaveOneDevice() {
    device::InProcessDevice dev(OneThreadOptions());
    host::ModelOptions o;
    o.compile_cache = "";
    auto m = Model::Create(Network(), LossSpec::None(), kOpt, dev, o);
    SINKRT_ASSERT_OK(m);
    SINKRT_ASSERT_OK((*m)->train(1, Data(3), {}, true));
    auto state = (*m)->ReadState();
    SINKRT_ASSERT_OK(state);
    one_state_ = std::move(state).value();
    auto eval = (*m)->eval(Data(4));
    SINKRT_ASSERT_OK(eval);
    one_eval_ = *eval;
    SINKRT_ASSERT_OK(host::SaveCheckpoint(Path("one.ckpt"), **m));
  }

  // The staged model loads one.ckpt: every tensor reads back with the
  // checkpoint's bits, and eval scores what the device that saved it did.
  void ExpectLoadsEveryStage(World& world, Model& m) {
    SINKRT_ASSERT_OK(host::LoadCheckpoint(Path("one.ckpt"), m));
    auto back = m.ReadState();
    SINKRT_ASSERT_OK(back);
    ASSERT_EQ(back->size(), one_state_.size());
    for (const auto& [name, t] : one_state_) {
      const auto it = std::find_if(back->begin(), back->end(), [&](const auto& e) { return e.first == name; });
      ASSERT_NE(it, back->end()) << name;
      EXPECT_TRUE(it->second.data == t.data) << name << " is not the checkpoint's";
    }
    // Every rank, not only each stage's first: each replica's or slice's
    // own copy.
    for (uint32_t r = 0; r < world.links.size(); ++r) {
      auto mine = m.ReadState(r);
      SINKRT_ASSERT_OK(mine);
      EXPECT_FALSE(mine->empty()) << "rank " << r;
    }
    auto eval = m.eval(Data(4));
    SINKRT_ASSERT_OK(eval);
    EXPECT_NEAR(eval->loss, one_eval_.loss, 1e-5 * one_eval_.loss);
    EXPECT_EQ(eval->accuracy, one_eval_.accuracy);
  }

  fs::path dir_;
  State one_state_;
  host::EvalResult one_eval_;
};

TEST_F(PipelineResume, StateSpecsAreEveryStagesOnce) {
  World world(4);
  auto m = Staged(world, 4);
  SINKRT_ASSERT_OK(m);
  auto state = (*m)->ReadState();
  SINKRT_ASSERT_OK(state);
  const std::vector<Model::StateTensorSpec> specs = (*m)->StateSpecs();
  ASSERT_EQ(specs.size(), state->size());
  for (size_t i = 0; i < specs.size(); ++i) {
    EXPECT_EQ(specs[i].name, (*state)[i].first);
    EXPECT_EQ(specs[i].shape, (*state)[i].second.shape) << specs[i].name;
    EXPECT_EQ(specs[i].optimizer_state, specs[i].name.find("/momentum") != std::string::npos) << specs[i].name;
  }
}

TEST_F(PipelineResume, DataParallelStagesLoadEveryStage) {
  SaveOneDevice();
  for (const auto& [devices, stages] : {std::pair{2, 2}, std::pair{4, 2}, std::pair{4, 4}}) {
    SCOPED_TRACE(std::to_string(stages) + " stages on " + std::to_string(devices) + " devices");
    World world(devices);
    auto m = Staged(world, stages);
    SINKRT_ASSERT_OK(m);
    ExpectLoadsEveryStage(world, **m);
  }
}

TEST_F(PipelineResume, SemiAutoStagesLoadEveryStage) {
  SaveOneDevice();
  for (const std::string preset : {"data", "model"}) {
    SCOPED_TRACE(preset);
    World world(4);
    auto m = Staged(world, 2, preset);
    SINKRT_ASSERT_OK(m);
    ExpectLoadsEveryStage(world, **m);
  }
}

// A pipeline's own checkpoint, loaded into a fresh pipeline of the same
// layout, continues bitwise as the run that never stopped.
TEST_F(PipelineResume, APipelinesCheckpointResumesItBitwise) {
  const Dataset data = Data(6);
  State want;
  {
    World world(2);
    auto m = Staged(world, 2);
    SINKRT_ASSERT_OK(m);
    SINKRT_ASSERT_OK((*m)->train(2, data, {}, true));
    auto state = (*m)->ReadState();
    SINKRT_ASSERT_OK(state);
    want = std::move(state).value();
  }
  {
    World world(2);
    auto m = Staged(world, 2);
    SINKRT_ASSERT_OK(m);
    SINKRT_ASSERT_OK((*m)->train(1, data, {}, true));
    host::CheckpointInfo info;
    info.epoch = 1;
    info.step = 6;
    info.batch_num = 6;
    SINKRT_ASSERT_OK(host::SaveCheckpoint(Path("stages.ckpt"), **m, info));
  }
  World world(2);
  auto m = Staged(world, 2);
  SINKRT_ASSERT_OK(m);
  host::CheckpointInfo info;
  SINKRT_ASSERT_OK(host::LoadCheckpoint(Path("stages.ckpt"), **m, &info));
  EXPECT_EQ(info.initial_epoch, 1);
  SINKRT_ASSERT_OK((*m)->train(2, data, {}, true, -1, info.initial_epoch));
  auto got = (*m)->ReadState();
  SINKRT_ASSERT_OK(got);
  ASSERT_EQ(got->size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ((*got)[i].first, want[i].first);
    EXPECT_TRUE((*got)[i].second.data == want[i].second.data) << want[i].first;
  }
}

// A checkpoint without the last stage's last tensor: refused by name, and
// nothing is written (a resume never half-loads).
TEST_F(PipelineResume, ACheckpointWithoutALaterStagesTensorIsRefusedByName) {
  SaveOneDevice();
  World world(2);
  auto m = Staged(world, 2);
  SINKRT_ASSERT_OK(m);
  auto before = (*m)->ReadState();
  SINKRT_ASSERT_OK(before);
  const std::string dropped = before->back().first;  // stage order: the last stage's
  flatbuffers::FlatBufferBuilder fbb;
  std::vector<flatbuffers::Offset<fb::CheckpointTensor>> tensors;
  for (const auto& [name, t] : one_state_)
    if (name != dropped)
      tensors.push_back(fb::CreateCheckpointTensor(fbb, fbb.CreateString(name), ToFb(t.dtype),
                                                   fbb.CreateVector(t.shape), fb::CheckpointRole::Param,
                                                   fbb.CreateVector(t.data)));
  fbb.Finish(fb::CreateCheckpoint(fbb, 1, 0, fbb.CreateString("test"), fbb.CreateString((*m)->network_name()),
                                  (*m)->network_hash(), 1, 3, 3, 3, fbb.CreateVector(tensors)),
             fb::CheckpointIdentifier());
  SINKRT_ASSERT_OK(
      WriteFileBytes(Path("partial.ckpt"), std::span<const uint8_t>(fbb.GetBufferPointer(), fbb.GetSize())));
  Status st = host::LoadCheckpoint(Path("partial.ckpt"), **m);
  EXPECT_EQ(st.code(), StatusCode::kNotFound) << st.ToString();
  EXPECT_NE(st.message().find("has no tensor '" + dropped + "'"), std::string::npos) << st.message();
  auto after = (*m)->ReadState();
  SINKRT_ASSERT_OK(after);
  for (size_t i = 0; i < before->size(); ++i)
    EXPECT_TRUE((*after)[i].second.data == (*before)[i].second.data) << (*before)[i].first;
}

}  // namespace
}  // namespace sinkrt
