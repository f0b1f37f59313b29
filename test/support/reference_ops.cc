#include "support/reference_ops.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <stdexcept>
#include <string>

namespace sinkrt::testing {
namespace {

[[noreturn]] void Fail(const std::string& what) { throw std::invalid_argument("reference op: " + what); }

std::vector<int64_t> Strides(const Shape& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (int i = static_cast<int>(shape.size()) - 2; i >= 0; --i) s[i] = s[i + 1] * shape[i + 1];
  return s;
}

int NormalizeAxis(int axis, size_t rank) {
  int r = static_cast<int>(rank);
  int a = axis < 0 ? axis + r : axis;
  if (a < 0 || a >= r) Fail("axis " + std::to_string(axis) + " out of range for rank " + std::to_string(r));
  return a;
}

template <typename F>
RefTensor Elementwise(const RefTensor& x, F f) {
  RefTensor y = x;
  for (double& v : y.data) v = f(v);
  return y;
}

template <typename F>
RefTensor Broadcast(const RefTensor& a, const RefTensor& b, F f) {
  size_t rank = std::max(a.shape.size(), b.shape.size());
  // Both shapes right-aligned and padded with leading 1s.
  Shape pa(rank - a.shape.size(), 1), pb(rank - b.shape.size(), 1);
  pa.insert(pa.end(), a.shape.begin(), a.shape.end());
  pb.insert(pb.end(), b.shape.begin(), b.shape.end());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    if (pa[i] != pb[i] && pa[i] != 1 && pb[i] != 1)
      Fail("shapes " + ShapeToString(a.shape) + " and " + ShapeToString(b.shape) + " do not broadcast");
    out[i] = pa[i] == 1 ? pb[i] : pa[i];
  }
  RefTensor y = RefTensor::Zeros(out);
  std::vector<int64_t> so = Strides(out), sa = Strides(pa), sb = Strides(pb);
  for (int64_t i = 0; i < y.size(); ++i) {
    int64_t ia = 0, ib = 0;
    for (size_t d = 0; d < rank; ++d) {
      int64_t c = i / so[d] % out[d];
      if (pa[d] != 1) ia += c * sa[d];
      if (pb[d] != 1) ib += c * sb[d];
    }
    y.data[i] = f(a.data[ia], b.data[ib]);
  }
  return y;
}

// Splits x around `axis` into (outer, n, inner) and hands each 1-D slice
// (through a strided accessor) to f.
template <typename F>
RefTensor AlongAxis(const RefTensor& x, int axis, F f) {
  int a = NormalizeAxis(axis, x.shape.size());
  int64_t outer = 1, inner = 1, n = x.shape[a];
  for (int i = 0; i < a; ++i) outer *= x.shape[i];
  for (size_t i = a + 1; i < x.shape.size(); ++i) inner *= x.shape[i];
  RefTensor y = RefTensor::Zeros(x.shape);
  std::vector<double> in(n), out(n);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t k = 0; k < inner; ++k) {
      for (int64_t j = 0; j < n; ++j) in[j] = x.data[(o * n + j) * inner + k];
      f(in, out);
      for (int64_t j = 0; j < n; ++j) y.data[(o * n + j) * inner + k] = out[j];
    }
  return y;
}

void LogSoftmax1D(const std::vector<double>& in, std::vector<double>& out) {
  double m = *std::max_element(in.begin(), in.end());
  double s = 0;
  for (double v : in) s += std::exp(v - m);
  double lse = m + std::log(s);
  for (size_t j = 0; j < in.size(); ++j) out[j] = in[j] - lse;
}

struct Dims4 {
  int64_t n, c, h, w;
};

Dims4 Nchw(const RefTensor& x, const char* what) {
  if (x.shape.size() != 4) Fail(std::string(what) + " must be 4-D, got " + ShapeToString(x.shape));
  return {x.shape[0], x.shape[1], x.shape[2], x.shape[3]};
}

int64_t OutDim(int64_t in, int pad_lo, int pad_hi, int64_t extent, int stride, const char* what) {
  int64_t span = in + pad_lo + pad_hi - extent;
  if (span < 0 || stride < 1) Fail(std::string(what) + ": window larger than the padded input");
  return span / stride + 1;
}

// Window pooling shared by max and average: `reduce` sees the in-bounds
// values of one window (padding never reaches it).
template <typename F>
RefTensor Pool(const RefTensor& x, const RefWindow& win, F reduce) {
  Dims4 d = Nchw(x, "pool input");
  int64_t oh = OutDim(d.h, win.pad_top, win.pad_bottom, win.kernel_h, win.stride_h, "pool");
  int64_t ow = OutDim(d.w, win.pad_left, win.pad_right, win.kernel_w, win.stride_w, "pool");
  RefTensor y = RefTensor::Zeros({d.n, d.c, oh, ow});
  std::vector<double> window;
  for (int64_t n = 0; n < d.n; ++n)
    for (int64_t c = 0; c < d.c; ++c)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          window.clear();
          for (int kh = 0; kh < win.kernel_h; ++kh)
            for (int kw = 0; kw < win.kernel_w; ++kw) {
              int64_t h = i * win.stride_h - win.pad_top + kh;
              int64_t w = j * win.stride_w - win.pad_left + kw;
              if (h >= 0 && h < d.h && w >= 0 && w < d.w) window.push_back(x.data[((n * d.c + c) * d.h + h) * d.w + w]);
            }
          y.data[((n * d.c + c) * oh + i) * ow + j] = reduce(window);
        }
  return y;
}

// Calls f(x_index, w_index, y_index) for every multiply of a convolution of
// an x_shape input by a w_shape filter (padding taps skipped).
template <typename F>
void ForEachConvTap(const Shape& x_shape, const Shape& w_shape, const RefWindow& win, F f) {
  Dims4 d = Nchw(RefTensor::Zeros(x_shape), "conv input");
  Dims4 k = Nchw(RefTensor::Zeros(w_shape), "conv filter");  // o, c, kh, kw
  if (k.c != d.c) Fail("conv filter has " + std::to_string(k.c) + " input channels, input " + std::to_string(d.c));
  int64_t ext_h = win.dilation_h * (k.h - 1) + 1, ext_w = win.dilation_w * (k.w - 1) + 1;
  int64_t oh = OutDim(d.h, win.pad_top, win.pad_bottom, ext_h, win.stride_h, "conv");
  int64_t ow = OutDim(d.w, win.pad_left, win.pad_right, ext_w, win.stride_w, "conv");
  for (int64_t n = 0; n < d.n; ++n)
    for (int64_t o = 0; o < k.n; ++o)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j)
          for (int64_t c = 0; c < d.c; ++c)
            for (int64_t p = 0; p < k.h; ++p)
              for (int64_t q = 0; q < k.w; ++q) {
                int64_t h = i * win.stride_h - win.pad_top + p * win.dilation_h;
                int64_t wc = j * win.stride_w - win.pad_left + q * win.dilation_w;
                if (h < 0 || h >= d.h || wc < 0 || wc >= d.w) continue;
                f(((n * d.c + c) * d.h + h) * d.w + wc, ((o * k.c + c) * k.h + p) * k.w + q,
                  ((n * k.n + o) * oh + i) * ow + j);
              }
}

// Calls f(y_index, x indices of the window's in-bounds elements) for every
// output of a pool over an x_shape input.
template <typename F>
void ForEachPoolWindow(const Shape& x_shape, const RefWindow& win, F f) {
  Dims4 d = Nchw(RefTensor::Zeros(x_shape), "pool input");
  int64_t oh = OutDim(d.h, win.pad_top, win.pad_bottom, win.kernel_h, win.stride_h, "pool");
  int64_t ow = OutDim(d.w, win.pad_left, win.pad_right, win.kernel_w, win.stride_w, "pool");
  std::vector<int64_t> taps;
  for (int64_t nc = 0; nc < d.n * d.c; ++nc)
    for (int64_t i = 0; i < oh; ++i)
      for (int64_t j = 0; j < ow; ++j) {
        taps.clear();
        for (int kh = 0; kh < win.kernel_h; ++kh)
          for (int kw = 0; kw < win.kernel_w; ++kw) {
            int64_t h = i * win.stride_h - win.pad_top + kh, w = j * win.stride_w - win.pad_left + kw;
            if (h >= 0 && h < d.h && w >= 0 && w < d.w) taps.push_back((nc * d.h + h) * d.w + w);
          }
        if (taps.empty()) Fail("pool window lies entirely in the padding");
        f((nc * oh + i) * ow + j, taps);
      }
}

RefTensor Reduce(const RefTensor& x, std::vector<int> axes, bool keep_dims, bool mean) {
  size_t rank = x.shape.size();
  std::vector<bool> reduced(rank, axes.empty());
  for (int a : axes) reduced[NormalizeAxis(a, rank)] = true;
  Shape kept(rank);
  int64_t count = 1;
  for (size_t i = 0; i < rank; ++i) {
    kept[i] = reduced[i] ? 1 : x.shape[i];
    if (reduced[i]) count *= x.shape[i];
  }
  RefTensor y = RefTensor::Zeros(kept);
  std::vector<int64_t> sx = Strides(x.shape), sk = Strides(kept);
  for (int64_t i = 0; i < x.size(); ++i) {
    int64_t o = 0;
    for (size_t d = 0; d < rank; ++d)
      if (!reduced[d]) o += (i / sx[d] % x.shape[d]) * sk[d];
    y.data[o] += x.data[i];
  }
  if (mean)
    for (double& v : y.data) v /= static_cast<double>(count);
  if (!keep_dims) {
    Shape dropped;
    for (size_t i = 0; i < rank; ++i)
      if (!reduced[i]) dropped.push_back(x.shape[i]);
    y.shape = dropped;
  }
  return y;
}

}  // namespace

RefTensor::RefTensor(Shape s, std::vector<double> d) : shape(std::move(s)), data(std::move(d)) {
  if (NumElements(shape) != static_cast<int64_t>(data.size()))
    Fail("shape " + ShapeToString(shape) + " does not hold " + std::to_string(data.size()) + " values");
}

RefTensor RefTensor::Zeros(Shape s) {
  int64_t n = NumElements(s);
  if (n < 0) Fail("bad shape " + ShapeToString(s));
  return RefTensor(std::move(s), std::vector<double>(static_cast<size_t>(n), 0.0));
}

RefWindow RefWindow::Square(int kernel, int stride, int pad) {
  RefWindow w;
  w.kernel_h = w.kernel_w = kernel;
  w.stride_h = w.stride_w = stride;
  w.pad_top = w.pad_bottom = w.pad_left = w.pad_right = pad;
  return w;
}

RefTensor RefMatMul(const RefTensor& a, const RefTensor& b, bool transpose_a, bool transpose_b) {
  if (a.shape.size() != 2 || b.shape.size() != 2)
    Fail("MatMul takes 2-D operands, got " + ShapeToString(a.shape) + " and " + ShapeToString(b.shape));
  int64_t m = transpose_a ? a.shape[1] : a.shape[0], k = transpose_a ? a.shape[0] : a.shape[1];
  int64_t kb = transpose_b ? b.shape[1] : b.shape[0], n = transpose_b ? b.shape[0] : b.shape[1];
  if (k != kb) Fail("MatMul inner dimensions " + std::to_string(k) + " and " + std::to_string(kb) + " differ");
  RefTensor y = RefTensor::Zeros({m, n});
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) {
        double av = transpose_a ? a.data[p * m + i] : a.data[i * k + p];
        double bv = transpose_b ? b.data[j * k + p] : b.data[p * n + j];
        s += av * bv;
      }
      y.data[i * n + j] = s;
    }
  return y;
}

RefTensor RefBiasAdd(const RefTensor& x, const RefTensor& bias, int axis) {
  int a = NormalizeAxis(axis, x.shape.size());
  if (bias.shape.size() != 1 || bias.shape[0] != x.shape[a])
    Fail("bias " + ShapeToString(bias.shape) + " does not match axis " + std::to_string(a) + " of " +
         ShapeToString(x.shape));
  int64_t inner = 1;
  for (size_t i = a + 1; i < x.shape.size(); ++i) inner *= x.shape[i];
  RefTensor y = x;
  for (int64_t i = 0; i < y.size(); ++i) y.data[i] += bias.data[i / inner % x.shape[a]];
  return y;
}

RefTensor RefAdd(const RefTensor& a, const RefTensor& b) {
  return Broadcast(a, b, [](double u, double v) { return u + v; });
}
RefTensor RefSub(const RefTensor& a, const RefTensor& b) {
  return Broadcast(a, b, [](double u, double v) { return u - v; });
}
RefTensor RefMul(const RefTensor& a, const RefTensor& b) {
  return Broadcast(a, b, [](double u, double v) { return u * v; });
}

RefTensor RefDiv(const RefTensor& a, const RefTensor& b) {
  return Broadcast(a, b, [](double u, double v) { return u / v; });
}
RefTensor RefMaximum(const RefTensor& a, const RefTensor& b) {
  return Broadcast(a, b, [](double u, double v) { return std::isnan(u) || std::isnan(v) ? u + v : std::max(u, v); });
}
RefTensor RefMinimum(const RefTensor& a, const RefTensor& b) {
  return Broadcast(a, b, [](double u, double v) { return std::isnan(u) || std::isnan(v) ? u + v : std::min(u, v); });
}
RefTensor RefPow(const RefTensor& a, const RefTensor& b) {
  return Broadcast(a, b, [](double u, double v) { return std::pow(u, v); });
}

RefTensor RefRelu(const RefTensor& x) {
  return Elementwise(x, [](double v) { return v > 0 ? v : 0.0; });
}
RefTensor RefGelu(const RefTensor& x) {
  const double c = std::sqrt(2.0 / std::numbers::pi);
  return Elementwise(x, [c](double v) { return 0.5 * v * (1.0 + std::tanh(c * (v + 0.044715 * v * v * v))); });
}
RefTensor RefGeluErf(const RefTensor& x) {
  return Elementwise(x, [](double v) { return 0.5 * v * (1.0 + std::erf(v / std::numbers::sqrt2)); });
}
RefTensor RefErf(const RefTensor& x) {
  return Elementwise(x, [](double v) { return std::erf(v); });
}
RefTensor RefTanh(const RefTensor& x) {
  return Elementwise(x, [](double v) { return std::tanh(v); });
}
RefTensor RefSigmoid(const RefTensor& x) {
  return Elementwise(x, [](double v) { return 1.0 / (1.0 + std::exp(-v)); });
}
RefTensor RefNeg(const RefTensor& x) {
  return Elementwise(x, [](double v) { return -v; });
}
RefTensor RefExp(const RefTensor& x) {
  return Elementwise(x, [](double v) { return std::exp(v); });
}
RefTensor RefLog(const RefTensor& x) {
  return Elementwise(x, [](double v) { return std::log(v); });
}
RefTensor RefSqrt(const RefTensor& x) {
  return Elementwise(x, [](double v) { return std::sqrt(v); });
}
RefTensor RefRsqrt(const RefTensor& x) {
  return Elementwise(x, [](double v) { return 1.0 / std::sqrt(v); });
}
RefTensor RefSquare(const RefTensor& x) {
  return Elementwise(x, [](double v) { return v * v; });
}
RefTensor RefAbs(const RefTensor& x) {
  return Elementwise(x, [](double v) { return std::fabs(v); });
}

RefTensor RefSoftmax(const RefTensor& x, int axis) {
  return AlongAxis(x, axis, [](const std::vector<double>& in, std::vector<double>& out) {
    LogSoftmax1D(in, out);
    for (double& v : out) v = std::exp(v);
  });
}

RefTensor RefLogSoftmax(const RefTensor& x, int axis) { return AlongAxis(x, axis, LogSoftmax1D); }

RefTensor RefSparseSoftmaxCrossEntropy(const RefTensor& logits, const std::vector<int32_t>& labels) {
  if (logits.shape.size() != 2 || static_cast<int64_t>(labels.size()) != logits.shape[0])
    Fail("logits " + ShapeToString(logits.shape) + " and " + std::to_string(labels.size()) + " labels");
  RefTensor logp = RefLogSoftmax(logits, 1);
  int64_t n = logits.shape[0], c = logits.shape[1];
  double loss = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (labels[i] < 0 || labels[i] >= c) Fail("label " + std::to_string(labels[i]) + " outside [0, C)");
    loss -= logp.data[i * c + labels[i]];
  }
  return RefTensor({}, {loss / static_cast<double>(n)});
}

RefTensor RefReduceSum(const RefTensor& x, std::vector<int> axes, bool keep_dims) {
  return Reduce(x, std::move(axes), keep_dims, false);
}
RefTensor RefReduceMean(const RefTensor& x, std::vector<int> axes, bool keep_dims) {
  return Reduce(x, std::move(axes), keep_dims, true);
}

RefTensor RefReduceMax(const RefTensor& x, std::vector<int> axes, bool keep_dims) {
  const size_t rank = x.shape.size();
  std::vector<bool> reduced(rank, axes.empty());
  for (int a : axes) reduced[NormalizeAxis(a, rank)] = true;
  Shape kept(rank), dropped;
  for (size_t i = 0; i < rank; ++i) {
    kept[i] = reduced[i] ? 1 : x.shape[i];
    if (!reduced[i]) dropped.push_back(x.shape[i]);
  }
  RefTensor y(kept, std::vector<double>(static_cast<size_t>(NumElements(kept)), -HUGE_VAL));
  const std::vector<int64_t> sx = Strides(x.shape), sk = Strides(kept);
  for (int64_t i = 0; i < x.size(); ++i) {
    int64_t o = 0;
    for (size_t d = 0; d < rank; ++d)
      if (!reduced[d]) o += (i / sx[d] % x.shape[d]) * sk[d];
    const double v = x.data[i];
    if (std::isnan(v) || v > y.data[o]) y.data[o] = std::isnan(y.data[o]) ? y.data[o] : v;
  }
  if (!keep_dims) y.shape = dropped;
  return y;
}

RefTensor RefSelect(const RefTensor& cond, const RefTensor& x, const RefTensor& y) {
  const RefTensor shape_of =
      Broadcast(Broadcast(cond, x, [](double, double) { return 0.0; }), y, [](double, double) { return 0.0; });
  const RefTensor c = RefBroadcastTo(cond, shape_of.shape), a = RefBroadcastTo(x, shape_of.shape),
                  b = RefBroadcastTo(y, shape_of.shape);
  RefTensor out = RefTensor::Zeros(shape_of.shape);
  for (int64_t i = 0; i < out.size(); ++i) out.data[i] = c.data[i] != 0 ? a.data[i] : b.data[i];
  return out;
}

RefTensor RefCausalMask(const RefTensor& x, double fill) {
  if (x.shape.size() < 2) Fail("CausalMask of rank < 2");
  const int64_t t = x.shape[x.shape.size() - 2], s = x.shape.back();
  RefTensor y = x;
  for (int64_t i = 0; i < y.size(); ++i) {
    const int64_t row = i / s % t, col = i % s;
    if (col > row + s - t) y.data[i] = fill;
  }
  return y;
}

RefTensor RefReshape(const RefTensor& x, Shape shape) {
  int64_t known = 1;
  int unknown = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (unknown >= 0) Fail("reshape to " + ShapeToString(shape) + " has two -1 dims");
      unknown = static_cast<int>(i);
    } else {
      known *= shape[i];
    }
  }
  if (unknown >= 0) {
    if (known == 0 || x.size() % known) Fail("cannot infer -1 in " + ShapeToString(shape));
    shape[unknown] = x.size() / known;
  }
  return RefTensor(std::move(shape), x.data);
}

RefTensor RefFlatten(const RefTensor& x) {
  if (x.shape.empty()) Fail("Flatten of a scalar");
  return RefReshape(x, {x.shape[0], -1});
}

RefTensor RefBroadcastTo(const RefTensor& x, const Shape& shape, double scale) {
  if (x.shape.size() > shape.size())
    Fail("cannot broadcast " + ShapeToString(x.shape) + " to the lower-rank " + ShapeToString(shape));
  const size_t off = shape.size() - x.shape.size();
  for (size_t d = 0; d < x.shape.size(); ++d)
    if (x.shape[d] != 1 && x.shape[d] != shape[off + d])
      Fail(ShapeToString(x.shape) + " does not broadcast to " + ShapeToString(shape));
  RefTensor y = RefTensor::Zeros(shape);
  std::vector<int64_t> sy = Strides(shape), sx = Strides(x.shape);
  for (int64_t i = 0; i < y.size(); ++i) {
    int64_t ix = 0;
    for (size_t d = 0; d < x.shape.size(); ++d)
      if (x.shape[d] != 1) ix += (i / sy[off + d] % shape[off + d]) * sx[d];
    y.data[i] = scale * x.data[ix];
  }
  return y;
}

RefTensor RefSumToShape(const RefTensor& x, const Shape& shape) {
  // Every element of x lands where broadcasting `shape` to x's would read.
  if (shape.size() > x.shape.size())
    Fail("cannot sum " + ShapeToString(x.shape) + " to the higher-rank " + ShapeToString(shape));
  const size_t off = x.shape.size() - shape.size();
  for (size_t d = 0; d < shape.size(); ++d)
    if (shape[d] != 1 && shape[d] != x.shape[off + d])
      Fail(ShapeToString(shape) + " does not broadcast to " + ShapeToString(x.shape));
  RefTensor y = RefTensor::Zeros(shape);
  std::vector<int64_t> sx = Strides(x.shape), sy = Strides(shape);
  for (int64_t i = 0; i < x.size(); ++i) {
    int64_t iy = 0;
    for (size_t d = 0; d < shape.size(); ++d)
      if (shape[d] != 1) iy += (i / sx[off + d] % x.shape[off + d]) * sy[d];
    y.data[iy] += x.data[i];
  }
  return y;
}

RefTensor RefConv2D(const RefTensor& x, const RefTensor& w, const RefWindow& win) {
  Dims4 d = Nchw(x, "conv input");
  Dims4 k = Nchw(w, "conv filter");  // o, c, kh, kw
  if (k.c != d.c) Fail("conv filter has " + std::to_string(k.c) + " input channels, input " + std::to_string(d.c));
  int64_t ext_h = win.dilation_h * (k.h - 1) + 1, ext_w = win.dilation_w * (k.w - 1) + 1;
  int64_t oh = OutDim(d.h, win.pad_top, win.pad_bottom, ext_h, win.stride_h, "conv");
  int64_t ow = OutDim(d.w, win.pad_left, win.pad_right, ext_w, win.stride_w, "conv");
  RefTensor y = RefTensor::Zeros({d.n, k.n, oh, ow});
  for (int64_t n = 0; n < d.n; ++n)
    for (int64_t o = 0; o < k.n; ++o)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          double s = 0;
          for (int64_t c = 0; c < d.c; ++c)
            for (int64_t p = 0; p < k.h; ++p)
              for (int64_t q = 0; q < k.w; ++q) {
                int64_t h = i * win.stride_h - win.pad_top + p * win.dilation_h;
                int64_t wc = j * win.stride_w - win.pad_left + q * win.dilation_w;
                if (h < 0 || h >= d.h || wc < 0 || wc >= d.w) continue;
                s += x.data[((n * d.c + c) * d.h + h) * d.w + wc] * w.data[((o * k.c + c) * k.h + p) * k.w + q];
              }
          y.data[((n * k.n + o) * oh + i) * ow + j] = s;
        }
  return y;
}

RefTensor RefMaxPool2D(const RefTensor& x, const RefWindow& win) {
  return Pool(x, win, [](const std::vector<double>& v) {
    if (v.empty()) Fail("max-pool window lies entirely in the padding");
    return *std::max_element(v.begin(), v.end());
  });
}

RefTensor RefAvgPool2D(const RefTensor& x, const RefWindow& win) {
  return Pool(x, win, [](const std::vector<double>& v) {
    if (v.empty()) Fail("average-pool window lies entirely in the padding");
    double s = 0;
    for (double e : v) s += e;
    return s / static_cast<double>(v.size());
  });
}

RefTensor RefConv2DBackpropInput(const RefTensor& dy, const RefTensor& w, const Shape& x_shape, const RefWindow& win) {
  RefTensor dx = RefTensor::Zeros(x_shape);
  ForEachConvTap(x_shape, w.shape, win, [&](int64_t xi, int64_t wi, int64_t yi) {
    if (yi >= dy.size()) Fail("conv dy " + ShapeToString(dy.shape) + " is smaller than the output");
    dx.data[xi] += dy.data[yi] * w.data[wi];
  });
  return dx;
}

RefTensor RefConv2DBackpropFilter(const RefTensor& dy, const RefTensor& x, const Shape& w_shape, const RefWindow& win) {
  RefTensor dw = RefTensor::Zeros(w_shape);
  ForEachConvTap(x.shape, w_shape, win, [&](int64_t xi, int64_t wi, int64_t yi) {
    if (yi >= dy.size()) Fail("conv dy " + ShapeToString(dy.shape) + " is smaller than the output");
    dw.data[wi] += dy.data[yi] * x.data[xi];
  });
  return dw;
}

RefTensor RefMaxPool2DGrad(const RefTensor& dy, const RefTensor& x, const RefWindow& win) {
  RefTensor dx = RefTensor::Zeros(x.shape);
  ForEachPoolWindow(x.shape, win, [&](int64_t yi, const std::vector<int64_t>& taps) {
    int64_t best = taps[0];
    for (int64_t t : taps) best = x.data[t] > x.data[best] ? t : best;
    dx.data[best] += dy.data[yi];
  });
  return dx;
}

RefTensor RefAvgPool2DGrad(const RefTensor& dy, const Shape& x_shape, const RefWindow& win) {
  RefTensor dx = RefTensor::Zeros(x_shape);
  ForEachPoolWindow(x_shape, win, [&](int64_t yi, const std::vector<int64_t>& taps) {
    for (int64_t t : taps) dx.data[t] += dy.data[yi] / static_cast<double>(taps.size());
  });
  return dx;
}

RefTensor RefLayerNorm(const RefTensor& x, const RefTensor& gamma, const RefTensor& beta, double epsilon,
                       RefTensor* mean, RefTensor* rstd) {
  if (x.shape.empty()) Fail("LayerNorm of a scalar");
  const int64_t d = x.shape.back(), rows = x.size() / d;
  if (gamma.shape != Shape{d} || beta.shape != Shape{d}) Fail("LayerNorm gamma/beta must be [D]");
  RefTensor y = x;
  if (mean) *mean = RefTensor::Zeros({rows});
  if (rstd) *rstd = RefTensor::Zeros({rows});
  for (int64_t r = 0; r < rows; ++r) {
    double m = 0, v = 0;
    for (int64_t i = 0; i < d; ++i) m += x.data[r * d + i];
    m /= d;
    for (int64_t i = 0; i < d; ++i) v += (x.data[r * d + i] - m) * (x.data[r * d + i] - m);
    v /= d;
    const double s = 1.0 / std::sqrt(v + epsilon);
    for (int64_t i = 0; i < d; ++i) y.data[r * d + i] = (x.data[r * d + i] - m) * s * gamma.data[i] + beta.data[i];
    if (mean) mean->data[r] = m;
    if (rstd) rstd->data[r] = s;
  }
  return y;
}

RefLayerNormGrads RefLayerNormGrad(const RefTensor& dy, const RefTensor& x, const RefTensor& gamma, double epsilon) {
  if (dy.shape != x.shape) Fail("LayerNormGrad dy and x differ in shape");
  RefTensor mean, rstd;
  RefLayerNorm(x, gamma, RefTensor::Zeros(gamma.shape), epsilon, &mean, &rstd);
  const int64_t d = x.shape.back(), rows = x.size() / d;
  RefLayerNormGrads g{RefTensor::Zeros(x.shape), RefTensor::Zeros(gamma.shape), RefTensor::Zeros(gamma.shape)};
  // Per row, with x̂_i = (x_i − mean)·rstd: ∂y_j/∂x_i = gamma_j·rstd·(δ_ij − 1/D − x̂_i·x̂_j/D).
  for (int64_t r = 0; r < rows; ++r) {
    auto xhat = [&](int64_t i) { return (x.data[r * d + i] - mean.data[r]) * rstd.data[r]; };
    for (int64_t i = 0; i < d; ++i) {
      double acc = 0;
      for (int64_t j = 0; j < d; ++j)
        acc += dy.data[r * d + j] * gamma.data[j] * rstd.data[r] *
               ((i == j ? 1.0 : 0.0) - 1.0 / d - xhat(i) * xhat(j) / d);
      g.dx.data[r * d + i] = acc;
      g.dgamma.data[i] += dy.data[r * d + i] * xhat(i);
      g.dbeta.data[i] += dy.data[r * d + i];
    }
  }
  return g;
}

RefTensor RefGather(const RefTensor& table, const std::vector<int32_t>& indices, const Shape& indices_shape) {
  if (table.shape.empty()) Fail("Gather from a scalar");
  if (NumElements(indices_shape) != static_cast<int64_t>(indices.size())) Fail("Gather indices shape");
  const int64_t v = table.shape[0], row = table.size() / v;
  Shape out = indices_shape;
  out.insert(out.end(), table.shape.begin() + 1, table.shape.end());
  RefTensor y = RefTensor::Zeros(out);
  for (size_t n = 0; n < indices.size(); ++n) {
    if (indices[n] < 0 || indices[n] >= v) Fail("Gather index out of range");
    for (int64_t j = 0; j < row; ++j) y.data[n * row + j] = table.data[indices[n] * row + j];
  }
  return y;
}

RefTensor RefGatherGrad(const RefTensor& dy, const std::vector<int32_t>& indices, const Shape& table_shape) {
  RefTensor dt = RefTensor::Zeros(table_shape);
  const int64_t v = table_shape.at(0), row = dt.size() / v;
  if (dy.size() != static_cast<int64_t>(indices.size()) * row) Fail("GatherGrad dy size");
  for (size_t n = 0; n < indices.size(); ++n) {
    if (indices[n] < 0 || indices[n] >= v) Fail("GatherGrad index out of range");
    for (int64_t j = 0; j < row; ++j) dt.data[indices[n] * row + j] += dy.data[n * row + j];
  }
  return dt;
}

RefTensor RefOneHot(const std::vector<int32_t>& indices, const Shape& indices_shape, int64_t depth, double on,
                    double off, int axis) {
  if (NumElements(indices_shape) != static_cast<int64_t>(indices.size())) Fail("OneHot indices shape");
  const int rank = static_cast<int>(indices_shape.size());
  const int at = axis == -1 ? rank : axis;
  if (at < 0 || at > rank) Fail("OneHot axis");
  Shape out = indices_shape;
  out.insert(out.begin() + at, depth);
  RefTensor y = RefTensor::Zeros(out);
  // Walk the output's multi-index: drop the depth coordinate to find the index.
  std::vector<int64_t> pos(out.size(), 0);
  for (int64_t flat = 0; flat < y.size(); ++flat) {
    int64_t rest = flat;
    for (int d = static_cast<int>(out.size()) - 1; d >= 0; --d) {
      pos[d] = rest % out[d];
      rest /= out[d];
    }
    int64_t src = 0;
    for (int d = 0; d < static_cast<int>(out.size()); ++d)
      if (d != at) src = src * out[d] + pos[d];
    y.data[flat] = indices[src] == pos[at] ? on : off;
  }
  return y;
}

namespace {

// x's position read by output position o of an axis of extent n padded by
// `before`; -1: the constant.
int64_t RefPadSource(int64_t o, int64_t before, int64_t n, int mode) {
  int64_t q = o - before;
  if (q >= 0 && q < n) return q;
  if (mode == 0) return -1;
  if (q < 0) return mode == 1 ? -q : -q - 1;
  return mode == 1 ? 2 * (n - 1) - q : 2 * n - 1 - q;
}

Shape RefPaddedShape(const Shape& x, const std::vector<int64_t>& paddings) {
  if (paddings.size() != 2 * x.size()) Fail("Pad paddings count");
  Shape y = x;
  for (size_t d = 0; d < x.size(); ++d) y[d] += paddings[2 * d] + paddings[2 * d + 1];
  return y;
}

// Output element `flat` of y's shape: the flat x index it reads, or -1.
int64_t RefPadRead(int64_t flat, const Shape& x, const Shape& y, const std::vector<int64_t>& paddings, int mode) {
  int64_t src = 0, stride = 1, rest = flat;
  for (int d = static_cast<int>(y.size()) - 1; d >= 0; --d) {
    const int64_t q = RefPadSource(rest % y[d], paddings[2 * d], x[d], mode);
    rest /= y[d];
    if (q < 0 || q >= x[d]) return -1;
    src += q * stride;
    stride *= x[d];
  }
  return src;
}

}  // namespace

RefTensor RefPad(const RefTensor& x, const std::vector<int64_t>& paddings, int mode, double value) {
  RefTensor y = RefTensor::Zeros(RefPaddedShape(x.shape, paddings));
  for (int64_t i = 0; i < y.size(); ++i) {
    const int64_t src = RefPadRead(i, x.shape, y.shape, paddings, mode);
    y.data[i] = src < 0 ? value : x.data[src];
  }
  return y;
}

RefTensor RefPadGrad(const RefTensor& dy, const Shape& x_shape, const std::vector<int64_t>& paddings, int mode) {
  if (dy.shape != RefPaddedShape(x_shape, paddings)) Fail("PadGrad dy shape");
  RefTensor dx = RefTensor::Zeros(x_shape);
  for (int64_t i = 0; i < dy.size(); ++i) {
    const int64_t src = RefPadRead(i, x_shape, dy.shape, paddings, mode);
    if (src >= 0) dx.data[src] += dy.data[i];
  }
  return dx;
}

double RefRoundToBf16(double x) {
  if (std::isnan(x) || std::isinf(x) || x == 0) return x;
  int e = 0;
  std::frexp(x, &e);  // x = m·2^e, 0.5 ≤ |m| < 1
  // 8 significant bits; below the smallest normal float (2^-126, e = -125)
  // the spacing stays that of the subnormals, 2^-133.
  const double scale = std::ldexp(1.0, 8 - std::max(e, -125));
  const double r = std::nearbyint(x * scale) / scale;  // ties to even in the default rounding mode
  // Beyond the largest bf16 (just under 2^128) a float is infinite.
  if (std::abs(r) >= std::ldexp(1.0, 128)) return std::copysign(INFINITY, x);
  return r;
}

double RefWeightedSum(const RefTensor& y, const RefTensor& r) {
  if (y.shape != r.shape) Fail("weighted sum of " + ShapeToString(y.shape) + " by " + ShapeToString(r.shape));
  double s = 0;
  for (int64_t i = 0; i < y.size(); ++i) s += y.data[i] * r.data[i];
  return s;
}

namespace {

// x [N, C, ...] as [N, C, S].
struct Channels {
  int64_t n, c, s;
  int64_t at(int64_t i, int64_t ch, int64_t j) const { return (i * c + ch) * s + j; }
};
Channels ChannelsOf(const Shape& x) {
  const int64_t n = x.at(0), c = x.at(1);
  int64_t s = 1;
  for (size_t d = 2; d < x.size(); ++d) s *= x[d];
  return {n, c, s};
}

}  // namespace

RefBatchNormOut RefBatchNormTrain(const RefTensor& x, const RefTensor& gamma, const RefTensor& beta,
                                  const RefTensor& moving_mean, const RefTensor& moving_variance, double epsilon,
                                  double momentum) {
  const Channels k = ChannelsOf(x.shape);
  RefBatchNormOut out{RefTensor::Zeros(x.shape), RefTensor::Zeros({k.c}), RefTensor::Zeros({k.c}),
                      RefTensor::Zeros({k.c}), RefTensor::Zeros({k.c})};
  const double m = static_cast<double>(k.n * k.s);
  for (int64_t ch = 0; ch < k.c; ++ch) {
    double sum = 0, sq = 0;
    for (int64_t i = 0; i < k.n; ++i)
      for (int64_t j = 0; j < k.s; ++j) sum += x.data[k.at(i, ch, j)];
    const double mean = sum / m;
    for (int64_t i = 0; i < k.n; ++i)
      for (int64_t j = 0; j < k.s; ++j) sq += (x.data[k.at(i, ch, j)] - mean) * (x.data[k.at(i, ch, j)] - mean);
    const double var = sq / m, rstd = 1.0 / std::sqrt(var + epsilon);
    for (int64_t i = 0; i < k.n; ++i)
      for (int64_t j = 0; j < k.s; ++j)
        out.y.data[k.at(i, ch, j)] = (x.data[k.at(i, ch, j)] - mean) * rstd * gamma.data[ch] + beta.data[ch];
    out.mean.data[ch] = mean;
    out.rstd.data[ch] = rstd;
    out.moving_mean.data[ch] = momentum * moving_mean.data[ch] + (1 - momentum) * mean;
    out.moving_variance.data[ch] = momentum * moving_variance.data[ch] + (1 - momentum) * var * m / (m - 1);
  }
  return out;
}

RefTensor RefBatchNormInfer(const RefTensor& x, const RefTensor& gamma, const RefTensor& beta,
                            const RefTensor& moving_mean, const RefTensor& moving_variance, double epsilon) {
  const Channels k = ChannelsOf(x.shape);
  RefTensor y = RefTensor::Zeros(x.shape);
  for (int64_t i = 0; i < k.n; ++i)
    for (int64_t ch = 0; ch < k.c; ++ch)
      for (int64_t j = 0; j < k.s; ++j)
        y.data[k.at(i, ch, j)] = (x.data[k.at(i, ch, j)] - moving_mean.data[ch]) /
                                     std::sqrt(moving_variance.data[ch] + epsilon) * gamma.data[ch] +
                                 beta.data[ch];
  return y;
}

RefBatchNormGrads RefBatchNormGrad(const RefTensor& dy, const RefTensor& x, const RefTensor& gamma, double epsilon) {
  const Channels k = ChannelsOf(x.shape);
  const RefTensor zeros = RefTensor::Zeros({k.c});
  const RefBatchNormOut f = RefBatchNormTrain(x, gamma, zeros, zeros, zeros, epsilon, 0.0);
  RefBatchNormGrads g{RefTensor::Zeros(x.shape), RefTensor::Zeros({k.c}), RefTensor::Zeros({k.c})};
  const double m = static_cast<double>(k.n * k.s);
  for (int64_t ch = 0; ch < k.c; ++ch) {
    const double mean = f.mean.data[ch], rstd = f.rstd.data[ch];
    double sdy = 0, sdyx = 0;
    for (int64_t i = 0; i < k.n; ++i)
      for (int64_t j = 0; j < k.s; ++j) {
        const int64_t at = k.at(i, ch, j);
        sdy += dy.data[at];
        sdyx += dy.data[at] * (x.data[at] - mean) * rstd;
      }
    g.dgamma.data[ch] = sdyx;
    g.dbeta.data[ch] = sdy;
    for (int64_t i = 0; i < k.n; ++i)
      for (int64_t j = 0; j < k.s; ++j) {
        const int64_t at = k.at(i, ch, j);
        const double xhat = (x.data[at] - mean) * rstd;
        g.dx.data[at] = gamma.data[ch] * rstd * (dy.data[at] - sdy / m - xhat * sdyx / m);
      }
  }
  return g;
}

}  // namespace sinkrt::testing
