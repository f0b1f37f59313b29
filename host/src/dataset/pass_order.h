// The sample order of one pass of a pipeline, computed from the nodes.
//
// Order is a pure function of (pipeline, pass index): no node keeps state
// between passes, which is what makes resuming at any batch, any worker
// count and every rank agree.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "host/src/dataset/node.h"

namespace sinkrt::host {

// The units of one pass in order. Unbatched, unit u is source sample
// samples[u]; batched (offsets non-empty, units() + 1 long), unit u is the
// batch of source samples samples[offsets[u] .. offsets[u+1]).
struct PassOrder {
  std::vector<int64_t> samples;
  std::vector<int64_t> offsets;

  bool batched() const { return !offsets.empty(); }
  int64_t units() const {
    return batched() ? static_cast<int64_t>(offsets.size()) - 1 : static_cast<int64_t>(samples.size());
  }
  std::span<const int64_t> unit(int64_t u) const {
    if (!batched()) return {samples.data() + u, 1};
    return {samples.data() + offsets[u], static_cast<size_t>(offsets[u + 1] - offsets[u])};
  }
};

// Pass `pass` of `node`; units() == node.units. The node must have an ok
// status.
PassOrder ComputePassOrder(const Dataset::Node& node, int64_t pass);

// The shuffle generator: xoshiro256** seeded through splitmix64 from
// (seed, pass), with Lemire's unbiased bounded draw. Written out here rather
// than std::uniform_int_distribution, whose results differ between standard
// libraries: the order must be the same on every platform.
class ShuffleRng {
 public:
  ShuffleRng(uint64_t seed, uint64_t pass);
  uint64_t Next();
  uint64_t Below(uint64_t n);  // uniform in [0, n), n > 0

 private:
  uint64_t s_[4];
};

}  // namespace sinkrt::host
