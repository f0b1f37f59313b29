// Gather in a real sunk training step: an embedding model trains through
// Model::train on an in-process device, and an index outside the table
// fails the step with the kernel's error naming the row and the value, as
// an out-of-range label does.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "sinkrt/device/in_process_device.h"
#include "sinkrt/host/model.h"

namespace sinkrt {
namespace {

using host::Dataset;
using host::Graph;
using host::InitSpec;
using host::TensorId;

constexpr int64_t kBatch = 8, kVocab = 8, kWidth = 6, kClasses = 3, kSamples = 32;

// ids [B] i32 -> embedding [V, E] -> LayerNorm -> fc [E, C] -> logits.
Graph EmbeddingNetwork() {
  Graph g("embedding");
  const TensorId ids = g.Input("ids", {kBatch}, DType::I32);
  const TensorId table = g.Param("embed.weight", {kVocab, kWidth}, InitSpec::Normal(0.0f, 1.0f, 1));
  const TensorId gamma = g.Param("ln.gamma", {kWidth}, InitSpec::Constant(1.0f));
  const TensorId beta = g.Param("ln.beta", {kWidth}, InitSpec::Zeros());
  const TensorId w = g.Param("fc.weight", {kWidth, kClasses}, InitSpec::XavierUniform(2));
  g.AddOutput(g.MatMul(g.LayerNorm(g.Gather(table, ids), gamma, beta), w));
  return g;
}

// Sample i has id i % V and label id % C, except where `bad` says.
Dataset Data(int64_t bad_sample = -1, int32_t bad_id = 0) {
  host::Tensor ids = host::Tensor::Zeros(DType::I32, {kSamples});
  host::Tensor labels = host::Tensor::Zeros(DType::I32, {kSamples});
  for (int64_t i = 0; i < kSamples; ++i) {
    ids.as<int32_t>()[i] = static_cast<int32_t>(i % kVocab);
    labels.as<int32_t>()[i] = static_cast<int32_t>((i % kVocab) % kClasses);
  }
  if (bad_sample >= 0) ids.as<int32_t>()[bad_sample] = bad_id;
  return Dataset::FromArrays({{"ids", ids}, {"label", labels}}).Batch(kBatch, true);
}

std::unique_ptr<host::Model> MakeModel(DeviceLink& dev) {
  auto m = host::Model::Create(EmbeddingNetwork(), host::LossSpec::SparseSoftmaxCrossEntropy(),
                               host::OptimizerSpec::Adam(0.01f), dev);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? std::move(m).value() : nullptr;
}

TEST(GatherKernelInTraining, EmbeddingModelTrainsSunk) {
  device::InProcessDevice dev;
  auto model = MakeModel(dev);
  ASSERT_NE(model, nullptr);
  auto before = model->eval(Data());
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  Status st = model->train(10, Data(), {}, /*dataset_sink_mode=*/true, -1);
  ASSERT_TRUE(st.ok()) << st.ToString();
  auto after = model->eval(Data());
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_LT(after->loss, before->loss);
}

TEST(GatherKernelInTraining, IndexOutOfRangeFailsTheStepNamingRowAndValue) {
  device::InProcessDevice dev;
  auto model = MakeModel(dev);
  ASSERT_NE(model, nullptr);
  // Sample 19 is row 3 of batch 2.
  Status st = model->train(1, Data(19, 9), {}, /*dataset_sink_mode=*/true, -1);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("Gather: index 9 in row 3 is outside [0, 8)"), std::string::npos) << st.message();
  Status negative = model->train(1, Data(5, -4), {}, /*dataset_sink_mode=*/true, -1);
  ASSERT_FALSE(negative.ok());
  EXPECT_NE(negative.message().find("Gather: index -4 in row 5 is outside [0, 8)"), std::string::npos)
      << negative.message();
}

}  // namespace
}  // namespace sinkrt
