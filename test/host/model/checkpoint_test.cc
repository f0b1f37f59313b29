// Checkpoints: ModelCheckpoint's schedule, names and pruning; exact resume
// (stop, save, new Model, load, continue == one uninterrupted run); clear
// errors for corrupt and mismatched files.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "runtime/src/file_io.h"
#include "runtime/src/schema_enums.h"
#include "sinkrt/fb/checkpoint_generated.h"
#include "sinkrt/host/callbacks.h"
#include "sinkrt/host/model.h"
#include "support/checkpoint_restamp.h"
#include "support/compare.h"
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
    dir_ = fs::temp_directory_path() / ("sinkrt_ckpt_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // What the directory holds, but for the prefix claims of live
  // ModelCheckpoints (`.{prefix}.lock`, tested by Locks()).
  std::vector<std::string> Files() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_))
      if (e.path().extension() != ".lock") out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
  std::vector<std::string> Locks() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_))
      if (e.path().extension() == ".lock") out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
  void Touch(const std::string& name) const { std::ofstream(Path(name)) << "partial"; }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

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
  testing::ExpectSameState(*first, *resumed);
  SINKRT_ASSERT_OK(resumed->train(4, MakeDataset(data, kBatch), {}, sink, sink_size, info.initial_epoch));
  testing::ExpectSameState(*full, *resumed);
}

TEST_F(CheckpointDir, MomentumResumeIsBitwiseExact) {
  ExpectExactResume(dir_ / "sink", OptimizerSpec::Momentum(0.05f, 0.9f), true, 3);
  ExpectExactResume(dir_ / "nonsink", OptimizerSpec::Momentum(0.05f, 0.9f, true), false, -1);
}

TEST_F(CheckpointDir, AdamResumeIsBitwiseExact) {
  ExpectExactResume(dir_ / "sink", OptimizerSpec::Adam(0.01f), true, 3);
  ExpectExactResume(dir_ / "nonsink", OptimizerSpec::Adam(0.01f), false, -1);
}

// A learning-rate schedule (docs/guide/lr_schedules.md): its step counter
// lr/step is optimizer state, so the resumed run continues the schedule
// where it stopped and ends bitwise as the run that never stopped (the
// decay spans the four epochs, so the rate differs at every step).
TEST_F(CheckpointDir, ScheduledResumeIsBitwiseExact) {
  OptimizerSpec opt = OptimizerSpec::Adam(0.0f);
  opt.schedule = host::LrSchedule::WarmupCosine(0.02, 1e-4, 4, 16);
  ExpectExactResume(dir_ / "sink", opt, true, 3);
  OptimizerSpec table = OptimizerSpec::Momentum(0.0f, 0.9f);
  table.schedule = host::LrSchedule::Table({0.05, 0.04, 0.03, 0.02, 0.01, 0.005, 0.0025});
  ExpectExactResume(dir_ / "nonsink", table, false, -1);
}

// AdamWeightDecay's moments and Lamb's moments and lamb/powers come back
// whole: a resumed run is the run that never stopped, bit for bit.
TEST_F(CheckpointDir, AdamWeightDecayAndLambResumeIsBitwiseExact) {
  OptimizerSpec adamw = OptimizerSpec::AdamWeightDecay(0.01f, 0.01f);
  host::SetNoDecay(adamw, {"bias"});
  ExpectExactResume(dir_ / "adamw_sink", adamw, true, 3);
  ExpectExactResume(dir_ / "adamw_nonsink", adamw, false, -1);
  ExpectExactResume(dir_ / "lamb_sink", OptimizerSpec::Lamb(0.01f, 0.01f), true, 3);
  ExpectExactResume(dir_ / "lamb_nonsink", OptimizerSpec::Lamb(0.01f, 0.01f), false, -1);
}

// Gradient clipping by global norm (docs/guide/clipping.md) keeps no
// state of its own: a clipped run resumes bitwise as the others do.
TEST_F(CheckpointDir, ClippedResumeIsBitwiseExact) {
  OptimizerSpec opt = OptimizerSpec::Momentum(0.05f, 0.9f);
  opt.clip_grad_norm = 0.05f;
  ExpectExactResume(dir_ / "sink", opt, true, 3);
  ExpectExactResume(dir_ / "nonsink", opt, false, -1);
}

TEST_F(CheckpointDir, CheckpointHoldsEveryParamAndOptimizerState) {
  testing::CountingDevice dev;
  auto model = MakeModel(dev, OptimizerSpec::Adam(0.01f));
  SINKRT_ASSERT_OK(model->train(1, MakeDataset(MakeSyntheticData(16, 16, 4, 1), kBatch), {}, true));
  SINKRT_ASSERT_OK(SaveCheckpoint(Path("a.ckpt"), *model, {.epoch = 1, .step = 2, .batch_num = 2, .global_batch = 2}));
  auto bytes = ReadFileBytes(Path("a.ckpt"), kFlatBufferFileLimit);
  SINKRT_ASSERT_OK(bytes);
  const fb::Checkpoint* ck = fb::GetCheckpoint(bytes->data());
  EXPECT_TRUE(fb::CheckpointBufferHasIdentifier(bytes->data()));
  EXPECT_EQ(ck->format_major(), 1);
  EXPECT_EQ(ck->network()->str(), "mlp");
  std::vector<std::string> names;
  for (const fb::CheckpointTensor* t : *ck->tensors())
    names.push_back(t->name()->str() + (t->role() == fb::CheckpointRole::OptState ? " (opt)" : ""));
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{
                       "adam/powers (opt)", "fc1.bias", "fc1.bias/adam_m (opt)", "fc1.bias/adam_v (opt)", "fc1.weight",
                       "fc1.weight/adam_m (opt)", "fc1.weight/adam_v (opt)", "fc2.bias", "fc2.bias/adam_m (opt)",
                       "fc2.bias/adam_v (opt)", "fc2.weight", "fc2.weight/adam_m (opt)", "fc2.weight/adam_v (opt)"}));
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
  auto second = ModelCheckpoint::Create(
      "net", dir_.string(), {.save_checkpoint_steps = 0, .save_checkpoint_epochs = 5, .keep_checkpoint_max = 1});
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

// ---- runs that share a directory --------------------------------------------------------------

// Two runs at once into a directory that already held a run's files both
// chose net_1, and each one's pruning deleted the other's files.
TEST_F(CheckpointDir, RunsAtTheSameTimeNeverShareAPrefix) {
  testing::CountingDevice dev;
  auto model = MakeModel(dev, OptimizerSpec::Sgd(0.1f));
  const auto ds = MakeDataset(MakeSyntheticData(16, 16, 4, 1), kBatch);
  const CheckpointConfig every_epoch{.save_checkpoint_steps = 0, .save_checkpoint_epochs = 1, .keep_checkpoint_max = 1};
  {
    auto earlier = ModelCheckpoint::Create("net", dir_.string(), every_epoch);
    SINKRT_ASSERT_OK(earlier);
    EXPECT_EQ(Locks(), std::vector<std::string>{".net.lock"});
    SINKRT_ASSERT_OK(model->train(1, ds, {earlier->get()}, true));
  }
  EXPECT_EQ(Locks(), std::vector<std::string>{}) << "a finished run releases its claim";
  auto a = ModelCheckpoint::Create("net", dir_.string(), every_epoch);
  auto b = ModelCheckpoint::Create("net", dir_.string(), every_epoch);
  SINKRT_ASSERT_OK(a);
  SINKRT_ASSERT_OK(b);
  EXPECT_EQ((*a)->prefix(), "net_1");
  EXPECT_EQ((*b)->prefix(), "net_2");
  EXPECT_EQ(Locks(), (std::vector<std::string>{".net_1.lock", ".net_2.lock"}));
  // Their saves interleave; each prunes only its own files.
  SINKRT_ASSERT_OK(model->train(3, ds, {a->get(), b->get()}, true));
  EXPECT_EQ(Files(), (std::vector<std::string>{"net-1_2.ckpt", "net_1-3_2.ckpt", "net_2-3_2.ckpt"}));
  a->reset();
  b->reset();
  EXPECT_EQ(Locks(), std::vector<std::string>{});
  auto later = ModelCheckpoint::Create("net", dir_.string());
  SINKRT_ASSERT_OK(later);
  EXPECT_EQ((*later)->prefix(), "net_3");  // MindSpore's next prefix, one run after another
}

// The claim holds across processes, and a process that dies (here without
// running a destructor, as under SIGKILL) leaves no claim behind.
TEST_F(CheckpointDir, AClaimHoldsAcrossProcessesAndDiesWithItsProcess) {
  auto mine = ModelCheckpoint::Create("net", dir_.string());
  SINKRT_ASSERT_OK(mine);
  EXPECT_EQ((*mine)->prefix(), "net");
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto theirs = ModelCheckpoint::Create("net", dir_.string());
    const std::string prefix = theirs.ok() ? (*theirs)->prefix() : theirs.status().message();
    ssize_t ignored = ::write(fds[1], prefix.data(), prefix.size());
    (void)ignored;
    ::_exit(0);  // no destructor: the lock file stays, unlocked by death
  }
  ::close(fds[1]);
  char buf[256];
  const ssize_t n = ::read(fds[0], buf, sizeof buf);
  ::close(fds[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_GT(n, 0);
  EXPECT_EQ(std::string(buf, static_cast<size_t>(n)), "net_1");
  EXPECT_EQ(Locks(), (std::vector<std::string>{".net.lock", ".net_1.lock"}));
  auto next = ModelCheckpoint::Create("net", dir_.string());
  SINKRT_ASSERT_OK(next);
  EXPECT_EQ((*next)->prefix(), "net_1") << "a dead process's claim is free";
}

// A writer killed mid-save left `.NAME.ckpt.tmp.PID` forever.
TEST_F(CheckpointDir, ADeadWritersTemporaryIsRemovedALiveOnesIsKept) {
  const pid_t gone = ::fork();
  if (gone == 0) ::_exit(0);
  ASSERT_GT(gone, 0);
  int status = 0;
  ASSERT_EQ(::waitpid(gone, &status, 0), gone);
  const std::string dead = ".net-1_2.ckpt.tmp." + std::to_string(gone);
  const std::string live = ".net-1_3.ckpt.tmp." + std::to_string(::getpid());
  Touch(dead);
  Touch(live);
  auto ckpt = ModelCheckpoint::Create("net", dir_.string());  // opening the directory
  SINKRT_ASSERT_OK(ckpt);
  EXPECT_EQ(Files(), std::vector<std::string>{live});
  Touch(dead);
  testing::CountingDevice dev;
  auto model = MakeModel(dev, OptimizerSpec::Sgd(0.1f));
  SINKRT_ASSERT_OK(SaveCheckpoint(Path("a.ckpt"), *model));  // writing into it
  EXPECT_EQ(Files(), (std::vector<std::string>{live, "a.ckpt"}));
}

// A read-only directory failed only at the first save, after an epoch.
TEST_F(CheckpointDir, ADirectoryThatCannotBeWrittenIsRefusedAtCreate) {
  auto ro = ModelCheckpoint::Create("net", "/sys/kernel");  // read-only, even for root
  ASSERT_FALSE(ro.ok());
  EXPECT_EQ(ro.status().message(), "For 'ModelCheckpoint': cannot write in the directory '/sys/kernel': " +
                                       std::string(std::strerror(EACCES)));
}

// ---- corrupt and mismatched files -----------------------------------------------------------

class CheckpointErrors : public CheckpointDir {
 protected:
  void SetUp() override {
    CheckpointDir::SetUp();
    model_ = MakeModel(dev_, OptimizerSpec::Momentum(0.05f, 0.9f));
    SINKRT_ASSERT_OK(model_->train(1, MakeDataset(MakeSyntheticData(16, 16, 4, 1), kBatch), {}, true));
    SINKRT_ASSERT_OK(SaveCheckpoint(Path("good.ckpt"), *model_));
    auto bytes = ReadFileBytes(Path("good.ckpt"), kFlatBufferFileLimit);
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
      tensors.push_back(fb::CreateCheckpointTensor(fbb, fbb.CreateString(name), ToFb(t.dtype),
                                                   fbb.CreateVector(t.shape), fb::CheckpointRole::Param,
                                                   fbb.CreateVector(t.data)));
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
  auto bytes = ReadFileBytes(Path("other.ckpt"), kFlatBufferFileLimit);
  SINKRT_ASSERT_OK(bytes);
  ExpectLoadError(*bytes, "saved from network 'mlp' (structure hash 0x");
  ExpectLoadError(*bytes, ": a different network (its ops, tensor names or shapes differ)");
}

// Where a tensor's bytes lie in a checkpoint file.
size_t DataOffset(const std::vector<uint8_t>& file, const std::string& tensor) {
  for (const fb::CheckpointTensor* t : *fb::GetCheckpoint(file.data())->tensors())
    if (t->name()->str() == tensor) return static_cast<size_t>(t->data()->data() - file.data());
  ADD_FAILURE() << "no tensor " << tensor;
  return 0;
}

// Loaded silently before format 1.1.
TEST_F(CheckpointErrors, AFlippedBitInATensorIsNamed) {
  auto flipped = good_;
  flipped[DataOffset(flipped, "fc2.weight") + 5] ^= 0x10;
  ExpectLoadError(flipped, "tensor 'fc2.weight' is damaged: its data has CRC-32 0x");
  auto in_state = good_;
  in_state[DataOffset(in_state, "fc1.bias/momentum")] ^= 0x01;
  ExpectLoadError(in_state, "tensor 'fc1.bias/momentum' is damaged");
}

TEST_F(CheckpointErrors, AFlippedBitOutsideTheTensorsIsFound) {
  auto flipped = good_;
  const flatbuffers::String* producer = fb::GetCheckpoint(flipped.data())->producer();
  flipped[static_cast<size_t>(reinterpret_cast<const uint8_t*>(producer->data()) - flipped.data())] ^= 0x01;
  ExpectLoadError(flipped, "the file is damaged outside the tensors' data (names, shapes or where training stood)");
}

// Loaded silently before format 1.1 when the byte was padding.
TEST_F(CheckpointErrors, AFileCutShortOrExtendedIsNamed) {
  auto cut = good_;
  cut.pop_back();
  ExpectLoadError(cut, "the file holds " + std::to_string(good_.size() - 1) + " bytes, it was written with " +
                           std::to_string(good_.size()) + ": it is truncated");
  auto longer = good_;
  longer.push_back(0);
  ExpectLoadError(longer, "it is longer than written (appended to)");
}

TEST_F(CheckpointErrors, AFullDiskSaysWhy) {
  Status st = SaveCheckpoint("/dev/full", *model_);
  EXPECT_NE(st.message().find("error writing '/dev/full': No space left on device"), std::string::npos) << st.message();
}

// A 1.0 checkpoint (no checksums) of the same network, as an older release
// wrote it.
std::vector<uint8_t> AsFormat10(const std::vector<uint8_t>& file) {
  return testing::RestampCheckpoint(file, 1, 0, "sinkrt 1.0.0");
}

TEST_F(CheckpointErrors, AFileWithoutChecksumsLoadsUnchecked) {
  SINKRT_ASSERT_OK(WriteFileBytes(Path("old.ckpt"), AsFormat10(good_)));
  SINKRT_ASSERT_OK(LoadCheckpoint(Path("old.ckpt"), *model_));
}

// The checkpoint holds every parameter, so the seed the network was built
// with does not bind it (MindSpore's load_checkpoint matches parameters by
// name and shape): resuming under another --seed said "a different network".
TEST_F(CheckpointDir, AnotherSeedLoadsTheSameNetworksCheckpoint) {
  const auto make = [](DeviceLink& dev, uint64_t seed) {
    auto m = Model::Create(testing::MlpNetwork(kBatch, {16, 12, 4}, seed), host::LossSpec::SparseSoftmaxCrossEntropy(),
                           OptimizerSpec::Momentum(0.05f, 0.9f), dev);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    return std::move(m).value();
  };
  testing::CountingDevice dev1, dev2;
  auto saved = make(dev1, 1);
  auto other_seed = make(dev2, 2);
  EXPECT_NE(saved->network_hash(), other_seed->network_hash());
  EXPECT_EQ(saved->network_structure_hash(), other_seed->network_structure_hash());
  SINKRT_ASSERT_OK(saved->train(1, MakeDataset(MakeSyntheticData(16, 16, 4, 1), kBatch), {}, true));
  SINKRT_ASSERT_OK(SaveCheckpoint(Path("a.ckpt"), *saved));
  SINKRT_ASSERT_OK(LoadCheckpoint(Path("a.ckpt"), *other_seed));
  testing::ExpectSameState(*saved, *other_seed);

  // A 1.0 file records only the hash that covers the seed: still refused,
  // saying what may differ.
  auto bytes = ReadFileBytes(Path("a.ckpt"), kFlatBufferFileLimit);
  SINKRT_ASSERT_OK(bytes);
  SINKRT_ASSERT_OK(WriteFileBytes(Path("old.ckpt"), AsFormat10(*bytes)));
  Status st = LoadCheckpoint(Path("old.ckpt"), *other_seed);
  EXPECT_NE(st.message().find(": a different network, or the same one with other initial values (--seed, "
                              "initialisers): this checkpoint (format 1.0) binds to both"),
            std::string::npos)
      << st.message();
  SINKRT_ASSERT_OK(LoadCheckpoint(Path("old.ckpt"), *saved));
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
