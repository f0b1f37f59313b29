// Graph files: binary and JSON round trips, the examples against the model
// zoo, load options, files on disk, and one clear error per malformed file.
#include "sinkrt/host/graph_file.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "sinkrt/fb/graph_generated.h"
#include "sinkrt/fb/task_stream_generated.h"
#include "sinkrt/host/compiler.h"
#include "sinkrt/host/model_zoo.h"
#include "support/text.h"

namespace sinkrt::host {
namespace {

namespace fs = std::filesystem;

// What Model::Create appends (AppendLoss in host/src/model/model.cc): a
// "label" input after the network and cross-entropy on outputs()[0].
Graph WithLoss(Graph g) {
  const TensorId logits = g.outputs().front();
  const TensorId label = g.Input("label", {g.tensor(logits).shape[0]}, DType::I32);
  g.SetLoss(g.SparseSoftmaxCrossEntropy(logits, label));
  return g;
}

Graph ZooMlp() { return WithLoss(MakeMlpNetwork(64)); }
Graph ZooLeNet() { return WithLoss(MakeLeNetNetwork(64)); }

// Every forward op the builder offers, every initialiser kind, explicit
// attributes and an Inline const.
Graph AllOps() {
  Graph g("all_ops");
  const TensorId x = g.Input("x", {4, 1, 8, 8});
  const TensorId label = g.Input("label", {4}, DType::I32);
  const TensorId cw = g.Param("conv.w", {2, 1, 3, 3}, InitSpec::XavierUniform(3));
  const TensorId cb = g.Param("conv.b", {2}, InitSpec::Constant(0.125f));
  OpAttrs conv;
  conv.pad_top = conv.pad_bottom = 1;
  conv.pad_left = conv.pad_right = 2;
  conv.dilation_h = conv.dilation_w = 2;
  TensorId c = g.Gelu(g.BiasAdd(g.Conv2D(x, cw, conv), cb));       // [4,2,6,8]
  const TensorId m = g.Flatten(g.MaxPool2D(c, 2, 2));              // [4,24]
  const TensorId a = g.Reshape(g.AvgPool2D(c, 2, 2, 1), {4, -1});  // [4,40]
  InitSpec he = InitSpec::HeNormal(5);
  he.fan_in = 7;
  he.fan_out = 3;
  const TensorId w1 = g.Param("w1", {24, 5}, he);
  const TensorId w2 = g.Param("w2", {5, 40}, InitSpec::Uniform(-0.5f, 0.25f, 6));
  const TensorId w3 = g.Param("w3", {5}, InitSpec::Normal(0.5f, 0.75f, 7));
  const TensorId k = g.Const("k", {5}, InitSpec::Inline({1.0f, -2.0f, 0.5f, 3.25f, -0.125f}));
  const TensorId z = g.Const("z", {1}, InitSpec::XavierNormal(8));
  const TensorId u = g.Const("u", {}, InitSpec::HeUniform(9));
  TensorId s = g.Add(g.MatMul(m, w1), g.MatMul(a, w2, false, true));  // [4,5]
  s = g.Mul(g.Sub(s, k), g.Tanh(g.Add(w3, z)));
  s = g.Relu(g.Sigmoid(s));
  const TensorId sm = g.ReduceSum(g.Softmax(s, -1), {1}, true);  // [4,1]
  const TensorId lsm = g.ReduceMean(g.LogSoftmax(s, 0), {-1});   // [4]
  const TensorId logits = g.Add(s, sm);
  TensorId loss = g.SparseSoftmaxCrossEntropy(logits, label);
  loss = g.Add(g.Add(loss, g.ReduceMean(lsm)), u);
  // LayerNorm with its own epsilon, Gather by the labels, and Cast to bf16
  // and back around a Reshape.
  const TensorId emb = g.Param("emb", {6, 5}, InitSpec::Normal(0.0f, 1.0f, 10));
  const TensorId ln_gamma = g.Param("ln.gamma", {5}, InitSpec::Constant(1.0f));
  const TensorId ln_beta = g.Param("ln.beta", {5}, InitSpec::Zeros());
  TensorId t = g.LayerNorm(g.Add(s, g.Gather(emb, label)), ln_gamma, ln_beta, 1e-6f);  // [4,5]
  t = g.Cast(g.Reshape(g.Cast(t, DType::BF16), {5, 4}), DType::F32);                   // [5,4]
  loss = g.Add(loss, g.ReduceMean(t));
  // The transformer's layout ops, with every attribute away from its default.
  const TensorId t3 = g.Reshape(a, {4, 5, 8});
  const TensorId scores = g.Add(g.BatchMatMul(t3, g.Transpose(t3, {0, -1, 1})),  // [4,5,5]
                                g.BatchMatMul(t3, t3, false, true));
  const TensorId gram = g.BatchMatMul(w2, t3, true, false);  // [5,40]^T x [4,5,8] -> [4,40,8]
  const std::vector<TensorId> parts = g.Split(g.Reshape(scores, {4, 25}), -1, {20, 5});
  loss = g.Add(loss, g.ReduceMean(g.Concat({parts[1], parts[0], parts[1]}, 1)));
  loss = g.Add(loss, g.ReduceMean(gram));
  // The unary math ops (format 1.2).
  const TensorId um = g.Abs(g.Square(g.Rsqrt(g.Sqrt(g.Exp(g.Log(g.Sigmoid(s)))))));
  loss = g.Add(loss, g.ReduceMean(um));
  // The binary math ops, Erf and exact GELU (format 1.3).
  const TensorId bm = g.Pow(g.Maximum(g.Minimum(g.Div(um, g.Exp(s)), um), g.Erf(s)), g.Gelu(s, false));
  loss = g.Add(loss, g.ReduceMean(bm));
  // Dropout (format 1.3): p, seed and op id travel.
  loss = g.Add(loss, g.ReduceMean(g.Dropout(um, 0.25f, 77)));
  // BatchNorm with State moving statistics, its own eps and momentum, sync
  // (format 1.3), over the NCHW pooling and a [N, C] tensor.
  const TensorId bn2 = host::BatchNorm2d(g, "bn2", c, {.eps = 1e-3f, .momentum = 0.8f, .sync = true});
  const TensorId bn1 = host::BatchNorm1d(g, "bn1", s);
  loss = g.Add(loss, g.Add(g.ReduceMean(bn2), g.ReduceMean(bn1)));
  // ReduceMax, Select (f32 cond) and CausalMask (format 1.3).
  const TensorId sq = g.Reshape(s, {-1, 1});
  const TensorId sel = g.Select(g.Const("cond", {1}, InitSpec::Inline({1.0f})),
                                g.CausalMask(g.Mul(sq, g.Reshape(s, {1, -1})), -1e4f), sq);
  loss = g.Add(loss, g.ReduceMean(g.ReduceMax(sel, {1}, true)));
  // OneHot on a middle axis with its own values, and Pad in every mode (format 1.3).
  const TensorId hot = g.OneHot(g.Reshape(label, {2, 2}), 5, 0.75f, -0.5f, 1);  // [2,5,2]
  const TensorId hs = g.Mul(g.Reshape(hot, {4, 5}), s);
  const TensorId pc = g.Pad(hs, {{1, 0}, {2, 3}}, host::PadMode::Constant, -1.5f);  // [5,10]
  const TensorId pr = g.Pad(pc, {{2, 1}, {0, 0}}, host::PadMode::Reflect);          // [8,10]
  const TensorId ps = g.Pad(pr, {{0, 8}, {1, 0}}, host::PadMode::Symmetric);        // [16,11]
  loss = g.Add(loss, g.ReduceMean(ps));
  g.SetLoss(loss);
  g.AddOutput(logits);
  g.AddOutput(g.ArgMaxAccuracy(logits, label));
  return g;
}

std::span<const uint8_t> Bytes(const std::string& s) { return {reinterpret_cast<const uint8_t*>(s.data()), s.size()}; }

std::string Examples() { return (fs::path(SINKRT_SOURCE_DIR) / "examples").string(); }

std::vector<uint8_t> MustSerialize(const Graph& g, const std::optional<OptimizerSpec>& opt = {}) {
  auto bytes = SerializeGraph(g, opt);
  EXPECT_TRUE(bytes.ok()) << bytes.status().message();
  return bytes.ok() ? *bytes : std::vector<uint8_t>{};
}

// Graph -> bytes -> Graph gives the same graph and the same bytes; its JSON
// spelling reads back to the same bytes and prints the same text again.
void ExpectRoundTrip(const Graph& g, const std::optional<OptimizerSpec>& opt) {
  ASSERT_TRUE(g.status().ok()) << g.status().message();
  const std::vector<uint8_t> bytes = MustSerialize(g, opt);
  auto file = ParseGraph(bytes, "mem");
  ASSERT_TRUE(file.ok()) << file.status().message();
  EXPECT_EQ(GraphHash(file->graph), GraphHash(g));
  EXPECT_EQ(MustSerialize(file->graph, file->optimizer), bytes);
  ASSERT_EQ(file->optimizer.has_value(), opt.has_value());

  auto text = GraphToJson(bytes, "mem");
  ASSERT_TRUE(text.ok()) << text.status().message();
  auto from_json = ParseGraph(Bytes(*text), "mem.json");
  ASSERT_TRUE(from_json.ok()) << from_json.status().message();
  EXPECT_EQ(GraphHash(from_json->graph), GraphHash(g));
  const std::vector<uint8_t> again = MustSerialize(from_json->graph, from_json->optimizer);
  EXPECT_EQ(again, bytes);
  auto text2 = GraphToJson(again, "mem");
  ASSERT_TRUE(text2.ok()) << text2.status().message();
  EXPECT_EQ(*text2, *text);
}

TEST(GraphFileTest, MlpRoundTrips) { ExpectRoundTrip(ZooMlp(), OptimizerSpec::Momentum(0.01f, 0.9f)); }
TEST(GraphFileTest, LeNetRoundTrips) { ExpectRoundTrip(ZooLeNet(), OptimizerSpec::Adam(0.001f)); }
TEST(GraphFileTest, EveryOpRoundTrips) { ExpectRoundTrip(AllOps(), std::nullopt); }

// Format 1.3: the optimizer's learning-rate schedule travels whole, binary
// and JSON (docs/guide/lr_schedules.md).
TEST(GraphFileTest, LearningRateSchedulesRoundTrip) {
  using host::LrSchedule;
  for (const LrSchedule& s :
       {LrSchedule::WarmupCosine(1e-3, 1e-5, 500, 9500), LrSchedule::PolynomialDecay(0.1, 0.001, 300, 0.5, true),
        LrSchedule::NaturalExpDecay(0.1, 0.003, 100, true), LrSchedule::Table({0.1, 0.05, 0.01})}) {
    OptimizerSpec opt = OptimizerSpec::Adam(0.001f);
    opt.schedule = s;
    ExpectRoundTrip(ZooMlp(), opt);
    auto file = ParseGraph(MustSerialize(ZooMlp(), opt), "mem");
    ASSERT_TRUE(file.ok() && file->optimizer) << file.status().message();
    const LrSchedule& got = file->optimizer->schedule;
    EXPECT_EQ(got.kind, s.kind);
    EXPECT_EQ(got.learning_rate, s.learning_rate);
    EXPECT_EQ(got.end_learning_rate, s.end_learning_rate);
    EXPECT_EQ(got.decay_rate, s.decay_rate);
    EXPECT_EQ(got.decay_steps, s.decay_steps);
    EXPECT_EQ(got.warmup_steps, s.warmup_steps);
    EXPECT_EQ(got.power, s.power);
    EXPECT_EQ(got.is_stair, s.is_stair);
    EXPECT_EQ(got.update_decay_steps, s.update_decay_steps);
    EXPECT_EQ(got.values, s.values);
  }
}
TEST(GraphFileTest, EveryForwardOpIsInTheEveryOpGraph) {
  std::set<OpCode> used;
  const Graph g = AllOps();  // not AllOps().ops(): the temporary would die before the loop
  for (const OpNode& op : g.ops()) used.insert(op.op);
  for (OpCode op :
       {OpCode::LayerNorm, OpCode::Gather,     OpCode::Cast,    OpCode::Exp,     OpCode::Log,       OpCode::Sqrt,
        OpCode::Rsqrt,     OpCode::Square,     OpCode::Abs,     OpCode::Div,     OpCode::Maximum,   OpCode::Minimum,
        OpCode::Pow,       OpCode::Erf,        OpCode::GeluErf, OpCode::Dropout, OpCode::BatchNorm, OpCode::ReduceMax,
        OpCode::Select,    OpCode::CausalMask, OpCode::OneHot,  OpCode::Pad})
    EXPECT_TRUE(used.count(op)) << OpCodeName(op);
}
TEST(GraphFileTest, OneHotAndPadKeepTheirOptions) {
  auto file = ParseGraph(MustSerialize(AllOps()), "mem");
  ASSERT_TRUE(file.ok()) << file.status().message();
  std::vector<host::OpAttrs> pads;
  bool one_hot = false;
  for (const OpNode& op : file->graph.ops()) {
    if (op.op == OpCode::Pad) pads.push_back(op.attrs);
    if (op.op != OpCode::OneHot) continue;
    one_hot = true;
    EXPECT_EQ(op.attrs.depth, 5);
    EXPECT_EQ(op.attrs.one_hot_axis, 1);
    EXPECT_EQ(op.attrs.on_value, 0.75f);
    EXPECT_EQ(op.attrs.off_value, -0.5f);
  }
  EXPECT_TRUE(one_hot);
  ASSERT_EQ(pads.size(), 3u);
  EXPECT_EQ(pads[0].paddings, (std::vector<int64_t>{1, 0, 2, 3}));
  EXPECT_EQ(pads[0].pad_mode, host::PadMode::Constant);
  EXPECT_EQ(pads[0].value, -1.5f);
  EXPECT_EQ(pads[1].pad_mode, host::PadMode::Reflect);
  EXPECT_EQ(pads[2].paddings, (std::vector<int64_t>{0, 8, 1, 0}));
  EXPECT_EQ(pads[2].pad_mode, host::PadMode::Symmetric);
}
TEST(GraphFileTest, BatchNormKeepsItsStateTensorsAndOptions) {
  auto file = ParseGraph(MustSerialize(AllOps()), "mem");
  ASSERT_TRUE(file.ok()) << file.status().message();
  const Graph& g = file->graph;
  for (const char* name : {"bn2.moving_mean", "bn2.moving_variance", "bn1.moving_mean"})
    EXPECT_EQ(g.tensor(g.FindTensor(name)).kind, TensorKind::State) << name;
  EXPECT_EQ(g.tensor(g.FindTensor("bn2.moving_variance")).init.kind, InitKind::Constant);
  EXPECT_EQ(g.tensor(g.FindTensor("bn2.gamma")).kind, TensorKind::Param);
  ASSERT_GE(g.FindOp("bn2.batchnorm"), 0);
  const OpNode& bn2 = g.ops()[static_cast<size_t>(g.FindOp("bn2.batchnorm"))];
  EXPECT_EQ(bn2.op, OpCode::BatchNorm);
  EXPECT_FLOAT_EQ(bn2.attrs.layer_norm_epsilon, 1e-3f);
  EXPECT_FLOAT_EQ(bn2.attrs.bn_momentum, 0.8f);
  EXPECT_TRUE(bn2.attrs.bn_sync);
}
TEST(GraphFileTest, SgdRoundTrips) { ExpectRoundTrip(ZooMlp(), OptimizerSpec::Sgd(0.5f)); }

// Format 1.3: AdamWeightDecay and Lamb, and group parameters, read back
// whole from the binary and from its JSON spelling.
TEST(GraphFileTest, AdamWeightDecayLambAndGroupsRoundTrip) {
  OptimizerSpec adamw = OptimizerSpec::AdamWeightDecay(0.001f, 0.05f);
  SetNoDecay(adamw, {"bias", "gamma"});
  OptimizerSpec lamb = OptimizerSpec::Lamb(0.002f, 0.01f, 0.8f, 0.99f, 1e-5f);
  lamb.groups = {ParamGroup{.names = {"fc1"}, .weight_decay = 0.5f, .learning_rate = 0.25f}};
  for (const OptimizerSpec& opt : {adamw, lamb, OptimizerSpec::Lamb(0.5f)}) {
    ExpectRoundTrip(ZooMlp(), opt);
    const std::vector<uint8_t> bytes = MustSerialize(ZooMlp(), opt);
    auto file = ParseGraph(bytes, "mem");
    ASSERT_TRUE(file.ok()) << file.status().message();
    ASSERT_TRUE(file->optimizer.has_value());
    EXPECT_EQ(*file->optimizer, opt);
    auto text = GraphToJson(bytes, "mem");
    ASSERT_TRUE(text.ok()) << text.status().message();
    auto from_json = ParseGraph(Bytes(*text), "mem.json");
    ASSERT_TRUE(from_json.ok()) << from_json.status().message();
    EXPECT_EQ(*from_json->optimizer, opt);
  }
}

TEST(GraphFileTest, SerializeIsDeterministic) {
  EXPECT_EQ(MustSerialize(AllOps()), MustSerialize(AllOps()));
  const std::vector<uint8_t> bytes = MustSerialize(ZooMlp());
  ASSERT_GE(bytes.size(), 8u);
  EXPECT_EQ(std::string(bytes.begin() + 4, bytes.begin() + 8), "SKGR");
}

TEST(GraphFileTest, InlineConstKeepsItsBytes) {
  const Graph g = AllOps();
  auto file = ParseGraph(MustSerialize(g), "mem");
  ASSERT_TRUE(file.ok()) << file.status().message();
  const TensorInfo& k = file->graph.tensor(file->graph.FindTensor("k"));
  EXPECT_EQ(k.init.kind, InitKind::Inline);
  EXPECT_EQ(k.init.data, g.tensor(g.FindTensor("k")).init.data);
  const TensorInfo& w1 = file->graph.tensor(file->graph.FindTensor("w1"));
  EXPECT_EQ(w1.init.fan_in, 7);
  EXPECT_EQ(w1.init.fan_out, 3);
  EXPECT_EQ(w1.init.seed, 5u);
}

// -- examples ------------------------------------------------------------------

TEST(GraphFileTest, MlpExampleIsTheZooMlp) {
  auto file = LoadGraph(Examples() + "/mlp.json");
  ASSERT_TRUE(file.ok()) << file.status().message();
  EXPECT_EQ(GraphHash(file->graph), GraphHash(ZooMlp()));
  ASSERT_TRUE(file->optimizer.has_value());
  EXPECT_EQ(file->optimizer->kind, OptimizerKind::Momentum);
  EXPECT_EQ(file->optimizer->learning_rate, 0.01f);
  EXPECT_EQ(file->optimizer->momentum, 0.9f);
  EXPECT_FALSE(file->optimizer->nesterov);
}

TEST(GraphFileTest, LeNetExampleIsTheZooLeNet) {
  auto file = LoadGraph(Examples() + "/lenet.json");
  ASSERT_TRUE(file.ok()) << file.status().message();
  EXPECT_EQ(GraphHash(file->graph), GraphHash(ZooLeNet()));
  ASSERT_TRUE(file->optimizer.has_value());
  EXPECT_EQ(file->optimizer->kind, OptimizerKind::Momentum);
}

// -- load options --------------------------------------------------------------

TEST(GraphFileTest, BatchOptionSetsEveryInputAndReinfers) {
  GraphLoadOptions o;
  o.batch = 8;
  auto file = LoadGraph(Examples() + "/lenet.json", o);
  ASSERT_TRUE(file.ok()) << file.status().message();
  EXPECT_EQ(GraphHash(file->graph), GraphHash(WithLoss(MakeLeNetNetwork(8))));
  auto mlp = LoadGraph(Examples() + "/mlp.json", o);
  ASSERT_TRUE(mlp.ok()) << mlp.status().message();
  EXPECT_EQ(GraphHash(mlp->graph), GraphHash(WithLoss(MakeMlpNetwork(8))));
}

TEST(GraphFileTest, BatchOptionMeetsAFixedReshape) {
  Graph g("reshaped");
  const TensorId x = g.Input("x", {2, 3, 4});
  const TensorId label = g.Input("label", {2}, DType::I32);
  const TensorId w = g.Param("w", {12, 3}, InitSpec::Zeros());
  const TensorId logits = g.MatMul(g.Reshape(x, {2, 12}), w);
  g.SetLoss(g.SparseSoftmaxCrossEntropy(logits, label));
  GraphLoadOptions o;
  o.batch = 5;
  auto file = ParseGraph(MustSerialize(g), "r.sgraph", o);
  ASSERT_FALSE(file.ok());
  const std::string& m = file.status().message();
  EXPECT_NE(m.find("r.sgraph: op 'reshape_"), std::string::npos) << m;
  EXPECT_NE(m.find("Reshape: cannot reshape x [5,3,4] (60 elements) into [2,12]"), std::string::npos) << m;
  EXPECT_NE(m.find("use -1 for the batch dimension"), std::string::npos) << m;
}

TEST(GraphFileTest, SeedOffsetMovesRandomInitialisersOnly) {
  GraphLoadOptions o;
  o.seed_offset = 100;
  auto file = ParseGraph(MustSerialize(AllOps()), "mem", o);
  ASSERT_TRUE(file.ok()) << file.status().message();
  const Graph& g = file->graph;
  EXPECT_EQ(g.tensor(g.FindTensor("conv.w")).init.seed, 103u);  // XavierUniform
  EXPECT_EQ(g.tensor(g.FindTensor("w1")).init.seed, 105u);      // HeNormal
  EXPECT_EQ(g.tensor(g.FindTensor("w2")).init.seed, 106u);      // Uniform
  EXPECT_EQ(g.tensor(g.FindTensor("w3")).init.seed, 107u);      // Normal
  EXPECT_EQ(g.tensor(g.FindTensor("z")).init.seed, 108u);       // XavierNormal
  EXPECT_EQ(g.tensor(g.FindTensor("u")).init.seed, 109u);       // HeUniform
  EXPECT_EQ(g.tensor(g.FindTensor("conv.b")).init.seed, 0u);    // Constant
  EXPECT_EQ(g.tensor(g.FindTensor("k")).init.seed, 0u);         // Inline
}

// -- files ---------------------------------------------------------------------

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name) : path(fs::path(::testing::TempDir()) / ("graph_file_" + name)) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

TEST(GraphFileTest, SaveAndLoadBinaryAndJson) {
  TempDir dir("save");
  const Graph g = ZooLeNet();
  const auto opt = OptimizerSpec::Momentum(0.01f, 0.9f);
  for (const char* name : {"lenet.sgraph", "lenet.json"}) {
    const std::string path = (dir.path / name).string();
    ASSERT_TRUE(SaveGraph(path, g, opt).ok()) << name;
    auto file = LoadGraph(path);
    ASSERT_TRUE(file.ok()) << file.status().message();
    EXPECT_EQ(GraphHash(file->graph), GraphHash(g)) << name;
    EXPECT_FALSE(fs::exists(path + ".tmp")) << name;
  }
  EXPECT_EQ(testing::Slurp(dir.path / "lenet.sgraph").substr(4, 4), "SKGR");
  EXPECT_EQ(testing::Slurp(dir.path / "lenet.json").front(), '{');
  // The saved JSON is GraphToJson of the saved binary.
  const std::string binary = testing::Slurp(dir.path / "lenet.sgraph");
  auto text = GraphToJson(Bytes(binary));
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(testing::Slurp(dir.path / "lenet.json"), *text);
}

TEST(GraphFileTest, MissingFileNamesThePath) {
  TempDir dir("missing");
  const std::string path = (dir.path / "nope.json").string();
  auto file = LoadGraph(path);
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), StatusCode::kNotFound);
  EXPECT_NE(file.status().message().find(path), std::string::npos) << file.status().message();
}

TEST(GraphFileTest, SerializeRefusesWhatIsNotAForwardTrainingGraph) {
  Graph no_loss = MakeMlpNetwork(4);
  auto r = SerializeGraph(no_loss);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("graph 'mlp' has no loss"), std::string::npos) << r.status().message();

  Graph bad = ZooMlp();
  bad.MatMul(bad.FindTensor("image"), bad.FindTensor("image"));
  r = SerializeGraph(bad);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("inner dimensions differ"), std::string::npos) << r.status().message();

  Graph grad = ZooMlp();
  TensorInfo t;
  t.name = "fc1.weight/grad";
  t.shape = {784, 512};
  t.kind = TensorKind::Grad;
  grad.AddTensor(t);
  r = SerializeGraph(grad);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'fc1.weight/grad' is a Grad tensor"), std::string::npos) << r.status().message();
}

// -- hand-written JSON ---------------------------------------------------------

// Intermediate shapes left out, ops out of order.
const char kTiny[] = R"({
  "format_major": 1,
  "name": "tiny",
  "tensors": [
    {"name": "x", "kind": "Input", "shape": [2, 3]},
    {"name": "label", "kind": "Input", "dtype": "I32", "shape": [2]},
    {"name": "w", "kind": "Param", "shape": [3, 4], "init": {"kind": "HeUniform", "seed": 1}},
    {"name": "logits"},
    {"name": "loss"}
  ],
  "ops": [
    {"name": "xent", "op": "SparseSoftmaxCrossEntropy", "inputs": [3, 1], "outputs": [4]},
    {"name": "fc", "op": "MatMul", "inputs": [0, 2], "outputs": [3]}
  ],
  "loss": 4,
  "outputs": [3],
  "optimizer": {"kind": "SGD", "learning_rate": 0.5}
})";

std::string Edit(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << "'" << from << "' is not in the text";
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

TEST(GraphFileTest, HandWrittenJsonLoadsInTopologicalOrder) {
  auto file = ParseGraph(Bytes(kTiny), "tiny.json");
  ASSERT_TRUE(file.ok()) << file.status().message();
  Graph g("tiny");
  const TensorId x = g.Input("x", {2, 3});
  const TensorId label = g.Input("label", {2}, DType::I32);
  const TensorId w = g.Param("w", {3, 4}, InitSpec::HeUniform(1));
  TensorInfo logits{"logits", DType::F32, {2, 4}, TensorKind::Intermediate, {}};
  logits.init.kind = InitKind::None;
  TensorInfo loss{"loss", DType::F32, {}, TensorKind::Intermediate, {}};
  loss.init.kind = InitKind::None;
  g.AddTensor(logits);
  g.AddTensor(loss);
  g.AddOpInto(OpCode::MatMul, {x, w}, OpAttrs{}, {3}, "fc");
  g.AddOpInto(OpCode::SparseSoftmaxCrossEntropy, {3, label}, OpAttrs{}, {4}, "xent");
  g.SetLoss(4);
  g.AddOutput(3);
  ASSERT_TRUE(g.status().ok()) << g.status().message();
  EXPECT_EQ(GraphHash(file->graph), GraphHash(g));
  ASSERT_TRUE(file->optimizer.has_value());
  EXPECT_EQ(file->optimizer->kind, OptimizerKind::SGD);
  EXPECT_EQ(file->optimizer->learning_rate, 0.5f);
}

// One error, naming the file, the culprit and what is wrong.
void ExpectError(const Result<GraphFile>& r, std::initializer_list<std::string> parts) {
  ASSERT_FALSE(r.ok()) << "loaded, expected an error with '" << *parts.begin() << "'";
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  const std::string& m = r.status().message();
  for (const std::string& p : parts) EXPECT_NE(m.find(p), std::string::npos) << "'" << p << "' not in: " << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
}

Result<GraphFile> ParseTiny(const std::string& text) { return ParseGraph(Bytes(text), "bad.json"); }

TEST(GraphFileErrorTest, UnknownOpInJsonCarriesTheLine) {
  ExpectError(ParseTiny(Edit(kTiny, "\"MatMul\"", "\"MatMool\"")), {"bad.json:13:", "MatMool"});
}

TEST(GraphFileErrorTest, UnknownOpCodeInBinary) {
  std::vector<uint8_t> bytes = MustSerialize(ZooMlp());
  ASSERT_TRUE(fb::GetMutableGraph(bytes.data())->mutable_ops()->GetMutableObject(0)->mutate_op(fb::OpCode(999)));
  ExpectError(ParseGraph(bytes, "bad.sgraph"),
              {"bad.sgraph: op 'matmul_", "(ops[0])", "field 'op': unknown op code 999"});
}

TEST(GraphFileErrorTest, NotAForwardOp) {
  ExpectError(ParseTiny(Edit(kTiny, "\"MatMul\"", "\"ReluGrad\"")),
              {"bad.json: op 'fc' (ops[1]): field 'op': ReluGrad is not a forward op"});
}

TEST(GraphFileErrorTest, InputIndexOutOfRange) {
  ExpectError(ParseTiny(Edit(kTiny, "\"inputs\": [0, 2]", "\"inputs\": [0, 17]")),
              {"bad.json: op 'fc' (ops[1]): input 1 is tensor 17, but the file has 5 tensors"});
}

TEST(GraphFileErrorTest, OutputIndexOutOfRange) {
  ExpectError(ParseTiny(Edit(kTiny, "\"outputs\": [3]}", "\"outputs\": [9]}")),
              {"bad.json: op 'fc' (ops[1]): output 0 is tensor 9, but the file has 5 tensors"});
}

TEST(GraphFileErrorTest, IntermediateNoOpWrites) {
  ExpectError(ParseTiny(Edit(kTiny, "{\"name\": \"loss\"}", "{\"name\": \"loss\"}, {\"name\": \"orphan\"}")),
              {"bad.json: tensor 'orphan' (tensors[5]): an Intermediate that no op writes"});
}

TEST(GraphFileErrorTest, TensorWrittenByTwoOps) {
  ExpectError(ParseTiny(Edit(kTiny, "\"outputs\": [4]}", "\"outputs\": [3]}")),
              {"bad.json: op 'fc' (ops[1]): output 0 is tensor 'logits' (tensors[3]), already written by op 'xent' "
               "(ops[0])"});
}

TEST(GraphFileErrorTest, OpWritesALeaf) {
  ExpectError(ParseTiny(Edit(kTiny, "\"outputs\": [3]}", "\"outputs\": [2]}")),
              {"bad.json: op 'fc' (ops[1]): output 0 is Param tensor 'w' (tensors[2]), which no op may write"});
}

TEST(GraphFileErrorTest, ShapeMismatchNamesBothShapes) {
  ExpectError(ParseTiny(Edit(kTiny, "{\"name\": \"logits\"}", "{\"name\": \"logits\", \"shape\": [2, 5]}")),
              {"bad.json: op 'fc' (ops[1]): output 0 tensor 'logits' (tensors[3]) has shape [2,5] in the file, but "
               "the op gives [2,4]"});
}

TEST(GraphFileErrorTest, DtypeMismatch) {
  ExpectError(ParseTiny(Edit(kTiny, "{\"name\": \"logits\"}", "{\"name\": \"logits\", \"dtype\": \"I32\"}")),
              {"bad.json: op 'fc' (ops[1]): output 0 tensor 'logits' (tensors[3]) is i32 in the file"});
}

TEST(GraphFileErrorTest, BuilderRejectsTheShapes) {
  ExpectError(ParseTiny(Edit(kTiny, "\"shape\": [3, 4]", "\"shape\": [5, 4]")),
              {"bad.json: op 'fc' (ops[1]): MatMul: inner dimensions differ"});
}

TEST(GraphFileErrorTest, CycleNamesItsOps) {
  std::string text = Edit(kTiny, "{\"name\": \"loss\"}", "{\"name\": \"loss\"}, {\"name\": \"a\"}, {\"name\": \"b\"}");
  text = Edit(text, "\"outputs\": [3]}\n", R"("outputs": [3]},
    {"name": "r1", "op": "Relu", "inputs": [6], "outputs": [5]},
    {"name": "r2", "op": "Relu", "inputs": [5], "outputs": [6]}
)");
  ExpectError(ParseTiny(text), {"bad.json: the ops form a cycle: op 'r1' (ops[2]) -> op 'r2' (ops[3]) -> op 'r1' "
                                "(ops[2])"});
}

TEST(GraphFileErrorTest, SelfLoop) {
  ExpectError(ParseTiny(Edit(kTiny, "\"inputs\": [3, 1], \"outputs\": [4]", "\"inputs\": [4, 1], \"outputs\": [4]")),
              {"bad.json: the ops form a cycle: op 'xent' (ops[0]) -> op 'xent' (ops[0])"});
}

TEST(GraphFileErrorTest, MissingLoss) {
  ExpectError(ParseTiny(Edit(kTiny, "\"loss\": 4,", "")),
              {"bad.json: field 'loss' is -1: a graph file is a training graph"});
  ExpectError(ParseTiny(Edit(kTiny, "\"loss\": 4,", "\"loss\": 12,")),
              {"bad.json: field 'loss' is tensor 12, but the file has 5 tensors"});
  ExpectError(ParseTiny(Edit(kTiny, "\"loss\": 4,", "\"loss\": 3,")),
              {"bad.json: field 'loss': SetLoss: loss must be an f32 scalar (shape []), got f32 [2,4] 'logits'"});
}

TEST(GraphFileErrorTest, WrongOptionsType) {
  ExpectError(ParseTiny(Edit(kTiny, "\"op\": \"MatMul\",",
                             "\"op\": \"MatMul\", \"options_type\": \"Pool2DOptions\", "
                             "\"options\": {},")),
              {"bad.json: op 'fc' (ops[1]): field 'options': MatMul takes MatMulOptions, got Pool2DOptions"});
}

TEST(GraphFileErrorTest, OptionsOnAnOpWithout) {
  ExpectError(ParseTiny(Edit(kTiny, "\"op\": \"SparseSoftmaxCrossEntropy\",",
                             "\"op\": \"SparseSoftmaxCrossEntropy\", \"options_type\": \"AxisOptions\", "
                             "\"options\": {},")),
              {"bad.json: op 'xent' (ops[0]): field 'options': SparseSoftmaxCrossEntropy takes no options, got "
               "AxisOptions"});
}

// x [2,3,4] -transpose-> [2,4,3] -split-> [2,4,1] + [2,4,2] -concat-> [2,4,3] -sum-> loss.
const char kLayout[] = R"({
  "format_major": 1,
  "tensors": [
    {"name": "x", "kind": "Param", "shape": [2, 3, 4], "init": {"kind": "Zeros"}},
    {"name": "t"}, {"name": "s0"}, {"name": "s1"}, {"name": "c"}, {"name": "loss"}
  ],
  "ops": [
    {"name": "tr", "op": "Transpose", "inputs": [0], "outputs": [1],
     "options_type": "TransposeOptions", "options": {"perm": [0, 2, 1]}},
    {"name": "sp", "op": "Split", "inputs": [1], "outputs": [2, 3],
     "options_type": "SplitOptions", "options": {"axis": -1, "sizes": [1, 2]}},
    {"name": "cat", "op": "Concat", "inputs": [3, 2], "outputs": [4],
     "options_type": "AxisOptions", "options": {"axis": 2}},
    {"name": "sum", "op": "ReduceSum", "inputs": [4], "outputs": [5]}
  ],
  "loss": 5
})";

TEST(GraphFileTest, LayoutOpsLoadWithTheirOptions) {
  auto file = ParseGraph(Bytes(kLayout), "layout.json");
  ASSERT_TRUE(file.ok()) << file.status().message();
  const Graph& g = file->graph;
  EXPECT_EQ(g.tensor(1).shape, (Shape{2, 4, 3}));
  EXPECT_EQ(g.tensor(2).shape, (Shape{2, 4, 1}));
  EXPECT_EQ(g.tensor(3).shape, (Shape{2, 4, 2}));
  EXPECT_EQ(g.tensor(4).shape, (Shape{2, 4, 3}));
  EXPECT_EQ(g.ops()[0].attrs.perm, (std::vector<int>{0, 2, 1}));
  EXPECT_EQ(g.ops()[1].attrs.axis, 2);  // normalised by the builder
  EXPECT_EQ(g.ops()[1].attrs.sizes, (std::vector<int64_t>{1, 2}));
}

TEST(GraphFileErrorTest, TransposeWithAnInvalidPermutation) {
  ExpectError(ParseGraph(Bytes(Edit(kLayout, "\"perm\": [0, 2, 1]", "\"perm\": [0, 2, 2]")), "layout.json"),
              {"layout.json: op 'tr' (ops[0]): Transpose: perm [0,2,2] is not a permutation: axis 2 appears twice"});
  ExpectError(ParseGraph(Bytes(Edit(kLayout, "\"perm\": [0, 2, 1]", "\"perm\": [0, 1]")), "layout.json"),
              {"layout.json: op 'tr' (ops[0]): Transpose: perm [0,1] has 2 entries, x [2,3,4] has rank 3"});
  ExpectError(ParseGraph(Bytes(Edit(kLayout, "\"perm\": [0, 2, 1]", "\"perm\": [0, 2, 5]")), "layout.json"),
              {"layout.json: op 'tr' (ops[0]): Transpose: perm [0,2,5]: entry 2 (5) is out of range"});
}

TEST(GraphFileErrorTest, SplitAndConcatRefusals) {
  ExpectError(ParseGraph(Bytes(Edit(kLayout, "\"sizes\": [1, 2]", "\"sizes\": [1, 3]")), "layout.json"),
              {"layout.json: op 'sp' (ops[1]): Split: sizes [1,3] do not sum to 3"});
  ExpectError(ParseGraph(Bytes(Edit(kLayout, "\"sizes\": [1, 2]", "\"sizes\": [1, 1, 1]")), "layout.json"),
              {"layout.json: op 'sp' (ops[1]): Split has 3 outputs, the file lists 2"});
  ExpectError(ParseGraph(Bytes(Edit(kLayout, "\"inputs\": [3, 2]", "\"inputs\": []")), "layout.json"),
              {"layout.json: op 'cat' (ops[2]): Concat takes one or more inputs, the file lists none"});
  ExpectError(ParseGraph(Bytes(Edit(kLayout, "\"axis\": 2}", "\"axis\": 1}")), "layout.json"),
              {"layout.json: op 'cat' (ops[2]): Concat: input 1 [2,4,1] does not match input 0 [2,4,2]"});
}

// x [2,1,4,4] -conv-> [2,1,2,2] -flatten-> [2,4] -xent-> loss.
const char kConv[] = R"({
  "format_major": 1,
  "tensors": [
    {"name": "x", "kind": "Input", "shape": [2, 1, 4, 4]},
    {"name": "w", "kind": "Param", "shape": [1, 1, 3, 3], "init": {"kind": "Zeros"}},
    {"name": "y"}, {"name": "f"},
    {"name": "label", "kind": "Input", "dtype": "I32", "shape": [2]},
    {"name": "loss"}
  ],
  "ops": [
    {"name": "conv", "op": "Conv2D", "inputs": [0, 1], "outputs": [2],
     "options_type": "Conv2DOptions", "options": {"stride_h": 1}},
    {"name": "flat", "op": "Flatten", "inputs": [2], "outputs": [3]},
    {"name": "xent", "op": "SparseSoftmaxCrossEntropy", "inputs": [3, 4], "outputs": [5]}
  ],
  "loss": 5
})";

TEST(GraphFileErrorTest, AttributeTheBuilderRejects) {
  ASSERT_TRUE(ParseGraph(Bytes(kConv), "conv.json").ok());
  ExpectError(ParseGraph(Bytes(Edit(kConv, "\"stride_h\": 1", "\"stride_h\": 0")), "conv.json"),
              {"conv.json: op 'conv' (ops[0]): Conv2D: strides must be >= 1, got (0, 1)"});
}

TEST(GraphFileErrorTest, WrongOutputCount) {
  std::string text = Edit(kConv, "\"op\": \"Flatten\"", "\"op\": \"MaxPool2D\"");
  ExpectError(ParseGraph(Bytes(text), "conv.json"),
              {"conv.json: op 'flat' (ops[1]): MaxPool2D has 2 outputs, the file lists 1"});
}

TEST(GraphFileErrorTest, WrongArity) {
  ExpectError(ParseTiny(Edit(kTiny, "\"inputs\": [0, 2]", "\"inputs\": [0]")),
              {"bad.json: op 'fc' (ops[1]): MatMul takes 2 inputs, the file lists 1"});
}

// -- shard strategies ----------------------------------------------------------

std::string WithStrategy(const std::string& strategy) {
  return Edit(kTiny, "\"outputs\": [3]}", "\"outputs\": [3], \"strategy\": " + strategy + "}");
}

TEST(GraphFileTest, HandWrittenStrategyLoads) {
  auto file = ParseTiny(WithStrategy(R"([{"dims": [2, 1]}, {"dims": [1, 4]}])"));
  ASSERT_TRUE(file.ok()) << file.status().message();
  const Graph& g = file->graph;
  EXPECT_EQ(g.ops().at(g.FindOp("fc")).strategy, (std::vector<std::vector<int64_t>>{{2, 1}, {1, 4}}));
  EXPECT_TRUE(g.ops().at(g.FindOp("xent")).strategy.empty());
  // An empty list is no strategy.
  auto none = ParseTiny(WithStrategy("[]"));
  ASSERT_TRUE(none.ok()) << none.status().message();
  EXPECT_EQ(GraphHash(none->graph), GraphHash(ParseTiny(kTiny)->graph));
}

// Strategies survive binary and JSON, and change the bytes and the hash
// only of the ops that have one.
TEST(GraphFileTest, StrategiesRoundTrip) {
  Graph g = AllOps();
  const Graph plain = g;
  g.Shard(g.ops().front().outputs[0], {{2, 1, 1, 1}, {1, 1, 1, 1}});  // the Conv2D
  const OpNode* matmul = nullptr;
  for (const OpNode& op : g.ops())
    if (op.op == OpCode::MatMul) matmul = &op;
  ASSERT_NE(matmul, nullptr);
  g.Shard(matmul->name, {{2, 1}, {1, 1}});
  for (const OpNode& op : g.ops())  // a scalar input's entry is empty
    if (op.op == OpCode::Add && g.tensor(op.inputs[1]).shape.empty())
      g.Shard(op.name, {std::vector<int64_t>(g.tensor(op.inputs[0]).shape.size(), 1), {}});
  ASSERT_TRUE(g.status().ok()) << g.status().message();
  ExpectRoundTrip(g, std::nullopt);
  EXPECT_NE(GraphHash(g), GraphHash(plain));
  EXPECT_NE(MustSerialize(g), MustSerialize(plain));

  auto text = GraphToJson(MustSerialize(g), "mem");
  ASSERT_TRUE(text.ok()) << text.status().message();
  EXPECT_NE(text->find(R"("dims": [2, 1, 1, 1])"), std::string::npos) << *text;
  auto back = ParseGraph(Bytes(*text), "mem.json");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->graph.ops().at(back->graph.FindOp(matmul->name)).strategy,
            (std::vector<std::vector<int64_t>>{{2, 1}, {1, 1}}));
}

TEST(GraphFileErrorTest, StrategyOfTheWrongSize) {
  ExpectError(ParseTiny(WithStrategy(R"([{"dims": [2, 1]}])")),
              {"bad.json: op 'fc' (ops[1]): field 'strategy': fc: The strategy is ((2, 1),), strategy size: 1 is not "
               "equal to inputs size: 2"});
}

TEST(GraphFileErrorTest, StrategyEntryOfTheWrongLength) {
  ExpectError(ParseTiny(WithStrategy(R"([{"dims": [2, 1]}, {"dims": [4]}])")),
              {"bad.json: op 'fc' (ops[1]): field 'strategy': fc: The strategy is ((2, 1), (4,)), strategy len: 1 is "
               "not equal to inputs len: 2, index: 1"});
  ExpectError(ParseTiny(WithStrategy(R"([{"dims": [2, 1]}, {}])")),
              {"field 'strategy': fc: The strategy is ((2, 1), ()), strategy len: 0 is not equal to inputs len: 2, "
               "index: 1"});
}

TEST(GraphFileErrorTest, StrategyValueBelowOne) {
  ExpectError(ParseTiny(WithStrategy(R"([{"dims": [2, 1]}, {"dims": [1, 0]}])")),
              {"bad.json: op 'fc' (ops[1]): field 'strategy': fc: The strategy is ((2, 1), (1, 0)), the value of "
               "strategy must be larger than 0, but get 0"});
}

// An op without a name is named by its index in the message.
TEST(GraphFileErrorTest, StrategyOfAnUnnamedOp) {
  std::string text = Edit(kTiny, "{\"name\": \"fc\", ", "{");
  text = Edit(text, "\"outputs\": [3]}", "\"outputs\": [3], \"strategy\": [{\"dims\": [-1, 1]}, {\"dims\": [1, 1]}]}");
  ExpectError(ParseTiny(text), {"bad.json: op ops[1]: field 'strategy': ops[1]: The strategy is ((-1, 1), (1, 1)), the "
                                "value of strategy must be larger than 0, but get -1"});
}

// x [2,4] -layernorm-> [2,4], ids [2] -gather-> [2,4], sum -> loss.
const char kNormGather[] = R"({
  "format_major": 1,
  "tensors": [
    {"name": "x", "kind": "Input", "shape": [2, 4]},
    {"name": "gamma", "kind": "Param", "shape": [4], "init": {"kind": "Constant", "value": 1}},
    {"name": "beta", "kind": "Param", "shape": [4], "init": {"kind": "Zeros"}},
    {"name": "y"}, {"name": "mean"}, {"name": "rstd"},
    {"name": "table", "kind": "Param", "shape": [10, 4], "init": {"kind": "Zeros"}},
    {"name": "ids", "kind": "Input", "dtype": "I32", "shape": [2]},
    {"name": "e"}, {"name": "h", "dtype": "BF16"}, {"name": "f"}, {"name": "loss"}
  ],
  "ops": [
    {"name": "ln", "op": "LayerNorm", "inputs": [0, 1, 2], "outputs": [3, 4, 5],
     "options_type": "LayerNormOptions", "options": {"epsilon": 0.001}},
    {"name": "embed", "op": "Gather", "inputs": [6, 7], "outputs": [8]},
    {"name": "to_bf16", "op": "Cast", "inputs": [8], "outputs": [9],
     "options_type": "CastOptions", "options": {"to": "BF16"}},
    {"name": "to_f32", "op": "Cast", "inputs": [9], "outputs": [10],
     "options_type": "CastOptions", "options": {"to": "F32"}},
    {"name": "sum", "op": "ReduceSum", "inputs": [10], "outputs": [11]}
  ],
  "loss": 11
})";

TEST(GraphFileTest, LayerNormGatherAndCastLoad) {
  auto file = ParseGraph(Bytes(kNormGather), "ng.json");
  ASSERT_TRUE(file.ok()) << file.status().message();
  const Graph& g = file->graph;
  const OpNode& ln = g.ops().at(static_cast<size_t>(g.producer(g.FindTensor("y"))));
  EXPECT_EQ(ln.attrs.layer_norm_epsilon, 0.001f);
  EXPECT_EQ(g.tensor(g.FindTensor("mean")).shape, (Shape{2}));
  EXPECT_EQ(g.tensor(g.FindTensor("e")).shape, (Shape{2, 4}));
  EXPECT_EQ(g.tensor(g.FindTensor("h")).dtype, DType::BF16);
  EXPECT_EQ(g.tensor(g.FindTensor("f")).dtype, DType::F32);
  // The graph compiles: bf16 buffers get planned like any other.
  CompileOptions options;
  options.optimizer = OptimizerSpec::Sgd(0.1f);
  auto compiled = Compile(g, options);
  ASSERT_TRUE(compiled.ok()) << compiled.status().message();
  const int64_t h = compiled->stream.FindBuffer("h");
  ASSERT_GE(h, 0);
  const fb::Buffer* b = compiled->stream.root()->buffers()->Get(static_cast<uint32_t>(h));
  EXPECT_EQ(b->dtype(), fb::DType::BF16);
  EXPECT_EQ(b->bytes(), 2u * 2 * 4);
  EXPECT_EQ(b->offset() % 64, 0u);
}

TEST(GraphFileErrorTest, LayerNormOverAMismatchedGammaNamesTheOpAndField) {
  ExpectError(ParseGraph(Bytes(Edit(kNormGather, "\"shape\": [4], \"init\": {\"kind\": \"Constant\"",
                                    "\"shape\": [3], \"init\": {\"kind\": \"Constant\"")),
                         "ng.json"),
              {"ng.json: op 'ln' (ops[0]): LayerNorm: gamma must be [D] = [4] for x [2,4] (normalised over its "
               "last axis), got [3]"});
}

TEST(GraphFileErrorTest, GatherWithAFloatIndexTensorNamesTheOpAndField) {
  ExpectError(ParseGraph(Bytes(Edit(kNormGather, "\"name\": \"ids\", \"kind\": \"Input\", \"dtype\": \"I32\"",
                                    "\"name\": \"ids\", \"kind\": \"Input\"")),
                         "ng.json"),
              {"ng.json: op 'embed' (ops[1]): Gather: indices must be i32, got f32 [2] 'ids'"});
}

TEST(GraphFileErrorTest, CastOptionsAreChecked) {
  ExpectError(ParseGraph(Bytes(Edit(kNormGather, "{\"to\": \"BF16\"}", "{\"to\": \"I32\"}")), "ng.json"),
              {"ng.json: op 'to_bf16' (ops[2]): Cast: to must be f32 or bf16, got i32"});
  ExpectError(ParseGraph(Bytes(Edit(kNormGather, "\"options_type\": \"CastOptions\", \"options\": {\"to\": \"BF16\"}",
                                    "\"options_type\": \"CastOptions\", \"options\": {}")),
                         "ng.json"),
              {"ng.json: op 'to_bf16' (ops[2]): Cast: to must be f32 or bf16, got invalid"});
  ExpectError(
      ParseGraph(Bytes(Edit(kNormGather, "{\"name\": \"f\"}", "{\"name\": \"f\", \"dtype\": \"BF16\"}")), "ng.json"),
      {"ng.json: op 'to_f32' (ops[3]): output 0 tensor 'f' (tensors[10]) is bf16 in the file, but the op gives f32"});
}

TEST(GraphFileErrorTest, LayerNormListsItsThreeOutputs) {
  std::string text = Edit(kNormGather, "\"outputs\": [3, 4, 5]", "\"outputs\": [3, 4]");
  text = Edit(text, "{\"name\": \"rstd\"}", "{\"name\": \"rstd\", \"kind\": \"Input\", \"shape\": [2]}");
  ExpectError(ParseGraph(Bytes(text), "ng.json"),
              {"ng.json: op 'ln' (ops[0]): LayerNorm has 3 outputs, the file lists 2"});
}

TEST(GraphFileErrorTest, WrongFormatMajor) {
  ExpectError(ParseTiny(Edit(kTiny, "\"format_major\": 1", "\"format_major\": 2")),
              {"bad.json: field 'format_major' is 2, this build reads graph files of format 1.x"});
  ExpectError(ParseTiny(Edit(kTiny, "\"format_major\": 1,", "")), {"field 'format_major' is 0"});
}

TEST(GraphFileErrorTest, LeafWithoutShape) {
  ExpectError(ParseTiny(Edit(kTiny, "\"kind\": \"Param\", \"shape\": [3, 4],", "\"kind\": \"Param\",")),
              {"bad.json: tensor 'w' (tensors[2]): field 'shape' is missing: a Param needs its shape"});
  ExpectError(ParseTiny(Edit(kTiny, "\"kind\": \"Input\", \"shape\": [2, 3]", "\"kind\": \"Input\"")),
              {"bad.json: tensor 'x' (tensors[0]): field 'shape' is missing"});
}

TEST(GraphFileErrorTest, LeafTheBuilderRejects) {
  ExpectError(ParseTiny(Edit(kTiny, "\"shape\": [3, 4]", "\"shape\": [3, 0]")),
              {"bad.json: tensor 'w' (tensors[2]): Param 'w': shape [3,0] must have positive dimensions"});
  ExpectError(ParseTiny(Edit(kTiny, ", \"init\": {\"kind\": \"HeUniform\", \"seed\": 1}", "")),
              {"bad.json: tensor 'w' (tensors[2]): field 'init' is missing"});
}

// A file's optimizer gets the checks sinkrun's --lr and --momentum get.
TEST(GraphFileErrorTest, OptimizerValuesTheFlagsRefuse) {
  ExpectError(ParseTiny(Edit(kTiny, "\"learning_rate\": 0.5", "\"learning_rate\": 0")),
              {"bad.json: field 'optimizer': SGD: learning_rate must be > 0, but got 0"});
  ExpectError(ParseTiny(Edit(kTiny, "{\"kind\": \"SGD\", \"learning_rate\": 0.5}",
                             "{\"kind\": \"Momentum\", \"learning_rate\": 0.5, \"momentum\": 2}")),
              {"bad.json: field 'optimizer': Momentum: momentum must be < 1", "but got 2"});
  ExpectError(ParseTiny(Edit(kTiny, "{\"kind\": \"SGD\", \"learning_rate\": 0.5}",
                             "{\"kind\": \"Momentum\", \"learning_rate\": 0.5, \"momentum\": -0.5}")),
              {"bad.json: field 'optimizer': Momentum: momentum must be >= 0"});
  // A hand-written schedule gets MindSpore's checks too.
  auto file =
      ParseTiny(Edit(kTiny, "\"learning_rate\": 0.5}",
                     "\"learning_rate\": 0.5, \"schedule\": {\"kind\": \"WarmupCosine\", \"learning_rate\": 0.1, "
                     "\"end_learning_rate\": 1e-4, \"warmup_steps\": 5, \"decay_steps\": 20}}"));
  ASSERT_TRUE(file.ok()) << file.status().message();
  EXPECT_EQ(file->optimizer->schedule.kind, host::LrScheduleKind::WarmupCosine);
  EXPECT_EQ(file->optimizer->schedule.decay_steps, 20);
  ExpectError(
      ParseTiny(Edit(kTiny, "\"learning_rate\": 0.5}",
                     "\"learning_rate\": 0.5, \"schedule\": {\"kind\": \"CosineDecay\", \"learning_rate\": 0.1}}")),
      {"bad.json: field 'optimizer': SGD",
       "For 'CosineDecayLR', the 'decay_steps' must be int and must > 0, but got '0' with type 'int'."});
  const std::string adamw =
      "{\"kind\": \"AdamWeightDecay\", \"learning_rate\": 0.5, \"groups\": [{\"names\": [\"b\", \"\"]}]}";
  ExpectError(ParseTiny(Edit(kTiny, "{\"kind\": \"SGD\", \"learning_rate\": 0.5}", adamw)),
              {"bad.json: field 'optimizer': AdamWeightDecay: group 0: a name filter is the empty string"});
  auto lamb = ParseTiny(Edit(kTiny, "{\"kind\": \"SGD\", \"learning_rate\": 0.5}",
                             "{\"kind\": \"Lamb\", \"learning_rate\": 0.5, \"weight_decay\": 0.01, "
                             "\"groups\": [{\"names\": [\"bias\"], \"weight_decay\": 0}]}"));
  ASSERT_TRUE(lamb.ok()) << lamb.status().message();
  EXPECT_EQ(lamb->optimizer->kind, OptimizerKind::Lamb);
  ASSERT_EQ(lamb->optimizer->groups.size(), 1u);
  EXPECT_EQ(lamb->optimizer->groups[0].names, (std::vector<std::string>{"bias"}));
}

TEST(GraphFileErrorTest, NeitherBinaryNorJson) {
  ExpectError(ParseGraph(Bytes("hello, graph"), "notes.txt"),
              {"notes.txt: neither a binary graph file (identifier 'SKGR' at byte 4) nor JSON (an object, '{')"});
  ExpectError(
      ParseGraph(Bytes(std::string("\x10\0\0\0SKTSxxxxxxxx", 16)), "job.tstream"),
      {"job.tstream: neither a binary graph file (identifier 'SKGR' at byte 4; this one says 'SKTS') nor JSON"});
}

TEST(GraphFileErrorTest, EmptyFile) {
  ExpectError(ParseGraph(std::span<const uint8_t>(), "empty.json"), {"empty.json: empty file"});
}

TEST(GraphFileErrorTest, CorruptBinary) {
  std::vector<uint8_t> bytes = MustSerialize(ZooMlp());
  bytes.resize(bytes.size() / 2);
  ExpectError(ParseGraph(bytes, "cut.sgraph"), {"cut.sgraph: corrupt binary graph file"});
  auto text = GraphToJson(bytes, "cut.sgraph");
  ASSERT_FALSE(text.ok());
  EXPECT_NE(text.status().message().find("cut.sgraph: corrupt binary graph file"), std::string::npos);
}

TEST(GraphFileErrorTest, JsonSyntaxErrorCarriesTheLine) {
  ExpectError(ParseTiny(Edit(kTiny, "\"loss\": 4,", "\"loss\": 4,,")), {"bad.json:15:"});
  ExpectError(ParseTiny(Edit(kTiny, "\"loss\": 4,", "\"los\": 4,")), {"bad.json:15:", "unknown field: los"});
}

TEST(GraphFileErrorTest, JsonRefusesFloatsItCannotSpell) {
  auto r = GraphToJson(MustSerialize(ZooMlp(), OptimizerSpec::Sgd(1e-7f)), "tiny_lr");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("tiny_lr: the JSON spelling would change the graph"), std::string::npos)
      << r.status().message();
}

// Every damaged variant of a graph file parses to an error or to a graph
// that passed every check: never a crash, never a half-built graph.
TEST(GraphFileErrorTest, DamagedFilesAreErrorsNotCrashes) {
  const std::vector<uint8_t> good = MustSerialize(ZooLeNet(), OptimizerSpec::Momentum(0.01f, 0.9f));
  uint64_t state = 0x9E3779B97F4A7C15ull;
  auto next = [&] {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  int errors = 0;
  for (int i = 0; i < 2000; ++i) {
    std::vector<uint8_t> bytes = good;
    const int flips = 1 + static_cast<int>(next() % 4);
    for (int k = 0; k < flips; ++k) bytes[next() % bytes.size()] ^= static_cast<uint8_t>(1 + next() % 255);
    if (i % 10 == 0) bytes.resize(next() % bytes.size());
    auto r = ParseGraph(bytes, "damaged.sgraph");
    if (!r.ok()) {
      ++errors;
      EXPECT_NE(r.status().message().find("damaged.sgraph"), std::string::npos) << r.status().message();
    } else {
      EXPECT_TRUE(r->graph.status().ok());
      EXPECT_TRUE(r->graph.valid(r->graph.loss()));
    }
  }
  EXPECT_GT(errors, 1000);
  // JSON cut anywhere: an error naming the file, or (cut after the last
  // brace) the graph itself.
  auto json = GraphToJson(good, "lenet");
  ASSERT_TRUE(json.ok());
  for (size_t cut = 0; cut < json->size(); cut += 97) {
    const std::string part = json->substr(0, cut);
    auto r = ParseGraph(std::span(reinterpret_cast<const uint8_t*>(part.data()), part.size()), "cut.json");
    ASSERT_FALSE(r.ok()) << cut;
    EXPECT_NE(r.status().message().find("cut.json"), std::string::npos) << r.status().message();
  }
}

}  // namespace
}  // namespace sinkrt::host
