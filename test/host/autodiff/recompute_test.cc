// Recomputation (Graph::Recompute, MindSpore's cell.recompute();
// docs/guide/recompute.md): the backward pass re-runs marked layers instead of
// keeping their activations. The losses are bitwise those without it, and
// the memory plan's activation bytes fall.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "sinkrt/device/in_process_device.h"
#include "sinkrt/host/compiler.h"
#include "sinkrt/host/model.h"
#include "sinkrt/host/model_zoo.h"
#include "support/in_process_world.h"
#include "support/model_fixtures.h"
#include "support/test_models.h"
#include "support/test_util.h"

namespace sinkrt {
namespace {

using host::Graph;
using host::LossSpec;
using host::Model;
using host::OptimizerSpec;
using testing::LossRecorder;
using testing::OneThreadOptions;

Graph Vit(int64_t batch, const std::string& recompute) {
  Graph g = host::MakeVitNetwork(batch);
  const host::TensorId label = g.Input("label", {batch}, DType::I32);
  g.SetLoss(g.SparseSoftmaxCrossEntropy(g.outputs().front(), label));
  if (!recompute.empty()) g.Recompute(recompute);
  return g;
}

std::vector<double> Losses(const std::string& recompute, int steps) {
  constexpr int64_t kBatch = 8;
  const testing::SyntheticData d = testing::MakeSyntheticData(steps * kBatch, 784, 10, 13);
  device::InProcessDevice dev(OneThreadOptions());
  host::ModelOptions o;
  o.compile_cache = "";
  auto m = Model::Create(Vit(kBatch, recompute), LossSpec::None(), OptimizerSpec::Adam(1e-3f), dev, o);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  if (!m.ok()) return {};
  LossRecorder rec;
  Status st = (*m)->train(1, testing::MakeDataset(d, kBatch), {&rec}, false);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return rec.losses;
}

// Recomputed values come from the same kernels on the same inputs: every
// loss is bitwise the one without recomputation.
TEST(Recompute, VitWithEveryLayerRecomputedHasBitwiseTheSameLosses) {
  const std::vector<double> want = Losses("", 50);
  ASSERT_EQ(want.size(), 50u);
  for (const char* layers : {"all", "block0"}) {
    const std::vector<double> got = Losses(layers, 50);
    ASSERT_EQ(got.size(), want.size()) << layers;
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_EQ(std::memcmp(&got[i], &want[i], sizeof(double)), 0)
          << layers << ", step " << i << ": " << got[i] << " vs " << want[i];
  }
}

TEST(Recompute, VitActivationBytesFallByAtLeast40Percent) {
  host::CompileOptions co;
  co.optimizer = OptimizerSpec::Adam(1e-3f);
  for (int64_t batch : {16, 64}) {
    auto plain = host::Compile(Vit(batch, ""), co);
    auto all = host::Compile(Vit(batch, "all"), co);
    SINKRT_ASSERT_OK(plain);
    SINKRT_ASSERT_OK(all);
    const double a = static_cast<double>(plain->report.activation_bytes),
                 b = static_cast<double>(all->report.activation_bytes);
    std::printf("[ info ] ViT batch %lld: activations %.2f MiB -> %.2f MiB with recompute all (-%.1f%%)\n",
                static_cast<long long>(batch), a / (1 << 20), b / (1 << 20), 100 * (1 - b / a));
    EXPECT_LE(b, 0.6 * a) << "batch " << batch;
    // It costs the recomputed forward: more train tasks.
    EXPECT_GT(all->report.train_tasks, plain->report.train_tasks);
    EXPECT_NE(all->graph_hash, plain->graph_hash);
  }
}

TEST(Recompute, RefusesAnUnknownLayerAndTheModesItDoesNotRunIn) {
  Graph g = Vit(8, "");
  g.Recompute("nosuch");
  EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(g.status().message().find("has no op in layer 'nosuch'"), std::string::npos) << g.status().message();

  host::CompileOptions co;
  co.optimizer = OptimizerSpec::Adam(1e-3f);
  co.parallel_mode = host::ParallelMode::SemiAutoParallel;
  co.world_size = 2;
  auto c = host::Compile(Vit(8, "all"), co);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("recompute is not supported with semi_auto_parallel"), std::string::npos)
      << c.status().message();
}

}  // namespace
}  // namespace sinkrt
