// Two checkpoints hold the same state: every f32 tensor by name, each
// element within `tolerance` of the reference (relative to its size when
// above 1, absolute below). A tolerance of 0 asks for equal bits' values.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "sinkrt/fb/checkpoint_generated.h"
#include "support/run_binary.h"

namespace sinkrt::testing {

// name -> f32 values of a checkpoint's tensors (empty, with a failure
// recorded, when the file does not verify).
inline std::map<std::string, std::vector<float>> ReadCheckpointF32(const std::filesystem::path& path) {
  std::map<std::string, std::vector<float>> out;
  const std::string bytes = Slurp(path);
  flatbuffers::Verifier verifier(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  if (bytes.empty() || !fb::VerifyCheckpointBuffer(verifier)) {
    ADD_FAILURE() << path << " is not a checkpoint";
    return out;
  }
  for (const fb::CheckpointTensor* t : *fb::GetCheckpoint(bytes.data())->tensors()) {
    if (t->dtype() != fb::DType::F32) continue;
    std::vector<float>& v = out[t->name()->str()];
    v.resize(t->data()->size() / sizeof(float));
    std::memcpy(v.data(), t->data()->data(), v.size() * sizeof(float));
  }
  return out;
}

inline void ExpectCheckpointsClose(const std::filesystem::path& got, const std::filesystem::path& reference,
                                   double tolerance) {
  const auto a = ReadCheckpointF32(got), b = ReadCheckpointF32(reference);
  ASSERT_FALSE(a.empty()) << got;
  ASSERT_EQ(a.size(), b.size()) << got << " vs " << reference;
  for (const auto& [name, values] : a) {
    ASSERT_TRUE(b.count(name)) << name;
    const std::vector<float>& ref = b.at(name);
    ASSERT_EQ(values.size(), ref.size()) << name;
    double worst = 0;
    for (size_t i = 0; i < values.size(); ++i)
      worst = std::max(worst, std::abs(double(values[i]) - ref[i]) / std::max(1.0, std::abs(double(ref[i]))));
    EXPECT_LE(worst, tolerance) << name;
  }
}

}  // namespace sinkrt::testing
