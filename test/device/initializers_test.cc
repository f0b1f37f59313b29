// Buffer initialisers (device/src/init): the counter-based generator, the
// moments of every random kind, seed/index determinism, constants, zeros,
// inline blobs and the errors for bad Inits.
#include <flatbuffers/flatbuffers.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "device/src/init/initializer.h"
#include "support/kernel_runner.h"

namespace sinkrt::device {
namespace {

using namespace ::sinkrt::testing;
using Tensor = KernelTensor;

//===--- Initialisers -------------------------------------------------------===//

struct InitBuilder {
  flatbuffers::FlatBufferBuilder fbb;
  const fb::Init* Build(fb::InitKind kind, std::function<void(fb::InitBuilder&)> set = {}) {
    fb::InitBuilder b(fbb);
    b.add_kind(kind);
    if (set) set(b);
    fbb.Finish(b.Finish());
    return flatbuffers::GetRoot<fb::Init>(fbb.GetBufferPointer());
  }
};

Status Init(const Tensor& t, fb::InitKind kind, std::function<void(fb::InitBuilder&)> set = {},
            std::span<const uint8_t> blobs = {}) {
  InitBuilder ib;
  return FillInitializer(*ib.Build(kind, std::move(set)), t.ref(), blobs);
}

void ExpectMoments(const Tensor& t, double mean, double stddev, const std::string& what) {
  double s = 0, s2 = 0;
  for (int64_t i = 0; i < t.numel(); ++i) s += t[i];
  const double m = s / t.numel();
  for (int64_t i = 0; i < t.numel(); ++i) s2 += (t[i] - m) * (t[i] - m);
  const double sd = std::sqrt(s2 / t.numel());
  // 4 standard errors of the mean; 2 % on the standard deviation.
  EXPECT_NEAR(m, mean, 4 * stddev / std::sqrt(double(t.numel())) + 1e-12) << what;
  EXPECT_NEAR(sd, stddev, 0.02 * stddev) << what;
}

TEST(Initializers, GeneratorFollowsSplitMix64) {
  // The first output of the reference SplitMix64 generator seeded with 0.
  EXPECT_EQ(SplitMix64(0), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(UniformAt(0, 0), static_cast<float>(0xE220A8397B1DCDAFull >> 40) / 16777216.0f);
  for (uint64_t i = 0; i < 1000; ++i) {
    const float u = UniformAt(42, i);
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
  }
}

TEST(Initializers, RandomKindsHaveTheirMoments) {
  Tensor t({256, 512});
  ASSERT_TRUE(Init(t, fb::InitKind::Uniform, [](auto& b) {
                b.add_low(-2.0f);
                b.add_high(4.0f);
                b.add_seed(1);
              }).ok());
  ExpectMoments(t, 1.0, 6.0 / std::sqrt(12.0), "Uniform");
  for (int64_t i = 0; i < t.numel(); ++i) ASSERT_TRUE(t[i] >= -2.0f && t[i] < 4.0f);
  ASSERT_TRUE(Init(t, fb::InitKind::Normal, [](auto& b) {
                b.add_mean(0.5f);
                b.add_stddev(2.0f);
                b.add_seed(2);
              }).ok());
  ExpectMoments(t, 0.5, 2.0, "Normal");
  const double fi = 784, fo = 512;
  auto fans = [&](auto& b) {
    b.add_fan_in(784);
    b.add_fan_out(512);
    b.add_seed(3);
  };
  ASSERT_TRUE(Init(t, fb::InitKind::XavierUniform, fans).ok());
  ExpectMoments(t, 0, std::sqrt(6 / (fi + fo)) / std::sqrt(3.0), "XavierUniform");
  ASSERT_TRUE(Init(t, fb::InitKind::XavierNormal, fans).ok());
  ExpectMoments(t, 0, std::sqrt(2 / (fi + fo)), "XavierNormal");
  ASSERT_TRUE(Init(t, fb::InitKind::HeUniform, fans).ok());
  ExpectMoments(t, 0, std::sqrt(6 / fi) / std::sqrt(3.0), "HeUniform");
  for (int64_t i = 0; i < t.numel(); ++i) ASSERT_LE(std::abs(t[i]), std::sqrt(6 / fi));
  ASSERT_TRUE(Init(t, fb::InitKind::HeNormal, fans).ok());
  ExpectMoments(t, 0, std::sqrt(2 / fi), "HeNormal");
}

TEST(Initializers, ValuesDependOnlyOnSeedAndIndex) {
  Tensor a({1001}), b({1001}), prefix({10}), other({1001});
  auto seed = [](uint64_t s) {
    return [s](fb::InitBuilder& b) {
      b.add_seed(s);
      b.add_stddev(1.0f);
      b.add_high(1.0f);
    };
  };
  for (fb::InitKind kind : {fb::InitKind::Uniform, fb::InitKind::Normal}) {
    ASSERT_TRUE(Init(a, kind, seed(7)).ok());
    ASSERT_TRUE(Init(b, kind, seed(7)).ok());
    ASSERT_TRUE(Init(prefix, kind, seed(7)).ok());
    ASSERT_TRUE(Init(other, kind, seed(8)).ok());
    ExpectBitwise(b, a.values(), "same seed");
    EXPECT_EQ(std::memcmp(prefix.f32(), a.f32(), 10 * sizeof(float)), 0) << "prefix";
    EXPECT_NE(std::memcmp(other.f32(), a.f32(), 1001 * sizeof(float)), 0) << "other seed";
  }
  ASSERT_TRUE(Init(a, fb::InitKind::Uniform, seed(7)).ok());
  for (uint64_t i : {0ull, 1ull, 500ull, 1000ull}) EXPECT_EQ(a[i], UniformAt(7, i));
  ASSERT_TRUE(Init(a, fb::InitKind::Normal, seed(7)).ok());
  for (uint64_t i : {0ull, 1ull, 500ull, 1000ull}) EXPECT_EQ(a[i], NormalAt(7, i));
  // Box–Muller pairs: elements 2k and 2k+1 share a radius.
  const double r = std::sqrt(-2.0 * std::log(1.0 - double(UniformAt(7, 500))));
  EXPECT_NEAR(double(a[500]) * a[500] + double(a[501]) * a[501], r * r, 1e-4 * r * r);
}

TEST(Initializers, ConstantsZerosAndInline) {
  Tensor f({5}), i({4}, DType::I32), u({3}, DType::U8);
  ASSERT_TRUE(Init(f, fb::InitKind::Constant, [](auto& b) { b.add_value(0.25f); }).ok());
  for (int k = 0; k < 5; ++k) EXPECT_EQ(f[k], 0.25f);
  ASSERT_TRUE(Init(i, fb::InitKind::Constant, [](auto& b) { b.add_value(-3.0f); }).ok());
  for (int k = 0; k < 4; ++k) EXPECT_EQ(i.i32()[k], -3);
  ASSERT_TRUE(Init(f, fb::InitKind::Zeros).ok());
  for (int k = 0; k < 5; ++k) EXPECT_EQ(f[k], 0.0f);
  ASSERT_TRUE(Init(i, fb::InitKind::Zeros).ok());
  for (int k = 0; k < 4; ++k) EXPECT_EQ(i.i32()[k], 0);
  f[0] = 9.0f;
  ASSERT_TRUE(Init(f, fb::InitKind::None).ok());
  EXPECT_EQ(f[0], 9.0f);

  std::vector<uint8_t> blobs(64 + 20);
  const float vals[5] = {1, 2, 3, 4, 5};
  std::memcpy(blobs.data() + 64, vals, sizeof(vals));
  ASSERT_TRUE(Init(
                  f, fb::InitKind::Inline,
                  [](auto& b) {
                    b.add_data_offset(64);
                    b.add_data_bytes(20);
                  },
                  blobs)
                  .ok());
  ExpectBitwise(f, {1, 2, 3, 4, 5}, "Inline");

  auto expect_error = [](Status st, const std::string& part) {
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find(part), std::string::npos) << st.message();
  };
  expect_error(Init(
                   f, fb::InitKind::Inline,
                   [](auto& b) {
                     b.add_data_offset(68);
                     b.add_data_bytes(20);
                   },
                   blobs),
               "initializer Inline: bytes [68, +20) lie outside the 84-byte blob section");
  expect_error(Init(
                   f, fb::InitKind::Inline,
                   [](auto& b) {
                     b.add_data_offset(UINT64_MAX - 4);
                     b.add_data_bytes(20);
                   },
                   blobs),
               "lie outside");
  expect_error(Init(
                   f, fb::InitKind::Inline,
                   [](auto& b) {
                     b.add_data_offset(64);
                     b.add_data_bytes(16);
                   },
                   blobs),
               "16 bytes for a buffer of 20 ([5] f32)");
  expect_error(Init(i, fb::InitKind::Uniform, [](auto& b) { b.add_high(1.0f); }), "random kinds fill f32 only");
  expect_error(Init(f, fb::InitKind::HeNormal, [](auto& b) { b.add_fan_out(3); }),
               "fan_in 0 and fan_out 3: fan_in must be > 0");
  expect_error(Init(f, fb::InitKind::XavierUniform, [](auto& b) { b.add_fan_in(3); }), "must both be > 0");
  expect_error(Init(f, fb::InitKind::Normal, [](auto& b) { b.add_stddev(-1.0f); }), "stddev");
  expect_error(Init(f, fb::InitKind::Uniform, [](auto& b) { b.add_low(1.0f); }), "high 0.000000 is below low 1.000000");
  expect_error(Init(i, fb::InitKind::Constant, [](auto& b) { b.add_value(0.5f); }), "value 0.500000 is not an i32");
  expect_error(Init(u, fb::InitKind::Constant, [](auto& b) { b.add_value(1.0f); }), "expected f32 or i32");
}

}  // namespace
}  // namespace sinkrt::device
