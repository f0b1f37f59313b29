// Checkpoints: ModelCheckpoint's schedule, names and pruning; exact resume
// (stop, save, new Model, load, continue == one uninterrupted run); clear
// errors for corrupt and mismatched files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "sinkrt/fb/checkpoint_generated.h"
#include "sinkrt/host/callbacks.h"
#include "sinkrt/host/model.h"
#include "sinkrt/runtime/file_io.h"
#include "support/model_fixtures.h"
#include "support/test_util.h"

namespace sinkrt {
namespace {

namespace fs = std::filesystem;
using host::CheckpointConfig;
using host::CheckpointInfo;
using host::LoadCheckpoint;
using host::Model;
using host::ModelCheckpoint;
using host::OptimizerSpec;
using host::SaveCheckpoint;
using testing::MakeDataset;
using testing::MakeSyntheticData;

constexpr int64_t kBatch = 8;

std::unique_ptr<Model> MakeModel(DeviceLink& dev, OptimizerSpec opt, std::vector<int64_t> widths = {16, 12, 4}) {
  auto m = Model::Create(testing::MlpNetwork(kBatch, widths), host::LossSpec::SparseSoftmaxCrossEntropy(), opt, dev);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? std::move(m).value() : nullptr;
}

// A fresh directory per test under the system's temp dir.
class CheckpointDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("sinkrt_ckpt_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::vector<std::string> Files() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

void ExpectSameState(Model& a, Model& b) {
  auto sa = a.ReadState();
  auto sb = b.ReadState();
  ASSERT_TRUE(sa.ok() && sb.ok());
  ASSERT_EQ(sa->size(), sb->size());
  for (size_t i = 0; i < sa->size(); ++i) {
    EXPECT_EQ((*sa)[i].first, (*sb)[i].first);
    EXPECT_TRUE((*sa)[i].second.data == (*sb)[i].second.data) << (*sa)[i].first << " differs";
  }
}

// ---- resume -------------------------------------------------------------------------------

void ExpectExactResume(const fs::path& dir, OptimizerSpec opt, bool sink, int sink_size) {
  // 5 batches a pass; with sink_size 3 the epochs cross pass boundaries.
  const auto data = MakeSyntheticData(40, 16, 4, 7);
  testing::CountingDevice full_dev;
  auto full = MakeModel(full_dev, opt);
  SINKRT_ASSERT_OK(full->train(4, MakeDataset(data, kBatch), {}, sink, sink_size));

  testing::CountingDevice first_dev;
  auto first = MakeModel(first_dev, opt);
  auto ckpt = ModelCheckpoint::Create("mlp", dir.string(), {.save_checkpoint_steps = 0, .save_checkpoint_epochs = 1});
  SINKRT_ASSERT_OK(ckpt);
  SINKRT_ASSERT_OK(first->train(2, MakeDataset(data, kBatch), {ckpt->get()}, sink, sink_size));
  const int64_t steps = sink ? sink_size : 5;
  const std::string last = (dir / ("mlp-2_" + std::to_string(steps) + ".ckpt")).string();
  EXPECT_EQ((*ckpt)->latest_ckpt_file_name(), last);

  testing::CountingDevice resumed_dev;
  auto resumed = MakeModel(resumed_dev, opt);
  CheckpointInfo info;
  SINKRT_ASSERT_OK(LoadCheckpoint(last, *resumed, &info));
  EXPECT_EQ(info.epoch, 2);
  EXPECT_EQ(info.step, steps);
  EXPECT_EQ(info.batch_num, steps);
  EXPECT_EQ(info.global_batch, 2 * steps);
  EXPECT_EQ(info.initial_epoch, 2);
  EXPECT_EQ(info.graph_hash, resumed->network_hash());
  ExpectSameState(*first, *resumed);
  SINKRT_ASSERT_OK(resumed->train(4, MakeDataset(data, kBatch), {}, sink, sink_size, info.initial_epoch));
  ExpectSameState(*full, *resumed);
}

TEST_F(CheckpointDir, MomentumResumeIsBitwiseExact) {
  ExpectExactResume(dir_ / "sink", OptimizerSpec::Momentum(0.05f, 0.9f), true, 3);
  ExpectExactResume(dir_ / "nonsink", OptimizerSpec::Momentum(0.05f, 0.9f, true), false, -1);
}

TEST_F(CheckpointDir, AdamResumeIsBitwiseExact) {
  ExpectExactResume(dir_ / "sink", OptimizerSpec::Adam(0.01f), true, 3);
  ExpectExactResume(dir_ / "nonsink", OptimizerSpec::Adam(0.01f), false, -1);
}

TEST_F(CheckpointDir, CheckpointHoldsEveryParamAndOptimizerState) {
  testing::CountingDevice dev;
  auto model = MakeModel(dev, OptimizerSpec::Adam(0.01f));
  SINKRT_ASSERT_OK(model->train(1, MakeDataset(MakeSyntheticData(16, 16, 4, 1), kBatch), {}, true));
  SINKRT_ASSERT_OK(SaveCheckpoint(Path("a.ckpt"), *model, {.epoch = 1, .step = 2, .batch_num = 2, .global_batch = 2}));
  auto bytes = ReadFileBytes(Path("a.ckpt"));
  SINKRT_ASSERT_OK(bytes);
  const fb::Checkpoint* ck = fb::GetCheckpoint(bytes->data());
  EXPECT_TRUE(fb::CheckpointBufferHasIdentifier(bytes->data()));
  EXPECT_EQ(ck->format_major(), 1);
  EXPECT_EQ(ck->network()->str(), "mlp");
  std::vector<std::string> names;
  for (const fb::CheckpointTensor* t : *ck->tensors())
    names.push_back(t->name()->str() + (t->role() == fb::CheckpointRole::OptState ? " (opt)" : ""));
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"adam/powers (opt)", "fc1.bias", "fc1.bias/adam_m (opt)",
                                             "fc1.bias/adam_v (opt)", "fc1.weight", "fc1.weight/adam_m (opt)",
                                             "fc1.weight/adam_v (opt)", "fc2.bias", "fc2.bias/adam_m (opt)",
                                             "fc2.bias/adam_v (opt)", "fc2.weight", "fc2.weight/adam_m (opt)",
                                             "fc2.weight/adam_v (opt)"}));
  EXPECT_EQ(Files(), (std::vector<std::string>{"a.ckpt"}));  // no temporary left
}

// ---- ModelCheckpoint's schedule, names, pruning --------------------------------------------------

TEST_F(CheckpointDir, SinkModeChecksOncePerSinkAndKeepsTheNewest) {
  testing::CountingDevice dev;
  auto model = MakeModel(dev, OptimizerSpec::Sgd(0.1f));
  // save every 3 steps, checked per sink of 2: at steps 4, 8 (>= 4 + 3), 12.
  auto ckpt = ModelCheckpoint::Create("net", dir_.string(), {.save_checkpoint_steps = 3, .keep_checkpoint_max = 2});
  SINKRT_ASSERT_OK(ckpt);
  SINKRT_ASSERT_OK(model->train(6, MakeDataset(MakeSyntheticData(40, 16, 4, 1), kBatch), {ckpt->get()}, true, 2));
  EXPECT_EQ(Files(), (std::vector<std::string>{"net-4_2.ckpt", "net-6_2.ckpt"}));
  EXPECT_EQ((*ckpt)->latest_ckpt_file_name(), Path("net-6_2.ckpt"));
}

TEST_F(CheckpointDir, NonSinkModeNamesFilesByEpochAndInEpochStep) {
  testing::CountingDevice dev;
  auto model = MakeModel(dev, OptimizerSpec::Sgd(0.1f));
  auto ckpt = ModelCheckpoint::Create("net", dir_.string(), {.save_checkpoint_steps = 3, .keep_checkpoint_max = 10});
  SINKRT_ASSERT_OK(ckpt);
  // 5 steps an epoch, 2 epochs: steps 3, 6, 9, and the end (10).
  SINKRT_ASSERT_OK(model->train(2, MakeDataset(MakeSyntheticData(40, 16, 4, 1), kBatch), {ckpt->get()}, false));
  EXPECT_EQ(Files(), (std::vector<std::string>{"net-1_3.ckpt", "net-2_1.ckpt", "net-2_4.ckpt", "net-2_5.ckpt"}));
  CheckpointInfo info;
  SINKRT_ASSERT_OK(LoadCheckpoint(Path("net-2_1.ckpt"), *model, &info));
  EXPECT_EQ(info.epoch, 2);
  EXPECT_EQ(info.step, 1);
  EXPECT_EQ(info.global_batch, 6);
  EXPECT_EQ(info.initial_epoch, 1);  // mid-epoch: resume at that epoch's start
}

TEST_F(CheckpointDir, EpochScheduleAndPrefixRenaming) {
  testing::CountingDevice dev;
  auto model = MakeModel(dev, OptimizerSpec::Sgd(0.1f));
  const auto ds = MakeDataset(MakeSyntheticData(16, 16, 4, 1), kBatch);
  auto first = ModelCheckpoint::Create("net", dir_.string(), {.save_checkpoint_steps = 0, .save_checkpoint_epochs = 2});
  SINKRT_ASSERT_OK(first);
  EXPECT_EQ((*first)->prefix(), "net");
  SINKRT_ASSERT_OK(model->train(5, ds, {first->get()}, true));
  EXPECT_EQ(Files(), (std::vector<std::string>{"net-2_2.ckpt", "net-4_2.ckpt", "net-5_2.ckpt"}));
  // A second run into the same directory never touches the first's files.
  auto second = ModelCheckpoint::Create("net", dir_.string(), {.save_checkpoint_steps = 0, .save_checkpoint_epochs = 5,
                                                                .keep_checkpoint_max = 1});
  SINKRT_ASSERT_OK(second);
  EXPECT_EQ((*second)->prefix(), "net_1");
  SINKRT_ASSERT_OK(model->train(5, ds, {second->get()}, true));
  EXPECT_EQ(Files(), (std::vector<std::string>{"net-2_2.ckpt", "net-4_2.ckpt", "net-5_2.ckpt", "net_1-5_2.ckpt"}));
  auto third = ModelCheckpoint::Create("net", dir_.string());
  SINKRT_ASSERT_OK(third);
  EXPECT_EQ((*third)->prefix(), "net_2");
}

TEST_F(CheckpointDir, ConfigAndPrefixErrors) {
  EXPECT_EQ(CheckpointConfig{.save_checkpoint_steps = -1}.Validate().message(),
            "The input value must be int and must >= 0, but got '-1' with type 'int'.");
  EXPECT_EQ((CheckpointConfig{0, 0, 0}).Validate().message(),
            "For 'CheckpointConfig', the input arguments 'save_checkpoint_steps', 'save_checkpoint_epochs' and "
            "'keep_checkpoint_max' can't be all None or 0.");
  EXPECT_EQ(ModelCheckpoint::Create("a/b", dir_.string()).status().message(),
            "For 'ModelCheckpoint', the argument 'prefix' for checkpoint file name is invalid, it must be string and "
            "does not contain '/', but got a/b.");
  auto nested = ModelCheckpoint::Create("n", (dir_ / "x" / "y").string());
  SINKRT_ASSERT_OK(nested);
  EXPECT_TRUE(fs::is_directory(dir_ / "x" / "y"));
}

// ---- corrupt and mismatched files -----------------------------------------------------------

class CheckpointErrors : public CheckpointDir {
 protected:
  void SetUp() override {
    CheckpointDir::SetUp();
    model_ = MakeModel(dev_, OptimizerSpec::Momentum(0.05f, 0.9f));
    SINKRT_ASSERT_OK(model_->train(1, MakeDataset(MakeSyntheticData(16, 16, 4, 1), kBatch), {}, true));
    SINKRT_ASSERT_OK(SaveCheckpoint(Path("good.ckpt"), *model_));
    auto bytes = ReadFileBytes(Path("good.ckpt"));
    ASSERT_TRUE(bytes.ok());
    good_ = *bytes;
    auto state = model_->ReadState();
    ASSERT_TRUE(state.ok());
    state_ = *state;
  }

  // Loads `bytes` and expects the error to contain `text`; the model's state
  // must be untouched.
  void ExpectLoadError(const std::vector<uint8_t>& bytes, const std::string& text) {
    {
      std::ofstream f(Path("bad.ckpt"), std::ios::binary | std::ios::trunc);
      f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
      ASSERT_TRUE(f.good());
    }
    Status st = LoadCheckpoint(Path("bad.ckpt"), *model_);
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.message().find(text), std::string::npos) << st.message();
    EXPECT_NE(st.message().find(Path("bad.ckpt")), std::string::npos) << st.message();
    auto now = model_->ReadState();
    ASSERT_TRUE(now.ok());
    for (size_t i = 0; i < state_.size(); ++i) EXPECT_TRUE((*now)[i].second.data == state_[i].second.data);
  }

  // A checkpoint of the model's network whose tensors are `state` (after
  // `edit`), built with the FlatBuffers API as another writer might.
  std::vector<uint8_t> Build(const std::function<void(std::vector<std::pair<std::string, host::Tensor>>&)>& edit) {
    auto state = state_;
    edit(state);
    flatbuffers::FlatBufferBuilder fbb;
    std::vector<flatbuffers::Offset<fb::CheckpointTensor>> tensors;
    for (const auto& [name, t] : state)
      tensors.push_back(fb::CreateCheckpointTensor(fbb, fbb.CreateString(name), t.dtype, fbb.CreateVector(t.shape),
                                                   fb::CheckpointRole::Param, fbb.CreateVector(t.data)));
    fbb.Finish(fb::CreateCheckpoint(fbb, 1, 0, fbb.CreateString("test"), fbb.CreateString("mlp"),
                                    model_->network_hash(), 1, 2, 2, 2, fbb.CreateVector(tensors)),
               fb::CheckpointIdentifier());
    return {fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize()};
  }

  testing::CountingDevice dev_;
  std::unique_ptr<Model> model_;
  std::vector<uint8_t> good_;
  std::vector<std::pair<std::string, host::Tensor>> state_;
};

TEST_F(CheckpointErrors, MissingFile) {
  Status st = LoadCheckpoint(Path("none.ckpt"), *model_);
  EXPECT_EQ(st.code(), StatusCode::kNotFound);
  EXPECT_NE(st.message().find("none.ckpt"), std::string::npos);
}

TEST_F(CheckpointErrors, NotACheckpoint) {
  ExpectLoadError({}, "not a sinkrt checkpoint (no 'SKCK' identifier)");
  ExpectLoadError(std::vector<uint8_t>(64, 0xab), "not a sinkrt checkpoint");
  auto stream = model_->compiled().stream.bytes();  // a task stream is no checkpoint
  ExpectLoadError(stream, "not a sinkrt checkpoint");
}

TEST_F(CheckpointErrors, CorruptFilesFailTheVerifier) {
  auto truncated = good_;
  truncated.resize(good_.size() / 2);
  ExpectLoadError(truncated, "the file is corrupt (it fails the FlatBuffers verifier)");
  // The root table's vtable offset pointing far outside the file.
  auto broken = good_;
  const uint32_t root = *reinterpret_cast<const uint32_t*>(broken.data());
  *reinterpret_cast<int32_t*>(broken.data() + root) = 0x7ffffff0;
  ExpectLoadError(broken, "the file is corrupt");
}

TEST_F(CheckpointErrors, AnotherNetworkIsRefused) {
  testing::CountingDevice other_dev;
  auto other = MakeModel(other_dev, OptimizerSpec::Momentum(0.05f, 0.9f), {16, 10, 4});
  SINKRT_ASSERT_OK(SaveCheckpoint(Path("other.ckpt"), *other));
  auto bytes = ReadFileBytes(Path("other.ckpt"));
  SINKRT_ASSERT_OK(bytes);
  ExpectLoadError(*bytes, "saved from network 'mlp' (graph hash 0x");
  ExpectLoadError(*bytes, ": a different network");
}

TEST_F(CheckpointErrors, MissingOrMisshapenTensorsAreNamed) {
  ExpectLoadError(Build([](auto& s) { s.erase(s.begin() + 1); }), "has no tensor 'fc1.bias'");
  ExpectLoadError(Build([](auto& s) {
                    for (auto& [n, t] : s)
                      if (n == "fc2.weight") t.shape = {4, 12};
                  }),
                  "tensor 'fc2.weight' is f32 [4,12], the model's is f32 [12,4]");
  ExpectLoadError(Build([](auto& s) {
                    for (auto& [n, t] : s)
                      if (n == "fc1.bias/momentum") t.data.resize(8);
                  }),
                  "tensor 'fc1.bias/momentum' holds 8 bytes, its shape needs 48");
  // A Momentum checkpoint has no Adam state.
  testing::CountingDevice adam_dev;
  auto adam = MakeModel(adam_dev, OptimizerSpec::Adam(0.01f));
  Status st = LoadCheckpoint(Path("good.ckpt"), *adam);
  EXPECT_NE(st.message().find("has no tensor 'adam/powers'"), std::string::npos) << st.message();
  // Extra tensors are ignored: the edited file still loads.
  SINKRT_ASSERT_OK(WriteFileBytes(Path("extra.ckpt"), Build([](auto& s) {
                                    s.push_back({"unused", host::Tensor::Zeros(DType::F32, {2})});
                                  })));
  SINKRT_ASSERT_OK(LoadCheckpoint(Path("extra.ckpt"), *model_));
}

}  // namespace
}  // namespace sinkrt
