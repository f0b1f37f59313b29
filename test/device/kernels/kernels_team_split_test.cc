// The ViT's remaining kernels split across a worker team (issue 21):
// broadcast Add/Sub/Mul, AddN, BiasAdd, BroadcastTo, Transpose, the column
// sums of BiasAddGrad and SumToShape, and LayerNormGrad. Each must write the
// bits it writes with no team, with teams of 2 and 3, on the ViT's shapes,
// on odd shapes whose parts are ragged, and on shapes too small to split;
// and the split results must be right (against the float64 reference), so
// a part that starts in the wrong place cannot agree with itself only.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "device/src/kernels/broadcast.h"
#include "device/src/team/worker_team.h"
#include "support/kernel_runner.h"
#include "support/reference_ops.h"

namespace sinkrt::device {
namespace {

using namespace ::sinkrt::testing;
using fb::OpCode;
using Tensor = KernelTensor;

// The bytes of a tensor as stored (f32 or bf16).
std::vector<uint8_t> Bytes(const Tensor& t) {
  return {t.bytes(), t.bytes() + t.numel() * static_cast<int64_t>(DTypeSize(t.dtype()))};
}

// `x` rounded to bf16 by the Cast kernel.
Tensor ToBf16(const Tensor& x) {
  Tensor h(x.shape(), DType::BF16);
  KernelRunner(OpCode::Cast).In(x).Out(h).CastTo(DType::BF16).PrepareAndRun();
  return h;
}

// x permuted: y dim i is x dim perm[i].
std::vector<float> Permuted(const Tensor& x, const std::vector<int32_t>& perm) {
  const Shape& xs = x.shape();
  const size_t r = xs.size();
  std::vector<int64_t> x_stride(r, 1);
  for (size_t d = r - 1; d > 0; --d) x_stride[d - 1] = x_stride[d] * xs[d];
  std::vector<float> y(static_cast<size_t>(x.numel()));
  for (int64_t i = 0; i < x.numel(); ++i) {
    int64_t rest = i, off = 0;
    for (size_t k = r; k-- > 0;) {
      const int64_t n = xs[perm[k]];
      off += (rest % n) * x_stride[perm[k]];
      rest /= n;
    }
    y[i] = x[off];
  }
  return y;
}

struct OutSpec {
  Shape shape;
  DType dtype = DType::F32;
};

// Runs `op` on `inputs` (options set by `configure`) with no team, then with
// teams of 2 and 3, each into fresh outputs, and expects every output's
// bytes to equal the unsplit run's. Returns the unsplit outputs.
std::vector<Tensor> ExpectSplitBitwise(OpCode op, const std::vector<const Tensor*>& inputs,
                                       const std::vector<OutSpec>& outs,
                                       const std::function<void(KernelRunner&)>& configure, const std::string& what) {
  static WorkerTeam two(2, 0), three(3, 0);
  std::vector<Tensor> whole;
  for (WorkerTeam* team : {static_cast<WorkerTeam*>(nullptr), &two, &three}) {
    std::vector<Tensor> y;
    for (const OutSpec& o : outs) y.emplace_back(o.shape, o.dtype);
    KernelRunner r(op);
    for (const Tensor* x : inputs) r.In(*x);
    for (const Tensor& t : y) r.Out(t);
    if (configure) configure(r);
    if (team) r.Team(team);
    r.PrepareAndRun();
    if (!team) {
      whole = std::move(y);
      continue;
    }
    for (size_t i = 0; i < y.size(); ++i)
      EXPECT_TRUE(Bytes(y[i]) == Bytes(whole[i]))
          << what << ": output " << i << " with a team of " << team->size() << " differs from unsplit";
  }
  return whole;
}

TEST(TeamSplitKernels, BroadcastBinaryOpsGiveTheUnsplitBits) {
  struct Case {
    Shape a, b;
  };
  // Same shapes (the residual adds), a scalar either side (the attention
  // scale), a row bias, the position embedding [B, 16, 64] + [16, 64], a
  // ragged odometer whose parts start mid-dimension, and shapes too small
  // to split.
  const std::vector<Case> cases = {{{64, 16, 64}, {64, 16, 64}},
                                   {{70001}, {70001}},
                                   {{1}, {37, 4, 16, 16}},
                                   {{37, 4, 16, 16}, {1}},
                                   {{597, 64}, {64}},
                                   {{64, 16, 64}, {16, 64}},
                                   {{7, 1, 33, 65}, {5, 1, 65}},
                                   {{1, 301}, {299, 1}},
                                   {{3, 5}, {5}},
                                   {{17}, {1}}};
  for (const Case& c : cases) {
    Shape y;
    ASSERT_TRUE(BroadcastShapes(c.a, c.b, &y));
    const Tensor a = RandomTensor(c.a, 61), b = RandomTensor(c.b, 62);
    for (OpCode op : {OpCode::Add, OpCode::Sub, OpCode::Mul}) {
      const std::string what =
          std::string(fb::EnumNameOpCode(op)) + " " + ShapeToString(c.a) + " " + ShapeToString(c.b);
      const std::vector<Tensor> got = ExpectSplitBitwise(op, {&a, &b}, {{y}}, nullptr, what);
      const RefTensor want = op == OpCode::Add   ? RefAdd(ToRef(a), ToRef(b))
                             : op == OpCode::Sub ? RefSub(ToRef(a), ToRef(b))
                                                 : RefMul(ToRef(a), ToRef(b));
      ExpectBitwise(got[0], want, what + " against the reference");
    }
    const Tensor ah = ToBf16(a), bh = ToBf16(b);
    ExpectSplitBitwise(OpCode::Mul, {&ah, &bh}, {{y, DType::BF16}}, nullptr, "bf16 Mul " + ShapeToString(c.a));
  }
}

TEST(TeamSplitKernels, AddNBiasAddAndBroadcastToGiveTheUnsplitBits) {
  for (const Shape& s : {Shape{64, 16, 64}, Shape{100003}, Shape{9, 7}}) {
    const Tensor a = RandomTensor(s, 71), b = RandomTensor(s, 72), c = RandomTensor(s, 73);
    const std::vector<Tensor> sum = ExpectSplitBitwise(OpCode::AddN, {&a, &b, &c}, {{s}}, nullptr, "AddN");
    ExpectClose(sum[0], RefAdd(RefAdd(ToRef(a), ToRef(b)), ToRef(c)), 1e-6, 1e-6, "AddN " + ShapeToString(s));
    const Tensor ah = ToBf16(a), bh = ToBf16(b);
    ExpectSplitBitwise(OpCode::AddN, {&ah, &bh}, {{s, DType::BF16}}, nullptr, "bf16 AddN " + ShapeToString(s));
  }
  for (const Shape& s : {Shape{1024, 192}, Shape{33, 70, 9}, Shape{3, 4}}) {
    const Tensor x = RandomTensor(s, 74), bias = RandomTensor({s[1]}, 75);
    const auto axis1 = [](KernelRunner& r) { r.Axis(1); };
    const std::vector<Tensor> y = ExpectSplitBitwise(OpCode::BiasAdd, {&x, &bias}, {{s}}, axis1, "BiasAdd");
    ExpectBitwise(y[0], RefBiasAdd(ToRef(x), ToRef(bias), 1), "BiasAdd " + ShapeToString(s));
  }
  // The pooled gradient [B, 64] → [B, 16, 64], scaled by 1/16.
  const Tensor g = RandomTensor({64, 1, 64}, 76);
  const std::vector<Tensor> y = ExpectSplitBitwise(
      OpCode::BroadcastTo, {&g}, {{{64, 16, 64}}}, [](KernelRunner& r) { r.Scale(0.0625f); }, "BroadcastTo");
  for (int64_t i = 0; i < 64 * 16 * 64; ++i)
    ASSERT_EQ(y[0][i], 0.0625f * g[(i / (16 * 64)) * 64 + i % 64]) << "BroadcastTo element " << i;
}

TEST(TeamSplitKernels, TransposeGivesTheUnsplitBits) {
  struct Case {
    Shape x;
    std::vector<int32_t> perm;
  };
  // The ViT's patchify (runs of 7), its head split and merge (runs of 16),
  // a last-two-dims swap (16x16 tiles, a ragged edge), a plain 2-D
  // transpose (one outer position: split by rows of tiles), a long-row copy
  // (memcpy rows), the identity, and a transpose too small to split.
  const std::vector<Case> cases = {{{64, 4, 7, 4, 7}, {0, 1, 3, 2, 4}},
                                   {{64, 16, 3, 4, 16}, {2, 0, 3, 1, 4}},
                                   {{64, 4, 16, 16}, {0, 2, 1, 3}},
                                   {{37, 4, 19, 45}, {0, 1, 3, 2}},
                                   {{301, 517}, {1, 0}},
                                   {{3, 50, 2, 300}, {2, 1, 0, 3}},
                                   {{1, 40000}, {1, 0}},
                                   {{5, 6}, {1, 0}}};
  for (const Case& c : cases) {
    Shape y;
    for (int32_t p : c.perm) y.push_back(c.x[p]);
    const Tensor x = RandomTensor(c.x, 81);
    const std::string what = "Transpose " + ShapeToString(c.x);
    const auto perm = [&](KernelRunner& r) { r.Perm(c.perm); };
    const std::vector<Tensor> got = ExpectSplitBitwise(OpCode::Transpose, {&x}, {{y}}, perm, what);
    ExpectBitwise(got[0], Permuted(x, c.perm), what + " against the reference");
    const Tensor xh = ToBf16(x);
    ExpectSplitBitwise(OpCode::Transpose, {&xh}, {{y, DType::BF16}}, perm, "bf16 " + what);
  }
}

TEST(TeamSplitKernels, ColumnSumsSplitByColumnsGiveTheUnsplitBits) {
  // BiasAddGrad over the ViT's [B·16, C] (C = 64, 128, 192 at batch 64 and
  // 256) and odd sizes; SumToShape of the position embedding's gradient
  // [B, 16, 64] → [16, 64]; a reduction that is not one block's columns
  // ([N, C, L], summed over N and L), which runs whole.
  for (const Shape& s :
       {Shape{1024, 64}, Shape{4096, 192}, Shape{1000, 129}, Shape{333, 17}, Shape{20, 5}, Shape{40, 300, 3}}) {
    const Tensor dy = RandomTensor(s, 91);
    const std::string what = "BiasAddGrad " + ShapeToString(s);
    const auto axis1 = [](KernelRunner& r) { r.Axis(1); };
    const std::vector<Tensor> got = ExpectSplitBitwise(OpCode::BiasAddGrad, {&dy}, {{{s[1]}}}, axis1, what);
    const Shape channels = s.size() == 3 ? Shape{s[1], 1} : Shape{s[1]};
    ExpectClose(got[0], RefSumToShape(ToRef(dy), channels).data, 1e-5, 1e-4, what);
    const Tensor dyh = ToBf16(dy);
    ExpectSplitBitwise(OpCode::BiasAddGrad, {&dyh}, {{{s[1]}, DType::BF16}}, axis1, "bf16 " + what);
  }
  const Tensor dy = RandomTensor({64, 16, 64}, 92);
  const std::vector<Tensor> got = ExpectSplitBitwise(OpCode::SumToShape, {&dy}, {{{16, 64}}}, nullptr, "SumToShape");
  ExpectClose(got[0], RefSumToShape(ToRef(dy), {16, 64}), 1e-5, 1e-5, "SumToShape");
}

TEST(TeamSplitKernels, LayerNormGradSplitByLeavesOfRowsGivesTheUnsplitBits) {
  // The ViT's token rows at batch 64 and 256 (d = 64), rows that end
  // mid-leaf, a count of rows below two leaves, and a long row.
  for (const Shape& s : {Shape{64, 16, 64}, Shape{4096, 64}, Shape{1000, 33}, Shape{200, 64}, Shape{300, 1000}}) {
    const int64_t d = s.back(), rows = NumElements(s) / d;
    const Tensor dy = RandomTensor(s, 101), x = RandomTensor(s, 102), gamma = RandomTensor({d}, 103, 0.5f, 1.5f);
    const Tensor mean = RandomTensor({rows}, 104, -0.1f, 0.1f), rstd = RandomTensor({rows}, 105, 0.5f, 2.0f);
    const std::string what = "LayerNormGrad " + ShapeToString(s);
    const std::vector<Tensor> got = ExpectSplitBitwise(
        OpCode::LayerNormGrad, {&dy, &x, &gamma, &mean, &rstd}, {{s}, {{d}}, {{d}}},
        [](KernelRunner& r) { r.LayerNormEpsilon(1e-5f); }, what);
    // dbeta = Σ_rows dy.
    ExpectClose(got[2], RefSumToShape(ToRef(dy), {d}), 1e-5, 1e-4, what + " dbeta");
  }
}

}  // namespace
}  // namespace sinkrt::device
