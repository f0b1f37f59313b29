// BatchMatMul (broadcast batch dims, transposes), Transpose, Concat and
// Split kernels against the float64 references, and their load-time checks.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "support/kernel_runner.h"
#include "support/reference_layout_ops.h"

namespace sinkrt::device {
namespace {

using namespace ::sinkrt::testing;
using fb::OpCode;
using Tensor = KernelTensor;

std::string Ints(const std::vector<int>& v) {
  std::string s;
  for (int x : v) s += std::to_string(x) + ",";
  return s;
}

//===--- BatchMatMul --------------------------------------------------------===//

struct BmmCase {
  Shape batch_a, batch_b;  // leading dims of each side
  int64_t m, k, n;
};

void CheckBatchMatMul(const BmmCase& c, int t) {
  const bool ta = t & 1, tb = t & 2;
  Shape sa = c.batch_a, sb = c.batch_b;
  sa.push_back(ta ? c.k : c.m);
  sa.push_back(ta ? c.m : c.k);
  sb.push_back(tb ? c.n : c.k);
  sb.push_back(tb ? c.k : c.n);
  const Tensor a = RandomTensor(sa, 201), b = RandomTensor(sb, 202);
  const RefTensor want = RefBatchMatMul(ToRef(a), ToRef(b), ta, tb);
  Tensor y(want.shape);
  KernelRunner(OpCode::BatchMatMul).In(a).In(b).Out(y).MatMulOpts(ta, tb).PrepareAndRun();
  ExpectClose(y, want, 1e-4, 1e-5,
              "BatchMatMul " + ShapeToString(sa) + " x " + ShapeToString(sb) + " t" + std::to_string(t));
}

TEST(BatchMatMulKernel, BroadcastAndTransposesMatchReference) {
  const BmmCase cases[] = {
      {{}, {}, 3, 4, 5},                // plain 2-D
      {{2}, {2}, 1, 1, 1},              // ones everywhere
      {{8, 4}, {8, 4}, 16, 16, 16},     // attention: batch x heads of [16,16]
      {{2, 3}, {3}, 5, 7, 4},           // b's batch broadcast, ranks differ
      {{3}, {}, 6, 5, 2},               // b a plain matrix (a Linear over a batch)
      {{}, {2, 2}, 4, 3, 5},            // a a plain matrix
      {{2, 1, 3}, {1, 4, 1}, 3, 9, 2},  // size-1 dims broadcast on both sides
      {{5}, {5}, 33, 17, 19},           // vector tails
  };
  for (const BmmCase& c : cases)
    for (int t = 0; t < 4; ++t) CheckBatchMatMul(c, t);
}

// The hand kernel (small_gemm.h: 4-row × 16- or 8-column tiles) at every
// kind of tail, and shapes on both sides of batch_matmul.cc's choice
// between it and oneDNN (M·N·K ≤ kSmallProductWork and K ≤ kSmallGemmMaxK).
TEST(BatchMatMulKernel, HandKernelTailsAndTheOneDnnSide) {
  const BmmCase cases[] = {
      {{4}, {4}, 17, 5, 3},        // row tail of 1, one 8-column panel of 3
      {{3}, {3}, 5, 17, 1},        // one column
      {{2}, {1}, 1, 3, 17},        // one row; 16 + 1 columns
      {{2}, {2}, 17, 17, 17},      // all tails
      {{3}, {3}, 6, 7, 12},        // a 16-column panel of 12
      {{2}, {2}, 5, 9, 24},        // 16 + a whole 8-column panel
      {{2, 2}, {2}, 3, 1, 33},     // K = 1
      {{3, 1}, {1, 2}, 7, 3, 16},  // broadcast on both sides
      {{2}, {}, 13, 16, 16},       // b shared by every product
      {{1}, {1}, 2, 256, 9},       // K at kSmallGemmMaxK
      {{2}, {2}, 3, 300, 5},       // K above it: oneDNN
      {{2}, {2}, 48, 48, 48},      // work at kSmallProductWork: hand
      {{2}, {1}, 49, 48, 48},      // above it: oneDNN
      {{2}, {2}, 64, 8, 64},       // wide, short K: hand
  };
  for (const BmmCase& c : cases)
    for (int t = 0; t < 4; ++t) CheckBatchMatMul(c, t);
}

// Enough products to be shared among the OpenMP team: each is still computed
// by one thread, so any team size gives the same bits. b is broadcast over
// the first batch dim, so each share starts mid-way through its index.
TEST(BatchMatMulKernel, SameBitsForAnyThreadCount) {
  const Tensor a = RandomTensor({256, 4, 16, 16}, 203), b = RandomTensor({4, 16, 16}, 204);
  const int team = omp_get_max_threads();
  for (int t = 0; t < 4; ++t) {
    const bool ta = t & 1, tb = t & 2;
    std::vector<float> first;
    for (int threads : {1, 2, 3}) {
      omp_set_num_threads(threads);
      Tensor y({256, 4, 16, 16});
      KernelRunner(OpCode::BatchMatMul).In(a).In(b).Out(y).MatMulOpts(ta, tb).PrepareAndRun();
      if (first.empty()) {
        first = y.values();
        ExpectClose(y, RefBatchMatMul(ToRef(a), ToRef(b), ta, tb), 1e-4, 1e-5, "BatchMatMul 1 thread");
      } else {
        ExpectBitwise(y, first,
                      "BatchMatMul t" + std::to_string(t) + " on " + std::to_string(threads) + " threads against 1");
      }
    }
  }
  omp_set_num_threads(team);
}

TEST(BatchMatMulKernel, PrepareNamesTheMismatch) {
  const Tensor a({4, 3, 5}), b({4, 6, 2}), b_ok({4, 5, 2}), b3({3, 5, 2});
  Tensor y({4, 3, 2}), y_bad({4, 3, 3});
  KernelRunner k(OpCode::BatchMatMul);
  k.In(a).In(b).Out(y).MatMulOpts(false, false);
  ExpectPrepareError(k, "BatchMatMul", {"input 1 has shape [4,6,2], expected K=5"});
  KernelRunner batch(OpCode::BatchMatMul);
  batch.In(a).In(b3).Out(y).MatMulOpts(false, false);
  ExpectPrepareError(batch, "BatchMatMul", {"do not broadcast (4 vs 3 at batch dim 0)"});
  KernelRunner out(OpCode::BatchMatMul);
  out.In(a).In(b_ok).Out(y_bad).MatMulOpts(false, false);
  ExpectPrepareError(out, "BatchMatMul", {"output 0 has shape [4,3,3], expected [4,3,2]"});
  const Tensor v({5});
  KernelRunner rank(OpCode::BatchMatMul);
  rank.In(v).In(b_ok).Out(y).MatMulOpts(false, false);
  ExpectPrepareError(rank, "BatchMatMul", {"input 0 has shape [5], expected rank >= 2"});
  KernelRunner no_opts(OpCode::BatchMatMul);
  no_opts.In(a).In(b_ok).Out(y);
  ExpectPrepareError(no_opts, "BatchMatMul", {"expected MatMulOptions"});
}

//===--- Transpose ----------------------------------------------------------===//

void CheckTranspose(const Shape& shape, std::vector<int> perm, uint32_t seed) {
  const Tensor x = RandomTensor(shape, seed);
  const RefTensor want = RefTranspose(ToRef(x), perm);
  Tensor y(want.shape);
  KernelRunner(OpCode::Transpose).In(x).Out(y).Perm({perm.begin(), perm.end()}).PrepareAndRun();
  ExpectBitwise(y, want, "Transpose " + ShapeToString(shape) + " perm " + Ints(perm));
}

TEST(TransposeKernel, EveryPermutationUpToRank4) {
  const Shape shapes[] = {{}, {5}, {3, 7}, {2, 3, 4}, {2, 1, 3, 5}, {3, 20, 1, 18}};
  for (const Shape& s : shapes) {
    std::vector<int> perm(s.size());
    std::iota(perm.begin(), perm.end(), 0);
    do CheckTranspose(s, perm, 211);
    while (std::next_permutation(perm.begin(), perm.end()));
  }
}

TEST(TransposeKernel, TilesRunsAndHighRanks) {
  CheckTranspose({37, 53}, {1, 0}, 212);                  // 2-D, ragged tiles
  CheckTranspose({3, 40, 33}, {0, 2, 1}, 213);            // batched last-two swap
  CheckTranspose({2, 4, 7, 4, 7}, {0, 1, 3, 2, 4}, 214);  // ViT patchify, rows of 7
  CheckTranspose({4, 16, 4, 16}, {0, 2, 1, 3}, 215);      // [B,T,H,D] -> [B,H,T,D]
  CheckTranspose({2, 3, 2, 5, 2, 3}, {5, 3, 1, 4, 0, 2}, 216);
  CheckTranspose({2, 3, 1, 5, 2, 3}, {1, 0, 2, 3, 5, 4}, 217);
  CheckTranspose({17, 2, 19}, {2, 1, 0}, 218);
  CheckTranspose({64, 16, 49}, {0, 2, 1}, 219);  // more than one tile each way
}

TEST(TransposeKernel, PrepareNamesTheMismatch) {
  const Tensor x({2, 3, 4});
  Tensor y({4, 2, 3}), y_bad({2, 4, 3});
  KernelRunner len(OpCode::Transpose);
  len.In(x).Out(y).Perm({1, 0});
  ExpectPrepareError(len, "Transpose", {"perm [1,0] has 2 entries, input 0 [2,3,4] has rank 3"});
  KernelRunner dup(OpCode::Transpose);
  dup.In(x).Out(y).Perm({2, 0, 0});
  ExpectPrepareError(dup, "Transpose", {"perm [2,0,0] is not a permutation of [0, 3)"});
  KernelRunner range(OpCode::Transpose);
  range.In(x).Out(y).Perm({3, 0, 1});
  ExpectPrepareError(range, "Transpose", {"perm [3,0,1] is not a permutation"});
  KernelRunner out(OpCode::Transpose);
  out.In(x).Out(y_bad).Perm({2, 0, 1});
  ExpectPrepareError(out, "Transpose", {"output 0 has shape [2,4,3], expected [4,2,3]"});
  const Tensor x7({1, 1, 1, 1, 1, 1, 2});
  Tensor y7({1, 1, 1, 1, 1, 1, 2});
  KernelRunner rank(OpCode::Transpose);
  rank.In(x7).Out(y7).Perm({0, 1, 2, 3, 4, 5, 6});
  ExpectPrepareError(rank, "Transpose", {"at most rank 6"});
}

//===--- Concat and Split ---------------------------------------------------===//

TEST(ConcatSplitKernels, EveryAxisMatchesReference) {
  const Shape base = {3, 4, 5};
  for (int axis = 0; axis < 3; ++axis) {
    std::vector<Tensor> xs;
    std::vector<RefTensor> refs;
    std::vector<int64_t> sizes = {1, 3, 2};
    KernelRunner concat(OpCode::Concat);
    for (size_t i = 0; i < sizes.size(); ++i) {
      Shape s = base;
      s[axis] = sizes[i];
      xs.push_back(RandomTensor(s, 220 + static_cast<uint32_t>(i)));
    }
    for (const Tensor& x : xs) {
      concat.In(x);
      refs.push_back(ToRef(x));
    }
    const RefTensor want = RefConcat(refs, axis);
    Tensor y(want.shape);
    concat.Out(y).Axis(axis).PrepareAndRun();
    ExpectBitwise(y, want, "Concat axis " + std::to_string(axis));

    // Split undoes it.
    std::vector<Tensor> parts;
    KernelRunner split(OpCode::Split);
    split.In(y);
    for (const Tensor& x : xs) parts.emplace_back(x.shape());
    for (const Tensor& p : parts) split.Out(p);
    split.SplitOpts(axis, sizes).PrepareAndRun();
    const std::vector<RefTensor> pieces = RefSplit(ToRef(y), axis, sizes);
    for (size_t i = 0; i < parts.size(); ++i) {
      ExpectBitwise(parts[i], pieces[i], "Split axis " + std::to_string(axis) + " piece " + std::to_string(i));
      ExpectBitwise(parts[i], xs[i].values(), "Split round trip piece " + std::to_string(i));
    }
  }
}

TEST(ConcatSplitKernels, OneInputAndTheSameInputTwice) {
  const Tensor x = RandomTensor({2, 3}, 230);
  Tensor y1({2, 3}), y2({2, 6});
  KernelRunner(OpCode::Concat).In(x).Out(y1).Axis(0).PrepareAndRun();
  ExpectBitwise(y1, x.values(), "Concat of one input");
  KernelRunner(OpCode::Concat).In(x).In(x).Out(y2).Axis(1).PrepareAndRun();
  ExpectBitwise(y2, RefConcat({ToRef(x), ToRef(x)}, 1), "Concat(x, x)");
}

TEST(ConcatSplitKernels, PrepareNamesTheMismatch) {
  const Tensor a({2, 3}), b({3, 3}), c({2, 4});
  Tensor y({2, 7}), y_short({2, 6});
  KernelRunner dims(OpCode::Concat);
  dims.In(a).In(b).Out(y).Axis(1);
  ExpectPrepareError(dims, "Concat", {"input 1 has shape [3,3], expected [2,3]"});
  KernelRunner sum(OpCode::Concat);
  sum.In(a).In(c).Out(y_short).Axis(1);
  ExpectPrepareError(sum, "Concat", {"the inputs add up to 7 along axis 1, output 0 [2,6] has 6"});
  KernelRunner axis(OpCode::Concat);
  axis.In(a).In(c).Out(y).Axis(2);
  ExpectPrepareError(axis, "Concat", {"axis 2 is out of range [0, 2)"});

  const Tensor x({2, 7});
  Tensor p3({2, 3}), p4({2, 4}), p5({2, 5});
  KernelRunner sizes(OpCode::Split);
  sizes.In(x).Out(p3).Out(p5).SplitOpts(1, {3, 5});
  ExpectPrepareError(sizes, "Split", {"the outputs add up to 8 along axis 1, input 0 [2,7] has 7"});
  KernelRunner out(OpCode::Split);
  out.In(x).Out(p3).Out(p5).SplitOpts(1, {3, 4});
  ExpectPrepareError(out, "Split", {"output 1 has shape [2,5], expected 4 along axis 1 (sizes[1])"});
  KernelRunner count(OpCode::Split);
  count.In(x).Out(p3).SplitOpts(1, {3, 4});
  ExpectPrepareError(count, "Split", {"takes 1 inputs and 2 outputs, got 1 and 1"});
}

}  // namespace
}  // namespace sinkrt::device
