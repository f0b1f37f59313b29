// Gradient clipping by global norm on one device (docs/guide/clipping.md):
// the trained parameters against a float64 reimplementation of MindSpore's
// clip_by_global_norm followed by SGD, with norms above and below
// clip_norm; the graph AppendOptimizer builds; the OptimizerSpec checks
// with MindSpore's message; the graph file round trip.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "sinkrt/host/graph_file.h"
#include "sinkrt/host/model.h"
#include "sinkrt/host/optimizer.h"
#include "support/compare.h"
#include "support/in_process_world.h"
#include "support/model_fixtures.h"
#include "support/test_models.h"

namespace sinkrt {
namespace {

using host::Graph;
using host::InitSpec;
using host::OptimizerSpec;
using host::TensorId;

constexpr int64_t kBatch = 8, kFeatures = 6, kClasses = 4;

// logits = x·w + b; Model appends the mean sparse cross-entropy.
Graph Linear() {
  Graph g("linear");
  const TensorId x = g.Input("image", {kBatch, kFeatures});
  const TensorId w = g.Param("w", {kFeatures, kClasses}, InitSpec::HeUniform(3));
  const TensorId b = g.Param("b", {kClasses}, InitSpec::Uniform(-0.5f, 0.5f, 4));
  g.AddOutput(g.BiasAdd(g.MatMul(x, w), b));
  EXPECT_TRUE(g.status().ok()) << g.status().ToString();
  return g;
}

std::vector<double> Values(const testing::NamedTensors& state, const std::string& name) {
  for (const auto& [n, t] : state)
    if (n == name) return std::vector<double>(t.as<float>(), t.as<float>() + NumElements(t.shape));
  ADD_FAILURE() << "no '" << name << "' in the state";
  return {};
}

// One SGD step of MindSpore's recipe in double: the gradient of the mean
// cross-entropy, clipped by clip_by_global_norm (x · clip / max(‖g‖, clip)),
// then w −= lr · g. Returns the global norm.
double ReferenceStep(std::vector<double>& w, std::vector<double>& b, const float* x, const int32_t* labels, double clip,
                     double lr) {
  std::vector<double> gw(w.size(), 0), gb(b.size(), 0);
  for (int64_t r = 0; r < kBatch; ++r) {
    std::vector<double> z(kClasses);
    for (int64_t c = 0; c < kClasses; ++c) {
      z[c] = b[c];
      for (int64_t k = 0; k < kFeatures; ++k) z[c] += x[r * kFeatures + k] * w[k * kClasses + c];
    }
    const double top = *std::max_element(z.begin(), z.end());
    double total = 0;
    for (double& v : z) total += (v = std::exp(v - top));
    for (int64_t c = 0; c < kClasses; ++c) {
      const double d = (z[c] / total - (c == labels[r] ? 1.0 : 0.0)) / kBatch;
      gb[c] += d;
      for (int64_t k = 0; k < kFeatures; ++k) gw[k * kClasses + c] += x[r * kFeatures + k] * d;
    }
  }
  double sum = 0;
  for (double v : gw) sum += v * v;
  for (double v : gb) sum += v * v;
  const double norm = std::sqrt(sum);
  const double global = std::max(norm, clip);
  for (size_t i = 0; i < w.size(); ++i) w[i] -= lr * (gw[i] * clip / global);
  for (size_t i = 0; i < b.size(); ++i) b[i] -= lr * (gb[i] * clip / global);
  return norm;
}

void ExpectNear(const std::vector<double>& got, const std::vector<double>& want, const std::string& what,
                double* worst) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::abs(got[i] - want[i]) / std::max(1.0, std::abs(want[i]));
    *worst = std::max(*worst, d);
    EXPECT_LE(d, 1e-5) << what << "[" << i << "]: " << got[i] << " vs " << want[i];
  }
}

// 12 steps at three clip norms: far above every step's global norm (none
// clipped: plain SGD), far below it (each step clipped), and 2, which
// clips the early steps (norms near 3) and not the later ones.
TEST(GradClip, OneDeviceTracksAFloat64ReferenceAboveAndBelowTheClipNorm) {
  constexpr int kSteps = 12;
  constexpr double kLr = 0.5;
  const testing::SyntheticData d = testing::MakeSyntheticData(kSteps * kBatch, kFeatures, kClasses, 17);
  int clipped = 0, unclipped = 0;
  double worst = 0;
  for (const double clip : {1e3, 0.02, 2.0}) {
    SCOPED_TRACE("clip_norm " + std::to_string(clip));
    testing::InProcessWorld world(1);
    OptimizerSpec opt = OptimizerSpec::Sgd(static_cast<float>(kLr));
    opt.clip_grad_norm = static_cast<float>(clip);
    host::ModelOptions o;
    o.compile_cache = "";
    auto m = host::Model::Create(Linear(), host::LossSpec::SparseSoftmaxCrossEntropy(), opt, world.links, o);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    auto initial = (*m)->ReadState();
    ASSERT_TRUE(initial.ok()) << initial.status().ToString();
    std::vector<double> w = Values(*initial, "w"), b = Values(*initial, "b");
    ASSERT_TRUE((*m)->train(1, testing::MakeDataset(d, kBatch), {}, false).ok());
    for (int s = 0; s < kSteps; ++s) {
      const double norm =
          ReferenceStep(w, b, d.images.data() + s * kBatch * kFeatures, d.labels.data() + s * kBatch, clip, kLr);
      (norm > clip ? clipped : unclipped) += 1;
    }
    auto trained = (*m)->ReadState();
    ASSERT_TRUE(trained.ok()) << trained.status().ToString();
    ExpectNear(Values(*trained, "w"), w, "w", &worst);
    ExpectNear(Values(*trained, "b"), b, "b", &worst);
  }
  std::printf("[ info ] %d steps clipped, %d not; worst relative difference from float64 %.2e\n", clipped, unclipped,
              worst);
  ::testing::Test::RecordProperty("worst_relative_difference", std::to_string(worst));
  EXPECT_GT(clipped, kSteps);    // all of clip 0.02's and some of 2's
  EXPECT_GT(unclipped, kSteps);  // all of 1e3's and some of 2's
}

// What AppendOptimizer adds: one SumSquares over every gradient and a
// ClipByGlobalNorm whose status each update reads last; with loss
// scaling, ClipByGlobalNorm reads GradOverflow's status and the loss
// scale's update still reads GradOverflow's own.
TEST(GradClip, AppendOptimizerReadsTheClipStatusInEveryUpdate) {
  Graph g = Linear();
  g.SetLoss(g.ReduceMean(g.outputs()[0], {0, 1}, false));
  auto grads = host::AppendBackward(g, g.loss());
  ASSERT_TRUE(grads.ok()) << grads.status().ToString();
  OptimizerSpec opt = OptimizerSpec::Momentum(0.1f, 0.9f);
  opt.clip_grad_norm = 1.0f;
  ASSERT_TRUE(host::AppendOptimizer(g, *grads, opt).ok()) << g.status().ToString();
  int sums = 0;
  TensorId status = host::kInvalidTensor;
  for (const host::OpNode& op : g.ops()) {
    if (op.op == OpCode::SumSquares) {
      ++sums;
      EXPECT_EQ(op.inputs.size(), grads->size());
    }
    if (op.op == OpCode::ClipByGlobalNorm) {
      status = op.outputs.at(0);
      EXPECT_EQ(op.attrs.value, 1.0f);
    }
    if (op.op == OpCode::MomentumUpdate) {
      EXPECT_EQ(op.inputs.back(), status) << op.name;
    }
  }
  EXPECT_EQ(sums, 1);
  EXPECT_NE(status, host::kInvalidTensor);
}

TEST(GradClip, BadClipNormsGetMindSporesMessage) {
  for (const float bad : {-1.0f, std::nanf(""), std::numeric_limits<float>::infinity()}) {
    OptimizerSpec opt = OptimizerSpec::Sgd(0.1f);
    opt.clip_grad_norm = bad;
    const Status st = host::ValidateOptimizer(opt);
    EXPECT_FALSE(st.ok()) << bad;
    EXPECT_NE(st.message().find("For 'clip_by_global_norm', the 'clip_norm' must be greater than 0.0, but got"),
              std::string::npos)
        << st.message();
  }
  OptimizerSpec off = OptimizerSpec::Sgd(0.1f);
  EXPECT_TRUE(host::ValidateOptimizer(off).ok());  // 0: no clipping
  off.clip_grad_norm = 1e-3f;
  EXPECT_TRUE(host::ValidateOptimizer(off).ok());
}

// Optimizer.clip_grad_norm (graph file 1.3) is written and read back; a
// file with a negative one is refused as it is read, naming the field.
TEST(GradClip, GraphFileCarriesClipGradNorm) {
  Graph g = Linear();
  g.SetLoss(g.SparseSoftmaxCrossEntropy(g.outputs()[0], g.Input("label", {kBatch}, DType::I32)));
  OptimizerSpec opt = OptimizerSpec::AdamWeightDecay(1e-3f, 0.01f);
  opt.clip_grad_norm = 0.75f;
  auto bytes = host::SerializeGraph(g, opt);
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  auto file = host::ParseGraph(*bytes, "clip.sinkg");
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  ASSERT_TRUE(file->optimizer.has_value());
  EXPECT_EQ(file->optimizer->clip_grad_norm, 0.75f);
  EXPECT_EQ(*file->optimizer, opt);
  opt.clip_grad_norm = -2.0f;
  auto bad = host::SerializeGraph(g, opt);
  if (bad.ok()) {
    auto refused = host::ParseGraph(*bad, "clip.sinkg");
    ASSERT_FALSE(refused.ok());
    EXPECT_NE(refused.status().message().find("clip_norm"), std::string::npos) << refused.status().message();
  }
}

}  // namespace
}  // namespace sinkrt
