// BatchNorm and SyncBatchNorm under DATA_PARALLEL on real sinkd daemons
// (docs/guide/normalization.md):
//  - without sync each replica normalises with its own batch: every rank's
//    moving statistics follow MindSpore's update over its own rows, and the
//    ranks' differ;
//  - with sync the group's statistics: 2 ranks x batch b track one device x
//    batch 2b over 100 steps (losses within 1e-5 relative, the moving
//    statistics and parameters too), every rank holding the same state;
//  - sinkd is bitwise the in-process world on the same job.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "sinkrt/device/in_process_device.h"
#include "sinkrt/host/model.h"
#include "sinkrt/host/remote_device.h"
#include "support/in_process_world.h"
#include "support/sinkd_process.h"
#include "support/test_util.h"

namespace sinkrt {
namespace {

using namespace std::chrono_literals;
using host::Dataset;
using host::Graph;
using host::InitSpec;
using host::TensorId;
using testing::LossRecorder;

constexpr int kRanks = 2;
constexpr int64_t kRankBatch = 8, kFeatures = 6, kHidden = 5, kClasses = 3;
constexpr int64_t kStepsPerPass = 10, kSamples = kStepsPerPass * kRanks * kRankBatch;

// x [B, 6] -> BatchNorm1d "bn0" -> fc1 [6, 5] -> BatchNorm1d "bn1" -> relu
// -> fc2 [5, 3]: bn0 sees the data, bn1 what training makes of it.
Graph Network(int64_t batch, bool sync) {
  Graph g("bn_dp");
  const TensorId x = g.Input("x", {batch, kFeatures});
  const TensorId h0 = host::BatchNorm1d(g, "bn0", x, {.sync = sync});
  const TensorId w1 = g.Param("fc1.weight", {kFeatures, kHidden}, InitSpec::XavierUniform(3));
  const TensorId h1 = g.Relu(host::BatchNorm1d(g, "bn1", g.MatMul(h0, w1), {.sync = sync}));
  const TensorId w2 = g.Param("fc2.weight", {kHidden, kClasses}, InitSpec::XavierUniform(4));
  g.AddOutput(g.MatMul(h1, w2));
  return g;
}

struct Data {
  std::vector<float> x;
  std::vector<int32_t> labels;
  Data() : x(kSamples * kFeatures), labels(kSamples) {
    std::mt19937 rng(13);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (int64_t i = 0; i < kSamples; ++i) {
      labels[i] = static_cast<int32_t>((i * 7) % kClasses);
      for (int64_t f = 0; f < kFeatures; ++f)
        x[i * kFeatures + f] = 1.5f * static_cast<float>(f) + (0.5f + 0.3f * static_cast<float>(f)) * u(rng) +
                               0.7f * static_cast<float>(labels[i]) * (f % 2 ? 1.0f : -1.0f);
    }
  }
  Dataset dataset(int64_t batch) const {
    host::Tensor xt = host::Tensor::Zeros(DType::F32, {kSamples, kFeatures});
    host::Tensor lt = host::Tensor::Zeros(DType::I32, {kSamples});
    std::memcpy(xt.data.data(), x.data(), x.size() * sizeof(float));
    std::memcpy(lt.data.data(), labels.data(), labels.size() * sizeof(int32_t));
    return Dataset::FromArrays({{"x", xt}, {"label", lt}}).Batch(batch, true);
  }
};

host::ModelOptions DataParallel() {
  host::ModelOptions o;
  o.context.mode = host::ParallelMode::DataParallel;
  o.context.device_num = kRanks;
  o.context.gradients_mean = true;
  o.compile_cache = "";
  return o;
}

const host::OptimizerSpec kOptimizer = host::OptimizerSpec::Momentum(0.02f, 0.9f);

std::map<std::string, std::vector<float>> ToFloats(const std::vector<std::pair<std::string, host::Tensor>>& state) {
  std::map<std::string, std::vector<float>> out;
  for (const auto& [name, t] : state) {
    std::vector<float> v(t.data.size() / sizeof(float));
    std::memcpy(v.data(), t.data.data(), t.data.size());
    out[name] = std::move(v);
  }
  return out;
}

std::map<std::string, std::vector<float>> RankState(host::Model& m, uint32_t rank) {
  auto s = m.ReadState(rank);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? ToFloats(*s) : std::map<std::string, std::vector<float>>{};
}

// Real daemons, one per rank, and their links.
struct Daemons {
  std::vector<std::unique_ptr<testing::SinkdProcess>> processes;
  std::vector<std::unique_ptr<host::RemoteDevice>> devices;
  std::vector<DeviceLink*> links;
  Status Start(int n) {
    const auto dir = std::filesystem::temp_directory_path() / ("sync_batch_norm_test_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir);
    for (int r = 0; r < n; ++r) {
      auto p = std::make_unique<testing::SinkdProcess>();
      const std::string rank = std::to_string(r);
      std::string log = (dir / "r").string();
      log += rank;
      log += ".log";
      SINKRT_RETURN_IF_ERROR(p->Start(SINKD_PATH, {"--rank", rank, "--peer-timeout-ms", "30000"}, log, 30s));
      host::RemoteOptions o;
      o.connect_timeout = 20s;
      o.reply_timeout = 60s;
      o.push_timeout = 60s;
      o.peer_timeout = 30000ms;
      SINKRT_ASSIGN_OR_RETURN(auto dev, host::RemoteDevice::Connect(p->address(), o));
      links.push_back(dev.get());
      devices.push_back(std::move(dev));
      processes.push_back(std::move(p));
    }
    return Status::Ok();
  }
};

// Row j of rank r's batch at step s: Dataset::ShardBelowBatch's sample
// s·b·n + j·n + r of the pass.
int64_t Row(int64_t step, int rank, int64_t j) {
  return (step % kStepsPerPass) * kRanks * kRankBatch + j * kRanks + rank;
}

TEST(BatchNormDataParallel, WithoutSyncEachReplicaNormalisesWithItsOwnBatch) {
  Daemons d;
  SINKRT_ASSERT_OK(d.Start(kRanks));
  const Data data;
  auto model = host::Model::Create(Network(kRankBatch, false), host::LossSpec::SparseSoftmaxCrossEntropy(), kOptimizer,
                                   d.links, DataParallel());
  SINKRT_ASSERT_OK(model);
  SINKRT_ASSERT_OK((*model)->train(1, data.dataset(kRankBatch), {}, /*dataset_sink_mode=*/true, -1));
  std::vector<std::vector<float>> means;
  for (int r = 0; r < kRanks; ++r) {
    std::map<std::string, std::vector<float>> s = RankState(**model, static_cast<uint32_t>(r));
    // bn0 normalises the data itself: MindSpore's update over this rank's rows.
    for (int64_t f = 0; f < kFeatures; ++f) {
      double mean = 0, var = 1;
      for (int64_t step = 0; step < kStepsPerPass; ++step) {
        double sum = 0, sq = 0;
        for (int64_t i = 0; i < kRankBatch; ++i) sum += data.x[Row(step, r, i) * kFeatures + f];
        const double m = sum / kRankBatch;
        for (int64_t i = 0; i < kRankBatch; ++i) sq += std::pow(data.x[Row(step, r, i) * kFeatures + f] - m, 2);
        mean = 0.9 * mean + 0.1 * m;
        var = 0.9 * var + 0.1 * sq / (kRankBatch - 1);
      }
      EXPECT_NEAR(s["bn0.moving_mean"][f], mean, 1e-5 * std::abs(mean) + 1e-6) << "rank " << r << " feature " << f;
      EXPECT_NEAR(s["bn0.moving_variance"][f], var, 1e-5 * var) << "rank " << r << " feature " << f;
    }
    means.push_back(s["bn0.moving_mean"]);
    // The parameters are one model's: the gradient AllReduce keeps them equal.
    EXPECT_EQ(s["fc1.weight"], RankState(**model, 0)["fc1.weight"]);
  }
  EXPECT_NE(means[0], means[1]) << "the replicas' statistics should be their own batches'";
}

// One device x batch 2b: the reference a synced pair must track.
struct Trained {
  std::vector<double> losses;
  std::map<std::string, std::vector<float>> state;
};

Trained OneDevice(const Data& data, int epochs) {
  device::InProcessDevice dev(testing::OneThreadOptions());
  auto m = host::Model::Create(Network(kRanks * kRankBatch, false), host::LossSpec::SparseSoftmaxCrossEntropy(),
                               kOptimizer, dev);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  LossRecorder losses;
  EXPECT_TRUE((*m)->train(epochs, data.dataset(kRanks * kRankBatch), {&losses}, false).ok());
  return {losses.losses, RankState(**m, 0)};
}

std::string Sci(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

double WorstRelative(const std::vector<float>& got, const std::vector<float>& want) {
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i)
    worst = std::max(worst, std::abs(got[i] - want[i]) / std::max<double>(std::abs(want[i]), 1e-3));
  return worst;
}

TEST(BatchNormDataParallel, SyncTracksOneDeviceOver100StepsAndSinkdIsBitwiseInProcess) {
  const int epochs = 100 / kStepsPerPass;
  const Data data;
  const Trained one = OneDevice(data, epochs);
  ASSERT_EQ(one.losses.size(), 100u);

  Daemons d;
  SINKRT_ASSERT_OK(d.Start(kRanks));
  auto model = host::Model::Create(Network(kRankBatch, true), host::LossSpec::SparseSoftmaxCrossEntropy(), kOptimizer,
                                   d.links, DataParallel());
  SINKRT_ASSERT_OK(model);
  LossRecorder losses;
  SINKRT_ASSERT_OK((*model)->train(epochs, data.dataset(kRankBatch), {&losses}, false));
  ASSERT_EQ(losses.losses.size(), 100u);
  double worst = 0;
  for (size_t i = 0; i < 100; ++i)
    worst = std::max(worst, std::abs(losses.losses[i] - one.losses[i]) / std::abs(one.losses[i]));
  EXPECT_LE(worst, 1e-5);
  ::testing::Test::RecordProperty("worst_relative_loss_difference", Sci(worst));
  EXPECT_LT(losses.losses.back(), losses.losses.front());

  const std::map<std::string, std::vector<float>> rank0 = RankState(**model, 0);
  for (const char* name : {"bn0.moving_mean", "bn0.moving_variance", "bn1.moving_mean", "bn1.moving_variance",
                           "bn1.gamma", "fc1.weight", "fc2.weight"}) {
    const double w = WorstRelative(rank0.at(name), one.state.at(name));
    EXPECT_LE(w, 1e-4) << name;
    ::testing::Test::RecordProperty(std::string("worst_relative_") + name, Sci(w));
  }
  EXPECT_EQ(RankState(**model, 1), rank0) << "synced replicas must hold the same state";

  // The same job on in-process devices: the same bits.
  testing::InProcessWorld world(kRanks);
  auto in_process = host::Model::Create(Network(kRankBatch, true), host::LossSpec::SparseSoftmaxCrossEntropy(),
                                        kOptimizer, world.links, DataParallel());
  SINKRT_ASSERT_OK(in_process);
  SINKRT_ASSERT_OK((*in_process)->train(epochs, data.dataset(kRankBatch), {}, false));
  EXPECT_EQ(RankState(**in_process, 0), rank0);
}

}  // namespace
}  // namespace sinkrt
