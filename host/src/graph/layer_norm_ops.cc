// Graph builder for LayerNorm over the last axis (docs/reference/ops.md).
#include <cmath>

#include "sinkrt/host/graph.h"

namespace sinkrt::host {

TensorId Graph::LayerNorm(TensorId x, TensorId gamma, TensorId beta, float epsilon) {
  if (!status_.ok()) return kInvalidTensor;
  constexpr auto op = OpCode::LayerNorm;
  const std::string name = UniqueName("layernorm");
  if (!CheckInput(op, name, "x", x, DType::F32) || !CheckInput(op, name, "gamma", gamma, DType::F32) ||
      !CheckInput(op, name, "beta", beta, DType::F32))
    return kInvalidTensor;
  const Shape sx = tensors_[x].shape;
  if (sx.empty()) {
    FailOp(op, name, "x must be [..., D] (rank >= 1), got a scalar []");
    return kInvalidTensor;
  }
  const int64_t d = sx.back();
  const Shape want{d};
  for (auto [role, t] : {std::pair<const char*, TensorId>{"gamma", gamma}, {"beta", beta}}) {
    if (tensors_[t].shape != want) {
      FailOp(op, name,
             std::string(role) + " must be [D] = [" + std::to_string(d) + "] for x " + ShapeToString(sx) +
                 " (normalised over its last axis), got " + ShapeToString(tensors_[t].shape));
      return kInvalidTensor;
    }
  }
  if (!(epsilon > 0.0f) || !std::isfinite(epsilon)) {
    FailOp(op, name, "epsilon must be a positive finite number, got " + std::to_string(epsilon));
    return kInvalidTensor;
  }
  const int64_t rows = d == 0 ? 0 : NumElements(sx) / d;
  OpAttrs attrs;
  attrs.layer_norm_epsilon = epsilon;
  return AddOp(op, {x, gamma, beta}, attrs, {{sx, DType::F32}, {{rows}, DType::F32}, {{rows}, DType::F32}}, name)[0];
}

}  // namespace sinkrt::host
