// Dropout in training through Model (docs/guide/dropout.md): the step
// counter "dropout/step" is optimizer state, so one sink of N steps equals
// N sinks of one bitwise, a checkpointed run resumes bitwise, and eval
// runs without dropout (its results equal the same network's without).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "sinkrt/host/callbacks.h"
#include "sinkrt/host/model.h"
#include "support/compare.h"
#include "support/model_fixtures.h"
#include "support/test_util.h"

namespace sinkrt {
namespace {

namespace fs = std::filesystem;
using host::Model;
using host::OptimizerSpec;
using testing::MakeDataset;
using testing::MakeSyntheticData;

constexpr int64_t kBatch = 8;

// 16 -> 12 (ReLU, Dropout(p)) -> 4, the logits outputs()[0]; p = 0: none.
host::Graph Net(float p) {
  host::Graph g("mlp");
  host::TensorId h = g.Input("image", {kBatch, 16});
  host::TensorId w1 = g.Param("fc1.weight", {16, 12}, host::InitSpec::HeUniform(1));
  host::TensorId b1 = g.Param("fc1.bias", {12}, host::InitSpec::Zeros());
  host::TensorId w2 = g.Param("fc2.weight", {12, 4}, host::InitSpec::HeUniform(2));
  host::TensorId b2 = g.Param("fc2.bias", {4}, host::InitSpec::Zeros());
  h = g.Dropout(g.Relu(g.BiasAdd(g.MatMul(h, w1), b1)), p, 3);
  g.AddOutput(g.BiasAdd(g.MatMul(h, w2), b2));
  EXPECT_TRUE(g.status().ok()) << g.status().ToString();
  return g;
}

std::unique_ptr<Model> MakeModel(DeviceLink& dev, float p = 0.25f) {
  auto m =
      Model::Create(Net(p), host::LossSpec::SparseSoftmaxCrossEntropy(), OptimizerSpec::Momentum(0.05f, 0.9f), dev);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? std::move(m).value() : nullptr;
}

int64_t StepCounter(Model& m) {
  auto state = m.ReadState();
  EXPECT_TRUE(state.ok());
  for (const auto& [name, t] : *state)
    if (name == "dropout/step") {
      int64_t v = -1;
      EXPECT_EQ(t.data.size(), sizeof v);
      std::memcpy(&v, t.data.data(), sizeof v);
      return v;
    }
  ADD_FAILURE() << "no 'dropout/step' in the model's state";
  return -1;
}

TEST(DropoutTrain, OneSinkOfNEqualsNSinksOfOneBitwise) {
  const auto data = MakeSyntheticData(40, 16, 4, 7);  // 5 steps a pass
  testing::CountingDevice sunk_dev, step_dev, plain_dev;
  auto sunk = MakeModel(sunk_dev);
  auto stepped = MakeModel(step_dev);
  SINKRT_ASSERT_OK(sunk->train(3, MakeDataset(data, kBatch), {}, /*dataset_sink_mode=*/true));
  SINKRT_ASSERT_OK(stepped->train(3, MakeDataset(data, kBatch), {}, /*dataset_sink_mode=*/false));
  testing::ExpectSameState(*sunk, *stepped);
  EXPECT_EQ(StepCounter(*sunk), 15);
  // The masks were drawn: without dropout the parameters end elsewhere.
  auto plain = MakeModel(plain_dev, 0.0f);
  SINKRT_ASSERT_OK(plain->train(3, MakeDataset(data, kBatch), {}, true));
  auto a = sunk->ReadState(), b = plain->ReadState();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_FALSE((*a)[0].second.data == (*b)[0].second.data) << (*a)[0].first;
}

TEST(DropoutTrain, CheckpointAndResumeIsBitwiseExact) {
  const fs::path dir = fs::temp_directory_path() / ("sinkrt_dropout_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const auto data = MakeSyntheticData(40, 16, 4, 7);
  testing::CountingDevice full_dev, first_dev, resumed_dev;
  auto full = MakeModel(full_dev);
  SINKRT_ASSERT_OK(full->train(4, MakeDataset(data, kBatch), {}, true, 3));

  auto first = MakeModel(first_dev);
  auto ckpt =
      host::ModelCheckpoint::Create("net", dir.string(), {.save_checkpoint_steps = 0, .save_checkpoint_epochs = 1});
  SINKRT_ASSERT_OK(ckpt);
  SINKRT_ASSERT_OK(first->train(2, MakeDataset(data, kBatch), {ckpt->get()}, true, 3));
  auto resumed = MakeModel(resumed_dev);
  host::CheckpointInfo info;
  SINKRT_ASSERT_OK(host::LoadCheckpoint((*ckpt)->latest_ckpt_file_name(), *resumed, &info));
  EXPECT_EQ(StepCounter(*resumed), 6);  // the counter came back with the parameters
  SINKRT_ASSERT_OK(resumed->train(4, MakeDataset(data, kBatch), {}, true, 3, info.initial_epoch));
  testing::ExpectSameState(*full, *resumed);
  fs::remove_all(dir);
}

TEST(DropoutTrain, EvalRunsWithoutDropout) {
  const auto data = MakeSyntheticData(40, 16, 4, 7);
  testing::CountingDevice with_dev, without_dev;
  auto with = MakeModel(with_dev, 0.5f);
  auto without = MakeModel(without_dev, 0.0f);
  // The same initial parameters (dropout has none): eval must agree bitwise.
  for (bool sink : {false, true}) {
    auto a = with->eval(MakeDataset(data, kBatch), sink);
    auto b = without->eval(MakeDataset(data, kBatch), sink);
    SINKRT_ASSERT_OK(a);
    SINKRT_ASSERT_OK(b);
    EXPECT_EQ(a->loss, b->loss);
    EXPECT_EQ(a->accuracy, b->accuracy);
  }
  EXPECT_EQ(StepCounter(*with), 0);  // eval advanced nothing
}

TEST(DropoutTrain, BuilderValidatesPAsMindSpore) {
  host::Graph g("g");
  const host::TensorId x = g.Input("x", {2, 3});
  EXPECT_EQ(g.Dropout(x, 0.0f), x);  // p = 0: the identity, no op
  EXPECT_TRUE(g.ops().empty());
  g.Dropout(x, 1.0f);
  EXPECT_EQ(g.status().message(),
            "For 'Dropout', the 'p' must be in range of [0.0, 1.0), but got 1.0 with type 'float'.");
  host::Graph h("h");
  h.Dropout(h.Input("x", {2}), -0.5f);
  EXPECT_EQ(h.status().message(),
            "For 'Dropout', the 'p' must be in range of [0.0, 1.0), but got -0.5 with type 'float'.");
}

}  // namespace
}  // namespace sinkrt
