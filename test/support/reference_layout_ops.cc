#include "support/reference_layout_ops.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace sinkrt::testing {
namespace {

[[noreturn]] void Fail(const std::string& what) { throw std::invalid_argument("reference op: " + what); }

int Axis(int axis, size_t rank) {
  const int r = static_cast<int>(rank);
  const int a = axis < 0 ? axis + r : axis;
  if (a < 0 || a >= r) Fail("axis " + std::to_string(axis) + " out of range for rank " + std::to_string(r));
  return a;
}

// The multi-index of flat element `i` of `shape`.
std::vector<int64_t> Index(int64_t i, const Shape& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = i % shape[d];
    i /= shape[d];
  }
  return idx;
}

// The flat position of multi-index `idx` in `shape`.
int64_t Flat(const std::vector<int64_t>& idx, const Shape& shape) {
  int64_t f = 0;
  for (size_t d = 0; d < shape.size(); ++d) f = f * shape[d] + idx[d];
  return f;
}

}  // namespace

RefTensor RefBatchMatMul(const RefTensor& a, const RefTensor& b, bool transpose_a, bool transpose_b) {
  const size_t ra = a.shape.size(), rb = b.shape.size();
  if (ra < 2 || rb < 2) Fail("BatchMatMul needs rank >= 2 on both sides");
  const int64_t m = transpose_a ? a.shape[ra - 1] : a.shape[ra - 2];
  const int64_t k = transpose_a ? a.shape[ra - 2] : a.shape[ra - 1];
  const int64_t kb = transpose_b ? b.shape[rb - 1] : b.shape[rb - 2];
  const int64_t n = transpose_b ? b.shape[rb - 2] : b.shape[rb - 1];
  if (k != kb) Fail("BatchMatMul: K differs");
  const size_t rank = std::max(ra, rb);
  Shape y(rank);
  for (size_t d = 0; d + 2 < rank; ++d) {
    const int64_t ea = d + ra >= rank ? a.shape[d + ra - rank] : 1;
    const int64_t eb = d + rb >= rank ? b.shape[d + rb - rank] : 1;
    if (ea != eb && ea != 1 && eb != 1) Fail("BatchMatMul: batch dims do not broadcast");
    y[d] = std::max(ea, eb);
  }
  y[rank - 2] = m;
  y[rank - 1] = n;
  RefTensor out = RefTensor::Zeros(y);
  for (int64_t e = 0; e < out.size(); ++e) {
    const std::vector<int64_t> idx = Index(e, y);
    // The element of `t` at batch index idx (broadcast) and matrix (r, c).
    auto at = [&](const RefTensor& t, int64_t r, int64_t c, bool transposed) {
      const size_t rt = t.shape.size();
      std::vector<int64_t> ti(rt);
      for (size_t d = 0; d + 2 < rt; ++d) ti[d] = t.shape[d] == 1 ? 0 : idx[d + rank - rt];
      ti[rt - 2] = transposed ? c : r;
      ti[rt - 1] = transposed ? r : c;
      return t.data[Flat(ti, t.shape)];
    };
    const int64_t i = idx[rank - 2], j = idx[rank - 1];
    double sum = 0;
    for (int64_t p = 0; p < k; ++p) sum += at(a, i, p, transpose_a) * at(b, p, j, transpose_b);
    out.data[e] = sum;
  }
  return out;
}

RefTensor RefTranspose(const RefTensor& x, const std::vector<int>& perm) {
  const size_t rank = x.shape.size();
  if (perm.size() != rank) Fail("Transpose: perm length differs from rank");
  std::vector<int> p(rank);
  Shape y(rank);
  for (size_t i = 0; i < rank; ++i) {
    p[i] = Axis(perm[i], rank);
    y[i] = x.shape[p[i]];
  }
  RefTensor out = RefTensor::Zeros(y);
  for (int64_t e = 0; e < out.size(); ++e) {
    const std::vector<int64_t> idx = Index(e, y);
    std::vector<int64_t> xi(rank);
    for (size_t i = 0; i < rank; ++i) xi[p[i]] = idx[i];
    out.data[e] = x.data[Flat(xi, x.shape)];
  }
  return out;
}

RefTensor RefConcat(const std::vector<RefTensor>& xs, int axis) {
  if (xs.empty()) Fail("Concat: no inputs");
  const int a = Axis(axis, xs[0].shape.size());
  Shape y = xs[0].shape;
  y[a] = 0;
  for (const RefTensor& x : xs) y[a] += x.shape[a];
  RefTensor out = RefTensor::Zeros(y);
  for (int64_t e = 0; e < out.size(); ++e) {
    std::vector<int64_t> idx = Index(e, y);
    size_t piece = 0;
    while (idx[a] >= xs[piece].shape[a]) idx[a] -= xs[piece++].shape[a];
    out.data[e] = xs[piece].data[Flat(idx, xs[piece].shape)];
  }
  return out;
}

std::vector<RefTensor> RefSplit(const RefTensor& x, int axis, const std::vector<int64_t>& sizes) {
  const int a = Axis(axis, x.shape.size());
  std::vector<RefTensor> out;
  int64_t start = 0;
  for (int64_t s : sizes) {
    Shape shape = x.shape;
    shape[a] = s;
    RefTensor piece = RefTensor::Zeros(shape);
    for (int64_t e = 0; e < piece.size(); ++e) {
      std::vector<int64_t> idx = Index(e, shape);
      idx[a] += start;
      piece.data[e] = x.data[Flat(idx, x.shape)];
    }
    out.push_back(std::move(piece));
    start += s;
  }
  if (start != x.shape[a]) Fail("Split: sizes do not sum to the axis extent");
  return out;
}

}  // namespace sinkrt::testing
