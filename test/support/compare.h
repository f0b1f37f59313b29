// Comparing a run's numbers with a reference's.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "sinkrt/host/model.h"

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

// A model's state as Model::ReadState lists it: (name, tensor) in order.
using NamedTensors = std::vector<std::pair<std::string, host::Tensor>>;

// The same names in the same order, shapes and dtypes, and the same bits;
// with `abs` >= 0, f32 tensors within `abs` of each other element by
// element instead (others unchecked beyond shape and dtype).
inline void ExpectSameTensors(const NamedTensors& got, const NamedTensors& want, double abs = -1) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const std::string& name = want[i].first;
    ASSERT_EQ(got[i].first, name);
    const host::Tensor& a = got[i].second;
    const host::Tensor& b = want[i].second;
    ASSERT_EQ(a.shape, b.shape) << name;
    ASSERT_EQ(a.dtype, b.dtype) << name;
    if (abs < 0) {
      EXPECT_TRUE(a.data == b.data) << "'" << name << "' differs";
      continue;
    }
    if (a.dtype != DType::F32) continue;
    const auto* x = reinterpret_cast<const float*>(a.data.data());
    const auto* y = reinterpret_cast<const float*>(b.data.data());
    double worst = 0;
    for (size_t k = 0; k < a.data.size() / 4; ++k) worst = std::max(worst, std::abs(double(x[k]) - double(y[k])));
    EXPECT_LE(worst, abs) << "'" << name << "'";
  }
}

// Two models hold the same state, bit for bit (and some state at all).
inline void ExpectSameState(host::Model& a, host::Model& b) {
  auto sa = a.ReadState();
  auto sb = b.ReadState();
  ASSERT_TRUE(sa.ok()) << sa.status().ToString();
  ASSERT_TRUE(sb.ok()) << sb.status().ToString();
  ASSERT_FALSE(sa->empty());
  ExpectSameTensors(*sa, *sb);
}

}  // namespace sinkrt::testing
