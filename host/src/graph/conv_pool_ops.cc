// Graph builders for NCHW feature maps: Conv2D, MaxPool2D and AvgPool2D.
#include "sinkrt/host/graph.h"

#include <utility>

#include "host/src/graph/builder_helpers.h"

namespace sinkrt::host {

using internal::LowerName;

TensorId Graph::Conv2D(TensorId x, TensorId w, int stride, int pad) {
  OpAttrs attrs;
  attrs.stride_h = attrs.stride_w = stride;
  attrs.pad_top = attrs.pad_bottom = attrs.pad_left = attrs.pad_right = pad;
  return Conv2D(x, w, attrs);
}

TensorId Graph::Conv2D(TensorId x, TensorId w, const OpAttrs& a) {
  if (!status_.ok()) return kInvalidTensor;
  constexpr auto op = OpCode::Conv2D;
  const std::string name = UniqueName("conv2d");
  if (!CheckInput(op, name, "x", x, DType::F32) || !CheckInput(op, name, "w", w, DType::F32)) return kInvalidTensor;
  const Shape sx = tensors_[x].shape, sw = tensors_[w].shape;
  if (sx.size() != 4) {
    FailOp(op, name, "x must be 4-D NCHW, got " + ShapeToString(sx));
    return kInvalidTensor;
  }
  if (sw.size() != 4) {
    FailOp(op, name, "w must be 4-D OIHW, got " + ShapeToString(sw));
    return kInvalidTensor;
  }
  if (sx[1] != sw[1]) {
    FailOp(op, name,
           "x " + ShapeToString(sx) + " has C=" + std::to_string(sx[1]) + " channels but w " + ShapeToString(sw) +
               " expects " + std::to_string(sw[1]));
    return kInvalidTensor;
  }
  if (a.stride_h < 1 || a.stride_w < 1) {
    FailOp(op, name,
           "strides must be >= 1, got (" + std::to_string(a.stride_h) + ", " + std::to_string(a.stride_w) + ")");
    return kInvalidTensor;
  }
  if (a.dilation_h < 1 || a.dilation_w < 1) {
    FailOp(op, name,
           "dilations must be >= 1, got (" + std::to_string(a.dilation_h) + ", " + std::to_string(a.dilation_w) + ")");
    return kInvalidTensor;
  }
  if (a.pad_top < 0 || a.pad_bottom < 0 || a.pad_left < 0 || a.pad_right < 0) {
    FailOp(op, name,
           "pads must be >= 0, got (" + std::to_string(a.pad_top) + ", " + std::to_string(a.pad_bottom) + ", " +
               std::to_string(a.pad_left) + ", " + std::to_string(a.pad_right) + ")");
    return kInvalidTensor;
  }
  const int64_t kh = int64_t{a.dilation_h} * (sw[2] - 1) + 1;
  const int64_t kw = int64_t{a.dilation_w} * (sw[3] - 1) + 1;
  const int64_t ph = sx[2] + a.pad_top + a.pad_bottom, pw = sx[3] + a.pad_left + a.pad_right;
  if (kh > ph || kw > pw) {
    FailOp(op, name,
           "kernel [" + std::to_string(sw[2]) + "," + std::to_string(sw[3]) + "] (dilated [" + std::to_string(kh) +
               "," + std::to_string(kw) + "]) is larger than the padded input [" + std::to_string(ph) + "," +
               std::to_string(pw) + "]");
    return kInvalidTensor;
  }
  // Only the convolution fields travel, so equal convolutions compare equal.
  OpAttrs attrs;
  attrs.stride_h = a.stride_h;
  attrs.stride_w = a.stride_w;
  attrs.pad_top = a.pad_top;
  attrs.pad_bottom = a.pad_bottom;
  attrs.pad_left = a.pad_left;
  attrs.pad_right = a.pad_right;
  attrs.dilation_h = a.dilation_h;
  attrs.dilation_w = a.dilation_w;
  const Shape out{sx[0], sw[0], (ph - kh) / a.stride_h + 1, (pw - kw) / a.stride_w + 1};
  return AddOp(op, {x, w}, attrs, {{out, DType::F32}}, name)[0];
}

TensorId Graph::Pool(OpCode op, TensorId x, int kernel, int stride, int pad) {
  if (!status_.ok()) return kInvalidTensor;
  const std::string name = UniqueName(LowerName(op));
  if (!CheckInput(op, name, "x", x, DType::F32)) return kInvalidTensor;
  const Shape sx = tensors_[x].shape;
  if (sx.size() != 4) {
    FailOp(op, name, "x must be 4-D NCHW, got " + ShapeToString(sx));
    return kInvalidTensor;
  }
  if (kernel < 1 || stride < 1) {
    FailOp(
        op, name,
        "kernel and stride must be >= 1, got kernel " + std::to_string(kernel) + ", stride " + std::to_string(stride));
    return kInvalidTensor;
  }
  // Beyond half a kernel some windows would hold only padding: no max, and an
  // average over nothing.
  if (pad < 0 || 2 * pad > kernel) {
    FailOp(op, name,
           "pad must be in [0, kernel/2], got pad " + std::to_string(pad) + " for kernel " + std::to_string(kernel));
    return kInvalidTensor;
  }
  const int64_t ph = sx[2] + 2 * pad, pw = sx[3] + 2 * pad;
  if (kernel > ph || kernel > pw) {
    FailOp(op, name,
           "kernel " + std::to_string(kernel) + " is larger than the padded input [" + std::to_string(ph) + "," +
               std::to_string(pw) + "]");
    return kInvalidTensor;
  }
  OpAttrs attrs;
  attrs.kernel_h = attrs.kernel_w = kernel;
  attrs.stride_h = attrs.stride_w = stride;
  attrs.pad_top = attrs.pad_bottom = attrs.pad_left = attrs.pad_right = pad;
  const Shape y{sx[0], sx[1], (ph - kernel) / stride + 1, (pw - kernel) / stride + 1};
  std::vector<std::pair<Shape, DType>> outs{{y, DType::F32}};
  // oneDNN keeps the argmax of every output element; 4 bytes each covers it.
  if (op == OpCode::MaxPool2D) outs.push_back({Shape{4 * NumElements(y)}, DType::U8});
  return AddOp(op, {x}, attrs, std::move(outs), name)[0];
}

TensorId Graph::MaxPool2D(TensorId x, int kernel, int stride, int pad) {
  return Pool(OpCode::MaxPool2D, x, kernel, stride, pad);
}

TensorId Graph::AvgPool2D(TensorId x, int kernel, int stride, int pad) {
  return Pool(OpCode::AvgPool2D, x, kernel, stride, pad);
}

}  // namespace sinkrt::host
