// Every differentiable op's gradient, through the whole pipeline, against
// central finite differences of a float64 reference.
//
// For each case the op's float inputs are Params with fixed random values and
//   loss = ReduceSum(Mul(op(params...), R))
// with R a Const of fixed random weights, so that the scalar loss depends on
// every output element and d(loss)/d(output) = R is no special value. The
// graph is compiled with SGD at learning rate 0 (params stay put), run for one
// train_step on an InProcessDevice, and each "<param>/grad" buffer is read
// back and compared with (L(p + h) − L(p − h)) / 2h computed in double by
// support/reference_ops. Inputs are drawn away from kinks (ReLU at 0,
// max-pool ties) so that the finite difference is the derivative.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <ostream>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "device/src/random/dropout_mask.h"
#include "sinkrt/device/in_process_device.h"
#include "sinkrt/fb/task_stream_generated.h"
#include "sinkrt/host/compiler.h"
#include "sinkrt/host/nn.h"
#include "sinkrt/runtime/task_stream_verifier.h"
#include "support/reference_layout_ops.h"
#include "support/reference_ops.h"
#include "support/str_cat.h"

namespace sinkrt {
namespace {

using host::Graph;
using host::InitSpec;
using host::TensorId;
using testing::Cat;
using testing::RefTensor;
using testing::RefWindow;

// f32 device math against a float64 reference. The worst gradient error seen
// over every case is below 1e-6, so these leave room for other CPUs' kernel
// choices while still catching a wrong term in a gradient of size 0.01.
constexpr double kGradAbsTol = 1e-4, kGradRelTol = 1e-3;
constexpr double kLossAbsTol = 1e-4, kLossRelTol = 1e-4;
constexpr double kStep = 1e-4;  // finite-difference step, in double

enum class Draw {
  Unit,          // U(-1, 1)
  Wide,          // U(-3, 3): reaches the curved parts of tanh, sigmoid, gelu
  AwayFromZero,  // ±U(0.1, 1): no ReLU kink within the finite-difference step
  Distinct,      // a shuffled grid 0.05 apart: no max-pool ties
  Bf16,          // U(-1, 1) rounded to bf16: a Cast to bf16 is exact (and so are the weights R)
  Positive,      // U(0.5, 2): inside the domain of Log, Sqrt and Rsqrt, away from their pole at 0
};

struct ParamSpec {
  std::string name;
  Shape shape;
  Draw draw = Draw::Unit;
};

using Params = std::vector<TensorId>;
using RefParams = std::vector<RefTensor>;

struct GradCase {
  std::string name;  // gtest parameter name: letters, digits, underscores
  std::vector<ParamSpec> params;
  // Non-empty: an i32 Input "labels" fed through the train queue.
  std::vector<int32_t> labels;
  std::function<TensorId(Graph&, const Params&, TensorId labels)> build;
  std::function<RefTensor(const RefParams&, const std::vector<int32_t>& labels)> reference;
};

void PrintTo(const GradCase& c, std::ostream* os) { *os << c.name; }

std::string Dims(const Shape& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += 'x';
    out += std::to_string(s[i]);
  }
  return out.empty() ? "scalar" : out;
}

uint64_t Fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

std::vector<float> DrawValues(Draw how, int64_t n, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f), mag(0.1f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  switch (how) {
    case Draw::Unit:
      for (float& x : v) x = unit(rng);
      break;
    case Draw::Wide:
      for (float& x : v) x = 3.0f * unit(rng);
      break;
    case Draw::AwayFromZero:
      for (float& x : v) x = (rng() & 1 ? 1.0f : -1.0f) * mag(rng);
      break;
    case Draw::Distinct:
      for (int64_t i = 0; i < n; ++i) v[i] = 0.05f * (static_cast<float>(i) - static_cast<float>(n) / 2 + 0.5f);
      std::shuffle(v.begin(), v.end(), rng);
      break;
    case Draw::Bf16:
      for (float& x : v) x = static_cast<float>(testing::RefRoundToBf16(unit(rng)));
      break;
    case Draw::Positive:
      for (float& x : v) x = 1.25f + 0.75f * unit(rng);
      break;
  }
  return v;
}

RefTensor Widen(const Shape& shape, const std::vector<float>& v) {
  return RefTensor(shape, std::vector<double>(v.begin(), v.end()));
}

// ---- the cases ----------------------------------------------------------------

host::OpAttrs ConvAttrs(const RefWindow& w) {
  host::OpAttrs a;
  a.stride_h = w.stride_h;
  a.stride_w = w.stride_w;
  a.pad_top = w.pad_top;
  a.pad_bottom = w.pad_bottom;
  a.pad_left = w.pad_left;
  a.pad_right = w.pad_right;
  a.dilation_h = w.dilation_h;
  a.dilation_w = w.dilation_w;
  return a;
}

void AddMatMulCases(std::vector<GradCase>& cases) {
  struct Mkn {
    int64_t m, k, n;
  };
  // The last shape is large enough for oneDNN's vectorised paths and tails.
  for (Mkn d : {Mkn{3, 4, 5}, Mkn{1, 7, 2}, Mkn{6, 1, 3}, Mkn{17, 33, 9}})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        Shape sa = ta ? Shape{d.k, d.m} : Shape{d.m, d.k};
        Shape sb = tb ? Shape{d.n, d.k} : Shape{d.k, d.n};
        cases.push_back({Cat("MatMul", ta ? "_ta" : "", tb ? "_tb" : "", "_", Dims({d.m, d.k, d.n})),
                         {{"a", sa}, {"b", sb}},
                         {},
                         [=](Graph& g, const Params& p, TensorId) { return g.MatMul(p[0], p[1], ta, tb); },
                         [=](const RefParams& p, const auto&) { return testing::RefMatMul(p[0], p[1], ta, tb); }});
      }
}

void AddBiasAddCases(std::vector<GradCase>& cases) {
  for (Shape s : {Shape{4, 5}, Shape{1, 3}, Shape{2, 3, 4}, Shape{2, 3, 4, 5}, Shape{1, 2, 3, 3}}) {
    // The builder's channel axis: 1 for [N,C] and for NCHW-style ranks.
    cases.push_back({Cat("BiasAdd_", Dims(s)),
                     {{"x", s}, {"bias", {s[1]}}},
                     {},
                     [](Graph& g, const Params& p, TensorId) { return g.BiasAdd(p[0], p[1]); },
                     [](const RefParams& p, const auto&) { return testing::RefBiasAdd(p[0], p[1], 1); }});
  }
}

void AddBroadcastingCases(std::vector<GradCase>& cases) {
  struct Op {
    const char* name;
    TensorId (Graph::*build)(TensorId, TensorId);
    RefTensor (*ref)(const RefTensor&, const RefTensor&);
  };
  const Op ops[] = {{"Add", &Graph::Add, testing::RefAdd},
                    {"Sub", &Graph::Sub, testing::RefSub},
                    {"Mul", &Graph::Mul, testing::RefMul}};
  const std::pair<Shape, Shape> shapes[] = {{{3, 4}, {3, 4}}, {{3, 4}, {4}}, {{2, 1, 4}, {3, 1}},
                                            {{2, 3}, {}},     {{1}, {2, 3}}, {{4, 1}, {1, 5}}};
  for (const Op& op : ops)
    for (const auto& [sa, sb] : shapes)
      cases.push_back({Cat(op.name, "_", Dims(sa), "_by_", Dims(sb)),
                       {{"a", sa}, {"b", sb}},
                       {},
                       [build = op.build](Graph& g, const Params& p, TensorId) { return (g.*build)(p[0], p[1]); },
                       [ref = op.ref](const RefParams& p, const auto&) { return ref(p[0], p[1]); }});
  // Div's divisor away from its pole, Pow's base inside its domain; Maximum
  // and Minimum on a grid whose operands never tie (the kink).
  struct MathOp {
    const char* name;
    TensorId (Graph::*build)(TensorId, TensorId);
    RefTensor (*ref)(const RefTensor&, const RefTensor&);
    Draw a, b;
  };
  const MathOp math[] = {{"Div", &Graph::Div, testing::RefDiv, Draw::Unit, Draw::AwayFromZero},
                         {"Maximum", &Graph::Maximum, testing::RefMaximum, Draw::Distinct, Draw::AwayFromZero},
                         {"Minimum", &Graph::Minimum, testing::RefMinimum, Draw::Distinct, Draw::AwayFromZero},
                         {"Pow", &Graph::Pow, testing::RefPow, Draw::Positive, Draw::Wide}};
  for (const MathOp& op : math)
    for (const auto& [sa, sb] : shapes)
      cases.push_back({Cat(op.name, "_", Dims(sa), "_by_", Dims(sb)),
                       {{"a", sa, op.a}, {"b", sb, op.b}},
                       {},
                       [build = op.build](Graph& g, const Params& p, TensorId) { return (g.*build)(p[0], p[1]); },
                       [ref = op.ref](const RefParams& p, const auto&) { return ref(p[0], p[1]); }});
}

void AddUnaryCases(std::vector<GradCase>& cases) {
  struct Op {
    const char* name;
    TensorId (Graph::*build)(TensorId);
    RefTensor (*ref)(const RefTensor&);
    Draw draw;
  };
  const Op ops[] = {{"Relu", &Graph::Relu, testing::RefRelu, Draw::AwayFromZero},
                    {"Gelu", &Graph::Gelu, testing::RefGelu, Draw::Wide},
                    {"Tanh", &Graph::Tanh, testing::RefTanh, Draw::Wide},
                    {"Sigmoid", &Graph::Sigmoid, testing::RefSigmoid, Draw::Wide},
                    {"Exp", &Graph::Exp, testing::RefExp, Draw::Wide},
                    {"Log", &Graph::Log, testing::RefLog, Draw::Positive},
                    {"Sqrt", &Graph::Sqrt, testing::RefSqrt, Draw::Positive},
                    {"Rsqrt", &Graph::Rsqrt, testing::RefRsqrt, Draw::Positive},
                    {"Square", &Graph::Square, testing::RefSquare, Draw::Wide},
                    {"Abs", &Graph::Abs, testing::RefAbs, Draw::AwayFromZero},
                    {"Erf", &Graph::Erf, testing::RefErf, Draw::Wide}};
  for (const Op& op : ops)
    for (Shape s : {Shape{7}, Shape{3, 5}, Shape{2, 3, 4}})
      cases.push_back({Cat(op.name, "_", Dims(s)),
                       {{"x", s, op.draw}},
                       {},
                       [build = op.build](Graph& g, const Params& p, TensorId) { return (g.*build)(p[0]); },
                       [ref = op.ref](const RefParams& p, const auto&) { return ref(p[0]); }});
  // Exact GELU: Gelu with approximate = false.
  for (Shape s : {Shape{7}, Shape{3, 5}, Shape{2, 3, 4}})
    cases.push_back({Cat("GeluErf_", Dims(s)),
                     {{"x", s, Draw::Wide}},
                     {},
                     [](Graph& g, const Params& p, TensorId) { return g.Gelu(p[0], /*approximate=*/false); },
                     [](const RefParams& p, const auto&) { return testing::RefGeluErf(p[0]); }});
}

void AddSoftmaxCases(std::vector<GradCase>& cases) {
  const std::pair<Shape, int> shapes[] = {{{4, 5}, -1}, {{1, 6}, -1}, {{3, 4}, 0}, {{2, 3, 4}, 1}, {{2, 3, 4}, -1}};
  for (const auto& [s, axis] : shapes) {
    std::string suffix = Cat("_", Dims(s), "_axis", axis < 0 ? "m" : "", std::to_string(std::abs(axis)));
    cases.push_back({Cat("Softmax", suffix),
                     {{"x", s, Draw::Wide}},
                     {},
                     [axis](Graph& g, const Params& p, TensorId) { return g.Softmax(p[0], axis); },
                     [axis](const RefParams& p, const auto&) { return testing::RefSoftmax(p[0], axis); }});
    cases.push_back({Cat("LogSoftmax", suffix),
                     {{"x", s, Draw::Wide}},
                     {},
                     [axis](Graph& g, const Params& p, TensorId) { return g.LogSoftmax(p[0], axis); },
                     [axis](const RefParams& p, const auto&) { return testing::RefLogSoftmax(p[0], axis); }});
  }
}

void AddCrossEntropyCases(std::vector<GradCase>& cases) {
  const std::pair<Shape, std::vector<int32_t>> shapes[] = {
      {{4, 5}, {0, 4, 2, 2}}, {{1, 3}, {1}}, {{6, 2}, {1, 0, 0, 1, 1, 1}}};
  for (const auto& [s, labels] : shapes)
    cases.push_back({Cat("SparseSoftmaxCrossEntropy_", Dims(s)),
                     {{"logits", s, Draw::Wide}},
                     labels,
                     [](Graph& g, const Params& p, TensorId l) { return g.SparseSoftmaxCrossEntropy(p[0], l); },
                     [](const RefParams& p, const std::vector<int32_t>& l) {
                       return testing::RefSparseSoftmaxCrossEntropy(p[0], l);
                     }});
}

void AddReduceCases(std::vector<GradCase>& cases) {
  struct R {
    Shape shape;
    std::vector<int> axes;
    bool keep;
    const char* tag;
  };
  const R reductions[] = {{{3, 4}, {}, false, "all"},
                          {{3, 4}, {1}, false, "axis1"},
                          {{2, 3, 4}, {0, 2}, true, "axes02_keep"},
                          {{2, 3, 4}, {-1}, true, "axism1_keep"},
                          {{5}, {0}, false, "axis0"},
                          {{2, 3, 4}, {}, true, "all_keep"}};
  for (const R& r : reductions) {
    std::vector<int> axes = r.axes;
    bool keep = r.keep;
    cases.push_back({Cat("ReduceSum_", Dims(r.shape), "_", r.tag),
                     {{"x", r.shape}},
                     {},
                     [=](Graph& g, const Params& p, TensorId) { return g.ReduceSum(p[0], axes, keep); },
                     [=](const RefParams& p, const auto&) { return testing::RefReduceSum(p[0], axes, keep); }});
    cases.push_back({Cat("ReduceMean_", Dims(r.shape), "_", r.tag),
                     {{"x", r.shape}},
                     {},
                     [=](Graph& g, const Params& p, TensorId) { return g.ReduceMean(p[0], axes, keep); },
                     [=](const RefParams& p, const auto&) { return testing::RefReduceMean(p[0], axes, keep); }});
  }
}

// ReduceMax on distinct values (no tie within the finite-difference step):
// the gradient reaches the one max of each reduced group.
void AddReduceMaxCases(std::vector<GradCase>& cases) {
  struct R {
    Shape shape;
    std::vector<int> axes;
    bool keep;
    const char* tag;
  };
  const R reductions[] = {{{3, 4}, {}, false, "all"},
                          {{3, 4}, {1}, false, "axis1"},
                          {{2, 3, 4}, {0, 2}, true, "axes02_keep"},
                          {{2, 3, 4}, {1}, false, "axis1"},
                          {{2, 3, 4}, {-1}, true, "axism1_keep"},
                          {{5}, {0}, false, "axis0"}};
  for (const R& r : reductions) {
    std::vector<int> axes = r.axes;
    bool keep = r.keep;
    cases.push_back({Cat("ReduceMax_", Dims(r.shape), "_", r.tag),
                     {{"x", r.shape, Draw::Distinct}},
                     {},
                     [=](Graph& g, const Params& p, TensorId) { return g.ReduceMax(p[0], axes, keep); },
                     [=](const RefParams& p, const auto&) { return testing::RefReduceMax(p[0], axes, keep); }});
  }
}

// Select with an f32 Const cond (nonzero true) broadcast against x and y;
// CausalMask square, with earlier keys and with fewer keys than queries.
void AddMaskingCases(std::vector<GradCase>& cases) {
  struct S {
    Shape c, x, y;
  };
  const S shapes[] = {{{7}, {7}, {7}}, {{3, 1}, {3, 4}, {4}}, {{4}, {2, 3, 4}, {3, 1}}, {{2, 1, 3}, {1, 4, 1}, {3}}};
  for (const S& sh : shapes) {
    std::vector<float> cond;
    for (int64_t i = 0; i < NumElements(sh.c); ++i)
      cond.push_back(static_cast<float>((i * 7 + 3) % 3 == 0 ? 0 : i + 1));
    const Shape cs = sh.c;
    cases.push_back({Cat("Select_", Dims(sh.c), "_", Dims(sh.x), "_", Dims(sh.y)),
                     {{"x", sh.x}, {"y", sh.y}},
                     {},
                     [cs, cond](Graph& g, const Params& p, TensorId) {
                       return g.Select(g.Const("cond", cs, InitSpec::Inline(cond)), p[0], p[1]);
                     },
                     [cs, cond](const RefParams& p, const auto&) {
                       return testing::RefSelect(RefTensor(cs, std::vector<double>(cond.begin(), cond.end())), p[0],
                                                 p[1]);
                     }});
  }
  for (const Shape& s : {Shape{4, 4}, Shape{2, 3, 5}, Shape{2, 2, 4, 3}}) {
    cases.push_back({Cat("CausalMask_", Dims(s)),
                     {{"scores", s, Draw::Wide}},
                     {},
                     [](Graph& g, const Params& p, TensorId) { return g.CausalMask(p[0], -3.0f); },
                     [](const RefParams& p, const auto&) { return testing::RefCausalMask(p[0], -3.0); }});
  }
}

// Pad in every mode, one axis and several (reflect and symmetric fold the
// mirrored dy back onto x); OneHot (no gradient of its own) feeding a
// product with a Param, on the last axis and a middle one.
void AddPadOneHotCases(std::vector<GradCase>& cases) {
  struct P {
    Shape x;
    std::vector<std::pair<int64_t, int64_t>> pads;
  };
  const P shapes[] = {{{5}, {{2, 3}}}, {{3, 4}, {{1, 2}, {0, 3}}}, {{2, 3, 4}, {{0, 0}, {2, 1}, {3, 3}}}};
  const std::pair<host::PadMode, const char*> modes[] = {{host::PadMode::Constant, "constant"},
                                                         {host::PadMode::Reflect, "reflect"},
                                                         {host::PadMode::Symmetric, "symmetric"}};
  for (const P& sh : shapes) {
    for (const auto& [mode, mode_name] : modes) {
      std::vector<int64_t> flat;
      for (const auto& [b, a] : sh.pads) {
        flat.push_back(b);
        flat.push_back(a);
      }
      const auto pads = sh.pads;
      const host::PadMode m = mode;
      cases.push_back({Cat("Pad_", mode_name, "_", Dims(sh.x)),
                       {{"x", sh.x}},
                       {},
                       [pads, m](Graph& g, const Params& p, TensorId) { return g.Pad(p[0], pads, m, 0.5f); },
                       [flat, m](const RefParams& p, const auto&) {
                         return testing::RefPad(p[0], flat, static_cast<int>(m), 0.5);
                       }});
    }
  }
  cases.push_back({"OneHot_last_times_x",
                   {{"x", {5, 4}}},
                   {2, 0, 3, -1, 4},
                   [](Graph& g, const Params& p, TensorId l) { return g.Mul(g.OneHot(l, 4, 0.9f, 0.025f), p[0]); },
                   [](const RefParams& p, const std::vector<int32_t>& l) {
                     return testing::RefMul(testing::RefOneHot(l, {5}, 4, 0.9f, 0.025f, -1), p[0]);
                   }});
  cases.push_back({"OneHot_axis0_times_x",
                   {{"x", {3, 2, 2}}},
                   {1, 2, 0, 1},
                   [](Graph& g, const Params& p, TensorId l) {
                     return g.Mul(g.OneHot(g.Reshape(l, {2, 2}), 3, 2.0f, -1.0f, 0), p[0]);
                   },
                   [](const RefParams& p, const std::vector<int32_t>& l) {
                     return testing::RefMul(testing::RefOneHot(l, {2, 2}, 3, 2.0, -1.0, 0), p[0]);
                   }});
}

void AddShapeCases(std::vector<GradCase>& cases) {
  const std::pair<Shape, Shape> reshapes[] = {{{2, 6}, {3, 4}}, {{2, 3, 4}, {-1, 4}}, {{6}, {1, 2, 3}}};
  for (const auto& [from, to] : reshapes)
    cases.push_back({Cat("Reshape_", Dims(from), "_to_", to[0] < 0 ? "inferred" : Dims(to)),
                     {{"x", from}},
                     {},
                     [to](Graph& g, const Params& p, TensorId) { return g.Reshape(p[0], to); },
                     [to](const RefParams& p, const auto&) { return testing::RefReshape(p[0], to); }});
  for (Shape s : {Shape{2, 3, 2, 2}, Shape{3, 4}, Shape{2, 5, 1}})
    cases.push_back({Cat("Flatten_", Dims(s)),
                     {{"x", s}},
                     {},
                     [](Graph& g, const Params& p, TensorId) { return g.Flatten(p[0]); },
                     [](const RefParams& p, const auto&) { return testing::RefFlatten(p[0]); }});
}

void AddConvCases(std::vector<GradCase>& cases) {
  struct C {
    const char* tag;
    Shape x, w;
    RefWindow win;
  };
  RefWindow asym;
  asym.stride_h = 2;
  asym.stride_w = 1;
  asym.pad_top = 0;
  asym.pad_bottom = 1;
  asym.pad_left = 1;
  asym.pad_right = 0;
  RefWindow dilated;
  dilated.dilation_h = dilated.dilation_w = 2;
  dilated.pad_top = dilated.pad_bottom = dilated.pad_left = dilated.pad_right = 1;
  const C convs[] = {{"s1p0", {1, 2, 5, 5}, {3, 2, 3, 3}, RefWindow::Square(1, 1, 0)},
                     {"s2p1", {2, 1, 6, 6}, {2, 1, 3, 3}, RefWindow::Square(1, 2, 1)},
                     {"1x1", {1, 3, 4, 4}, {2, 3, 1, 1}, RefWindow::Square(1, 1, 0)},
                     {"s1p2_5x5", {1, 1, 5, 5}, {2, 1, 5, 5}, RefWindow::Square(1, 1, 2)},
                     {"stride2x1_asympad", {1, 2, 5, 4}, {2, 2, 2, 3}, asym},
                     {"dilation2", {1, 1, 6, 6}, {1, 1, 3, 3}, dilated},
                     {"s2p1_wide", {2, 3, 9, 9}, {4, 3, 3, 3}, RefWindow::Square(1, 2, 1)}};
  for (const C& c : convs) {
    RefWindow win = c.win;
    cases.push_back({Cat("Conv2D_", c.tag, "_", Dims(c.x), "_w", Dims(c.w)),
                     {{"x", c.x}, {"w", c.w}},
                     {},
                     [win](Graph& g, const Params& p, TensorId) { return g.Conv2D(p[0], p[1], ConvAttrs(win)); },
                     [win](const RefParams& p, const auto&) { return testing::RefConv2D(p[0], p[1], win); }});
  }
}

void AddPoolCases(std::vector<GradCase>& cases) {
  struct P {
    Shape x;
    int kernel, stride, pad;
  };
  const P pools[] = {{{1, 2, 4, 4}, 2, 2, 0},
                     {{2, 1, 5, 5}, 3, 2, 1},
                     {{1, 1, 4, 4}, 2, 1, 0},
                     {{1, 2, 3, 5}, 3, 1, 1},
                     {{2, 3, 8, 8}, 2, 2, 0}};
  for (const P& q : pools) {
    std::string tag =
        Cat("_", Dims(q.x), "_k", std::to_string(q.kernel), "s", std::to_string(q.stride), "p", std::to_string(q.pad));
    RefWindow win = RefWindow::Square(q.kernel, q.stride, q.pad);
    int k = q.kernel, s = q.stride, pad = q.pad;
    // Distinct values keep every window's max unique; border windows of the
    // negative half of the grid also check that padding (zero) never wins.
    cases.push_back({Cat("MaxPool2D", tag),
                     {{"x", q.x, Draw::Distinct}},
                     {},
                     [=](Graph& g, const Params& p, TensorId) { return g.MaxPool2D(p[0], k, s, pad); },
                     [=](const RefParams& p, const auto&) { return testing::RefMaxPool2D(p[0], win); }});
    cases.push_back({Cat("AvgPool2D", tag),
                     {{"x", q.x}},
                     {},
                     [=](Graph& g, const Params& p, TensorId) { return g.AvgPool2D(p[0], k, s, pad); },
                     [=](const RefParams& p, const auto&) { return testing::RefAvgPool2D(p[0], win); }});
  }
}

void AddLayerNormCases(std::vector<GradCase>& cases) {
  for (Shape s : {Shape{4, 5}, Shape{1, 7}, Shape{2, 3, 6}}) {
    const int64_t d = s.back();
    cases.push_back({Cat("LayerNorm_", Dims(s)),
                     {{"x", s, Draw::Wide}, {"gamma", {d}}, {"beta", {d}}},
                     {},
                     [](Graph& g, const Params& p, TensorId) { return g.LayerNorm(p[0], p[1], p[2]); },
                     [](const RefParams& p, const auto&) { return testing::RefLayerNorm(p[0], p[1], p[2], 1e-5); }});
  }
  // A large epsilon changes every term of the gradient.
  cases.push_back({"LayerNorm_3x4_epsilon0_5",
                   {{"x", {3, 4}}, {"gamma", {4}}, {"beta", {4}}},
                   {},
                   [](Graph& g, const Params& p, TensorId) { return g.LayerNorm(p[0], p[1], p[2], 0.5f); },
                   [](const RefParams& p, const auto&) { return testing::RefLayerNorm(p[0], p[1], p[2], 0.5); }});
}

// BatchNorm in training (batch statistics) over [N, C] and [N, C, H, W],
// its moving statistics State tensors the step updates (no gradient).
void AddBatchNormCases(std::vector<GradCase>& cases) {
  for (Shape s : {Shape{6, 3}, Shape{2, 3, 2, 2}, Shape{3, 2, 1, 5}}) {
    const int64_t c = s[1];
    cases.push_back({Cat("BatchNorm_", Dims(s)),
                     {{"x", s, Draw::Wide}, {"gamma", {c}}, {"beta", {c}}},
                     {},
                     [c](Graph& g, const Params& p, TensorId) {
                       return g.BatchNorm(p[0], p[1], p[2], g.State("moving_mean", {c}, InitSpec::Zeros()),
                                          g.State("moving_variance", {c}, InitSpec::Constant(1.0f)));
                     },
                     [c](const RefParams& p, const auto&) {
                       const RefTensor zeros = RefTensor::Zeros({c});
                       return testing::RefBatchNormTrain(p[0], p[1], p[2], zeros, zeros, 1e-5, 0.9).y;
                     }});
  }
}

// The indices are the labels column; repeated rows sum their gradients.
void AddGatherCases(std::vector<GradCase>& cases) {
  cases.push_back({"Gather_6x3_by_5_repeated",
                   {{"table", {6, 3}}},
                   {0, 5, 2, 5, 5},
                   [](Graph& g, const Params& p, TensorId l) { return g.Gather(p[0], l); },
                   [](const RefParams& p, const std::vector<int32_t>& l) {
                     return testing::RefGather(p[0], l, {static_cast<int64_t>(l.size())});
                   }});
  cases.push_back({"Gather_4x2x2_by_2x3",
                   {{"table", {4, 2, 2}}},
                   {1, 3, 0, 3, 2, 3},
                   [](Graph& g, const Params& p, TensorId l) {
                     return g.Gather(p[0], g.Reshape(l, {2, 3}));
                   },
                   [](const RefParams& p, const std::vector<int32_t>& l) {
                     return testing::RefGather(p[0], l, {2, 3});
                   }});
}

// The nn losses (sinkrt/host/nn.h), composed of graph ops: gradients of
// both logits and labels, every reduction.
RefTensor RefReduced(const RefTensor& loss, host::Reduction reduction) {
  if (reduction == host::Reduction::kMean) return testing::RefReduceMean(loss, {}, false);
  if (reduction == host::Reduction::kSum) return testing::RefReduceSum(loss, {}, false);
  return loss;
}

void AddLossCases(std::vector<GradCase>& cases) {
  using host::Reduction;
  const std::pair<Reduction, const char*> reductions[] = {
      {Reduction::kMean, "mean"}, {Reduction::kSum, "sum"}, {Reduction::kNone, "none"}};
  for (const auto& [red, tag] : reductions) {
    cases.push_back({Cat("MSELoss_", tag, "_3x4_by_4"),
                     {{"logits", {3, 4}}, {"labels", {4}}},
                     {},
                     [red](Graph& g, const Params& p, TensorId) { return host::MSELoss(g, p[0], p[1], red); },
                     [red](const RefParams& p, const auto&) {
                       return RefReduced(testing::RefSquare(testing::RefSub(p[0], p[1])), red);
                     }});
    // logits on a grid, labels wide: never within a step of the kink.
    cases.push_back({Cat("L1Loss_", tag, "_2x5"),
                     {{"logits", {2, 5}, Draw::Distinct}, {"labels", {2, 5}, Draw::Wide}},
                     {},
                     [red](Graph& g, const Params& p, TensorId) { return host::L1Loss(g, p[0], p[1], red); },
                     [red](const RefParams& p, const auto&) {
                       return RefReduced(testing::RefAbs(testing::RefSub(p[0], p[1])), red);
                     }});
    // Soft labels whose rows do not sum to 1: the gradient is the true one.
    cases.push_back(
        {Cat("SoftmaxCrossEntropyWithLogits_", tag, "_4x5"),
         {{"logits", {4, 5}, Draw::Wide}, {"labels", {4, 5}}},
         {},
         [red](Graph& g, const Params& p, TensorId) { return host::SoftmaxCrossEntropyWithLogits(g, p[0], p[1], red); },
         [red](const RefParams& p, const auto&) {
           RefTensor rows = testing::RefReduceSum(testing::RefMul(p[1], testing::RefLogSoftmax(p[0], -1)), {-1}, false);
           for (double& v : rows.data) v = -v;
           return RefReduced(rows, red);
         }});
  }
}

// Cast's gradient is the Cast back. Through bf16 the values and the weights
// are bf16 numbers (Draw::Bf16), so the rounding is exact both ways and the
// reference is the identity.
void AddCastCases(std::vector<GradCase>& cases) {
  cases.push_back({"Cast_f32_to_f32_5",
                   {{"x", {5}}},
                   {},
                   [](Graph& g, const Params& p, TensorId) { return g.Cast(p[0], DType::F32); },
                   [](const RefParams& p, const auto&) { return p[0]; }});
  cases.push_back({"Cast_through_bf16_3x4",
                   {{"x", {3, 4}, Draw::Bf16}},
                   {},
                   [](Graph& g, const Params& p, TensorId) { return g.Cast(g.Cast(p[0], DType::BF16), DType::F32); },
                   [](const RefParams& p, const auto&) { return p[0]; }});
  cases.push_back({"Cast_bf16_Reshape_2x6",
                   {{"x", {2, 6}, Draw::Bf16}},
                   {},
                   [](Graph& g, const Params& p, TensorId) {
                     return g.Cast(g.Reshape(g.Cast(p[0], DType::BF16), {3, 4}), DType::F32);
                   },
                   [](const RefParams& p, const auto&) {
                     return testing::RefReshape(p[0], {3, 4});
                   }});
}

// Chains the compiler fuses into one kernel, and a tensor read twice (its
// gradient is the AddN of two contributions).
void AddCompositeCases(std::vector<GradCase>& cases) {
  cases.push_back({"Fused_MatMul_BiasAdd_Relu",
                   {{"x", {4, 6}}, {"w", {6, 5}}, {"b", {5}}},
                   {},
                   [](Graph& g, const Params& p, TensorId) { return g.Relu(g.BiasAdd(g.MatMul(p[0], p[1]), p[2])); },
                   [](const RefParams& p, const auto&) {
                     return testing::RefRelu(
                         testing::RefBiasAdd(testing::RefMatMul(p[0], p[1], false, false), p[2], 1));
                   }});
  cases.push_back(
      {"Fused_MatMul_tb_BiasAdd",
       {{"x", {3, 4}}, {"w", {5, 4}}, {"b", {5}}},
       {},
       [](Graph& g, const Params& p, TensorId) { return g.BiasAdd(g.MatMul(p[0], p[1], false, true), p[2]); },
       [](const RefParams& p, const auto&) {
         return testing::RefBiasAdd(testing::RefMatMul(p[0], p[1], false, true), p[2], 1);
       }});
  cases.push_back(
      {"Fused_Conv2D_BiasAdd_Relu",
       {{"x", {1, 2, 5, 5}}, {"w", {3, 2, 3, 3}}, {"b", {3}}},
       {},
       [](Graph& g, const Params& p, TensorId) { return g.Relu(g.BiasAdd(g.Conv2D(p[0], p[1], 1, 1), p[2])); },
       [](const RefParams& p, const auto&) {
         return testing::RefRelu(
             testing::RefBiasAdd(testing::RefConv2D(p[0], p[1], RefWindow::Square(1, 1, 1)), p[2], 1));
       }});
  cases.push_back({"Reused_Mul_x_x",
                   {{"x", {3, 4}}},
                   {},
                   [](Graph& g, const Params& p, TensorId) { return g.Mul(p[0], p[0]); },
                   [](const RefParams& p, const auto&) { return testing::RefMul(p[0], p[0]); }});
  cases.push_back({"Reused_Tanh_plus_Sigmoid",
                   {{"x", {2, 5}, Draw::Wide}},
                   {},
                   [](Graph& g, const Params& p, TensorId) { return g.Add(g.Tanh(p[0]), g.Sigmoid(p[0])); },
                   [](const RefParams& p, const auto&) {
                     return testing::RefAdd(testing::RefTanh(p[0]), testing::RefSigmoid(p[0]));
                   }});
  cases.push_back({"Chain_Conv_MaxPool_Flatten_MatMul_CrossEntropy",
                   {{"x", {2, 1, 4, 4}}, {"w", {2, 1, 3, 3}}, {"fc", {8, 3}}},
                   {2, 0},
                   [](Graph& g, const Params& p, TensorId l) {
                     TensorId h = g.MaxPool2D(g.Conv2D(p[0], p[1], 1, 1), 2, 2);
                     return g.SparseSoftmaxCrossEntropy(g.MatMul(g.Flatten(h), p[2]), l);
                   },
                   [](const RefParams& p, const std::vector<int32_t>& l) {
                     RefTensor h = testing::RefMaxPool2D(testing::RefConv2D(p[0], p[1], RefWindow::Square(1, 1, 1)),
                                                         RefWindow::Square(2, 2, 0));
                     return testing::RefSparseSoftmaxCrossEntropy(
                         testing::RefMatMul(testing::RefFlatten(h), p[2], false, false), l);
                   }});
}

void AddBatchMatMulCases(std::vector<GradCase>& cases) {
  struct B {
    const char* tag;
    Shape batch_a, batch_b;
    int64_t m, k, n;
  };
  // Equal batches, one side broadcast (ranks differ), size-1 dims broadcast
  // on both sides: each input's gradient must sum over what it was spread on.
  const B shapes[] = {{"same", {2, 3}, {2, 3}, 3, 4, 2},
                      {"bcast_b", {2, 3}, {3}, 2, 3, 4},
                      {"matrix_b", {3}, {}, 4, 2, 3},
                      {"bcast_both", {2, 1}, {1, 3}, 2, 3, 2}};
  for (const B& d : shapes)
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        Shape sa = d.batch_a, sb = d.batch_b;
        sa.push_back(ta ? d.k : d.m);
        sa.push_back(ta ? d.m : d.k);
        sb.push_back(tb ? d.n : d.k);
        sb.push_back(tb ? d.k : d.n);
        cases.push_back({Cat("BatchMatMul_", d.tag, ta ? "_ta" : "", tb ? "_tb" : "", "_", Dims(sa), "_by_", Dims(sb)),
                         {{"a", sa}, {"b", sb}},
                         {},
                         [=](Graph& g, const Params& p, TensorId) { return g.BatchMatMul(p[0], p[1], ta, tb); },
                         [=](const RefParams& p, const auto&) { return testing::RefBatchMatMul(p[0], p[1], ta, tb); }});
      }
}

void AddLayoutCases(std::vector<GradCase>& cases) {
  const std::pair<Shape, std::vector<int>> transposes[] = {
      {{3, 4}, {1, 0}}, {{2, 3, 4}, {0, 2, 1}}, {{2, 3, 4, 5}, {2, 0, 3, 1}}, {{2, 3, 4}, {-1, 0, 1}}};
  for (const auto& [s, perm] : transposes) {
    std::string tag;
    for (int p : perm) tag += p < 0 ? Cat("m", std::to_string(-p)) : std::to_string(p);
    cases.push_back({Cat("Transpose_", Dims(s), "_perm", tag),
                     {{"x", s}},
                     {},
                     [perm](Graph& g, const Params& p, TensorId) { return g.Transpose(p[0], perm); },
                     [perm](const RefParams& p, const auto&) { return testing::RefTranspose(p[0], perm); }});
  }
  cases.push_back({"Concat_axis1_three_inputs",
                   {{"a", {2, 1, 3}}, {"b", {2, 4, 3}}, {"c", {2, 2, 3}}},
                   {},
                   [](Graph& g, const Params& p, TensorId) {
                     return g.Concat({p[0], p[1], p[2]}, 1);
                   },
                   [](const RefParams& p, const auto&) {
                     return testing::RefConcat({p[0], p[1], p[2]}, 1);
                   }});
  cases.push_back({"Concat_axism1",
                   {{"a", {3, 2}}, {"b", {3, 5}}},
                   {},
                   [](Graph& g, const Params& p, TensorId) {
                     return g.Concat({p[0], p[1]}, -1);
                   },
                   [](const RefParams& p, const auto&) {
                     return testing::RefConcat({p[0], p[1]}, -1);
                   }});
  cases.push_back({"Concat_axis0_same_input_twice",
                   {{"x", {2, 3}}},
                   {},
                   [](Graph& g, const Params& p, TensorId) {
                     return g.Concat({p[0], p[0]}, 0);
                   },
                   [](const RefParams& p, const auto&) {
                     return testing::RefConcat({p[0], p[0]}, 0);
                   }});
  // Only the second input needs a gradient: the Split's first output is
  // written and never read.
  cases.push_back({"Concat_axis0_const_and_param",
                   {{"x", {1, 3}}},
                   {},
                   [](Graph& g, const Params& p, TensorId) {
                     const TensorId k = g.Const("k", {2, 3}, InitSpec::Inline({0.5f, -1, 2, 0.25f, 3, -0.75f}));
                     return g.Concat({k, p[0]}, 0);
                   },
                   [](const RefParams& p, const auto&) {
                     return testing::RefConcat({RefTensor({2, 3}, {0.5, -1, 2, 0.25, 3, -0.75}), p[0]}, 0);
                   }});
  // Every output read (in another order), and one left unread: its
  // gradient is zeros.
  cases.push_back({"Split_axis1_all_outputs",
                   {{"x", {2, 6, 3}}},
                   {},
                   [](Graph& g, const Params& p, TensorId) {
                     std::vector<TensorId> s = g.Split(p[0], 1, {1, 3, 2});
                     return g.Concat({s[2], s[0], s[1]}, 1);
                   },
                   [](const RefParams& p, const auto&) {
                     std::vector<RefTensor> s = testing::RefSplit(p[0], 1, {1, 3, 2});
                     return testing::RefConcat({s[2], s[0], s[1]}, 1);
                   }});
  cases.push_back({"Split_axism1_one_output_unread",
                   {{"x", {3, 7}}},
                   {},
                   [](Graph& g, const Params& p, TensorId) {
                     std::vector<TensorId> s = g.Split(p[0], -1, {2, 4, 1});
                     return g.Mul(s[0], g.Tanh(s[2]));
                   },
                   [](const RefParams& p, const auto&) {
                     std::vector<RefTensor> s = testing::RefSplit(p[0], -1, {2, 4, 1});
                     return testing::RefMul(s[0], testing::RefTanh(s[2]));
                   }});
}

// Dropout at step 0 (the one train_step run): the mask is fixed, so the
// reference is x / (1 − p) where dropout_mask.h keeps the element, else 0,
// and its finite differences are the gradient DropoutGrad must give. The
// op's id (a hash of its name) goes from the build to the reference.
void AddDropoutCases(std::vector<GradCase>& cases) {
  for (Shape s : {Shape{4, 9}, Shape{2, 3, 5}}) {
    auto op_id = std::make_shared<uint32_t>(0);
    cases.push_back({Cat("Dropout_", Dims(s)),
                     {{"x", s}},
                     {},
                     [op_id](Graph& g, const Params& p, TensorId) {
                       const TensorId y = g.Dropout(p[0], 0.4f, 5);
                       if (!g.ops().empty()) *op_id = g.ops().back().attrs.dropout_op_id;
                       return y;
                     },
                     [op_id](const RefParams& p, const auto&) {
                       RefTensor y = p[0];
                       const device::DropoutKey key{.seed = 5, .step = 0, .op_id = *op_id};
                       const uint32_t t = device::DropoutThreshold(0.4f);
                       for (size_t i = 0; i < y.data.size(); ++i)
                         y.data[i] = device::DropoutKeeps(key, t, i) ? p[0].data[i] / (1.0 - 0.4f) : 0.0;
                       return y;
                     }});
  }
}

std::vector<GradCase> AllCases() {
  std::vector<GradCase> cases;
  AddMatMulCases(cases);
  AddBiasAddCases(cases);
  AddBroadcastingCases(cases);
  AddUnaryCases(cases);
  AddDropoutCases(cases);
  AddSoftmaxCases(cases);
  AddCrossEntropyCases(cases);
  AddReduceCases(cases);
  AddReduceMaxCases(cases);
  AddMaskingCases(cases);
  AddPadOneHotCases(cases);
  AddShapeCases(cases);
  AddConvCases(cases);
  AddPoolCases(cases);
  AddLayerNormCases(cases);
  AddBatchNormCases(cases);
  AddGatherCases(cases);
  AddLossCases(cases);
  AddCastCases(cases);
  AddCompositeCases(cases);
  AddBatchMatMulCases(cases);
  AddLayoutCases(cases);
  return cases;
}

// ---- the harness --------------------------------------------------------------

// A case made concrete: the graph with its values, and the same values widened.
struct Prepared {
  Graph graph{"gradcheck"};
  RefParams params;
  RefTensor weights;  // R
  double reference_loss = 0;
};

double ReferenceLoss(const GradCase& c, const RefParams& params, const RefTensor& weights) {
  return testing::RefWeightedSum(c.reference(params, c.labels), weights);
}

void Prepare(const GradCase& c, Prepared* out) {
  std::mt19937_64 rng(Fnv1a(c.name));
  Graph& g = out->graph;
  Params ids;
  for (const ParamSpec& p : c.params) {
    std::vector<float> v = DrawValues(p.draw, NumElements(p.shape), rng);
    out->params.push_back(Widen(p.shape, v));
    ids.push_back(g.Param(p.name, p.shape, InitSpec::Inline(v)));
  }
  // Only cross-entropy cases have a dataset column; the others compile to a
  // train_step without GetNext.
  TensorId labels =
      c.labels.empty() ? host::kInvalidTensor : g.Input("labels", {static_cast<int64_t>(c.labels.size())}, DType::I32);
  TensorId y = c.build(g, ids, labels);
  ASSERT_TRUE(g.status().ok()) << g.status().ToString();

  RefTensor ref_y = c.reference(out->params, c.labels);
  ASSERT_EQ(g.tensor(y).shape, ref_y.shape) << "graph shape inference disagrees with the reference";
  // Weights in bf16 for the cases through bf16: d(loss)/dy = R passes a Cast.
  const bool bf16 =
      std::any_of(c.params.begin(), c.params.end(), [](const ParamSpec& p) { return p.draw == Draw::Bf16; });
  std::vector<float> r = DrawValues(bf16 ? Draw::Bf16 : Draw::Unit, ref_y.size(), rng);
  out->weights = Widen(ref_y.shape, r);
  TensorId weights = g.Const("weights", ref_y.shape, InitSpec::Inline(r));
  g.SetLoss(g.ReduceSum(g.Mul(y, weights)));
  ASSERT_TRUE(g.status().ok()) << g.status().ToString();
  out->reference_loss = ReferenceLoss(c, out->params, out->weights);
}

struct DeviceResult {
  double loss = 0;
  std::map<std::string, std::vector<float>> grads;  // by param name
};

// Pushes one batch into every queue that train_step pops: the labels column
// for cross-entropy cases, nothing at all for the rest.
void FeedOneStep(const GradCase& c, const VerifiedStream& view, device::InProcessDevice& dev) {
  const fb::Program* train = view.FindProgram(ProgramKind::TrainStep);
  ASSERT_NE(train, nullptr) << "no train_step program";
  for (const fb::Stream* stream : *train->streams())
    for (const fb::Task* task : *stream->tasks()) {
      const fb::GetNextTask* get_next = task->body_as_GetNextTask();
      if (!get_next) continue;
      const fb::QueueSpec* queue = view.root()->queues()->Get(get_next->queue());
      ASSERT_EQ(queue->columns()->size(), 1u) << "expected only the labels column";
      const fb::QueueColumn* col = queue->columns()->Get(0);
      ASSERT_EQ(col->name()->str(), "labels");
      ASSERT_EQ(col->dtype(), fb::DType::I32);
      ASSERT_EQ(col->shape()->Get(0), static_cast<int64_t>(c.labels.size()));
      ConstBytes column(reinterpret_cast<const uint8_t*>(c.labels.data()), c.labels.size() * sizeof(int32_t));
      Status pushed = dev.PushBatch(get_next->queue(), std::span<const ConstBytes>(&column, 1));
      ASSERT_TRUE(pushed.ok()) << pushed.ToString();
    }
}

void RunOnDevice(const GradCase& c, const Prepared& prep, DeviceResult* out) {
  host::CompileOptions options;
  // Compile refuses a learning rate of 0; the gradients are read after one
  // step, before any update could reach them, so the rate does not matter.
  options.optimizer = host::OptimizerSpec::Sgd(1e-3f);
  options.eval_program = false;
  auto compiled = host::Compile(prep.graph, options);
  ASSERT_TRUE(compiled.ok()) << compiled.status().ToString();
  const VerifiedStream& view = compiled->stream;

  device::DeviceOptions dopts;
  dopts.threads = 1;
  dopts.prefault = false;
  dopts.get_next_timeout = std::chrono::seconds(10);
  dopts.push_timeout = std::chrono::seconds(10);
  device::InProcessDevice dev(dopts);
  auto loaded = dev.Load(compiled->stream);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();

  ASSERT_NO_FATAL_FAILURE(FeedOneStep(c, view, dev));

  auto sink = dev.RunSink(ProgramKind::TrainStep, 1);
  ASSERT_TRUE(sink.ok()) << sink.status().ToString();
  const std::string loss_name = prep.graph.tensor(prep.graph.loss()).name;
  const ReportedTensor* loss = nullptr;
  for (const ReportedTensor& r : sink->reports)
    if (r.name == loss_name || sink->reports.size() == 1) loss = &r;
  ASSERT_NE(loss, nullptr) << "train_step reports no '" << loss_name << "'";
  out->loss = loss->scalar();

  for (const ParamSpec& p : c.params) {
    const std::string grad_name = p.name + "/grad";
    int64_t index = view.FindBuffer(grad_name);
    ASSERT_GE(index, 0) << "no buffer '" << grad_name << "' in the compiled stream";
    auto bytes = dev.ReadTensor(static_cast<uint32_t>(index));
    ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
    ASSERT_EQ(bytes->size(), static_cast<size_t>(NumElements(p.shape)) * sizeof(float)) << grad_name;
    std::vector<float>& g = out->grads[p.name];
    g.resize(bytes->size() / sizeof(float));
    std::memcpy(g.data(), bytes->data(), bytes->size());
  }
}

class GradientCheck : public ::testing::TestWithParam<GradCase> {};

TEST_P(GradientCheck, DeviceLossMatchesFloat64Reference) {
  const GradCase& c = GetParam();
  Prepared prep;
  ASSERT_NO_FATAL_FAILURE(Prepare(c, &prep));
  DeviceResult dev;
  ASSERT_NO_FATAL_FAILURE(RunOnDevice(c, prep, &dev));
  EXPECT_NEAR(dev.loss, prep.reference_loss, kLossAbsTol + kLossRelTol * std::abs(prep.reference_loss));
}

TEST_P(GradientCheck, GradientsMatchCentralFiniteDifferences) {
  const GradCase& c = GetParam();
  Prepared prep;
  ASSERT_NO_FATAL_FAILURE(Prepare(c, &prep));
  DeviceResult dev;
  ASSERT_NO_FATAL_FAILURE(RunOnDevice(c, prep, &dev));

  for (size_t i = 0; i < c.params.size(); ++i) {
    const std::string& name = c.params[i].name;
    const std::vector<float>& analytic = dev.grads[name];
    RefParams probe = prep.params;
    int mismatches = 0;
    double worst = 0;
    for (int64_t e = 0; e < probe[i].size(); ++e) {
      const double x = prep.params[i].data[e];
      probe[i].data[e] = x + kStep;
      const double up = ReferenceLoss(c, probe, prep.weights);
      probe[i].data[e] = x - kStep;
      const double down = ReferenceLoss(c, probe, prep.weights);
      probe[i].data[e] = x;
      const double numeric = (up - down) / (2 * kStep);
      const double err = std::abs(analytic[e] - numeric);
      worst = std::max(worst, err);
      if (err > kGradAbsTol + kGradRelTol * std::abs(numeric) && ++mismatches <= 5)
        ADD_FAILURE() << "d(loss)/d(" << name << ")[" << e << "]: device " << analytic[e] << ", finite difference "
                      << numeric << " (error " << err << ")";
    }
    EXPECT_EQ(mismatches, 0) << name << ": " << mismatches << " of " << probe[i].size()
                             << " elements mismatch; worst error " << worst;
  }
}

// Gradients where finite differences cannot go: at a kink or outside the
// forward op's domain. loss = Σ op(params...)·w with given values; the
// device's gradients of each parameter.
std::map<std::string, std::vector<float>> GradientsAt(
    const std::vector<std::pair<std::string, std::vector<float>>>& values,
    const std::function<TensorId(Graph&, const Params&)>& build, const std::vector<float>& w) {
  GradCase c;
  c.name = "at_given_values";
  Prepared prep;
  Graph& g = prep.graph;
  Params ids;
  for (const auto& [name, v] : values) {
    const Shape shape{static_cast<int64_t>(v.size())};
    c.params.push_back({name, shape});
    ids.push_back(g.Param(name, shape, InitSpec::Inline(v)));
  }
  const TensorId y = build(g, ids);
  g.SetLoss(g.ReduceSum(g.Mul(y, g.Const("weights", {static_cast<int64_t>(w.size())}, InitSpec::Inline(w)))));
  EXPECT_TRUE(g.status().ok()) << g.status().ToString();
  DeviceResult dev;
  RunOnDevice(c, prep, &dev);
  return dev.grads;
}

// MindSpore's MaximumGrad/MinimumGrad: dy to the chosen operand, half of it
// to each at a tie.
TEST(MathGradients, MaximumAndMinimumSplitTiesInHalves) {
  const std::vector<float> w = {2, 4, 8};
  auto max = GradientsAt(
      {{"a", {1, 2, 3}}, {"b", {1, 0, 5}}}, [](Graph& g, const Params& p) { return g.Maximum(p[0], p[1]); }, w);
  EXPECT_EQ(max["a"], (std::vector<float>{1, 4, 0}));
  EXPECT_EQ(max["b"], (std::vector<float>{1, 0, 8}));
  auto min = GradientsAt(
      {{"a", {1, 2, 3}}, {"b", {1, 0, 5}}}, [](Graph& g, const Params& p) { return g.Minimum(p[0], p[1]); }, w);
  EXPECT_EQ(min["a"], (std::vector<float>{1, 0, 8}));
  EXPECT_EQ(min["b"], (std::vector<float>{1, 4, 0}));
}

// d log(x) = dy / x for every x (MindSpore: reciprocal(x)·dy), also where
// log itself is NaN (x < 0): the old rsqrt(x)² form gave NaN there.
TEST(MathGradients, LogGradientIsDyOverXAlsoBelowZero) {
  auto g = GradientsAt({{"x", {-2, -0.5f, 4}}}, [](Graph& g, const Params& p) { return g.Log(p[0]); }, {1, 3, 2});
  EXPECT_EQ(g["x"], (std::vector<float>{-0.5f, -6, 0.5f}));
}

// Pow's exponent gradient reads log(x) as 0 where x < 0 (MindSpore's Pow
// bprop sets x[x < 0] = 1); the base's is e·x^(e-1) there as anywhere.
TEST(MathGradients, PowGradientsAtANegativeBase) {
  auto g =
      GradientsAt({{"x", {-2, 3}}, {"e", {2, 2}}}, [](Graph& g, const Params& p) { return g.Pow(p[0], p[1]); }, {1, 1});
  EXPECT_EQ(g["x"], (std::vector<float>{-4, 6}));
  EXPECT_EQ(g["e"][0], 0.0f);
  EXPECT_FLOAT_EQ(g["e"][1], 9.0f * std::log(3.0f));
}

// MindSpore's _min_or_max_grad: at a tie dy splits evenly over the maxima
// (indicators / count · dy); a NaN max (equal to nothing) passes none.
TEST(MathGradients, ReduceMaxSplitsTiesEvenly) {
  auto g = GradientsAt({{"x", {3, 1, 3, 3, 2, 5}}},
                       [](Graph& g, const Params& p) {
                         return g.ReduceMax(g.Reshape(p[0], {2, 3}), {1});
                       },
                       {6, 4});
  EXPECT_EQ(g["x"], (std::vector<float>{3, 0, 3, 0, 0, 4}));
  auto all =
      GradientsAt({{"x", {2, 2, 2, 1}}}, [](Graph& g, const Params& p) { return g.ReduceMax(p[0], {}, true); }, {3});
  EXPECT_EQ(all["x"], (std::vector<float>{1, 1, 1, 0}));
  auto nan = GradientsAt({{"x", {1, std::numeric_limits<float>::quiet_NaN(), 2}}},
                         [](Graph& g, const Params& p) { return g.ReduceMax(p[0], {0}, true); }, {1});
  EXPECT_EQ(nan["x"], (std::vector<float>{0, 0, 0}));
}

INSTANTIATE_TEST_SUITE_P(Ops, GradientCheck, ::testing::ValuesIn(AllCases()),
                         [](const ::testing::TestParamInfo<GradCase>& info) { return info.param.name; });

// The reference itself, on values small enough to check by hand: a wrong
// reference would blame the device for its own mistakes.
TEST(ReferenceOps, HandComputedValues) {
  RefTensor a({2, 2}, {1, 2, 3, 4}), b({2, 2}, {5, 6, 7, 8});
  EXPECT_EQ(testing::RefMatMul(a, b, false, false).data, (std::vector<double>{19, 22, 43, 50}));
  EXPECT_EQ(testing::RefMatMul(a, b, true, true).data, (std::vector<double>{23, 31, 34, 46}));
  EXPECT_EQ(testing::RefAdd(a, RefTensor({2}, {10, 20})).data, (std::vector<double>{11, 22, 13, 24}));
  RefTensor col = testing::RefSub(RefTensor({2, 1}, {1, 2}), RefTensor({3}, {1, 2, 3}));
  EXPECT_EQ(col.shape, (Shape{2, 3}));
  EXPECT_EQ(col.data, (std::vector<double>{0, -1, -2, 1, 0, -1}));

  RefTensor x({1, 1, 3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  RefTensor conv = testing::RefConv2D(x, RefTensor({1, 1, 2, 2}, {1, 0, 0, 1}), RefWindow::Square(1, 1, 0));
  EXPECT_EQ(conv.data, (std::vector<double>{6, 8, 12, 14}));
  RefTensor padded = testing::RefConv2D(x, RefTensor({1, 1, 1, 1}, {2}), RefWindow::Square(1, 2, 1));
  EXPECT_EQ(padded.shape, (Shape{1, 1, 3, 3}));  // (3 + 2 - 1) / 2 + 1
  EXPECT_EQ(padded.data, (std::vector<double>{0, 0, 0, 0, 10, 0, 0, 0, 0}));

  RefTensor neg = testing::RefMul(x, RefTensor({}, {-1}));
  EXPECT_EQ(testing::RefMaxPool2D(neg, RefWindow::Square(2, 2, 1)).data, (std::vector<double>{-1, -2, -4, -5}));
  EXPECT_EQ(testing::RefAvgPool2D(x, RefWindow::Square(2, 2, 1)).data, (std::vector<double>{1, 2.5, 5.5, 7}));

  RefTensor sm = testing::RefSoftmax(RefTensor({1, 2}, {0, std::log(3.0)}), -1);
  EXPECT_NEAR(sm.data[0], 0.25, 1e-15);
  EXPECT_NEAR(sm.data[1], 0.75, 1e-15);
  RefTensor ce = testing::RefSparseSoftmaxCrossEntropy(RefTensor({1, 2}, {0, std::log(3.0)}), {1});
  EXPECT_NEAR(ce.data[0], -std::log(0.75), 1e-15);

  RefTensor r = testing::RefReduceMean(RefTensor({2, 3}, {1, 2, 3, 4, 5, 6}), {0}, true);
  EXPECT_EQ(r.shape, (Shape{1, 3}));
  EXPECT_EQ(r.data, (std::vector<double>{2.5, 3.5, 4.5}));
  EXPECT_EQ(testing::RefReduceSum(RefTensor({2, 3}, {1, 2, 3, 4, 5, 6}), {-1}, false).data,
            (std::vector<double>{6, 15}));
  EXPECT_NEAR(testing::RefGelu(RefTensor({}, {1.0})).data[0], 0.8411919906082768, 1e-12);
  EXPECT_EQ(testing::RefBiasAdd(RefTensor({1, 2, 1, 2}, {0, 0, 0, 0}), RefTensor({2}, {1, 2}), 1).data,
            (std::vector<double>{1, 1, 2, 2}));
}

}  // namespace
}  // namespace sinkrt
