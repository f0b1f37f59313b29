// sinkrun end to end: the real binary on synthetic data — its JSON report,
// sink vs non-sink round trips, and the refusals that must come before any
// training (bad flags, missing data, an unwritable report).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "sinkrt/host/compiler.h"
#include "support/run_binary.h"
#include "sinkrt/host/model_zoo.h"
#include "sinkrt/host/report_callback.h"

namespace sinkrt {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using testing::RunResult;
using testing::Slurp;

// Small enough to keep every run well under a second: 2048 samples of batch
// 32 are 64 steps per epoch, and 341 test samples (a partial last batch).
constexpr const char* kSmall = "train --model mlp --data synthetic:2048 --batch 32 --epochs 2";
constexpr int kSteps = 64;

class SinkrunTest : public ::testing::Test {
 protected:
  void SetUp() override {
#ifndef SINKRUN_PATH
    GTEST_SKIP() << "sinkrun is not built in this configuration";
#endif
    dir_ = fs::temp_directory_path() /
           ("sinkrun_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }

  // Runs sinkrun with `args` (already shell-quoted where needed).
  RunResult Run(const std::string& args) {
    RunResult r;
#ifdef SINKRUN_PATH
    r = testing::RunBinary(SINKRUN_PATH, args, dir_);
#endif
    return r;
  }

  fs::path Report() const { return dir_ / "report.jsonl"; }
  std::string ReportFlag() const { return " --report '" + Report().string() + "'"; }

  std::vector<json> ReadReport() const {
    std::vector<json> lines;
    std::ifstream in(Report());
    std::string line;
    while (std::getline(in, line)) {
      json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
      EXPECT_FALSE(j.is_discarded()) << "not JSON: " << line;
      lines.push_back(j);
    }
    return lines;
  }

  // A command line that must be refused before any training: non-zero
  // exit, an error on stderr naming `expect`, nothing trained or compiled.
  void ExpectRefused(const std::string& args, const std::string& expect, int code = 2) {
    SCOPED_TRACE(args);
    RunResult r = Run(args + ReportFlag());
    EXPECT_EQ(r.exit_code, code) << r.out << r.err;
    EXPECT_NE(r.err.find(expect), std::string::npos) << "stderr does not mention '" << expect << "':\n" << r.err;
    EXPECT_EQ(r.out.find("compiled:"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("epoch:"), std::string::npos) << r.out;
    EXPECT_FALSE(fs::exists(Report())) << "a refused run must not leave a report";
  }

  fs::path dir_;
};

void ExpectEpochRecord(const json& e, int epoch, int64_t steps) {
  SCOPED_TRACE("epoch record " + e.dump());
  EXPECT_EQ(e["event"], "epoch");
  EXPECT_EQ(e["epoch"], epoch);
  EXPECT_EQ(e["steps"], steps);
  EXPECT_EQ(e["cur_step_num"], int64_t{epoch} * steps);
  EXPECT_EQ(e["batch_size"], 32);
  for (const char* key : {"loss", "epoch_ms", "samples_per_s", "data_wait_ms"}) {
    ASSERT_TRUE(e.contains(key)) << key;
    EXPECT_TRUE(e[key].is_number()) << key;
  }
  EXPECT_GT(e["epoch_ms"].get<double>(), 0);
  const double samples_per_s = steps * 32 / (e["epoch_ms"].get<double>() / 1e3);
  EXPECT_NEAR(e["samples_per_s"].get<double>(), samples_per_s, 1e-9 * samples_per_s);
  for (const char* key : {"compute", "queue_wait", "other"}) {
    ASSERT_TRUE(e["device_ms"].contains(key)) << key;
    EXPECT_GE(e["device_ms"][key].get<double>(), 0) << key;
  }
  EXPECT_GT(e["device_ms"]["compute"].get<double>(), 0);
}

TEST_F(SinkrunTest, SinkModeReportsOneRoundTripPerEpoch) {
  RunResult r = Run(std::string(kSmall) + ReportFlag());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  // MindSpore's LossMonitor and TimeMonitor lines, once per sink.
  EXPECT_NE(r.out.find("epoch: 1 step: 64, loss is "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("epoch: 2 step: 64, loss is "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Train epoch time: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Eval result: accuracy "), std::string::npos) << r.out;

  std::vector<json> lines = ReadReport();
  ASSERT_EQ(lines.size(), 3u);
  for (int e = 1; e <= 2; ++e) {
    ExpectEpochRecord(lines[e - 1], e, kSteps);
    EXPECT_EQ(lines[e - 1]["sink_mode"], true);
    EXPECT_EQ(lines[e - 1]["host_round_trips"], 1);
    EXPECT_EQ(lines[e - 1]["total_host_round_trips"], e);
  }
  const json& end = lines[2];
  EXPECT_EQ(end["event"], "end");
  EXPECT_EQ(end["host_round_trips"], 2) << "sink mode: one control round trip per epoch";
  EXPECT_EQ(end["train_steps"], 2 * kSteps);
  EXPECT_EQ(end["test_samples"], 2048 / 6);
  EXPECT_GT(end["train_samples_per_s"].get<double>(), 0);
  EXPECT_GT(end["wall_s"].get<double>(), 0);
  // The synthetic set is learnable: well above chance (0.1) after 2 epochs.
  EXPECT_GT(end["test_accuracy"].get<double>(), 0.5);
  EXPECT_LE(end["test_accuracy"].get<double>(), 1.0);
  EXPECT_TRUE(end["test_loss"].is_number());
}

TEST_F(SinkrunTest, NonSinkModeIsOneRoundTripPerStepWithTheSameResult) {
  RunResult sunk = Run(std::string(kSmall) + " --seed 3" + ReportFlag());
  ASSERT_EQ(sunk.exit_code, 0) << sunk.err;
  const std::vector<json> sunk_lines = ReadReport();
  ASSERT_EQ(sunk_lines.size(), 3u);

  RunResult r = Run(std::string(kSmall) + " --seed 3 --no-sink" + ReportFlag());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::vector<json> lines = ReadReport();
  ASSERT_EQ(lines.size(), 3u);
  for (int e = 1; e <= 2; ++e) {
    ExpectEpochRecord(lines[e - 1], e, kSteps);
    EXPECT_EQ(lines[e - 1]["sink_mode"], false);
    EXPECT_EQ(lines[e - 1]["host_round_trips"], kSteps);
  }
  EXPECT_EQ(lines[2]["host_round_trips"], 2 * kSteps) << "non-sink mode: one control round trip per step";
  // LossMonitor prints once per epoch, at its last step, in both modes.
  EXPECT_NE(r.out.find("epoch: 2 step: 64, loss is "), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("epoch: 1 step: 1,"), std::string::npos) << r.out;
  // Same program, same batches: the trained networks are bitwise identical.
  for (int e = 0; e < 2; ++e) EXPECT_EQ(lines[e]["loss"], sunk_lines[e]["loss"]) << "epoch " << e + 1;
  EXPECT_EQ(lines[2]["test_loss"], sunk_lines[2]["test_loss"]);
  EXPECT_EQ(lines[2]["test_accuracy"], sunk_lines[2]["test_accuracy"]);
}

TEST_F(SinkrunTest, SinkSizeSetsTheStepsOfAnEpoch) {
  RunResult r = Run(std::string(kSmall) + " --sink-size 10" + ReportFlag());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::vector<json> lines = ReadReport();
  ASSERT_EQ(lines.size(), 3u);
  for (int e = 1; e <= 2; ++e) {
    ExpectEpochRecord(lines[e - 1], e, 10);
    EXPECT_EQ(lines[e - 1]["host_round_trips"], 1);
  }
  EXPECT_EQ(lines[2]["train_steps"], 20);
  EXPECT_EQ(lines[2]["host_round_trips"], 2);
  EXPECT_EQ(lines[2]["sink_size"], 10);
}

TEST_F(SinkrunTest, TrainsLeNet) {
  RunResult r = Run("train --model lenet --data synthetic:512 --batch 32 --epochs 1 --threads 1" + ReportFlag());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::vector<json> lines = ReadReport();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0]["steps"], 16);
  EXPECT_EQ(lines[1]["model"], "lenet");
  EXPECT_EQ(lines[1]["device_threads"], 1);
  EXPECT_EQ(lines[1]["test_samples"], 512 / 6);
}

TEST_F(SinkrunTest, MissingDataDirectoryFailsBeforeTrainingAndNamesIt) {
  const fs::path missing = dir_ / "no-such-dir";
  ExpectRefused("train --model mlp --data 'fashion-mnist:" + missing.string() + "'", missing.string(), 1);
}

TEST_F(SinkrunTest, DataDirectoryWithoutTheFilesNamesTheFile) {
  fs::create_directories(dir_ / "empty");
  ExpectRefused("train --model mlp --data 'fashion-mnist:" + (dir_ / "empty").string() + "'",
                "train-images-idx3-ubyte", 1);
}

TEST_F(SinkrunTest, UnwritableReportFailsBeforeTraining) {
  RunResult r = Run(std::string(kSmall) + " --report '" + (dir_ / "no-dir" / "r.jsonl").string() + "'");
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find((dir_ / "no-dir" / "r.jsonl").string()), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("epoch:"), std::string::npos) << r.out;
}

TEST_F(SinkrunTest, BadFlagsAreRefused) {
  const std::string base = "train --model mlp --data synthetic:256 --batch 32";
  ExpectRefused(base + " --epochs 0", "--epochs");
  ExpectRefused(base + " --epochs two", "--epochs");
  ExpectRefused("train --model mlp --data synthetic:256 --batch -4", "--batch");
  ExpectRefused("train --model resnet --data synthetic:256", "--model");
  ExpectRefused(base + " --optimizer rmsprop", "--optimizer");
  ExpectRefused(base + " --lr 0", "--lr");
  ExpectRefused(base + " --lr nan", "--lr");
  ExpectRefused(base + " --momentum 1.5", "--momentum");
  ExpectRefused(base + " --optimizer adam --momentum 0.5", "--momentum");
  ExpectRefused(base + " --sink-size 0", "--sink-size");
  ExpectRefused(base + " --sink-size -2", "--sink-size");
  ExpectRefused(base + " --no-sink --sink-size 4", "--no-sink");
  ExpectRefused(base + " --threads 0", "--threads");
  ExpectRefused("train --model mlp --data imagenet", "--data");
  ExpectRefused("train --model mlp --data synthetic:lots", "--data");
  ExpectRefused("train --model mlp --data synthetic:0", "--data");
  ExpectRefused("train --model mlp", "--data");
  ExpectRefused("train --model mlp --data synthetic:256 --batch 512", "--batch 512");
  ExpectRefused(base + " --devices 2", "not supported yet");
  ExpectRefused(base + " --rank-table rank_table.json", "not supported yet");
  ExpectRefused(base + " --frobnicate", "--frobnicate");
  ExpectRefused("--model mlp", "subcommand");
}

// The built-in networks read only "image" and leave the loss to Model.
TEST(ModelZooTest, NetworksReadTheImageAndHaveNoLoss) {
  struct Case {
    host::Graph g;
    Shape image;
  };
  Case cases[] = {{host::MakeMlpNetwork(8), {8, 784}}, {host::MakeLeNetNetwork(8), {8, 1, 28, 28}}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.g.name());
    ASSERT_TRUE(c.g.status().ok()) << c.g.status().ToString();
    EXPECT_FALSE(c.g.valid(c.g.loss()));
    std::vector<std::string> inputs;
    for (const host::TensorInfo& t : c.g.tensors())
      if (t.kind == host::TensorKind::Input) inputs.push_back(t.name);
    EXPECT_EQ(inputs, std::vector<std::string>{"image"});
    EXPECT_EQ(c.g.tensor(c.g.FindTensor("image")).shape, c.image);
    ASSERT_EQ(c.g.outputs().size(), 1u);
    EXPECT_EQ(c.g.tensor(c.g.outputs()[0]).shape, (Shape{8, 10}));
    EXPECT_EQ(c.g.tensor(c.g.FindTensor("fc1.weight")).init.kind, fb::InitKind::HeUniform);
  }
  // Same seed, same graph; another seed, other initial weights.
  EXPECT_EQ(host::GraphHash(host::MakeMlpNetwork(8, {4, 3}, 5)), host::GraphHash(host::MakeMlpNetwork(8, {4, 3}, 5)));
  EXPECT_NE(host::GraphHash(host::MakeMlpNetwork(8, {4, 3}, 5)), host::GraphHash(host::MakeMlpNetwork(8, {4, 3}, 6)));
}

TEST(ModelZooTest, BadArgumentsAreTheGraphsStatus) {
  host::Graph one_width = host::MakeMlpNetwork(8, {784});
  EXPECT_FALSE(one_width.status().ok());
  EXPECT_NE(one_width.status().message().find("widths"), std::string::npos) << one_width.status().message();
  EXPECT_FALSE(host::MakeLeNetNetwork(0).status().ok());
}

TEST(ReportCallbackTest, AFailedWriteIsAnError) {
  std::ostringstream out;
  host::ReportCallback report(out);
  ASSERT_TRUE(report.Write({{"event", "end"}}).ok());
  EXPECT_EQ(out.str(), "{\"event\":\"end\"}\n");
  out.setstate(std::ios::badbit);
  EXPECT_FALSE(report.Write({{"event", "end"}}).ok());
}

}  // namespace
}  // namespace sinkrt
