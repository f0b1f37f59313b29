// Graph builder for Dropout (MindSpore's nn.Dropout(p); docs/guide/dropout.md).
// The op holds x alone: the compiler gives it the step counter and its place
// in the global tensor (passes/dropout.h).
#include <cmath>
#include <sstream>

#include "sinkrt/host/graph.h"

namespace sinkrt::host {
namespace {

// FNV-1a over the op's name: the op's stream of the generator, the same on
// every rank and micro-batch (both compile the same names) and unchanged
// when ops are added elsewhere in the graph.
uint32_t NameHash(const std::string& name) {
  uint32_t h = 2166136261u;
  for (char c : name) {
    h ^= static_cast<uint8_t>(c);
    h *= 16777619u;
  }
  return h;
}

// Python's repr of a float as MindSpore's message prints it ("1.5", "-0.1").
std::string PyFloat(float p) {
  std::ostringstream s;
  s << static_cast<double>(p);
  std::string out = s.str();
  if (std::isfinite(p) && out.find_first_of(".e") == std::string::npos) out += ".0";
  return out;
}

}  // namespace

TensorId Graph::Dropout(TensorId x, float p, uint64_t seed) {
  if (!status_.ok()) return kInvalidTensor;
  const std::string name = UniqueName("dropout");
  if (!CheckInput(OpCode::Dropout, name, "x", x, DType::F32)) return kInvalidTensor;
  if (tensors_[x].shape.empty()) {
    FailOp(OpCode::Dropout, name, "the rank of x must be at least 1, got a scalar");
    return kInvalidTensor;
  }
  // MindSpore's Validator.check_float_range(p, 0.0, 1.0, INC_LEFT, "p", "Dropout").
  if (!(p >= 0.0f && p < 1.0f)) {
    Fail(InvalidArgument("For 'Dropout', the 'p' must be in range of [0.0, 1.0), but got " + PyFloat(p) +
                         " with type 'float'."));
    return kInvalidTensor;
  }
  if (p == 0.0f) return x;  // nn.Dropout(p=0) keeps everything, unscaled
  OpAttrs attrs;
  attrs.dropout_p = p;
  attrs.dropout_seed = seed;
  attrs.dropout_op_id = NameHash(name);
  Shape shape = tensors_[x].shape;
  return AddOp(OpCode::Dropout, {x}, std::move(attrs), {{std::move(shape), DType::F32}}, name)[0];
}

}  // namespace sinkrt::host
