// ReduceMax, Select, CausalMask and ReduceMax's gradient helper EqualMask
// against float64 reference ops (test/support/reference_ops.h): every one
// moves input bits (a max, a choice, a fill), so f32 results are exact and
// bf16 results are the bf16 bits of the same choice.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "runtime/src/bf16.h"
#include "support/kernel_runner.h"
#include "support/reference_ops.h"

namespace sinkrt::device {
namespace {

using namespace ::sinkrt::testing;
using fb::OpCode;
using Tensor = KernelTensor;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

struct ReduceCase {
  Shape x;
  std::vector<int32_t> axes;  // sorted, non-negative (the compiler's form)
};

const ReduceCase kReduceCases[] = {
    {{17}, {0}},        {{4, 9}, {1}},    {{4, 9}, {0}},    {{3, 5, 7}, {0, 2}},    {{3, 5, 7}, {1}},
    {{2, 3, 4, 5}, {}}, {{2, 1, 6}, {1}}, {{64, 129}, {0}}, {{2, 3, 4, 5}, {1, 3}},
};

TEST(ReduceMaxKernel, MatchesFloat64ReferenceExactly) {
  for (const ReduceCase& c : kReduceCases) {
    for (bool keep : {false, true}) {
      const Tensor x = RandomTensor(c.x, 21, -5.0f, 5.0f);
      const RefTensor want = RefReduceMax(ToRef(x), std::vector<int>(c.axes.begin(), c.axes.end()), keep);
      Tensor y(want.shape);
      KernelRunner(OpCode::ReduceMax).Axes(c.axes, keep).In(x).Out(y).PrepareAndRun();
      ExpectBitwise(y, want, "ReduceMax " + ShapeToString(c.x) + (keep ? " keep_dims" : ""));
    }
  }
}

TEST(ReduceMaxKernel, NaNPropagatesAndInfIsAValue) {
  Tensor x({3, 4});
  x.set({1, kNaN, 3, 2, -kInf, -kInf, -kInf, -kInf, 5, kInf, -1, kInf});
  Tensor y({3});
  KernelRunner(OpCode::ReduceMax).Axes({1}, false).In(x).Out(y).PrepareAndRun();
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_EQ(y[1], -kInf);
  EXPECT_EQ(y[2], kInf);
}

TEST(ReduceMaxKernel, RefusesAWrongOutputShape) {
  const Tensor x = RandomTensor({3, 4}, 1);
  Tensor y({3, 1});
  KernelRunner r(OpCode::ReduceMax);
  r.Axes({1}, false).In(x).Out(y);
  const Status s = r.Prepare();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("reduced axes dropped"), std::string::npos) << s.message();
}

TEST(ReduceMaxKernel, Bf16IsTheMaxOfTheBf16Values) {
  Tensor x = RandomTensor({5, 33}, 3, -4.0f, 4.0f);
  Tensor h(x.shape(), DType::BF16);
  auto* hb = reinterpret_cast<uint16_t*>(h.bytes());
  for (int64_t i = 0; i < x.numel(); ++i) {
    hb[i] = FloatToBf16(x[i]);
    x[i] = Bf16ToFloat(hb[i]);
  }
  Tensor y({5}), yh({5}, DType::BF16);
  KernelRunner(OpCode::ReduceMax).Axes({1}, false).In(x).Out(y).PrepareAndRun();
  KernelRunner(OpCode::ReduceMax).Axes({1}, false).In(h).Out(yh).PrepareAndRun();
  const auto* out = reinterpret_cast<const uint16_t*>(yh.bytes());
  for (int i = 0; i < 5; ++i) EXPECT_EQ(out[i], FloatToBf16(y[i])) << i;
}

TEST(EqualMaskKernel, OneWhereEqualBroadcasting) {
  Tensor x({2, 3}), m({2, 1});
  x.set({1, 4, 4, kNaN, 2, -0.0f});
  m.set({4, 0.0f});
  Tensor y({2, 3});
  KernelRunner(OpCode::EqualMask).In(x).In(m).Out(y).PrepareAndRun();
  // NaN equals nothing; -0 equals +0.
  EXPECT_EQ(y.values(), (std::vector<float>{0, 1, 1, 0, 0, 1}));
}

// cond as U8 values of `bits`, broadcast over shape `s`.
Tensor U8(Shape s, const std::vector<uint8_t>& bits) {
  Tensor t(std::move(s), DType::U8);
  EXPECT_EQ(static_cast<size_t>(t.numel()), bits.size());
  for (size_t i = 0; i < bits.size(); ++i) t.bytes()[i] = bits[i];
  return t;
}

RefTensor U8Ref(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = t.bytes()[i];
  return RefTensor(t.shape(), v);
}

struct SelectShapes {
  Shape c, x, y;
};

const SelectShapes kSelectShapes[] = {
    {{17}, {17}, {17}},       {{3, 1}, {3, 4}, {4}},       {{2, 3, 4}, {}, {2, 3, 4}},
    {{4}, {2, 3, 4}, {3, 1}}, {{2, 1, 5}, {1, 4, 1}, {5}}, {{}, {3, 2}, {3, 2}},
};

TEST(SelectKernel, MatchesFloat64ReferenceWithU8AndF32Cond) {
  int seed = 40;
  for (const SelectShapes& sh : kSelectShapes) {
    const Tensor x = RandomTensor(sh.x, ++seed), y = RandomTensor(sh.y, ++seed);
    // A cond of 0/1 draws; as U8 (with 7 for true: any nonzero) and as f32.
    const Tensor draw = RandomTensor(sh.c, ++seed);
    std::vector<uint8_t> bits;
    Tensor cf(sh.c);
    for (int64_t i = 0; i < draw.numel(); ++i) {
      bits.push_back(draw[i] > 0 ? 7 : 0);
      cf[i] = draw[i] > 0 ? -2.5f : -0.0f;  // -0 is false
    }
    const Tensor cu = U8(sh.c, bits);
    const RefTensor want = RefSelect(U8Ref(cu), ToRef(x), ToRef(y));
    for (const Tensor* c : std::vector<const Tensor*>{&cu, &cf}) {
      Tensor out(want.shape);
      KernelRunner(OpCode::Select).In(*c).In(x).In(y).Out(out).PrepareAndRun();
      ExpectBitwise(out, want, "Select " + ShapeToString(sh.c) + (c == &cu ? " u8" : " f32") + " cond");
    }
  }
}

TEST(SelectKernel, Bf16SelectsBits) {
  const Tensor c = U8({4}, {1, 0, 0, 3});
  Tensor a({4}, DType::BF16), b({4}, DType::BF16), y({4}, DType::BF16);
  auto bits = [](const Tensor& t) { return reinterpret_cast<uint16_t*>(t.bytes()); };
  for (int i = 0; i < 4; ++i) {
    bits(a)[i] = static_cast<uint16_t>(0x3f80 + i);
    bits(b)[i] = static_cast<uint16_t>(0xbf80 + i);
  }
  KernelRunner(OpCode::Select).In(c).In(a).In(b).Out(y).PrepareAndRun();
  EXPECT_EQ(bits(y)[0], 0x3f80);
  EXPECT_EQ(bits(y)[1], 0xbf81);
  EXPECT_EQ(bits(y)[2], 0xbf82);
  EXPECT_EQ(bits(y)[3], 0x3f83);
}

// Under amp an f32 cond is cast to bf16 with x and y: nonzero bits but the
// sign are true (-0 false, NaN and subnormals true).
TEST(SelectKernel, Bf16CondIsNonzeroBits) {
  Tensor c({5}, DType::BF16), a({5}), b({5}), y({5});
  const uint16_t cond_bits[5] = {0x0000, 0x8000, 0x3f80, 0x7fc0, 0x0001};
  for (int i = 0; i < 5; ++i) reinterpret_cast<uint16_t*>(c.bytes())[i] = cond_bits[i];
  a.set({1, 2, 3, 4, 5});
  b.set({-1, -2, -3, -4, -5});
  KernelRunner(OpCode::Select).In(c).In(a).In(b).Out(y).PrepareAndRun();
  EXPECT_EQ(y.values(), (std::vector<float>{-1, -2, 3, 4, 5}));
}

TEST(SelectKernel, RefusesAnI32CondAndShapesThatDoNotBroadcast) {
  const Tensor x = RandomTensor({3, 4}, 1), y = RandomTensor({3, 4}, 2);
  Tensor out({3, 4});
  {
    const Tensor c({3, 4}, DType::I32);
    KernelRunner r(OpCode::Select);
    r.In(c).In(x).In(y).Out(out);
    const Status s = r.Prepare();
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("cond (input 0) has dtype i32, expected u8, f32 or bf16"), std::string::npos)
        << s.message();
  }
  {
    const Tensor c = U8({3}, {1, 0, 1});
    KernelRunner r(OpCode::Select);
    r.In(c).In(x).In(y).Out(out);
    const Status s = r.Prepare();
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("do not broadcast"), std::string::npos) << s.message();
  }
}

TEST(CausalMaskKernel, MatchesFloat64ReferenceSquareAndWithEarlierKeys) {
  // T = S (self-attention), S > T (a cache of earlier keys), S < T (rows
  // before the first key see nothing: all fill).
  for (const Shape& s : {Shape{2, 3, 5, 5}, Shape{4, 3, 7}, Shape{6, 2}, Shape{1, 1}, Shape{2, 5, 3}}) {
    for (float fill : {-kInf, -1e4f, 0.0f}) {
      const Tensor x = RandomTensor(s, 31, -3.0f, 3.0f);
      const RefTensor want = RefCausalMask(ToRef(x), fill);
      Tensor y(s);
      KernelRunner(OpCode::CausalMask).FillValue(fill).In(x).Out(y).PrepareAndRun();
      ExpectBitwise(y, want, "CausalMask " + ShapeToString(s) + " fill " + std::to_string(fill));
    }
  }
}

TEST(CausalMaskKernel, RunsInPlaceAndNeverReadsMaskedInputs) {
  Tensor x({3, 3});
  x.set({1, kNaN, kNaN, 2, 3, kNaN, 4, 5, 6});
  KernelRunner(OpCode::CausalMask).FillValue(-kInf).In(x).Out(x).PrepareAndRun();
  EXPECT_EQ(x.values(), (std::vector<float>{1, -kInf, -kInf, 2, 3, -kInf, 4, 5, 6}));
}

TEST(CausalMaskKernel, RefusesRankBelow2) {
  const Tensor x = RandomTensor({5}, 1);
  Tensor y({5});
  KernelRunner r(OpCode::CausalMask);
  r.FillValue(0).In(x).Out(y);
  const Status s = r.Prepare();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("must have rank >= 2"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace sinkrt::device
