// InitSpec's factories: how init fills a Param, Const or OptState.
#include <cstring>
#include <utility>

#include "sinkrt/host/graph.h"

namespace sinkrt::host {

// The kind and seed; the factories below fill in their parameters.
static InitSpec Seeded(InitKind kind, uint64_t seed) {
  InitSpec s;
  s.kind = kind;
  s.seed = seed;
  return s;
}

InitSpec InitSpec::Constant(float v) {
  InitSpec s;
  s.kind = InitKind::Constant;
  s.value = v;
  return s;
}

InitSpec InitSpec::Uniform(float low, float high, uint64_t seed) {
  InitSpec s = Seeded(InitKind::Uniform, seed);
  s.low = low;
  s.high = high;
  return s;
}

InitSpec InitSpec::Normal(float mean, float stddev, uint64_t seed) {
  InitSpec s = Seeded(InitKind::Normal, seed);
  s.mean = mean;
  s.stddev = stddev;
  return s;
}

InitSpec InitSpec::XavierUniform(uint64_t seed) { return Seeded(InitKind::XavierUniform, seed); }
InitSpec InitSpec::XavierNormal(uint64_t seed) { return Seeded(InitKind::XavierNormal, seed); }
InitSpec InitSpec::HeUniform(uint64_t seed) { return Seeded(InitKind::HeUniform, seed); }
InitSpec InitSpec::HeNormal(uint64_t seed) { return Seeded(InitKind::HeNormal, seed); }

InitSpec InitSpec::Inline(std::vector<float> values) {
  InitSpec s;
  s.kind = InitKind::Inline;
  s.data.resize(values.size() * sizeof(float));
  if (!values.empty()) std::memcpy(s.data.data(), values.data(), s.data.size());
  return s;
}

}  // namespace sinkrt::host
