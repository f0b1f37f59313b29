#include "sinkrt/host/model_zoo.h"

#include <cmath>
#include <string>

namespace sinkrt::host {
namespace {

// x [N, in] -> x W + b, W [in, out] He-uniform, b zero.
TensorId Dense(Graph& g, TensorId x, const std::string& name, int64_t in, int64_t out, uint64_t seed) {
  TensorId w = g.Param(name + ".weight", {in, out}, InitSpec::HeUniform(seed));
  TensorId b = g.Param(name + ".bias", {out}, InitSpec::Zeros());
  return g.BiasAdd(g.MatMul(x, w), b);
}

// x [rows, in] -> x W + b in scope `name`, W [in, out] XavierUniform.
TensorId Linear(Graph& g, TensorId x, const std::string& name, int64_t in, int64_t out, uint64_t seed) {
  NameScope scope(g, name);
  const std::string prefix = g.name_scope();
  TensorId w = g.Param(prefix + ".weight", {in, out}, InitSpec::XavierUniform(seed));
  TensorId b = g.Param(prefix + ".bias", {out}, InitSpec::Zeros());
  return g.BiasAdd(g.MatMul(x, w), b);
}

// LayerNorm over the last axis of x in scope `name`, gamma one, beta zero.
TensorId LayerNormLayer(Graph& g, TensorId x, const std::string& name, int64_t dim) {
  NameScope scope(g, name);
  const std::string prefix = g.name_scope();
  TensorId gamma = g.Param(prefix + ".gamma", {dim}, InitSpec::Constant(1.0f));
  TensorId beta = g.Param(prefix + ".beta", {dim}, InitSpec::Zeros());
  return g.LayerNorm(x, gamma, beta, 1e-5f);
}

struct VitShape {
  int64_t batch;
  VitConfig c;
  static constexpr int64_t kSide = 28, kPatchSide = 7, kGrid = kSide / kPatchSide;  // 4 x 4 patches
  static constexpr int64_t kTokens = kGrid * kGrid, kPatch = kPatchSide * kPatchSide, kClasses = 10;
  int64_t head_dim() const { return c.dim / c.heads; }
  int64_t rows() const { return batch * kTokens; }  // tokens of the whole batch, one per row
  uint64_t dropout_seed = 0;                        // the network's seed
};

// Multi-head self-attention of h [B*T, D] in scope "attn": the projected
// context [B*T, D].
TensorId Attention(Graph& g, TensorId h, const VitShape& v, uint64_t seed) {
  using V = VitShape;
  const int64_t dim = v.c.dim, heads = v.c.heads, hd = v.head_dim();
  NameScope scope(g, "attn");
  TensorId qkv = Linear(g, h, "qkv", dim, 3 * dim, seed);
  // Head-major columns, [H, 3, hd]: head h's q, k and v are one block of
  // 3 hd columns, so splitting qkv's columns n ways (Megatron's column
  // parallel layer) hands each rank whole heads. [B, T, H, 3, hd] ->
  // [3, B, H, T, hd]: q, k and v as batched [T, hd] matrices, split along
  // axis 0 (a view, no copy), with batch and heads kept apart (a merged
  // B*H dim whose inner factor is split is not one block per rank).
  qkv = g.Transpose(g.Reshape(qkv, {v.batch, V::kTokens, heads, 3, hd}), {3, 0, 2, 1, 4});
  std::vector<TensorId> parts = g.Split(qkv, 0, {1, 1, 1});
  if (parts.size() != 3) return kInvalidTensor;  // the graph's status says why
  const Shape head_shape = {v.batch, heads, V::kTokens, hd};
  TensorId q = g.Reshape(parts[0], head_shape);
  TensorId k = g.Reshape(parts[1], head_shape);
  TensorId val = g.Reshape(parts[2], head_shape);
  TensorId scale =
      g.Const(g.name_scope() + ".scale", {1}, InitSpec::Constant(1.0f / std::sqrt(static_cast<float>(hd))));
  TensorId scores = g.Mul(g.BatchMatMul(q, k, false, true), scale);                // [B, H, T, T]
  TensorId probs = g.Dropout(g.Softmax(scores, -1), v.c.dropout, v.dropout_seed);  // attn_drop
  TensorId context = g.BatchMatMul(probs, val);                                    // [B, H, T, hd]
  // Heads back side by side, in head order: [B, T, H, hd] -> [B*T, D].
  context = g.Reshape(g.Transpose(context, {0, 2, 1, 3}), {v.rows(), dim});
  return g.Dropout(Linear(g, context, "proj", dim, dim, seed + 1), v.c.dropout, v.dropout_seed);  // proj_drop
}

}  // namespace

Graph MakeMlpNetwork(int64_t batch, std::vector<int64_t> widths, uint64_t seed) {
  Graph g("mlp");
  if (widths.size() < 2) {
    g.Fail(InvalidArgument("MakeMlpNetwork: widths needs an input and an output width, got " +
                           std::to_string(widths.size()) + " widths"));
    return g;
  }
  TensorId h = g.Input("image", {batch, widths.front()});
  for (size_t i = 0; i + 1 < widths.size(); ++i) {
    h = Dense(g, h, "fc" + std::to_string(i + 1), widths[i], widths[i + 1], seed + i);
    if (i + 2 < widths.size()) h = g.Relu(h);
  }
  g.AddOutput(h);
  return g;
}

Graph MakeLeNetNetwork(int64_t batch, uint64_t seed) {
  Graph g("lenet");
  TensorId x = g.Input("image", {batch, 1, 28, 28});
  TensorId c1w = g.Param("conv1.weight", {6, 1, 5, 5}, InitSpec::HeUniform(seed));
  TensorId c1b = g.Param("conv1.bias", {6}, InitSpec::Zeros());
  TensorId h = g.MaxPool2D(g.Relu(g.BiasAdd(g.Conv2D(x, c1w, 1, 2), c1b)), 2, 2);
  TensorId c2w = g.Param("conv2.weight", {16, 6, 5, 5}, InitSpec::HeUniform(seed + 1));
  TensorId c2b = g.Param("conv2.bias", {16}, InitSpec::Zeros());
  h = g.MaxPool2D(g.Relu(g.BiasAdd(g.Conv2D(h, c2w, 1, 0), c2b)), 2, 2);
  h = g.Flatten(h);  // 16 x 5 x 5
  const int64_t widths[] = {400, 120, 84, 10};
  for (int i = 0; i < 3; ++i) {
    h = Dense(g, h, "fc" + std::to_string(i + 1), widths[i], widths[i + 1], seed + 2 + i);
    if (i < 2) h = g.Relu(h);
  }
  g.AddOutput(h);
  return g;
}

Graph MakeVitNetwork(int64_t batch, uint64_t seed) { return MakeVitNetwork(batch, seed, VitConfig{}); }

Graph MakeVitNetwork(int64_t batch, uint64_t seed, const VitConfig& config) {
  using V = VitShape;
  const VitShape v{batch, config, seed};
  const int64_t dim = config.dim;
  Graph g("vit");
  if (batch < 1) {
    g.Fail(InvalidArgument("MakeVitNetwork: batch must be at least 1, got " + std::to_string(batch)));
    return g;
  }
  if (config.dim < 1 || config.heads < 1 || config.dim % config.heads != 0 || config.hidden < 1 || config.blocks < 1) {
    g.Fail(InvalidArgument("MakeVitNetwork: dim " + std::to_string(config.dim) + ", heads " +
                           std::to_string(config.heads) + ", hidden " + std::to_string(config.hidden) + ", blocks " +
                           std::to_string(config.blocks) +
                           ": every one must be at least 1 and the heads must divide dim"));
    return g;
  }
  TensorId x = g.Input("image", {batch, V::kSide * V::kSide});
  {
    // [B, 784] -> [B, 4, 7, 4, 7] (grid row, pixel row, grid column, pixel
    // column) -> [B, 4, 4, 7, 7] -> one 49-value row per patch.
    NameScope scope(g, "patchify");
    x = g.Reshape(x, {batch, V::kGrid, V::kPatchSide, V::kGrid, V::kPatchSide});
    x = g.Reshape(g.Transpose(x, {0, 1, 3, 2, 4}), {v.rows(), V::kPatch});
  }
  x = Linear(g, x, "patch", V::kPatch, dim, seed);
  {
    NameScope scope(g, "pos_embed");
    TensorId pos = g.Param("pos_embed", {V::kTokens, dim}, InitSpec::Uniform(-0.035f, 0.035f, seed + 1));
    x = g.Reshape(g.Add(g.Reshape(x, {batch, V::kTokens, dim}), pos), {v.rows(), dim});
    x = g.Dropout(x, config.dropout, seed);  // pos_drop
  }
  for (int i = 0; i < config.blocks; ++i) {
    NameScope block(g, "block" + std::to_string(i));
    const uint64_t s = seed + 2 + 4 * static_cast<uint64_t>(i);  // qkv, proj, fc1, fc2
    x = g.Add(x, Attention(g, LayerNormLayer(g, x, "ln1", dim), v, s));
    TensorId h = LayerNormLayer(g, x, "ln2", dim);
    {
      NameScope mlp(g, "mlp");
      h = g.Dropout(g.Gelu(Linear(g, h, "fc1", dim, config.hidden, s + 2)), config.dropout, seed);
      h = g.Dropout(Linear(g, h, "fc2", config.hidden, dim, s + 3), config.dropout, seed);
    }
    x = g.Add(x, h);
  }
  x = LayerNormLayer(g, x, "norm", dim);
  {
    NameScope scope(g, "pool");
    x = g.ReduceMean(g.Reshape(x, {batch, V::kTokens, dim}), {1});  // mean over the tokens
  }
  // S+10 for the standard 2 blocks: after the last block's seeds.
  x = Linear(g, x, "head", dim, V::kClasses, seed + 2 + 4 * static_cast<uint64_t>(config.blocks));
  g.AddOutput(x);
  return g;
}

}  // namespace sinkrt::host
