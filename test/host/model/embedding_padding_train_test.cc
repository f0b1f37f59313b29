// nn.Embedding's padding_idx through Model, as MindSpore does it: the row
// starts at zero, the other rows are the table without padding_idx bit for
// bit, and the row's gradient is NOT masked (PyTorch's would be), so it
// trains once an index selects it.
#include <gtest/gtest.h>

#include <cstring>
#include <optional>
#include <vector>

#include "sinkrt/host/model.h"
#include "sinkrt/host/nn.h"
#include "support/model_fixtures.h"
#include "support/test_util.h"

namespace sinkrt {
namespace {

using host::Model;
using host::OptimizerSpec;

constexpr int64_t kBatch = 8, kVocab = 6, kDim = 4;
constexpr int64_t kPad = 2;     // selected by the data
constexpr int64_t kUnused = 5;  // never selected

host::Graph Net(std::optional<int64_t> padding_idx) {
  host::Graph g("emb");
  const host::TensorId ids = g.Input("ids", {kBatch}, DType::I32);
  const host::TensorId e = host::Embedding(g, ids, kVocab, kDim, "tok", 5, padding_idx);
  const host::TensorId w = g.Param("fc.weight", {kDim, 3}, host::InitSpec::HeUniform(2));
  g.AddOutput(g.MatMul(e, w));
  EXPECT_TRUE(g.status().ok()) << g.status().ToString();
  return g;
}

host::Dataset Data() {
  host::Tensor ids = host::Tensor::Zeros(DType::I32, {32}), labels = host::Tensor::Zeros(DType::I32, {32});
  for (int32_t i = 0; i < 32; ++i) {
    const int32_t id = i % 5, label = (i * 7) % 3;  // ids 0..4: kPad is used, kUnused never
    std::memcpy(ids.data.data() + i * 4, &id, 4);
    std::memcpy(labels.data.data() + i * 4, &label, 4);
  }
  return host::Dataset::FromArrays({{"ids", ids}, {"label", labels}}).Batch(kBatch, true);
}

std::vector<float> Table(Model& m) {
  auto state = m.ReadState();
  EXPECT_TRUE(state.ok()) << state.status().ToString();
  if (!state.ok()) return {};
  for (const auto& [name, t] : *state)
    if (name == "tok.embedding_table") {
      std::vector<float> v(t.data.size() / 4);
      std::memcpy(v.data(), t.data.data(), t.data.size());
      return v;
    }
  ADD_FAILURE() << "no tok.embedding_table in the state";
  return {};
}

std::unique_ptr<Model> Make(DeviceLink& dev, std::optional<int64_t> padding_idx) {
  auto m = Model::Create(Net(padding_idx), host::LossSpec::SparseSoftmaxCrossEntropy(), OptimizerSpec::Sgd(0.5f), dev);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? std::move(m).value() : nullptr;
}

std::vector<float> Row(const std::vector<float>& t, int64_t r) {
  return {t.begin() + r * kDim, t.begin() + (r + 1) * kDim};
}

TEST(EmbeddingPaddingIdx, RowStartsAtZeroAndTheRestIsTheUnpaddedTable) {
  testing::CountingDevice pad_dev, plain_dev;
  auto padded = Make(pad_dev, kPad);
  auto plain = Make(plain_dev, std::nullopt);
  ASSERT_TRUE(padded && plain);
  const std::vector<float> a = Table(*padded), b = Table(*plain);
  ASSERT_EQ(a.size(), static_cast<size_t>(kVocab * kDim));
  ASSERT_EQ(b.size(), a.size());
  EXPECT_EQ(Row(a, kPad), std::vector<float>(kDim, 0.0f));
  EXPECT_NE(Row(b, kPad), std::vector<float>(kDim, 0.0f));
  for (int64_t r = 0; r < kVocab; ++r) {
    if (r != kPad) {
      EXPECT_EQ(Row(a, r), Row(b, r)) << "row " << r;
    }
  }
}

TEST(EmbeddingPaddingIdx, TheRowsGradientIsNotMaskedAsInMindSpore) {
  testing::CountingDevice dev;
  auto m = Make(dev, kPad);
  ASSERT_TRUE(m);
  const std::vector<float> before = Table(*m);
  SINKRT_ASSERT_OK(m->train(1, Data(), {}, /*dataset_sink_mode=*/true));
  const std::vector<float> after = Table(*m);
  ASSERT_EQ(after.size(), before.size());
  EXPECT_NE(Row(after, kPad), std::vector<float>(kDim, 0.0f));  // PyTorch would keep it zero
  EXPECT_EQ(Row(after, kUnused), Row(before, kUnused));         // no index selects it: no gradient
}

TEST(EmbeddingPaddingIdx, OutOfRangeIsRefusedWithMindSporesRange) {
  host::Graph g;
  host::Embedding(g, g.Input("ids", {3}, DType::I32), 6, 4, "tok", 1, 6);
  EXPECT_FALSE(g.status().ok());
  EXPECT_EQ(g.status().message(), "Embedding 'tok': padding_idx must be in [0, 6), got 6");
  host::Graph h;
  host::Embedding(h, h.Input("ids", {3}, DType::I32), 6, 4, "tok", 1, -1);
  EXPECT_EQ(h.status().message(), "Embedding 'tok': padding_idx must be in [0, 6), got -1");
}

}  // namespace
}  // namespace sinkrt
