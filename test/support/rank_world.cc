#include "support/rank_world.h"

#include <gtest/gtest.h>

#include <memory>
#include <thread>

#include "sinkrt/device/in_process_device.h"
#include "support/in_process_world.h"

namespace sinkrt::testing {
namespace {

// Rank r's whole run: join, compile, load, then push and run each step.
Status RunRank(device::InProcessDevice& dev, int world, int r, const std::vector<PeerEndpoint>& members, int steps,
               uint64_t world_id, const RankCompile& compile, const RankFeed& feed, std::vector<double>* losses) {
  if (world > 1) SINKRT_RETURN_IF_ERROR(dev.JoinWorld({world_id, static_cast<uint32_t>(r), members}));
  SINKRT_ASSIGN_OR_RETURN(host::CompiledStream cs, compile(r));
  SINKRT_RETURN_IF_ERROR(dev.Load(cs.stream).status());
  for (int s = 0; s < steps; ++s) {
    const std::vector<ConstBytes> cols = feed(r, s);
    SINKRT_RETURN_IF_ERROR(dev.PushBatch(0, cols));
    SINKRT_ASSIGN_OR_RETURN(auto res, dev.RunSink(ProgramKind::TrainStep, 1));
    losses->push_back(res.reports.at(0).scalar());
  }
  return Status::Ok();
}

}  // namespace

std::vector<std::vector<double>> TrainRanks(int world, int steps, const RankCompile& compile, const RankFeed& feed,
                                            uint64_t world_id) {
  InProcessWorld w(world);
  std::vector<PeerEndpoint> members;
  for (auto& dev : w.devices) {
    auto e = dev->Endpoint();
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    if (e.ok()) members.push_back(*e);
  }
  std::vector<std::vector<double>> losses(world);
  std::vector<Status> status(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back(
        [&, r] { status[r] = RunRank(*w.devices[r], world, r, members, steps, world_id, compile, feed, &losses[r]); });
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < world; ++r) EXPECT_TRUE(status[r].ok()) << "rank " << r << ": " << status[r].ToString();
  return losses;
}

host::Graph TanhMlp(int64_t batch, const OpStrategies& strategies, float p, int64_t rows) {
  using host::InitSpec;
  using host::TensorId;
  host::Graph g("mlp");
  const TensorId x = g.Input("image", {batch, 32});
  const TensorId labels = g.Input("label", {batch}, DType::I32);
  const TensorId w1 = g.Param("w1", {32, 64}, InitSpec::HeUniform(11));
  const TensorId b1 = g.Param("b1", {64}, InitSpec::Uniform(-0.1f, 0.1f, 12));
  const TensorId w2 = g.Param("w2", {64, 10}, InitSpec::XavierUniform(13));
  const TensorId b2 = g.Param("b2", {10}, InitSpec::Uniform(-0.1f, 0.1f, 14));
  TensorId h = g.Tanh(g.BiasAdd(g.MatMul(x, w1), b1));
  if (rows > 1) h = g.Reshape(h, {batch * rows, 64 / rows});
  h = g.Dropout(h, p, 5);
  if (rows > 1) h = g.Reshape(h, {batch, 64});
  g.SetLoss(g.SparseSoftmaxCrossEntropy(g.BiasAdd(g.MatMul(h, w2), b2), labels));
  EXPECT_TRUE(g.status().ok()) << g.status().ToString();
  for (size_t i = 0; i < strategies.size() && i < g.ops().size(); ++i)
    if (!strategies[i].empty()) g.Shard(g.ops()[i].name, strategies[i]);
  EXPECT_TRUE(g.status().ok()) << g.status().ToString();
  return g;
}

host::CompileOptions SgdRankOptions(host::ParallelMode mode, uint32_t world, uint32_t rank, float lr) {
  host::CompileOptions o;
  o.optimizer = host::OptimizerSpec::Sgd(lr);
  o.parallel_mode = mode;
  o.world_size = world;
  o.rank = rank;
  o.eval_program = false;
  return o;
}

std::vector<RowBatch> SplitBatches(const std::vector<float>& images, const std::vector<int32_t>& labels, int64_t width,
                                   int n, int64_t batch) {
  std::vector<RowBatch> out(n);
  for (int b = 0; b < n; ++b) {
    out[b].images.assign(images.begin() + b * batch * width, images.begin() + (b + 1) * batch * width);
    out[b].labels.assign(labels.begin() + b * batch, labels.begin() + (b + 1) * batch);
  }
  return out;
}

std::vector<ConstBytes> RowColumns(const float* features, int64_t width, const int32_t* labels, int64_t row,
                                   int64_t rows) {
  return {ConstBytes(reinterpret_cast<const uint8_t*>(features + row * width), rows * width * sizeof(float)),
          ConstBytes(reinterpret_cast<const uint8_t*>(labels + row), rows * sizeof(int32_t))};
}

}  // namespace sinkrt::testing
