// AppendBackward for pipeline stages: seeds from received gradients
// (BackwardOptions::output_grads) and gradients of received activations
// (BackwardOptions::wrt). The check that matters is numeric: an MLP cut by
// hand into two stages, each differentiated alone and chained the way the
// pipeline will chain them, gives the gradients of the whole graph. The
// graphs are run op by op on the device kernels (support/kernel_runner), in
// f32 as a device runs them.
#include "sinkrt/host/autodiff.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "host/src/util/schema_enums.h"
#include "support/kernel_runner.h"
#include "support/test_models.h"

namespace sinkrt::host {
namespace {

using testing::KernelRunner;
using testing::KernelTensor;

// A KernelTensor's copy keeps the bytes but not their alignment, so values
// are cloned into fresh storage.
KernelTensor Clone(const KernelTensor& t) {
  KernelTensor c(t.shape(), t.dtype());
  std::memcpy(c.bytes(), t.bytes(), static_cast<size_t>(t.numel()) * DTypeSize(t.dtype()));
  return c;
}

// Runs every op of `g` in order on the device kernels. `feeds` holds the
// values of the Inputs and Params it reads; returns every tensor's value.
std::map<TensorId, KernelTensor> RunOps(const Graph& g, const std::map<TensorId, const KernelTensor*>& feeds) {
  std::map<TensorId, KernelTensor> values;
  for (const auto& [t, v] : feeds) values.emplace(t, Clone(*v));
  for (const OpNode& op : g.ops()) {
    KernelRunner k(ToFb(op.op));
    for (TensorId in : op.inputs) {
      auto it = values.find(in);
      if (it == values.end()) {
        ADD_FAILURE() << "op '" << op.name << "' reads '" << g.tensor(in).name << "', which has no value";
        return values;
      }
      k.In(it->second);
    }
    for (TensorId out : op.outputs) {
      values.emplace(out, KernelTensor(g.tensor(out).shape, g.tensor(out).dtype));
      k.Out(values.at(out));
    }
    if (op.op == OpCode::MatMul) k.MatMulOpts(op.attrs.transpose_a, op.attrs.transpose_b);
    if (op.op == OpCode::Fill) k.FillValue(op.attrs.value);
    k.PrepareAndRun();
  }
  return values;
}

void ExpectNear(const KernelTensor& got, const KernelTensor& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  for (int64_t i = 0; i < got.numel(); ++i)
    EXPECT_NEAR(got[i], want[i], 1e-5 * std::fabs(want[i]) + 1e-7) << what << " [" << i << "]";
}

constexpr int64_t kBatch = 4, kIn = 5, kHidden = 6, kClasses = 3;

struct Values {
  KernelTensor x = testing::RandomTensor({kBatch, kIn}, 1);
  KernelTensor w1 = testing::RandomTensor({kIn, kHidden}, 2);
  KernelTensor w2 = testing::RandomTensor({kHidden, kClasses}, 3);
  KernelTensor labels = testing::Labels({0, 2, 1, 2});
};

// x -> MatMul(w1) -> Relu = h -> MatMul(w2) -> SparseSoftmaxCrossEntropy(labels).
struct Whole {
  Graph g{"whole"};
  TensorId x, w1, h, w2, labels, loss;
  Whole() {
    x = g.Input("x", {kBatch, kIn});
    w1 = g.Param("w1", {kIn, kHidden}, InitSpec::Zeros());
    h = g.Relu(g.MatMul(x, w1));
    w2 = g.Param("w2", {kHidden, kClasses}, InitSpec::Zeros());
    labels = g.Input("labels", {kBatch}, DType::I32);
    loss = g.SparseSoftmaxCrossEntropy(g.MatMul(h, w2), labels);
    g.SetLoss(loss);
  }
};

// Stage A: x -> MatMul(w1) -> Relu = h, whose gradient arrives as dh.
struct StageA {
  Graph g{"stage_a"};
  TensorId x, w1, h, dh;
  StageA() {
    x = g.Input("x", {kBatch, kIn});
    w1 = g.Param("w1", {kIn, kHidden}, InitSpec::Zeros());
    h = g.Relu(g.MatMul(x, w1));
    dh = g.Input("h/grad_in", {kBatch, kHidden});
  }
};

// Stage B: the received h -> MatMul(w2) -> loss.
struct StageB {
  Graph g{"stage_b"};
  TensorId h, w2, labels, loss;
  StageB() {
    h = g.Input("h", {kBatch, kHidden});
    w2 = g.Param("w2", {kHidden, kClasses}, InitSpec::Zeros());
    labels = g.Input("labels", {kBatch}, DType::I32);
    loss = g.SparseSoftmaxCrossEntropy(g.MatMul(h, w2), labels);
    g.SetLoss(loss);
  }
};

TEST(AutodiffWrtTest, ChainedStagesGiveTheWholeGraphsGradients) {
  const Values v;
  Whole whole;
  BackwardOptions with_h;
  with_h.wrt = {whole.h};  // an intermediate: the activation the cut sends
  Result<BackwardResult> wr = AppendBackward(whole.g, whole.loss, with_h);
  ASSERT_TRUE(wr.ok()) << wr.status().ToString();
  ASSERT_EQ(wr.value().params.size(), 2u);
  ASSERT_EQ(wr.value().wrt_grads.size(), 1u);
  const TensorId whole_dh = wr.value().wrt_grads[0].second;
  EXPECT_EQ(whole.g.tensor(whole_dh).name, whole.g.tensor(whole.h).name + "/grad");
  EXPECT_EQ(whole.g.tensor(whole_dh).kind, TensorKind::Intermediate);
  auto wv = RunOps(whole.g, {{whole.x, &v.x}, {whole.w1, &v.w1}, {whole.w2, &v.w2}, {whole.labels, &v.labels}});
  ASSERT_FALSE(::testing::Test::HasFailure());

  // Stage B, fed the whole graph's h (stage A's forward runs the same ops).
  StageB b;
  BackwardOptions bo;
  bo.wrt = {b.h};
  Result<BackwardResult> br = AppendBackward(b.g, b.loss, bo);
  ASSERT_TRUE(br.ok()) << br.status().ToString();
  ASSERT_EQ(br.value().params.size(), 1u);
  EXPECT_EQ(br.value().params[0].param, b.w2);
  ASSERT_EQ(br.value().wrt_grads.size(), 1u);
  EXPECT_EQ(br.value().wrt_grads[0].first, b.h);
  const TensorId b_dh = br.value().wrt_grads[0].second;
  EXPECT_EQ(b.g.tensor(b_dh).name, "h/grad");
  EXPECT_EQ(b.g.tensor(b_dh).kind, TensorKind::Intermediate);
  EXPECT_EQ(b.g.tensor(b_dh).shape, (Shape{kBatch, kHidden}));
  auto bv = RunOps(b.g, {{b.h, &wv.at(whole.h)}, {b.w2, &v.w2}, {b.labels, &v.labels}});
  ASSERT_FALSE(::testing::Test::HasFailure());

  // Stage A: no loss, seeded by the gradient B sent back.
  StageA a;
  BackwardOptions ao;
  ao.output_grads = {{a.h, a.dh}};
  Result<BackwardResult> ar = AppendBackward(a.g, kInvalidTensor, ao);
  ASSERT_TRUE(ar.ok()) << ar.status().ToString();
  ASSERT_EQ(ar.value().params.size(), 1u);
  EXPECT_EQ(ar.value().params[0].param, a.w1);
  EXPECT_TRUE(ar.value().wrt_grads.empty());
  EXPECT_EQ(a.g.tensor(ar.value().params[0].grad).kind, TensorKind::Grad);
  auto av = RunOps(a.g, {{a.x, &v.x}, {a.w1, &v.w1}, {a.dh, &bv.at(b_dh)}});
  ASSERT_FALSE(::testing::Test::HasFailure());

  // Not a vacuous match: ReLU keeps some of h, so gradients reach w1.
  double w1_grad_mass = 0;
  for (float x : wv.at(whole.g.FindTensor("w1/grad")).values()) w1_grad_mass += std::fabs(x);
  EXPECT_GT(w1_grad_mass, 1e-2);
  ExpectNear(av.at(a.h), wv.at(whole.h), "stage A's h");
  ExpectNear(bv.at(b_dh), wv.at(whole_dh), "d(loss)/d(h)");
  ExpectNear(bv.at(br.value().params[0].grad), wv.at(whole.g.FindTensor("w2/grad")), "w2/grad");
  ExpectNear(av.at(ar.value().params[0].grad), wv.at(whole.g.FindTensor("w1/grad")), "w1/grad");

  // The whole graph's parameter gradients do not change for asking for h's.
  Whole plain;
  ASSERT_TRUE(AppendBackward(plain.g, plain.loss).ok());
  auto pv = RunOps(plain.g, {{plain.x, &v.x}, {plain.w1, &v.w1}, {plain.w2, &v.w2}, {plain.labels, &v.labels}});
  for (const char* name : {"w1/grad", "w2/grad"})
    ExpectNear(pv.at(plain.g.FindTensor(name)), wv.at(whole.g.FindTensor(name)), name);
}

// The old entry point and the options form with nothing but a seed append the
// same ops and tensors.
TEST(AutodiffWrtTest, DefaultOptionsAppendWhatTheScalarFormAppends) {
  for (float seed : {1.0f, 0.25f}) {
    Graph old_g = testing::MakeLeNet(2);
    Graph new_g = testing::MakeLeNet(2);
    Result<std::vector<ParamGrad>> o = AppendBackward(old_g, old_g.loss(), seed);
    BackwardOptions opts;
    opts.seed = seed;
    Result<BackwardResult> n = AppendBackward(new_g, new_g.loss(), opts);
    ASSERT_TRUE(o.ok() && n.ok());
    ASSERT_EQ(o.value().size(), n.value().params.size());
    for (size_t i = 0; i < o.value().size(); ++i) {
      EXPECT_EQ(o.value()[i].param, n.value().params[i].param);
      EXPECT_EQ(o.value()[i].grad, n.value().params[i].grad);
    }
    EXPECT_TRUE(n.value().wrt_grads.empty());
    ASSERT_EQ(old_g.tensors().size(), new_g.tensors().size());
    for (size_t t = 0; t < old_g.tensors().size(); ++t) {
      EXPECT_EQ(old_g.tensors()[t].name, new_g.tensors()[t].name);
      EXPECT_EQ(old_g.tensors()[t].shape, new_g.tensors()[t].shape);
      EXPECT_EQ(old_g.tensors()[t].dtype, new_g.tensors()[t].dtype);
      EXPECT_EQ(old_g.tensors()[t].kind, new_g.tensors()[t].kind);
    }
    ASSERT_EQ(old_g.ops().size(), new_g.ops().size());
    for (size_t i = 0; i < old_g.ops().size(); ++i) {
      const OpNode &a = old_g.ops()[i], &b = new_g.ops()[i];
      EXPECT_EQ(a.name, b.name);
      EXPECT_EQ(a.op, b.op);
      EXPECT_EQ(a.inputs, b.inputs);
      EXPECT_EQ(a.outputs, b.outputs);
      EXPECT_EQ(a.attrs.value, b.attrs.value) << a.name;
    }
  }
}

// A seed that reaches a Param or a wrt tensor unchanged (Add passes dy
// through) is copied into its gradient before any backward op runs.
TEST(AutodiffWrtTest, SeedPassedThroughIsCopied) {
  Graph g;
  TensorId p = g.Param("p", {2, 3}, InitSpec::Zeros());
  TensorId x = g.Input("x", {2, 3});
  TensorId y = g.Add(p, x);
  TensorId dy = g.Input("dy", {2, 3});
  const size_t forward = g.ops().size();
  BackwardOptions o;
  o.output_grads = {{y, dy}};
  o.wrt = {x};
  Result<BackwardResult> r = AppendBackward(g, kInvalidTensor, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r.value().params.size(), 1u);
  ASSERT_EQ(r.value().wrt_grads.size(), 1u);
  ASSERT_EQ(g.ops().size(), forward + 2);
  for (TensorId grad : {r.value().params[0].grad, r.value().wrt_grads[0].second}) {
    const int64_t w = g.producer(grad);
    ASSERT_GE(w, 0);
    EXPECT_EQ(g.ops()[w].op, OpCode::Copy);
    EXPECT_EQ(g.ops()[w].inputs, std::vector<TensorId>{dy});
  }
  EXPECT_EQ(g.tensor(r.value().params[0].grad).name, "p/grad");
  EXPECT_EQ(g.tensor(r.value().wrt_grads[0].second).name, "x/grad");
}

// A loss and a seeded output together: their contributions to a shared
// tensor are summed.
TEST(AutodiffWrtTest, LossAndOutputSeedTogether) {
  Graph g;
  TensorId x = g.Input("x", {2, 3});
  TensorId w = g.Param("w", {3, 4}, InitSpec::Zeros());
  TensorId h = g.MatMul(x, w);
  TensorId loss = g.ReduceSum(h);
  TensorId dh = g.Input("dh", {2, 4});
  BackwardOptions o;
  o.output_grads = {{h, dh}};
  o.wrt = {x};
  Result<BackwardResult> r = AppendBackward(g, loss, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  bool summed = false;
  for (const OpNode& op : g.ops())
    if (op.op == OpCode::AddN && std::find(op.inputs.begin(), op.inputs.end(), dh) != op.inputs.end()) summed = true;
  EXPECT_TRUE(summed);
  ASSERT_EQ(r.value().wrt_grads.size(), 1u);
  EXPECT_EQ(g.tensor(r.value().wrt_grads[0].second).shape, (Shape{2, 3}));
}

void ExpectError(const Result<BackwardResult>& r, StatusCode code, const std::string& message) {
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), code) << r.status().ToString();
  EXPECT_EQ(r.status().message(), message);
}

TEST(AutodiffWrtTest, Errors) {
  {
    StageA a;
    ExpectError(AppendBackward(a.g, kInvalidTensor, BackwardOptions{}), StatusCode::kFailedPrecondition,
                "AppendBackward: the graph has no loss; call SetLoss first");
  }
  {
    StageA a;
    TensorId bad = a.g.Input("bad", {kBatch, kHidden + 1});
    BackwardOptions o;
    o.output_grads = {{a.h, bad}};
    ExpectError(AppendBackward(a.g, kInvalidTensor, o), StatusCode::kInvalidArgument,
                "AppendBackward: output_grads[0]: seed 'bad' (f32 [4,7]) must match tensor '" + a.g.tensor(a.h).name +
                    "' (f32 [4,6])");
  }
  {
    StageA a;
    TensorId bad = a.g.Input("bad", {kBatch, kHidden}, DType::I32);
    BackwardOptions o;
    o.output_grads = {{a.h, bad}};
    ExpectError(AppendBackward(a.g, kInvalidTensor, o), StatusCode::kInvalidArgument,
                "AppendBackward: output_grads[0]: seed 'bad' (i32 [4,6]) must match tensor '" + a.g.tensor(a.h).name +
                    "' (f32 [4,6])");
  }
  {
    StageA a;
    BackwardOptions o;
    o.output_grads = {{a.h, a.dh}, {99, a.dh}};
    ExpectError(AppendBackward(a.g, kInvalidTensor, o), StatusCode::kInvalidArgument,
                "AppendBackward: output_grads[1]: tensor id 99 is not a tensor of graph 'stage_a'");
    o.output_grads = {{a.h, 77}};
    ExpectError(AppendBackward(a.g, kInvalidTensor, o), StatusCode::kInvalidArgument,
                "AppendBackward: output_grads[0]: the seed of '" + a.g.tensor(a.h).name +
                    "': tensor id 77 is not a tensor of graph 'stage_a'");
    o.output_grads = {{a.h, a.dh}, {a.h, a.dh}};
    ExpectError(AppendBackward(a.g, kInvalidTensor, o), StatusCode::kInvalidArgument,
                "AppendBackward: output_grads[1]: tensor '" + a.g.tensor(a.h).name +
                    "' is seeded twice (also output_grads[0])");
    o.output_grads = {{a.h, a.dh}};
    o.wrt = {a.w1};
    ExpectError(AppendBackward(a.g, kInvalidTensor, o), StatusCode::kInvalidArgument,
                "AppendBackward: wrt[0]: 'w1' is a Param; its gradient is returned with the other "
                "parameters'");
    o.wrt = {a.x, 1234};
    ExpectError(AppendBackward(a.g, kInvalidTensor, o), StatusCode::kInvalidArgument,
                "AppendBackward: wrt[1]: tensor id 1234 is not a tensor of graph 'stage_a'");
    o.wrt = {a.x, a.x};
    ExpectError(AppendBackward(a.g, kInvalidTensor, o), StatusCode::kInvalidArgument,
                "AppendBackward: wrt[1]: 'x' is listed twice (also wrt[0])");
    // Nothing was appended by the failed calls.
    EXPECT_EQ(a.g.ops().size(), 2u);
  }
  {
    // The labels are i32, and an Input no seed reaches gets no gradient.
    StageB b;
    TensorId other = b.g.Input("other", {3});
    BackwardOptions o;
    o.wrt = {b.labels};
    ExpectError(AppendBackward(b.g, b.loss, o), StatusCode::kInvalidArgument,
                "AppendBackward: wrt[0]: 'labels' must be f32 (got i32)");
    o.wrt = {b.h, other};
    ExpectError(AppendBackward(b.g, b.loss, o), StatusCode::kInvalidArgument,
                "AppendBackward: wrt tensor 'other' is not reached by any seed (no gradient of the "
                "loss '" +
                    b.g.tensor(b.loss).name + "' flows to it)");
  }
}

}  // namespace
}  // namespace sinkrt::host
