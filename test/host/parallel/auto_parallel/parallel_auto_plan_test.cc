// AUTO_PARALLEL's planner (sinkrt/host/auto_parallel.h) reproduces the
// layouts the literature finds, hermetically: a fixed calibration (a flat
// GEMM rate, one α and β for every collective and group size, half the
// gradient sync hidden), no timing. Each case checks the strategy of every
// op that reads a weight and the collectives in the compiled stream.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "sinkrt/device/in_process_device.h"
#include "sinkrt/fb/task_stream_generated.h"
#include "sinkrt/host/auto_parallel.h"
#include "sinkrt/host/calibration.h"
#include "sinkrt/host/callbacks.h"
#include "sinkrt/host/compiled_job.h"
#include "sinkrt/host/compiler.h"
#include "sinkrt/host/model.h"
#include "sinkrt/host/model_zoo.h"
#include "sinkrt/host/shard_strategies.h"
#include "support/in_process_world.h"
#include "support/model_fixtures.h"
#include "support/test_models.h"
#include "support/test_util.h"

namespace sinkrt::host {
namespace {

using Strategy = std::vector<std::vector<int64_t>>;

// A calibration file with flat rates: GEMMs at `flops`, memory at 10 GB/s,
// every collective on every group at `alpha` + `beta`·bytes, half the
// gradient sync hidden.
std::string CalibrationFile(const std::string& name, double flops, double alpha, double beta) {
  Calibration c;
  c.device_kind = "test";
  c.description = "parallel_auto_plan_test: " + name;
  c.gemm.m = c.gemm.n = c.gemm.k = {16, 4096};
  c.gemm.flops.assign(8, flops);
  c.memory_bandwidth = 1e10;
  c.kernel_launch = 1e-6;
  TransportFits fits;
  for (auto& f : fits) f.fit = {alpha, beta};
  c.collectives["shm"] = fits;
  c.collectives["tcp"] = fits;
  c.grad_hidden_fraction = 0.5;
  const std::string p = (std::filesystem::temp_directory_path() /
                         ("sinkrt_auto_plan_" + name + "_" + std::to_string(::getpid()) + ".json"))
                            .string();
  std::ofstream(p) << CalibrationToJson(c);
  return p;
}

// 100 GFLOP/s GEMMs and every collective α = 50 µs, β = 1 ns/byte: the
// "equal α/β" of the literature cases, with MindSpore's weight on a
// collective's fixed cost (its test sets costmodel_communi_const; a 50 KB
// message is half α).
std::string FixedCalibrationFile() {
  static const std::string path = CalibrationFile("literature", 1e11, 5e-5, 1e-9);
  return path;
}

// Collectives nearly free and GEMMs slow: plans split every op as its
// compute likes, whatever it costs to redistribute between them.
std::string CheapCollectivesCalibrationFile() {
  static const std::string path = CalibrationFile("cheap_collectives", 1e9, 1e-8, 1e-13);
  return path;
}

AutoParallelOptions Options(int64_t devices) {
  AutoParallelOptions o;
  o.device_num = devices;
  o.calibration = FixedCalibrationFile();
  o.optimizer = OptimizerSpec::Momentum(0.01f, 0.9f);
  return o;
}

// `layers` MatMuls of [hidden, hidden] weights with Relu between, on a
// [batch, hidden] input, into a loss over `hidden` classes.
Graph Mlp(int layers, int64_t hidden, int64_t batch) {
  Graph g("mlp" + std::to_string(layers));
  TensorId h = g.Input("x", {batch, hidden});
  const TensorId labels = g.Input("label", {batch}, DType::I32);
  for (int l = 0; l < layers; ++l) {
    const TensorId w = g.Param("fc" + std::to_string(l) + ".weight", {hidden, hidden}, InitSpec::HeUniform(l + 1));
    h = g.MatMul(h, w);
    if (l + 1 < layers) h = g.Relu(h);
  }
  g.SetLoss(g.SparseSoftmaxCrossEntropy(h, labels));
  return g;
}

// The strategy of each op reading a parameter, by the parameter's name.
std::map<std::string, Strategy> WeightStrategies(const Graph& g) {
  std::map<std::string, Strategy> out;
  for (const OpNode& op : g.ops())
    for (TensorId t : op.inputs)
      if (g.tensor(t).kind == TensorKind::Param) out[g.tensor(t).name] = op.strategy;
  return out;
}

struct Collectives {
  int activation_allreduces = 0;  // forward partial sums and backward GradAllReduces
  int forward_allreduces = 0;     // of those, in eval_step (forward only)
  int gradient_allreduces = 0;    // parameter-gradient buckets
  int others = 0;                 // AllGather, ReduceScatter, AllToAll, Broadcast
};

int CountAllReduces(const VerifiedStream& v, ProgramKind kind, bool grads) {
  int n = 0;
  const fb::Program* p = v.FindProgram(kind);
  if (!p) return 0;
  for (const fb::Stream* s : *p->streams())
    for (const fb::Task* t : *s->tasks()) {
      if (t->body_type() != fb::TaskBody::AllReduceTask) continue;
      bool all_grads = true;
      for (uint32_t b : *t->body_as_AllReduceTask()->buffers())
        all_grads &= v.root()->buffers()->Get(b)->role() == fb::BufferRole::Grad;
      n += all_grads == grads;
    }
  return n;
}

Collectives CompileAndCount(const Graph& planned, int64_t devices) {
  CompileOptions o;
  o.parallel_mode = ParallelMode::SemiAutoParallel;
  o.world_size = static_cast<uint32_t>(devices);
  o.optimizer = OptimizerSpec::Momentum(0.01f, 0.9f);
  Result<CompiledStream> cs = Compile(planned, o);
  EXPECT_TRUE(cs.ok()) << cs.status().ToString();
  Collectives c;
  if (!cs.ok()) return c;
  const VerifiedStream& v = cs->stream;
  c.activation_allreduces = CountAllReduces(v, ProgramKind::TrainStep, false);
  c.gradient_allreduces = CountAllReduces(v, ProgramKind::TrainStep, true);
  c.forward_allreduces = CountAllReduces(v, ProgramKind::EvalStep, false);
  for (const fb::Stream* s : *v.FindProgram(ProgramKind::TrainStep)->streams())
    for (const fb::Task* t : *s->tasks()) switch (t->body_type()) {
        case fb::TaskBody::AllGatherTask:
        case fb::TaskBody::ReduceScatterTask:
        case fb::TaskBody::AllToAllTask:
        case fb::TaskBody::BroadcastTask:
          ++c.others;
          break;
        default:
          break;
      }
  return c;
}

Result<AutoParallelPlan> Plan(Graph& g, const AutoParallelOptions& o) {
  Result<AutoParallelPlan> plan = PlanAutoParallel(g, o);
  if (plan.ok()) std::printf("%s", ExplainPlan(*plan).c_str());
  return plan;
}

// Narrow layers, a tall batch: the weights are cheap to reduce and the
// activations dear to move. Every layer splits the batch, and the six
// gradients go in one fused AllReduce.
TEST(AutoParallelPlan, NarrowMlpIsDataParallelWithOneFusedAllReduce) {
  Graph g = Mlp(6, 32, 256);
  Result<AutoParallelPlan> plan = Plan(g, Options(4));
  SINKRT_ASSERT_OK(plan);
  for (const auto& [w, s] : WeightStrategies(g)) EXPECT_EQ(s, (Strategy{{4, 1}, {1, 1}})) << w;
  const Collectives c = CompileAndCount(g, 4);
  EXPECT_EQ(c.gradient_allreduces, 1);
  EXPECT_EQ(c.activation_allreduces, 0);
  EXPECT_EQ(c.others, 0);
}

// Wide layers, a short batch: Megatron. The weights alternate column and
// row splits, so each row-split layer's output is summed once forward (3)
// and each column-split layer but the first (whose input is data) sums its
// input's gradient once backward (2): 5 activation AllReduces a step, and
// no parameter gradient needs reducing.
TEST(AutoParallelPlan, WideMlpAlternatesColumnAndRowSplits) {
  Graph g = Mlp(6, 256, 32);
  Result<AutoParallelPlan> plan = Plan(g, Options(4));
  SINKRT_ASSERT_OK(plan);
  const std::map<std::string, Strategy> got = WeightStrategies(g);
  for (int l = 0; l < 6; ++l) {
    const Strategy want = l % 2 == 0 ? Strategy{{1, 1}, {1, 4}} : Strategy{{1, 4}, {4, 1}};
    EXPECT_EQ(got.at("fc" + std::to_string(l) + ".weight"), want) << "layer " << l;
  }
  const Collectives c = CompileAndCount(g, 4);
  EXPECT_EQ(c.activation_allreduces, 5);
  EXPECT_EQ(c.forward_allreduces, 3);
  EXPECT_EQ(c.gradient_allreduces, 0);
  EXPECT_EQ(c.others, 0);
}

// A transformer's MLP block: [tokens, hidden] x [hidden, 4 hidden], GeLU,
// x [4 hidden, hidden], biases, into a loss.
Graph TransformerMlp(int64_t tokens, int64_t hidden) {
  Graph g("ffn");
  const TensorId x = g.Input("x", {tokens, hidden});
  const TensorId labels = g.Input("label", {tokens}, DType::I32);
  const TensorId w1 = g.Param("fc1.weight", {hidden, 4 * hidden}, InitSpec::HeUniform(1));
  const TensorId b1 = g.Param("fc1.bias", {4 * hidden}, InitSpec::Zeros());
  const TensorId w2 = g.Param("fc2.weight", {4 * hidden, hidden}, InitSpec::HeUniform(2));
  const TensorId b2 = g.Param("fc2.bias", {hidden}, InitSpec::Zeros());
  const TensorId h = g.Gelu(g.BiasAdd(g.MatMul(x, w1), b1));
  g.SetLoss(g.SparseSoftmaxCrossEntropy(g.BiasAdd(g.MatMul(h, w2), b2), labels));
  return g;
}

// Tokens = 4 x hidden is where the weights' bytes (8 hidden²) meet the
// activations' (2 x tokens x hidden): both cases sit 4x or more from it.
TEST(AutoParallelPlan, TransformerMlpIsMegatronWhenWideAndDataParallelWhenTall) {
  {
    Graph g = TransformerMlp(256, 1024);  // crossover at 4096 tokens: 16x below
    Result<AutoParallelPlan> plan = Plan(g, Options(4));
    SINKRT_ASSERT_OK(plan);
    const std::map<std::string, Strategy> got = WeightStrategies(g);
    EXPECT_EQ(got.at("fc1.weight"), (Strategy{{1, 1}, {1, 4}}));
    EXPECT_EQ(got.at("fc2.weight"), (Strategy{{1, 4}, {4, 1}}));
    const Collectives c = CompileAndCount(g, 4);
    EXPECT_EQ(c.forward_allreduces, 1);
    EXPECT_EQ(c.gradient_allreduces, 0);
  }
  {
    Graph g = TransformerMlp(8192, 256);  // crossover at 1024 tokens: 8x above
    Result<AutoParallelPlan> plan = Plan(g, Options(4));
    SINKRT_ASSERT_OK(plan);
    const std::map<std::string, Strategy> got = WeightStrategies(g);
    EXPECT_EQ(got.at("fc1.weight"), (Strategy{{4, 1}, {1, 1}}));
    EXPECT_EQ(got.at("fc2.weight"), (Strategy{{4, 1}, {1, 1}}));
    const Collectives c = CompileAndCount(g, 4);
    EXPECT_EQ(c.activation_allreduces, 0);
    EXPECT_EQ(c.gradient_allreduces, 1);
  }
}

// MindSpore's test_auto_parallel_two_matmul: X[128,32]·Y[32,64]·B[64,64] on
// 16 devices finds [[16,1],[1,1]] for both MatMuls.
TEST(AutoParallelPlan, MindSporeTwoMatMulsOnSixteenDevices) {
  Graph g("two_matmul");
  const TensorId x = g.Input("x", {128, 32});
  const TensorId labels = g.Input("label", {128}, DType::I32);
  const TensorId y = g.Param("y", {32, 64}, InitSpec::HeUniform(1));
  const TensorId b = g.Param("b", {64, 64}, InitSpec::HeUniform(2));
  g.SetLoss(g.SparseSoftmaxCrossEntropy(g.MatMul(g.MatMul(x, y), b), labels));
  // Under MindSpore's defaults, fully_use_devices among them: otherwise two
  // matmuls this small run fastest replicated on every rank.
  AutoParallelOptions o = Options(16);
  o.fully_use_devices = true;
  Result<AutoParallelPlan> plan = Plan(g, o);
  SINKRT_ASSERT_OK(plan);
  const std::map<std::string, Strategy> got = WeightStrategies(g);
  EXPECT_EQ(got.at("y"), (Strategy{{16, 1}, {1, 1}}));
  EXPECT_EQ(got.at("b"), (Strategy{{16, 1}, {1, 1}}));
  const Collectives c = CompileAndCount(g, 16);
  EXPECT_EQ(c.activation_allreduces, 0);
  EXPECT_EQ(c.gradient_allreduces, 1);
  EXPECT_EQ(c.others, 0);
}

// A per-rank memory limit below the data-parallel footprint forces the
// weights apart; one below every plan's footprint is refused, naming the
// smallest footprint the search found.
TEST(AutoParallelPlan, MemoryLimitForcesModelParallelThenRefusesNamingTheSmallestFootprint) {
  Graph dp = Mlp(6, 32, 256);
  Result<AutoParallelPlan> free_plan = Plan(dp, Options(4));
  SINKRT_ASSERT_OK(free_plan);
  for (const auto& [w, s] : WeightStrategies(dp)) ASSERT_EQ(s, (Strategy{{4, 1}, {1, 1}})) << w;

  AutoParallelOptions limited = Options(4);
  limited.device_memory = free_plan->memory_bytes - 1;
  Graph g = Mlp(6, 32, 256);
  Result<AutoParallelPlan> plan = Plan(g, limited);
  SINKRT_ASSERT_OK(plan);
  EXPECT_LE(plan->memory_bytes, *limited.device_memory);
  EXPECT_GT(plan->step_s, free_plan->step_s);
  int split_weights = 0;
  for (const auto& [w, s] : WeightStrategies(g)) split_weights += s[1][0] * s[1][1] > 1;
  EXPECT_GT(split_weights, 0);
  // Whatever was turned down for memory says so.
  bool named = false;
  for (const OpPlanChoice& c : free_plan->ops) named |= c.rejected_extra_s > 0;
  EXPECT_TRUE(named);
  (void)CompileAndCount(g, 4);

  AutoParallelOptions tiny = Options(4);
  tiny.device_memory = 1024;
  Graph refused = Mlp(6, 32, 256);
  const uint64_t hash = GraphHash(refused);
  Result<AutoParallelPlan> none = PlanAutoParallel(refused, tiny);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("smallest"), std::string::npos) << none.status().ToString();
  EXPECT_EQ(GraphHash(refused), hash) << "a refused plan leaves the graph as it was";
}

// An op the user sharded keeps its strategy; under sharding_propagation the
// others follow it at least redistribution cost.
TEST(AutoParallelPlan, UserStrategiesAreKeptAndPropagated) {
  Graph g = Mlp(4, 256, 32);
  g.Shard(g.ops()[0].name, {{1, 1}, {1, 4}});
  AutoParallelOptions o = Options(4);
  o.search_mode = "sharding_propagation";
  Result<AutoParallelPlan> plan = Plan(g, o);
  SINKRT_ASSERT_OK(plan);
  EXPECT_TRUE(plan->ops[0].fixed);
  EXPECT_EQ(g.ops()[0].strategy, (Strategy{{1, 1}, {1, 4}}));
  // The Relu after the column split follows it (no redistribution).
  EXPECT_EQ(g.ops()[1].strategy, (Strategy{{1, 4}}));
  (void)CompileAndCount(g, 4);
}

// The zoo's networks (LeNet's Conv2D, pooling and Flatten; the ViT's
// Reshape, LayerNorm, attention Split, BatchMatMul and Softmax) plan and
// compile on 2 and 4 ranks with the
// built-in calibration; the search takes milliseconds.
TEST(AutoParallelPlan, ZooNetworksPlanAndCompile) {
  for (const std::string name : {"mlp", "lenet", "vit"}) {
    for (int64_t n : {2, 4}) {
      Graph g = name == "mlp" ? MakeMlpNetwork(32) : name == "lenet" ? MakeLeNetNetwork(16) : MakeVitNetwork(16);
      const TensorId label = g.Input("label", {g.tensor(g.outputs().front()).shape[0]}, DType::I32);
      g.SetLoss(g.SparseSoftmaxCrossEntropy(g.outputs().front(), label));
      AutoParallelOptions o;
      o.device_num = n;
      o.optimizer = OptimizerSpec::Momentum(0.01f, 0.9f);
      Result<AutoParallelPlan> plan = PlanAutoParallel(g, o);
      SINKRT_ASSERT_OK(plan);
      EXPECT_GT(plan->step_s, 0) << name << " on " << n;
      EXPECT_EQ(plan->ops.size(), g.ops().size());
      EXPECT_LT(plan->search_s, 1.0) << name << " on " << n;
      for (const OpNode& op : g.ops()) {
        const bool follower = op.op == OpCode::Reshape || op.op == OpCode::Flatten;
        EXPECT_TRUE(follower || !op.strategy.empty()) << op.name;
      }
      std::printf("[ info ] %s on %lld ranks: predicted step %.3f ms, %zu strategies, searched in %.1f ms\n",
                  name.c_str(), static_cast<long long>(n), plan->step_s * 1e3, plan->candidates, plan->search_s * 1e3);
      (void)CompileAndCount(g, n);
    }
  }
}

// A random residual network (MatMul, BiasAdd, Relu/Tanh, LayerNorm, Add,
// Reshape) on input "image" [batch, width] with its loss on "label".
Graph RandomNetwork(std::mt19937& rng, int trial) {
  auto pick = [&](std::initializer_list<int64_t> v) {
    return *(v.begin() + std::uniform_int_distribution<size_t>(0, v.size() - 1)(rng));
  };
  const int64_t batch = pick({8, 16, 32, 64});
  int64_t width = pick({8, 16, 32, 64});
  Graph g("random" + std::to_string(trial));
  TensorId h = g.Input("image", {batch, width});
  const TensorId labels = g.Input("label", {batch}, DType::I32);
  const int layers = static_cast<int>(pick({1, 2, 3, 4}));
  uint64_t seed = 1;
  for (int l = 0; l < layers; ++l) {
    const std::string p = "l" + std::to_string(l);
    const int64_t out = pick({8, 16, 32, 64});
    TensorId y = g.MatMul(h, g.Param(p + ".w", {width, out}, InitSpec::HeUniform(seed++)));
    if (pick({0, 1})) y = g.BiasAdd(y, g.Param(p + ".b", {out}, InitSpec::Zeros()));
    y = pick({0, 1}) ? g.Relu(y) : g.Tanh(y);
    if (out == width && pick({0, 1})) y = g.Add(y, h);  // a residual branch
    if (pick({0, 1})) {
      y = g.LayerNorm(y, g.Param(p + ".g", {out}, InitSpec::Constant(1.0f)),
                      g.Param(p + ".beta", {out}, InitSpec::Zeros()));
    }
    if (pick({0, 1})) y = g.Reshape(g.Reshape(y, {batch, out / 4, 4}), {batch, out});
    h = y;
    width = out;
  }
  g.SetLoss(g.SparseSoftmaxCrossEntropy(h, labels));
  return g;
}

// Random residual networks on 2, 4 and 8 ranks, under both search modes and random memory
// limits: every plan the planner returns partitions and compiles, and every
// refusal is a clean error that leaves the graph as it was.
TEST(AutoParallelPlan, RandomNetworksAlwaysCompileOrRefuseCleanly) {
  std::mt19937 rng(17);
  auto pick = [&](std::initializer_list<int64_t> v) {
    return *(v.begin() + std::uniform_int_distribution<size_t>(0, v.size() - 1)(rng));
  };
  for (int trial = 0; trial < 24; ++trial) {
    Graph g = RandomNetwork(rng, trial);
    SINKRT_ASSERT_OK(g.status());
    for (int64_t n : {2, 4, 8}) {
      for (const char* mode : {"dynamic_programming", "sharding_propagation"}) {
        Graph copy = g;
        AutoParallelOptions o = Options(n);
        o.search_mode = mode;
        if (std::string(mode) == "sharding_propagation") copy.Shard(copy.ops()[0].name, {{n, 1}, {1, 1}});
        if (pick({0, 1})) o.device_memory = static_cast<uint64_t>(pick({4096, 16384, 65536, 262144, 1 << 20}));
        const uint64_t before = GraphHash(copy);
        Result<AutoParallelPlan> plan = PlanAutoParallel(copy, o);
        const std::string what = g.name() + " on " + std::to_string(n) + " ranks, " + mode;
        if (!plan.ok()) {
          EXPECT_TRUE(o.device_memory.has_value()) << what << ": " << plan.status().ToString();
          EXPECT_EQ(GraphHash(copy), before) << what;
          continue;
        }
        if (o.device_memory) {
          EXPECT_LE(plan->memory_bytes, *o.device_memory) << what;
        }
        CompileOptions co;
        co.parallel_mode = ParallelMode::SemiAutoParallel;
        co.world_size = static_cast<uint32_t>(n);
        co.optimizer = OptimizerSpec::Momentum(0.01f, 0.9f);
        Result<CompiledStream> cs = Compile(copy, co);
        EXPECT_TRUE(cs.ok()) << what << ": " << cs.status().ToString() << "\n" << ExplainPlan(*plan);
      }
    }
  }
}

// Losses of `steps` training steps of `g` (its strategies set, or none for
// one device) on n in-process ranks, the global batch the graph's.
std::vector<double> TrainLosses(Graph g, int n, int steps) {
  const Shape& image = g.tensor(g.ops().front().inputs[0]).shape;  // every op 0 reads "image"
  const int64_t batch = image[0], width = image[1];
  const int classes = static_cast<int>(g.tensor(g.ops()[g.producer(g.loss())].inputs[0]).shape[1]);
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
  auto m = Model::Create(std::move(g), LossSpec::None(), OptimizerSpec::Momentum(0.05f, 0.9f), world.links, o);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  if (!m.ok()) return {};
  const testing::SyntheticData data = testing::MakeSyntheticData(steps * batch, width, classes, 3);
  testing::LossRecorder losses;
  Status st = (*m)->train(1, testing::MakeDataset(data, batch / dp), {&losses}, false);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return losses.losses;
}

// Whatever the search picks (with collectives nearly free every op splits
// as its compute likes, mixing layouts; with dear ones plans lean to data
// parallelism; repeated calculation allowed or not), the sharded network trains as one device
// does on the same global batch.
TEST(AutoParallelPlan, SearchedPlansOfRandomNetworksTrainLikeOneDevice) {
  std::mt19937 rng(29);
  constexpr int kSteps = 6;
  for (int trial = 0; trial < 12; ++trial) {
    const Graph g = RandomNetwork(rng, trial);
    const std::vector<double> one = TrainLosses(g, 1, kSteps);
    ASSERT_EQ(one.size(), static_cast<size_t>(kSteps));
    for (int n : {2, 4}) {
      Graph sharded = g;
      AutoParallelOptions o = Options(n);
      o.fully_use_devices = trial % 2 == 0;
      o.calibration = trial % 3 == 0   ? FixedCalibrationFile()
                      : trial % 3 == 1 ? CheapCollectivesCalibrationFile()
                                       : "";  // the built-in one
      o.optimizer = OptimizerSpec::Momentum(0.05f, 0.9f);
      Result<AutoParallelPlan> plan = PlanAutoParallel(sharded, o);
      SINKRT_ASSERT_OK(plan);
      const std::vector<double> got = TrainLosses(sharded, n, kSteps);
      ASSERT_EQ(got.size(), one.size()) << g.name() << " on " << n << "\n" << ExplainPlan(*plan);
      for (int s = 0; s < kSteps; ++s)
        EXPECT_NEAR(got[s], one[s], 2e-5 * std::abs(one[s]) + 1e-6) << g.name() << " on " << n << ", step " << s << "\n"
                                                                    << ExplainPlan(*plan);
    }
  }
}

// The zoo ViT (attention's Split, BatchMatMul, Softmax, Transpose and
// Reshapes) under the mixed plans that nearly free collectives give.
TEST(AutoParallelPlan, MixedPlansOfTheVitTrainLikeOneDevice) {
  constexpr int kSteps = 4;
  Graph g = MakeVitNetwork(8);
  const TensorId label = g.Input("label", {8}, DType::I32);
  g.SetLoss(g.SparseSoftmaxCrossEntropy(g.outputs().front(), label));
  const std::vector<double> one = TrainLosses(g, 1, kSteps);
  ASSERT_EQ(one.size(), static_cast<size_t>(kSteps));
  for (int n : {2, 4}) {
    for (bool fully_use : {true, false}) {
      Graph sharded = g;
      AutoParallelOptions o = Options(n);
      o.calibration = CheapCollectivesCalibrationFile();
      o.fully_use_devices = fully_use;
      o.optimizer = OptimizerSpec::Momentum(0.05f, 0.9f);
      Result<AutoParallelPlan> plan = PlanAutoParallel(sharded, o);
      SINKRT_ASSERT_OK(plan);
      const std::vector<double> got = TrainLosses(sharded, n, kSteps);
      ASSERT_EQ(got.size(), one.size()) << "ViT on " << n << "\n" << ExplainPlan(*plan);
      for (int s = 0; s < kSteps; ++s)
        EXPECT_NEAR(got[s], one[s], 2e-5 * std::abs(one[s]))
            << "ViT on " << n << " (fully_use_devices " << fully_use << "), step " << s << "\n"
            << ExplainPlan(*plan);
    }
  }
}

// Issue 39: --device-memory bound only the search's estimate. With a
// 3.64 MiB limit the MLP's plan was estimated at 3.64 MiB and compiled to a
// 3.76 MiB arena. Now every compile either keeps its arena within the
// limit or is refused naming the limit and what the smallest plan needs.
TEST(AutoParallelPlan, DeviceMemoryBindsTheCompiledArena) {
  const Graph g = testing::MakeMlp(128);
  CompileOptions o;
  o.parallel_mode = ParallelMode::AutoParallel;
  o.world_size = 2;
  o.optimizer = OptimizerSpec::Momentum(0.01f, 0.9f);
  int fitted = 0, refused = 0;
  for (uint64_t limit = 3700000; limit <= 4300000; limit += 20000) {
    o.device_memory = limit;
    Result<CompiledStream> cs = Compile(g, o);
    if (cs.ok()) {
      ++fitted;
      EXPECT_LE(cs->report.arena_bytes, limit);
      ASSERT_TRUE(cs->report.auto_parallel);
      EXPECT_EQ(cs->report.auto_parallel->compiled_arena_bytes, cs->report.arena_bytes);
      EXPECT_EQ(cs->report.auto_parallel->memory_limit_bytes, limit);
      continue;
    }
    ++refused;
    EXPECT_EQ(cs.status().code(), StatusCode::kResourceExhausted) << cs.status().ToString();
    // Named with what it needs: the search's "below every plan: the
    // smallest footprint found is ...", or the compiled arena's.
    EXPECT_NE(cs.status().message().find(std::to_string(limit) + " bytes"), std::string::npos) << cs.status().message();
    EXPECT_TRUE(cs.status().message().find("smallest footprint found is") != std::string::npos ||
                cs.status().message().find("needs ") != std::string::npos)
        << cs.status().message();
  }
  EXPECT_GT(fitted, 0);
  o.device_memory = 3816816;  // 3.64 MiB: the case
  Result<CompiledStream> tight = Compile(g, o);
  ASSERT_FALSE(tight.ok()) << "arena " << tight->report.arena_bytes;
  EXPECT_NE(tight.status().message().find("the device memory limit of 3.64 MiB (3816816 bytes) per rank "
                                          "(device_memory_capacity, --device-memory) cannot be met: the smallest "
                                          "arena any searched plan compiled to needs "),
            std::string::npos)
      << tight.status().message();
  // A job of every rank: the largest rank's arena is what must fit.
  o.device_memory = 4000000;
  Result<CompiledJob> job = CompileJob(g, o);
  SINKRT_ASSERT_OK(job);
  for (const CompiledStream& s : job->ranks) EXPECT_LE(s.report.arena_bytes, 4000000u);
}

// Issue 39: every limit, even 1000 GB, printed "not exact (Pareto fronts
// thinned under the limit)". A limit the fastest plan fits in thins
// nothing: that plan is the optimum under it.
TEST(AutoParallelPlan, AGenerousLimitIsExactAndFindsTheUnlimitedPlan) {
  Graph g = testing::MakeVit(16);
  AutoParallelOptions o;
  o.device_num = 4;
  o.optimizer = OptimizerSpec::Momentum(0.01f, 0.9f);
  Graph unlimited_graph = g;
  Result<AutoParallelPlan> unlimited = PlanAutoParallel(unlimited_graph, o);
  SINKRT_ASSERT_OK(unlimited);
  o.device_memory = uint64_t{1000} * 1000 * 1000 * 1000;
  Result<AutoParallelPlan> limited = PlanAutoParallel(g, o);
  SINKRT_ASSERT_OK(limited);
  EXPECT_TRUE(limited->exact);
  EXPECT_EQ(limited->step_s, unlimited->step_s);
  EXPECT_EQ(limited->memory_bytes, unlimited->memory_bytes);
}

TEST(AutoParallelPlan, ErrorsNameWhatIsWrong) {
  Graph g = Mlp(2, 32, 32);
  AutoParallelOptions o = Options(4);
  o.search_mode = "recursive_programming";
  Result<AutoParallelPlan> r = PlanAutoParallel(g, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("recursive_programming"), std::string::npos);
  o = Options(4);
  o.calibration = "/nonexistent/calibration.json";
  r = PlanAutoParallel(g, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("/nonexistent/calibration.json"), std::string::npos);
  o = Options(4);
  o.transport = "rdma";
  r = PlanAutoParallel(g, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("rdma"), std::string::npos);
  Graph no_loss("no_loss");
  no_loss.MatMul(no_loss.Input("x", {4, 4}), no_loss.Param("w", {4, 4}, InitSpec::Zeros()));
  r = PlanAutoParallel(no_loss, Options(2));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("no loss"), std::string::npos);
}

}  // namespace
}  // namespace sinkrt::host
