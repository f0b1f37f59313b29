// A small network with Dropout at several places, for the dropout
// composition tests (docs/guide/dropout.md): pipeline stages, data
// parallel, gradient accumulation, amp.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "sinkrt/host/graph.h"

namespace sinkrt::testing {

// x "image" [B,32] -> three of (MatMul [.,48] + bias -> Tanh -> Dropout(p,
// seed 7)) -> MatMul [48,10] + bias -> sparse softmax cross-entropy with
// "label" [B] i32: a Dropout in every stage of up to four. p 0: the same
// network without dropout. `rows` > 1: the middle dropout reads its input
// as [B·rows, 48/rows] (a ViT's [B·T, D]).
inline host::Graph MakeDropoutMlp(int64_t batch, float p, int64_t rows = 1) {
  using host::InitSpec;
  using host::TensorId;
  host::Graph g("dropout_mlp");
  const TensorId x = g.Input("image", {batch, 32});
  const TensorId labels = g.Input("label", {batch}, DType::I32);
  TensorId h = x;
  int64_t in = 32;
  for (int l = 0; l < 3; ++l) {
    const std::string n = std::to_string(l);
    const TensorId w = g.Param("w" + n, {in, 48}, InitSpec::HeUniform(21 + l));
    const TensorId b = g.Param("b" + n, {48}, InitSpec::Uniform(-0.1f, 0.1f, 31 + l));
    h = g.Tanh(g.BiasAdd(g.MatMul(h, w), b));
    if (p > 0 && l == 1 && rows > 1) {
      h = g.Reshape(g.Dropout(g.Reshape(h, {batch * rows, 48 / rows}), p, 7), {batch, 48});
    } else if (p > 0) {
      h = g.Dropout(h, p, 7);
    }
    in = 48;
  }
  const TensorId w = g.Param("w_out", {48, 10}, InitSpec::XavierUniform(41));
  const TensorId b = g.Param("b_out", {10}, InitSpec::Uniform(-0.1f, 0.1f, 42));
  g.SetLoss(g.SparseSoftmaxCrossEntropy(g.BiasAdd(g.MatMul(h, w), b), labels));
  EXPECT_TRUE(g.status().ok()) << g.status().ToString();
  return g;
}

}  // namespace sinkrt::testing
