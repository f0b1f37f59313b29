// MetricSum (sunk eval): sums[i] += f64(in[i]) * weights[i], step after
// step, bitwise what the host's per-batch double sums were; and its
// load-time checks.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "support/kernel_runner.h"
#include "support/test_util.h"

namespace sinkrt::device {
namespace {

using namespace ::sinkrt::testing;
using fb::OpCode;
using Tensor = KernelTensor;

double Sum(const Tensor& sums, int i) {
  double v;
  std::memcpy(&v, sums.bytes() + i * sizeof(double), sizeof v);
  return v;
}

TEST(MetricSumKernel, AddsEachStepLikeTheHostsDoubleSums) {
  Tensor loss(Shape{}), count(Shape{});
  Tensor sums(Shape{2}, DType::F64);
  std::memset(sums.bytes(), 0, 2 * sizeof(double));  // the executor zeroes it when a sink starts
  KernelRunner op(OpCode::MetricSum);
  op.In(loss).In(count).Out(sums).MetricWeights({100.0, 1.0});
  SINKRT_ASSERT_OK(op.Prepare());
  // Losses whose products by 100 round differently in float than in double:
  // the host multiplied in double, and so must the kernel.
  const float losses[] = {0.1f, 2.3456789f, 1e-3f, 0.7f, 3.14159f};
  const float counts[] = {37, 40, 12, 99, 0};
  double want_loss = 0, want_count = 0;
  for (int step = 0; step < 5; ++step) {
    loss[0] = losses[step];
    count[0] = counts[step];
    SINKRT_ASSERT_OK(op.Run());
    want_loss += static_cast<double>(losses[step]) * 100.0;  // as eval.cc did per batch
    want_count += static_cast<double>(counts[step]);
    EXPECT_EQ(Sum(sums, 0), want_loss) << "step " << step;
    EXPECT_EQ(Sum(sums, 1), want_count) << "step " << step;
  }
}

TEST(MetricSumKernel, PrepareNamesWhatIsWrong) {
  Tensor loss(Shape{}), count(Shape{}), vec(Shape{3});
  Tensor sums(Shape{2}, DType::F64), sums32(Shape{2}), one(Shape{1}, DType::F64);
  {
    KernelRunner op(OpCode::MetricSum);
    op.In(loss).In(count).Out(sums).MetricWeights({8.0});
    ExpectPrepareError(op, "MetricSum", {"1 weights for 2 inputs"});
  }
  {
    KernelRunner op(OpCode::MetricSum);
    op.In(loss).In(count).Out(sums);
    ExpectPrepareError(op, "MetricSum", {"options missing, expected MetricSumOptions"});
  }
  {
    KernelRunner op(OpCode::MetricSum);
    op.In(vec).In(count).Out(sums).MetricWeights({8.0, 1.0});
    ExpectPrepareError(op, "MetricSum", {"input 0 has shape [3], expected []"});
  }
  {
    KernelRunner op(OpCode::MetricSum);
    op.In(loss).In(count).Out(sums32).MetricWeights({8.0, 1.0});
    ExpectPrepareError(op, "MetricSum", {"output 0 has dtype f32, expected f64"});
  }
  {
    KernelRunner op(OpCode::MetricSum);
    op.In(loss).In(count).Out(one).MetricWeights({8.0, 1.0});
    ExpectPrepareError(op, "MetricSum", {"output 0 has shape [1], expected [2]"});
  }
}

}  // namespace
}  // namespace sinkrt::device
