// Built-in networks, without a loss: Model::Create appends MindSpore's
// SoftmaxCrossEntropyWithLogits(sparse=True) on outputs()[0] against a
// "label" input (model.h), so these graphs read only the "image" column.
//
//   auto net = MakeMlpNetwork(64);                     // 784-512-256-10
//   auto model = Model::Create(std::move(net), LossSpec::SparseSoftmaxCrossEntropy(),
//                              OptimizerSpec::Momentum(0.01f, 0.9f), device);
//
// Parameters are named "<layer>.weight" / "<layer>.bias" (fc1, conv1, ...),
// weights He-uniform from seed + layer index, biases zero, so two builds with
// one seed start from identical parameters on every platform. Builder errors
// (a batch below 1, fewer than two widths) are in the graph's status().
#pragma once

#include <cstdint>
#include <vector>

#include "sinkrt/host/graph.h"

namespace sinkrt::host {

// A ReLU MLP on input "image" f32 [batch, widths[0]]: one fully connected
// layer per consecutive pair of widths, weights [in, out], ReLU between
// layers and none after the last; outputs()[0] is the logits
// [batch, widths.back()]. Layer k (from 1) is "fck", seeded seed + k - 1.
Graph MakeMlpNetwork(int64_t batch, std::vector<int64_t> widths = {784, 512, 256, 10}, uint64_t seed = 1);

// LeNet-5 as MindSpore's model zoo trains it on 28x28 MNIST, on input
// "image" f32 [batch, 1, 28, 28] (NCHW): conv5x5(6, pad 2)-relu-maxpool2 ->
// conv5x5(16)-relu-maxpool2 -> flatten(400) -> fc 120 -> relu -> fc 84 ->
// relu -> fc 10. conv1, conv2, fc1..fc3 are seeded seed .. seed + 4.
Graph MakeLeNetNetwork(int64_t batch, uint64_t seed = 1);

}  // namespace sinkrt::host
