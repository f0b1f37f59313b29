// BatchNorm under gradient accumulation (docs/guide/normalization.md): K
// micro-batches of b per optimizer step, each normalised with its own
// batch statistics (a micro-batch is a forward pass, as in MindSpore's
// GradAccumulation and PipelineCell), the moving statistics updated K times
// per step, in micro-batch order; the step's gradient is the mean of the
// micro-batches'. Pinned against a float64 reimplementation of that step
// over 100 steps; data parallel with SyncBatchNorm tracks it, and a
// checkpoint taken mid-run resumes bitwise.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "sinkrt/device/in_process_device.h"
#include "sinkrt/host/callbacks.h"
#include "sinkrt/host/model.h"
#include "support/in_process_world.h"
#include "support/test_util.h"

namespace sinkrt {
namespace {

using host::Dataset;
using host::Graph;
using host::InitSpec;
using host::TensorId;
using testing::LossRecorder;

constexpr int64_t kB = 8, kK = 4, kIn = 5, kHidden = 6, kClasses = 3;
constexpr int64_t kStepsPerEpoch = 25, kSamples = kStepsPerEpoch * kK * kB;
constexpr double kLr = 0.05, kMu = 0.9, kMomentum = 0.9, kEps = 1e-5;

// x [b, 5] -> fc1 [5, 6] -> BatchNorm1d "bn" -> relu -> fc2 [6, 3]: the
// BatchNorm's backward reaches fc1 through dx.
Graph Network(int64_t batch = kB, bool sync = false) {
  Graph g("bn_accumulate");
  const TensorId x = g.Input("x", {batch, kIn});
  const TensorId w1 = g.Param("fc1.weight", {kIn, kHidden}, InitSpec::XavierUniform(5));
  const TensorId h = g.Relu(host::BatchNorm1d(g, "bn", g.MatMul(x, w1), {.sync = sync}));
  g.AddOutput(g.MatMul(h, g.Param("fc2.weight", {kHidden, kClasses}, InitSpec::XavierUniform(6))));
  return g;
}

struct Data {
  std::vector<float> x;
  std::vector<int32_t> labels;
  Data() : x(kSamples * kIn), labels(kSamples) {
    std::mt19937 rng(23);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (int64_t i = 0; i < kSamples; ++i) {
      labels[i] = static_cast<int32_t>((i * 7 + i / 5) % kClasses);
      for (int64_t f = 0; f < kIn; ++f)
        x[i * kIn + f] = 0.5f * static_cast<float>(f) + u(rng) + 0.8f * static_cast<float>(labels[i] == f % 3);
    }
  }
  Dataset dataset(int64_t batch = kB) const {
    host::Tensor xt = host::Tensor::Zeros(DType::F32, {kSamples, kIn});
    host::Tensor lt = host::Tensor::Zeros(DType::I32, {kSamples});
    std::memcpy(xt.data.data(), x.data(), x.size() * sizeof(float));
    std::memcpy(lt.data.data(), labels.data(), labels.size() * sizeof(int32_t));
    return Dataset::FromArrays({{"x", xt}, {"label", lt}}).Batch(batch, true);
  }
};

// kK micro-batches a step on one device, or with `ranks` data-parallel
// ranks of kB / ranks rows each, SyncBatchNorm.
std::unique_ptr<host::Model> MakeModel(DeviceLink& dev) {
  host::ModelOptions o;
  o.compile_cache = "";
  o.context.grad_accumulation_step = kK;
  auto m = host::Model::Create(Network(), host::LossSpec::SparseSoftmaxCrossEntropy(),
                               host::OptimizerSpec::Momentum(static_cast<float>(kLr), static_cast<float>(kMu)), dev, o);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? std::move(m).value() : nullptr;
}

std::unique_ptr<host::Model> MakeDataParallelModel(const std::vector<DeviceLink*>& links) {
  const int ranks = static_cast<int>(links.size());
  host::ModelOptions o;
  o.compile_cache = "";
  o.context.grad_accumulation_step = kK;
  o.context.mode = host::ParallelMode::DataParallel;
  o.context.device_num = ranks;
  o.context.gradients_mean = true;
  auto m =
      host::Model::Create(Network(kB / ranks, /*sync=*/true), host::LossSpec::SparseSoftmaxCrossEntropy(),
                          host::OptimizerSpec::Momentum(static_cast<float>(kLr), static_cast<float>(kMu)), links, o);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? std::move(m).value() : nullptr;
}

using State = std::map<std::string, std::vector<double>>;

State ReadState(host::Model& m) {
  auto state = m.ReadState();
  EXPECT_TRUE(state.ok()) << state.status().ToString();
  State out;
  if (!state.ok()) return out;
  for (const auto& [name, t] : *state) {
    std::vector<float> v(t.data.size() / sizeof(float));
    std::memcpy(v.data(), t.data.data(), t.data.size());
    out[name].assign(v.begin(), v.end());
  }
  return out;
}

// ---- the float64 reference ------------------------------------------------

// One micro-batch (rows [first, first + kB)): its loss; adds its gradients
// (of its mean loss) into `grad` and updates the moving statistics.
double MicroStep(const Data& d, int64_t first, State& s, State& grad) {
  const std::vector<double>&w1 = s["fc1.weight"], &w2 = s["fc2.weight"], &gamma = s["bn.gamma"], &beta = s["bn.beta"];
  std::vector<double> z(kB * kHidden, 0.0), xhat(kB * kHidden), h(kB * kHidden), mean(kHidden), rstd(kHidden);
  for (int64_t i = 0; i < kB; ++i)
    for (int64_t j = 0; j < kHidden; ++j)
      for (int64_t f = 0; f < kIn; ++f) z[i * kHidden + j] += d.x[(first + i) * kIn + f] * w1[f * kHidden + j];
  for (int64_t j = 0; j < kHidden; ++j) {
    double sum = 0, sq = 0;
    for (int64_t i = 0; i < kB; ++i) sum += z[i * kHidden + j];
    mean[j] = sum / kB;
    for (int64_t i = 0; i < kB; ++i) sq += std::pow(z[i * kHidden + j] - mean[j], 2);
    rstd[j] = 1.0 / std::sqrt(sq / kB + kEps);
    s["bn.moving_mean"][j] = kMomentum * s["bn.moving_mean"][j] + (1 - kMomentum) * mean[j];
    s["bn.moving_variance"][j] = kMomentum * s["bn.moving_variance"][j] + (1 - kMomentum) * sq / (kB - 1);
    for (int64_t i = 0; i < kB; ++i) {
      xhat[i * kHidden + j] = (z[i * kHidden + j] - mean[j]) * rstd[j];
      h[i * kHidden + j] = std::max(0.0, xhat[i * kHidden + j] * gamma[j] + beta[j]);
    }
  }
  double loss = 0;
  std::vector<double> dh(kB * kHidden, 0.0);
  for (int64_t i = 0; i < kB; ++i) {
    double logits[kClasses] = {}, mx = -1e300, zsum = 0;
    for (int64_t k = 0; k < kClasses; ++k) {
      for (int64_t j = 0; j < kHidden; ++j) logits[k] += h[i * kHidden + j] * w2[j * kClasses + k];
      mx = std::max(mx, logits[k]);
    }
    for (double l : logits) zsum += std::exp(l - mx);
    const int32_t label = d.labels[first + i];
    loss += -(logits[label] - mx - std::log(zsum)) / kB;
    for (int64_t k = 0; k < kClasses; ++k) {
      const double dl = (std::exp(logits[k] - mx) / zsum - (k == label ? 1.0 : 0.0)) / kB;
      for (int64_t j = 0; j < kHidden; ++j) {
        grad["fc2.weight"][j * kClasses + k] += h[i * kHidden + j] * dl;
        if (h[i * kHidden + j] > 0) dh[i * kHidden + j] += w2[j * kClasses + k] * dl;
      }
    }
  }
  // BatchNorm's backward: dx = gamma·rstd·(dy − mean(dy) − x̂·mean(dy·x̂)).
  for (int64_t j = 0; j < kHidden; ++j) {
    double sdy = 0, sdyx = 0;
    for (int64_t i = 0; i < kB; ++i) {
      sdy += dh[i * kHidden + j];
      sdyx += dh[i * kHidden + j] * xhat[i * kHidden + j];
    }
    grad["bn.gamma"][j] += sdyx;
    grad["bn.beta"][j] += sdy;
    for (int64_t i = 0; i < kB; ++i) {
      const double dz = gamma[j] * rstd[j] * (dh[i * kHidden + j] - sdy / kB - xhat[i * kHidden + j] * sdyx / kB);
      for (int64_t f = 0; f < kIn; ++f) grad["fc1.weight"][f * kHidden + j] += d.x[(first + i) * kIn + f] * dz;
    }
  }
  return loss;
}

// Optimizer step `step`: K micro-batches in order, then Momentum on the mean
// gradient. Returns the step's loss (the micro-batches' mean).
double ReferenceStep(const Data& d, int64_t step, State& s) {
  State grad;
  for (const char* p : {"fc1.weight", "fc2.weight", "bn.gamma", "bn.beta"}) grad[p].assign(s[p].size(), 0.0);
  double loss = 0;
  for (int64_t m = 0; m < kK; ++m) loss += MicroStep(d, ((step % kStepsPerEpoch) * kK + m) * kB, s, grad) / kK;
  for (auto& [name, g] : grad)
    for (size_t i = 0; i < g.size(); ++i) {
      double& v = s[name + "/momentum"][i];
      v = kMu * v + g[i] / kK;
      s[name][i] -= kLr * v;
    }
  return loss;
}

double WorstRelative(double got, double want) { return std::abs(got - want) / std::max(1.0, std::abs(want)); }

TEST(BatchNormAccumulation, FourMicroBatchesPerStepTrackAFloat64ReferenceOver100Steps) {
  const Data d;
  device::InProcessDevice dev(testing::OneThreadOptions());
  auto model = MakeModel(dev);
  ASSERT_NE(model, nullptr);
  State ref = ReadState(*model);  // the initial parameters and slots
  LossRecorder rec;
  SINKRT_ASSERT_OK(model->train(4, d.dataset(), {&rec}, /*dataset_sink_mode=*/false));
  ASSERT_EQ(rec.losses.size(), 4u * kStepsPerEpoch);
  double worst_loss = 0;
  for (size_t step = 0; step < rec.losses.size(); ++step)
    worst_loss = std::max(worst_loss, WorstRelative(rec.losses[step], ReferenceStep(d, step, ref)));
  EXPECT_LT(worst_loss, 1e-5);
  EXPECT_LT(rec.losses.back(), rec.losses.front());
  const State got = ReadState(*model);
  ASSERT_EQ(got.size(), ref.size());
  double worst_state = 0;
  for (const auto& [name, want] : ref) {
    ASSERT_TRUE(got.count(name)) << name;
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_LT(WorstRelative(got.at(name)[i], want[i]), 1e-5) << name << "[" << i << "]";
      worst_state = std::max(worst_state, WorstRelative(got.at(name)[i], want[i]));
    }
  }
  std::printf("[ info ] worst relative difference: losses %.2e, state %.2e\n", worst_loss, worst_state);
}

// Two data-parallel ranks of 4 rows, SyncBatchNorm, 4 micro-batches a step:
// micro-batch k's statistics cover both ranks' rows (Dataset::ShardBelowBatch
// interleaves them), so the run is the one device's above with micro-batches
// of 8, within 1e-5 (the ranks' sums add in another order).
TEST(BatchNormAccumulation, DataParallelSyncBatchNormTracksTheOneDeviceRun) {
  const Data d;
  device::InProcessDevice dev(testing::OneThreadOptions());
  auto one = MakeModel(dev);
  testing::InProcessWorld world(2);
  auto dp = MakeDataParallelModel(world.links);
  ASSERT_TRUE(one && dp);
  LossRecorder want, got;
  SINKRT_ASSERT_OK(one->train(4, d.dataset(), {&want}, false));
  SINKRT_ASSERT_OK(dp->train(4, d.dataset(kB / 2), {&got}, false));
  ASSERT_EQ(want.losses.size(), 4u * kStepsPerEpoch);
  ASSERT_EQ(got.losses.size(), want.losses.size());
  double worst_loss = 0, worst_state = 0;
  for (size_t i = 0; i < want.losses.size(); ++i)
    worst_loss = std::max(worst_loss, WorstRelative(got.losses[i], want.losses[i]));
  const State a = ReadState(*one);
  for (uint32_t r = 0; r < 2; ++r) {
    auto b = dp->ReadState(r);
    SINKRT_ASSERT_OK(b);
    ASSERT_EQ(b->size(), a.size());
    for (const auto& [name, t] : *b) {
      ASSERT_TRUE(a.count(name)) << name;
      const auto* v = reinterpret_cast<const float*>(t.data.data());
      for (size_t i = 0; i < a.at(name).size(); ++i)
        worst_state = std::max(worst_state, WorstRelative(v[i], a.at(name)[i]));
    }
  }
  std::printf("[ info ] 2 ranks x 4 micro-batches, SyncBatchNorm: worst relative loss %.2e, state %.2e\n", worst_loss,
              worst_state);
  EXPECT_LT(worst_loss, 1e-5);
  EXPECT_LT(worst_state, 1e-5);
}

// A checkpoint after one epoch (25 steps, 100 moving-statistics updates):
// the resumed run is the run that never stopped, bit for bit, the moving
// statistics included (the straight run one step per launch, the halves
// sunk: a sink runs the steps a launch would).
TEST(BatchNormAccumulation, CheckpointMidRunResumesBitwise) {
  const Data d;
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "sinkrt_bn_accumulation_ckpt_test";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "bn.ckpt").string();
  device::InProcessDevice straight_dev, first_dev, resumed_dev;
  auto straight = MakeModel(straight_dev), first = MakeModel(first_dev), resumed = MakeModel(resumed_dev);
  ASSERT_TRUE(straight && first && resumed);
  SINKRT_ASSERT_OK(straight->train(2, d.dataset(), {}, false));
  SINKRT_ASSERT_OK(first->train(1, d.dataset(), {}, true, -1));
  ASSERT_TRUE(host::SaveCheckpoint(path, *first, {.epoch = 1, .step = kStepsPerEpoch}).ok());
  host::CheckpointInfo info;
  SINKRT_ASSERT_OK(host::LoadCheckpoint(path, *resumed, &info));
  const State mid = ReadState(*resumed);
  EXPECT_EQ(mid, ReadState(*first));
  EXPECT_NE(mid.at("bn.moving_mean"), std::vector<double>(kHidden, 0.0));
  SINKRT_ASSERT_OK(resumed->train(2, d.dataset(), {}, true, -1, /*initial_epoch=*/1));
  EXPECT_EQ(ReadState(*resumed), ReadState(*straight));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace sinkrt
