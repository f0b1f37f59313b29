#include "support/test_models.h"

#include <cmath>
#include <random>
#include <string>
#include <utility>

#include "sinkrt/host/model_zoo.h"

namespace sinkrt::testing {

using host::Graph;
using host::TensorId;

namespace {

// The built-in network (host/model_zoo.h) with the loss Model would append:
// sparse softmax cross-entropy of outputs()[0] against an i32 "label" input.
Graph WithLoss(Graph g) {
  if (!g.status().ok() || g.outputs().empty()) return g;
  const TensorId logits = g.outputs().front();
  const TensorId label = g.Input("label", {g.tensor(logits).shape.at(0)}, DType::I32);
  g.SetLoss(g.SparseSoftmaxCrossEntropy(logits, label));
  return g;
}

}  // namespace

Graph MakeMlp(int64_t batch, std::vector<int64_t> widths, uint64_t seed) {
  return WithLoss(host::MakeMlpNetwork(batch, std::move(widths), seed));
}

Graph MakeLeNet(int64_t batch, uint64_t seed) { return WithLoss(host::MakeLeNetNetwork(batch, seed)); }

Graph MakeVit(int64_t batch, uint64_t seed) { return WithLoss(host::MakeVitNetwork(batch, seed)); }

Graph MakeVit(int64_t batch, uint64_t seed, const host::VitConfig& config) {
  return WithLoss(host::MakeVitNetwork(batch, seed, config));
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
    for (int64_t f = 0; f < features; ++f) d.images[i * features + f] = centers[c * features + f] + 0.8f * normal(rng);
  }
  return d;
}

void RandomizeQuarterOfLabels(SyntheticData& d, int classes) {
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (int32_t& label : d.labels) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    if ((x >> 33) % 4 == 0) label = static_cast<int32_t>((x >> 40) % static_cast<uint64_t>(classes));
  }
}

}  // namespace sinkrt::testing
