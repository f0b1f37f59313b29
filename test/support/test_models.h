// Example networks shared by tests and benchmarks, built through the public
// Graph API exactly as an application would.
#pragma once

#include <cstdint>
#include <vector>

#include "sinkrt/host/graph.h"
#include "sinkrt/host/model_zoo.h"

namespace sinkrt::testing {

// host::MakeMlpNetwork (784-512-256-10 or `widths`) with sparse softmax
// cross-entropy. Inputs "image" [batch, widths[0]] f32 and "label" [batch]
// i32; weights [in, out] He-uniform, biases zero. Logits are an eval output.
host::Graph MakeMlp(int64_t batch, std::vector<int64_t> widths = {784, 512, 256, 10}, uint64_t seed = 1);

// host::MakeLeNetNetwork on [batch, 1, 28, 28] (conv5x5(6, pad 2)-relu-
// maxpool2 -> conv5x5(16)-relu-maxpool2 -> flatten -> 120 -> 84 -> 10) with
// the same loss and "label" input.
host::Graph MakeLeNet(int64_t batch, uint64_t seed = 1);

// host::MakeVitNetwork (the small ViT on "image" [batch, 784]) with the same
// loss and "label" input.
host::Graph MakeVit(int64_t batch, uint64_t seed = 1);
// The same at the size and dropout `config` gives.
host::Graph MakeVit(int64_t batch, uint64_t seed, const host::VitConfig& config);

// A learnable synthetic classification set: `classes` Gaussian blobs in
// `features` dimensions. Deterministic in seed.
struct SyntheticData {
  int64_t features = 0;
  std::vector<float> images;    // n × features
  std::vector<int32_t> labels;  // n
  int64_t size() const { return static_cast<int64_t>(labels.size()); }
};
SyntheticData MakeSyntheticData(int64_t n, int64_t features, int classes, uint64_t seed);

// Replaces about a quarter of the labels by random ones of `classes`
// (deterministic): the loss then stays near 1 instead of falling to ~1e-4,
// where a relative comparison of two runs would see float32's rounding of
// the loss itself rather than the arithmetic.
void RandomizeQuarterOfLabels(SyntheticData& d, int classes = 10);

}  // namespace sinkrt::testing
