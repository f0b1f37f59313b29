// Strategy presets (parallel/strategy/strategy_presets.h): data, model and DPxMP on
// the zoo MLP and ViT, read from rank r's partitioned forward graph: which
// collectives the layout costs (Megatron's count: one forward AllReduce and
// one backward, a GradAllReduce, per pair; nothing gathered), the slices the
// weights get, and the errors for what a preset cannot do.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "host/src/parallel/ops_info/op_sharding.h"
#include "host/src/parallel/partition/partition.h"
#include "host/src/parallel/partition/partition_plan.h"
#include "host/src/parallel/strategy/strategy_file.h"
#include "host/src/parallel/strategy/strategy_presets.h"
#include "sinkrt/host/compiler.h"
#include "sinkrt/host/model_zoo.h"
#include "sinkrt/host/shard_strategies.h"
#include "support/rank_world.h"
#include "support/test_models.h"

namespace sinkrt {
namespace {

using host::Graph;
using namespace host::parallel;

Graph WithPreset(Graph g, const std::string& name, int64_t n) {
  auto p = ParseStrategyPreset(name, n);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  if (!p.ok()) return g;
  Status s = ApplyStrategyPreset(g, *p);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return g;
}

std::vector<Strategy> StrategiesOf(const Graph& g) {
  std::vector<Strategy> out;
  for (const host::OpNode& op : g.ops()) out.push_back(op.strategy);
  return out;
}

struct Partitioned {
  LocalGraph local;
  PartitionPlan plan;
};

Partitioned Partition(const Graph& g, int64_t n, int64_t rank, bool full_batch = false) {
  const std::vector<Strategy> strategies = StrategiesOf(g);
  auto plan = PlanPartition(g, strategies, {.device_num = n, .full_batch = full_batch, .dataset_strategy = {}});
  EXPECT_TRUE(plan.ok()) << plan.status().ToString();
  if (!plan.ok()) return Partitioned();
  auto local = PartitionForRank(g, *plan, rank);
  EXPECT_TRUE(local.ok()) << local.status().ToString();
  if (!local.ok()) return Partitioned();
  return {std::move(local).value(), std::move(plan).value()};
}

// Communication ops of a local forward graph, by op code, and the group
// sizes they run on.
struct Comm {
  std::map<OpCode, int> count;
  std::map<OpCode, std::vector<size_t>> groups;
  int of(OpCode c) const { return count.count(c) ? count.at(c) : 0; }
};

Comm CommOf(const Graph& local) {
  Comm c;
  for (const host::OpNode& op : local.ops()) {
    const int code = static_cast<int>(op.op);
    if (code < static_cast<int>(OpCode::AllReduce) || code > static_cast<int>(OpCode::GradAllReduce)) continue;
    ++c.count[op.op];
    c.groups[op.op].push_back(op.attrs.group.size());
  }
  return c;
}

// `backward`: pairs whose column layer reads an activation (the MLP's fc1
// reads the image, whose gradient nothing needs: no backward AllReduce).
void ExpectMegatron(const Comm& c, int pairs, int backward, size_t mp, const std::string& what) {
  EXPECT_EQ(c.of(OpCode::AllReduce), pairs) << what;         // the row layers' partial sums
  EXPECT_EQ(c.of(OpCode::GradAllReduce), backward) << what;  // the column layers' input gradients
  for (OpCode gathered : {OpCode::AllGather, OpCode::ReduceScatter, OpCode::AllToAll, OpCode::ShardSlice})
    EXPECT_EQ(c.of(gathered), 0) << what << ": op code " << static_cast<int>(gathered);
  for (const auto& [code, sizes] : c.groups)
    for (size_t s : sizes) EXPECT_EQ(s, mp) << what;
}

Shape LocalShape(const Partitioned& p, const Graph& global, const std::string& name) {
  const host::TensorId t = global.FindTensor(name);
  EXPECT_NE(t, host::kInvalidTensor) << name;
  return p.local.graph.tensor(p.local.local_of.at(t)).shape;
}

TEST(StrategyPresets, ParseNamesAndErrors) {
  EXPECT_TRUE(IsStrategyPresetName("data"));
  EXPECT_TRUE(IsStrategyPresetName("2x2"));
  EXPECT_FALSE(IsStrategyPresetName("s.json"));
  EXPECT_FALSE(IsStrategyPresetName("2x"));
  auto d = ParseStrategyPreset("data", 4);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->data_parallel, 4);
  EXPECT_EQ(d->model_parallel, 1);
  auto m = ParseStrategyPreset("model", 4);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->data_parallel, 1);
  EXPECT_EQ(m->model_parallel, 4);
  auto dm = ParseStrategyPreset("2x4", 8);
  ASSERT_TRUE(dm.ok());
  EXPECT_EQ(dm->data_parallel, 2);
  EXPECT_EQ(dm->model_parallel, 4);

  auto unknown = ParseStrategyPreset("megatron", 4);
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().message(), "unknown strategy preset 'megatron': expected data, model or DPxMP (e.g. 2x2)");
  auto mismatch = ParseStrategyPreset("3x2", 4);
  ASSERT_FALSE(mismatch.ok());
  EXPECT_EQ(mismatch.status().message(), "strategy preset '3x2' needs DP x MP = 6 devices, the job has 4");
  EXPECT_FALSE(ParseStrategyPreset("0x4", 4).ok());
}

// The data preset is MindSpore's default strategy wherever dim 0 of an op's
// first activation is the batch: every op of the MLP, every op of the ViT
// but the qkv Split, whose dim 0 is q/k/v (the default would run it
// replicated, gathering the batch; the preset splits its dim 1).
TEST(StrategyPresets, DataIsMindSporesDefaultButWhereTheBatchIsNotDimZero) {
  for (int64_t n : {2, 4}) {
    const Graph mlp = WithPreset(testing::MakeMlp(8), "data", n);
    for (const host::OpNode& op : mlp.ops()) EXPECT_EQ(op.strategy, DefaultStrategy(mlp, op, n)) << op.name;
    const Graph vit = WithPreset(testing::MakeVit(8), "data", n);
    int differ = 0;
    for (const host::OpNode& op : vit.ops()) {
      if (op.op == OpCode::Reshape) {
        EXPECT_TRUE(op.strategy.empty()) << op.name;
        continue;
      }
      if (op.strategy == DefaultStrategy(vit, op, n)) continue;
      ++differ;
      EXPECT_EQ(op.op, OpCode::Split) << op.name;
      EXPECT_EQ(op.strategy, (Strategy{{1, n, 1, 1, 1}})) << op.name;
    }
    EXPECT_EQ(differ, 2);  // one Split per block
    // Data parallel: no collective in the forward graph; each rank reads
    // its rows.
    for (const Graph* g : {&mlp, &vit}) {
      const Partitioned p = Partition(*g, n, n - 1);
      EXPECT_EQ(CommOf(p.local.graph).count.size(), 0u) << g->name();
      EXPECT_EQ(LocalShape(p, *g, "image"), (Shape{8 / n, 784})) << g->name();
    }
  }
}

TEST(StrategyPresets, ModelIsMegatronOnTheMlp) {
  for (int64_t n : {2, 4}) {
    const Graph g = WithPreset(testing::MakeMlp(8), "model", n);
    for (int64_t rank = 0; rank < n; ++rank) {
      const Partitioned p = Partition(g, n, rank);
      ExpectMegatron(CommOf(p.local.graph), 1, 0, static_cast<size_t>(n), "mlp model on " + std::to_string(n));
      EXPECT_EQ(LocalShape(p, g, "fc1.weight"), (Shape{784, 512 / n}));
      EXPECT_EQ(LocalShape(p, g, "fc1.bias"), (Shape{512 / n}));
      EXPECT_EQ(LocalShape(p, g, "fc2.weight"), (Shape{512 / n, 256}));
      EXPECT_EQ(LocalShape(p, g, "fc2.bias"), (Shape{256}));
      EXPECT_EQ(LocalShape(p, g, "fc3.weight"), (Shape{256, 10}));  // the head: whole
      EXPECT_EQ(LocalShape(p, g, "image"), (Shape{8, 784}));        // the batch: whole
    }
  }
}

// Two pairs per block (attention split by heads, the MLP by its hidden
// units): 2 forward AllReduces and 2 GradAllReduces per block, nothing
// gathered, whole heads on every rank.
TEST(StrategyPresets, ModelSplitsTheVitByHeads) {
  for (int64_t n : {2, 4}) {
    const Graph g = WithPreset(testing::MakeVit(8), "model", n);
    for (int64_t rank : {int64_t{0}, n - 1}) {
      const Partitioned p = Partition(g, n, rank);
      ExpectMegatron(CommOf(p.local.graph), 4, 4, static_cast<size_t>(n), "vit model on " + std::to_string(n));
      EXPECT_EQ(LocalShape(p, g, "block0.attn.qkv.weight"), (Shape{64, 192 / n}));
      EXPECT_EQ(LocalShape(p, g, "block0.attn.proj.weight"), (Shape{64 / n, 64}));
      EXPECT_EQ(LocalShape(p, g, "block1.mlp.fc1.weight"), (Shape{64, 256 / n}));
      EXPECT_EQ(LocalShape(p, g, "block1.mlp.fc2.weight"), (Shape{256 / n, 64}));
      EXPECT_EQ(LocalShape(p, g, "block0.attn.softmax"), (Shape{8, 4 / n, 16, 16}));  // heads
      for (const char* whole : {"patch.weight", "pos_embed", "block0.ln1.gamma", "norm.beta", "head.weight"})
        EXPECT_EQ(LocalShape(p, g, whole), g.tensor(g.FindTensor(whole)).shape) << whole;
      // Rank r holds columns [48 r k, 48 (r+1) k) of qkv: heads r k .. (r+1) k - 1.
      const auto& w = p.local.graph.tensor(p.local.local_of.at(g.FindTensor("block0.attn.qkv.weight")));
      EXPECT_EQ(w.init.slice_offset, (std::vector<int64_t>{0, rank * 192 / n}));
    }
  }
}

TEST(StrategyPresets, DataTimesModel) {
  const Graph mlp = WithPreset(testing::MakeMlp(8), "2x2", 4);
  const Graph vit = WithPreset(testing::MakeVit(8), "2x2", 4);
  for (int64_t rank = 0; rank < 4; ++rank) {
    const Partitioned m = Partition(mlp, 4, rank);
    ExpectMegatron(CommOf(m.local.graph), 1, 0, 2, "mlp 2x2");
    EXPECT_EQ(LocalShape(m, mlp, "image"), (Shape{4, 784}));
    EXPECT_EQ(LocalShape(m, mlp, "fc1.weight"), (Shape{784, 256}));
    // Replica r / 2 reads rows 4 (r / 2) ..; model slice r % 2.
    const host::TensorId label = mlp.FindTensor("label");
    EXPECT_EQ(SliceOffset(m.plan.layouts[label], rank), (std::vector<int64_t>{4 * (rank / 2)}));
    EXPECT_EQ(SliceOffset(m.plan.layouts[mlp.FindTensor("fc1.weight")], rank),
              (std::vector<int64_t>{0, 256 * (rank % 2)}));
    const Partitioned v = Partition(vit, 4, rank);
    ExpectMegatron(CommOf(v.local.graph), 4, 4, 2, "vit 2x2");
    EXPECT_EQ(LocalShape(v, vit, "block0.attn.softmax"), (Shape{4, 2, 16, 16}));
  }
  // Each weight slice's gradient is summed over its data-parallel pair.
  const Partitioned m = Partition(mlp, 4, 1);
  for (const LocalParameter& param : m.local.parameters)
    EXPECT_EQ(param.mirror_group, (std::vector<uint32_t>{1, 3})) << mlp.tensor(param.global).name;
}

TEST(StrategyPresets, FullBatchSlicesOnTheDevice) {
  const Graph g = WithPreset(testing::MakeMlp(8), "2x2", 4);
  const Partitioned p = Partition(g, 4, 2, /*full_batch=*/true);
  EXPECT_EQ(LocalShape(p, g, "image"), (Shape{8, 784}));
}

TEST(StrategyPresets, Errors) {
  auto apply = [](Graph g, const std::string& name, int64_t n) {
    auto p = ParseStrategyPreset(name, n);
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    const uint64_t before = host::GraphHash(g);
    Status s = ApplyStrategyPreset(g, *p);
    if (!s.ok()) {
      EXPECT_EQ(host::GraphHash(g), before) << "a refused preset leaves the graph as it was";
    }
    return s.message();
  };
  // 4 heads on 8 ranks.
  EXPECT_EQ(apply(testing::MakeVit(8), "model", 8),
            "strategy preset 'model' (data parallel 1 x model parallel 8): op block0.attn.reshape: the model split 8 "
            "ways of dim 1 of [128,192] has no dim of the output [8,16,4,3,16] to go to: that dim is not divisible "
            "by 8");
  // A batch of 6 over 4 replicas.
  EXPECT_EQ(apply(testing::MakeMlp(6), "data", 4),
            "strategy preset 'data' (data parallel 4 x model parallel 1): op matmul_0: the batch dim has 6 entries, "
            "not divisible by 4 (the data-parallel degree)");
  // A network the model layout does not know.
  EXPECT_EQ(apply(testing::MakeLeNet(8), "model", 2),
            "strategy preset 'model' (data parallel 1 x model parallel 2) knows the Megatron pairs of the networks mlp "
            "and vit (the model zoo's, examples/mlp.json and examples/vit.json); graph 'lenet' is neither: give a "
            "strategy file, or the data preset");
  EXPECT_TRUE(apply(testing::MakeLeNet(8), "data", 2).empty());
  // Hidden widths the ranks do not divide.
  EXPECT_NE(apply(testing::MakeMlp(8, {784, 6, 4, 10}), "model", 4).find("not divisible by 4"), std::string::npos);
  // Without the loss, the batch's split is not known.
  EXPECT_NE(apply(host::MakeMlpNetwork(8), "data", 2).find("has no loss yet"), std::string::npos);
}

// The public face: presets and strategy files through one name, the
// data-parallel degree that multiplies --batch, and a saved file that
// applies to a fresh graph as the preset did.
TEST(StrategyPresets, SaveAndApplyAStrategyFile) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("presets_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string file = (dir / "s.json").string();
  Graph g = testing::MakeVit(8);
  ASSERT_TRUE(host::ApplyShardStrategy("2x2", g, 4).ok());
  ASSERT_TRUE(host::SaveShardStrategies(file, g, 4, false).ok());
  auto read = ReadStrategyFile(file);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  bool qkv_split = false;
  for (const auto& [name, layout] : read->parameters)
    if (name == "block0.attn.qkv.weight") qkv_split = layout.tensor_map[1] >= 0;
  EXPECT_TRUE(qkv_split) << "the qkv weight's columns are split";

  Graph fresh = testing::MakeVit(8);
  auto dp = host::StrategyDataParallel(file, fresh, 4);
  ASSERT_TRUE(dp.ok()) << dp.status().ToString();
  EXPECT_EQ(*dp, 2);
  ASSERT_TRUE(host::ApplyShardStrategy(file, fresh, 4).ok());
  EXPECT_EQ(host::GraphHash(fresh), host::GraphHash(g));
  EXPECT_EQ(*host::StrategyDataParallel("data", fresh, 4), 4);
  EXPECT_EQ(*host::StrategyDataParallel("model", fresh, 4), 1);

  Status wrong_n = host::ApplyShardStrategy(file, fresh, 2);
  EXPECT_EQ(wrong_n.message(), "strategy file " + file + " was written for 4 devices (device_num), the job has 2");
  Graph mlp = testing::MakeMlp(8);
  EXPECT_NE(host::ApplyShardStrategy(file, mlp, 4).message().find("which graph mlp does not have"), std::string::npos);
  std::filesystem::remove_all(dir);
}

// Training: the presets' ViT steps like one device on the same global
// batch (SGD; gradients summed over replicas, as MindSpore's default, so
// `data` on n ranks is one device at n times the learning rate).
constexpr int64_t kVitBatch = 4;

// Per rank, per step: the loss of rank r fed rows [first(r), first(r) + rows) of every batch.
std::vector<std::vector<double>> Train(const Graph& g, host::ParallelMode mode, int world, float lr,
                                       const testing::SyntheticData& data, int steps, int64_t rows,
                                       const std::function<int64_t(int)>& first) {
  auto compile = [&](int r) { return host::Compile(g, testing::SgdRankOptions(mode, world, r, lr)); };
  auto feed = [&](int r, int s) {
    return testing::RowColumns(data.images.data(), 784, data.labels.data(), s * kVitBatch + first(r), rows);
  };
  return testing::TrainRanks(world, steps, compile, feed, /*world_id=*/11);
}

TEST(StrategyPresets, VitTrainsLikeOneDevice) {
  constexpr int kSteps = 3;
  const testing::SyntheticData data = testing::MakeSyntheticData(kSteps * kVitBatch, 784, 10, 7);
  auto whole = [](int) { return int64_t{0}; };
  const auto one =
      Train(testing::MakeVit(kVitBatch), host::ParallelMode::StandAlone, 1, 0.05f, data, kSteps, kVitBatch, whole);
  const auto model = Train(WithPreset(testing::MakeVit(kVitBatch), "model", 2), host::ParallelMode::SemiAutoParallel, 2,
                           0.05f, data, kSteps, kVitBatch, whole);
  const auto one_x2 =
      Train(testing::MakeVit(kVitBatch), host::ParallelMode::StandAlone, 1, 0.1f, data, kSteps, kVitBatch, whole);
  const auto dp = Train(WithPreset(testing::MakeVit(kVitBatch), "data", 2), host::ParallelMode::SemiAutoParallel, 2,
                        0.05f, data, kSteps, kVitBatch / 2, [](int r) { return r * kVitBatch / 2; });
  // 2x2: replica r / 2 reads half the batch, model slice r % 2.
  const auto dxm = Train(WithPreset(testing::MakeVit(kVitBatch), "2x2", 4), host::ParallelMode::SemiAutoParallel, 4,
                         0.05f, data, kSteps, kVitBatch / 2, [](int r) { return (r / 2) * kVitBatch / 2; });
  ASSERT_EQ(one[0].size(), static_cast<size_t>(kSteps));
  for (int s = 0; s < kSteps; ++s) {
    ASSERT_EQ(model[0].size(), static_cast<size_t>(kSteps));
    ASSERT_EQ(dp[1].size(), static_cast<size_t>(kSteps));
    EXPECT_NEAR(model[0][s], one[0][s], 1e-5 * std::abs(one[0][s])) << "model, step " << s;
    EXPECT_EQ(model[0][s], model[1][s]) << "both ranks compute the whole loss";
    const double mean = (dp[0][s] + dp[1][s]) / 2;
    EXPECT_NEAR(mean, one_x2[0][s], 1e-5 * std::abs(one_x2[0][s])) << "data, step " << s;
    ASSERT_EQ(dxm[3].size(), static_cast<size_t>(kSteps));
    EXPECT_NEAR((dxm[0][s] + dxm[2][s]) / 2, one_x2[0][s], 1e-5 * std::abs(one_x2[0][s])) << "2x2, step " << s;
    EXPECT_EQ(dxm[0][s], dxm[1][s]) << "one replica, one loss";
    EXPECT_EQ(dxm[2][s], dxm[3][s]) << "one replica, one loss";
    if (s > 0) {
      EXPECT_NE(one[0][s], one[0][0]) << "the steps train";
    }
  }
}

}  // namespace
}  // namespace sinkrt
