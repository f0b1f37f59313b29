// Rules every kernel obeys: each OpCode has one, runs are bitwise
// deterministic, and run() never allocates (DESIGN §5). This binary replaces
// global operator new to count allocations, which is why these tests live
// apart from the per-family kernel tests.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <functional>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "support/kernel_runner.h"

//===--- Allocation counter ------------------------------------------------===//
// Replaces global operator new for this binary so a test can assert that
// run() of our kernels never allocates.

namespace {
std::atomic<bool> g_counting{false};
std::atomic<int64_t> g_allocations{0};
}  // namespace

void* operator new(size_t n) {
  if (g_counting.load(std::memory_order_relaxed)) g_allocations.fetch_add(1);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
// GCC cannot see that this operator new is malloc, and flags the pairing.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop

namespace sinkrt::device {
namespace {

using namespace ::sinkrt::testing;
using fb::OpCode;
using Tensor = KernelTensor;

//===--- Registry -----------------------------------------------------------===//

TEST(KernelRegistry, EveryOpCodeHasAKernel) {
  for (OpCode op : fb::EnumValuesOpCode()) {
    // The collectives and a pipeline's Send/Recv are tasks of their own,
    // GradAllReduce is an identity in the forward and AccumulateGrad an
    // in-place AddN: the compiler emits no kernel of their own for them.
    const bool collective = op == OpCode::AllReduce || op == OpCode::AllGather || op == OpCode::ReduceScatter ||
                            op == OpCode::AllToAll || op == OpCode::GradAllReduce || op == OpCode::Send ||
                            op == OpCode::Recv || op == OpCode::AccumulateGrad;
    if (op == OpCode::Invalid || collective) {
      EXPECT_EQ(FindKernel(op), nullptr) << fb::EnumNameOpCode(op);
      continue;
    }
    const KernelImpl* k = FindKernel(op);
    ASSERT_NE(k, nullptr) << fb::EnumNameOpCode(op);
    EXPECT_NE(k->prepare, nullptr);
    EXPECT_NE(k->run, nullptr);
  }
  EXPECT_EQ(FindKernel(static_cast<OpCode>(999)), nullptr);
}

//===--- Determinism and the run() rules ------------------------------------===//

// Builds each op twice over the same inputs and fresh outputs; the outputs
// of two runs must be bitwise equal.
TEST(KernelRules, RunsAreBitwiseDeterministic) {
  const Tensor a = RandomTensor({64, 300}, 141), b = RandomTensor({300, 70}, 142), bias = RandomTensor({70}, 143);
  const Tensor x = RandomTensor({4, 3, 12, 12}, 144), w = RandomTensor({8, 3, 3, 3}, 145);
  const ConvParams cp{2, 2, 1, 1, 1, 1, 1, 1};
  const Tensor dy = RandomTensor({4, 8, 6, 6}, 146);
  const Tensor big = RandomTensor({3000, 70}, 147);
  const Tensor labels = Labels(std::vector<int32_t>(64, 3));
  std::vector<std::function<void(Tensor*)>> runs = {
      [&](Tensor* y) {
        *y = Tensor({64, 70});
        KernelRunner(OpCode::MatMul).In(a).In(b).Out(*y).MatMulOpts(false, false).Bias(bias).Relu().PrepareAndRun();
      },
      [&](Tensor* y) {
        *y = Tensor({8, 3, 3, 3});
        KernelRunner(OpCode::Conv2DBackpropFilter).In(dy).In(x).Out(*y).Conv(cp).PrepareAndRun();
      },
      [&](Tensor* y) {
        *y = Tensor({70});
        KernelRunner(OpCode::BiasAddGrad).In(big).Out(*y).Axis(1).PrepareAndRun();
      },
      [&](Tensor* y) {
        *y = Tensor(Shape{});
        KernelRunner(OpCode::SparseSoftmaxCrossEntropy)
            .In(b.ref())
            .In(Labels(std::vector<int32_t>(300, 5)))
            .Out(*y)
            .PrepareAndRun();
      },
      [&](Tensor* y) {
        *y = Tensor({3000});
        KernelRunner(OpCode::ReduceMean).In(big).Out(*y).Axes({1}, false).PrepareAndRun();
      },
  };
  for (size_t i = 0; i < runs.size(); ++i) {
    Tensor y1, y2;
    runs[i](&y1);
    runs[i](&y2);
    ExpectBitwise(y2, y1.values(), "run " + std::to_string(i));
  }
  // And the same prepared op run twice.
  Tensor y({64, 70});
  KernelRunner op(OpCode::MatMul);
  op.In(a).In(b).Out(y).MatMulOpts(false, false);
  ASSERT_TRUE(op.Prepare().ok());
  ASSERT_TRUE(op.Run().ok());
  const std::vector<float> first = y.values();
  ASSERT_TRUE(op.Run().ok());
  ExpectBitwise(y, first, "MatMul rerun");
}

// Our kernels' run() must not touch the heap (DESIGN §5).
TEST(KernelRules, RunDoesNotAllocate) {
  const Tensor x = RandomTensor({8, 6, 5}, 151), b = RandomTensor({5}, 152), c = RandomTensor({6}, 153);
  const Tensor logits = RandomTensor({8, 10}, 154), labels = Labels({0, 1, 2, 3, 4, 5, 6, 7});
  Tensor y({8, 6, 5}), y2({8, 6, 5}), s(Shape{}), v6({6}), l({8, 10}), one(Shape{}), p({8, 6, 5}), m({8, 6, 5}),
      pw({2});
  one[0] = 1.0f;
  pw.set({0.9f, 0.999f});
  std::vector<std::unique_ptr<KernelRunner>> ops;
  auto add = [&](OpCode code) -> KernelRunner& { return *ops.emplace_back(std::make_unique<KernelRunner>(code)); };
  add(OpCode::Add).In(x).In(b).Out(y);
  add(OpCode::Mul).In(x).In(x).Out(y);
  add(OpCode::AddN).In(x).In(x).In(y).Out(y2);
  add(OpCode::Gelu).In(x).Out(y);
  add(OpCode::GeluGrad).In(y).In(x).Out(y2);
  add(OpCode::Softmax).In(x).Out(y).Axis(1);
  add(OpCode::LogSoftmaxGrad).In(x).In(y).Out(y2).Axis(2);
  add(OpCode::SparseSoftmaxCrossEntropy).In(logits).In(labels).Out(s);
  add(OpCode::SparseSoftmaxCrossEntropyGrad).In(logits).In(labels).In(one).Out(l);
  add(OpCode::ReduceSum).In(x).Out(v6).Axes({0, 2}, false);
  add(OpCode::SumToShape).In(x).Out(View(v6, {6, 1}));
  add(OpCode::BroadcastTo).In(View(c, {6, 1})).Out(y).Scale(2.0f);
  add(OpCode::BiasAdd).In(x).In(c).Out(y).Axis(1);
  add(OpCode::BiasAddGrad).In(x).Out(v6).Axis(1);
  add(OpCode::Copy).In(x).Out(y);
  add(OpCode::Fill).Out(y).FillValue(2.0f);
  add(OpCode::ArgMaxAccuracy).In(logits).In(labels).Out(s);
  add(OpCode::SgdUpdate).In(p).In(x).Sgd(0.1f, 0.0f);
  add(OpCode::MomentumUpdate).In(p).In(x).In(m).Momentum(0.1f, 0.9f, true, 0.0f);
  add(OpCode::AdamPowers).In(pw).Adam(0.1f, 0.9f, 0.999f, 1e-8f, 0.0f);
  add(OpCode::AdamUpdate).In(p).In(x).In(m).In(y2).In(pw).Adam(0.1f, 0.9f, 0.999f, 1e-8f, 0.0f);
  Tensor tiled({5, 8, 6}), rows({6, 8, 5}), joined({8, 12, 5}), left({8, 6, 2}), right({8, 6, 3});
  add(OpCode::Transpose).In(x).Out(tiled).Perm({2, 0, 1});
  add(OpCode::Transpose).In(x).Out(rows).Perm({1, 0, 2});
  add(OpCode::Concat).In(x).In(y).Out(joined).Axis(1);
  add(OpCode::Split).In(x).Out(left).Out(right).SplitOpts(2, {2, 3});
  Tensor step(Shape{}, DType::I64);
  std::fill_n(step.bytes(), sizeof(int64_t), uint8_t{0});
  add(OpCode::Dropout).In(x).In(step).Out(y).DropoutOpts(0.3f, 1, 2, {16, 6, 5}, {1, 0, 0}, 2);
  add(OpCode::DropoutGrad).In(y).In(step).Out(y2).DropoutOpts(0.3f, 1, 2);
  add(OpCode::DropoutStep).In(step);
  // BatchNorm over channel axis 1 of x [8, 6, 5]: training (moving
  // statistics in place), eval, the gradient and SyncBatchNorm's sums.
  Tensor bn_mean({6}), bn_rstd({6}), bn_mm({6}), bn_mv({6}), bn_dg({6}), bn_db({6}), sums({2, 6});
  bn_mv.set({1, 1, 1, 1, 1, 1});
  add(OpCode::BatchNorm)
      .In(x)
      .In(c)
      .In(c)
      .In(bn_mm)
      .In(bn_mv)
      .Out(y)
      .Out(bn_mean)
      .Out(bn_rstd)
      .BatchNormOpts(1e-5f, 0.9f);
  add(OpCode::BatchNormInfer).In(x).In(c).In(c).In(bn_mm).In(bn_mv).Out(y2).BatchNormOpts(1e-5f, 0.9f);
  add(OpCode::BatchNormStats).In(x).In(bn_mm).Out(sums).BatchNormOpts(1e-5f, 0.9f);
  add(OpCode::BatchNormGradStats).In(y).In(x).In(bn_mean).In(bn_rstd).Out(sums).BatchNormOpts(1e-5f, 0.9f);
  add(OpCode::BatchNormGrad)
      .In(y)
      .In(x)
      .In(c)
      .In(bn_mean)
      .In(bn_rstd)
      .Out(y2)
      .Out(bn_dg)
      .Out(bn_db)
      .BatchNormOpts(1e-5f, 0.9f);
  // OneHot, and Pad with PadGrad in a mirror mode (which sums on the stack).
  Tensor hot({8, 10}), padded({8, 9, 7});
  auto opts = [](KernelRunner& r, fb::PadMode mode) -> KernelRunner& {
    std::vector<int64_t> paddings = {0, 0, 2, 1, 1, 1};
    return r.Options(fb::OpOptions::PadOptions, fb::CreatePadOptionsDirect(r.fbb(), &paddings, mode, 0.5f).Union());
  };
  KernelRunner& one_hot = add(OpCode::OneHot).In(labels).Out(hot);
  one_hot.Options(fb::OpOptions::OneHotOptions, fb::CreateOneHotOptions(one_hot.fbb(), 10, 1.0f, 0.0f, -1).Union());
  opts(add(OpCode::Pad).In(x).Out(padded), fb::PadMode::Constant);
  opts(add(OpCode::Pad).In(x).Out(padded), fb::PadMode::Symmetric);
  opts(add(OpCode::PadGrad).In(padded).Out(y), fb::PadMode::Reflect);
  opts(add(OpCode::PadGrad).In(padded).Out(y2), fb::PadMode::Constant);
  for (auto& op : ops) ASSERT_TRUE(op->Prepare().ok());
  // The counter itself works (this binary's operator new is the counting one).
  g_allocations = 0;
  g_counting = true;
  int* volatile probe = new int(1);  // volatile: the pair cannot be elided
  delete probe;
  g_counting = false;
  ASSERT_EQ(g_allocations.load(), 1);
  g_allocations = 0;
  g_counting = true;
  for (int rep = 0; rep < 3; ++rep) {
    for (auto& op : ops) ASSERT_TRUE(op->Run().ok());
  }
  g_counting = false;
  EXPECT_EQ(g_allocations.load(), 0);
}

// The bf16 paths (mixed precision) stage through the kernel scratch and
// allocate nothing either.
TEST(KernelRules, Bf16RunDoesNotAllocate) {
  const Shape s3{8, 6, 5};
  Tensor x(s3, DType::BF16), y(s3, DType::BF16), y2(s3, DType::BF16), b({5}, DType::BF16), c({6}, DType::BF16),
      v6({6}, DType::BF16), joined({8, 12, 5}, DType::BF16), left({8, 6, 2}, DType::BF16),
      right({8, 6, 3}, DType::BF16), gamma({5}, DType::BF16), dg({5}, DType::BF16), db({5}, DType::BF16);
  Tensor mean({48}), rstd({48});
  std::vector<std::unique_ptr<KernelRunner>> ops;
  auto add = [&](OpCode code) -> KernelRunner& { return *ops.emplace_back(std::make_unique<KernelRunner>(code)); };
  add(OpCode::Add).In(x).In(b).Out(y);
  add(OpCode::AddN).In(x).In(x).In(y).Out(y2);
  add(OpCode::Relu).In(x).Out(x);
  add(OpCode::Gelu).In(x).Out(y);
  add(OpCode::GeluGrad).In(y).In(x).Out(y2);
  add(OpCode::TanhGrad).In(y).In(x).Out(y2);
  add(OpCode::Softmax).In(x).Out(y).Axis(1);
  add(OpCode::LogSoftmax).In(x).Out(y).Axis(2);
  add(OpCode::SoftmaxGrad).In(x).In(y).Out(y2).Axis(2);
  add(OpCode::LogSoftmaxGrad).In(x).In(y).Out(y2).Axis(1);
  add(OpCode::ReduceMean).In(x).Out(v6).Axes({0, 2}, false);
  add(OpCode::SumToShape).In(x).Out(View(v6, {6, 1}));
  add(OpCode::BroadcastTo).In(View(c, {6, 1})).Out(y).Scale(2.0f);
  add(OpCode::BiasAdd).In(x).In(c).Out(y).Axis(1);
  add(OpCode::BiasAddGrad).In(x).Out(v6).Axis(1);
  add(OpCode::Fill).Out(y).FillValue(2.0f);
  add(OpCode::Concat).In(x).In(y).Out(joined).Axis(1);
  add(OpCode::Split).In(x).Out(left).Out(right).SplitOpts(2, {2, 3});
  add(OpCode::LayerNorm).In(x).In(gamma).In(gamma).Out(y).Out(mean).Out(rstd).LayerNormEpsilon(1e-5f);
  add(OpCode::LayerNormGrad).In(x).In(y).In(gamma).In(mean).In(rstd).Out(y2).Out(dg).Out(db).LayerNormEpsilon(1e-5f);
  for (auto& op : ops) ASSERT_TRUE(op->Prepare().ok());
  g_allocations = 0;
  g_counting = true;
  for (int rep = 0; rep < 3; ++rep) {
    for (auto& op : ops) ASSERT_TRUE(op->Run().ok());
  }
  g_counting = false;
  EXPECT_EQ(g_allocations.load(), 0);
}

}  // namespace
}  // namespace sinkrt::device
