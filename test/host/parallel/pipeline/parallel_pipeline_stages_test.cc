// Pipeline stages (issue 19, first part): which op runs in which stage, from
// layer names or a balanced split, and the errors for stages that cannot be.
#include <gtest/gtest.h>

#include <string>

#include "sinkrt/host/model_zoo.h"
#include "sinkrt/host/pipeline.h"
#include "support/test_util.h"

namespace sinkrt::host {
namespace {

// `layers` equal ReLU layers of width `w` named layer0..layerN-1, then a
// head; batch 32.
Graph DeepMlp(int layers, int64_t w = 64) {
  Graph g("deep");
  TensorId h = g.Input("image", {32, w});
  for (int l = 0; l < layers; ++l) {
    NameScope scope(g, "layer" + std::to_string(l));
    TensorId wt = g.Param("layer" + std::to_string(l) + ".weight", {w, w}, InitSpec::HeUniform(l + 1));
    TensorId b = g.Param("layer" + std::to_string(l) + ".bias", {w}, InitSpec::Zeros());
    h = g.Relu(g.BiasAdd(g.MatMul(h, wt), b));
  }
  NameScope head(g, "head");
  TensorId wt = g.Param("head.weight", {w, 10}, InitSpec::HeUniform(99));
  g.AddOutput(g.MatMul(h, wt));
  return g;
}

Calibration Cal() {
  auto c = DefaultCalibration();
  EXPECT_TRUE(c.ok());
  return *c;
}

// The stage of every op whose name starts with `layer` + ".".
std::set<int> StagesOf(const Graph& g, const PipelineStages& p, const std::string& layer) {
  std::set<int> out;
  for (size_t i = 0; i < g.ops().size(); ++i)
    if (g.ops()[i].name.rfind(layer + ".", 0) == 0) out.insert(p.op_stage[i]);
  return out;
}

TEST(PipelineStages, BalancedSplitCutsEqualLayersEvenly) {
  const Graph g = DeepMlp(6);
  for (int s : {2, 3}) {
    PipelineConfig c;
    c.stages = s;
    auto p = AssignPipelineStages(g, c, Cal());
    SINKRT_ASSERT_OK(p);
    // 6 equal layers and a small head: 3+3 (head with the last), 2+2+2.
    for (int l = 0; l < 6; ++l)
      EXPECT_EQ(StagesOf(g, *p, "layer" + std::to_string(l)), std::set<int>{l * s / 6}) << s << " stages, layer " << l;
    EXPECT_EQ(StagesOf(g, *p, "head"), std::set<int>{s - 1});
    const double lo = *std::min_element(p->stage_seconds.begin(), p->stage_seconds.end());
    const double hi = *std::max_element(p->stage_seconds.begin(), p->stage_seconds.end());
    EXPECT_LT(hi / lo, 1.35) << s << " stages";  // the first layer has no input gradient, the last a head
    // One activation crosses each cut, forward.
    ASSERT_EQ(p->boundaries.size(), static_cast<size_t>(s - 1));
    for (int b = 0; b < s - 1; ++b) {
      EXPECT_EQ(p->boundaries[b].from, b);
      EXPECT_EQ(p->boundaries[b].to, b + 1);
    }
    EXPECT_EQ(p->stage_source[0], "balanced");
  }
}

TEST(PipelineStages, BalancedSplitNeverSeparatesAParametersReaders) {
  // One weight read by the first and the last MatMul (tied): no cut in between fits.
  Graph g("tied");
  TensorId x = g.Input("image", {8, 16});
  TensorId w = g.Param("w", {16, 16}, InitSpec::HeUniform(1));
  TensorId h = g.Relu(g.MatMul(x, w));
  h = g.Relu(g.MatMul(h, g.Param("v", {16, 16}, InitSpec::HeUniform(2))));
  g.AddOutput(g.MatMul(h, w));
  PipelineConfig c;
  c.stages = 2;
  auto p = AssignPipelineStages(g, c, Cal());
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("without splitting a parameter's readers"), std::string::npos)
      << p.status().message();
}

TEST(PipelineStages, LayerNamesPlaceOpsByTheLongestScope) {
  const Graph g = DeepMlp(4);
  PipelineConfig c;
  c.stages = 2;
  c.stage_of = {{"layer0", 0}, {"layer1", 0}, {"layer2", 1}, {"layer3", 1}};
  auto p = AssignPipelineStages(g, c, Cal());
  SINKRT_ASSERT_OK(p);
  EXPECT_EQ(StagesOf(g, *p, "layer1"), std::set<int>{0});
  EXPECT_EQ(StagesOf(g, *p, "layer2"), std::set<int>{1});
  EXPECT_EQ(StagesOf(g, *p, "head"), std::set<int>{1});  // named by no layer: follows its input
  EXPECT_EQ(p->stage_source[0], "layers layer0, layer1");

  // A longer scope wins over its prefix: layer1's MatMul stays in stage 0,
  // the rest of layer1 goes to stage 1.
  const std::string matmul = g.ops()[3].name;  // layer1's first op
  ASSERT_EQ(matmul.rfind("layer1.", 0), 0u) << matmul;
  c.stage_of = {{"layer0", 0}, {"layer1", 1}, {matmul, 0}};
  p = AssignPipelineStages(g, c, Cal());
  SINKRT_ASSERT_OK(p);
  EXPECT_EQ(p->op_stage[3], 0);
  EXPECT_EQ(p->op_stage[4], 1);
}

TEST(PipelineStages, BadAssignmentsAreRefusedNamingWhatIsWrong) {
  const Graph g = DeepMlp(4);
  auto refused = [&](PipelineConfig c, const std::string& expect) {
    auto p = AssignPipelineStages(g, c, Cal());
    ASSERT_FALSE(p.ok()) << expect;
    EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(p.status().message().find(expect), std::string::npos) << p.status().message();
  };
  PipelineConfig c;
  c.stages = 2;
  c.stage_of = {{"layer0", 0}, {"layer0", 1}};
  refused(c, "layer 'layer0' is given twice (stages 0 and 1): a layer belongs to one stage");
  c.stage_of = {{"layer0", 0}, {"layer9", 1}};
  refused(c, "layer 'layer9' (stage 1) names no op of the network");
  c.stage_of = {{"layer0", 2}};
  refused(c, "layer 'layer0' is given stage 2, outside the pipeline's stages 0..1");
  c.stage_of = {{"layer0", 0}, {"layer1", 0}, {"layer2", 0}, {"layer3", 0}};
  refused(c, "stage 1 of 2 has no ops");
  c.stage_of = {{"layer0", 1}, {"layer1", 0}};
  refused(c, "in stage 0 reads 'layer0.");
  c.stages = 40;
  c.stage_of = {};
  refused(c, "pipeline_stages 40 is more than the network's");
}

TEST(PipelineStages, ConfigChecksUseMindSporesRules) {
  PipelineConfig c;
  c.stages = 2;
  c.micro_size = 4;
  EXPECT_TRUE(CheckPipelineConfig(c, 4, 32).ok());
  EXPECT_NE(CheckPipelineConfig(c, 3, 32).message().find("device_num 3 is not divisible by pipeline_stages 2"),
            std::string::npos);
  c.micro_size = 1;
  EXPECT_NE(CheckPipelineConfig(c, 4, 32).message().find("micro_size must be greater than or equal to pipeline_stages"),
            std::string::npos);
  c.micro_size = 3;
  EXPECT_NE(CheckPipelineConfig(c, 4, 32).message().find("the batch of 32 does not split into micro_size 3"),
            std::string::npos);
  c.micro_size = 4;
  c.scheduler = "seqpipe";
  EXPECT_NE(CheckPipelineConfig(c, 4, 32).message().find("sinkrt schedules 1f1b (the default) or gpipe"),
            std::string::npos);
}

TEST(PipelineStages, StageOfParsesAndStageRanksAreContiguous) {
  auto parsed = ParseStageOf("block0=0,block1.attn=1");
  SINKRT_ASSERT_OK(parsed);
  EXPECT_EQ(*parsed, (std::vector<std::pair<std::string, int>>{{"block0", 0}, {"block1.attn", 1}}));
  for (const char* bad : {"block0", "=1", "block0=x", "block0=-1", "a=0,,b=1"}) {
    auto p = ParseStageOf(bad);
    EXPECT_FALSE(p.ok()) << bad;
    EXPECT_NE(p.status().message().find("expected LAYER=STAGE"), std::string::npos) << p.status().message();
  }
  EXPECT_EQ(StageRanks(8, 2, 1), (std::vector<uint32_t>{4, 5, 6, 7}));
  EXPECT_EQ(StageRanks(4, 4, 2), (std::vector<uint32_t>{2}));
  EXPECT_TRUE(StageRanks(6, 4, 0).empty());
  EXPECT_EQ(StageOfRank(8, 2, 5), 1);
  EXPECT_EQ(StageOfRank(8, 4, 5), 2);
}

TEST(PipelineStages, TheVitSplitsIntoBalancedContiguousStages) {
  const Graph g = MakeVitNetwork(8);
  PipelineConfig c;
  c.stages = 2;
  auto p = AssignPipelineStages(g, c, Cal());
  SINKRT_ASSERT_OK(p);
  // Contiguous: stage numbers never decrease in graph order.
  for (size_t i = 1; i < p->op_stage.size(); ++i) EXPECT_LE(p->op_stage[i - 1], p->op_stage[i]) << i;
  EXPECT_LT(std::max(p->stage_seconds[0], p->stage_seconds[1]) / std::min(p->stage_seconds[0], p->stage_seconds[1]),
            1.5);
  EXPECT_FALSE(p->boundaries.empty());
  auto split = SplitStageGraphs(g, *p);
  SINKRT_ASSERT_OK(split);
  EXPECT_EQ((*split)[0].graph.ops().size() + (*split)[1].graph.ops().size(), g.ops().size());
  EXPECT_FALSE((*split)[1].received.empty());
  EXPECT_EQ((*split)[0].sent.size(), (*split)[1].received.size());
}

TEST(PipelineStages, StageGraphsHoldTheirOpsAndReceiveWhatCrosses) {
  Graph g = DeepMlp(4);
  const TensorId labels = g.Input("label", {32}, DType::I32);
  g.SparseSoftmaxCrossEntropy(g.outputs()[0], labels);
  PipelineConfig c;
  c.stages = 2;
  c.stage_of = {{"layer0", 0}, {"layer1", 0}, {"layer2", 1}, {"layer3", 1}};
  auto p = AssignPipelineStages(g, c, Cal());
  SINKRT_ASSERT_OK(p);
  auto split = SplitStageGraphs(g, *p);
  SINKRT_ASSERT_OK(split);
  ASSERT_EQ(split->size(), 2u);
  const StageGraph& a = (*split)[0];
  const StageGraph& b = (*split)[1];
  // Every op lands in exactly one stage graph, by name.
  EXPECT_EQ(a.graph.ops().size() + b.graph.ops().size(), g.ops().size());
  for (size_t i = 0; i < g.ops().size(); ++i) {
    const Graph& mine = (*split)[p->op_stage[i]].graph;
    const int64_t at = mine.FindOp(g.ops()[i].name);
    ASSERT_GE(at, 0) << g.ops()[i].name;
    EXPECT_EQ(mine.ops()[at].op, g.ops()[i].op);
  }
  // Stage 0 reads the images and sends layer1's activation; stage 1
  // receives it under the same name and shape, and reads the labels.
  EXPECT_NE(a.graph.FindTensor("image"), kInvalidTensor);
  EXPECT_EQ(a.graph.FindTensor("label"), kInvalidTensor);
  EXPECT_NE(b.graph.FindTensor("label"), kInvalidTensor);
  EXPECT_EQ(b.graph.FindTensor("image"), kInvalidTensor);
  ASSERT_EQ(a.sent.size(), 1u);
  ASSERT_EQ(b.received.size(), 1u);
  const TensorInfo& sent = a.graph.tensors()[a.sent[0]];
  const TensorInfo& got = b.graph.tensors()[b.received[0]];
  EXPECT_EQ(sent.name, got.name);
  EXPECT_EQ(sent.shape, got.shape);
  EXPECT_EQ(got.kind, TensorKind::Input);
  EXPECT_EQ(a.graph.outputs(), a.sent);
  EXPECT_EQ(a.original[a.sent[0]], g.FindTensor(sent.name));
  // Parameters live in their stage only.
  EXPECT_NE(a.graph.FindTensor("layer1.weight"), kInvalidTensor);
  EXPECT_EQ(b.graph.FindTensor("layer1.weight"), kInvalidTensor);
  EXPECT_NE(b.graph.FindTensor("head.weight"), kInvalidTensor);
  // The network's output (the logits) is the last stage's.
  ASSERT_EQ(b.graph.outputs().size(), 1u);
  EXPECT_EQ(b.graph.tensors()[b.graph.outputs()[0]].name, g.tensors()[g.outputs()[0]].name);
  SINKRT_ASSERT_OK(a.graph.status());
  SINKRT_ASSERT_OK(b.graph.status());
}

}  // namespace
}  // namespace sinkrt::host
