// Comparing a run's numbers with a reference's.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace sinkrt::testing {

// The largest |got - want| / |want| over the pairs (a loss curve, a list of
// parameters), the sizes expected equal. A zero in `want` counts against
// 1e-12, so a nonzero `got` there is a large error, never a division by 0.
inline double WorstRelative(const std::vector<double>& got, const std::vector<double>& want) {
  EXPECT_EQ(got.size(), want.size());
  double worst = 0;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i)
    worst = std::max(worst, std::abs(got[i] - want[i]) / std::max(std::abs(want[i]), 1e-12));
  return worst;
}

}  // namespace sinkrt::testing
