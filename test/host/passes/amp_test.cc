// Mixed precision (amp_level, docs/guide/amp.md): the pass puts every Cast where
// the level says, O0 is the f32 stream byte for byte, and bf16 training
// tracks f32.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "host/src/passes/amp.h"
#include "sinkrt/device/in_process_device.h"
#include "sinkrt/host/compiler.h"
#include "sinkrt/host/loss_scale.h"
#include "sinkrt/host/lr_schedule.h"
#include "sinkrt/host/model.h"
#include "sinkrt/host/model_zoo.h"
#include "support/compare.h"
#include "support/in_process_world.h"
#include "support/model_fixtures.h"
#include "support/test_models.h"
#include "support/test_util.h"

namespace sinkrt {
namespace {

using host::AmpLevel;
using host::Graph;
using host::LossSpec;
using host::Model;
using host::OpNode;
using host::OptimizerSpec;
using host::TensorId;
using testing::LossRecorder;
using testing::OneThreadOptions;

Graph WithLoss(Graph g, int64_t batch) {
  const TensorId label = g.Input("label", {batch}, DType::I32);
  g.SetLoss(g.SparseSoftmaxCrossEntropy(g.outputs().front(), label));
  return g;
}

Graph Mlp(int64_t batch) { return WithLoss(host::MakeMlpNetwork(batch), batch); }
Graph Vit(int64_t batch) { return WithLoss(host::MakeVitNetwork(batch), batch); }

Graph Amp(const Graph& g, AmpLevel level) {
  auto r = host::passes::ApplyAmp(g, level);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : Graph("failed");
}

// What each of the pass's Casts reads, "<source> -> <dtype>" sorted: the
// source is a leaf's name, or the op code that wrote it.
std::vector<std::string> Casts(const Graph& g) {
  std::vector<std::string> out;
  for (const OpNode& op : g.ops()) {
    if (op.op != OpCode::Cast) continue;
    const TensorId x = op.inputs[0];
    const int64_t p = g.producer(x);
    out.push_back(std::string(p >= 0 ? OpCodeName(g.ops()[p].op) : g.tensor(x).name.c_str()) + " -> " +
                  DTypeName(g.tensor(op.outputs[0]).dtype));
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Per op code (Casts aside), the dtypes its output 0 has in `g`.
std::map<OpCode, std::set<DType>> OpDTypes(const Graph& g) {
  std::map<OpCode, std::set<DType>> out;
  for (const OpNode& op : g.ops())
    if (op.op != OpCode::Cast) out[op.op].insert(g.tensor(op.outputs[0]).dtype);
  return out;
}

TEST(AmpLevel, ParsesMindSporesNames) {
  for (int i = 0; i < 4; ++i) {
    const std::string name = "O" + std::to_string(i);
    auto l = host::ParseAmpLevel(name);
    SINKRT_ASSERT_OK(l);
    EXPECT_EQ(static_cast<int>(*l), i);
    EXPECT_EQ(host::AmpLevelName(*l), name);
  }
  auto lower = host::ParseAmpLevel("o2");
  SINKRT_ASSERT_OK(lower);
  EXPECT_EQ(*lower, AmpLevel::O2);
  for (const char* bad : {"O4", "", "auto", "O22", "2"}) {
    auto l = host::ParseAmpLevel(bad);
    ASSERT_FALSE(l.ok()) << bad;
    EXPECT_NE(l.status().message().find("'O0', 'O1', 'O2', 'O3'"), std::string::npos) << l.status().message();
    EXPECT_NE(l.status().message().find(std::string("'") + bad + "'"), std::string::npos) << l.status().message();
  }
}

TEST(AmpPass, O0LeavesTheGraphAlone) {
  const Graph g = Mlp(8);
  const Graph o0 = Amp(g, AmpLevel::O0);
  EXPECT_EQ(host::GraphHash(o0), host::GraphHash(g));
  EXPECT_TRUE(Casts(o0).empty());
}

// MindSpore's O1: the white list (MatMul, Relu here) in bf16, BiasAdd and
// the loss in f32, so a cast on each side of every BiasAdd.
TEST(AmpPass, O1CastsAroundTheWhiteList) {
  const Graph g = Amp(Mlp(8), AmpLevel::O1);
  auto d = OpDTypes(g);
  EXPECT_EQ(d[OpCode::MatMul], std::set<DType>{DType::BF16});
  EXPECT_EQ(d[OpCode::Relu], std::set<DType>{DType::BF16});
  EXPECT_EQ(d[OpCode::BiasAdd], std::set<DType>{DType::F32});
  EXPECT_EQ(d[OpCode::SparseSoftmaxCrossEntropy], std::set<DType>{DType::F32});
  const std::vector<std::string> want = {"BiasAdd -> bf16",    "BiasAdd -> bf16",    "MatMul -> f32",
                                         "MatMul -> f32",      "MatMul -> f32",      "fc1.weight -> bf16",
                                         "fc2.weight -> bf16", "fc3.weight -> bf16", "image -> bf16"};
  EXPECT_EQ(Casts(g), want);
}

// O2: everything in bf16 but the loss; each parameter is cast once, the
// logits (a graph output) come back to f32 for the loss and for eval.
TEST(AmpPass, O2CastsEachParameterOnceAndTheLogitsBack) {
  const Graph f = Mlp(8);
  const Graph g = Amp(f, AmpLevel::O2);
  auto d = OpDTypes(g);
  for (OpCode op : {OpCode::MatMul, OpCode::BiasAdd, OpCode::Relu})
    EXPECT_EQ(d[op], std::set<DType>{DType::BF16}) << OpCodeName(op);
  EXPECT_EQ(d[OpCode::SparseSoftmaxCrossEntropy], std::set<DType>{DType::F32});
  const TensorId logits = g.outputs().front();
  EXPECT_EQ(g.tensor(logits).dtype, DType::F32);
  EXPECT_EQ(g.tensor(logits).name, f.tensor(f.outputs().front()).name);
  EXPECT_EQ(g.tensor(g.loss()).dtype, DType::F32);
  const std::vector<std::string> want = {"BiasAdd -> f32",     "fc1.bias -> bf16",   "fc1.weight -> bf16",
                                         "fc2.bias -> bf16",   "fc2.weight -> bf16", "fc3.bias -> bf16",
                                         "fc3.weight -> bf16", "image -> bf16"};
  EXPECT_EQ(Casts(g), want);
  // The BiasAdd writes "<logits>/bf16", cast back into the logits.
  EXPECT_EQ(g.tensor(g.ops()[g.producer(logits)].inputs[0]).name, g.tensor(logits).name + "/bf16");
  // Every tensor keeps its id and name; parameters stay f32 (master weights).
  for (TensorId t = 0; t < f.tensors().size(); ++t) {
    EXPECT_EQ(g.tensor(t).name, f.tensor(t).name);
    if (f.tensor(t).kind == host::TensorKind::Param) {
      EXPECT_EQ(g.tensor(t).dtype, DType::F32) << f.tensor(t).name;
    }
  }
}

// ReduceMax, Select and CausalMask move bits: under O2 they follow their
// bf16 inputs (no Cast back to f32 around them), and Select's f32 cond is
// cast with them (the kernel reads a bf16 cond as nonzero bits).
Graph MaskingNet(int64_t batch) {
  Graph f("masking");
  const TensorId x = f.Input("image", {batch, 16});
  const TensorId w = f.Param("w", {16, 16}, host::InitSpec::Uniform(-0.1f, 0.1f, 3));
  const TensorId s = f.Reshape(f.MatMul(x, w), {batch, 4, 4});
  std::vector<float> cond(16);
  for (size_t i = 0; i < cond.size(); ++i) cond[i] = i % 3 ? 1.0f : 0.0f;
  const TensorId k = f.Const("cond", {4, 4}, host::InitSpec::Inline(cond));
  const TensorId m = f.Select(k, f.CausalMask(s, -1e4f), s);
  const TensorId logits = f.MatMul(f.ReduceMax(m, {2}), f.Param("w2", {4, 10}, host::InitSpec::Zeros()));
  f.AddOutput(logits);
  return WithLoss(f, batch);
}

TEST(AmpPass, O2RunsTheMaskingOpsInTheirInputsDType) {
  const Graph g = Amp(MaskingNet(8), AmpLevel::O2);
  auto d = OpDTypes(g);
  for (OpCode op : {OpCode::CausalMask, OpCode::Select, OpCode::ReduceMax})
    EXPECT_EQ(d[op], std::set<DType>{DType::BF16}) << OpCodeName(op);
  const std::vector<std::string> casts = Casts(g);
  EXPECT_EQ(std::count(casts.begin(), casts.end(), "cond -> bf16"), 1);
  EXPECT_EQ(std::count(casts.begin(), casts.end(), "ReduceMax -> f32"), 0);
}

// O2 keeps LayerNorm and Softmax in f32, O3 runs them in bf16; both keep
// LayerNorm's statistics f32 and the loss f32.
TEST(AmpPass, VitO2KeepsTheNormalisationsInF32AndO3DoesNot) {
  const Graph o2 = Amp(Vit(4), AmpLevel::O2);
  const Graph o3 = Amp(Vit(4), AmpLevel::O3);
  auto d2 = OpDTypes(o2), d3 = OpDTypes(o3);
  for (OpCode op : {OpCode::LayerNorm, OpCode::Softmax}) {
    EXPECT_EQ(d2[op], std::set<DType>{DType::F32}) << OpCodeName(op);
    EXPECT_EQ(d3[op], std::set<DType>{DType::BF16}) << OpCodeName(op);
  }
  for (const auto* d : {&d2, &d3}) {
    EXPECT_EQ(d->at(OpCode::BatchMatMul), std::set<DType>{DType::BF16});
    EXPECT_EQ(d->at(OpCode::MatMul), std::set<DType>{DType::BF16});
    EXPECT_EQ(d->at(OpCode::SparseSoftmaxCrossEntropy), std::set<DType>{DType::F32});
  }
  for (const Graph* g : {&o2, &o3})
    for (const OpNode& op : g->ops())
      if (op.op == OpCode::LayerNorm) {
        EXPECT_EQ(g->tensor(op.outputs[1]).dtype, DType::F32) << op.name;
        EXPECT_EQ(g->tensor(op.outputs[2]).dtype, DType::F32) << op.name;
      }
  // O3 needs fewer casts: no round trips around the normalisations.
  EXPECT_LT(Casts(o3).size(), Casts(o2).size());
}

TEST(AmpCompile, O0IsTheF32StreamByteForByte) {
  host::CompileOptions co;
  co.optimizer = OptimizerSpec::Momentum(0.05f, 0.9f);
  auto plain = host::Compile(Mlp(16), co);
  co.amp_level = AmpLevel::O0;
  auto o0 = host::Compile(Mlp(16), co);
  SINKRT_ASSERT_OK(plain);
  SINKRT_ASSERT_OK(o0);
  EXPECT_TRUE(std::equal(plain->stream.bytes().begin(), plain->stream.bytes().end(), o0->stream.bytes().begin(),
                         o0->stream.bytes().end()));
  co.amp_level = AmpLevel::O2;
  auto o2 = host::Compile(Mlp(16), co);
  SINKRT_ASSERT_OK(o2);
  EXPECT_NE(o2->graph_hash, plain->graph_hash) << "the level is part of the stream's hash";
}

TEST(AmpCompile, PipelineStagesAreRefusedByName) {
  host::CompileOptions co;
  co.optimizer = OptimizerSpec::Momentum(0.05f, 0.9f);
  co.parallel_mode = host::ParallelMode::DataParallel;
  co.world_size = 2;
  co.pipeline.stages = 2;
  co.pipeline.micro_size = 2;
  co.amp_level = AmpLevel::O2;
  auto r = host::Compile(Mlp(16), co);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("amp_level O2 with pipeline_stages 2"), std::string::npos)
      << r.status().message();
}

struct Trained {
  std::vector<double> losses;  // one per sink: its last step's
  host::EvalResult eval;       // on 1024 held-out samples
};

// Rows [from, from + n) of `d`.
testing::SyntheticData Rows(const testing::SyntheticData& d, int64_t from, int64_t n) {
  testing::SyntheticData out;
  out.features = d.features;
  out.images.assign(d.images.begin() + from * d.features, d.images.begin() + (from + n) * d.features);
  out.labels.assign(d.labels.begin() + from, d.labels.begin() + from + n);
  return out;
}

// `ls`: the loss-scale manager; `sink`: steps per sink (each recorded loss
// is a sink's last step's).
Trained Losses(Graph net, AmpLevel level, const OptimizerSpec& opt, int steps, int64_t batch, int64_t features,
               const host::LossScaleManager& ls = {}, int sink = 10) {
  // A quarter of the labels random: the loss stays near 1 instead of
  // falling to where a relative difference measures the loss's own rounding.
  constexpr int64_t kHeldOut = 1024;
  testing::SyntheticData d = testing::MakeSyntheticData(steps * batch + kHeldOut, features, 10, 21);
  testing::RandomizeQuarterOfLabels(d);
  device::InProcessDevice dev(OneThreadOptions());
  host::ModelOptions o;
  o.compile_cache = "";
  o.amp_level = level;
  o.loss_scale_manager = ls;
  auto m = Model::Create(std::move(net), LossSpec::None(), opt, dev, o);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  if (!m.ok()) return {};
  LossRecorder rec;
  // Sink mode: each of steps / sink epochs is one sink.
  Status st = (*m)->train(steps / sink, testing::MakeDataset(Rows(d, 0, steps * batch), batch), {&rec}, true, sink);
  EXPECT_TRUE(st.ok()) << st.ToString();
  auto eval = (*m)->eval(testing::MakeDataset(Rows(d, steps * batch, kHeldOut), batch));
  EXPECT_TRUE(eval.ok()) << eval.status().ToString();
  return {rec.losses, eval.ok() ? *eval : host::EvalResult{}};
}

// bf16 keeps 8 significant bits. One batch's loss follows f32's within
// 10 % at every sink; on held-out data the trained networks' loss is
// within 2 % and their accuracy within 0.02; and the loss falls.
void ExpectTracksF32(const Trained& f32, const Trained& low, const char* what) {
  ASSERT_EQ(low.losses.size(), f32.losses.size()) << what;
  ASSERT_GE(f32.losses.size(), 2u);
  double worst = 0;
  for (size_t i = 0; i < f32.losses.size(); ++i) {
    ASSERT_TRUE(std::isfinite(low.losses[i])) << what << " sink " << i;
    worst = std::max(worst, std::abs(low.losses[i] - f32.losses[i]) / std::abs(f32.losses[i]));
  }
  std::printf(
      "[ info ] %s: worst relative loss difference to f32 %.4f over %zu sinks; held-out loss %.4f vs %.4f, "
      "accuracy %.4f vs %.4f\n",
      what, worst, f32.losses.size(), low.eval.loss, f32.eval.loss, low.eval.accuracy, f32.eval.accuracy);
  EXPECT_LT(worst, 0.1) << what;
  EXPECT_LT(std::abs(low.eval.loss - f32.eval.loss) / f32.eval.loss, 0.02) << what;
  EXPECT_NEAR(low.eval.accuracy, f32.eval.accuracy, 0.02) << what;
  EXPECT_LT(low.losses.back(), 0.8 * low.losses.front()) << what << ": the loss must fall";
}

TEST(AmpTrain, MlpEveryLevelTracksF32) {
  const OptimizerSpec opt = OptimizerSpec::Momentum(0.01f, 0.9f);
  const Trained f32 = Losses(Mlp(32), AmpLevel::O0, opt, 200, 32, 784);
  for (AmpLevel l : {AmpLevel::O1, AmpLevel::O2, AmpLevel::O3})
    ExpectTracksF32(f32, Losses(Mlp(32), l, opt, 200, 32, 784), (std::string("MLP ") + host::AmpLevelName(l)).c_str());
}

// The masking ops' bf16 kernels and gradients (EqualMask, Select of zeros,
// CausalMask of dy) compile and train under O2 as under O0.
TEST(AmpTrain, MaskingOpsTrainAtO2) {
  const OptimizerSpec opt = OptimizerSpec::Momentum(0.05f, 0.9f);
  const Trained f32 = Losses(MaskingNet(16), AmpLevel::O0, opt, 100, 16, 16);
  const Trained o2 = Losses(MaskingNet(16), AmpLevel::O2, opt, 100, 16, 16);
  ASSERT_EQ(o2.losses.size(), f32.losses.size());
  ASSERT_FALSE(o2.losses.empty());
  for (size_t i = 0; i < o2.losses.size(); ++i) {
    EXPECT_TRUE(std::isfinite(o2.losses[i])) << i;
    EXPECT_NEAR(o2.losses[i], f32.losses[i], 0.1 * std::abs(f32.losses[i])) << "sink " << i;
  }
}

TEST(AmpTrain, VitO2AndO3TrackF32) {
  const OptimizerSpec opt = OptimizerSpec::Adam(1e-3f);
  const Trained f32 = Losses(Vit(8), AmpLevel::O0, opt, 100, 8, 784);
  for (AmpLevel l : {AmpLevel::O2, AmpLevel::O3})
    ExpectTracksF32(f32, Losses(Vit(8), l, opt, 100, 8, 784), (std::string("ViT ") + host::AmpLevelName(l)).c_str());
}

// The recipe's optimizer at O2 with dynamic loss scaling: AdamWeightDecay
// with a no-decay group, warmup then cosine. The rate is computed in f32
// from the step counter, which does not advance on an overflowed step.
OptimizerSpec ScheduledAdamW() {
  OptimizerSpec opt = OptimizerSpec::AdamWeightDecay(0.0f, 0.05f);
  host::SetNoDecay(opt, {"bias", "beta", "gamma", "norm"});
  opt.schedule = host::LrSchedule::WarmupCosine(2e-3, 1e-5, 10, 90);
  return opt;
}

TEST(AmpTrain, VitO2WithLossScaleScheduleAndAdamWeightDecayTracksF32) {
  const Trained f32 = Losses(Vit(8), AmpLevel::O0, ScheduledAdamW(), 100, 8, 784);
  const Trained o2 =
      Losses(Vit(8), AmpLevel::O2, ScheduledAdamW(), 100, 8, 784, host::LossScaleManager::Dynamic(1024.0f, 2.0f, 20));
  ExpectTracksF32(f32, o2, "ViT O2, dynamic loss scale, AdamWeightDecay, warmup-cosine");
}

// Clipping at O2: the gradients are f32 (the master copies'), the norm is
// taken after unscaling, so the clipped O2 run tracks the clipped f32 run
// as the unclipped ones do, and clipping changes both.
TEST(AmpTrain, VitO2ClippedWithLossScaleTracksClippedF32) {
  OptimizerSpec clipped = ScheduledAdamW();
  clipped.clip_grad_norm = 0.5f;
  const auto ls = host::LossScaleManager::Dynamic(1024.0f, 2.0f, 20);
  const Trained f32 = Losses(Vit(8), AmpLevel::O0, clipped, 100, 8, 784);
  const Trained o2 = Losses(Vit(8), AmpLevel::O2, clipped, 100, 8, 784, ls);
  ExpectTracksF32(f32, o2, "ViT O2, dynamic loss scale, AdamWeightDecay, warmup-cosine, clipped at 0.5");
  const Trained unclipped = Losses(Vit(8), AmpLevel::O2, ScheduledAdamW(), 100, 8, 784, ls);
  EXPECT_GT(testing::WorstRelative(o2.losses, unclipped.losses), 1e-3);
}

// The schedule and the loss scale live on the device: one sink of 10 steps
// and 10 sinks of one give the same bits, sink by sink and after training.
TEST(AmpTrain, VitO2WithLossScaleAndScheduleOneSinkOfNEqualsNSinksOfOne) {
  const auto ls = host::LossScaleManager::Dynamic(1024.0f, 2.0f, 20);
  const Trained tens = Losses(Vit(8), AmpLevel::O2, ScheduledAdamW(), 60, 8, 784, ls, 10);
  const Trained ones = Losses(Vit(8), AmpLevel::O2, ScheduledAdamW(), 60, 8, 784, ls, 1);
  ASSERT_EQ(tens.losses.size(), 6u);
  ASSERT_EQ(ones.losses.size(), 60u);
  for (size_t i = 0; i < tens.losses.size(); ++i) EXPECT_EQ(tens.losses[i], ones.losses[10 * i + 9]) << "sink " << i;
  EXPECT_EQ(tens.eval.loss, ones.eval.loss);
  EXPECT_EQ(tens.eval.accuracy, ones.eval.accuracy);
}

// Under data parallel and semi-auto the ranks run the amp graph on their
// share: 2 ranks track one device at the same level (the gradients are
// summed in another order, and a row-split MatMul's partial sums are
// AllReduced in bf16).
std::vector<double> ParallelLosses(Graph net, AmpLevel level, host::ParallelMode mode, int ranks, int64_t batch,
                                   const testing::SyntheticData& d) {
  testing::InProcessWorld world(ranks);
  host::ModelOptions o;
  o.compile_cache = "";
  o.amp_level = level;
  if (ranks > 1) {
    o.context.mode = mode;
    o.context.device_num = ranks;
    o.context.gradients_mean = true;
    o.context.full_batch = mode == host::ParallelMode::SemiAutoParallel;
  }
  auto m = Model::Create(std::move(net), LossSpec::SparseSoftmaxCrossEntropy(), OptimizerSpec::Momentum(0.02f, 0.9f),
                         world.links, o);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  if (!m.ok()) return {};
  LossRecorder rec;
  Status st = (*m)->train(static_cast<int>(d.size() / 64 / 5), testing::MakeDataset(d, batch), {&rec}, true, 5);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return rec.losses;
}

void ExpectNear(const std::vector<double>& got, const std::vector<double>& want, double rel, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  ASSERT_FALSE(want.empty()) << what;
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]) / std::abs(want[i]));
  std::printf("[ info ] %s: worst relative loss difference %.4f over %zu sinks\n", what, worst, want.size());
  EXPECT_LT(worst, rel) << what;
}

// x [B,32] -> Linear 64 -> Tanh -> Linear 10: the logits.
Graph SmallMlp(int64_t batch, const std::vector<std::vector<std::vector<int64_t>>>& strategies = {}) {
  Graph g("mlp");
  const TensorId x = g.Input("image", {batch, 32});
  const TensorId w1 = g.Param("w1", {32, 64}, host::InitSpec::HeUniform(11));
  const TensorId b1 = g.Param("b1", {64}, host::InitSpec::Uniform(-0.1f, 0.1f, 12));
  const TensorId w2 = g.Param("w2", {64, 10}, host::InitSpec::XavierUniform(13));
  const TensorId b2 = g.Param("b2", {10}, host::InitSpec::Uniform(-0.1f, 0.1f, 14));
  g.AddOutput(g.BiasAdd(g.MatMul(g.Tanh(g.BiasAdd(g.MatMul(x, w1), b1)), w2), b2));
  for (size_t i = 0; i < strategies.size() && i < g.ops().size(); ++i)
    if (!strategies[i].empty()) g.Shard(g.ops()[i].name, strategies[i]);
  return g;
}

TEST(AmpParallel, DataParallelAndMegatronTrackOneDeviceAtO2) {
  testing::SyntheticData d = testing::MakeSyntheticData(64 * 60, 32, 10, 5);
  testing::RandomizeQuarterOfLabels(d);
  const std::vector<double> one = ParallelLosses(SmallMlp(64), AmpLevel::O2, host::ParallelMode::StandAlone, 1, 64, d);
  // Data parallel: each rank reads 32 of the 64 rows.
  ExpectNear(ParallelLosses(SmallMlp(32), AmpLevel::O2, host::ParallelMode::DataParallel, 2, 32, d), one, 0.01,
             "O2 data parallel x2");
  // Megatron's pair: w1 by columns, w2 by rows (its partial sums AllReduced).
  const std::vector<std::vector<std::vector<int64_t>>> megatron = {
      {{1, 1}, {1, 2}}, {{1, 2}, {2}}, {{1, 2}}, {{1, 2}, {2, 1}}, {{1, 1}, {1}}};
  ExpectNear(ParallelLosses(SmallMlp(64, megatron), AmpLevel::O2, host::ParallelMode::SemiAutoParallel, 2, 64, d), one,
             0.01, "O2 semi-auto Megatron x2");
}

// With gradient accumulation and recomputation on top: K=2 batches of 32
// track one batch of 64 at O2, and recomputation changes nothing.
TEST(AmpTrain, WithGradientAccumulationAndRecompute) {
  testing::SyntheticData d = testing::MakeSyntheticData(64 * 40, 784, 10, 7);
  testing::RandomizeQuarterOfLabels(d);
  auto run = [&](int64_t batch, int k, const std::string& recompute) {
    device::InProcessDevice dev(OneThreadOptions());
    host::ModelOptions o;
    o.compile_cache = "";
    o.amp_level = AmpLevel::O2;
    o.context.grad_accumulation_step = k;
    Graph g = Vit(batch);
    if (!recompute.empty()) g.Recompute(recompute);
    auto m = Model::Create(std::move(g), LossSpec::None(), OptimizerSpec::Adam(1e-3f), dev, o);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    if (!m.ok()) return std::vector<double>{};
    LossRecorder rec;
    Status st = (*m)->train(8, testing::MakeDataset(d, batch), {&rec}, true, 5);
    EXPECT_TRUE(st.ok()) << st.ToString();
    return rec.losses;
  };
  const std::vector<double> whole = run(64, 1, "");
  ExpectNear(run(32, 2, ""), whole, 0.01, "O2 ViT, 2 batches of 32 against one of 64");
  const std::vector<double> recomputed = run(64, 1, "all");
  ASSERT_EQ(recomputed.size(), whole.size());
  for (size_t i = 0; i < whole.size(); ++i) EXPECT_EQ(recomputed[i], whole[i]) << "sink " << i;
}

}  // namespace
}  // namespace sinkrt
