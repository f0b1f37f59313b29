// Float64 references for BatchMatMul, Transpose, Concat and Split, in the
// same spirit as reference_ops.h: naive loops over multi-indices, no code
// shared with the kernels or the builders, misuse throws
// std::invalid_argument. Semantics follow docs/reference/ops.md.
#pragma once

#include <vector>

#include "support/reference_ops.h"

namespace sinkrt::testing {

// op(a)[..., M, K] · op(b)[..., K, N], batch dims broadcast (NumPy rules).
RefTensor RefBatchMatMul(const RefTensor& a, const RefTensor& b, bool transpose_a, bool transpose_b);
// y dim i = x dim perm[i] (entries may be negative).
RefTensor RefTranspose(const RefTensor& x, const std::vector<int>& perm);
// Joins xs along `axis` (may be negative).
RefTensor RefConcat(const std::vector<RefTensor>& xs, int axis);
// Cuts x along `axis` into pieces of `sizes`.
std::vector<RefTensor> RefSplit(const RefTensor& x, int axis, const std::vector<int64_t>& sizes);

}  // namespace sinkrt::testing
