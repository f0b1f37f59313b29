// LayerNorm, Gather and Cast (and their gradients) against the float64
// reference ops, their load-time validation, Gather's run-time index check
// and the bf16 rounding of Cast.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "device/src/kernels/sum.h"
#include "support/kernel_runner.h"
#include "support/reference_ops.h"

namespace sinkrt::device {
namespace {

using namespace ::sinkrt::testing;
using fb::OpCode;
using Tensor = KernelTensor;

Shape Rows(const Shape& x) {
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < x.size(); ++i) rows *= x[i];
  return {rows};
}

//===--- LayerNorm ----------------------------------------------------------===//

// D = 1 (every y is beta), rank 1, odd and long rows (the pairwise sums'
// tails and blocks), a 3-D activation like a transformer's.
const std::vector<Shape> kLayerNormShapes = {{4, 8}, {5}, {3, 1}, {2, 3, 64}, {7, 33}, {3, 1000}};

TEST(LayerNormKernels, ForwardMatchesReference) {
  for (const Shape& s : kLayerNormShapes) {
    const int64_t d = s.back();
    // A mean far from 0 checks that the variance is taken around the mean.
    const Tensor x = RandomTensor(s, 21, 99.0f, 101.0f);
    const Tensor gamma = RandomTensor({d}, 22, 0.5f, 1.5f), beta = RandomTensor({d}, 23);
    Tensor y(s), mean(Rows(s)), rstd(Rows(s));
    KernelRunner(OpCode::LayerNorm)
        .In(x)
        .In(gamma)
        .In(beta)
        .Out(y)
        .Out(mean)
        .Out(rstd)
        .LayerNormEpsilon(1e-5f)
        .PrepareAndRun();
    RefTensor ref_mean, ref_rstd;
    const RefTensor ref = RefLayerNorm(ToRef(x), ToRef(gamma), ToRef(beta), 1e-5, &ref_mean, &ref_rstd);
    // x's float rounding near 100 makes x − mean good to ~1e-5 absolute.
    ExpectClose(y, ref, 1e-4, 2e-4, "LayerNorm y " + ShapeToString(s));
    ExpectClose(mean, ref_mean, 1e-6, 0, "LayerNorm mean " + ShapeToString(s));
    ExpectClose(rstd, ref_rstd, 1e-4, 0, "LayerNorm rstd " + ShapeToString(s));
  }
}

TEST(LayerNormKernels, EpsilonIsTheOption) {
  // A constant row has variance 0: rstd is exactly 1/√ε.
  Tensor x({2, 4}), gamma({4}), beta({4}), y({2, 4}), mean({2}), rstd({2});
  x.set({3, 3, 3, 3, 1, 1, 1, 1});
  gamma.set({1, 1, 1, 1});
  KernelRunner(OpCode::LayerNorm)
      .In(x)
      .In(gamma)
      .In(beta)
      .Out(y)
      .Out(mean)
      .Out(rstd)
      .LayerNormEpsilon(0.25f)
      .PrepareAndRun();
  EXPECT_EQ(rstd[0], 2.0f);
  EXPECT_EQ(mean[0], 3.0f);
  EXPECT_EQ(mean[1], 1.0f);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(y[i], 0.0f);
}

TEST(LayerNormKernels, GradMatchesReference) {
  for (const Shape& s : kLayerNormShapes) {
    const int64_t d = s.back();
    const Tensor x = RandomTensor(s, 31, -2.0f, 2.0f), dy = RandomTensor(s, 32);
    const Tensor gamma = RandomTensor({d}, 33, 0.5f, 1.5f), beta = RandomTensor({d}, 34);
    Tensor y(s), mean(Rows(s)), rstd(Rows(s));
    KernelRunner(OpCode::LayerNorm)
        .In(x)
        .In(gamma)
        .In(beta)
        .Out(y)
        .Out(mean)
        .Out(rstd)
        .LayerNormEpsilon(1e-5f)
        .PrepareAndRun();
    Tensor dx(s), dgamma({d}), dbeta({d});
    dgamma.set(std::vector<float>(d, 7.0f));  // overwritten, not accumulated into
    KernelRunner(OpCode::LayerNormGrad)
        .In(dy)
        .In(x)
        .In(gamma)
        .In(mean)
        .In(rstd)
        .Out(dx)
        .Out(dgamma)
        .Out(dbeta)
        .LayerNormEpsilon(1e-5f)
        .PrepareAndRun();
    const RefLayerNormGrads ref = RefLayerNormGrad(ToRef(dy), ToRef(x), ToRef(gamma), 1e-5);
    const std::string what = ShapeToString(s);
    ExpectClose(dx, ref.dx, 1e-4, 1e-4, "LayerNormGrad dx " + what);
    ExpectClose(dgamma, ref.dgamma, 1e-4, 1e-4, "LayerNormGrad dgamma " + what);
    ExpectClose(dbeta, ref.dbeta, 1e-5, 1e-5, "LayerNormGrad dbeta " + what);
  }
}

// The gradient fills the column sums' leaves as it goes (sum.h,
// AddColumnLeaves); dgamma and dbeta must be AddColumnSums's bits over
// dy·x̂ and dy: leaves of 128 rows and a short last one (300 rows), one and
// two column blocks (D = 64, 70).
TEST(LayerNormKernels, GradColumnSumsAreAddColumnSumsBits) {
  for (const Shape& s : {Shape{3, 100, 64}, Shape{300, 70}, Shape{5, 70}}) {
    const int64_t d = s.back(), rows = Rows(s)[0];
    const Tensor x = RandomTensor(s, 51, -2.0f, 2.0f), dy = RandomTensor(s, 52);
    const Tensor gamma = RandomTensor({d}, 53, 0.5f, 1.5f), beta = RandomTensor({d}, 54);
    Tensor y(s), mean(Rows(s)), rstd(Rows(s));
    KernelRunner(OpCode::LayerNorm)
        .In(x)
        .In(gamma)
        .In(beta)
        .Out(y)
        .Out(mean)
        .Out(rstd)
        .LayerNormEpsilon(1e-5f)
        .PrepareAndRun();
    Tensor dx(s), dgamma({d}), dbeta({d});
    KernelRunner(OpCode::LayerNormGrad)
        .In(dy)
        .In(x)
        .In(gamma)
        .In(mean)
        .In(rstd)
        .Out(dx)
        .Out(dgamma)
        .Out(dbeta)
        .LayerNormEpsilon(1e-5f)
        .PrepareAndRun();
    std::vector<float> dy_xhat(rows * d), dys = dy.values(), want_g(d, 0.0f), want_b(d, 0.0f);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < d; ++i) dy_xhat[r * d + i] = dy[r * d + i] * ((x[r * d + i] - mean[r]) * rstd[r]);
    AddColumnSums(dy_xhat.data(), rows, d, want_g.data());
    AddColumnSums(dys.data(), rows, d, want_b.data());
    ExpectBitwise(dgamma, want_g, "dgamma " + ShapeToString(s));
    ExpectBitwise(dbeta, want_b, "dbeta " + ShapeToString(s));
  }
}

TEST(LayerNormKernels, RunsAreBitwiseDeterministicAndSizeTheirScratch) {
  const Shape s{64, 16, 64};
  const Tensor x = RandomTensor(s, 41), dy = RandomTensor(s, 42), gamma = RandomTensor({64}, 43);
  const Tensor beta = RandomTensor({64}, 44);
  Tensor y(s), mean(Rows(s)), rstd(Rows(s));
  KernelRunner(OpCode::LayerNorm)
      .In(x)
      .In(gamma)
      .In(beta)
      .Out(y)
      .Out(mean)
      .Out(rstd)
      .LayerNormEpsilon(1e-5f)
      .PrepareAndRun();
  Tensor dx1(s), dg1({64}), db1({64}), dx2(s), dg2({64}), db2({64});
  KernelRunner grad(OpCode::LayerNormGrad);
  grad.In(dy).In(x).In(gamma).In(mean).In(rstd).Out(dx1).Out(dg1).Out(db1).LayerNormEpsilon(1e-5f).PrepareAndRun();
  // x̂ and dy·gamma of one row, and 8 column leaves (1024 rows) each for dgamma and dbeta.
  EXPECT_EQ(grad.scratch_bytes(), (2 + 2 * 8) * 64 * sizeof(float));
  KernelRunner(OpCode::LayerNormGrad)
      .In(dy)
      .In(x)
      .In(gamma)
      .In(mean)
      .In(rstd)
      .Out(dx2)
      .Out(dg2)
      .Out(db2)
      .LayerNormEpsilon(1e-5f)
      .PrepareAndRun();
  ExpectBitwise(dx2, dx1.values(), "dx");
  ExpectBitwise(dg2, dg1.values(), "dgamma");
  ExpectBitwise(db2, db1.values(), "dbeta");
}

TEST(LayerNormKernels, PrepareRejectsBadOperands) {
  const Tensor x({4, 8}), gamma({8}), beta({8}), short_gamma({4});
  Tensor y({4, 8}), mean({4}), rstd({4}), bad_rows({8});
  KernelRunner g(OpCode::LayerNorm);
  g.In(x).In(short_gamma).In(beta).Out(y).Out(mean).Out(rstd).LayerNormEpsilon(1e-5f);
  ExpectPrepareError(g, "LayerNorm", {"input 1 has shape [4], expected [D=8] for input 0 [4,8]"});
  KernelRunner b(OpCode::LayerNorm);
  b.In(x).In(gamma).In(short_gamma).Out(y).Out(mean).Out(rstd).LayerNormEpsilon(1e-5f);
  ExpectPrepareError(b, "LayerNorm", {"input 2 has shape [4], expected [8] like input 1"});
  KernelRunner stats(OpCode::LayerNorm);
  stats.In(x).In(gamma).In(beta).Out(y).Out(bad_rows).Out(rstd).LayerNormEpsilon(1e-5f);
  ExpectPrepareError(stats, "LayerNorm", {"output 1 has shape [8], expected [rows=4] (one per row)"});
  KernelRunner eps(OpCode::LayerNorm);
  eps.In(x).In(gamma).In(beta).Out(y).Out(mean).Out(rstd).LayerNormEpsilon(0.0f);
  ExpectPrepareError(eps, "LayerNorm", {"epsilon must be a positive finite number"});
  KernelRunner none(OpCode::LayerNorm);
  none.In(x).In(gamma).In(beta).Out(y).Out(mean).Out(rstd);
  ExpectPrepareError(none, "LayerNorm", {"options missing, expected LayerNormOptions, got NONE"});
  const Tensor bf16_x({4, 8}, DType::BF16);
  KernelRunner half(OpCode::LayerNorm);
  half.In(bf16_x).In(gamma).In(beta).Out(y).Out(mean).Out(rstd).LayerNormEpsilon(1e-5f);
  // bf16 x with f32 gamma: one float dtype per op (kernels_bf16_elementwise_test).
  ExpectPrepareError(half, "LayerNorm", {"input 1 has dtype f32, expected bf16 (as input 0)"});
  KernelRunner scalar(OpCode::LayerNorm);
  const Tensor s0(Shape{});
  scalar.In(s0).In(gamma).In(beta).Out(y).Out(mean).Out(rstd).LayerNormEpsilon(1e-5f);
  ExpectPrepareError(scalar, "LayerNorm", {"input 0 is a scalar"});

  Tensor dx({4, 8}), dgamma({8}), dbeta({8});
  KernelRunner grad(OpCode::LayerNormGrad);
  grad.In(x).In(x).In(gamma).In(mean).In(bad_rows).Out(dx).Out(dgamma).Out(dbeta).LayerNormEpsilon(1e-5f);
  ExpectPrepareError(grad, "LayerNormGrad", {"input 4 has shape [8], expected [rows=4]"});
  KernelRunner dbeta_shape(OpCode::LayerNormGrad);
  dbeta_shape.In(x).In(x).In(gamma).In(mean).In(rstd).Out(dx).Out(dgamma).Out(y).LayerNormEpsilon(1e-5f);
  ExpectPrepareError(dbeta_shape, "LayerNormGrad", {"output 2 has shape [4,8], expected [8] like input 2"});
  KernelRunner count(OpCode::LayerNormGrad);
  count.In(x).In(x).In(gamma).In(mean).Out(dx).Out(dgamma).Out(dbeta).LayerNormEpsilon(1e-5f);
  ExpectPrepareError(count, "LayerNormGrad", {"takes 5 inputs and 3 outputs, got 4 and 3"});
}

//===--- Gather -------------------------------------------------------------===//

Tensor Indices(Shape shape, std::vector<int32_t> v) {
  Tensor t(std::move(shape), DType::I32);
  std::memcpy(t.i32(), v.data(), v.size() * sizeof(int32_t));
  return t;
}

struct GatherCase {
  Shape table, indices;
  std::vector<int32_t> values;
};
const std::vector<GatherCase> kGatherCases = {
    {{5, 3}, {4}, {0, 4, 2, 4}},               // a repeated row
    {{10, 2, 3}, {2, 3}, {9, 0, 1, 1, 1, 5}},  // 2-D indices, 3-D table
    {{7}, {3}, {6, 0, 3}},                     // rows of one element
    {{16, 64}, {8, 16}, {}},                   // a ViT-sized embedding, filled below
    {{3, 4}, {}, {2}},                         // a scalar index
};

TEST(GatherKernels, ForwardAndGradMatchReference) {
  for (GatherCase c : kGatherCases) {
    if (c.values.empty())
      for (int64_t i = 0; i < NumElements(c.indices); ++i)
        c.values.push_back(static_cast<int32_t>((i * 7 + 3) % c.table[0]));
    const Tensor table = RandomTensor(c.table, 51);
    const Tensor idx = Indices(c.indices, c.values);
    Shape out = c.indices;
    out.insert(out.end(), c.table.begin() + 1, c.table.end());
    Tensor y(out);
    KernelRunner(OpCode::Gather).In(table).In(idx).Out(y).PrepareAndRun();
    ExpectBitwise(y, RefGather(ToRef(table), c.values, c.indices), "Gather " + ShapeToString(c.table));

    const Tensor dy = RandomTensor(out, 52);
    Tensor dtable(c.table);
    dtable.set(std::vector<float>(dtable.numel(), 5.0f));  // zeroed by the kernel, not accumulated into
    KernelRunner(OpCode::GatherGrad).In(dy).In(idx).Out(dtable).PrepareAndRun();
    ExpectClose(dtable, RefGatherGrad(ToRef(dy), c.values, c.table), 1e-6, 1e-7,
                "GatherGrad " + ShapeToString(c.table));
  }
}

TEST(GatherKernels, IndexOutOfRangeFailsTheStepNamingRowAndValue) {
  const Tensor table = RandomTensor({5, 3}, 1);
  const Tensor idx = Indices({2, 2}, {0, 4, 7, 1});
  Tensor y({2, 2, 3});
  KernelRunner op(OpCode::Gather);
  op.In(table).In(idx).Out(y);
  ASSERT_TRUE(op.Prepare().ok());
  Status st = op.Run();
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "Gather: index 7 in row 2 is outside [0, 5)");

  const Tensor negative = Indices({2, 2}, {0, 1, 2, -1});
  const Tensor dy = RandomTensor({2, 2, 3}, 2);
  Tensor dtable({5, 3});
  KernelRunner grad(OpCode::GatherGrad);
  grad.In(dy).In(negative).Out(dtable);
  ASSERT_TRUE(grad.Prepare().ok());
  st = grad.Run();
  EXPECT_EQ(st.message(), "GatherGrad: index -1 in row 3 is outside [0, 5)");
}

TEST(GatherKernels, PrepareRejectsBadOperands) {
  const Tensor table({5, 3}), idx = Indices({4}, {0, 1, 2, 3}), float_idx({4});
  Tensor y({4, 3}), wrong({4, 2});
  KernelRunner f(OpCode::Gather);
  f.In(table).In(float_idx).Out(y);
  ExpectPrepareError(f, "Gather", {"input 1 has dtype f32, expected i32"});
  KernelRunner s(OpCode::Gather);
  s.In(table).In(idx).Out(wrong);
  ExpectPrepareError(s, "Gather", {"output 0 has shape [4,2], expected [4,3] (input 1 [4] then input 0 [5,3]"});
  KernelRunner o(OpCode::Gather);
  o.In(table).In(idx).Out(y).Axis(0);
  ExpectPrepareError(o, "Gather", {"takes no options, got AxisOptions"});
  const Tensor bf16_table({5, 3}, DType::BF16);
  KernelRunner h(OpCode::Gather);
  h.In(bf16_table).In(idx).Out(y);
  ExpectPrepareError(h, "Gather", {"input 0 has dtype bf16, expected f32"});
  const Tensor dy({4, 3});
  Tensor scalar_table(Shape{});
  KernelRunner g(OpCode::GatherGrad);
  g.In(dy).In(idx).Out(scalar_table);
  ExpectPrepareError(g, "GatherGrad", {"output 0 is a scalar, expected [V, ...]"});
}

//===--- Cast ---------------------------------------------------------------===//

uint16_t Bits(const Tensor& t, int64_t i) {
  uint16_t b;
  std::memcpy(&b, t.bytes() + 2 * i, 2);
  return b;
}

float Widen(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

TEST(CastKernels, F32ToBf16RoundsToNearestEvenAndBack) {
  const float inf = std::numeric_limits<float>::infinity();
  const float denorm = std::numeric_limits<float>::denorm_min();
  std::vector<float> v = {1.0f,
                          1.0f + 1.0f / 256,                 // a tie: to even (1)
                          1.0f + 3.0f / 256,                 // a tie: to even (1 + 2/128)
                          1.0f + 1.0f / 256 + 1.0f / 65536,  // just past the tie: up
                          -2.5f,
                          0.0f,
                          -0.0f,
                          inf,
                          -inf,
                          std::numeric_limits<float>::max(),  // past the largest bf16: inf
                          3.38e38f,                           // rounds down to the largest bf16
                          1e-40f,
                          -3e-39f,
                          denorm,  // subnormals
                          std::numeric_limits<float>::min(),
                          65504.0f,
                          1e-3f};
  const Tensor random = RandomTensor({1000}, 61, -1e4f, 1e4f);
  for (int64_t i = 0; i < random.numel(); ++i) v.push_back(random[i]);
  const int64_t n = static_cast<int64_t>(v.size());
  Tensor x({n});
  x.set(v);
  Tensor h({n}, DType::BF16);
  KernelRunner(OpCode::Cast).In(x).Out(h).CastTo(DType::BF16).PrepareAndRun();
  for (int64_t i = 0; i < n; ++i) {
    const double want = RefRoundToBf16(v[i]);
    const float got = Widen(Bits(h, i));
    EXPECT_EQ(got, static_cast<float>(want)) << "element " << i << " = " << v[i];
    EXPECT_EQ(std::signbit(got), std::signbit(v[i])) << "element " << i;
  }
  // Widening is exact: the bf16 values come back unchanged.
  Tensor back({n});
  KernelRunner(OpCode::Cast).In(h).Out(back).CastTo(DType::F32).PrepareAndRun();
  for (int64_t i = 0; i < n; ++i) {
    const float want = Widen(Bits(h, i));
    EXPECT_EQ(std::memcmp(&back[i], &want, 4), 0) << "element " << i;
  }
}

TEST(CastKernels, NaNStaysNaN) {
  // Payloads whose rounding carry would reach the exponent (an infinity)
  // if NaNs were rounded like numbers.
  const uint32_t payloads[] = {0x7f800001u, 0x7fffffffu, 0xffffffffu, 0x7fc00000u, 0x7f80ffffu};
  Tensor x({5});
  for (int i = 0; i < 5; ++i) std::memcpy(&x[i], &payloads[i], 4);
  Tensor h({5}, DType::BF16), back({5});
  KernelRunner(OpCode::Cast).In(x).Out(h).CastTo(DType::BF16).PrepareAndRun();
  KernelRunner(OpCode::Cast).In(h).Out(back).CastTo(DType::F32).PrepareAndRun();
  for (int i = 0; i < 5; ++i) {
    EXPECT_TRUE(std::isnan(back[i])) << std::hex << payloads[i];
    EXPECT_EQ(std::signbit(back[i]), (payloads[i] >> 31) != 0) << std::hex << payloads[i];
  }
}

TEST(CastKernels, IdentityCastsCopy) {
  const Tensor x = RandomTensor({3, 7}, 71);
  Tensor y({3, 7});
  KernelRunner(OpCode::Cast).In(x).Out(y).CastTo(DType::F32).PrepareAndRun();
  ExpectBitwise(y, x.values(), "f32 -> f32");
  Tensor h({3, 7}, DType::BF16), h2({3, 7}, DType::BF16);
  KernelRunner(OpCode::Cast).In(x).Out(h).CastTo(DType::BF16).PrepareAndRun();
  KernelRunner(OpCode::Cast).In(h).Out(h2).CastTo(DType::BF16).PrepareAndRun();
  EXPECT_EQ(std::memcmp(h.bytes(), h2.bytes(), 2 * 21), 0);
}

TEST(CastKernels, PrepareRejectsBadOperands) {
  const Tensor x({4}), ints({4}, DType::I32);
  Tensor y({4}), h({4}, DType::BF16), longer({5}, DType::BF16);
  KernelRunner to(OpCode::Cast);
  to.In(x).Out(y).CastTo(DType::I32);
  ExpectPrepareError(to, "Cast", {"option 'to' is i32, expected f32 or bf16"});
  KernelRunner out(OpCode::Cast);
  out.In(x).Out(y).CastTo(DType::BF16);
  ExpectPrepareError(out, "Cast", {"output 0 has dtype f32, expected bf16"});
  KernelRunner in(OpCode::Cast);
  in.In(ints).Out(y).CastTo(DType::F32);
  ExpectPrepareError(in, "Cast", {"input 0 has dtype i32, expected f32 or bf16"});
  KernelRunner shape(OpCode::Cast);
  shape.In(x).Out(longer).CastTo(DType::BF16);
  ExpectPrepareError(shape, "Cast", {"output 0 has shape [5], expected [4] like input 0"});
  KernelRunner none(OpCode::Cast);
  none.In(x).Out(h);
  ExpectPrepareError(none, "Cast", {"options missing, expected CastOptions, got NONE"});
}

// Only Cast converts: an op that takes bf16 (kernels_bf16_elementwise_test)
// refuses f32 and bf16 operands mixed, and the rest refuse bf16 at load.
TEST(CastKernels, OtherKernelsRefuseBf16) {
  const Tensor h({2, 3}, DType::BF16), x({2, 3});
  Tensor y({2, 3});
  KernelRunner relu(OpCode::Relu);
  relu.In(h).Out(y);
  ExpectPrepareError(relu, "Relu", {"output 0 has dtype f32, expected bf16 (as input 0)"});
  KernelRunner add(OpCode::Add);
  add.In(x).In(h).Out(y);
  ExpectPrepareError(add, "Add", {"bf16"});
  const Tensor w({3, 2});
  Tensor mm({2, 2});
  KernelRunner matmul(OpCode::MatMul);
  matmul.In(h).In(w).Out(mm).MatMulOpts(false, false);
  ExpectPrepareError(matmul, "MatMul", {"bf16"});
}

}  // namespace
}  // namespace sinkrt::device
