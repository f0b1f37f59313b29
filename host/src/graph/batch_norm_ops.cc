// Graph builders for BatchNorm (docs/guide/normalization.md): the op, and
// MindSpore's nn.BatchNorm1d / nn.BatchNorm2d layers that create its
// parameters and moving statistics.
#include <cmath>

#include "sinkrt/host/graph.h"

namespace sinkrt::host {

TensorId Graph::BatchNorm(TensorId x, TensorId gamma, TensorId beta, TensorId moving_mean, TensorId moving_variance,
                          const BatchNormConfig& config) {
  if (!status_.ok()) return kInvalidTensor;
  constexpr auto op = OpCode::BatchNorm;
  const std::string name = UniqueName("batchnorm");
  if (!CheckInput(op, name, "x", x, DType::F32) || !CheckInput(op, name, "gamma", gamma, DType::F32) ||
      !CheckInput(op, name, "beta", beta, DType::F32) ||
      !CheckInput(op, name, "moving_mean", moving_mean, DType::F32) ||
      !CheckInput(op, name, "moving_variance", moving_variance, DType::F32))
    return kInvalidTensor;
  const Shape sx = tensors_[x].shape;
  if (sx.size() < 2) {
    FailOp(op, name, "x must be [N, C, ...] (rank >= 2, channels on axis 1), got " + ShapeToString(sx));
    return kInvalidTensor;
  }
  const Shape want{sx[1]};
  for (auto [role, t] : {std::pair<const char*, TensorId>{"gamma", gamma},
                         {"beta", beta},
                         {"moving_mean", moving_mean},
                         {"moving_variance", moving_variance}}) {
    if (tensors_[t].shape != want) {
      FailOp(op, name,
             std::string(role) + " must be [C] = [" + std::to_string(sx[1]) + "] for x " + ShapeToString(sx) +
                 " (channels on axis 1), got " + ShapeToString(tensors_[t].shape));
      return kInvalidTensor;
    }
  }
  // The step writes the moving statistics in place: they must be device
  // state, which nothing else writes and no optimizer trains.
  for (auto [role, t] :
       {std::pair<const char*, TensorId>{"moving_mean", moving_mean}, {"moving_variance", moving_variance}})
    if (tensors_[t].kind != TensorKind::State) {
      FailOp(op, name, std::string(role) + " must be a State tensor (Graph::State), got '" + tensors_[t].name + "'");
      return kInvalidTensor;
    }
  if (!(config.eps > 0.0f) || !std::isfinite(config.eps)) {
    FailOp(op, name, "eps must be a positive finite number, got " + std::to_string(config.eps));
    return kInvalidTensor;
  }
  // MindSpore's check (nn.BatchNorm: Validator.check_float_range(momentum, 0, 1, INC_BOTH)).
  if (!(config.momentum >= 0.0f && config.momentum <= 1.0f)) {
    FailOp(op, name, "the 'momentum' must be in range [0, 1], but got " + std::to_string(config.momentum));
    return kInvalidTensor;
  }
  OpAttrs attrs;
  attrs.layer_norm_epsilon = config.eps;
  attrs.bn_momentum = config.momentum;
  attrs.bn_sync = config.sync;
  return AddOp(op, {x, gamma, beta, moving_mean, moving_variance}, attrs,
               {{sx, DType::F32}, {want, DType::F32}, {want, DType::F32}}, name)[0];
}

size_t Graph::SetSyncBatchNorm(bool sync) {
  size_t n = 0;
  for (OpNode& op : ops_)
    if (op.op == OpCode::BatchNorm) {
      op.attrs.bn_sync = sync;
      ++n;
    }
  return n;
}

namespace {

// nn.BatchNorm's parameters with its initialisers (gamma ones, beta zeros,
// moving mean zeros, moving variance ones), named as MindSpore's
// checkpoints name them ("bn1.gamma", "bn1.moving_mean").
TensorId BatchNormLayer(Graph& g, const std::string& name, TensorId x, size_t rank, const char* layer,
                        const BatchNormConfig& config) {
  if (!g.status().ok()) return kInvalidTensor;
  if (!g.valid(x) || g.tensor(x).shape.size() != rank) {
    g.Fail(InvalidArgument(std::string("For '") + layer + "', the input must be " +
                           (rank == 2 ? "[N, C]" : "[N, C, H, W]") + ", got " +
                           (g.valid(x) ? ShapeToString(g.tensor(x).shape) : std::string("no tensor"))));
    return kInvalidTensor;
  }
  const int64_t c = g.tensor(x).shape[1];
  const TensorId gamma = g.Param(name + ".gamma", {c}, InitSpec::Constant(1.0f));
  const TensorId beta = g.Param(name + ".beta", {c}, InitSpec::Zeros());
  const TensorId mean = g.State(name + ".moving_mean", {c}, InitSpec::Zeros());
  const TensorId var = g.State(name + ".moving_variance", {c}, InitSpec::Constant(1.0f));
  NameScope scope(g, name);
  return g.BatchNorm(x, gamma, beta, mean, var, config);
}

}  // namespace

TensorId BatchNorm1d(Graph& g, const std::string& name, TensorId x, const BatchNormConfig& config) {
  return BatchNormLayer(g, name, x, 2, "BatchNorm1d", config);
}

TensorId BatchNorm2d(Graph& g, const std::string& name, TensorId x, const BatchNormConfig& config) {
  return BatchNormLayer(g, name, x, 4, "BatchNorm2d", config);
}

}  // namespace sinkrt::host
