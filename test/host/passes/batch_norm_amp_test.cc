// BatchNorm under amp O2 with loss scaling (docs/guide/normalization.md):
// MindSpore's O2 keeps BatchNorm in f32 (nn.BatchNorm1d/2d/3d are its amp
// black list, mindspore/train/amp.py), so the convolutions around it run in
// bf16 and Casts bring their outputs to f32 for it; its gamma, beta, moving
// statistics, batch statistics and gradients are f32 buffers. A conv + BN
// net trained 100 steps at O2 with a dynamic loss scale tracks the f32 run
// (the tolerance below: bf16 keeps 8 significant bits).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "host/src/util/schema_enums.h"
#include "sinkrt/device/in_process_device.h"
#include "sinkrt/fb/task_stream_generated.h"
#include "sinkrt/host/model.h"
#include "support/in_process_world.h"
#include "support/test_util.h"

namespace sinkrt {
namespace {

using host::AmpLevel;
using host::Dataset;
using host::Graph;
using host::InitSpec;
using host::Model;
using host::TensorId;
using testing::LossRecorder;

constexpr int64_t kBatch = 16, kSide = 6, kChannels = 4, kClasses = 3;
constexpr int kSteps = 100;

// image [16, 2, 6, 6] -> conv1 -> bn1 -> relu -> conv2 -> bn2 -> relu ->
// flatten -> fc [144, 3].
Graph Network() {
  Graph g("conv_bn_amp");
  TensorId h = g.Input("image", {kBatch, 2, kSide, kSide});
  int64_t in = 2;
  for (int i = 1; i <= 2; ++i) {
    const std::string n = std::to_string(i);
    const TensorId w = g.Param("conv" + n + ".weight", {kChannels, in, 3, 3}, InitSpec::HeUniform(40 + i));
    h = g.Relu(host::BatchNorm2d(g, "bn" + n, g.Conv2D(h, w, 1, 1)));
    in = kChannels;
  }
  const int64_t features = kChannels * kSide * kSide;
  const TensorId w = g.Param("fc.weight", {features, kClasses}, InitSpec::XavierUniform(43));
  g.AddOutput(g.MatMul(g.Reshape(h, {kBatch, features}), w));
  return g;
}

// Inputs far from mean 0 / variance 1, a third of the labels at random (the
// loss stays well above 0).
Dataset Data() {
  const int64_t samples = int64_t{kSteps} * kBatch, features = 2 * kSide * kSide;
  std::mt19937 rng(37);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  host::Tensor x = host::Tensor::Zeros(DType::F32, {samples, 2, kSide, kSide});
  host::Tensor l = host::Tensor::Zeros(DType::I32, {samples});
  auto* xs = reinterpret_cast<float*>(x.data.data());
  auto* ls = reinterpret_cast<int32_t*>(l.data.data());
  for (int64_t i = 0; i < samples; ++i) {
    const int32_t rule = static_cast<int32_t>((i * 7 + i / 4) % kClasses);
    for (int64_t f = 0; f < features; ++f)
      xs[i * features + f] = 0.5f + 1.5f * u(rng) + 0.8f * static_cast<float>(rule == (f / 9) % kClasses);
    ls[i] = u(rng) < -0.33f ? static_cast<int32_t>(rng() % kClasses) : rule;
  }
  return Dataset::FromArrays({{"image", x}, {"label", l}}).Batch(kBatch, true);
}

std::unique_ptr<Model> MakeModel(device::InProcessDevice& dev, AmpLevel level) {
  host::ModelOptions o;
  o.compile_cache = "";
  o.amp_level = level;
  // A window of 20: the scale doubles 4 times over the run.
  if (level != AmpLevel::O0) o.loss_scale_manager = host::LossScaleManager::Dynamic(65536.0f, 2.0f, 20);
  auto m = Model::Create(Network(), host::LossSpec::SparseSoftmaxCrossEntropy(),
                         host::OptimizerSpec::Momentum(0.005f, 0.9f), dev, o);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? std::move(m).value() : nullptr;
}

// Every BatchNorm-family kernel of the train program reads and writes f32
// buffers only, and the convolutions compute in bf16.
TEST(BatchNormAmp, O2RunsBatchNormInF32BetweenBf16Convolutions) {
  device::InProcessDevice dev(testing::OneThreadOptions());
  auto model = MakeModel(dev, AmpLevel::O2);
  ASSERT_NE(model, nullptr);
  const fb::TaskStream* stream = model->compiled().stream.root();
  std::map<fb::OpCode, int> seen;
  for (const fb::Program* p : *stream->programs())
    for (const fb::Stream* s : *p->streams())
      for (const fb::Task* t : *s->tasks()) {
        const fb::KernelTask* k = t->body_as_KernelTask();
        if (!k) continue;
        const fb::OpCode op = k->op();
        const bool bn =
            op == fb::OpCode::BatchNorm || op == fb::OpCode::BatchNormGrad || op == fb::OpCode::BatchNormInfer;
        if (!bn && op != fb::OpCode::Conv2D) continue;
        ++seen[op];
        const fb::DType want = bn ? fb::DType::F32 : fb::DType::BF16;
        for (uint32_t b : *k->inputs()) EXPECT_EQ(stream->buffers()->Get(b)->dtype(), want) << fb::EnumNameOpCode(op);
        for (uint32_t b : *k->outputs()) EXPECT_EQ(stream->buffers()->Get(b)->dtype(), want) << fb::EnumNameOpCode(op);
      }
  EXPECT_EQ(seen[fb::OpCode::BatchNorm], 2);
  EXPECT_EQ(seen[fb::OpCode::BatchNormGrad], 2);
  EXPECT_GE(seen[fb::OpCode::BatchNormInfer], 2);  // eval, predict
  EXPECT_GE(seen[fb::OpCode::Conv2D], 2);
  // The checkpointed state: every BatchNorm tensor f32.
  auto state = model->ReadState();
  SINKRT_ASSERT_OK(state);
  int bn_tensors = 0;
  for (const auto& [name, t] : *state)
    if (name.rfind("bn", 0) == 0 && name.find('/') == std::string::npos) {
      EXPECT_EQ(t.dtype, DType::F32) << name;
      ++bn_tensors;
    }
  EXPECT_EQ(bn_tensors, 8);  // gamma, beta, moving mean and variance of 2
}

struct Trained {
  std::vector<double> losses;
  std::map<std::string, std::vector<float>> state;
};

Trained Train(AmpLevel level) {
  device::InProcessDevice dev(testing::OneThreadOptions());
  auto model = MakeModel(dev, level);
  if (!model) return {};
  LossRecorder rec;
  const Status st = model->train(1, Data(), {&rec}, /*dataset_sink_mode=*/false);
  EXPECT_TRUE(st.ok()) << st.ToString();
  Trained out{rec.losses, {}};
  auto state = model->ReadState();
  EXPECT_TRUE(state.ok()) << state.status().ToString();
  if (!state.ok()) return out;
  for (const auto& [name, t] : *state) {
    const auto* v = reinterpret_cast<const float*>(t.data.data());
    out.state[name].assign(v, v + t.data.size() / sizeof(float));
  }
  return out;
}

// Tolerances (measured: 1.0 % and 1.9 %): each step's loss within 3 % of
// f32's, the moving statistics within 5 % (relative to max(1, |value|)).
// The convolutions' bf16 operands keep 8 significant bits; BatchNorm adds
// no rounding of its own. The moving means drift most: BatchNorm cancels a
// shift of its input, so nothing in the loss holds the convolution
// weights' sum, and the two runs' rounding walks it apart; a mean far from
// 0 in the images multiplies that sum (2.0 instead of 0.5 here: 35 %).
TEST(BatchNormAmp, ConvBatchNormAtO2WithDynamicLossScaleTracksF32) {
  const Trained f32 = Train(AmpLevel::O0), o2 = Train(AmpLevel::O2);
  ASSERT_EQ(f32.losses.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(o2.losses.size(), f32.losses.size());
  double worst_loss = 0, worst_stats = 0;
  for (size_t i = 0; i < f32.losses.size(); ++i) {
    ASSERT_TRUE(std::isfinite(o2.losses[i])) << i;
    worst_loss = std::max(worst_loss, std::abs(o2.losses[i] - f32.losses[i]) / f32.losses[i]);
  }
  for (const char* name : {"bn1.moving_mean", "bn1.moving_variance", "bn2.moving_mean", "bn2.moving_variance"}) {
    ASSERT_TRUE(f32.state.count(name) && o2.state.count(name)) << name;
    const std::vector<float>&a = f32.state.at(name), &b = o2.state.at(name);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i)
      worst_stats = std::max(worst_stats, std::abs(double{a[i]} - b[i]) / std::max(1.0, std::abs(double{a[i]})));
  }
  std::printf("[ info ] O2 vs f32 over %d steps: worst relative loss %.4f, moving statistics %.4f\n", kSteps,
              worst_loss, worst_stats);
  EXPECT_LT(worst_loss, 0.03);
  EXPECT_LT(worst_stats, 0.05);
  EXPECT_LT(o2.losses.back(), o2.losses.front());
}

}  // namespace
}  // namespace sinkrt
