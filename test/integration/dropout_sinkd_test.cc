// Dropout under data parallel on real sinkd daemons (docs/guide/dropout.md):
// 2 daemons on 127.0.0.1, each rank training on half of every global batch,
// track one device training on the whole batches: the masks are keyed by
// the element's row in the global batch, so rank 1 draws the rows 1, 3, 5,
// ... it is fed as one device does. 100 steps, losses within 1e-5 relative (the gradients'
// AllReduce sums in another order than one device's matmul). The same job
// on 2 in-process devices gives bitwise the daemons' losses and state
// (sinkd ≡ in-process).
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <span>

#include "sinkrt/device/in_process_device.h"
#include "sinkrt/host/model.h"
#include "sinkrt/host/remote_device.h"
#include "support/in_process_world.h"
#include "support/model_fixtures.h"
#include "support/sinkd_process.h"
#include "support/test_util.h"

namespace sinkrt {
namespace {

using namespace std::chrono_literals;

constexpr int64_t kRankBatch = 8;
constexpr int kSteps = 100;

// 16 -> 32 (Tanh, Dropout(0.2)) -> 4: the logits outputs()[0].
host::Graph Net(int64_t batch) {
  host::Graph g("mlp");
  host::TensorId h = g.Input("image", {batch, 16});
  host::TensorId w1 = g.Param("fc1.weight", {16, 32}, host::InitSpec::HeUniform(1));
  host::TensorId b1 = g.Param("fc1.bias", {32}, host::InitSpec::Zeros());
  host::TensorId w2 = g.Param("fc2.weight", {32, 4}, host::InitSpec::XavierUniform(2));
  host::TensorId b2 = g.Param("fc2.bias", {4}, host::InitSpec::Zeros());
  h = g.Dropout(g.Tanh(g.BiasAdd(g.MatMul(h, w1), b1)), 0.2f, 7);
  g.AddOutput(g.BiasAdd(g.MatMul(h, w2), b2));
  EXPECT_TRUE(g.status().ok()) << g.status().ToString();
  return g;
}

struct Outcome {
  std::vector<double> losses;
  std::vector<std::pair<std::string, host::Tensor>> state;
};

// kSteps steps, one per request (each step's loss is seen), on `links`.
Outcome Train(std::span<DeviceLink* const> links, const testing::SyntheticData& data) {
  Outcome out;
  host::ModelOptions o;
  const int64_t n = static_cast<int64_t>(links.size());
  if (n > 1) {
    o.context.mode = host::ParallelMode::DataParallel;
    o.context.device_num = static_cast<int>(n);
    o.context.gradients_mean = true;
  }
  o.compile_cache = "";
  auto model = host::Model::Create(Net(kRankBatch * 2 / n), host::LossSpec::SparseSoftmaxCrossEntropy(),
                                   host::OptimizerSpec::Momentum(0.05f, 0.9f), links, o);
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  if (!model.ok()) return out;
  testing::LossRecorder losses;
  // The global batch is 2 · kRankBatch whatever the device count; the batch
  // size is per rank (MindSpore's), rank r getting rows r, r + n, ... of
  // each global batch (Dataset::ShardBelowBatch).
  Status st = (*model)->train(1, testing::MakeDataset(data, kRankBatch * 2 / n), {&losses}, false);
  EXPECT_TRUE(st.ok()) << st.ToString();
  out.losses = losses.losses;
  auto state = (*model)->ReadState();
  EXPECT_TRUE(state.ok());
  if (state.ok()) out.state = std::move(state).value();
  return out;
}

std::string LogPath(uint32_t rank) {
  auto dir = std::filesystem::temp_directory_path() / ("dropout_sinkd_test_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  return (dir / ("r" + std::to_string(rank) + ".log")).string();
}

TEST(DropoutSinkd, DataParallelOnTwoDaemonsTracksOneDevice) {
  testing::SyntheticData data = testing::MakeSyntheticData(kSteps * kRankBatch * 2, 16, 4, 9);
  testing::RandomizeQuarterOfLabels(data, 4);

  std::vector<std::unique_ptr<testing::SinkdProcess>> daemons;
  std::vector<std::unique_ptr<host::RemoteDevice>> remotes;
  std::vector<DeviceLink*> links;
  for (uint32_t r = 0; r < 2; ++r) {
    daemons.push_back(std::make_unique<testing::SinkdProcess>());
    SINKRT_ASSERT_OK(daemons.back()->Start(SINKD_PATH, {"--rank", std::to_string(r), "--peer-timeout-ms", "20000"},
                                           LogPath(r), 30s));
  }
  for (auto& d : daemons) {
    host::RemoteOptions ro;
    ro.connect_timeout = 20s;
    ro.reply_timeout = 60s;
    ro.push_timeout = 60s;
    ro.peer_timeout = 20000ms;
    auto dev = host::RemoteDevice::Connect(d->address(), ro);
    SINKRT_ASSERT_OK(dev);
    links.push_back(dev->get());
    remotes.push_back(std::move(dev).value());
  }
  const Outcome daemons_run = Train(links, data);

  testing::InProcessWorld world(2);
  const Outcome in_process = Train(world.links, data);
  device::InProcessDevice one(testing::OneThreadOptions());
  DeviceLink* one_link[] = {&one};
  const Outcome one_device = Train(one_link, data);

  ASSERT_EQ(daemons_run.losses.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(one_device.losses.size(), static_cast<size_t>(kSteps));
  // sinkd ≡ in-process, bit for bit.
  EXPECT_EQ(daemons_run.losses, in_process.losses);
  ASSERT_EQ(daemons_run.state.size(), in_process.state.size());
  for (size_t i = 0; i < daemons_run.state.size(); ++i)
    EXPECT_TRUE(daemons_run.state[i].second.data == in_process.state[i].second.data) << daemons_run.state[i].first;
  // Data parallel with dropout tracks one device.
  double worst = 0;
  for (int s = 0; s < kSteps; ++s) {
    const double rel = std::abs(daemons_run.losses[s] - one_device.losses[s]) / std::abs(one_device.losses[s]);
    worst = std::max(worst, rel);
    EXPECT_LE(rel, 1e-5) << "step " << s << ": " << daemons_run.losses[s] << " against " << one_device.losses[s];
  }
  std::printf("worst relative loss difference over %d steps: %.3g\n", kSteps, worst);
  ::testing::Test::RecordProperty("worst_relative_loss_difference", std::to_string(worst));
  EXPECT_LT(daemons_run.losses.back(), daemons_run.losses.front());
}

}  // namespace
}  // namespace sinkrt
