// Every op's sharding rule against one device (issue 16, "What must be
// shown"): for each op of the graph builder with a rule, every strategy on 2
// and on 4 ranks, on small shapes drawn with fixed seeds.
//
// The harness. Each case is a graph whose inputs are Params (integer
// inputs, Gather's indices and the loss's labels, are dataset Inputs that
// every rank reads whole) feeding the op under test, followed by
//   loss = sum over the op's outputs o of ReduceSum(o * R_o)
// where each R_o is a Param as well, and every op after the one under test
// has an explicit all-ones strategy (replicated; a Reshape or Flatten after
// it carries its layout, having no strategy of its own). So:
//  - d loss / d o = R_o, so the gradient of every input of the op is a
//    random linear functional of the op's backward;
//  - d loss / d R_o = o, gathered whole (the Mul is replicated): the
//    forward output of the op, assembled by the partitioner's own
//    redistribution, is the update of R_o;
//  - the loss is the same on every rank and checks the forward once more.
// One step of SGD with lr = 1 makes every Param's update its gradient, and
// reading Params needs no knowledge of which activation buffers the planner
// reused (an eval report or an activation buffer would). Each rank's Param
// buffer is its slice; where it starts comes from the stream's Initializer
// (fb::Init.global_shape / slice_offset, absent for a whole tensor). Every
// rank's slice, replicas included, is compared with the same elements of
// one device's run of the same graph without strategies (the device
// kernels themselves are checked against float64 by the kernel tests).
//
// Tolerance: 1e-5 of the tensor's largest magnitude (the reference's update
// or the Param's old value, whichever is larger): the update is read back as
// old - new in f32, so its rounding is relative to the Param's values, and
// split reductions sum in another order.
//
// Strategies are enumerated as MindSpore's generator does: every split of
// every loop dim (powers of 2) whose product divides the device count,
// written into each input dim the loop indexes. The test's own description
// of each op (which loop may be split, and why not) decides which are
// legal; the illegal ones must be refused by Compile with an error, and the
// legal ones must train like one device. One world of 2 and one of 4
// in-process devices serve every case.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "sinkrt/device/in_process_device.h"
#include "sinkrt/fb/task_stream_generated.h"
#include "sinkrt/host/compiler.h"
#include "sinkrt/runtime/task_stream_verifier.h"
#include "support/in_process_world.h"
#include "support/str_cat.h"

namespace sinkrt {
namespace {

using host::Graph;
using host::InitSpec;
using host::TensorId;
using Strategy = std::vector<std::vector<int64_t>>;

// -- the cases -----------------------------------------------------------------

struct Loop {
  int64_t extent = 1;
  bool splittable = true;  // the op's semantics allow a split
};

// What a case builds: the op under test (found by its output) and the f32
// tensors the loss dots with R (its outputs, or what a Cast/Reshape after it
// makes of them).
struct Built {
  TensorId op_output = host::kInvalidTensor;
  std::vector<TensorId> terms;
};

struct Case {
  std::string name;
  std::vector<Loop> loops;
  // Per input of the op under test, per dim: the loop indexing it, or -1 (a
  // broadcast dim, never split).
  std::vector<std::vector<int>> input_loops;
  std::function<Built(Graph&, std::map<TensorId, std::vector<int32_t>>&)> build;
};

uint64_t seed_counter = 100;

TensorId P(Graph& g, const std::string& name, Shape shape, float low = -1.f, float high = 1.f) {
  return g.Param(name, std::move(shape), InitSpec::Uniform(low, high, ++seed_counter));
}

TensorId Ints(Graph& g, std::map<TensorId, std::vector<int32_t>>& data, const std::string& name, Shape shape,
              int32_t bound, uint32_t seed) {
  const TensorId t = g.Input(name, shape, DType::I32);
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::mt19937 rng(seed);
  std::vector<int32_t>& v = data[t];
  for (int64_t i = 0; i < n; ++i) v.push_back(static_cast<int32_t>(rng() % static_cast<uint32_t>(bound)));
  return t;
}

// Small extents drawn with a fixed seed: mostly divisible by 4, some by 2
// only, so that some splits are refused for divisibility.
struct Extents {
  std::mt19937 rng{20260};
  int64_t operator()() {
    static constexpr int64_t kPick[] = {2, 4, 4, 6, 8};
    return kPick[rng() % 5];
  }
};

Built One(TensorId y) { return {y, {y}}; }

std::vector<Case> MakeCases() {
  Extents e;
  std::vector<Case> cases;
  using Data = std::map<TensorId, std::vector<int32_t>>;

  for (int t = 0; t < 4; ++t) {
    const bool ta = t & 1, tb = t & 2;
    const int64_t m = e(), k = e(), n = e();
    cases.push_back(
        {std::string("MatMul") + (ta ? "_ta" : "") + (tb ? "_tb" : ""),
         {{m}, {k}, {n}},
         {ta ? std::vector<int>{1, 0} : std::vector<int>{0, 1}, tb ? std::vector<int>{2, 1} : std::vector<int>{1, 2}},
         [=](Graph& g, Data&) {
           const TensorId a = P(g, "a", ta ? Shape{k, m} : Shape{m, k});
           const TensorId b = P(g, "b", tb ? Shape{n, k} : Shape{k, n});
           return One(g.MatMul(a, b, ta, tb));
         }});
  }
  for (int t = 0; t < 3; ++t) {
    const bool ta = t == 1, tb = t == 2;
    const int64_t bt = e(), m = e(), k = e(), n = e();
    cases.push_back({std::string("BatchMatMul") + (ta ? "_ta" : "") + (tb ? "_tb" : ""),
                     {{bt}, {m}, {k}, {n}},
                     {ta ? std::vector<int>{0, 2, 1} : std::vector<int>{0, 1, 2},
                      tb ? std::vector<int>{0, 3, 2} : std::vector<int>{0, 2, 3}},
                     [=](Graph& g, Data&) {
                       const TensorId a = P(g, "a", ta ? Shape{bt, k, m} : Shape{bt, m, k});
                       const TensorId b = P(g, "b", tb ? Shape{bt, n, k} : Shape{bt, k, n});
                       return One(g.BatchMatMul(a, b, ta, tb));
                     }});
  }
  {  // 4-d, as attention's scores
    const int64_t b0 = 2, h = e(), m = e(), k = e(), n = e();
    cases.push_back(
        {"BatchMatMul_4d_tb", {{b0}, {h}, {m}, {k}, {n}}, {{0, 1, 2, 3}, {0, 1, 4, 3}}, [=](Graph& g, Data&) {
           return One(g.BatchMatMul(P(g, "a", {b0, h, m, k}), P(g, "b", {b0, h, n, k}), false, true));
         }});
  }
  {
    const int64_t r = e(), c = e();
    cases.push_back({"BiasAdd", {{r}, {c}}, {{0, 1}, {1}}, [=](Graph& g, Data&) {
                       return One(g.BiasAdd(P(g, "x", {r, c}), P(g, "bias", {c})));
                     }});
    const int64_t n = e(), ch = e(), hh = 3, ww = 2;
    cases.push_back({"BiasAdd_nchw", {{n}, {ch}, {hh}, {ww}}, {{0, 1, 2, 3}, {1}}, [=](Graph& g, Data&) {
                       return One(g.BiasAdd(P(g, "x", {n, ch, hh, ww}), P(g, "bias", {ch})));
                     }});
  }
  {
    using Fn = TensorId (Graph::*)(TensorId, TensorId);
    const struct {
      const char* name;
      Fn fn;
    } binary[] = {{"Add", &Graph::Add}, {"Sub", &Graph::Sub}, {"Mul", &Graph::Mul}};
    for (const auto& b : binary) {
      const int64_t r = e(), c = e();
      cases.push_back({b.name, {{r}, {c}}, {{0, 1}, {0, 1}}, [=](Graph& g, Data&) {
                         return One((g.*b.fn)(P(g, "x", {r, c}), P(g, "y", {r, c})));
                       }});
    }
    // Broadcasting: a trailing-aligned rank-1 operand, and a dim of 1.
    const int64_t r = e(), c = e(), d = e();
    cases.push_back({"Sub_broadcast_rank", {{r}, {c}}, {{0, 1}, {1}}, [=](Graph& g, Data&) {
                       return One(g.Sub(P(g, "x", {r, c}), P(g, "y", {c})));
                     }});
    cases.push_back({"Mul_broadcast_one", {{r}, {c}, {d}}, {{0, -1, 2}, {1, 2}}, [=](Graph& g, Data&) {
                       return One(g.Mul(P(g, "x", {r, 1, d}), P(g, "y", {c, d})));
                     }});
    cases.push_back({"Add_broadcast_both", {{r}, {c}}, {{0, -1}, {-1, 1}}, [=](Graph& g, Data&) {
                       return One(g.Add(P(g, "x", {r, 1}), P(g, "y", {1, c})));
                     }});
  }
  {
    // Div's divisor and Pow's base from (0.5, 2); Pow's exponent from (-1, 1).
    using Fn = TensorId (Graph::*)(TensorId, TensorId);
    const struct {
      const char* name;
      Fn fn;
      float x_low = -1.f, x_high = 1.f, y_low = -1.f, y_high = 1.f;
    } math[] = {{"Div", &Graph::Div, -1.f, 1.f, 0.5f, 2.f},
                {"Maximum", &Graph::Maximum},
                {"Minimum", &Graph::Minimum},
                {"Pow", &Graph::Pow, 0.5f, 2.f}};
    for (const auto& m : math) {
      const int64_t r = e(), c = e();
      cases.push_back(
          {m.name, {{r}, {c}}, {{0, 1}, {0, 1}}, [=](Graph& g, Data&) {
             return One((g.*m.fn)(P(g, "x", {r, c}, m.x_low, m.x_high), P(g, "y", {r, c}, m.y_low, m.y_high)));
           }});
    }
    const int64_t r = e(), c = e();
    cases.push_back({"Div_broadcast_rank", {{r}, {c}}, {{0, 1}, {1}}, [=](Graph& g, Data&) {
                       return One(g.Div(P(g, "x", {r, c}), P(g, "y", {c}, 0.5f, 2.f)));
                     }});
    cases.push_back({"Maximum_broadcast_both", {{r}, {c}}, {{0, -1}, {-1, 1}}, [=](Graph& g, Data&) {
                       return One(g.Maximum(P(g, "x", {r, 1}), P(g, "y", {1, c})));
                     }});
    // Minimum: the same rule as Maximum (its mask splits ties in halves too).
    cases.push_back({"Minimum_broadcast_both", {{r}, {c}}, {{0, -1}, {-1, 1}}, [=](Graph& g, Data&) {
                       return One(g.Minimum(P(g, "x", {r, 1}), P(g, "y", {1, c})));
                     }});
    cases.push_back({"Pow_broadcast_rank", {{r}, {c}}, {{0, 1}, {1}}, [=](Graph& g, Data&) {
                       return One(g.Pow(P(g, "x", {r, c}, 0.5f, 2.f), P(g, "y", {c})));
                     }});
  }
  {
    using Fn = TensorId (Graph::*)(TensorId);
    // Log, Sqrt and Rsqrt draw from their domain (0.5, 2).
    const struct {
      const char* name;
      Fn fn;
      float low = -1.f, high = 1.f;
    } unary[] = {{"Relu", &Graph::Relu},
                 {"Gelu", &Graph::Gelu},
                 {"Tanh", &Graph::Tanh},
                 {"Sigmoid", &Graph::Sigmoid},
                 {"Exp", &Graph::Exp},
                 {"Log", &Graph::Log, 0.5f, 2.f},
                 {"Sqrt", &Graph::Sqrt, 0.5f, 2.f},
                 {"Rsqrt", &Graph::Rsqrt, 0.5f, 2.f},
                 {"Square", &Graph::Square},
                 {"Abs", &Graph::Abs},
                 {"Erf", &Graph::Erf}};
    for (const auto& u : unary) {
      const int64_t r = e(), c = e();
      cases.push_back({u.name, {{r}, {c}}, {{0, 1}}, [=](Graph& g, Data&) {
                         return One((g.*u.fn)(P(g, "x", {r, c}, u.low, u.high)));
                       }});
    }
    const int64_t a = e(), b = e(), c = e();
    cases.push_back({"Tanh_3d", {{a}, {b}, {c}}, {{0, 1, 2}}, [=](Graph& g, Data&) {
                       return One(g.Tanh(P(g, "x", {a, b, c})));
                     }});
    cases.push_back({"GeluErf", {{a}, {b}}, {{0, 1}}, [=](Graph& g, Data&) {
                       return One(g.Gelu(P(g, "x", {a, b}), /*approximate=*/false));
                     }});
  }
  {
    const int64_t r = e(), c = e(), a = e();
    cases.push_back({"Softmax", {{r}, {c, false}}, {{0, 1}}, [=](Graph& g, Data&) {
                       return One(g.Softmax(P(g, "x", {r, c})));
                     }});
    cases.push_back({"LogSoftmax", {{r}, {c, false}}, {{0, 1}}, [=](Graph& g, Data&) {
                       return One(g.LogSoftmax(P(g, "x", {r, c})));
                     }});
    cases.push_back({"Softmax_axis0_3d", {{a, false}, {r}, {c}}, {{0, 1, 2}}, [=](Graph& g, Data&) {
                       return One(g.Softmax(P(g, "x", {a, r, c}), 0));
                     }});
  }
  {
    const int64_t r = e(), c = e(), a = e();
    cases.push_back({"LayerNorm", {{r}, {c, false}}, {{0, 1}, {1}, {1}}, [=](Graph& g, Data&) {
                       return One(g.LayerNorm(P(g, "x", {r, c}), P(g, "gamma", {c}, 0.5f, 1.5f), P(g, "beta", {c})));
                     }});
    // Only the first dim of a 3-d input: mean and rstd flatten the leading dims.
    cases.push_back({"LayerNorm_3d", {{a}, {r, false}, {c, false}}, {{0, 1, 2}, {2}, {2}}, [=](Graph& g, Data&) {
                       return One(g.LayerNorm(P(g, "x", {a, r, c}), P(g, "gamma", {c}, 0.5f, 1.5f), P(g, "beta", {c})));
                     }});
  }
  {
    const int64_t a = e(), b = e(), c = e();
    cases.push_back({"Transpose", {{a}, {b}, {c}}, {{0, 1, 2}}, [=](Graph& g, Data&) {
                       return One(g.Transpose(P(g, "x", {a, b, c}), {2, 0, 1}));
                     }});
    cases.push_back({"Transpose_2d", {{a}, {b}}, {{0, 1}}, [=](Graph& g, Data&) {
                       return One(g.Transpose(P(g, "x", {a, b}), {1, 0}));
                     }});
  }
  {
    // Reshape and Flatten have no strategy of their own: the partitioner
    // carries the producer's layout through them. The producer (Tanh) is
    // the op whose strategies are enumerated.
    const int64_t a = e(), b = e(), c = 2;
    cases.push_back({"Reshape_merge", {{a}, {b}, {c}}, {{0, 1, 2}}, [=](Graph& g, Data&) {
                       const TensorId y = g.Tanh(P(g, "x", {a, b, c}));
                       return Built{y, {g.Reshape(y, {a, b * c})}};
                     }});
    cases.push_back({"Reshape_split", {{a}, {b}}, {{0, 1}}, [=](Graph& g, Data&) {
                       const TensorId y = g.Tanh(P(g, "x", {a, b}));
                       return Built{y, {g.Reshape(y, {a * b / 2, 2})}};
                     }});
    cases.push_back({"Flatten", {{a}, {b}, {c}}, {{0, 1, 2}}, [=](Graph& g, Data&) {
                       const TensorId y = g.Tanh(P(g, "x", {a, b, c}));
                       return Built{y, {g.Flatten(y)}};
                     }});
  }
  {
    const int64_t v = 6, rows = e(), c = e(), i0 = 2;
    cases.push_back({"Gather", {{v, false}, {i0}, {rows}, {c}}, {{0, 3}, {1, 2}}, [=](Graph& g, Data& d) {
                       const TensorId table = P(g, "table", {v, c});
                       return One(g.Gather(table, Ints(g, d, "ids", {i0, rows}, static_cast<int32_t>(v), 7)));
                     }});
  }
  {
    const int64_t r = e(), c1 = e(), c2 = e();
    cases.push_back({"Concat", {{r}, {c1 + c2, false}}, {{0, 1}, {0, 1}}, [=](Graph& g, Data&) {
                       return One(g.Concat({P(g, "x", {r, c1}), P(g, "y", {r, c2})}, 1));
                     }});
    cases.push_back({"Concat_axis0", {{r + c1, false}, {c2}}, {{0, 1}, {0, 1}}, [=](Graph& g, Data&) {
                       return One(g.Concat({P(g, "x", {r, c2}), P(g, "y", {c1, c2})}, 0));
                     }});
    cases.push_back({"Split", {{r}, {c1 + 3, false}}, {{0, 1}}, [=](Graph& g, Data&) {
                       const std::vector<TensorId> parts = g.Split(P(g, "x", {r, c1 + 3}), 1, {3, c1});
                       return Built{parts.empty() ? host::kInvalidTensor : parts[0], parts};
                     }});
  }
  {
    const int64_t a = e(), b = e(), c = e();
    cases.push_back({"ReduceSum_axis1", {{a}, {b}, {c}}, {{0, 1, 2}}, [=](Graph& g, Data&) {
                       return One(g.ReduceSum(P(g, "x", {a, b, c}), {1}));
                     }});
    cases.push_back({"ReduceMean_keep", {{a}, {b}, {c}}, {{0, 1, 2}}, [=](Graph& g, Data&) {
                       return One(g.ReduceMean(P(g, "x", {a, b, c}), {0, 2}, true));
                     }});
    cases.push_back({"ReduceMean_all", {{a}, {b}}, {{0, 1}}, [=](Graph& g, Data&) {
                       return One(g.ReduceMean(P(g, "x", {a, b})));
                     }});
  }
  {
    // ReduceMax keeps its reduced axes whole (the collectives only sum).
    const int64_t a = e(), b = e(), c = e();
    cases.push_back({"ReduceMax_axis1", {{a}, {b, false}, {c}}, {{0, 1, 2}}, [=](Graph& g, Data&) {
                       return One(g.ReduceMax(P(g, "x", {a, b, c}), {1}));
                     }});
    cases.push_back({"ReduceMax_keep", {{a, false}, {b}, {c, false}}, {{0, 1, 2}}, [=](Graph& g, Data&) {
                       return One(g.ReduceMax(P(g, "x", {a, b, c}), {0, 2}, true));
                     }});
  }
  {
    // Select: an f32 Const cond (every third element false) with x, and a
    // y broadcast along the rows.
    const int64_t r = e(), c = e();
    cases.push_back({"Select", {{r}, {c}}, {{0, 1}, {0, 1}, {1}}, [=](Graph& g, Data&) {
                       std::vector<float> cond;
                       for (int64_t i = 0; i < r * c; ++i) cond.push_back(i % 3 == 0 ? 0.0f : 1.0f);
                       const TensorId k = g.Const("cond", {r, c}, InitSpec::Inline(cond));
                       return One(g.Select(k, P(g, "x", {r, c}), P(g, "y", {c})));
                     }});
    // CausalMask: batch and heads split, the [T, S] block never.
    const int64_t a = e(), h = e(), t = e();
    cases.push_back({"CausalMask", {{a}, {h}, {t, false}, {t, false}}, {{0, 1, 2, 3}}, [=](Graph& g, Data&) {
                       return One(g.CausalMask(P(g, "x", {a, h, t, t}), -1e4f));
                     }});
  }
  {
    // OneHot: the index dims split (indices read whole by every rank, then
    // sliced with the strategy); the depth, a middle axis here, never.
    // Indices reach depth itself: an out-of-range row of off_value.
    const int64_t a = e(), b = e(), depth = e();
    cases.push_back({"OneHot_axis1", {{a}, {b}}, {{0, 1}}, [=](Graph& g, Data& d) {
                       const TensorId ids = Ints(g, d, "ids", {a, b}, static_cast<int32_t>(depth + 1), 11);
                       return One(g.OneHot(ids, depth, 0.75f, -0.25f, 1));
                     }});
    // Pad: the padded axes stay whole, the others split.
    const int64_t r = e(), c = e(), k = e();
    cases.push_back({"Pad_reflect_axis1", {{r}, {c, false}, {k}}, {{0, 1, 2}}, [=](Graph& g, Data&) {
                       return One(g.Pad(P(g, "x", {r, c, k}), {{0, 0}, {1, c - 1}, {0, 0}}, host::PadMode::Reflect));
                     }});
    cases.push_back({"Pad_constant_last", {{r}, {k, false}}, {{0, 1}}, [=](Graph& g, Data&) {
                       return One(g.Pad(P(g, "x", {r, k}), {{0, 0}, {2, 3}}, host::PadMode::Constant, 0.5f));
                     }});
  }
  {
    const int64_t a = e(), b = e();
    cases.push_back({"Cast_bf16", {{a}, {b}}, {{0, 1}}, [=](Graph& g, Data&) {
                       const TensorId y = g.Cast(P(g, "x", {a, b}), DType::BF16);
                       return Built{y, {g.Cast(y, DType::F32)}};
                     }});
  }
  {
    // x [N, Ci, H, W], w [Co, Ci, Kh, Kw]: the image and kernel dims need
    // halo exchange; N, Ci (a reduction) and Co may be split.
    const int64_t n = e(), ci = e(), co = e(), hw = 5, kk = 3;
    cases.push_back({"Conv2D",
                     {{n}, {ci}, {hw, false}, {hw, false}, {co}, {kk, false}, {kk, false}},
                     {{0, 1, 2, 3}, {4, 1, 5, 6}},
                     [=](Graph& g, Data&) {
                       return One(g.Conv2D(P(g, "x", {n, ci, hw, hw}), P(g, "w", {co, ci, kk, kk}), 1, 1));
                     }});
    // MaxPool2D's flat argmax workspace splits with the batch only.
    cases.push_back({"MaxPool2D", {{n}, {ci, false}, {4, false}, {4, false}}, {{0, 1, 2, 3}}, [=](Graph& g, Data&) {
                       return One(g.MaxPool2D(P(g, "x", {n, ci, 4, 4}), 2, 2));
                     }});
    cases.push_back({"AvgPool2D", {{n}, {ci}, {4, false}, {4, false}}, {{0, 1, 2, 3}}, [=](Graph& g, Data&) {
                       return One(g.AvgPool2D(P(g, "x", {n, ci, 4, 4}), 2, 2));
                     }});
  }
  {
    const int64_t n = 8, c = e();
    cases.push_back({"SparseSoftmaxCrossEntropy", {{n}, {c, false}}, {{0, 1}, {0}}, [=](Graph& g, Data& d) {
                       const TensorId logits = P(g, "logits", {n, c}, -2.f, 2.f);
                       return One(
                           g.SparseSoftmaxCrossEntropy(logits, Ints(g, d, "labels", {n}, static_cast<int32_t>(c), 9)));
                     }});
  }
  return cases;
}

// The whole graph of a case: the op, then the loss over its terms, every
// op after the one under test replicated.
Graph BuildGraph(const Case& c, const Strategy* strategy, std::map<TensorId, std::vector<int32_t>>* ints) {
  seed_counter = 100;
  Graph g(c.name);
  const Built b = c.build(g, *ints);
  if (!g.status().ok()) return g;
  if (strategy) g.Shard(b.op_output, *strategy);
  auto ones = [&](TensorId t) { return std::vector<int64_t>(g.tensor(t).shape.size(), 1); };
  TensorId loss = host::kInvalidTensor;
  for (size_t i = 0; i < b.terms.size(); ++i) {
    const TensorId t = b.terms[i];
    // Ops between the op under test and the loss (Cast back, Reshape's
    // producer is the op itself) run replicated.
    if (t != b.op_output && g.producer(t) >= 0 && g.ops()[g.producer(t)].op == OpCode::Cast)
      g.Shard(t, {ones(g.ops()[g.producer(t)].inputs[0])});
    const TensorId r = P(g, testing::Cat("r", std::to_string(i)), g.tensor(t).shape);
    TensorId term = g.Shard(g.Mul(t, r), {ones(t), ones(r)});
    if (!g.tensor(term).shape.empty()) term = g.Shard(g.ReduceSum(term), {ones(term)});
    loss = loss == host::kInvalidTensor ? term : g.Shard(g.Add(loss, term), {{}, {}});
  }
  g.SetLoss(loss);
  return g;
}

// Every strategy of a case on `n` devices: a split per loop (a power of 2)
// with the product dividing n, legal when each split loop may be split and
// divides its extent.
struct Candidate {
  Strategy strategy;
  bool legal = true;
};

std::vector<Candidate> Enumerate(const Case& c, int64_t n) {
  std::vector<Candidate> out;
  std::vector<int64_t> split(c.loops.size(), 1);
  std::function<void(size_t, int64_t)> rec = [&](size_t loop, int64_t product) {
    if (loop == c.loops.size()) {
      Candidate cand;
      for (const std::vector<int>& dims : c.input_loops) {
        std::vector<int64_t> s;
        for (int l : dims) s.push_back(l < 0 ? 1 : split[l]);
        cand.strategy.push_back(std::move(s));
      }
      for (size_t l = 0; l < c.loops.size(); ++l)
        if (split[l] > 1 && (!c.loops[l].splittable || c.loops[l].extent % split[l] != 0)) cand.legal = false;
      out.push_back(std::move(cand));
      return;
    }
    for (int64_t s = 1; product * s <= n; s *= 2) {
      if (n % (product * s) != 0) continue;
      split[loop] = s;
      rec(loop + 1, product * s);
    }
    split[loop] = 1;
  };
  rec(0, 1);
  return out;
}

// -- running a graph -------------------------------------------------------------

// The shared one-thread options, without prefaulting (each case loads a
// fresh stream and runs it once: touching its pages up front buys nothing)
// and with the queues' waits bounded like the peers'.
device::DeviceOptions OneThread() {
  device::DeviceOptions o = testing::OneThreadOptions();
  o.prefault = false;
  o.get_next_timeout = std::chrono::seconds(60);
  o.push_timeout = std::chrono::seconds(60);
  return o;
}

struct ParamSlice {
  Shape global, shape;
  std::vector<int64_t> offset;
  std::vector<double> before, after;
};

struct RankResult {
  Status status;
  double loss = NAN;
  std::map<std::string, ParamSlice> params;
};

host::CompileOptions Options(uint32_t world, uint32_t rank) {
  host::CompileOptions o;
  o.optimizer = host::OptimizerSpec::Sgd(1.0f);
  o.parallel_mode = world > 1 ? host::ParallelMode::SemiAutoParallel : host::ParallelMode::StandAlone;
  o.world_size = world;
  o.rank = rank;
  o.eval_program = false;
  return o;
}

std::vector<double> Floats(const std::vector<uint8_t>& bytes) {
  std::vector<float> f(bytes.size() / sizeof(float));
  std::memcpy(f.data(), bytes.data(), f.size() * sizeof(float));
  return std::vector<double>(f.begin(), f.end());
}

// Compiles `g` for `rank` of `world`, loads it, runs one train step and
// reads every Param slice before and after it.
Status RunRank(DeviceLink& dev, const Graph& g, const std::map<TensorId, std::vector<int32_t>>& ints, uint32_t world,
               uint32_t rank, RankResult* out) {
  SINKRT_ASSIGN_OR_RETURN(host::CompiledStream cs, host::Compile(g, Options(world, rank)));
  SINKRT_RETURN_IF_ERROR(dev.Load(cs.stream).status());
  const fb::TaskStream* root = cs.stream.root();
  std::map<uint32_t, const fb::Init*> inits;
  if (root->initializers())
    for (const fb::Initializer* i : *root->initializers()) inits[i->buffer()] = i->init();
  std::map<std::string, uint32_t> buffers;
  for (TensorId t = 0; t < g.tensors().size(); ++t) {
    const host::TensorInfo& info = g.tensor(t);
    if (info.kind != host::TensorKind::Param) continue;
    const int64_t b = cs.stream.FindBuffer(info.name);
    if (b < 0) return NotFound("rank " + std::to_string(rank) + " has no buffer for parameter " + info.name);
    buffers[info.name] = static_cast<uint32_t>(b);
    ParamSlice& p = out->params[info.name];
    p.global = info.shape;
    const fb::Buffer* buf = root->buffers()->Get(static_cast<uint32_t>(b));
    if (buf->shape()) p.shape.assign(buf->shape()->begin(), buf->shape()->end());
    p.offset.assign(info.shape.size(), 0);
    auto it = inits.find(static_cast<uint32_t>(b));
    if (it != inits.end() && it->second->slice_offset()) {
      p.offset.assign(it->second->slice_offset()->begin(), it->second->slice_offset()->end());
      if (!it->second->global_shape() ||
          Shape(it->second->global_shape()->begin(), it->second->global_shape()->end()) != info.shape)
        return Internal(info.name + ": the initializer's global_shape is not the parameter's shape");
    }
    if (p.shape.size() != p.global.size() || p.offset.size() != p.global.size())
      return Internal(info.name + ": slice shape or offset of the wrong rank");
    SINKRT_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, dev.ReadTensor(static_cast<uint32_t>(b)));
    p.before = Floats(bytes);
  }
  std::vector<ConstBytes> cols;
  for (const auto& [t, v] : ints)
    cols.emplace_back(reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(int32_t));
  if (!cols.empty()) SINKRT_RETURN_IF_ERROR(dev.PushBatch(0, cols));
  SINKRT_ASSIGN_OR_RETURN(SinkResult r, dev.RunSink(ProgramKind::TrainStep, 1));
  if (r.reports.empty()) return Internal("train_step reported no loss");
  out->loss = r.reports.at(0).scalar();
  for (auto& [name, b] : buffers) {
    SINKRT_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, dev.ReadTensor(b));
    out->params[name].after = Floats(bytes);
  }
  return Status::Ok();
}

// One world of in-process devices for every case run on it.
class World {
 public:
  explicit World(uint32_t n) : ranks_(static_cast<int>(n), OneThread()) {
    std::vector<PeerEndpoint> members;
    for (uint32_t r = 0; r < n; ++r) {
      auto e = ranks_.devices[r]->Endpoint();
      EXPECT_TRUE(e.ok()) << e.status().ToString();
      if (e.ok()) members.push_back(*e);
    }
    std::vector<std::thread> threads;
    std::vector<Status> status(n);
    for (uint32_t r = 0; r < n; ++r)
      threads.emplace_back([&, r] { status[r] = ranks_.devices[r]->JoinWorld({1600 + n, r, members}); });
    for (std::thread& t : threads) t.join();
    for (uint32_t r = 0; r < n; ++r) EXPECT_TRUE(status[r].ok()) << "rank " << r << ": " << status[r].ToString();
  }

  size_t size() const { return ranks_.devices.size(); }

  std::vector<RankResult> Run(const Graph& g, const std::map<TensorId, std::vector<int32_t>>& ints) {
    const uint32_t n = static_cast<uint32_t>(ranks_.devices.size());
    std::vector<RankResult> out(n);
    std::vector<std::thread> threads;
    for (uint32_t r = 0; r < n; ++r)
      threads.emplace_back([&, r] { out[r].status = RunRank(*ranks_.devices[r], g, ints, n, r, &out[r]); });
    for (std::thread& t : threads) t.join();
    return out;
  }

 private:
  testing::InProcessWorld ranks_;
};

// The single-device run of a case: the loss, and per Param its update
// (old - new = the gradient) and its old value.
struct Reference {
  double loss = NAN;
  std::map<std::string, ParamSlice> params;
};

int64_t FlatIndex(const Shape& whole, const std::vector<int64_t>& offset, const std::vector<int64_t>& idx) {
  int64_t flat = 0;
  for (size_t d = 0; d < whole.size(); ++d) flat = flat * whole[d] + offset[d] + idx[d];
  return flat;
}

// Compares one rank's run with the reference; returns the worst error
// relative to its tolerance (<= 1 passes).
void ExpectMatches(const Reference& ref, const RankResult& got, uint32_t rank, const std::string& what) {
  SCOPED_TRACE(what + ", rank " + std::to_string(rank));
  EXPECT_NEAR(got.loss, ref.loss, 1e-5 * std::max(1.0, std::abs(ref.loss))) << "loss";
  for (const auto& [name, want] : ref.params) {
    auto it = got.params.find(name);
    if (it == got.params.end()) {
      ADD_FAILURE() << "no parameter " << name;
      continue;
    }
    const ParamSlice& p = it->second;
    double scale = 1e-3;
    for (size_t i = 0; i < want.before.size(); ++i)
      scale = std::max({scale, std::abs(want.before[i]), std::abs(want.before[i] - want.after[i])});
    int64_t n = 1;
    for (int64_t d : p.shape) n *= d;
    ASSERT_EQ(p.before.size(), static_cast<size_t>(n)) << name;
    ASSERT_EQ(p.after.size(), static_cast<size_t>(n)) << name;
    std::vector<int64_t> idx(p.shape.size(), 0);
    int reported = 0;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t flat = FlatIndex(p.global, p.offset, idx);
      const double old_want = want.before[flat], grad_want = want.before[flat] - want.after[flat];
      const double grad_got = p.before[i] - p.after[i];
      if (p.before[i] != old_want && reported++ < 3)
        ADD_FAILURE() << name << " element " << flat << ": initial value " << p.before[i] << ", one device "
                      << old_want;
      if (std::abs(grad_got - grad_want) > 1e-5 * scale && reported++ < 3)
        ADD_FAILURE() << name << (name[0] == 'r' ? " (the op's forward output)" : " (gradient)") << " element " << flat
                      << ": " << grad_got << ", one device " << grad_want;
      for (size_t d = idx.size(); d-- > 0;) {
        if (++idx[d] < p.shape[d]) break;
        idx[d] = 0;
      }
    }
  }
}

Reference RunReference(const Case& c) {
  std::map<TensorId, std::vector<int32_t>> ints;
  const Graph g = BuildGraph(c, nullptr, &ints);
  Reference ref;
  EXPECT_TRUE(g.status().ok()) << g.status().ToString();
  device::InProcessDevice dev(OneThread());
  RankResult r;
  const Status s = RunRank(dev, g, ints, 1, 0, &r);
  EXPECT_TRUE(s.ok()) << c.name << " on one device: " << s.ToString();
  ref.loss = r.loss;
  ref.params = std::move(r.params);
  return ref;
}

class ParallelOpRules : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    two_ = new World(2);
    four_ = new World(4);
  }
  static void TearDownTestSuite() {
    delete two_;
    delete four_;
    two_ = four_ = nullptr;
  }
  static World* two_;
  static World* four_;
};
World* ParallelOpRules::two_ = nullptr;
World* ParallelOpRules::four_ = nullptr;

TEST_F(ParallelOpRules, EveryStrategyOfEveryOpMatchesOneDevice) {
  size_t legal = 0, refused = 0;
  for (const Case& c : MakeCases()) {
    const Reference ref = RunReference(c);
    if (::testing::Test::HasFailure()) return;
    for (World* world : {two_, four_}) {
      const int64_t n = static_cast<int64_t>(world->size());
      for (const Candidate& cand : Enumerate(c, n)) {
        const std::string what = c.name + " " + host::StrategyToString(cand.strategy) + " on " + std::to_string(n);
        if (std::getenv("SINKRT_TEST_VERBOSE"))
          std::fprintf(stderr, "%s%s\n", what.c_str(), cand.legal ? "" : " (illegal)");
        std::map<TensorId, std::vector<int32_t>> ints;
        const Graph g = BuildGraph(c, &cand.strategy, &ints);
        ASSERT_TRUE(g.status().ok()) << what << ": " << g.status().ToString();
        if (!cand.legal) {
          // Refused with an error by every rank's Compile (rank 0 stands
          // for them: the check does not depend on the rank).
          auto cs = host::Compile(g, Options(static_cast<uint32_t>(n), 0));
          EXPECT_FALSE(cs.ok()) << what << " should be refused";
          if (!cs.ok()) {
            EXPECT_FALSE(cs.status().message().empty()) << what;
          }
          ++refused;
          continue;
        }
        ++legal;
        const std::vector<RankResult> got = world->Run(g, ints);
        bool ok = true;
        for (size_t r = 0; r < got.size(); ++r) {
          EXPECT_TRUE(got[r].status.ok()) << what << ", rank " << r << ": " << got[r].status.ToString();
          ok &= got[r].status.ok();
        }
        if (!ok) continue;
        for (size_t r = 0; r < got.size(); ++r) ExpectMatches(ref, got[r], static_cast<uint32_t>(r), what);
      }
    }
  }
  std::printf("%zu legal strategies matched one device, %zu illegal ones refused\n", legal, refused);
  EXPECT_GT(legal, 100u);
  EXPECT_GT(refused, 50u);
}

}  // namespace
}  // namespace sinkrt
