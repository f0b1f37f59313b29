// OneHot, Pad and PadGrad against the float64 reference ops
// (test/support/reference_ops.h). OneHot and Pad move values (an index
// compare, a copy), so f32 results are exact; PadGrad's mirror modes add up
// to a few dy elements per dx element and are compared to 1e-6.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "device/src/team/worker_team.h"
#include "runtime/src/bf16.h"
#include "support/kernel_runner.h"
#include "support/reference_ops.h"

namespace sinkrt::device {
namespace {

using namespace ::sinkrt::testing;
using fb::OpCode;
using Tensor = KernelTensor;

Tensor I32(Shape shape, const std::vector<int32_t>& v) {
  Tensor t(std::move(shape), DType::I32);
  for (size_t i = 0; i < v.size(); ++i) t.i32()[i] = v[i];
  return t;
}

KernelRunner& OneHotOpts(KernelRunner& r, int64_t depth, float on, float off, int axis) {
  return r.Options(fb::OpOptions::OneHotOptions, fb::CreateOneHotOptions(r.fbb(), depth, on, off, axis).Union());
}

KernelRunner& PadOpts(KernelRunner& r, std::vector<int64_t> paddings, fb::PadMode mode, float value) {
  return r.Options(fb::OpOptions::PadOptions, fb::CreatePadOptionsDirect(r.fbb(), &paddings, mode, value).Union());
}

TEST(OneHotKernel, MatchesFloat64ReferenceOnEveryAxis) {
  // Indices include -1 and depth itself (outside [0, depth): all off_value).
  const std::vector<int32_t> v = {0, 3, -1, 2, 4, 1, 1, 5, 0, 2, 3, -7};
  for (const Shape& s : {Shape{12}, Shape{3, 4}, Shape{2, 3, 2}}) {
    for (int axis = -1; axis <= static_cast<int>(s.size()); ++axis) {
      const Tensor idx = I32(s, v);
      const RefTensor want = RefOneHot(v, s, 5, 0.75, -0.25, axis);
      Tensor y(want.shape);
      KernelRunner r(OpCode::OneHot);
      OneHotOpts(r, 5, 0.75f, -0.25f, axis).In(idx).Out(y).PrepareAndRun();
      ExpectBitwise(y, want, "OneHot " + ShapeToString(s) + " axis " + std::to_string(axis));
    }
  }
}

TEST(OneHotKernel, OutOfRangeIndicesGiveAllOffValue) {
  const Tensor idx = I32({4}, {-1, 3, 2, 2147483647});
  Tensor y({4, 3});
  KernelRunner r(OpCode::OneHot);
  OneHotOpts(r, 3, 1.0f, 0.0f, -1).In(idx).Out(y).PrepareAndRun();
  EXPECT_EQ(y.values(), (std::vector<float>{0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0}));
}

TEST(OneHotKernel, Bf16OutputHoldsTheRoundedValues) {
  const Tensor idx = I32({3}, {1, 0, 2});
  Tensor y({3, 3}, DType::BF16);
  KernelRunner r(OpCode::OneHot);
  OneHotOpts(r, 3, 0.9f, 0.05f, -1).In(idx).Out(y).PrepareAndRun();
  const auto* b = reinterpret_cast<const uint16_t*>(y.bytes());
  for (int i = 0; i < 9; ++i)
    EXPECT_EQ(b[i], FloatToBf16(i % 3 == (i / 3 == 0 ? 1 : i / 3 == 1 ? 0 : 2) ? 0.9f : 0.05f));
}

TEST(OneHotKernel, RefusesABadAxisDepthOrShape) {
  const Tensor idx = I32({2, 3}, {0, 1, 2, 0, 1, 2});
  {
    Tensor y({2, 3, 4});
    KernelRunner r(OpCode::OneHot);
    OneHotOpts(r, 4, 1, 0, 4).In(idx).Out(y);
    const Status s = r.Prepare();
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("axis 4 is outside [-1, 2]"), std::string::npos) << s.message();
  }
  {
    Tensor y({2, 3, 4});
    KernelRunner r(OpCode::OneHot);
    OneHotOpts(r, -4, 1, 0, -1).In(idx).Out(y);
    const Status s = r.Prepare();
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("depth -4 must be >= 0"), std::string::npos) << s.message();
  }
  {
    Tensor y({2, 4, 3});  // depth at the end, not in the middle
    KernelRunner r(OpCode::OneHot);
    OneHotOpts(r, 4, 1, 0, -1).In(idx).Out(y);
    EXPECT_FALSE(r.Prepare().ok());
  }
  {
    const Tensor f = RandomTensor({2, 3}, 1);
    Tensor y({2, 3, 4});
    KernelRunner r(OpCode::OneHot);
    OneHotOpts(r, 4, 1, 0, -1).In(f).Out(y);
    const Status s = r.Prepare();
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("expected i32"), std::string::npos) << s.message();
  }
}

struct PadCase {
  Shape x;
  std::vector<int64_t> paddings;
};

// Paddings within every mode's limits (reflect: < extent).
const PadCase kPadCases[] = {
    {{7}, {2, 3}},
    {{4, 5}, {1, 2, 0, 4}},
    {{4, 5}, {0, 0, 3, 1}},
    {{3, 4, 6}, {2, 0, 1, 3, 5, 2}},
    {{2, 3, 4, 5}, {1, 1, 0, 2, 3, 0, 2, 4}},
    {{64, 129}, {3, 2, 7, 9}},
};

const fb::PadMode kModes[] = {fb::PadMode::Constant, fb::PadMode::Reflect, fb::PadMode::Symmetric};

TEST(PadKernel, MatchesFloat64ReferenceInEveryMode) {
  for (const PadCase& c : kPadCases) {
    for (fb::PadMode mode : kModes) {
      const Tensor x = RandomTensor(c.x, 41, -3.0f, 3.0f);
      const RefTensor want = RefPad(ToRef(x), c.paddings, static_cast<int>(mode), 1.5);
      Tensor y(want.shape);
      KernelRunner r(OpCode::Pad);
      PadOpts(r, c.paddings, mode, 1.5f).In(x).Out(y).PrepareAndRun();
      ExpectBitwise(y, want, std::string("Pad ") + ShapeToString(c.x) + " " + fb::EnumNamePadMode(mode));
    }
  }
}

TEST(PadKernel, HandWorkedRows) {
  Tensor x({3});
  x.set({1, 2, 3});
  const std::pair<fb::PadMode, std::vector<float>> want[] = {
      {fb::PadMode::Constant, {9, 9, 1, 2, 3, 9, 9}},
      {fb::PadMode::Reflect, {3, 2, 1, 2, 3, 2, 1}},
      {fb::PadMode::Symmetric, {2, 1, 1, 2, 3, 3, 2}},
  };
  for (const auto& [mode, values] : want) {
    Tensor y({7});
    KernelRunner r(OpCode::Pad);
    PadOpts(r, {2, 2}, mode, 9.0f).In(x).Out(y).PrepareAndRun();
    EXPECT_EQ(y.values(), values) << fb::EnumNamePadMode(mode);
  }
}

TEST(PadGradKernel, MatchesFloat64ReferenceInEveryMode) {
  for (const PadCase& c : kPadCases) {
    for (fb::PadMode mode : kModes) {
      const RefTensor padded = RefPad(RefTensor::Zeros(c.x), c.paddings, 0, 0.0);
      const Tensor dy = RandomTensor(padded.shape, 43, -2.0f, 2.0f);
      const RefTensor want = RefPadGrad(ToRef(dy), c.x, c.paddings, static_cast<int>(mode));
      Tensor dx(c.x);
      KernelRunner r(OpCode::PadGrad);
      PadOpts(r, c.paddings, mode, 0.0f).In(dy).Out(dx).PrepareAndRun();
      const std::string what = std::string("PadGrad ") + ShapeToString(c.x) + " " + fb::EnumNamePadMode(mode);
      if (mode == fb::PadMode::Constant) {
        ExpectBitwise(dx, want, what);  // a slice
      } else {
        ExpectClose(dx, want, 1e-6, 1e-6, what);
      }
    }
  }
}

TEST(PadGradKernel, SameBitsOnAnyTeamSize) {
  const PadCase c{{64, 129}, {3, 2, 7, 9}};
  const Tensor dy = RandomTensor({69, 145}, 5, -2.0f, 2.0f);
  Tensor one(c.x), many(c.x);
  KernelRunner r1(OpCode::PadGrad);
  PadOpts(r1, c.paddings, fb::PadMode::Symmetric, 0).In(dy).Out(one).PrepareAndRun();
  WorkerTeam team(4, 0);
  KernelRunner r4(OpCode::PadGrad);
  PadOpts(r4, c.paddings, fb::PadMode::Symmetric, 0).Team(&team).In(dy).Out(many).PrepareAndRun();
  EXPECT_EQ(one.values(), many.values());
}

TEST(PadKernel, RefusesPaddingsBeyondTheModesLimits) {
  const Tensor x = RandomTensor({3, 4}, 1);
  struct Bad {
    fb::PadMode mode;
    std::vector<int64_t> paddings;
    Shape y;
    const char* says;
  };
  const Bad bad[] = {
      {fb::PadMode::Reflect, {0, 0, 4, 0}, {3, 8}, "must be in [0, 3] for mode Reflect"},
      {fb::PadMode::Symmetric, {4, 0, 0, 0}, {7, 4}, "must be in [0, 3] for mode Symmetric"},
      {fb::PadMode::Constant, {0, -1, 0, 0}, {2, 4}, "must be in [0, "},
      {fb::PadMode::Constant, {1, 1}, {5, 4}, "paddings has 2 values, expected 4"},
      {fb::PadMode::Constant, {1, 1, 0, 0}, {5, 5}, "output 0"},
  };
  for (const Bad& b : bad) {
    Tensor y(b.y);
    KernelRunner r(OpCode::Pad);
    PadOpts(r, b.paddings, b.mode, 0).In(x).Out(y);
    const Status s = r.Prepare();
    ASSERT_FALSE(s.ok()) << b.says;
    EXPECT_NE(s.message().find(b.says), std::string::npos) << s.message();
  }
}

TEST(PadKernel, Bf16MovesBitsAndRoundsTheValueOnce) {
  Tensor x({2, 3}, DType::BF16);
  auto* xb = reinterpret_cast<uint16_t*>(x.bytes());
  for (int i = 0; i < 6; ++i) xb[i] = FloatToBf16(0.1f * static_cast<float>(i + 1));
  Tensor y({2, 5}, DType::BF16);
  KernelRunner r(OpCode::Pad);
  PadOpts(r, {0, 0, 1, 1}, fb::PadMode::Constant, 0.3f).In(x).Out(y).PrepareAndRun();
  const auto* yb = reinterpret_cast<const uint16_t*>(y.bytes());
  const uint16_t v = FloatToBf16(0.3f);
  const std::vector<uint16_t> want = {v, xb[0], xb[1], xb[2], v, v, xb[3], xb[4], xb[5], v};
  EXPECT_EQ(std::vector<uint16_t>(yb, yb + 10), want);
}

}  // namespace
}  // namespace sinkrt::device
