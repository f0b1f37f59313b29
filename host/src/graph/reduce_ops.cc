// Graph builders for reductions over axes: ReduceSum, ReduceMean, ReduceMax.
#include "sinkrt/host/graph.h"

#include <algorithm>
#include <utility>

#include "host/src/graph/builder_helpers.h"

namespace sinkrt::host {

using internal::AxisRange;
using internal::LowerName;
using internal::NormalizeAxis;

TensorId Graph::Reduce(OpCode op, TensorId x, std::vector<int> axes, bool keep_dims) {
  if (!status_.ok()) return kInvalidTensor;
  const std::string name = UniqueName(LowerName(op));
  if (!CheckInput(op, name, "x", x, DType::F32)) return kInvalidTensor;
  const Shape sx = tensors_[x].shape;
  for (int& a : axes) {
    const int n = NormalizeAxis(a, sx.size());
    if (n < 0) {
      FailOp(op, name,
             "axis " + std::to_string(a) + " is out of range for x " + ShapeToString(sx) +
                 " (valid: " + AxisRange(sx.size()) + ")");
      return kInvalidTensor;
    }
    a = n;
  }
  std::sort(axes.begin(), axes.end());
  axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
  Shape out;
  for (size_t i = 0; i < sx.size(); ++i) {
    const bool reduced = axes.empty() || std::binary_search(axes.begin(), axes.end(), static_cast<int>(i));
    if (!reduced) {
      out.push_back(sx[i]);
    } else if (keep_dims) {
      out.push_back(1);
    }
  }
  OpAttrs attrs;
  attrs.axes = std::move(axes);
  attrs.keep_dims = keep_dims;
  return AddOp(op, {x}, std::move(attrs), {{std::move(out), DType::F32}}, name)[0];
}

TensorId Graph::ReduceSum(TensorId x, std::vector<int> axes, bool keep_dims) {
  return Reduce(OpCode::ReduceSum, x, std::move(axes), keep_dims);
}

TensorId Graph::ReduceMean(TensorId x, std::vector<int> axes, bool keep_dims) {
  return Reduce(OpCode::ReduceMean, x, std::move(axes), keep_dims);
}

TensorId Graph::ReduceMax(TensorId x, std::vector<int> axes, bool keep_dims) {
  return Reduce(OpCode::ReduceMax, x, std::move(axes), keep_dims);
}

}  // namespace sinkrt::host
