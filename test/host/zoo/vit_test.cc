// The model zoo's ViT (host::MakeVitNetwork, issue 15): its shapes and
// names, its example graph file, its memory plan, and that it trains sunk
// exactly as it trains step by step.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <set>

#include "sinkrt/device/in_process_device.h"
#include "sinkrt/host/compiler.h"
#include "sinkrt/host/graph_file.h"
#include "sinkrt/host/model.h"
#include "sinkrt/host/model_zoo.h"
#include "support/model_fixtures.h"
#include "support/test_models.h"
#include "support/test_util.h"

namespace sinkrt {
namespace {

using host::Graph;
using host::OptimizerSpec;
using host::TensorKind;

std::string Examples() { return (std::filesystem::path(SINKRT_SOURCE_DIR) / "examples").string(); }

TEST(Vit, ShapesAndReadableNames) {
  Graph g = host::MakeVitNetwork(8);
  ASSERT_TRUE(g.status().ok()) << g.status().ToString();
  ASSERT_EQ(g.outputs().size(), 1u);
  EXPECT_EQ(g.tensor(g.outputs()[0]).shape, (Shape{8, 10}));
  std::set<std::string> params;
  int64_t count = 0;
  for (const host::TensorInfo& t : g.tensors()) {
    if (t.kind != TensorKind::Param) continue;
    params.insert(t.name);
    count += NumElements(t.shape);
  }
  for (const char* name : {"patch.weight", "patch.bias", "pos_embed", "block0.ln1.gamma", "block0.ln1.beta",
                           "block0.attn.qkv.weight", "block0.attn.qkv.bias", "block0.attn.proj.weight",
                           "block0.ln2.gamma", "block0.mlp.fc1.weight", "block0.mlp.fc2.bias", "block1.attn.qkv.weight",
                           "block1.mlp.fc2.weight", "norm.gamma", "norm.beta", "head.weight", "head.bias"})
    EXPECT_TRUE(params.count(name)) << name;
  EXPECT_EQ(params.size(), 2u + 1u + 2u * 12u + 2u + 2u);  // patch, pos_embed, 2 blocks of 12, norm, head
  // 49*64+64 + 16*64 + 2*(4*64 + 64*192+192 + 64*64+64 + 64*256+256 + 256*64+64) + 2*64 + 64*10+10
  EXPECT_EQ(count, 3200 + 1024 + 2 * (256 + 12480 + 4160 + 16640 + 16448) + 128 + 650);
  std::set<std::string> ops;
  for (const host::OpNode& op : g.ops()) ops.insert(op.name);
  for (const char* name :
       {"patchify.transpose", "patch.matmul", "block0.ln1.layernorm", "block0.attn.qkv.matmul",
        "block0.attn.batchmatmul", "block0.attn.softmax", "block1.mlp.gelu", "norm.layernorm", "head.biasadd"})
    EXPECT_TRUE(ops.count(name)) << name;
  EXPECT_FALSE(host::MakeVitNetwork(0).status().ok());
}

TEST(Vit, ExampleFileIsTheZooVit) {
  auto file = host::LoadGraph(Examples() + "/vit.json");
  ASSERT_TRUE(file.ok()) << file.status().message();
  EXPECT_EQ(host::GraphHash(file->graph), host::GraphHash(testing::MakeVit(64)));
  ASSERT_TRUE(file->optimizer.has_value());
  EXPECT_EQ(file->optimizer->kind, host::OptimizerKind::Adam);
  EXPECT_EQ(file->optimizer->learning_rate, 1e-3f);
  host::GraphLoadOptions o;
  o.batch = 16;
  auto small = host::LoadGraph(Examples() + "/vit.json", o);
  ASSERT_TRUE(small.ok()) << small.status().message();
  EXPECT_EQ(host::GraphHash(small->graph), host::GraphHash(testing::MakeVit(16)));
}

// Issue 15: the arena stays within 1.10x of the liveness lower bound.
TEST(Vit, MemoryPlanIsCloseToTheLivenessBound) {
  for (int64_t batch : {64, 256}) {
    host::CompileOptions o;
    o.optimizer = OptimizerSpec::Adam(1e-3f);
    auto cs = host::Compile(testing::MakeVit(batch), o);
    ASSERT_TRUE(cs.ok()) << cs.status().ToString();
    const auto& r = cs->report;
    EXPECT_LE(static_cast<double>(r.arena_bytes - r.persistent_bytes),
              1.10 * static_cast<double>(r.liveness_lower_bound - r.persistent_bytes))
        << "batch " << batch << ": arena " << r.arena_bytes << ", bound " << r.liveness_lower_bound;
  }
}

std::vector<std::pair<std::string, host::Tensor>> TrainVit(bool sink, int epochs, uint64_t* trips) {
  constexpr int64_t kBatch = 8;
  testing::SyntheticData data = testing::MakeSyntheticData(kBatch * 6, 784, 10, 5);
  device::DeviceOptions opts;
  opts.threads = 1;
  device::InProcessDevice dev(opts);
  auto model = host::Model::Create(host::MakeVitNetwork(kBatch), host::LossSpec::SparseSoftmaxCrossEntropy(),
                                   OptimizerSpec::Adam(1e-3f), dev);
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  if (!model.ok()) return {};
  Status st = (*model)->train(epochs, testing::MakeDataset(data, kBatch).Shuffle(3), {}, sink, -1);
  EXPECT_TRUE(st.ok()) << st.ToString();
  *trips = (*model)->host_round_trips();
  auto state = (*model)->ReadState();
  EXPECT_TRUE(state.ok()) << state.status().ToString();
  return state.ok() ? std::move(state).value() : std::vector<std::pair<std::string, host::Tensor>>{};
}

// Sunk or step by step, the same computation: parameters and Adam state end
// bitwise equal, with one round trip per epoch against one per step.
TEST(Vit, SinkAndNonSinkEndBitwiseEqual) {
  uint64_t sink_trips = 0, step_trips = 0;
  auto sunk = TrainVit(true, 3, &sink_trips);
  auto stepped = TrainVit(false, 3, &step_trips);
  ASSERT_FALSE(sunk.empty());
  ASSERT_EQ(sunk.size(), stepped.size());
  for (size_t i = 0; i < sunk.size(); ++i) {
    EXPECT_EQ(sunk[i].first, stepped[i].first);
    EXPECT_TRUE(sunk[i].second.data == stepped[i].second.data) << sunk[i].first;
  }
  EXPECT_EQ(sink_trips, 3u);
  EXPECT_EQ(step_trips, 18u);  // 3 epochs of 6 steps
}

}  // namespace
}  // namespace sinkrt
