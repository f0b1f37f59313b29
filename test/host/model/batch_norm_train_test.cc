// BatchNorm in real sunk training on an in-process device
// (docs/guide/normalization.md): the moving statistics are device state the
// step updates with MindSpore's momentum, eval normalises with them, a
// checkpoint keeps them (role State) and a resume is bitwise the run that
// never stopped, one sink of N steps is N sinks of 1, and amp O2 keeps
// BatchNorm in f32.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "host/src/util/schema_enums.h"
#include "runtime/src/file_io.h"
#include "sinkrt/device/in_process_device.h"
#include "sinkrt/fb/checkpoint_generated.h"
#include "sinkrt/host/callbacks.h"
#include "sinkrt/host/model.h"

namespace sinkrt {
namespace {

using host::AmpLevel;
using host::Dataset;
using host::Graph;
using host::InitSpec;
using host::TensorId;

constexpr int64_t kBatch = 8, kFeatures = 4, kClasses = 3, kSamples = 64;
constexpr double kMomentum = 0.9, kEps = 1e-5;

// x [B, 4] -> BatchNorm1d "bn" -> fc [4, 3] -> logits.
Graph Network() {
  Graph g("bn_mlp");
  const TensorId x = g.Input("x", {kBatch, kFeatures});
  const TensorId h = host::BatchNorm1d(g, "bn", x);
  const TensorId w = g.Param("fc.weight", {kFeatures, kClasses}, InitSpec::XavierUniform(2));
  g.AddOutput(g.MatMul(h, w));
  return g;
}

// Features with per-feature offsets and spreads (the statistics differ per
// channel and are far from 0 and 1), labels i % 3.
struct Data {
  std::vector<float> x;
  std::vector<int32_t> labels;
  Data() : x(kSamples * kFeatures), labels(kSamples) {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (int64_t i = 0; i < kSamples; ++i) {
      labels[i] = static_cast<int32_t>(i % kClasses);
      for (int64_t f = 0; f < kFeatures; ++f)
        x[i * kFeatures + f] = 2.0f * static_cast<float>(f) + (1.0f + static_cast<float>(f)) * u(rng) +
                               0.5f * static_cast<float>(labels[i]);
    }
  }
  Dataset dataset() const {
    host::Tensor xt = host::Tensor::Zeros(DType::F32, {kSamples, kFeatures});
    host::Tensor lt = host::Tensor::Zeros(DType::I32, {kSamples});
    std::memcpy(xt.data.data(), x.data(), x.size() * sizeof(float));
    std::memcpy(lt.data.data(), labels.data(), labels.size() * sizeof(int32_t));
    return Dataset::FromArrays({{"x", xt}, {"label", lt}}).Batch(kBatch, true);
  }
};

std::unique_ptr<host::Model> MakeModel(DeviceLink& dev, AmpLevel amp = AmpLevel::O0, bool recompute = false) {
  host::ModelOptions options;
  options.amp_level = amp;
  Graph net = Network();
  if (recompute) net.Recompute("all");
  auto m = host::Model::Create(std::move(net), host::LossSpec::SparseSoftmaxCrossEntropy(),
                               host::OptimizerSpec::Momentum(0.05f, 0.9f), dev, options);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? std::move(m).value() : nullptr;
}

std::map<std::string, std::vector<float>> State(host::Model& m) {
  auto state = m.ReadState();
  EXPECT_TRUE(state.ok()) << state.status().ToString();
  std::map<std::string, std::vector<float>> out;
  if (!state.ok()) return out;
  for (const auto& [name, t] : *state) {
    std::vector<float> v(t.data.size() / sizeof(float));
    std::memcpy(v.data(), t.data.data(), t.data.size());
    out[name] = std::move(v);
  }
  return out;
}

// MindSpore's update over `batches` batches in order, in double.
void ReferenceMovingStatistics(const Data& d, int64_t batches, std::vector<double>* mean, std::vector<double>* var) {
  mean->assign(kFeatures, 0.0);
  var->assign(kFeatures, 1.0);
  for (int64_t b = 0; b < batches; ++b) {
    const int64_t first = (b % (kSamples / kBatch)) * kBatch;
    for (int64_t f = 0; f < kFeatures; ++f) {
      double s = 0, q = 0;
      for (int64_t i = 0; i < kBatch; ++i) s += d.x[(first + i) * kFeatures + f];
      const double m = s / kBatch;
      for (int64_t i = 0; i < kBatch; ++i) q += std::pow(d.x[(first + i) * kFeatures + f] - m, 2);
      (*mean)[f] = kMomentum * (*mean)[f] + (1 - kMomentum) * m;
      (*var)[f] = kMomentum * (*var)[f] + (1 - kMomentum) * q / (kBatch - 1);  // unbiased
    }
  }
}

TEST(BatchNormTraining, MovingStatisticsFollowMindSporesMomentumInsideTheSink) {
  device::InProcessDevice dev;
  auto model = MakeModel(dev);
  ASSERT_NE(model, nullptr);
  const Data d;
  ASSERT_TRUE(model->train(2, d.dataset(), {}, /*dataset_sink_mode=*/true, -1).ok());
  std::map<std::string, std::vector<float>> s = State(*model);
  ASSERT_TRUE(s.count("bn.moving_mean") && s.count("bn.moving_variance") && s.count("bn.gamma"));
  std::vector<double> mean, var;
  ReferenceMovingStatistics(d, 2 * kSamples / kBatch, &mean, &var);
  for (int64_t f = 0; f < kFeatures; ++f) {
    EXPECT_NEAR(s["bn.moving_mean"][f], mean[f], 1e-5 * std::abs(mean[f]) + 1e-6) << f;
    EXPECT_NEAR(s["bn.moving_variance"][f], var[f], 1e-5 * var[f]) << f;
  }
  // Not trained: no gradient, no optimizer state for them.
  EXPECT_FALSE(s.count("bn.moving_mean/momentum"));
  EXPECT_TRUE(s.count("bn.gamma/momentum"));
  for (const host::Model::StateTensorSpec& spec : model->StateSpecs())
    EXPECT_EQ(spec.device_state, spec.name == "bn.moving_mean" || spec.name == "bn.moving_variance") << spec.name;
}

// eval's loss, recomputed in double from the state: the moving statistics
// normalise, not the batch's.
double ReferenceEvalLoss(const Data& d, std::map<std::string, std::vector<float>>& s) {
  double total = 0;
  for (int64_t i = 0; i < kSamples; ++i) {
    double logits[kClasses] = {};
    for (int64_t f = 0; f < kFeatures; ++f) {
      const double h = (d.x[i * kFeatures + f] - s["bn.moving_mean"][f]) /
                           std::sqrt(static_cast<double>(s["bn.moving_variance"][f]) + kEps) * s["bn.gamma"][f] +
                       s["bn.beta"][f];
      for (int64_t k = 0; k < kClasses; ++k) logits[k] += h * s["fc.weight"][f * kClasses + k];
    }
    double mx = logits[0], z = 0;
    for (double l : logits) mx = std::max(mx, l);
    for (double l : logits) z += std::exp(l - mx);
    total += -(logits[d.labels[i]] - mx - std::log(z));
  }
  return total / kSamples;
}

TEST(BatchNormTraining, EvalNormalisesWithTheMovingStatisticsAndLeavesThemAlone) {
  device::InProcessDevice dev;
  auto model = MakeModel(dev);
  ASSERT_NE(model, nullptr);
  const Data d;
  ASSERT_TRUE(model->train(1, d.dataset(), {}, true, -1).ok());
  std::map<std::string, std::vector<float>> before = State(*model);
  for (bool sunk : {false, true}) {
    auto r = model->eval(d.dataset(), sunk);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_NEAR(r->loss, ReferenceEvalLoss(d, before), 1e-5) << "sunk " << sunk;
  }
  EXPECT_EQ(State(*model), before) << "eval changed the state";
}

TEST(BatchNormTraining, OneSinkOfNStepsIsNSinksOfOneAndNonSink) {
  const Data d;
  device::InProcessDevice a_dev, b_dev, c_dev;
  auto a = MakeModel(a_dev), b = MakeModel(b_dev), c = MakeModel(c_dev);
  ASSERT_TRUE(a && b && c);
  ASSERT_TRUE(a->train(1, d.dataset(), {}, true, -1).ok());  // one sink of 8
  ASSERT_TRUE(b->train(8, d.dataset(), {}, true, 1).ok());   // eight sinks of 1
  ASSERT_TRUE(c->train(1, d.dataset(), {}, false).ok());     // non-sink
  const auto sa = State(*a);
  EXPECT_EQ(sa, State(*b));
  EXPECT_EQ(sa, State(*c));
}

TEST(BatchNormTraining, CheckpointKeepsTheMovingStatisticsAndResumesBitwise) {
  const Data d;
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "sinkrt_bn_ckpt_test";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "bn.ckpt").string();
  device::InProcessDevice straight_dev, first_dev, resumed_dev;
  auto straight = MakeModel(straight_dev), first = MakeModel(first_dev), resumed = MakeModel(resumed_dev);
  ASSERT_TRUE(straight && first && resumed);
  ASSERT_TRUE(straight->train(2, d.dataset(), {}, true, -1).ok());
  ASSERT_TRUE(first->train(1, d.dataset(), {}, true, -1).ok());
  ASSERT_TRUE(host::SaveCheckpoint(path, *first, {.epoch = 1, .step = 8}).ok());

  // The file holds the moving statistics with role State.
  auto bytes = ReadFileBytes(path, {1u << 30, "a checkpoint"});
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  std::map<std::string, fb::CheckpointRole> roles;
  for (const fb::CheckpointTensor* t : *fb::GetCheckpoint(bytes->data())->tensors())
    roles[t->name()->str()] = t->role();
  EXPECT_EQ(roles.at("bn.moving_mean"), fb::CheckpointRole::State);
  EXPECT_EQ(roles.at("bn.moving_variance"), fb::CheckpointRole::State);
  EXPECT_EQ(roles.at("bn.gamma"), fb::CheckpointRole::Param);

  host::CheckpointInfo info;
  ASSERT_TRUE(host::LoadCheckpoint(path, *resumed, &info).ok());
  EXPECT_EQ(State(*resumed), State(*first));
  ASSERT_TRUE(resumed->train(2, d.dataset(), {}, true, -1, /*initial_epoch=*/1).ok());
  EXPECT_EQ(State(*resumed), State(*straight));
  std::filesystem::remove_all(dir);
}

TEST(BatchNormTraining, AmpO2KeepsBatchNormInF32) {
  const Data d;
  device::InProcessDevice o0_dev, o2_dev;
  auto o0 = MakeModel(o0_dev), o2 = MakeModel(o2_dev, AmpLevel::O2);
  ASSERT_TRUE(o0 && o2);
  // The compiled BatchNorm reads and writes f32 buffers.
  const fb::TaskStream* stream = o2->compiled().stream.root();
  bool found = false;
  for (const fb::Program* p : *stream->programs())
    for (const fb::Stream* s : *p->streams())
      for (const fb::Task* t : *s->tasks())
        if (const fb::KernelTask* k = t->body_as_KernelTask(); k && k->op() == fb::OpCode::BatchNorm) {
          found = true;
          for (uint32_t b : *k->inputs()) EXPECT_EQ(stream->buffers()->Get(b)->dtype(), fb::DType::F32);
          for (uint32_t b : *k->outputs()) EXPECT_EQ(stream->buffers()->Get(b)->dtype(), fb::DType::F32);
        }
  EXPECT_TRUE(found);
  ASSERT_TRUE(o0->train(1, d.dataset(), {}, true, -1).ok());
  ASSERT_TRUE(o2->train(1, d.dataset(), {}, true, -1).ok());
  // BatchNorm reads the f32 dataset column directly: its statistics are
  // the same bits at O0 and O2.
  auto s0 = State(*o0), s2 = State(*o2);
  EXPECT_EQ(s0["bn.moving_mean"], s2["bn.moving_mean"]);
  EXPECT_EQ(s0["bn.moving_variance"], s2["bn.moving_variance"]);
}

// Recomputation re-runs a layer's forward in the backward pass; BatchNorm's
// is kept instead (a re-run would update the moving statistics twice), so
// the run is bitwise the run without recomputation.
TEST(BatchNormTraining, RecomputeUpdatesTheMovingStatisticsOnce) {
  const Data d;
  device::InProcessDevice plain_dev, recompute_dev;
  auto plain = MakeModel(plain_dev), recomputed = MakeModel(recompute_dev, AmpLevel::O0, /*recompute=*/true);
  ASSERT_TRUE(plain && recomputed);
  ASSERT_TRUE(plain->train(1, d.dataset(), {}, true, -1).ok());
  ASSERT_TRUE(recomputed->train(1, d.dataset(), {}, true, -1).ok());
  EXPECT_EQ(State(*recomputed), State(*plain));
}

}  // namespace
}  // namespace sinkrt
