// LossMonitor, TimeMonitor and ProgressBar: MindSpore's lines, conditions
// and errors, alone and in real training.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <regex>
#include <sstream>

#include "host/src/util/py_repr.h"
#include "sinkrt/host/callbacks.h"
#include "sinkrt/host/model.h"
#include "support/model_fixtures.h"
#include "support/test_util.h"

namespace sinkrt {
namespace {

using host::CallbackParams;
using host::LossMonitor;
using host::Model;
using host::RunContext;
using host::TimeMonitor;
using testing::MakeDataset;
using testing::MakeSyntheticData;
using testing::RecordingCallback;

constexpr int64_t kBatch = 8;

std::unique_ptr<Model> MakeModel(DeviceLink& dev) {
  auto m = Model::Create(testing::MlpNetwork(kBatch), host::LossSpec::SparseSoftmaxCrossEntropy(),
                         host::OptimizerSpec::Momentum(0.05f, 0.9f), dev);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? std::move(m).value() : nullptr;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

TEST(PyFloatRepr, MatchesPythonsRepr) {
  EXPECT_EQ(host::PyFloatRepr(2.0), "2.0");
  EXPECT_EQ(host::PyFloatRepr(0.1), "0.1");
  EXPECT_EQ(host::PyFloatRepr(-0.5), "-0.5");
  EXPECT_EQ(host::PyFloatRepr(123.456), "123.456");
  EXPECT_EQ(host::PyFloatRepr(0.0001), "0.0001");
  EXPECT_EQ(host::PyFloatRepr(1e-05), "1e-05");
  EXPECT_EQ(host::PyFloatRepr(1.5e-07), "1.5e-07");
  EXPECT_EQ(host::PyFloatRepr(1e16), "1e+16");
  EXPECT_EQ(host::PyFloatRepr(1234567890123456.0), "1234567890123456.0");
  EXPECT_EQ(host::PyFloatRepr(0.0), "0.0");
  // A float32 loss as Python shows float(np.float32(...)).
  EXPECT_EQ(host::PyFloatRepr(static_cast<double>(2.3025851f)), "2.3025851249694824");
  EXPECT_EQ(host::PyFloatRepr(static_cast<double>(0.3f)), "0.30000001192092896");
  EXPECT_EQ(host::PyFloatRepr(std::nan("")), "nan");
  EXPECT_EQ(host::PyFloatRepr(-std::numeric_limits<double>::infinity()), "-inf");
}

// ---- LossMonitor ---------------------------------------------------------------------------

TEST(LossMonitor, PrintsOncePerSinkWithTheInEpochStep) {
  testing::CountingDevice dev;
  auto model = MakeModel(dev);
  std::ostringstream out;
  LossMonitor loss(1, out);
  RecordingCallback rec;
  SINKRT_ASSERT_OK(model->train(3, MakeDataset(MakeSyntheticData(48, 16, 4, 2), kBatch), {&loss, &rec}, true, 4));
  const auto ends = rec.of("step_end");
  ASSERT_EQ(ends.size(), 3u);
  std::vector<std::string> want;
  for (const auto& c : ends)
    want.push_back("epoch: " + std::to_string(c.cur_epoch_num) + " step: 4, loss is " +
                   host::PyFloatRepr(c.net_outputs));
  EXPECT_EQ(Lines(out.str()), want);
}

TEST(LossMonitor, NonSinkPrintsEveryPerPrintTimesSteps) {
  testing::CountingDevice dev;
  auto model = MakeModel(dev);
  std::ostringstream out;
  LossMonitor loss(2, out);
  SINKRT_ASSERT_OK(model->train(2, MakeDataset(MakeSyntheticData(40, 16, 4, 2), kBatch), {&loss}, false));
  // 5 steps per epoch: global steps 2, 4, 6, 8, 10.
  std::vector<std::string> steps;
  for (const std::string& line : Lines(out.str())) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(line, m, std::regex(R"(epoch: (\d) step: (\d), loss is [0-9.e+-]+)"))) << line;
    steps.push_back(m[1].str() + "/" + m[2].str());
  }
  EXPECT_EQ(steps, (std::vector<std::string>{"1/2", "1/4", "2/1", "2/3", "2/5"}));

  std::ostringstream silent;
  LossMonitor never(0, silent);
  SINKRT_ASSERT_OK(model->train(1, MakeDataset(MakeSyntheticData(40, 16, 4, 2), kBatch), {&never}, false));
  EXPECT_EQ(silent.str(), "");
}

TEST(LossMonitor, NanLossTerminatesTraining) {
  testing::CountingDevice dev;
  auto model = MakeModel(dev);
  auto data = MakeSyntheticData(32, 16, 4, 2);
  // Inputs near FLT_MAX overflow the first layer to +-inf, and the second
  // mixes infinities of both signs: the loss is NaN from the first step on.
  for (float& x : data.images) x = x < 0 ? -3e38f : 3e38f;
  std::ostringstream out;
  LossMonitor loss(1, out);
  RecordingCallback rec;
  Status st = model->train(3, MakeDataset(data, kBatch), {&loss, &rec}, true, 2);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(),
            "In epoch: 1 step: 2, loss is NAN or INF, training process cannot continue, terminating training.");
  EXPECT_EQ(out.str(), "");
  EXPECT_EQ(rec.count("step_end"), 0);  // the monitor ran first and stopped it
  EXPECT_EQ(dev.sinks().size(), 1u);
}

TEST(LossMonitor, Errors) {
  std::ostringstream out;
  LossMonitor loss(-1, out);
  CallbackParams p;
  RunContext ctx(&p);
  EXPECT_EQ(loss.on_train_begin(ctx).message(),
            "The input value must be int and must >= 0, but got '-1' with type 'int'.");
  LossMonitor ok(1, out);
  p.cur_epoch_num = 3;
  p.batch_num = 10;
  p.cur_step_num = 27;
  p.net_outputs = std::numeric_limits<double>::infinity();
  EXPECT_EQ(ok.on_train_step_end(ctx).message(),
            "In epoch: 3 step: 7, loss is NAN or INF, training process cannot continue, terminating training.");
  p.net_outputs = 0.5;
  SINKRT_ASSERT_OK(ok.on_train_step_end(ctx));
  EXPECT_EQ(out.str(), "epoch: 3 step: 7, loss is 0.5\n");
}

// ---- TimeMonitor ---------------------------------------------------------------------------

TEST(TimeMonitor, LineFormat) {
  CallbackParams p;
  RunContext ctx(&p);
  p.batch_num = 4;
  p.epoch_ms = 1234.5678;
  p.data_wait_ms = 1.0;
  std::ostringstream a, b, c;
  TimeMonitor plain(0, false, a), with_data(0, true, b);
  SINKRT_ASSERT_OK(plain.on_train_epoch_end(ctx));
  SINKRT_ASSERT_OK(with_data.on_train_epoch_end(ctx));
  EXPECT_EQ(a.str(), "Train epoch time: 1234.568 ms, per step time: 308.642 ms\n");
  EXPECT_EQ(b.str(), "Train epoch time: 1234.568 ms, per step time: 308.642 ms (data time: 0.250 ms)\n");
  // Without batch_num, data_size is the step count; without either, an error.
  p.batch_num = 0;
  TimeMonitor sized(10, false, c);
  SINKRT_ASSERT_OK(sized.on_train_epoch_end(ctx));
  EXPECT_EQ(c.str(), "Train epoch time: 1234.568 ms, per step time: 123.457 ms\n");
  EXPECT_EQ(plain.on_train_epoch_end(ctx).message(),
            "The input value must be int and must > 0, but got '0' with type 'int'.");
}

TEST(TimeMonitor, OneLinePerEpochInTraining) {
  testing::CountingDevice dev;
  auto model = MakeModel(dev);
  std::ostringstream out;
  TimeMonitor time(0, true, out);
  SINKRT_ASSERT_OK(model->train(3, MakeDataset(MakeSyntheticData(48, 16, 4, 2), kBatch), {&time}, true, 4));
  const auto lines = Lines(out.str());
  ASSERT_EQ(lines.size(), 3u);
  const std::regex format(
      R"(Train epoch time: *(\d+\.\d{3}) ms, per step time: *(\d+\.\d{3}) ms \(data time: *\d+\.\d{3} ms\))");
  for (const std::string& line : lines) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(line, m, format)) << line;
    EXPECT_NEAR(std::stod(m[1].str()) / 4, std::stod(m[2].str()), 0.001);  // per step = epoch / sink_size
  }
}

// ---- ProgressBar ---------------------------------------------------------------------------

TEST(ProgressBar, SilentUnlessInteractive) {
  testing::CountingDevice dev;
  auto model = MakeModel(dev);
  std::ostringstream quiet, shown;
  host::ProgressBar off(quiet);  // not std::cout: never a terminal
  host::ProgressBar on(shown, true);
  SINKRT_ASSERT_OK(model->train(2, MakeDataset(MakeSyntheticData(32, 16, 4, 2), kBatch), {&off, &on}, false));
  EXPECT_EQ(quiet.str(), "");
  const std::string s = shown.str();
  EXPECT_NE(s.find("\r\x1b[2Kepoch 1/2 [" + std::string(30, '.') + "] 0/4"), std::string::npos);
  EXPECT_NE(s.find("epoch 2/2 [" + std::string(30, '#') + "] 4/4 loss "), std::string::npos);
  EXPECT_EQ(s.back(), '\n');
}

}  // namespace
}  // namespace sinkrt
