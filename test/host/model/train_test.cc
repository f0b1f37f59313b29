// End to end on one in-process device: graph -> compile -> load -> sinks.
#include <gtest/gtest.h>

#include <cmath>

#include "sinkrt/device/in_process_device.h"
#include "sinkrt/host/compiler.h"
#include "support/feeder.h"
#include "support/test_models.h"
#include "support/test_util.h"

namespace sinkrt {
namespace {

using device::InProcessDevice;
using host::CompileOptions;
using host::OptimizerSpec;
using testing::Feeder;
using testing::MakeSyntheticData;

host::CompiledStream CompileOrDie(const host::Graph& g, OptimizerSpec opt) {
  CompileOptions o;
  o.optimizer = opt;
  auto cs = host::Compile(g, o);
  EXPECT_TRUE(cs.ok()) << cs.status().ToString();
  return std::move(cs).value();
}

// Runs `sinks` sinks of `steps` steps, feeding batches in order; returns the
// loss reported by each sink.
std::vector<double> Train(DeviceLink& dev, const testing::SyntheticData& data, int64_t batch, int sinks,
                          uint32_t steps) {
  std::vector<double> losses;
  int64_t next = 0;
  for (int s = 0; s < sinks; ++s) {
    Feeder feeder(dev, 0, data, batch, next, steps);
    auto r = dev.RunSink(ProgramKind::TrainStep, steps);
    EXPECT_TRUE(feeder.Join().ok());
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) break;
    EXPECT_EQ(r->steps_run, steps);
    EXPECT_EQ(r->reports.size(), 1u);
    losses.push_back(r->reports[0].scalar());
    next += steps;
  }
  return losses;
}

std::vector<std::vector<uint8_t>> ReadAll(DeviceLink& dev, const std::vector<uint32_t>& buffers) {
  std::vector<std::vector<uint8_t>> out;
  for (uint32_t b : buffers) {
    auto t = dev.ReadTensor(b);
    EXPECT_TRUE(t.ok());
    out.push_back(t.ok() ? std::move(t).value() : std::vector<uint8_t>{});
  }
  return out;
}

TEST(Train, MlpLossFallsInSinks) {
  const int64_t batch = 64;
  auto cs = CompileOrDie(testing::MakeMlp(batch), OptimizerSpec::Momentum(0.01f, 0.9f));
  InProcessDevice dev;
  SINKRT_ASSERT_OK(dev.Load(cs.stream));
  auto data = MakeSyntheticData(batch * 16, 784, 10, 7);
  auto losses = Train(dev, data, batch, 5, 20);
  ASSERT_EQ(losses.size(), 5u);
  for (double l : losses) EXPECT_TRUE(std::isfinite(l));
  EXPECT_LT(losses.back(), 0.5 * losses.front()) << "first " << losses.front() << " last " << losses.back();
  EXPECT_EQ(dev.control_round_trips(), 5u);
}

TEST(Train, LeNetLossFalls) {
  const int64_t batch = 32;
  auto cs = CompileOrDie(testing::MakeLeNet(batch), OptimizerSpec::Momentum(0.01f, 0.9f));
  InProcessDevice dev;
  SINKRT_ASSERT_OK(dev.Load(cs.stream));
  auto data = MakeSyntheticData(batch * 8, 28 * 28, 10, 11);
  auto losses = Train(dev, data, batch, 4, 15);
  ASSERT_EQ(losses.size(), 4u);
  EXPECT_LT(losses.back(), 0.6 * losses.front()) << "first " << losses.front() << " last " << losses.back();
}

TEST(Train, AdamAndSgdTrain) {
  const int64_t batch = 32;
  auto data = MakeSyntheticData(batch * 8, 64, 4, 3);
  for (OptimizerSpec opt : {OptimizerSpec::Sgd(0.1f), OptimizerSpec::Adam(0.003f),
                            OptimizerSpec::Momentum(0.02f, 0.9f, /*nesterov=*/true)}) {
    auto cs = CompileOrDie(testing::MakeMlp(batch, {64, 32, 4}), opt);
    InProcessDevice dev;
    SINKRT_ASSERT_OK(dev.Load(cs.stream));
    auto losses = Train(dev, data, batch, 4, 16);
    ASSERT_EQ(losses.size(), 4u);
    EXPECT_LT(losses.back(), 0.5 * losses.front()) << "optimizer " << int(opt.kind);
  }
}

// One request of 100 steps and 100 requests of one step are the same
// computation: the device state must come out bitwise identical.
void ExpectSinkSizeInvariance(const host::Graph& g, int64_t batch, int64_t features) {
  auto cs = CompileOrDie(g, OptimizerSpec::Momentum(0.01f, 0.9f));
  auto data = MakeSyntheticData(batch * 10, features, 10, 5);
  InProcessDevice one_sink, many_sinks;
  SINKRT_ASSERT_OK(one_sink.Load(cs.stream));
  SINKRT_ASSERT_OK(many_sinks.Load(cs.stream));
  auto a = Train(one_sink, data, batch, 1, 100);
  auto b = Train(many_sinks, data, batch, 100, 1);
  ASSERT_FALSE(a.empty());
  ASSERT_FALSE(b.empty());
  EXPECT_EQ(a.back(), b.back());
  EXPECT_EQ(one_sink.control_round_trips(), 1u);
  EXPECT_EQ(many_sinks.control_round_trips(), 100u);
  std::vector<uint32_t> state = testing::BuffersWithRole(cs.stream.bytes(), fb::BufferRole::Param);
  auto opt = testing::BuffersWithRole(cs.stream.bytes(), fb::BufferRole::OptState);
  state.insert(state.end(), opt.begin(), opt.end());
  ASSERT_FALSE(state.empty());
  auto pa = ReadAll(one_sink, state);
  auto pb = ReadAll(many_sinks, state);
  for (size_t i = 0; i < state.size(); ++i) EXPECT_TRUE(pa[i] == pb[i]) << "buffer " << state[i] << " differs";
}

TEST(Train, MlpHundredStepsOneSinkEqualsHundredSinks) { ExpectSinkSizeInvariance(testing::MakeMlp(64), 64, 784); }

TEST(Train, LeNetHundredStepsOneSinkEqualsHundredSinks) {
  ExpectSinkSizeInvariance(testing::MakeLeNet(16), 16, 28 * 28);
}

TEST(Train, VitHundredStepsOneSinkEqualsHundredSinks) { ExpectSinkSizeInvariance(testing::MakeVit(8), 8, 784); }

TEST(Train, InitIsDeterministicAcrossDevices) {
  auto cs = CompileOrDie(testing::MakeMlp(8, {16, 8, 4}), OptimizerSpec::Sgd(0.1f));
  InProcessDevice a, b;
  SINKRT_ASSERT_OK(a.Load(cs.stream));
  SINKRT_ASSERT_OK(b.Load(cs.stream));
  auto params = testing::BuffersWithRole(cs.stream.bytes(), fb::BufferRole::Param);
  EXPECT_EQ(ReadAll(a, params), ReadAll(b, params));
}

TEST(Train, DryQueueFailsNamingTheQueue) {
  auto cs = CompileOrDie(testing::MakeMlp(8, {16, 8, 4}), OptimizerSpec::Sgd(0.1f));
  device::DeviceOptions opts;
  opts.get_next_timeout = std::chrono::milliseconds(100);
  InProcessDevice dev(opts);
  SINKRT_ASSERT_OK(dev.Load(cs.stream));
  auto r = dev.RunSink(ProgramKind::TrainStep, 3);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(r.status().message().find("queue 'train'"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("step 1 of 3"), std::string::npos) << r.status().message();
}

TEST(Train, BadLabelFailsTheStepNamingTheRow) {
  const int64_t batch = 8;
  auto cs = CompileOrDie(testing::MakeMlp(batch, {16, 8, 4}), OptimizerSpec::Sgd(0.1f));
  InProcessDevice dev;
  SINKRT_ASSERT_OK(dev.Load(cs.stream));
  auto data = MakeSyntheticData(batch, 16, 4, 1);
  data.labels[3] = 9;  // only 4 classes
  Feeder feeder(dev, 0, data, batch, 0, 1);
  auto r = dev.RunSink(ProgramKind::TrainStep, 1);
  SINKRT_ASSERT_OK(feeder.Join());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("9"), std::string::npos) << r.status().message();
}

TEST(Train, EvalStepReportsLossAndAccuracy) {
  const int64_t batch = 32;
  auto cs = CompileOrDie(testing::MakeMlp(batch, {64, 32, 4}), OptimizerSpec::Momentum(0.02f, 0.9f));
  InProcessDevice dev;
  SINKRT_ASSERT_OK(dev.Load(cs.stream));
  auto data = MakeSyntheticData(batch * 8, 64, 4, 3);
  Train(dev, data, batch, 4, 16);
  Feeder feeder(dev, 1, data, batch, 0, 1);
  auto r = dev.RunSink(ProgramKind::EvalStep, 1);
  SINKRT_ASSERT_OK(feeder.Join());
  SINKRT_ASSERT_OK(r);
  ASSERT_GE(r->reports.size(), 2u);
  EXPECT_LT(r->reports[0].scalar(), 0.5);          // loss
  EXPECT_GE(r->reports[1].scalar(), 0.8 * batch);  // correct rows
}

}  // namespace
}  // namespace sinkrt
