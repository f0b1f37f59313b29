#include "sinkrt/host/model_zoo.h"

#include <string>

namespace sinkrt::host {
namespace {

// x [N, in] -> x W + b, W [in, out] He-uniform, b zero.
TensorId Dense(Graph& g, TensorId x, const std::string& name, int64_t in, int64_t out, uint64_t seed) {
  TensorId w = g.Param(name + ".weight", {in, out}, InitSpec::HeUniform(seed));
  TensorId b = g.Param(name + ".bias", {out}, InitSpec::Zeros());
  return g.BiasAdd(g.MatMul(x, w), b);
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

}  // namespace sinkrt::host
