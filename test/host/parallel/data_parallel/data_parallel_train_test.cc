// DATA_PARALLEL training on worlds of in-process devices (the daemons' own
// suite, sinkd_world_test, runs the same jobs through real sinkd processes):
// N ranks with per-rank batch b train like one device with batch N·b on the
// same data order, and every rank ends with bitwise the same parameters.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <thread>
#include <tuple>
#include <vector>

#include "sinkrt/device/in_process_device.h"
#include "sinkrt/host/compiler.h"
#include "sinkrt/host/model.h"
#include "sinkrt/host/model_zoo.h"
#include "support/in_process_world.h"
#include "support/model_fixtures.h"
#include "support/test_util.h"

namespace sinkrt {
namespace {

using host::Dataset;
using host::LossSpec;
using host::Model;
using host::OptimizerSpec;
using host::ParallelMode;

using testing::LossRecorder;
using testing::OneThreadOptions;
using World = testing::InProcessWorld;

host::ModelOptions DataParallel(int n) {
  host::ModelOptions o;
  o.context.mode = ParallelMode::DataParallel;
  o.context.device_num = n;
  o.context.gradients_mean = true;
  return o;
}

struct Images {
  host::Tensor images, labels;
};

// The blobs with a quarter of the labels replaced by random ones: the loss
// stays near 1 instead of falling to ~1e-4, where float32's rounding of the
// loss itself (~1e-7 absolute) would be what a relative comparison sees.
Images MlpData(int64_t n) {
  testing::SyntheticData d = testing::MakeSyntheticData(n, 784, 10, 7);
  testing::RandomizeQuarterOfLabels(d);
  return {testing::ImagesTensor(d), testing::LabelsTensor(d)};
}

Images CnnData(int64_t n) {
  Images x = MlpData(n);
  x.images.shape = {n, 1, 28, 28};
  return x;
}

Dataset Pipeline(const Images& x, int64_t batch) {
  return Dataset::FromArrays({{"image", x.images}, {"label", x.labels}}).Shuffle(11).Batch(batch, true);
}

// Trains `steps` steps (non-sink, whole passes) and returns each step's loss.
struct Run {
  std::unique_ptr<Model> model;
  LossRecorder losses;
};

void Train(Run& run, const Images& data, int64_t batch, int epochs) {
  SINKRT_ASSERT_OK(run.model->train(epochs, Pipeline(data, batch), {&run.losses}, false));
}

void ExpectRanksBitwiseEqual(Model& model) {
  auto ref = model.ReadState(0);
  SINKRT_ASSERT_OK(ref);
  for (uint32_t r = 1; r < model.device_num(); ++r) {
    auto state = model.ReadState(r);
    SINKRT_ASSERT_OK(state);
    ASSERT_EQ(state->size(), ref->size());
    for (size_t i = 0; i < ref->size(); ++i) {
      EXPECT_EQ((*state)[i].first, (*ref)[i].first);
      EXPECT_TRUE((*state)[i].second.data == (*ref)[i].second.data)
          << "rank " << r << " differs from rank 0 in '" << (*ref)[i].first << "'";
    }
  }
}

void ExpectLossesClose(const std::vector<double>& dp, const std::vector<double>& one, double rel) {
  ASSERT_EQ(dp.size(), one.size());
  double worst = 0;
  size_t worst_step = 0;
  for (size_t i = 0; i < dp.size(); ++i) {
    double d = std::abs(dp[i] - one[i]) / std::max(std::abs(one[i]), 1e-12);
    if (d > worst) worst = d, worst_step = i;
  }
  EXPECT_LE(worst, rel) << "step " << worst_step << ": data parallel " << dp[worst_step] << ", one device "
                        << one[worst_step];
  ::testing::Test::RecordProperty("worst_relative_loss_difference", std::to_string(worst));
}

// N ranks × batch b against one device × batch N·b, `steps` steps.
void CompareWithOneDevice(int n, int64_t b, int64_t steps, bool cnn) {
  const int64_t global = n * b;
  const int64_t steps_per_pass = 50;
  const int epochs = static_cast<int>(steps / steps_per_pass);
  const Images data = cnn ? CnnData(steps_per_pass * global) : MlpData(steps_per_pass * global);
  auto net = [&](int64_t batch) { return cnn ? host::MakeLeNetNetwork(batch) : host::MakeMlpNetwork(batch); };
  // A rate at which training is stable: a diverging run amplifies the
  // last-bit differences of summation order into different trajectories.
  const OptimizerSpec opt = OptimizerSpec::Momentum(cnn ? 0.002f : 0.02f, 0.9f);

  device::InProcessDevice one_device(OneThreadOptions());
  Run one;
  auto m1 = Model::Create(net(global), LossSpec::SparseSoftmaxCrossEntropy(), opt, one_device);
  SINKRT_ASSERT_OK(m1);
  one.model = std::move(m1).value();
  Train(one, data, global, epochs);

  World world(n);
  Run dp;
  auto mn = Model::Create(net(b), LossSpec::SparseSoftmaxCrossEntropy(), opt, world.links, DataParallel(n));
  SINKRT_ASSERT_OK(mn);
  dp.model = std::move(mn).value();
  Train(dp, data, b, epochs);

  ASSERT_EQ(dp.losses.losses.size(), static_cast<size_t>(steps));
  ExpectLossesClose(dp.losses.losses, one.losses.losses, 1e-4);
  for (const auto& ranks : dp.losses.rank_losses) ASSERT_EQ(ranks.size(), static_cast<size_t>(n));
  // The loss falls: this is training, not a replay of the initial state.
  EXPECT_LT(dp.losses.losses.back(), dp.losses.losses.front());
  ExpectRanksBitwiseEqual(*dp.model);
  // One control round trip per step per device, as stand-alone.
  EXPECT_EQ(dp.model->host_round_trips(), static_cast<uint64_t>(steps));
  for (auto& d : world.devices) EXPECT_EQ(d->control_round_trips(), static_cast<uint64_t>(steps));
}

TEST(DataParallelTrain, MlpTwoRanksMatchOneDeviceWithTheGlobalBatch) { CompareWithOneDevice(2, 16, 200, false); }
TEST(DataParallelTrain, MlpFourRanksMatchOneDeviceWithTheGlobalBatch) { CompareWithOneDevice(4, 8, 200, false); }
TEST(DataParallelTrain, CnnTwoRanksMatchOneDeviceWithTheGlobalBatch) { CompareWithOneDevice(2, 8, 200, true); }
TEST(DataParallelTrain, CnnFourRanksMatchOneDeviceWithTheGlobalBatch) { CompareWithOneDevice(4, 4, 200, true); }

TEST(DataParallelTrain, SinkModeEqualsNonSinkModeBitwise) {
  const Images data = MlpData(40 * 16);
  auto run = [&](bool sink) {
    World world(2);
    auto m = Model::Create(testing::MlpNetwork(8, {16, 12, 10}), LossSpec::SparseSoftmaxCrossEntropy(),
                           OptimizerSpec::Momentum(0.05f, 0.9f), world.links, DataParallel(2));
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    auto x = data;
    x.images.shape = {40 * 16, 784};
    // MlpNetwork's input is 16 wide: take the first 16 features of each sample.
    host::Tensor img{DType::F32, {40 * 16, 16}, {}};
    img.data.resize(40 * 16 * 16 * sizeof(float));
    for (int64_t i = 0; i < 40 * 16; ++i)
      std::memcpy(img.data.data() + i * 16 * sizeof(float), x.images.data.data() + i * 784 * sizeof(float),
                  16 * sizeof(float));
    Dataset ds = Dataset::FromArrays({{"image", img}, {"label", x.labels}}).Shuffle(3).Batch(8, true);
    Status st = (*m)->train(3, ds, {}, sink);
    EXPECT_TRUE(st.ok()) << st.ToString();
    auto state = (*m)->ReadState(1);
    EXPECT_TRUE(state.ok());
    return std::make_pair(std::move(state).value(), (*m)->host_round_trips());
  };
  auto [sink_state, sink_trips] = run(true);
  auto [step_state, step_trips] = run(false);
  ASSERT_EQ(sink_state.size(), step_state.size());
  for (size_t i = 0; i < sink_state.size(); ++i)
    EXPECT_TRUE(sink_state[i].second.data == step_state[i].second.data) << sink_state[i].first;
  EXPECT_EQ(sink_trips, 3u);    // 3 sunk passes: one round trip per sink per device
  EXPECT_EQ(step_trips, 120u);  // 3 passes of 40 steps
}

TEST(DataParallelTrain, ReportsCommunicationAndEvaluatesOnRankZero) {
  const Images data = MlpData(20 * 32);
  World world(2);
  auto m = Model::Create(host::MakeMlpNetwork(16), LossSpec::SparseSoftmaxCrossEntropy(),
                         OptimizerSpec::Momentum(0.02f, 0.9f), world.links, DataParallel(2));
  SINKRT_ASSERT_OK(m);
  struct Timing : host::Callback {
    DeviceTiming device;
    int device_num = 0;
    Status on_train_epoch_end(host::RunContext& c) override {
      device = c.original_args().device;
      device_num = c.original_args().device_num;
      return Status::Ok();
    }
  } timing;
  SINKRT_ASSERT_OK((*m)->train(1, Pipeline(data, 16), {&timing}, true));
  EXPECT_EQ(timing.device_num, 2);
  EXPECT_GT(timing.device.comm_ms, 0);
  EXPECT_GE(timing.device.comm_wait_ms, 0);
  // eval on rank 0 over the whole (unsharded) dataset.
  auto ev = (*m)->eval(Pipeline(data, 16));
  SINKRT_ASSERT_OK(ev);
  EXPECT_EQ(ev->samples, 20 * 32);
  EXPECT_TRUE(std::isfinite(ev->loss));
}

TEST(DataParallelTrain, WriteStateWritesEveryRank) {
  World world(2);
  auto m = Model::Create(testing::MlpNetwork(4), LossSpec::SparseSoftmaxCrossEntropy(), OptimizerSpec::Sgd(0.1f),
                         world.links, DataParallel(2));
  SINKRT_ASSERT_OK(m);
  auto state = (*m)->ReadState();
  SINKRT_ASSERT_OK(state);
  for (auto& [name, t] : *state)
    for (auto& byte : t.data) byte = 0x3f;
  SINKRT_ASSERT_OK((*m)->WriteState(*state));
  ExpectRanksBitwiseEqual(**m);
  auto back = (*m)->ReadState(1);
  SINKRT_ASSERT_OK(back);
  EXPECT_TRUE((*back)[0].second.data == (*state)[0].second.data);
  EXPECT_EQ((*m)->ReadState(2).status().code(), StatusCode::kOutOfRange);
}

TEST(DataParallelTrain, ClearErrors) {
  World world(2);
  auto net = [] { return testing::MlpNetwork(4); };
  const auto loss = LossSpec::SparseSoftmaxCrossEntropy();
  const auto opt = OptimizerSpec::Sgd(0.1f);

  // Device count against device_num.
  std::vector<DeviceLink*> three = {world.links[0], world.links[1], world.links[0]};
  auto m = Model::Create(net(), loss, opt, three, DataParallel(2));
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("data_parallel with device_num 2 needs 2 devices, one per rank, but got 3"),
            std::string::npos)
      << m.status().ToString();
  m = Model::Create(net(), loss, opt, world.links);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("stand_alone runs on one device, but got 2"), std::string::npos)
      << m.status().ToString();
  std::vector<DeviceLink*> with_null = {world.links[0], nullptr};
  m = Model::Create(net(), loss, opt, with_null, DataParallel(2));
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("device 1 is null"), std::string::npos) << m.status().ToString();

  // A dataset the Model cannot shard by rank.
  m = Model::Create(net(), loss, opt, world.links, DataParallel(2));
  SINKRT_ASSERT_OK(m);
  testing::SyntheticData d = testing::MakeSyntheticData(64, 16, 4, 1);
  Dataset sharded = Dataset::FromArrays({{"image", testing::ImagesTensor(d)}, {"label", testing::LabelsTensor(d)}})
                        .Shard(2, 0)
                        .Batch(4, true);
  Status st = (*m)->train(1, sharded, {}, true);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("the Model shards it by rank itself"), std::string::npos) << st.ToString();
  // The Model is still usable.
  SINKRT_ASSERT_OK((*m)->train(1, testing::MakeDataset(d, 4), {}, true));
  ExpectRanksBitwiseEqual(**m);
}

// Fusion changes how many AllReduces a step runs, never the result: on two
// ranks every element is a + b whichever bucket carries it.
TEST(DataParallelTrain, FusionConfigsTrainBitwiseAlike) {
  const Images data = MlpData(16 * 32);
  auto train = [&](host::CommFusion fusion, size_t* comm_tasks) {
    World world(2);
    host::ModelOptions o = DataParallel(2);
    o.context.comm_fusion = fusion;
    auto m = Model::Create(host::MakeMlpNetwork(16), LossSpec::SparseSoftmaxCrossEntropy(),
                           OptimizerSpec::Momentum(0.02f, 0.9f), world.links, o);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    *comm_tasks = (*m)->compiled().report.buckets.size();
    EXPECT_TRUE((*m)->train(2, Pipeline(data, 16), {}, true).ok());
    auto state = (*m)->ReadState(1);
    EXPECT_TRUE(state.ok());
    return std::move(state).value();
  };
  host::CommFusion auto_mode, unfused, by_size, by_index;
  unfused.openstate = false;
  by_size.mode = "size";
  by_size.size_mb = 1;  // 256 KiB buckets: the 784x512 weight alone, the rest
  by_index.mode = "index";
  by_index.indices = {1, 3};
  size_t n_auto = 0, n_unfused = 0, n_size = 0, n_index = 0;
  auto ref = train(auto_mode, &n_auto);
  EXPECT_EQ(n_auto, 1u);
  for (auto [fusion, count, want] :
       {std::tuple{unfused, &n_unfused, 6u}, std::tuple{by_size, &n_size, 0u}, std::tuple{by_index, &n_index, 3u}}) {
    auto state = train(fusion, count);
    if (want) {
      EXPECT_EQ(*count, want) << fusion.mode;
    }
    ASSERT_EQ(state.size(), ref.size());
    for (size_t i = 0; i < ref.size(); ++i)
      EXPECT_TRUE(state[i].second.data == ref[i].second.data) << fusion.mode << " " << ref[i].first;
  }
  EXPECT_GT(n_size, 1u);
}

// parameter_broadcast: rank 1 starts from rank 0's parameters even when its
// own stream would initialise them differently.
TEST(DataParallelTrain, ParameterBroadcastStartsEveryRankFromRankZero) {
  World world(2);
  std::vector<PeerEndpoint> members;
  for (auto* d : world.links) {
    auto e = d->Endpoint();
    SINKRT_ASSERT_OK(e);
    members.push_back(*e);
  }
  std::vector<Status> joined(2);
  {
    std::thread t([&] { joined[1] = world.links[1]->JoinWorld({5, 1, members}); });
    joined[0] = world.links[0]->JoinWorld({5, 0, members});
    t.join();
  }
  SINKRT_ASSERT_OK(joined[0]);
  SINKRT_ASSERT_OK(joined[1]);
  auto compile = [](uint32_t rank, uint64_t seed, bool broadcast) {
    host::CompileOptions o;
    o.optimizer = OptimizerSpec::Sgd(0.1f);
    o.parallel_mode = ParallelMode::DataParallel;
    o.world_size = 2;
    o.rank = rank;
    o.parameter_broadcast = broadcast;
    host::Graph g = testing::MakeMlp(4, {16, 12, 10}, seed);
    auto cs = host::Compile(g, o);
    EXPECT_TRUE(cs.ok()) << cs.status().ToString();
    return std::move(cs).value();
  };
  for (bool broadcast : {false, true}) {
    SCOPED_TRACE(broadcast ? "broadcast" : "own init");
    host::CompiledStream s0 = compile(0, 1, broadcast), s1 = compile(1, 2, broadcast);
    std::vector<Status> loaded(2);
    std::thread t([&] { loaded[1] = world.links[1]->Load(s1.stream).status(); });
    loaded[0] = world.links[0]->Load(s0.stream).status();
    t.join();
    SINKRT_ASSERT_OK(loaded[0]);
    SINKRT_ASSERT_OK(loaded[1]);
    auto view = VerifyTaskStream(s0.stream.bytes());
    SINKRT_ASSERT_OK(view);
    int64_t w = view->FindBuffer("fc1.weight");
    ASSERT_GE(w, 0);
    auto a = world.links[0]->ReadTensor(static_cast<uint32_t>(w));
    auto b = world.links[1]->ReadTensor(static_cast<uint32_t>(w));
    SINKRT_ASSERT_OK(a);
    SINKRT_ASSERT_OK(b);
    EXPECT_EQ(*a == *b, broadcast);
  }
}

TEST(DataParallelTrain, ShardBelowBatchInterleavesTheGlobalBatches) {
  // The ranks' batch k together are the unsharded batch k of 2·b.
  host::Tensor ids{DType::I32, {24}, {}};
  ids.data.resize(24 * 4);
  for (int32_t i = 0; i < 24; ++i) std::memcpy(ids.data.data() + 4 * i, &i, 4);
  Dataset base = Dataset::FromArrays({{"id", ids}}).Shuffle(5);
  auto batches = [](const Dataset& ds) {
    std::vector<std::vector<int32_t>> out;
    auto it = ds.Iterate();
    EXPECT_TRUE(it.ok());
    host::Row row;
    for (int64_t k = 0; k < ds.get_dataset_size(); ++k) {
      EXPECT_TRUE((*it)->Next(&row).ok());
      std::vector<int32_t> v(row[0].data.size() / 4);
      std::memcpy(v.data(), row[0].data.data(), row[0].data.size());
      out.push_back(v);
    }
    return out;
  };
  auto global = batches(base.Batch(6).Repeat(2));
  auto r0 = batches(base.Batch(3).Repeat(2).ShardBelowBatch(2, 0));
  auto r1 = batches(base.Batch(3).Repeat(2).ShardBelowBatch(2, 1));
  ASSERT_EQ(global.size(), 8u);
  ASSERT_EQ(r0.size(), 8u);
  ASSERT_EQ(r1.size(), 8u);
  for (size_t k = 0; k < global.size(); ++k) {
    std::vector<int32_t> both = r0[k];
    both.insert(both.end(), r1[k].begin(), r1[k].end());
    std::sort(both.begin(), both.end());
    std::vector<int32_t> want = global[k];
    std::sort(want.begin(), want.end());
    EXPECT_EQ(both, want) << "batch " << k;
  }
  EXPECT_FALSE(base.ShardBelowBatch(2, 0).status().ok());  // no Batch
}

}  // namespace
}  // namespace sinkrt
