#include "support/test_models.h"

#include <cmath>
#include <random>
#include <string>

namespace sinkrt::testing {

using host::Graph;
using host::InitSpec;
using host::TensorId;

Graph MakeMlp(int64_t batch, std::vector<int64_t> widths, uint64_t seed) {
  Graph g("mlp");
  TensorId x = g.Input("image", {batch, widths.front()});
  TensorId label = g.Input("label", {batch}, DType::I32);
  TensorId h = x;
  for (size_t i = 0; i + 1 < widths.size(); ++i) {
    std::string n = "fc" + std::to_string(i + 1);
    TensorId w = g.Param(n + ".weight", {widths[i], widths[i + 1]}, InitSpec::HeUniform(seed + i));
    TensorId b = g.Param(n + ".bias", {widths[i + 1]}, InitSpec::Zeros());
    h = g.BiasAdd(g.MatMul(h, w), b);
    if (i + 2 < widths.size()) h = g.Relu(h);
  }
  g.AddOutput(h);
  g.SetLoss(g.SparseSoftmaxCrossEntropy(h, label));
  return g;
}

Graph MakeLeNet(int64_t batch, uint64_t seed) {
  Graph g("lenet");
  TensorId x = g.Input("image", {batch, 1, 28, 28});
  TensorId label = g.Input("label", {batch}, DType::I32);
  TensorId c1w = g.Param("conv1.weight", {6, 1, 5, 5}, InitSpec::HeUniform(seed));
  TensorId c1b = g.Param("conv1.bias", {6}, InitSpec::Zeros());
  TensorId h = g.MaxPool2D(g.Relu(g.BiasAdd(g.Conv2D(x, c1w, 1, 2), c1b)), 2, 2);
  TensorId c2w = g.Param("conv2.weight", {16, 6, 5, 5}, InitSpec::HeUniform(seed + 1));
  TensorId c2b = g.Param("conv2.bias", {16}, InitSpec::Zeros());
  h = g.MaxPool2D(g.Relu(g.BiasAdd(g.Conv2D(h, c2w, 1, 0), c2b)), 2, 2);
  h = g.Flatten(h);  // 16 * 5 * 5 = 400
  const int64_t widths[] = {400, 120, 84, 10};
  for (int i = 0; i < 3; ++i) {
    std::string n = "fc" + std::to_string(i + 1);
    TensorId w = g.Param(n + ".weight", {widths[i], widths[i + 1]}, InitSpec::HeUniform(seed + 2 + i));
    TensorId b = g.Param(n + ".bias", {widths[i + 1]}, InitSpec::Zeros());
    h = g.BiasAdd(g.MatMul(h, w), b);
    if (i < 2) h = g.Relu(h);
  }
  g.AddOutput(h);
  g.SetLoss(g.SparseSoftmaxCrossEntropy(h, label));
  return g;
}

SyntheticData MakeSyntheticData(int64_t n, int64_t features, int classes, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> centers(static_cast<size_t>(classes * features));
  for (float& c : centers) c = normal(rng);
  SyntheticData d;
  d.features = features;
  d.images.resize(static_cast<size_t>(n * features));
  d.labels.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    int32_t c = static_cast<int32_t>(rng() % static_cast<uint64_t>(classes));
    d.labels[i] = c;
    for (int64_t f = 0; f < features; ++f)
      d.images[i * features + f] = centers[c * features + f] + 0.8f * normal(rng);
  }
  return d;
}

}  // namespace sinkrt::testing
