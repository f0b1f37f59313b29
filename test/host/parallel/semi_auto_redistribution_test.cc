// Every kind of redistribution between two ops' layouts trains like one
// device: x -> MatMul -> Tanh -> loss on 2 ranks, with the three ops' layouts
// chosen so that the tensors between them are gathered, sliced, or moved
// from one split dim to another (AllToAll) in both directions. An AllToAll
// that gathered a dim after the one it split once merged its blocks in the
// wrong order (caught by AutoParallelPlan's random plans).
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "sinkrt/device/in_process_device.h"
#include "sinkrt/host/callbacks.h"
#include "sinkrt/host/model.h"
#include "sinkrt/host/shard_strategies.h"
#include "support/in_process_world.h"
#include "support/model_fixtures.h"
#include "support/test_models.h"

namespace sinkrt::host {
namespace {

using Strategy = std::vector<std::vector<int64_t>>;
constexpr int64_t kBatch = 8, kWidth = 16;
constexpr int kSteps = 3;

// image [8,16] -> MatMul w [16,16] -> Tanh -> loss over 16 classes, with
// `strategies` for the three ops (none: one device).
Graph Net(const std::vector<Strategy>& strategies) {
  Graph g("redistribution");
  const TensorId x = g.Input("image", {kBatch, kWidth});
  const TensorId labels = g.Input("label", {kBatch}, DType::I32);
  const TensorId h = g.Tanh(g.MatMul(x, g.Param("w", {kWidth, kWidth}, InitSpec::HeUniform(1))));
  g.SetLoss(g.SparseSoftmaxCrossEntropy(h, labels));
  for (size_t i = 0; i < strategies.size(); ++i) g.Shard(g.ops()[i].name, strategies[i]);
  return g;
}

std::vector<double> Losses(Graph g, int n) {
  ModelOptions o;
  o.compile_cache = "";
  int64_t dp = 1;
  if (n > 1) {
    Result<int64_t> d = StrategyDataParallel("", g, n);
    EXPECT_TRUE(d.ok()) << d.status().ToString();
    dp = d.ok() ? *d : 1;
    o.context.mode = ParallelMode::SemiAutoParallel;
    o.context.device_num = n;
    o.context.gradients_mean = true;
  }
  testing::InProcessWorld world(n);
  auto m = Model::Create(std::move(g), LossSpec::None(), OptimizerSpec::Sgd(0.05f), world.links, o);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  if (!m.ok()) return {};
  const testing::SyntheticData data = testing::MakeSyntheticData(kSteps * kBatch, kWidth, kWidth, 3);
  testing::LossRecorder losses;
  const Status st = (*m)->train(1, testing::MakeDataset(data, kBatch / dp), {&losses}, false);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return losses.losses;
}

TEST(SemiAutoRedistribution, EveryKindTrainsLikeOneDevice) {
  const Strategy col = {{1, 1}, {1, 2}}, dp_mm = {{2, 1}, {1, 1}}, rep_mm = {{1, 1}, {1, 1}};
  const Strategy by_col = {{1, 2}}, by_row = {{2, 1}}, whole = {{1, 1}};
  const Strategy loss_dp = {{2, 1}, {2}}, loss_rep = {{1, 1}, {1}};
  struct Case {
    const char* name;
    std::vector<Strategy> strategies;
  };
  const Case cases[] = {
      {"column split to the end, loss replicated (AllGather)", {col, by_col, loss_rep}},
      {"column split, then replicated, then batch split (AllGather, Slice)", {col, whole, loss_dp}},
      {"batch split to column split and back (AllToAll both ways)", {dp_mm, by_col, loss_dp}},
      {"column split to batch split (AllToAll, gathering dim 1)", {col, by_row, loss_dp}},
      {"column split kept, batch split at the loss (AllToAll)", {col, by_col, loss_dp}},
      {"data parallel", {dp_mm, by_row, loss_dp}},
      {"replicated until the loss (Slice)", {rep_mm, whole, loss_dp}},
  };
  const std::vector<double> one = Losses(Net({}), 1);
  ASSERT_EQ(one.size(), static_cast<size_t>(kSteps));
  for (const Case& c : cases) {
    const std::vector<double> got = Losses(Net(c.strategies), 2);
    ASSERT_EQ(got.size(), one.size()) << c.name;
    for (int s = 0; s < kSteps; ++s) EXPECT_NEAR(got[s], one[s], 1e-5 * std::abs(one[s])) << c.name << ", step " << s;
  }
}

}  // namespace
}  // namespace sinkrt::host
