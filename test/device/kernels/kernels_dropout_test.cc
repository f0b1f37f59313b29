// Dropout, DropoutGrad and DropoutStep (device/src/kernels/dropout.cc):
// against a float64 reference whose mask comes from the mask's definition
// (dropout_mask.h, itself checked against Philox's known answers), blocks
// of a global tensor against the whole tensor's slices (bitwise), bf16
// against the f32 kernel rounded, the step read at run time, and the
// prepare-time refusals.
#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <vector>

#include "device/src/random/dropout_mask.h"
#include "runtime/src/bf16.h"
#include "support/kernel_runner.h"
#include "support/reference_ops.h"

namespace sinkrt::device {
namespace {

using namespace ::sinkrt::testing;
using fb::OpCode;
using Tensor = KernelTensor;

Tensor Step(int64_t v) {
  Tensor t({}, DType::I64);
  std::memcpy(t.bytes(), &v, sizeof v);
  return t;
}

int64_t StepValue(const Tensor& t) {
  int64_t v;
  std::memcpy(&v, t.bytes(), sizeof v);
  return v;
}

// y = x · mask / (1 − p) in float64, the mask at each element's row-major
// index (the tensor is the whole).
RefTensor RefDropout(const RefTensor& x, float p, const DropoutKey& key) {
  RefTensor y = x;
  const uint32_t t = DropoutThreshold(p);
  for (size_t i = 0; i < y.data.size(); ++i)
    y.data[i] = DropoutKeeps(key, t, i) ? x.data[i] / (1.0 - static_cast<double>(p)) : 0.0;
  return y;
}

TEST(DropoutKernel, ForwardMatchesFloat64Reference) {
  for (const Shape& s : {Shape{17}, Shape{3, 5, 7}, Shape{64, 129}}) {
    for (float p : {0.1f, 0.5f}) {
      const Tensor x = RandomTensor(s, 11);
      Tensor y(s);
      const Tensor step = Step(5);
      KernelRunner(OpCode::Dropout).In(x).In(step).Out(y).DropoutOpts(p, 9, 77).PrepareAndRun();
      // x · f32(1 / (1 − p)), rounded: within 2 ulp of the exact value.
      ExpectClose(y, RefDropout(ToRef(x), p, {.seed = 9, .step = 5, .op_id = 77}), 2.5e-7, 0, "Dropout");
    }
  }
}

TEST(DropoutKernel, GradRedrawsTheForwardMask) {
  const Tensor dy = RandomTensor({8, 33}, 12);
  Tensor y({8, 33}), dx({8, 33});
  const Tensor step = Step(2);
  KernelRunner(OpCode::Dropout).In(dy).In(step).Out(y).DropoutOpts(0.3f, 4, 5).PrepareAndRun();
  KernelRunner(OpCode::DropoutGrad).In(dy).In(step).Out(dx).DropoutOpts(0.3f, 4, 5).PrepareAndRun();
  EXPECT_EQ(y.values(), dx.values());
}

// The block of a [6, 8, 10] tensor that starts at `offset` (its rows
// `stride` apart), taken from the whole tensor's output, against the kernel
// run on the block alone.
void ExpectBlockIsSlice(const Shape& block, const std::vector<int64_t>& offset, int64_t stride = 1) {
  const Shape whole = {6, 8, 10};
  const Tensor x = RandomTensor(whole, 13);
  Tensor y(whole);
  const Tensor step = Step(41);
  KernelRunner(OpCode::Dropout).In(x).In(step).Out(y).DropoutOpts(0.4f, 3, 8).PrepareAndRun();
  Tensor xb(block), yb(block);
  for (int64_t i = 0; i < block[0]; ++i)
    for (int64_t j = 0; j < block[1]; ++j)
      for (int64_t k = 0; k < block[2]; ++k)
        xb[(i * block[1] + j) * block[2] + k] = x[((i * stride + offset[0]) * 8 + j + offset[1]) * 10 + k + offset[2]];
  KernelRunner(OpCode::Dropout).In(xb).In(step).Out(yb).DropoutOpts(0.4f, 3, 8, whole, offset, stride).PrepareAndRun();
  for (int64_t i = 0; i < block[0]; ++i)
    for (int64_t j = 0; j < block[1]; ++j)
      for (int64_t k = 0; k < block[2]; ++k) {
        const float want = y[((i * stride + offset[0]) * 8 + j + offset[1]) * 10 + k + offset[2]];
        const float got = yb[(i * block[1] + j) * block[2] + k];
        ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want))
            << ShapeToString(block) << " at " << offset[0] << "," << offset[1] << "," << offset[2] << ": element " << i
            << "," << j << "," << k;
      }
}

TEST(DropoutKernel, BlocksDrawTheWholeTensorsMask) {
  ExpectBlockIsSlice({3, 8, 10}, {3, 0, 0});     // a block of rows
  ExpectBlockIsSlice({3, 8, 10}, {1, 0, 0}, 2);  // data parallel: rank 1 of 2, rows 1, 3, 5
  ExpectBlockIsSlice({2, 8, 10}, {2, 0, 0}, 3);  // rank 2 of 3
  ExpectBlockIsSlice({3, 4, 10}, {0, 4, 0}, 2);  // interleaved rows of a split dim
  ExpectBlockIsSlice({6, 4, 10}, {0, 4, 0});     // a split middle dim
  ExpectBlockIsSlice({6, 8, 5}, {0, 0, 5});      // a split last dim
  ExpectBlockIsSlice({2, 2, 3}, {4, 6, 7});      // every dim split
}

// A data-parallel rank's [B·T, D] tensor (T = 2 rows per sample): rank r
// of 2 holds samples r, r + 2, ..., each with its T rows, placed as
// [B, T, D] (global_shape with one more dim).
TEST(DropoutKernel, SamplesOfSeveralRowsInterleaveWhole) {
  const Tensor x = RandomTensor({12, 10}, 17);  // 6 samples of 2 rows
  Tensor y({12, 10});
  const Tensor step = Step(3);
  KernelRunner(OpCode::Dropout).In(x).In(step).Out(y).DropoutOpts(0.5f, 2, 9).PrepareAndRun();
  for (int64_t r = 0; r < 2; ++r) {
    Tensor xb({6, 10}), yb({6, 10});
    auto global_row = [&](int64_t j) { return ((j / 2) * 2 + r) * 2 + j % 2; };
    for (int64_t j = 0; j < 6; ++j)
      for (int64_t k = 0; k < 10; ++k) xb[j * 10 + k] = x[global_row(j) * 10 + k];
    KernelRunner(OpCode::Dropout)
        .In(xb)
        .In(step)
        .Out(yb)
        .DropoutOpts(0.5f, 2, 9, {6, 2, 10}, {r, 0, 0}, 2)
        .PrepareAndRun();
    for (int64_t j = 0; j < 6; ++j)
      for (int64_t k = 0; k < 10; ++k)
        ASSERT_EQ(std::bit_cast<uint32_t>(yb[j * 10 + k]), std::bit_cast<uint32_t>(y[global_row(j) * 10 + k]))
            << "rank " << r << " row " << j << " column " << k;
  }
}

TEST(DropoutKernel, ReadsTheStepAtEachRun) {
  const Tensor x = RandomTensor({4, 64}, 14);
  Tensor y({4, 64});
  Tensor step = Step(0);
  KernelRunner run(OpCode::Dropout);
  run.In(x).In(step).Out(y).DropoutOpts(0.5f, 1, 2);
  ASSERT_TRUE(run.Prepare().ok());
  ASSERT_TRUE(run.Run().ok());
  const std::vector<float> first = y.values();
  const int64_t next = 1;
  std::memcpy(step.bytes(), &next, sizeof next);
  ASSERT_TRUE(run.Run().ok());
  EXPECT_NE(y.values(), first);
  EXPECT_EQ(y.values().size(), first.size());
  // Each equals a fresh kernel at its step.
  ExpectClose(y, RefDropout(ToRef(x), 0.5f, {.seed = 1, .step = 1, .op_id = 2}), 2.5e-7, 0, "step 1");
}

TEST(DropoutKernel, Bf16IsTheF32ResultRounded) {
  Tensor x = RandomTensor({5, 40}, 15);
  for (int64_t i = 0; i < x.numel(); ++i) x[i] = Bf16ToFloat(FloatToBf16(x[i]));
  Tensor xh(x.shape(), DType::BF16), yh(x.shape(), DType::BF16), y(x.shape());
  auto* bits = reinterpret_cast<uint16_t*>(xh.bytes());
  for (int64_t i = 0; i < x.numel(); ++i) bits[i] = FloatToBf16(x[i]);
  const Tensor step = Step(7);
  KernelRunner(OpCode::Dropout).In(x).In(step).Out(y).DropoutOpts(0.2f, 5, 6).PrepareAndRun();
  KernelRunner(OpCode::Dropout).In(xh).In(step).Out(yh).DropoutOpts(0.2f, 5, 6).PrepareAndRun();
  const auto* got = reinterpret_cast<const uint16_t*>(yh.bytes());
  for (int64_t i = 0; i < x.numel(); ++i) ASSERT_EQ(got[i], FloatToBf16(y[i])) << "element " << i;
}

TEST(DropoutKernel, StepAdvancesByOne) {
  Tensor step = Step(41);
  KernelRunner(OpCode::DropoutStep).In(step).PrepareAndRun();
  EXPECT_EQ(StepValue(step), 42);
}

TEST(DropoutKernel, PrepareRefusesBadOptionsAndOperands) {
  const Tensor x = RandomTensor({4, 6}, 16);
  Tensor y({4, 6});
  const Tensor step = Step(0);
  {
    KernelRunner run(OpCode::Dropout);
    run.In(x).In(step).Out(y).DropoutOpts(1.0f, 0, 0);
    ExpectPrepareError(run, "Dropout", {"p is 1", "expected [0, 1)"});
  }
  {
    const Tensor f32_step({}, DType::F32);
    KernelRunner run(OpCode::Dropout);
    run.In(x).In(f32_step).Out(y).DropoutOpts(0.5f, 0, 0);
    ExpectPrepareError(run, "Dropout", {"input 1"});
  }
  {
    KernelRunner run(OpCode::Dropout);
    run.In(x).In(step).Out(y).DropoutOpts(0.5f, 0, 0, {8, 6}, {5, 0});
    ExpectPrepareError(run, "Dropout", {"outside global_shape [8,6]"});
  }
  {
    KernelRunner run(OpCode::Dropout);
    run.In(x).In(step).Out(y).DropoutOpts(0.5f, 0, 0, {8, 6, 1, 1}, {0, 0, 0, 0});
    ExpectPrepareError(run, "Dropout", {"one entry per dim"});
  }
  {
    KernelRunner run(OpCode::Dropout);  // [4, 6] as samples of 5 rows
    run.In(x).In(step).Out(y).DropoutOpts(0.5f, 0, 0, {8, 5, 6}, {0, 0, 0});
    ExpectPrepareError(run, "Dropout", {"global_shape[1] 5 (rows per sample) does not divide dim 0 of [4,6]"});
  }
  {
    KernelRunner run(OpCode::Dropout);
    run.In(x).In(step).Out(y).DropoutOpts(0.5f, 0, 0, {8, 6}, {1, 0}, 2);  // rows 1, 3, 5, 7: in
    EXPECT_TRUE(run.Prepare().ok());
    KernelRunner out(OpCode::Dropout);
    out.In(x).In(step).Out(y).DropoutOpts(0.5f, 0, 0, {8, 6}, {2, 0}, 2);  // rows 2 .. 8: out
    ExpectPrepareError(out, "Dropout", {"row_stride 2 lies outside global_shape [8,6]"});
  }
}

}  // namespace
}  // namespace sinkrt::device
