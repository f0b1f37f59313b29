/// \file
/// Built-in networks, without a loss: Model::Create appends MindSpore's
/// SoftmaxCrossEntropyWithLogits(sparse=True) on outputs()[0] against a
/// "label" input (model.h), so these graphs read only the "image" column.
///
/// ~~~
///   auto net = MakeMlpNetwork(64);                     // 784-512-256-10
///   auto model = Model::Create(std::move(net), LossSpec::SparseSoftmaxCrossEntropy(),
///                              OptimizerSpec::Momentum(0.01f, 0.9f), device);
/// ~~~
///
/// Parameters are named "<layer>.weight" / "<layer>.bias" (fc1, conv1, ...),
/// weights He-uniform from seed + layer index, biases zero, so two builds with
/// one seed start from identical parameters on every platform. Builder errors
/// (a batch below 1, fewer than two widths) are in the graph's status().
#pragma once

#include <cstdint>
#include <vector>

#include "sinkrt/host/graph.h"

namespace sinkrt::host {

/// A ReLU MLP on input "image" f32 [batch, widths[0]]: one fully connected
/// layer per consecutive pair of widths, weights [in, out], ReLU between
/// layers and none after the last; outputs()[0] is the logits
/// [batch, widths.back()]. Layer k (from 1) is "fck", seeded seed + k - 1.
Graph MakeMlpNetwork(int64_t batch, std::vector<int64_t> widths = {784, 512, 256, 10}, uint64_t seed = 1);

/// LeNet-5 as MindSpore's model zoo trains it on 28x28 MNIST, on input
/// "image" f32 [batch, 1, 28, 28] (NCHW): conv5x5(6, pad 2)-relu-maxpool2 ->
/// conv5x5(16)-relu-maxpool2 -> flatten(400) -> fc 120 -> relu -> fc 84 ->
/// relu -> fc 10. conv1, conv2, fc1..fc3 are seeded seed .. seed + 4.
Graph MakeLeNetNetwork(int64_t batch, uint64_t seed = 1);

/// A small Vision Transformer on input "image" f32 [batch, 784] (28x28,
/// row-major), outputs()[0] the logits [batch, 10]:
/// ~~~
///   patchify in the graph (Reshape [B,4,7,4,7], Transpose (0,1,3,2,4),
///   Reshape): 16 patches of 7x7 = 49 values in row-major patch order;
///   "patch" Linear(49->64) plus a learned "pos_embed" [16, 64];
///   2 pre-LayerNorm blocks "block0", "block1", each
///     x += attn.proj(softmax(q k^T / 4) v) over attn.qkv = Linear(64->192)
///          of ln1(x), 4 heads of 16, head-major: head h owns columns
///          48h..48h+47 of qkv, its q, k and v 16 columns each in that
///          order (so a column split hands each rank whole heads)
///     x += mlp.fc2(gelu_tanh(mlp.fc1(ln2(x)))), 64 -> 256 -> 64;
///   a final LayerNorm "norm", the mean over the 16 tokens, "head"
///   Linear(64->10).
/// ~~~
/// Parameters are named after their layer ("block0.attn.qkv.weight",
/// "block1.ln2.gamma", ...), and ops after it too ("block0.attn.qkv.matmul":
/// NameScope), which is how shard strategies and pipeline stages name them.
/// Initialisers (seed S): Linear weights [in, out] XavierUniform — patch S,
/// block i's qkv, proj, fc1, fc2 S+2+4i .. S+5+4i, head S+10 — biases zero;
/// pos_embed Uniform(-0.035, 0.035) from S+1 (standard deviation 0.02, as
/// ViT's truncated normal); LayerNorm gamma one, beta zero (epsilon 1e-5).
/// bench/pytorch_ref builds the same network in PyTorch from these.
Graph MakeVitNetwork(int64_t batch, uint64_t seed = 1);

/// The same recipe at another size (the defaults are the ViT above): width
/// `dim` in `heads` heads (which must divide it), MLP width `hidden`,
/// `blocks` blocks; the head's seed is S+2+4*blocks, after the blocks'.
/// E.g. the "wide ViT" of bench/RESULTS.md: {.dim = 256, .heads = 4, .hidden =
/// 1024, .blocks = 4}.
struct VitConfig {
  int64_t dim = 64;      ///< model width
  int64_t heads = 4;     ///< attention heads
  int64_t hidden = 256;  ///< MLP width
  int blocks = 2;        ///< transformer blocks
  /// Dropout's drop probability (nn.Dropout(p), docs/guide/dropout.md) at
  /// the standard ViT places: after the position embedding, on the
  /// attention probabilities, after the attention projection, after the
  /// MLP's GELU and after its second Linear. 0 (the default): none, the
  /// graph is the one without dropout. Its seed is the network's.
  float dropout = 0;
};
/// MakeVitNetwork at the size `config` gives.
Graph MakeVitNetwork(int64_t batch, uint64_t seed, const VitConfig& config);

}  // namespace sinkrt::host
