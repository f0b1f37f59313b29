// One small f32 matrix product, y[M,N] = op(a)·op(b), written by hand for
// the sizes where a oneDNN primitive is slow: attention's [16,16]·[16,16]
// products reach only 10–14 GFLOP/s in oneDNN 2.6 on AVX2 (no brgemm there),
// this several times that (bench/batch_matmul_bench.cc).
//
// The micro-kernel keeps R ≤ 4 rows × W = 16 (or 8) columns of y in
// registers, broadcasting one element of op(a) and loading one row of
// op(b) per step of K. op(a) is read in place whichever its layout (one
// scalar at a time); op(b) is read in place when it is row-major and the
// panel of W columns is whole, and otherwise packed first, zero-padded, into
// a W×K tile on the stack. Each product is computed by one call on one
// thread in a fixed order, so the result does not depend on how a batch of
// them is split between threads. It does depend on the ISA clone (the
// v3/v4 clones fuse multiplies and adds), as oneDNN's does.
//
// Only AVX2 was measured. The x86-64-v4 clone keeps 8-lane (ymm) vectors;
// on an AVX-512 machine oneDNN also has its brgemm kernels, so the size
// below which batch_matmul.cc picks this kernel should be measured there
// again (bench/batch_matmul_bench.cc, BM_Crossover).
#pragma once

#include <cstdint>

namespace sinkrt::device {

// K above this does not fit the stack tile; callers use oneDNN instead.
inline constexpr int64_t kSmallGemmMaxK = 256;

struct SmallGemmDims {
  int64_t m = 0, n = 0, k = 0;  // y is [m, n]; k ≤ kSmallGemmMaxK (0: y = 0)
  bool ta = false;              // a is [k, m] (else [m, k]), row-major
  bool tb = false;              // b is [n, k] (else [k, n]), row-major
};

// y (row-major [m, n], overwritten) = op(a)·op(b). y must not overlap a or b.
void SmallGemm(const SmallGemmDims& d, const float* a, const float* b, float* y);

}  // namespace sinkrt::device
