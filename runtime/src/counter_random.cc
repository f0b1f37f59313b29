#include "runtime/src/counter_random.h"

#include <cmath>
#include <numbers>

namespace sinkrt {

void NormalPair(uint64_t seed, uint64_t k, double* even, double* odd) {
  const double u1 = UniformAt(seed, 2 * k), u2 = UniformAt(seed, 2 * k + 1);
  const double r = std::sqrt(-2.0 * std::log(1.0 - u1));
  const double theta = 2.0 * std::numbers::pi * u2;
  *even = r * std::cos(theta);
  *odd = r * std::sin(theta);
}

float NormalAt(uint64_t seed, uint64_t i) {
  double even, odd;
  NormalPair(seed, i / 2, &even, &odd);
  return static_cast<float>((i & 1) ? odd : even);
}

}  // namespace sinkrt
